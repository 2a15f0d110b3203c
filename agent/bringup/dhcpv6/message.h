// DHCPv6 (RFC 8415) client messages: wire constants, the parsed form of a
// client → server message and its parser. Pure: bytes in, struct out; no
// sockets, no allocation, no globals. The parser never reads past the
// input and rejects what a server must discard (RFC 8415 §16) with one
// specific reason per case, so that every drop is counted by cause.
//
// Input is the UDP payload (the DHCPv6 message itself). The frame layer
// (Ethernet/QinQ/IPv6/UDP, checksums, port 547) is the caller's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/net.h"

namespace xbng::agent::dhcpv6 {

inline constexpr uint16_t kServerPort = 547, kClientPort = 546;

enum class MsgType : uint8_t {
  kSolicit = 1,
  kAdvertise = 2,
  kRequest = 3,
  kConfirm = 4,
  kRenew = 5,
  kRebind = 6,
  kReply = 7,
  kRelease = 8,
  kDecline = 9,
  kReconfigure = 10,
  kInformationRequest = 11,
  kRelayForw = 12,
  kRelayRepl = 13,
};
std::string_view msg_type_name(MsgType t);  // "solicit", ...; "unknown"

// Option codes (IANA "DHCPv6 Option Codes").
enum Option : uint16_t {
  kOptClientId = 1,
  kOptServerId = 2,
  kOptIaNa = 3,
  kOptIaTa = 4,
  kOptIaAddr = 5,
  kOptOro = 6,
  kOptPreference = 7,
  kOptElapsedTime = 8,
  kOptRelayMsg = 9,
  kOptAuth = 11,
  kOptUnicast = 12,
  kOptStatusCode = 13,
  kOptRapidCommit = 14,
  kOptUserClass = 15,
  kOptVendorClass = 16,
  kOptVendorOpts = 17,
  kOptInterfaceId = 18,
  kOptReconfMsg = 19,
  kOptReconfAccept = 20,
  kOptDnsServers = 23,  // RFC 3646
  kOptDomainList = 24,  // RFC 3646
  kOptIaPd = 25,
  kOptIaPrefix = 26,
  kOptInfoRefreshTime = 32,
  kOptSolMaxRt = 82,
  kOptInfMaxRt = 83,
};

enum class Status : uint16_t {
  kSuccess = 0,
  kUnspecFail = 1,
  kNoAddrsAvail = 2,
  kNoBinding = 3,
  kNotOnLink = 4,
  kUseMulticast = 5,
  kNoPrefixAvail = 6,
};

// Bounds. A client message larger than kMaxMessage cannot come from a
// well-behaved client on an access link (IPv6 minimum MTU 1280, one
// Ethernet frame of 1500 at most); so many IAs or IA entries are not sent by
// any CPE we know (one IA_NA and one IA_PD with one hint each is usual).
inline constexpr size_t kMaxMessage = 1452;  // 1500 - IPv6 (40) - UDP (8)
inline constexpr size_t kMaxDuid = 130;      // RFC 8415 §11.1: 2-byte type + ≤128
inline constexpr size_t kMaxIas = 8;         // IA_NA + IA_TA + IA_PD together
inline constexpr size_t kMaxIaEntries = 8;   // IAADDR / IAPREFIX per IA
inline constexpr size_t kMaxOro = 32;        // option codes requested

// Parse failures, one per cause. X(enum, metric suffix, description).
#define XBNG_DHCPV6_PARSE_ERRORS(X)                                                       \
  X(kOk, "ok", "well formed")                                                             \
  X(kTooShort, "too_short", "shorter than the 4-byte header")                             \
  X(kOversized, "oversized", "longer than 1452 bytes")                                    \
  X(kServerMessage, "server_message", "a server/relay-reply type sent to the server")     \
  X(kRelayMessage, "relay_message", "RELAY-FORW: relays are not served")                  \
  X(kUnknownType, "unknown_type", "message type not defined by RFC 8415")                 \
  X(kTruncatedOption, "truncated_option", "fewer than 4 bytes left for an option header") \
  X(kOptionOverflow, "option_overflow", "an option length runs past its container")       \
  X(kBadOptionLength, "bad_option_length", "a fixed-size option has the wrong length")    \
  X(kDuplicateOption, "duplicate_option", "a singleton option appears twice")             \
  X(kBadDuid, "bad_duid", "client/server identifier shorter than 3 or longer than 130")   \
  X(kMissingClientId, "missing_client_id", "no Client Identifier where one is required")  \
  X(kMissingServerId, "missing_server_id", "no Server Identifier where one is required")  \
  X(kUnexpectedServerId, "unexpected_server_id", "Server Identifier where forbidden")     \
  X(kUnexpectedIa, "unexpected_ia", "an IA in an Information-request")                    \
  X(kTooManyIas, "too_many_ias", "more than 8 IA options")                                \
  X(kTooManyIaEntries, "too_many_ia_entries", "more than 8 addresses/prefixes in an IA")  \
  X(kBadIaEntry, "bad_ia_entry", "IAADDR/IAPREFIX malformed or in the wrong IA type")     \
  X(kDuplicateIaid, "duplicate_iaid", "two IAs of one type share an IAID")

enum class ParseError : uint8_t {
#define XBNG_DHCPV6_ENUM_(e, m, d) e,
  XBNG_DHCPV6_PARSE_ERRORS(XBNG_DHCPV6_ENUM_)
#undef XBNG_DHCPV6_ENUM_
};
inline constexpr size_t kNumParseErrors = 0
#define XBNG_DHCPV6_COUNT_(e, m, d) +1
    XBNG_DHCPV6_PARSE_ERRORS(XBNG_DHCPV6_COUNT_)
#undef XBNG_DHCPV6_COUNT_
    ;
std::string_view parse_error_name(ParseError e);         // metric suffix, "truncated_option"
std::string_view parse_error_description(ParseError e);  // for logs

// A DUID as carried in Client/Server Identifier options (opaque bytes).
struct Duid {
  uint8_t len = 0;
  std::array<uint8_t, kMaxDuid> bytes{};

