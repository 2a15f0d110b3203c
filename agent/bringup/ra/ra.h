// Router Solicitation parsing and Router Advertisement building (RFC 4861
// §4.1, §4.2, §4.6; RDNSS RFC 8106). Pure: bytes in, struct out; struct in,
// bytes out. The ICMPv6 message is what follows the IPv6 header: type, code,
// checksum, body.
//
// The caller (the frame layer) owns what needs the IPv6 header:
// - an RS is valid only with IPv6 hop limit 255 and a correct ICMPv6
//   checksum (RFC 4861 §6.1.1): check both BEFORE calling parse_rs, and say
//   whether the IPv6 source was the unspecified address (::);
// - build_ra returns the RA with checksum 0: the frame layer writes it from
//   the pseudo-header (source fe80::1, destination the subscriber's
//   link-local address or ff02::1), hop limit 255.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/net.h"

namespace xbng::agent::ra {

inline constexpr uint8_t kIcmpRouterSolicit = 133, kIcmpRouterAdvert = 134;
inline constexpr uint8_t kOptSourceLla = 1, kOptTargetLla = 2, kOptPrefixInfo = 3, kOptMtu = 5,
                         kOptRdnss = 25;
inline constexpr size_t kMaxRs = 1452;  // anything longer is not a CPE's RS

// X(enum, metric suffix, description)
#define XBNG_RS_PARSE_ERRORS(X)                                                           \
  X(kOk, "ok", "valid")                                                                   \
  X(kTooShort, "too_short", "shorter than the 8-byte RS")                                 \
  X(kOversized, "oversized", "longer than 1452 bytes")                                    \
  X(kNotRs, "not_rs", "ICMPv6 type is not 133")                                           \
  X(kBadCode, "bad_code", "ICMPv6 code is not 0")                                         \
  X(kTruncatedOption, "truncated_option", "an option runs past the end")                  \
  X(kZeroLengthOption, "zero_length_option", "an option with length 0 (RFC 4861 §6.1.1)") \
  X(kBadSourceLla, "bad_source_lla", "source link-layer option malformed or repeated")    \
  X(kLlaWithUnspecified, "lla_with_unspecified_source",                                   \
    "source link-layer option while the IPv6 source is ::")

enum class RsError : uint8_t {
#define XBNG_RS_ENUM_(e, m, d) e,
  XBNG_RS_PARSE_ERRORS(XBNG_RS_ENUM_)
#undef XBNG_RS_ENUM_
};
std::string_view rs_error_name(RsError e);
std::string_view rs_error_description(RsError e);

struct RouterSolicit {
  bool has_source_lla = false;
  Mac source_lla{};
};

RsError parse_rs(std::span<const uint8_t> icmp6, bool source_unspecified, RouterSolicit* out);

struct Settings {
  bool managed = true;              // M: addresses by DHCPv6
  bool other = true;                // O: other configuration by DHCPv6
  uint8_t cur_hop_limit = 64;       // 0 = unspecified
  uint16_t router_lifetime = 1800;  // s; must exceed the unsolicited interval
  uint32_t reachable_time = 0;      // ms, 0 = unspecified
  uint32_t retrans_timer = 0;       // ms, 0 = unspecified
  uint32_t mtu = 1500;              // MTU option; 0 = not sent
  std::vector<Ipv6> rdnss;          // RDNSS option; empty = not sent
  uint32_t rdnss_lifetime = 1800;   // s (RFC 8106: ≥ the max RA interval)
  // PIO, only where the operator configures SLAAC (build_ra's prefix):
  uint32_t pio_valid = 86400, pio_preferred = 14400;
  bool pio_on_link = true;  // L flag
};

// Problems that make settings unusable, each naming the field and value
// (empty: fine): router lifetime ≤ 9000 s (RFC 4861 §6.2.1), reachable time
// ≤ 3,600,000 ms, MTU 0 or ≥ 1280, at most 16 RDNSS addresses, RDNSS
// lifetime ≥ the router lifetime when RDNSS is sent (RFC 8106 §5.1: at least
// the max RA interval), PIO preferred ≤ valid.
std::vector<std::string> check_settings(const Settings& s);
// Whether unsolicited RAs every `interval_s` keep a host's default route:
// the router lifetime must exceed the interval (RFC 4861 §6.2.1: lifetime ≥
// MaxRtrAdvInterval). Error text or empty.
std::string check_interval(const Settings& s, uint32_t interval_s);

// Builds the RA (ICMPv6 type 134, checksum 0) into *out (cleared first):
// header, source link-layer address (the port's MAC), MTU, RDNSS, and a
// PIO with A=1 for `slaac_prefix` when given (must be an IPv6 /64 for SLAAC;
// other lengths are still advertised, with A=0). Returns out->size().
size_t build_ra(const Settings& s, const Mac& port_mac, const Prefix* slaac_prefix,
                std::vector<uint8_t>* out);

}  // namespace xbng::agent::ra
