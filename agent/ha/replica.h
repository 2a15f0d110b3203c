// HA state replication: the dynamic state of a group's active member (DHCP
// leases served, MACs learned) written to etcd under the group's keys, and
// applied by every standby as it changes, so that a new active has it
// (docs/fleet.md, "State replication").
//
//   /xbng/v1/ha/<group>/state/lease4/<port>/<outer>/<inner>   an IPv4 lease
//   /xbng/v1/ha/<group>/state/lease6/<port>/<outer>/<inner>   an IPv6 lease
//   /xbng/v1/ha/<group>/state/mac/<port>/<outer>/<inner>      a learned MAC
//   /xbng/v1/ha/<group>/state/session/<port>/<outer>/<inner>  a subscriber of
//       origin radius or relay, with its session data (ha/session_state.h)
//
// The active queues each change (the lease table's and the store's hooks,
// under their locks: a map insert, no etcd call), coalesced per key; a
// writer thread sends what is queued every kFlushInterval, in transactions
// of at most kTxnOps operations, one at a time, sessions before leases and
// MACs (a lease applied before its subscriber exists would be lost). A
// session's value is read when the flush sends it (the queue holds only its
// key). Standbys read the keys whole at start (sessions first), then watch
// them and apply each event.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "bringup/lease/lease.h"
#include "common/net.h"
#include "store/subscriber.h"

namespace xbng::agent {

namespace fleet {
class Kv;
class KvConn;
class WatchStream;
struct KeyValue;
}  // namespace fleet

// The queue is sent this often: a change reaches etcd within about this
// (plus the transactions ahead of it).
inline constexpr std::chrono::milliseconds kHaFlushInterval{200};
// Operations per transaction: etcd's default --max-txn-ops.
inline constexpr size_t kHaTxnOps = 128;

std::string ha_state_prefix(std::string_view group);  // /xbng/v1/ha/<group>/state/

struct HaReplicaStats {
  uint64_t queued = 0;        // changes queued (before coalescing)
  uint64_t written = 0;       // operations written to etcd
  uint64_t txns = 0;          // transactions
  uint64_t bytes = 0;         // keys and values written
  uint64_t write_errors = 0;  // failed transactions (their operations stay queued)
  uint64_t applied = 0;       // changes from etcd applied to this member
  uint64_t refused = 0;       // keys or values from etcd that did not parse
  uint64_t full_reads = 0;    // whole reads of the state keys
  uint64_t pending = 0;       // queued now
};

class HaReplica {
 public:
  struct Hooks {
    std::function<bool()> active;  // this member is active now
    // The member's subscribers are in place (the fleet's first full read):
    // a lease replicated before its subscriber exists would be ended by the
    // subscriber's creation.
    std::function<bool()> ready;
    LeaseTable* leases = nullptr;  // null: no bring-up (no leases)
    // Applies a replicated MAC to the store.
    std::function<bool(const SubKey&, const Mac&)> apply_mac;
    // Sessions (null: not replicated). The value of k's session key now
    // (nullopt: k is no session, its key goes), read by the writer.
    std::function<std::optional<std::string>(const SubKey&)> session_value;
    // A session key read (SessionReplication::apply: 1 changed, 0 nothing,
    // -1 refused with *why), deleted (true: its subscriber went), and a
    // standby's full read: the sessions with no key go (present(k)).
    std::function<int(const SubKey&, std::string_view port, std::string_view value, bool active,
                      std::string* why)>
        apply_session;
    std::function<bool(const SubKey&)> remove_session;
    std::function<size_t(const std::function<bool(const SubKey&)>& present)> prune_sessions;
  };
  HaReplica(std::string group, std::string member, std::unique_ptr<fleet::Kv> kv,
            PortResolver ports, Hooks hooks);
  ~HaReplica();
  HaReplica(const HaReplica&) = delete;
  HaReplica& operator=(const HaReplica&) = delete;
  void stop();

  // Queue a change when active (the hooks' side; never blocks on etcd).
  void lease_changed(const SubKey& k, LeaseFamily f, const Lease* now);
  void mac_learned(const SubKey& k, const Mac& mac);
  // Subscriber k was deleted or re-created: its learned MAC goes (its
  // leases end through the lease table).
  void subscriber_gone(const SubKey& k);
  // Subscriber k changed (created, updated, deleted) or its session data
  // did: `session` says whether it is a session now (origin radius or
  // relay). Queues its session key when it is one, or was one written.
  void session_changed(const SubKey& k, bool session);

  HaReplicaStats stats() const;
  std::string render_metrics() const;

 private:
  enum Kind : uint8_t { kLease4 = 0, kLease6 = 1, kMac = 2, kSession = 3 };
  struct Pending {
    std::optional<std::string> value;  // nullopt: delete
    bool render = false;               // a session: its value read at the flush
  };
  void queue(Kind kind, const SubKey& k, std::optional<std::string> value);
  std::string key_of(Kind kind, const SubKey& k) const;
  void write_loop();
  void flush();
  void watch_loop();
  bool full_read(int64_t* rev);
  // Reads [key, end) at *rev (0: the current revision, then set), page by
  // page, applying each kv. False when etcd failed.
  bool read_range(const std::shared_ptr<fleet::KvConn>& c, const std::string& key,
                  const std::string& end, int64_t* rev, uint64_t* n,
                  const std::function<void(const fleet::KeyValue&)>& each);
  void watch_from(int64_t rev);
  std::optional<SubKey> apply(const fleet::KeyValue& kv, bool deleted);
  bool sleep_for(std::chrono::milliseconds d);

  std::string group_, member_, prefix_;
  std::unique_ptr<fleet::Kv> kv_;
  PortResolver ports_;
  Hooks hooks_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // (kind, key rank) -> its latest value: a key is written at most once a
  // flush, whatever the number of its changes meanwhile.
  absl::flat_hash_map<std::pair<uint8_t, uint64_t>, Pending> pending_;
  // Ranks of the keys whose session key etcd has, as far as this member
  // knows (written by it, or read): a subscriber that is no session is
  // queued only when it was one.
  absl::flat_hash_set<uint64_t> sessions_;
  HaReplicaStats st_;
  std::chrono::steady_clock::time_point last_warn_{};
  bool stop_ = false;
  fleet::WatchStream* watch_ = nullptr;  // cancelled by stop()
  std::thread writer_, watcher_;
};

}  // namespace xbng::agent
