// Relay4: xbngd as the DHCPv4 relay agent of its `dhcp = "relay"` access
// ports (docs/relay.md). Below it the punt path hands it every DHCPv4
// client message of those ports, provisioned key or not (on_client), and the
// relay socket every datagram that reaches the relay address on port 67
// (on_server). It owns no socket and no thread: the sends are functions, and
// the sessions born from leases are a Sessions implementation (the store
// and the lease table, in api/relay_store.cpp).
//
// Per client message: the option 82 policy, xbngd's option 82 (circuit-id,
// remote-id, link-selection = the port's gateway, server-id-override = the
// gateway), giaddr = the relay address; sent to every configured server, but
// a renewal (or a RELEASE/DECLINE) goes to the server holding the lease
// while it answers. The exchange is remembered by (xid, chaddr) for a
// bounded time: a reply must match one, come from a server it was sent to
// and, when it echoes option 82, decode back to the same subscriber.
//
// Per server reply: the server identifier becomes the port's gateway (the
// client's renewals come to xbngd; the real one is restored when the client
// selects that server's offer), option 82 is removed, and the frame goes to
// the client on its own tags. A DHCPACK first creates or extends the
// subscriber (Sessions::bound): a refusal means the ACK is not forwarded.
//
// A server that leaves messages it should answer unanswered `misses_down`
// times in a row is marked down (counted, logged): directed messages then go
// to every server. Its next answer marks it up.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "bringup/punt/frame.h"
#include "bringup/punt/io.h"
#include "common/sub_key.h"
#include "relay/dhcpv4_relay.h"

namespace xbng::agent::relay {

inline constexpr size_t kMaxServers = 32;

struct Relay4Options {
  std::vector<uint32_t> servers;  // network order, at most kMaxServers
  uint32_t relay_address = 0;     // network order: giaddr
  std::string circuit_id = kDefaultCircuitId;
  std::string remote_id = kDefaultRemoteId;
  Policy policy = Policy::kReplace;
  uint8_t max_hops = kDefaultMaxHops;
  uint32_t answer_timeout_ms = 2000;  // an expected answer later than this is a miss
  uint32_t misses_down = 3;           // misses in a row that mark a server down
  uint32_t exchange_ttl_s = 60;       // how long a relayed exchange is remembered
  size_t max_exchanges = 65536;       // remembered at once
};

// One relay access port.
struct RelayPort {
  uint32_t ifindex = 0;
  std::string name;
  Mac mac{};
  uint16_t outer_tpid = 0x88a8;
  uint32_t gateway = 0;  // network order
};

// The sessions born from leases.
class Sessions {
 public:
  virtual ~Sessions() = default;
  // A DHCPACK of `addr` for `lifetime_s` from `server`: creates the
  // subscriber (origin relay) or gives it this address, and binds the
  // lease. An error: refused (nothing installed, the ACK is not forwarded).
  virtual absl::Status bound(const SubKey& k, const Mac& mac, uint32_t addr, uint32_t lifetime_s,
                             uint32_t server) = 0;
  // NAK, RELEASE or DECLINE: the IPv4 lease ends, and with it the address
  // of a relay-created subscriber (the subscriber when nothing is left).
  virtual void ended(const SubKey& k, const char* why) = 0;
  // The server that holds k's IPv4 lease (network order), if bound.
  virtual std::optional<uint32_t> lease_server(const SubKey& k) = 0;
};

// Sends a payload to a server's port 67 from the relay address.
using ToServer = std::function<bool(uint32_t server, std::span<const uint8_t> payload)>;

struct ServerState {
  uint32_t address = 0;
  bool up = true;
  uint64_t sent = 0, answered = 0, downs = 0;
  uint32_t misses = 0;  // in a row
};

class Relay4 {
 public:
  using Clock = std::function<uint64_t()>;  // CLOCK_MONOTONIC ns
  Relay4(Relay4Options opts, std::vector<RelayPort> ports, Sessions* sessions,
         punt::Sender to_client, ToServer to_server, Clock clock = nullptr);

