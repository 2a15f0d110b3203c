// DHCPv4 relay messages (RFC 2131 4.1, RFC 1542, RFC 3046): pure rewrites
// of whole BOOTP payloads, no sockets, no state.
//   client -> server: relay_request adds the relay (hops, giaddr), applies
//     the option 82 policy and appends xbngd's option 82; it may restore the
//     real server identifier the client names by its gateway alias.
//   server -> client: parse_reply reads what the relay needs; client_reply
//     removes option 82 (never echoed to the client) and rewrites the server
//     identifier to the port's gateway, so that the client's renewals come
//     to xbngd (Kea 2.2 does not send sub-option 11 back).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "bringup/dhcpv4/message.h"
#include "relay/agent_info.h"

namespace xbng::agent::relay {

inline constexpr uint8_t kDefaultMaxHops = 16;  // RFC 1542 4.1.1

// Why a client's message is not relayed. The client message parser's own
// errors (dhcpv4::ParseError) come first.
enum class RequestError {
  kNone,
  kMalformed,         // see the dhcpv4::ParseError
  kHopLimit,          // hops above the limit
  kGiaddrSet,         // another relay before us: not relayed by an access port
  kAgentInfoDropped,  // option 82 present and option82_policy = drop
  kTooLong,           // the relayed message would not fit one datagram
};
const char* request_error_name(RequestError e);

struct RequestParams {
  uint32_t giaddr = 0;  // network order: the relay address
  uint8_t max_hops = kDefaultMaxHops;
  Policy policy = Policy::kReplace;
  AgentInfo ours;  // xbngd's option 82 (not added with kKeep when the client sent one)
  // Replaces the value of option 54 (the client named the gateway alias;
  // this is the server that made the offer).
  std::optional<uint32_t> server_id;
};

// The relayed message; *msg gets the client's message as parsed. nullopt
// with *err (and *perr for kMalformed).
std::optional<std::vector<uint8_t>> relay_request(std::span<const uint8_t> client,
                                                  const RequestParams& p, dhcpv4::Message* msg,
                                                  RequestError* err, dhcpv4::ParseError* perr);

enum class ReplyError {
  kNone,
  kTruncated,
  kOversized,
  kBadCookie,
  kNotReply,     // op != BOOTREPLY
  kBadHardware,  // htype/hlen not Ethernet
  kOptionTruncated,
  kOverload,  // options in sname/file: not relayed
  kNoMessageType,
  kBadMessageType,  // not OFFER, ACK or NAK
  kBadOption,       // a fixed-size option (51, 54) of the wrong length
  kBadAgentInfo,    // option 82 that does not decode
  kNoEnd,
};
const char* reply_error_name(ReplyError e);

struct ServerReply {
  uint8_t type = 0;
  uint32_t xid = 0;  // host order
  uint16_t flags = 0;
  std::array<uint8_t, 16> chaddr{};
  uint32_t ciaddr = 0, yiaddr = 0, giaddr = 0;  // network order
  std::optional<uint32_t> server_id;            // network order
  std::optional<uint32_t> lease_time;           // seconds
  std::optional<AgentInfo> agent_info;
  bool broadcast() const { return flags & 0x8000; }
};
std::optional<ServerReply> parse_reply(std::span<const uint8_t> b, ReplyError* err);

// The reply as the client gets it: option 82 removed, option 54 = server_id
// (network order). `b` must have passed parse_reply.
std::vector<uint8_t> client_reply(std::span<const uint8_t> b, uint32_t server_id);

}  // namespace xbng::agent::relay