  std::span<const uint8_t> view() const { return {bytes.data(), len}; }
  bool assign(std::span<const uint8_t> b);  // false when empty or > kMaxDuid
  friend bool operator==(const Duid& a, const Duid& b) {
    return a.len == b.len && std::equal(a.bytes.begin(), a.bytes.begin() + a.len, b.bytes.begin());
  }
};

// One IAADDR (in IA_NA/IA_TA) or IAPREFIX (in IA_PD) the client listed.
struct IaEntry {
  Ipv6 addr{};               // address, or prefix
  uint8_t prefix_len = 128;  // 128 for IAADDR
  uint32_t preferred = 0, valid = 0;
};

struct Ia {
  uint16_t type = kOptIaNa;  // kOptIaNa, kOptIaTa or kOptIaPd
  uint32_t iaid = 0;
  uint32_t t1 = 0, t2 = 0;  // 0 for IA_TA
  uint8_t num_entries = 0;
  std::array<IaEntry, kMaxIaEntries> entries{};
};

struct Message {
  MsgType type = MsgType::kSolicit;
  uint32_t xid = 0;  // 24-bit transaction id
  bool has_client_id = false, has_server_id = false;
  Duid client_id, server_id;
  bool rapid_commit = false;
  bool reconfigure_accept = false;
  bool has_elapsed_time = false;
  uint16_t elapsed_time = 0;  // hundredths of a second
  uint8_t num_ias = 0;
  std::array<Ia, kMaxIas> ias{};
  uint8_t num_oro = 0;
  std::array<uint16_t, kMaxOro> oro{};  // first kMaxOro codes requested

  bool requested(uint16_t option) const;
  std::span<const Ia> ia_list() const { return {ias.data(), num_ias}; }
};

// Parses a client message. On error *out is partly filled and must not be
// used. Unknown options are skipped (RFC 8415 §16); options a client must not
// send (status code, preference, ...) are ignored likewise.
ParseError parse(std::span<const uint8_t> payload, Message* out);

}  // namespace xbng::agent::dhcpv6
