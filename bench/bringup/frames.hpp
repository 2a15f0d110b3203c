// Frames of the bring-up load generator: what N emulated QinQ CPEs send
// (DHCPv4 DISCOVER/REQUEST, DHCPv6 SOLICIT with Rapid Commit / REQUEST,
// ICMPv6 RS) and the parsing of what a BNG answers (OFFER/ACK/NAK,
// ADVERTISE/REPLY, RA). Benchmark-private; the self-test responder builds
// its answers here too (from xbng_protocols for DHCPv6 and RA).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace bringup {

using Bytes = std::vector<uint8_t>;
using Mac = std::array<uint8_t, 6>;
using V6 = std::array<uint8_t, 16>;

inline constexpr uint16_t kTpidOuter = 0x88a8, kTpidInner = 0x8100;

// One CPE: subscriber i's tags and MAC (bench/README.md addressing).
struct Cpe {
  uint16_t svid = 0, cvid = 0;
  Mac mac{};
  V6 link_local() const;  // fe80:: + modified EUI-64 of mac
};

// Subscriber i (bench/README.md, bench/bpf/pktcost.h): tags, MAC, and the
// addresses a BNG provisioned with the same scheme must hand out.
Cpe cpe_of(uint32_t i);
int64_t index_of(uint16_t svid, uint16_t cvid);  // -1: not a bench subscriber
uint32_t sub_addr4_be(uint32_t i);               // 100.64.0.16 + i
V6 sub_addr6(uint32_t i);                        // 2001:db8:1000::16 + i
V6 sub_pfx64(uint32_t i);                        // i-th /64 of 2001:db8:2000::/36

// ---- CPE → BNG --------------------------------------------------------------
Bytes dhcp4_discover(const Cpe& c, uint32_t xid);
Bytes dhcp4_request(const Cpe& c, uint32_t xid, uint32_t requested_be, uint32_t server_id_be);
Bytes dhcp6_solicit(const Cpe& c, uint32_t xid, bool rapid_commit);
Bytes dhcp6_request(const Cpe& c, uint32_t xid, std::span<const uint8_t> server_duid);
Bytes router_solicit(const Cpe& c);

// ---- BNG → CPE --------------------------------------------------------------
// A received frame, tags resolved (the outer one may come from the
// kernel's VLAN offload metadata, see bringup.cpp).
struct Parsed {
  uint16_t svid = 0, cvid = 0;
  Mac dst{}, src{};
  enum Kind : uint8_t { kOther, kDhcp4, kDhcp6, kRa, kRs } kind = kOther;
  // DHCPv4
  uint8_t dhcp4_type =
      0;  // 2 OFFER, 5 ACK, 6 NAK (client side); 1 DISCOVER, 3 REQUEST (server side)
  uint32_t xid = 0, yiaddr_be = 0, server_id_be = 0, requested_be = 0;
  // DHCPv6
  uint8_t dhcp6_type = 0;
  bool has_na = false, has_pd = false;
  V6 na{}, pd{};
  uint8_t pd_len = 0;
  std::array<uint8_t, 130> server_duid{};
  uint8_t server_duid_len = 0;
  // RA
  uint16_t router_lifetime = 0;
  // L3 source (RS/DHCPv6 on the responder side)
  V6 ip6_src{};
  std::span<const uint8_t> l4;  // UDP payload (DHCP) / ICMPv6 message, into the frame
};
// `outer_vid` >= 0: the outer tag was stripped by the kernel and is given
// here; the data then starts with the inner tag.
bool parse_frame(std::span<const uint8_t> f, int outer_vid, Parsed* out);

// ---- for the self-test responder ---------------------------------------------
// Wraps a payload into Ethernet + both tags + IPv6 (src fe80::1, hop limit)
// + UDP (547 → 546) or ICMPv6, checksums filled.
Bytes wrap_v6_udp(const Cpe& c, const Mac& port_mac, const V6& dst,
                  std::span<const uint8_t> payload);
Bytes wrap_v6_icmp(const Cpe& c, const Mac& port_mac, const V6& dst, std::span<const uint8_t> icmp);
// OFFER/ACK with yiaddr, server id, /32 + lease time, to the CPE's MAC.
Bytes dhcp4_reply(const Cpe& c, const Mac& port_mac, uint8_t type, uint32_t xid, uint32_t yiaddr_be,
                  uint32_t server_be);

}  // namespace bringup
