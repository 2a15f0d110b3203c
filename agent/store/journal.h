// Journal: the subscriber store's write-ahead intent.
//
// A change to the subscriber and route maps takes several map writes (police
// slots, subscriber entries, five route maps, then the replaced routes out).
// Killed between two of them, the maps hold a mix of the old and the new
// provisioning, and the maps alone cannot tell which prefixes a subscriber
// had. So before the first write, the store records here, for every key the
// change touches, what it was before: its whole previous spec, or that the
// change creates it. The intent is written first and marked pending last
// (one small write of the header), and cleared once the maps are consistent
// again. On adoption, a pending intent is resolved before anything else:
//   - an upsert (UpsertSubscribers, a StreamSubscribers batch) is rolled
//     back: each key gets exactly its previous spec again, keys it created
//     are removed;
//   - a delete is rolled forward: each key is removed whole (its keys are
//     all it records: 8 bytes a subscriber).
// Either way each subscriber ends exactly as last acknowledged or exactly as
// requested, never a mix, and the log says which.
//
// The file lives with the agent's runtime state (/run/xbng, a tmpfs): like
// the maps it does not survive a reboot, and an agent that starts on fresh
// maps discards it. Process crashes are the failure this guards against, so
// nothing is fsync'ed: a write(2) that returned is in the page cache.
//
// The checksum covers the header and the body, and clearing zeroes the
// state and the checksum together: a cleared intent can never read back as
// pending. A damaged file (torn, foreign, a flipped bit, a length beyond the
// file) is reported naming the file and what is wrong, and resolves nothing:
// the maps stay exactly as they are. The file is written in place (speed),
// opened without following a link and refused when it is not a regular file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "store/subscriber.h"

namespace xbng::agent {

struct JournalIntent {
  enum class Op : uint8_t { kUpsert = 1, kDelete = 2 };
  Op op = Op::kUpsert;
  // Upsert: the keys it creates. Delete: the keys it removes (rolled
  // forward, so their specs are not needed).
  std::vector<SubKey> created;
  std::vector<SubscriberSpec> before;  // upsert: previous spec of every other key it touches

  size_t size() const { return created.size() + before.size(); }
};

class Journal {
 public:
  // Opens `path`, creating it (mode 0600) and its directory (0700) if
  // needed. Throws std::runtime_error (naming the path) when it cannot, or
  // when the path is a link, not a regular file, or has other hard links.
  explicit Journal(std::string path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const std::string& path() const { return path_; }

  // Records `intent` and marks it pending. 0, or -errno (then nothing is
  // pending and the change must not start).
  int begin(const JournalIntent& intent);
  // Nothing is pending any more (the change completed, or was undone).
  // 0 or -errno.
  int clear();
  // The intent a previous process left pending, if any. A damaged file
  // (bad magic, state, checksum or length) gives nullopt with *error set;
  // no length is trusted beyond the file's size.
  std::optional<JournalIntent> pending(std::string* error) const;
  // After a damaged pending(): renames the file to "<path>.damaged" (kept
  // for inspection, never replayed) and starts a new one. What it did, for
  // the log.
  std::string set_aside();

  // Encoding, exposed for tests.
  static void encode(const JournalIntent& intent, std::string* out);
  static bool decode(const uint8_t* p, size_t n, size_t created, size_t before, JournalIntent* out);

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t seq_ = 0;
  uint64_t body_bytes_ = 0;  // of the file, beyond the header
};

// Test hook: XBNG_TEST_CRASH_AT="<op>:<stage>" (op: upsert or delete) makes
// the process SIGKILL itself the first time a change reaches that stage.
// Stages, in order. upsert: journal, police, subscribers, routes-partial,
// routes, old-routes. delete: journal, routes-partial, routes, subscribers.
// Unset (always, outside the crash tests): a load and a compare per stage.
void crash_point(const char* op, const char* stage);

}  // namespace xbng::agent
