// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// A small packet builder that speaks QinQ, for the BPF tests, the
// integration tests and the benchmarks; plus checksum verification written
// independently of the fast path (plain RFC 1071 over 16-bit words).
//
//   Bytes f = Packet()
//                 .eth(mac("02:00:00:00:00:01"), mac("02:00:00:00:a0:00"))
//                 .qinq(0x88a8, 100, 200)
//                 .ipv4(ip4("100.64.1.10"), ip4("192.0.2.99"))
//                 .udp(1234, 53)
//                 .payload(16)
//                 .build();
//
// Ethertypes, IP protocol / next header, lengths and checksums are filled in
// by build() from the layers that follow; anything malformed is made by
// editing the built bytes (or truncating them).
#ifndef XBNG_TESTS_COMMON_PACKET_H
#define XBNG_TESTS_COMMON_PACKET_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace testpkt {

using Bytes = std::vector<uint8_t>;

struct Mac {
  std::array<uint8_t, 6> b{};
  bool operator==(const Mac&) const = default;
  std::string str() const;
};
struct Ip4 {
  std::array<uint8_t, 4> b{};  // network order
  bool operator==(const Ip4&) const = default;
  uint32_t be() const;  // as a __be32 in memory
  std::string str() const;
};
struct Ip6 {
  std::array<uint8_t, 16> b{};  // network order
  bool operator==(const Ip6&) const = default;
  std::string str() const;
};

// Parse text forms; throw std::invalid_argument on bad input.
Mac mac(std::string_view text);
Ip4 ip4(std::string_view text);
Ip6 ip6(std::string_view text);

constexpr uint16_t kTpid8021Q = 0x8100;
constexpr uint16_t kTpid8021AD = 0x88a8;
constexpr uint16_t kTpid9100 = 0x9100;
constexpr uint16_t kEthIpv4 = 0x0800;
constexpr uint16_t kEthIpv6 = 0x86dd;
constexpr uint16_t kEthArp = 0x0806;
constexpr uint8_t kProtoIcmp = 1;
constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;
constexpr uint8_t kProtoIcmpv6 = 58;

// ICMPv6 Neighbour Advertisement flags (host order, as in RFC 4861).
constexpr uint32_t kNaRouter = 0x80000000u;
constexpr uint32_t kNaSolicited = 0x40000000u;
constexpr uint32_t kNaOverride = 0x20000000u;

struct Ipv4Opts {
  uint8_t ttl = 64;
  uint8_t tos = 0;
  uint16_t id = 0x1234;
  uint16_t frag = 0x4000;           // flags + fragment offset, host order (DF)
  Bytes options;                    // IP options, padded to 4 bytes with EOL
  std::optional<uint8_t> protocol;  // default: from the next layer
};

struct Ipv6Opts {
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;
  std::optional<uint8_t> next_header;  // default: from the next layer
};

class Packet {
 public:
  Packet& eth(const Mac& dst, const Mac& src);
  Packet& vlan(uint16_t tpid, uint16_t vid, uint8_t pcp = 0);
  Packet& qinq(uint16_t outer_tpid, uint16_t outer_vid, uint16_t inner_vid);
  // Ethertype after the last tag when the next layer does not imply one
  // (raw payload), or to force one.
  Packet& ethertype(uint16_t type);
  Packet& ipv4(const Ip4& src, const Ip4& dst, const Ipv4Opts& o = {});
  Packet& ipv6(const Ip6& src, const Ip6& dst, const Ipv6Opts& o = {});
  Packet& udp(uint16_t sport, uint16_t dport);
  Packet& tcp_syn(uint16_t sport, uint16_t dport);
  // TCP with the given flags (0x02 SYN, 0x12 SYN-ACK, 0x10 ACK) and raw
  // option bytes (padded to 4 bytes with EOL).
  Packet& tcp(uint16_t sport, uint16_t dport, uint8_t flags, const Bytes& options = {});
  Packet& icmp4(uint8_t type, uint8_t code, const Bytes& body);  // any ICMPv4 message
  Packet& icmp_echo(uint16_t id, uint16_t seq);                  // ICMPv4 echo request
  Packet& icmp6_echo(uint16_t id, uint16_t seq);                 // ICMPv6 echo request
  Packet& icmp6_ns(const Ip6& target, std::optional<Mac> source_lladdr = std::nullopt);
  Packet& icmp6_na(const Ip6& target, uint32_t flags,
                   std::optional<Mac> target_lladdr = std::nullopt);
  Packet& icmp6_rs(std::optional<Mac> source_lladdr = std::nullopt);
  Packet& icmp6(uint8_t type, uint8_t code, const Bytes& body);  // any ICMPv6 message
  Packet& arp(uint16_t op, const Mac& sha, const Ip4& spa, const Mac& tha, const Ip4& tpa);
  Packet& payload(const Bytes& bytes);
  Packet& payload(size_t n, uint8_t seed = 0);  // n bytes: seed, seed+1, ...

  Bytes build() const;

 private:
  enum class Kind { Eth, Vlan, Ipv4, Ipv6, Udp, Tcp, Icmp4, Icmp6, Arp, Raw };
  struct Layer {
    Layer(Kind k, Bytes h = {}) : kind(k), hdr(std::move(h)) {}
    Kind kind;
    Bytes hdr;                              // serialized header (fields fixed up in build)
    uint16_t tpid = 0;                      // Vlan
    std::optional<uint8_t> proto_override;  // IPv4 protocol / IPv6 next header
  };
  uint16_t ethertype_of(size_t next) const;
  uint8_t proto_of(size_t next) const;
  std::vector<Layer> layers_;
  std::optional<uint16_t> ethertype_;
};

// ---- independent checks ---------------------------------------------------
// One's complement sum of 16-bit big-endian words (RFC 1071); `initial` is a
// partial sum (pseudo-header). Returns the folded, complemented checksum.
uint16_t inet_checksum(const uint8_t* p, size_t n, uint32_t initial = 0);

// Offset of the L3 header: after Ethernet and any 0x8100/0x88a8/0x9100 tags.
size_t l3_offset(const Bytes& frame);
// Ethertype after the tags.
uint16_t l3_ethertype(const Bytes& frame);

bool ipv4_header_checksum_ok(const Bytes& frame, size_t l3);
// Recomputes the IPv4 header checksum at `l3` (after editing header bytes).
void set_ipv4_header_checksum(Bytes& frame, size_t l3);
// ICMPv6 directly after the IPv6 header at `l3`, length from payload_len.
bool icmpv6_checksum_ok(const Bytes& frame, size_t l3);
// ICMPv4 after the IPv4 header at `l3`.
bool icmpv4_checksum_ok(const Bytes& frame, size_t l3);
// UDP after the IPv4 or IPv6 header at `l3` (a zero IPv4 UDP checksum is ok).
bool udp_checksum_ok(const Bytes& frame, size_t l3);
// TCP after the IPv4 or IPv6 header at `l3`, length from the IP header.
bool tcp_checksum_ok(const Bytes& frame, size_t l3);
// Every checksum the frame carries (IPv4 header, ICMP, ICMPv6, UDP); on
// failure `why` says which.
bool all_checksums_ok(const Bytes& frame, std::string* why = nullptr);

std::string hexdump(const Bytes& frame);
// Empty when equal, else the first differing offsets and both dumps.
std::string diff(const Bytes& got, const Bytes& want);

}  // namespace testpkt

#endif  // XBNG_TESTS_COMMON_PACKET_H
