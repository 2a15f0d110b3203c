// RADIUS wire codec: pure functions, bytes in -> struct out and back. No
// sockets, no clock, no state; the client, the CoA listener, the tests and
// the fuzzer all share them.
//
// Covered: the packet header and attribute layout (RFC 2865 section 3, 5),
// the dictionary of the attributes xbng sends and reads (standard ones,
// RFC 2866 accounting, RFC 3162/4818/6911 IPv6, RFC 5176 Error-Cause,
// Vendor-Specific with WISPr 14122 and ADSL-Forum 3561 sub-attributes),
// User-Password hiding (RFC 2865 5.2), the Request/Response Authenticators
// (RFC 2865, RFC 2866, RFC 5176) and Message-Authenticator (RFC 3579,
// HMAC-MD5).
//
// Every malformation is an absl::Status whose payload names a Fault (see
// fault_of), so callers count drops per reason; nothing here aborts on input.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "radius/client.h"

namespace xbng::radius {

using Bytes = std::vector<uint8_t>;
using Authenticator = std::array<uint8_t, 16>;

inline constexpr size_t kHeaderLen = 20;
inline constexpr size_t kMaxPacketLen = 4096;  // RFC 2865 section 3
inline constexpr size_t kMaxAttrValueLen = 253;

enum Code : uint8_t {
  kAccessRequest = 1,
  kAccessAccept = 2,
  kAccessReject = 3,
  kAccountingRequest = 4,
  kAccountingResponse = 5,
  kAccessChallenge = 11,
  kDisconnectRequest = 40,
  kDisconnectAck = 41,
  kDisconnectNak = 42,
  kCoaRequest = 43,
  kCoaAck = 44,
  kCoaNak = 45,
};
const char* code_name(uint8_t code);  // "Access-Accept", "code-99" for unknown codes

// Attribute types (the dictionary, codec.cpp, gives their data types).
namespace attr {
inline constexpr uint8_t kUserName = 1;
inline constexpr uint8_t kUserPassword = 2;
inline constexpr uint8_t kChapPassword = 3;
inline constexpr uint8_t kNasIpAddress = 4;
inline constexpr uint8_t kNasPort = 5;
inline constexpr uint8_t kServiceType = 6;
inline constexpr uint8_t kFramedProtocol = 7;
inline constexpr uint8_t kFramedIpAddress = 8;
inline constexpr uint8_t kFramedIpNetmask = 9;
inline constexpr uint8_t kFilterId = 11;
inline constexpr uint8_t kFramedMtu = 12;
inline constexpr uint8_t kReplyMessage = 18;
inline constexpr uint8_t kFramedRoute = 22;
inline constexpr uint8_t kState = 24;
inline constexpr uint8_t kClass = 25;
inline constexpr uint8_t kVendorSpecific = 26;
inline constexpr uint8_t kSessionTimeout = 27;
inline constexpr uint8_t kIdleTimeout = 28;
inline constexpr uint8_t kTerminationAction = 29;
inline constexpr uint8_t kCalledStationId = 30;
inline constexpr uint8_t kCallingStationId = 31;
inline constexpr uint8_t kNasIdentifier = 32;
inline constexpr uint8_t kProxyState = 33;
inline constexpr uint8_t kAcctStatusType = 40;
inline constexpr uint8_t kAcctDelayTime = 41;
inline constexpr uint8_t kAcctInputOctets = 42;
inline constexpr uint8_t kAcctOutputOctets = 43;
inline constexpr uint8_t kAcctSessionId = 44;
inline constexpr uint8_t kAcctAuthentic = 45;
inline constexpr uint8_t kAcctSessionTime = 46;
inline constexpr uint8_t kAcctInputPackets = 47;
inline constexpr uint8_t kAcctOutputPackets = 48;
inline constexpr uint8_t kAcctTerminateCause = 49;
inline constexpr uint8_t kAcctMultiSessionId = 50;
inline constexpr uint8_t kAcctLinkCount = 51;
inline constexpr uint8_t kAcctInputGigawords = 52;
inline constexpr uint8_t kAcctOutputGigawords = 53;
inline constexpr uint8_t kEventTimestamp = 55;
inline constexpr uint8_t kNasPortType = 61;
inline constexpr uint8_t kMessageAuthenticator = 80;
inline constexpr uint8_t kAcctInterimInterval = 85;
inline constexpr uint8_t kNasPortId = 87;
inline constexpr uint8_t kNasIpv6Address = 95;
inline constexpr uint8_t kFramedInterfaceId = 96;
inline constexpr uint8_t kFramedIpv6Prefix = 97;
inline constexpr uint8_t kFramedIpv6Route = 99;
inline constexpr uint8_t kErrorCause = 101;
inline constexpr uint8_t kDelegatedIpv6Prefix = 123;
inline constexpr uint8_t kFramedIpv6Address = 168;
}  // namespace attr

inline constexpr uint32_t kVendorWispr = 14122;
inline constexpr uint8_t kWisprBandwidthMaxUp = 7;
inline constexpr uint8_t kWisprBandwidthMaxDown = 8;
inline constexpr uint32_t kVendorAdslForum = 3561;
inline constexpr uint8_t kAdslAgentCircuitId = 1;
inline constexpr uint8_t kAdslAgentRemoteId = 2;

inline constexpr uint32_t kNasPortTypeEthernet = 15;

// Why a packet was refused. Each is counted by its name.
enum class Fault {
  kNone = 0,
  kTooShort,           // datagram shorter than the 20-octet header
  kTooLong,            // Length or datagram above 4096
  kLengthMismatch,     // Length field below 20 or beyond the datagram
  kAttributeOverrun,   // an attribute runs past Length
  kAttributeTooShort,  // attribute length below 2
  kBadAttributeValue,  // wrong size or content for the attribute's data type
  kIllegalRepeat,      // an attribute allowed once appears again
  kValueTooLong,       // building: a value above 253 octets
  kMissingMessageAuthenticator,
  kBadMessageAuthenticator,
  kBadAuthenticator,  // Request/Response Authenticator does not verify
  kUnexpectedCode,    // a code that is not valid here
};
inline constexpr int kFaultCount = static_cast<int>(Fault::kUnexpectedCode) + 1;
const char* fault_name(Fault f);  // "length_mismatch", ...
// The Fault carried by a status made here; kNone for OK or a foreign status.
Fault fault_of(const absl::Status& s);
// A status carrying `f` (for the modules that refuse packets beyond the codec).
absl::Status fault_status(Fault f, std::string_view detail);

struct Attribute {
  uint8_t type = 0;
  std::string value;  // raw octets; Vendor-Specific starts with the vendor id
  friend bool operator==(const Attribute&, const Attribute&) = default;
};

struct Packet {
  uint8_t code = 0;
  uint8_t id = 0;
  Authenticator authenticator{};
  std::vector<Attribute> attrs;

