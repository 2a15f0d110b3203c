// DHCPv4 messages (RFC 2131, options RFC 2132): a pure parser (bytes in,
// struct out, every malformation named) and a pure builder (struct out to
// bytes). No sockets, no clock: tests and the fuzzer drive them directly.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace xbng::agent::dhcpv4 {

enum MessageType : uint8_t {
  kDiscover = 1,
  kOffer = 2,
  kRequest = 3,
  kDecline = 4,
  kAck = 5,
  kNak = 6,
  kRelease = 7,
  kInform = 8,
};
const char* message_type_name(uint8_t t);

// Option codes we read or write.
enum Option : uint8_t {
  kOptPad = 0,
  kOptSubnetMask = 1,
  kOptRouter = 3,
  kOptDns = 6,
  kOptHostName = 12,
  kOptRequestedIp = 50,
  kOptLeaseTime = 51,
  kOptOverload = 52,
  kOptMessageType = 53,
  kOptServerId = 54,
  kOptParamList = 55,
  kOptMessage = 56,
  kOptMaxSize = 57,
  kOptRenewalT1 = 58,
  kOptRebindingT2 = 59,
  kOptClientId = 61,
  kOptRelayAgentInfo = 82,
  kOptClasslessRoutes = 121,
  kOptEnd = 255,
};

inline constexpr uint32_t kMagicCookie = 0x63825363;
inline constexpr size_t kFixedLen = 236;          // op .. file
inline constexpr size_t kMinLen = kFixedLen + 4;  // + cookie
inline constexpr size_t kMaxLen = 1500 - 28;      // one unfragmented IPv4 datagram

// Every way a client message can be refused by the parser. Names are the
// suffixes of the agent's reason counters (dhcpv4_malformed_<name>).
enum class ParseError {
  kNone,
  kTruncated,        // shorter than the fixed header + cookie
  kOversized,        // longer than kMaxLen
  kBadCookie,        // magic cookie is not 99.130.83.99
  kNotRequest,       // op != BOOTREQUEST
  kBadHardware,      // htype != Ethernet or hlen != 6
  kRelayed,          // giaddr or hops set: we are the first hop, relays are not served
  kOptionTruncated,  // an option's length runs past the end
  kBadOptionLength,  // an option of fixed size with the wrong length
  kOverload,         // option 52: options in sname/file are not accepted
  kNoMessageType,    // option 53 missing
  kBadMessageType,   // option 53 not a client message type
  kNoEnd,            // no End option before the end of the packet
};
const char* parse_error_name(ParseError e);

struct Message {
  uint8_t op = 1;
  uint8_t htype = 1, hlen = 6, hops = 0;
  uint32_t xid = 0;  // host order
  uint16_t secs = 0, flags = 0;
  uint32_t ciaddr = 0, yiaddr = 0, siaddr = 0, giaddr = 0;  // network order
  std::array<uint8_t, 16> chaddr{};
  uint8_t type = 0;                       // option 53
  std::optional<uint32_t> requested_ip;   // option 50, network order
  std::optional<uint32_t> server_id;      // option 54, network order
  std::vector<uint8_t> client_id;         // option 61 (raw)
  std::vector<uint8_t> param_list;        // option 55
  std::vector<uint8_t> relay_agent_info;  // option 82 value (raw), echoed
  bool has_relay_agent_info = false;
  std::optional<uint16_t> max_size;  // option 57
  std::string host_name;             // option 12

  bool broadcast() const { return flags & 0x8000; }
  bool requested(uint8_t opt) const;
};

std::optional<Message> parse(std::span<const uint8_t> udp_payload, ParseError* err);

// A server reply: the fixed fields come from `m`; options in this order:
// 53, 54, 51, 58, 59, 1, 3, 121, 6, 56, then 82 last (RFC 3046 2.2).
struct Reply {
  Message m;  // op, xid, flags, ciaddr, yiaddr, giaddr, chaddr; type = 53
  uint32_t server_id = 0;
  std::optional<uint32_t> lease_time, t1, t2;  // seconds
  std::optional<uint32_t> subnet_mask;         // network order
  std::optional<uint32_t> router;              // network order
  // Option 121 routes: (prefix length, destination, next hop), network order.
  struct Route {
    uint8_t len;
    uint32_t dest, via;
  };
  std::vector<Route> classless_routes;
  std::vector<uint32_t> dns;
  std::string message;  // option 56
};

// BOOTREPLY bytes, padded to the 300-byte BOOTP minimum.
std::vector<uint8_t> build(const Reply& r);

}  // namespace xbng::agent::dhcpv4
