// The session data of RADIUS-created subscribers (Acct-Session-Id,
// User-Name, Class, start time, timers), kept in a state file beside the
// lease file so that it survives restarts of xbngd like the subscribers
// themselves (whose origin is in their map entry, XBNG_SUB_F_ORIGIN_*).
//
// A record is written (durably) before its subscriber: a crash in between
// leaves a record without a subscriber, which the next start drops
// (retain), never a RADIUS subscriber without its data. Records of
// subscribers deleted or re-provisioned by another source leave the table
// at once and the file at the next write.
//
// On disk: a snapshot (`path`, JSON, replaced atomically through
// common/statefile) and a journal beside it (`path` + ".log"), one JSON line
// per change ({"op":"put",...record} or {"op":"del",key}), appended. Writes
// are group-committed: a caller that needs its change durable (record,
// update, mark_acct_started, flush) waits until a write + fdatasync that
// contains it has finished; the first waiter performs the write for every
// change queued meanwhile, so N concurrent callers cost one fsync, not N.
// When the journal grows beyond kCompactFactor times the live size (and at
// least kCompactMinBytes) it is folded into a new snapshot. The snapshot
// names a generation and the journal's first line repeats it: a journal of
// another generation (a crash between the snapshot's rename and the
// journal's reset) is already contained in the snapshot and is ignored. At
// load: the snapshot, then the journal replayed in order; a last line
// without its newline is a write torn by a crash (never acknowledged) and is
// cut off; any other line that does not parse is refused with the file and
// its line number.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "radius/session.h"

namespace xbng::radius {

// A session's data as JSON, as the state file and HA session replication
// (ha/session_state.h) keep it: Class as hex, absent timers left out.
nlohmann::json session_data_json(const SessionData& d);
// Throws nlohmann::json's exceptions on a missing field or a wrong type;
// false on a wrong value (a Class that is not hex).
bool session_data_from_json(const nlohmann::json& j, SessionData* d);

// The JSON of a session record as the state file keeps it (to_json: the
// session data, its key's ifindex / outer_vlan / inner_vlan, and "op":"put"
// when `op_put`), appended to *out: the same bytes as nlohmann's dump() of
// that object (keys sorted, the same escapes), written straight into the
// string instead of through a json tree (the journal writes one per session
// created and per Start noted). False, *out unchanged, when a string is not
// valid UTF-8 (dump() refuses those: the caller takes that path).
bool append_record_json(std::string* out, const SubKey& k, const SessionData& d, bool op_put);

class SessionTable {
 public:
  explicit SessionTable(std::string path);  // "" = in memory only
  ~SessionTable();
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // Reads the file (absent: empty). Error text when it cannot be read or
  // parsed (the table is then empty and the file left for inspection).
  std::optional<std::string> load();
  // Keeps the records whose key `live` says is a RADIUS subscriber.
  void retain(const std::function<bool(const SubKey&)>& live);
  // Records (and writes) a session; false when the file cannot be written.
  bool record(const SubKey& k, const SessionData& d);
  // Records several sessions with one durable write (one group commit for
  // the whole batch): all or none are on disk; false for each when the
  // file cannot be written (the table is then as before).
  std::vector<bool> record_many(const std::vector<std::pair<SubKey, SessionData>>& rs);
  // The store changed subscriber k (store.h ChangeHook): its record goes
  // unless it is still a RADIUS subscriber.
  void on_subscriber_change(const SubKey& k, const SubscriberSpec* now);
  std::optional<SessionData> get(const SubKey& k) const;
  // Calls f with the record of k in place (no copy), under the table's
  // lock: f must not call back into the table. False when k has none.
  bool read(const SubKey& k, const std::function<void(const SessionData&)>& f) const;
  // Changes the record of k in place (and writes the file): false when k has
  // no record or the file cannot be written (the record is then as before).
  bool update(const SubKey& k, const std::function<void(SessionData*)>& change);
  // The sessions of an Acct-Session-Id, of a User-Name (dynamic
  // authorization): indexed, not a scan.
  std::vector<SubKey> find_by_session_id(std::string_view id) const;
  std::vector<SubKey> find_by_user_name(std::string_view name) const;
  size_t size() const;
  // Every record, in key order (the table's lock is held: `f` must not call
  // back into the table).
  void for_each(const std::function<void(const SubKey&, const SessionData&)>& f) const;
  // Notes that the accounting Start of k is being sent, durably: it returns
  // once the note is on disk (so that a restart never sends a second
  // Start). False when k has no record or the note cannot be written.
  bool mark_acct_started(const SubKey& k);
  // The same for several sessions with one durable write: per key, true
  // when its note is on disk (or was before), false when it has no record
  // or the write failed.
  std::vector<bool> mark_acct_started_many(const std::vector<SubKey>& ks);
  // Why the session of k is about to end (an Acct-Terminate-Cause value,
  // RFC 2866 5.10), noted by whoever ends it (a Disconnect-Request, a
  // timer) before it deletes the subscriber, and taken by accounting when
  // the deletion is seen. Not persisted: it lives from the note to the
  // deletion.
  void set_end_cause(const SubKey& k, uint32_t acct_terminate_cause);
  std::optional<uint32_t> take_end_cause(const SubKey& k);
  // Writes the changes not yet on disk (removals are not waited for
  // otherwise); false when they cannot be written.
  bool flush();

