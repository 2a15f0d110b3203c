// Frame layer of the punt path: pure functions, no sockets. parse_frame
// turns a punted QinQ frame (both tags kept) into a view of its L2/L3/L4
// headers; build_* write whole QinQ frames with correct IP/UDP/ICMPv6
// checksums. Nothing here knows DHCP or ND.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/checksum.h"
#include "common/net.h"

namespace xbng::agent::punt {

// Ethernet header + the two tags of one subscriber's VLAN pair. An
// outer_tpid of 0 builds an untagged frame (build_icmp6 and build_arp only).
struct L2 {
  Mac dst{}, src{};
  uint16_t outer_tpid = 0x88a8;
  uint16_t outer_vid = 0, inner_vid = 0;
};

enum class FrameError {
  kNone,
  kTruncated,    // shorter than its headers or its length fields
  kNotQinq,      // not exactly two tags
  kBadIpHeader,  // version, IHL, header checksum, fragment
  kUnsupported,  // neither UDP nor ICMPv6
};
const char* frame_error_name(FrameError e);

struct FrameView {
  L2 l2;
  int ip_version = 0;           // 4 or 6
  uint32_t src4 = 0, dst4 = 0;  // network order
  Ipv6 src6{}, dst6{};
  uint8_t ttl = 0;                   // TTL or hop limit
  uint8_t proto = 0;                 // 17 (UDP) or 58 (ICMPv6)
  uint16_t sport = 0, dport = 0;     // UDP, host order
  std::span<const uint8_t> payload;  // UDP payload or the whole ICMPv6 message
};

// The view's spans point into `frame`. L4 checksums are not verified: frames
// from a local stack (veth, checksum offload) carry partial checksums, and
// the protocol parsers validate every field they use.
std::optional<FrameView> parse_frame(std::span<const uint8_t> frame, FrameError* err);

// QinQ + IPv4 (TTL 64, DF clear, id 0) + UDP, checksums filled.
std::vector<uint8_t> build_udp4(const L2& l2, uint32_t src, uint32_t dst, uint16_t sport,
                                uint16_t dport, std::span<const uint8_t> payload);
// QinQ + IPv6 + UDP, checksum filled.
std::vector<uint8_t> build_udp6(const L2& l2, const Ipv6& src, const Ipv6& dst, uint16_t sport,
                                uint16_t dport, std::span<const uint8_t> payload,
                                uint8_t hop_limit = 64);
// QinQ + IPv6 + ICMPv6 message `body` (its checksum field, bytes 2..3, is
// overwritten with the computed checksum).
std::vector<uint8_t> build_icmp6(const L2& l2, const Ipv6& src, const Ipv6& dst,
                                 std::span<const uint8_t> body, uint8_t hop_limit = 255);

// QinQ (or untagged) + ARP for Ethernet/IPv4; addresses in network order.
std::vector<uint8_t> build_arp(const L2& l2, uint16_t op, const Mac& sha, uint32_t spa,
                               const Mac& tha, uint32_t tpa);

// The Internet checksum (common/checksum.h), by its punt-path name.
using agent::csum_fold;
using agent::csum_partial;

// Multicast MAC of an IPv6 group (33:33 + low 32 bits).
Mac ipv6_multicast_mac(const Ipv6& group);

}  // namespace xbng::agent::punt
