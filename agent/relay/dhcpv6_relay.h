// DHCPv6 relay messages (RFC 8415 sections 9 and 19, RFC 4649): pure
// functions, bytes in and out. relay_forward wraps a client message in a
// Relay-Forward (link-address = the port's global gateway, peer-address =
// the client's link-local address, Interface-ID, Remote-ID);
// parse_relay_reply unwraps a server's Relay-Reply.
// parse_reply_leases reads the addresses and prefixes a REPLY hands out.
// The engine over it is Relay6 (relay/relay6.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/net.h"

namespace xbng::agent::relay {

inline constexpr uint8_t kHopCountLimit = 8;  // RFC 8415 section 7.6
inline constexpr uint16_t kOptRemoteId = 37;  // RFC 4649

struct Forward6Params {
  Ipv6 link_address{};       // the access port's global gateway
  Ipv6 peer_address{};       // the client's source address
  std::string interface_id;  // option 18 ("{port}:{svlan}:{cvlan}")
  uint32_t enterprise = 0;   // Remote-ID's enterprise number
  std::string remote_id;     // option 37 after the enterprise number; "" = none
};

enum class Relay6Error {
  kNone,
  kTruncated,       // shorter than its fixed header
  kOversized,       // the message would not fit one datagram
  kNotClient,       // relay_forward: not a client message nor a Relay-Forward
  kHopLimit,        // a Relay-Forward already at the hop count limit
  kNotRelayReply,   // parse_relay_reply: msg-type is not 13
  kOptionOverflow,  // an option runs past the end
  kNoRelayMessage,  // no Relay Message option (9), or an empty one
};
const char* relay6_error_name(Relay6Error e);

std::optional<std::vector<uint8_t>> relay_forward(std::span<const uint8_t> client,
                                                  const Forward6Params& p, Relay6Error* err);

struct RelayReply6 {
  uint8_t hop_count = 0;
  Ipv6 link_address{}, peer_address{};
  std::string interface_id;      // "" when absent
  std::vector<uint8_t> message;  // the Relay Message: what goes to the client
  uint8_t message_type = 0;      // its first byte
};
std::optional<RelayReply6> parse_relay_reply(std::span<const uint8_t> b, Relay6Error* err);

// What a server's REPLY (or ADVERTISE) gives the client, read from its
// IA_NA (option 3, IA Address 5) and IA_PD (option 25, IA Prefix 26):
// the source of the sessions born from DHCPv6 leases. An IA whose Status
// Code (13) is not Success carries nothing; an address or prefix with a
// valid lifetime of 0 is one the server takes back (RFC 8415 section 18.3.7).
inline constexpr size_t kMaxLeases6 = 16;  // addresses and prefixes kept per message
struct Lease6Address {
  Ipv6 address{};
  uint32_t preferred = 0, valid = 0;
};
struct Lease6Prefix {
  Ipv6 prefix{};
  uint8_t length = 0;
  uint32_t preferred = 0, valid = 0;
};
struct Reply6Leases {
  uint8_t message_type = 0;
  uint32_t transaction_id = 0;  // 24 bits
  uint16_t status = 0;          // the message's top-level Status Code, 0 when absent
  std::vector<Lease6Address> addresses;
  std::vector<Lease6Prefix> prefixes;
};
// nullopt: not a server message (ADVERTISE 2, REPLY 7), truncated, an
// option running past its end, an IA or address option shorter than its
// fixed fields, or a prefix length over 128.
std::optional<Reply6Leases> parse_reply_leases(std::span<const uint8_t> msg);

}  // namespace xbng::agent::relay
