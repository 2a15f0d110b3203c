// HA session replication: the subscribers created on the access side, which
// etcd's desired subscribers do not hold (origin radius: an Access-Accept;
// origin relay: a lease relayed from the ISP's DHCP server), replicated by
// the group's active under
//
//   /xbng/v1/ha/<group>/state/session/<port>/<outer>/<inner>
//
// (ha/replica.h writes and watches the key; docs/fleet.md, "State
// replication"). The value is JSON like the lease and MAC values:
//
//   {"v":1,"member":"a","origin":"radius",
//    "subscriber":{...xbng.v1.Subscriber in canonical proto3 JSON...},
//    "radius":{...the session data as the session table keeps it...}}
//
// The subscriber is the value codec of the fleet's keys (etcd/value_codec.h)
// and is validated as a gRPC upsert's on apply (api/convert.h); "radius"
// (origin radius only) is radius::session_data_json: Acct-Session-Id,
// User-Name, Class, start, timers, whether the Start went out, and
// acct_base, the counts the session's last Start or Interim-Update reported
// (a new active reports them plus its own counters).
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "radius/session_table.h"
#include "store/store.h"

namespace xbng::agent {

inline constexpr int kSessionValueVersion = 1;

// Origins whose subscribers are replicated as sessions.
inline bool session_origin(uint8_t origin) {
  return origin == kOriginRadius || origin == kOriginRelay;
}

struct ReplicatedSession {
  SubscriberSpec spec;                        // origin kOriginRadius or kOriginRelay
  std::optional<radius::SessionData> radius;  // origin radius: its session data
  std::string member;                         // who wrote it
};

// The value of a session key. `s.spec` must be a session's (session_origin).
std::string encode_session_value(const ReplicatedSession& s, const PortResolver& ports);
// A session value of the key port/outer/inner: its version, origin and
// fields checked, the subscriber validated as a gRPC upsert's (the key's
// port must be an access port of this member: `ports`). The error, or
// nullopt.
std::optional<std::string> decode_session_value(std::string_view value, std::string_view port,
                                                uint32_t outer, uint32_t inner,
                                                const PortResolver& ports, ReplicatedSession* out);

// The agent's side of the replication of sessions: the values the active
// writes, and what a member does with the values it reads.
class SessionReplication {
 public:
  // `sessions` may be null (no RADIUS: no session data).
  SessionReplication(SubscriberStore* store, radius::SessionTable* sessions, std::string member);

  // The active: the value of k's session key now; nullopt when k is no
  // session (its key is deleted). Reads the store and the session table.
  std::optional<std::string> value_of(const SubKey& k);
  // Accounting reported these counts for k (Start, Interim-Update): they go
  // out with k's next write as its acct_base.
  void reported(const SubKey& k, const radius::AcctCounts& c);

  // A session key read from etcd. A standby (`active` false) creates or
  // updates the subscriber (session data first) through the store's
  // validated upsert with the value's origin, never over a subscriber of
  // another origin; the active takes only what it does not have at all (a
  // former active's late write) and skips its own writes. 1: changed, 0:
  // nothing to do, -1: refused (*why says why).
  int apply(const SubKey& k, std::string_view port, std::string_view value, bool active,
            std::string* why);
  // A session key deleted: k's subscriber goes when it is a session. True
  // when it went.
  bool remove(const SubKey& k);
  // A standby's full read: the sessions whose key etcd does not have
  // (`present` false) go. Returns how many went.
  size_t prune(const std::function<bool(const SubKey&)>& present);

 private:
  SubscriberStore* store_;
  radius::SessionTable* sessions_;
  std::string member_;
  std::mutex mu_;
  absl::flat_hash_map<uint64_t, radius::AcctCounts> reported_;  // by key rank
};

}  // namespace xbng::agent
