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
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "radius/session.h"

namespace xbng::radius {

class SessionTable {
 public:
  explicit SessionTable(std::string path);  // "" = in memory only

  // Reads the file (absent: empty). Error text when it cannot be read or
  // parsed (the table is then empty and the file left for inspection).
  std::optional<std::string> load();
  // Keeps the records whose key `live` says is a RADIUS subscriber.
  void retain(const std::function<bool(const SubKey&)>& live);
  // Records (and writes) a session; false when the file cannot be written.
  bool record(const SubKey& k, const SessionData& d);
  // The store changed subscriber k (store.h ChangeHook): its record goes
  // unless it is still a RADIUS subscriber.
  void on_subscriber_change(const SubKey& k, const SubscriberSpec* now);
  std::optional<SessionData> get(const SubKey& k) const;
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
  // Notes that the accounting Start of k was sent; written with the next
  // flush(). False when k has no record.
  bool mark_acct_started(const SubKey& k);
  // Why the session of k is about to end (an Acct-Terminate-Cause value,
  // RFC 2866 5.10), noted by whoever ends it (a Disconnect-Request, a
  // timer) before it deletes the subscriber, and taken by accounting when
  // the deletion is seen. Not persisted: it lives from the note to the
  // deletion.
  void set_end_cause(const SubKey& k, uint32_t acct_terminate_cause);
  std::optional<uint32_t> take_end_cause(const SubKey& k);
  // Writes the table if records left it since the last write.
  void flush();

 private:
  bool write_locked();
  void index_add_locked(uint64_t rank, const SessionData& d);
  void index_remove_locked(uint64_t rank, const SessionData& d);
  void reindex_locked();
  std::string path_;
  mutable std::mutex mu_;
  std::map<uint64_t, SessionData> recs_;     // by agent::key_rank
  std::map<uint64_t, uint32_t> end_causes_;  // by agent::key_rank
  // Acct-Session-Id and User-Name -> key rank (several sessions may share
  // a User-Name, depending on the template).
  std::unordered_multimap<std::string, uint64_t> by_session_id_, by_user_name_;
  bool dirty_ = false;
};

}  // namespace xbng::radius