  // Journal figures (tests, metrics).
  struct Stats {
    uint64_t commits = 0;      // write + fsync of the journal
    uint64_t records = 0;      // journal lines written
    uint64_t compactions = 0;  // snapshots written
    uint64_t log_bytes = 0;    // the journal's current size
  };
  Stats stats() const;
  static constexpr uint64_t kCompactFactor = 4;
  static constexpr uint64_t kCompactMinBytes = 1 << 20;
  // Tests: the compaction threshold's floor.
  void set_compact_min_bytes(uint64_t b) { compact_min_bytes_ = b; }

 private:
  struct Batch {
    bool done = false;
    bool ok = false;
  };
  // Waits (mu_ held through `g`, released while writing) until the changes
  // staged so far are on disk; false when their write failed.
  bool commit_wait(std::unique_lock<std::mutex>& g);
  bool open_log_locked(std::string* error);
  void compact_locked(std::unique_lock<std::mutex>& g);
  uint64_t live_bytes_locked() const;
  std::string log_path() const { return path_ + ".log"; }
  void index_add_locked(uint64_t rank, const SessionData& d);
  void index_remove_locked(uint64_t rank, const SessionData& d);
  void reindex_locked();
  std::optional<std::string> load_snapshot_locked(const std::string& text);
  std::optional<std::string> replay_log_locked(const std::string& text);
  std::optional<std::string> replay_line_locked(const nlohmann::json& j, size_t line);
  std::string path_;
  mutable std::mutex mu_;
  std::map<uint64_t, SessionData> recs_;     // by agent::key_rank
  std::map<uint64_t, uint32_t> end_causes_;  // by agent::key_rank
  // Acct-Session-Id and User-Name -> key rank (several sessions may share
  // a User-Name, depending on the template).
  std::unordered_multimap<std::string, uint64_t> by_session_id_, by_user_name_;
  // Group commit: lines staged under mu_, written by one caller at a time
  // (writing_) with mu_ released; every caller waits for its batch.
  std::condition_variable cv_;
  std::string pending_;                                      // staged lines not yet written
  uint64_t staged_ = 0;                                      // lines in pending_
  std::shared_ptr<Batch> open_ = std::make_shared<Batch>();  // pending_'s batch
  bool writing_ = false;
  enum class LogState { kReset, kAppend, kDamaged };
  LogState log_state_ = LogState::kReset;  // what the next open does to the journal
  int log_fd_ = -1;
  uint64_t log_bytes_ = 0;  // journal bytes known good
  uint64_t generation_ = 0;
  uint64_t put_bytes_ = 0, puts_ = 0;  // the mean record size (compaction threshold)
  uint64_t compact_min_bytes_ = kCompactMinBytes;
  Stats stats_;
};

}  // namespace xbng::radius
