// Journal: the subscriber store's write-ahead intent (issue 14, item 6).
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
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "xbng/agent/subscriber.h"

namespace xbng::agent {

struct JournalIntent {
  enum class Op : uint8_t { kUpsert = 1, kDelete = 2 };
  Op op = Op::kUpsert;
  // Upsert: the keys it creates. Delete: the keys it removes (rolled
  // forward, so their specs are not needed).
  std::vector<SubKey> created;
  std::vector<SubscriberSpec> before;   // upsert: previous spec of every other key it touches

  size_t size() const { return created.size() + before.size(); }
};

class Journal {
 public:
  // Opens `path`, creating it (mode 0600) and its directory (0700) if
  // needed. Throws std::runtime_error when it cannot.
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
  // (bad magic, checksum or length) gives nullopt with *error set.
  std::optional<JournalIntent> pending(std::string* error) const;

  // Encoding, exposed for tests.
  static void encode(const JournalIntent& intent, std::string* out);
  static bool decode(const uint8_t* p, size_t n, size_t created, size_t before,
                     JournalIntent* out);

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