  // A punted DHCPv4 frame of a relay port (RX thread).
  void on_client(const SubKey& key, const punt::FrameView& v);
  // A datagram received on the relay socket (its thread).
  void on_server(uint32_t src, uint16_t sport, std::span<const uint8_t> payload);
  // Misses and expired exchanges; call about once a second.
  void tick();

  std::vector<ServerState> servers() const;
  size_t exchanges() const;
  const Relay4Options& options() const { return opts_; }

 private:
  struct Offer {
    uint32_t server = 0, yiaddr = 0, server_id = 0;
  };
  struct Exchange {
    SubKey key{};
    Mac client{};
    uint8_t type = 0;
    uint64_t sent_ns = 0;
    uint32_t sent_to = 0;  // bit per server index
    uint32_t expect = 0;   // answers that count as misses when absent
    uint32_t answered = 0;
    bool judged = false;  // misses counted
    bool done = false;    // an ACK or NAK went through
    bool theirs = false;  // the client's own option 82 was kept
    std::vector<Offer> offers;
  };
  static uint64_t exchange_id(uint32_t xid, const uint8_t* chaddr);
  int server_index(uint32_t addr) const;
  uint32_t all_mask() const;
  uint32_t up_mask_locked() const;
  const RelayPort* port(uint32_t ifindex) const;
  void deliver(const RelayPort& p, const SubKey& k, const Mac& client, const ServerReply& r,
               std::span<const uint8_t> payload);
  RequestParams request_params(const RelayPort& p, const SubKey& key,
                               const punt::FrameView& v) const;
  void restore_offer_server(const RelayPort& p, const SubKey& key, const punt::FrameView& v,
                            uint64_t id, RequestParams* rp);
  bool route_request(const SubKey& key, const punt::FrameView& v, const dhcpv4::Message& m,
                     const RequestParams& rp, uint64_t id,
                     const std::optional<uint32_t>& lease_server, uint32_t* targets_out);
  bool record_exchange_locked(const SubKey& key, const punt::FrameView& v, const dhcpv4::Message& m,
                              uint64_t id, uint32_t targets, uint32_t expect);
  // Judges (misses) the exchanges whose answers came due by `now` and
  // forgets those past their time, at most `budget` queue entries each;
  // returns whether entries are left. Under mu_.
  bool judge_due_locked(uint64_t now, size_t budget, std::vector<uint32_t>* went_down);
  bool expire_locked(uint64_t now, size_t budget);
  void send_request(uint32_t targets, const std::vector<uint8_t>& out);
  std::optional<SubKey> named_subscriber(const ServerReply& r) const;
  bool take_reply(uint32_t src, int si, const ServerReply& r, const std::optional<SubKey>& named,
                  uint64_t id, Exchange* e);
  bool update_session(const RelayPort& p, uint32_t src, const ServerReply& r, const Exchange& e);

  Relay4Options opts_;
  std::map<uint32_t, RelayPort> ports_;           // by ifindex
  std::map<std::string, uint32_t> port_by_name_;  // circuit-id -> ifindex
  Sessions* sessions_;
  punt::Sender to_client_;
  ToServer to_server_;
  Clock clock_;

  mutable std::mutex mu_;
  std::vector<ServerState> servers_;
  std::unordered_map<uint64_t, Exchange> exchanges_;
  // Every send of an exchange, (its time, exchange id), in the order sent:
  // the tick visits only what came due since the last one, not every
  // exchange remembered (tens of thousands under a storm, whose walk would
  // hold mu_, and with it the punt thread, for milliseconds). An entry
  // whose exchange was sent again since is stale and skipped.
  std::deque<std::pair<uint64_t, uint64_t>> to_judge_, to_expire_;
};

}  // namespace xbng::agent::relay
