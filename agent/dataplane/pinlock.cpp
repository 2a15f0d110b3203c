#include "dataplane/pinlock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "dataplane/dataplane.h"

namespace xbng::agent {

std::optional<pid_t> pin_lock_holder(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return std::nullopt;
  // "1: FLOCK  ADVISORY  WRITE 1234 00:19:5678 0 EOF"; waiters carry "->".
  const std::string id =
      fmt::format("{:02x}:{:02x}:{}", major(st.st_dev), minor(st.st_dev), st.st_ino);
  std::ifstream f("/proc/locks");
  std::string line;
  while (std::getline(f, line)) {
    if (line.find("->") != std::string::npos) continue;
    std::istringstream ls(line);
    std::string n, type, mode, rw, pid, inode;
    if (!(ls >> n >> type >> mode >> rw >> pid >> inode)) continue;
    if (type == "FLOCK" && inode == id) return static_cast<pid_t>(std::atoi(pid.c_str()));
  }
  return std::nullopt;
}

PinLock PinLock::acquire(const std::string& dir) {
  PinLock l;
  l.dir_ = dir;
  l.fd_ = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (l.fd_ < 0)
    throw DataplaneError(
        fmt::format("cannot open the pin directory {} to lock it: {}", dir, std::strerror(errno)));
  if (flock(l.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (e != EWOULDBLOCK)
      throw DataplaneError(
          fmt::format("cannot lock the pin directory {}: {}", dir, std::strerror(e)));
    auto pid = pin_lock_holder(dir);
    throw DataplaneError(fmt::format(
        "another xbngd{} holds the pin directory {}: refusing to start (nothing was touched: "
        "its socket, XDP links and maps are as they were). One agent per pin directory: stop "
        "it first, or give this one another bpf.bpffs (--bpffs)",
        pid ? fmt::format(" (PID {})", *pid) : std::string(), dir));
  }
  return l;
}

PinLock& PinLock::operator=(PinLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    dir_ = std::move(o.dir_);
    o.fd_ = -1;
  }
  return *this;
}

PinLock::~PinLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace xbng::agent
