// Relay6: the DHCPv6 relay engine of the `dhcp = "relay"` access ports
// (RFC 8415 section 19, RFC 4649), the counterpart of Relay4. It owns no
// socket and no thread: the caller hands it each client message of a relay
// port (on_client) and each datagram received on the relay socket
// (on_server); the sends are functions.
//
// Per client message: a Relay-Forward with link-address = the port's
// global gateway, peer-address = the client's source (its link-local),
// Interface-ID from the circuit_id template and Remote-ID from the
// remote_id template after the enterprise number `enterprise`, sent to
// every configured server. The exchange is remembered per subscriber key
// (its transaction id, the client's MAC and address) for a bounded time.
//
// Per server Relay-Reply: it must come from a configured server's port 547,
// parse, carry an Interface-ID that decodes to a relay port and a
// subscriber with an exchange of that transaction id. A REPLY's IA_NA
// addresses and IA_PD prefixes with a non-zero valid lifetime go to
// Sessions6::bound first (a refusal: the REPLY is not forwarded); a REPLY
// whose addresses and prefixes all have lifetime 0 ends the lease, as a
// client's RELEASE or DECLINE does. The inner message then goes to the
// client.
//
// Multicast: when servers_v6 is one of the two DHCP groups (All_DHCP_Servers
// ff05::1:3, the default of RFC 8415 19.1.1, or the link-scoped
// All_DHCP_Relay_Agents_and_Servers ff02::1:2), each Relay-Forward is sent
// once, to the group out of the uplink, and a Relay-Reply is accepted from
// any address's port 547 that arrives on the uplink (`uplink_ifindex`):
// the servers are learned from their answers (a reply matching an
// exchange), at most kMaxServers6, each with its own liveness below.
//
// Server liveness, as Relay4 does it: a client message every server may
// answer (SOLICIT, REBIND, CONFIRM, an INFORMATION-REQUEST without a
// Server Identifier) expects an answer from each server that is up; one
// missing after `answer_timeout_ms` is a miss (relay6_server_misses), and
// `misses_down` in a row mark the server down (relay6_server_down, a
// warning). Messages naming a server by its Server Identifier (REQUEST,
// RENEW, RELEASE, DECLINE) expect nothing: only that server answers. A
// retransmission (same transaction id) keeps the first send's time, so a
// client retrying every second still judges the server, and a client that
// moves on to its next transaction leaves the previous one waiting for its
// answers until the timeout (a late ADVERTISE counts as an answer, though
// it is not forwarded). Every message
// still goes to every server; a down server's next answer marks it up.
//
// Every counter is also counted as an agent reason (relay6_*, GetStats and
// Prometheus). In xbngd (Agent::start_relay6): the punt path of the relay
// ports hands it the DHCPv6 frames, Socket6 on UDP 547 its datagrams, and
// RelaySessions is its Sessions6 (docs/relay.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/net.h"
#include "common/sub_key.h"
#include "relay/agent_info.h"
#include "relay/dhcpv6_relay.h"

namespace xbng::agent::relay {

// IANA enterprise number 32473 is the one RFC 5612 reserves for
// documentation: a deployment sets its own.
inline constexpr uint32_t kDefaultRemoteIdEnterprise = 32473;

// RFC 8415 section 7.1.
inline constexpr Ipv6 kAllDhcpServers{0xff, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3};
inline constexpr Ipv6 kAllDhcpRelayAgentsAndServers{0xff, 0x02, 0, 0, 0, 0, 0, 0,
                                                    0,    0,    0, 0, 0, 1, 0, 2};
inline bool is_dhcp_group(const Ipv6& a) {
  return a == kAllDhcpServers || a == kAllDhcpRelayAgentsAndServers;
}

struct Relay6Options {
  // Unicast, at most kMaxServers6; or one DHCP group (multicast).
  std::vector<Ipv6> servers;
  // Multicast: the interface Relay-Replies must arrive on (0: any).
  uint32_t uplink_ifindex = 0;
  // Multicast: the uplink's name (relay.multicast_uplink); "" = the first
  // uplink. The agent resolves it to uplink_ifindex.
  std::string uplink;
  std::string circuit_id = kDefaultCircuitId;
  std::string remote_id = kDefaultRemoteId;
  uint32_t enterprise = kDefaultRemoteIdEnterprise;
  uint32_t answer_timeout_ms = 2000;  // an expected answer later than this is a miss
  uint32_t misses_down = 3;           // misses in a row that mark a server down
  uint32_t exchange_ttl_s = 60;
  size_t max_exchanges = 65536;
};
inline constexpr size_t kMaxServers6 = 32;

struct RelayPort6 {
  uint32_t ifindex = 0;
  std::string name;
  Ipv6 gateway{};  // the port's global IPv6 gateway: the link-address
};

// The sessions born from DHCPv6 leases.
class Sessions6 {
 public:
  virtual ~Sessions6() = default;
  // A REPLY's addresses and prefixes (valid lifetime > 0) from `server`.
  // An error: refused, nothing installed, the REPLY is not forwarded.
  virtual absl::Status bound6(const SubKey& k, const Mac& mac, const Reply6Leases& l,
                              const Ipv6& server) = 0;
  // RELEASE, DECLINE, or lifetimes of 0: the IPv6 lease of k ends.
  virtual void ended6(const SubKey& k, const char* why) = 0;
};

// The inner message to the client: on k's tags, to `client` (its address).
using ToClient6 = std::function<bool(const RelayPort6& port, const SubKey& k, const Mac& mac,
                                     const Ipv6& client, std::span<const uint8_t> message)>;
// A Relay-Forward to a server's port 547.
using ToServer6 = std::function<bool(const Ipv6& server, std::span<const uint8_t> payload)>;

struct Relay6Counters {
  std::atomic<uint64_t> forwarded{0}, replies{0}, bound{0}, ended{0};
  std::atomic<uint64_t> client_malformed{0}, client_hop_limit{0}, client_not_relay_port{0};
  std::atomic<uint64_t> reply_unknown_server{0}, reply_malformed{0}, reply_bad_interface_id{0};
  std::atomic<uint64_t> reply_unknown_client{0}, reply_refused{0}, send_failed{0};
  std::atomic<uint64_t> server_misses{0}, server_down{0};
};

struct ServerState6 {
  Ipv6 address{};
  bool up = true;
  uint64_t sent = 0, answered = 0, misses_total = 0, downs = 0;
  uint32_t misses = 0;  // in a row
};

class Relay6 {
 public:
  using Clock = std::function<uint64_t()>;  // CLOCK_MONOTONIC ns
  Relay6(Relay6Options opts, std::vector<RelayPort6> ports, Sessions6* sessions,
         ToClient6 to_client, ToServer6 to_server, Clock clock = nullptr);