  const Attribute* find(uint8_t type) const;  // first of that type
  // The value of a Vendor-Specific sub-attribute (first match).
  std::optional<std::string_view> find_vendor(uint32_t vendor, uint8_t vtype) const;
};

// ---- structure ----
// Header, lengths and attribute layout, then the dictionary: each known
// attribute's size and content, each once-only attribute at most once,
// the WISPr and ADSL-Forum sub-attributes inside Vendor-Specific. Octets past
// the Length field are padding and ignored (RFC 2865 section 3).
absl::StatusOr<Packet> decode(std::span<const uint8_t> bytes);
// Serializes with the authenticator as given (no secret involved).
absl::StatusOr<Bytes> encode(const Packet& p);

// ---- attribute values ----
Attribute make_string(uint8_t type, std::string_view v);
Attribute make_u32(uint8_t type, uint32_t v);
Attribute make_ipv4(uint8_t type, uint32_t be);  // network order
Attribute make_ipv6(uint8_t type, const Ipv6& a);
Attribute make_ipv6_prefix(uint8_t type, const Prefix& p);  // RFC 3162 layout
Attribute make_vendor(uint32_t vendor, uint8_t vtype, std::string_view v);
Attribute make_vendor_u32(uint32_t vendor, uint8_t vtype, uint32_t v);
std::optional<uint32_t> as_u32(std::string_view v);
std::optional<Prefix> as_ipv6_prefix(std::string_view v);

// ---- secrets and authenticators ----
// RFC 2865 5.2. `plain` up to 128 octets, padded with NULs to 16..128; the
// empty password is one hidden block of NULs (what servers decode as "").
absl::StatusOr<std::string> hide_password(std::string_view plain, std::string_view secret,
                                          const Authenticator& request_auth);
absl::StatusOr<std::string> unhide_password(std::string_view hidden, std::string_view secret,
                                            const Authenticator& request_auth);
Authenticator random_authenticator();  // OpenSSL RAND_bytes

// Access-Request: User-Password (attribute value in plain text) hidden, a
// Message-Authenticator placed first (the BlastRADIUS mitigation) and
// computed. `request_auth` is random and kept to check the reply.
absl::StatusOr<Bytes> build_access_request(uint8_t id, const Authenticator& request_auth,
                                           std::vector<Attribute> attrs, std::string_view secret);
// Accounting-Request (RFC 2866) and CoA/Disconnect-Request (RFC 5176): the
// authenticator is MD5 over the packet with a zero authenticator, then the
// secret. With `message_authenticator`, one is added first (computed over the
// zero authenticator).
absl::StatusOr<Bytes> build_signed_request(uint8_t code, uint8_t id, std::vector<Attribute> attrs,
                                           std::string_view secret,
                                           bool message_authenticator = false);
// A reply to a request of authenticator `request_auth`: Response
// Authenticator = MD5(code id length request_auth attributes secret), with a
// Message-Authenticator first when asked.
absl::StatusOr<Bytes> build_response(uint8_t code, uint8_t id, const Authenticator& request_auth,
                                     std::vector<Attribute> attrs, std::string_view secret,
                                     bool message_authenticator);

// Checks a reply to the request of `request_auth`: decodes it, checks the
// Response Authenticator, and the Message-Authenticator when present; when
// absent from an Access-Accept/Reject/Challenge and `require_ma`, refuses it.
absl::StatusOr<Packet> verify_response(std::span<const uint8_t> bytes,
                                       const Authenticator& request_auth, std::string_view secret,
                                       bool require_ma);
// Checks a received Accounting-, CoA- or Disconnect-Request (authenticator
// over a zero field) or an Access-Request (Message-Authenticator required,
// User-Password left hidden), and any Message-Authenticator present.
absl::StatusOr<Packet> verify_request(std::span<const uint8_t> bytes, std::string_view secret);

// ---- the dictionary applied ----
// The Access-Accept attributes xbng uses (client.h). Refuses a repeated
// Filter-Id or WISPr rate (the plan would be ambiguous) and malformed IPv6
// prefixes; unknown attributes are only kept in `raw`.
absl::StatusOr<Authorization> decode_authorization(const Packet& p);

}  // namespace xbng::radius
