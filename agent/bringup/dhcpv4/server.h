// DHCPv4 server (RFC 2131) of one subscriber: turns (binding, port settings,
// request) into an outcome, a reply and the lease change to record. Pure:
// no clock, no sockets, no store; the dispatcher does the I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "bringup/dhcpv4/message.h"
#include "common/net.h"

namespace xbng::agent::dhcpv4 {

// Per access port (global defaults in the config's [dhcp] section).
struct Settings {
  uint32_t gateway = 0;        // network order: server identifier, router, option 121 next hop
  uint32_t lease_time = 3600;  // seconds; T1 = 1/2, T2 = 7/8
  std::vector<uint32_t> dns;   // network order
  // 32: mask 255.255.255.255 and option 121 (gateway/32 on-link, default via
  // gateway). Shorter: that mask (the pool's) and option 3.
  uint8_t prefix_len = 32;
};

struct Binding {
  uint32_t ipv4 = 0;       // network order, 0 = none provisioned
  std::optional<Mac> mac;  // provisioned or learned; none = learn from this exchange
};

// What happened to a request. Names are the agent's reason counters.
enum class Outcome {
  kOffered,        // DISCOVER -> OFFER
  kAcked,          // REQUEST -> ACK (selecting, init-reboot, renewing, rebinding)
  kNaked,          // REQUEST for an address that is not the binding -> NAK
  kInformed,       // INFORM -> ACK without lease
  kReleased,       // RELEASE of the bound address
  kDeclined,       // DECLINE of the offered address
  kNoIpv4,         // subscriber has no IPv4: no answer
  kNoGateway,      // the port has no IPv4 gateway: no answer
  kChaddrRefused,  // chaddr is not the subscriber's MAC (or not the frame's source)
  kOtherServer,    // REQUEST selecting another server: ignored
  kIgnored,        // RELEASE/DECLINE/INFORM not matching the binding
};
const char* outcome_name(Outcome o);  // "dhcpv4_<name>" counters

enum class LeaseChange { kNone, kBound, kReleased };

struct Result {
  Outcome outcome = Outcome::kIgnored;
  std::optional<Reply> reply;
  // Where the reply goes (RFC 2131 4.1, giaddr is always 0 here).
  bool broadcast = false;  // dst 255.255.255.255 and ff:ff:ff:ff:ff:ff
  uint32_t dst_ip = 0;     // when not broadcast, network order
  LeaseChange lease = LeaseChange::kNone;
  uint32_t lease_time = 0;  // for kBound
  bool learn_mac = false;   // binding had no MAC: take chaddr (exchange completed)
};

// frame_src: the Ethernet source of the request.
Result serve(const Message& req, const Binding& b, const Settings& s, const Mac& frame_src);

}  // namespace xbng::agent::dhcpv4
