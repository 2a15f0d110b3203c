// One agent per pin directory. The lock is an exclusive flock(2) on the pin
// directory itself (a bpf filesystem holds pins and directories, no regular
// files), taken before anything under it is read or written and held for the
// life of the process: the kernel drops it when the process dies, however it
// dies, so a crashed agent never leaves a stale lock behind. `xbngd
// --teardown` takes the same lock. The holder's PID comes from /proc/locks.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace xbng::agent {

class PinLock {
 public:
  // Locks `dir` (which must exist) without waiting. Throws DataplaneError:
  // held by another process (naming its PID), or the directory cannot be
  // opened.
  static PinLock acquire(const std::string& dir);

  PinLock() = default;
  PinLock(PinLock&& o) noexcept : fd_(o.fd_), dir_(std::move(o.dir_)) { o.fd_ = -1; }
  PinLock& operator=(PinLock&& o) noexcept;
  PinLock(const PinLock&) = delete;
  PinLock& operator=(const PinLock&) = delete;
  ~PinLock();

  bool held() const { return fd_ >= 0; }
  const std::string& dir() const { return dir_; }

 private:
  int fd_ = -1;
  std::string dir_;
};

// The PID holding the flock on `dir`, if any (from /proc/locks).
std::optional<pid_t> pin_lock_holder(const std::string& dir);

}  // namespace xbng::agent