  // A DHCPv6 client message of a relay port, from `src` (the client's
  // link-local address) with source MAC `mac`.
  void on_client(const SubKey& k, const Mac& mac, const Ipv6& src,
                 std::span<const uint8_t> payload);
  // A datagram received on the relay socket, by interface `ifindex` (0:
  // unknown).
  void on_server(const Ipv6& src, uint16_t sport, std::span<const uint8_t> payload,
                 uint32_t ifindex = 0);
  // Forgets expired exchanges; call about once a second.
  void tick();

  size_t exchanges() const;
  // The servers and their liveness (multicast: those that answered).
  std::vector<ServerState6> servers() const;
  bool multicast() const { return multicast_; }
  const Relay6Counters& counters() const { return counters_; }

 private:
  // The answers one client transaction waits for.
  struct Wait {
    uint32_t xid = 0;
    uint64_t sent_ns = 0;   // its first send
    uint32_t expect = 0;    // bit per server index: answers that count as misses when absent
    uint32_t answered = 0;  // bit per server index
    bool judged = true;     // misses counted (or nothing to count)
  };
  struct Exchange {
    uint8_t type = 0;
    Mac mac{};
    Ipv6 client{};
    Wait cur;
    // The transaction before, while its answers are due: a client moving
    // on after the first ADVERTISE does not make the slower servers miss.
    Wait prev;
  };
  const RelayPort6* port(uint32_t ifindex) const;
  int server_index_locked(const Ipv6& a) const;
  // Multicast: the index of an answering server, learned when new (-1:
  // the table is full).
  int learn_locked(const Ipv6& a);
  uint32_t expected_locked(std::span<const uint8_t> payload) const;
  void record_locked(const SubKey& k, const Mac& mac, const Ipv6& src,
                     std::span<const uint8_t> payload, uint64_t now, std::vector<Ipv6>* went_down);
  void judge_locked(Wait& w, std::vector<Ipv6>* went_down);
  void answered_locked(int si, Wait& w);
  bool match_locked(const SubKey& k, const Ipv6& src, const RelayReply6& r, Exchange* out);
  // Judges the transactions whose answers came due by `now` and forgets
  // the exchanges past their time, at most `budget` queue entries each;
  // returns whether entries are left.
  bool judge_due_locked(uint64_t now, size_t budget, std::vector<Ipv6>* went_down);
  bool expire_locked(uint64_t now, size_t budget);

  Relay6Options opts_;
  bool multicast_ = false;
  std::map<uint32_t, RelayPort6> ports_;
  std::map<std::string, uint32_t> port_by_name_;
  Sessions6* sessions_;
  ToClient6 to_client_;
  ToServer6 to_server_;
  Clock clock_;
  Relay6Counters counters_;

  mutable std::mutex mu_;
  std::vector<ServerState6> servers_;       // multicast: learned from their answers
  std::map<uint64_t, Exchange> exchanges_;  // by key_rank
  // Every transaction's first send, (its time, key_rank), in the order
  // sent: the tick visits only what came due since the last one (as
  // Relay4). An entry whose exchange moved on is stale and skipped.
  std::deque<std::pair<uint64_t, uint64_t>> to_judge_, to_expire_;
};

}  // namespace xbng::agent::relay
