#include "frames.hpp"

#include <arpa/inet.h>

#include <cstring>

#include "common/bytes.h"
#include "common/checksum.h"
#include "pktcost.h"

namespace bringup {

namespace {

void put16(Bytes& v, uint16_t x) {
  v.push_back(static_cast<uint8_t>(x >> 8));
  v.push_back(static_cast<uint8_t>(x));
}
void put32(Bytes& v, uint32_t x) {
  put16(v, static_cast<uint16_t>(x >> 16));
  put16(v, static_cast<uint16_t>(x));
}
void put(Bytes& v, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  v.insert(v.end(), b, b + n);
}
using xbng::agent::be::get16;
using xbng::agent::be::get32;
void set16(Bytes& v, size_t at, uint16_t x) {
  v[at] = static_cast<uint8_t>(x >> 8);
  v[at + 1] = static_cast<uint8_t>(x);
}

// The Internet checksum of the agent (common/checksum.h).
uint32_t csum_add(uint32_t s, const uint8_t* p, size_t n) {
  return xbng::agent::csum_partial({p, n}, s);
}
using xbng::agent::csum_fold;

constexpr Mac kBroadcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
constexpr Mac kAllDhcp6{0x33, 0x33, 0x00, 0x01, 0x00, 0x02};
constexpr Mac kAllRouters{0x33, 0x33, 0x00, 0x00, 0x00, 0x02};
constexpr V6 kAllDhcp6Ip{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2};
constexpr V6 kAllRoutersIp{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
constexpr V6 kGatewayLl{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

void qinq(Bytes& v, const Mac& dst, const Mac& src, uint16_t svid, uint16_t cvid, uint16_t proto) {
  put(v, dst.data(), 6);
  put(v, src.data(), 6);
  put16(v, kTpidOuter);
  put16(v, svid);
  put16(v, kTpidInner);
  put16(v, cvid);
  put16(v, proto);
}

// IPv4 + UDP header around `payload`; checksums filled.
Bytes ipv4_udp_frame(const Mac& dst, const Mac& src, uint16_t svid, uint16_t cvid,
                     uint32_t saddr_be, uint32_t daddr_be, uint16_t sport, uint16_t dport,
                     const Bytes& payload) {
  Bytes v;
  v.reserve(22 + 28 + payload.size());
  qinq(v, dst, src, svid, cvid, 0x0800);
  size_t ip = v.size();
  put16(v, 0x4500);
  put16(v, static_cast<uint16_t>(28 + payload.size()));
  put32(v, 0);
  put16(v, (64 << 8) | 17);
  put16(v, 0);
  put(v, &saddr_be, 4);
  put(v, &daddr_be, 4);
  set16(v, ip + 10, csum_fold(csum_add(0, v.data() + ip, 20)));
  size_t udp = v.size();
  put16(v, sport);
  put16(v, dport);
  put16(v, static_cast<uint16_t>(8 + payload.size()));
  put16(v, 0);
  put(v, payload.data(), payload.size());
  uint32_t s = csum_add(0, v.data() + ip + 12, 8);
  s += 17 + 8 + payload.size();
  s = csum_add(s, v.data() + udp, 8 + payload.size());
  uint16_t c = csum_fold(s);
  set16(v, udp + 6, c ? c : 0xffff);
  return v;
}

// IPv6 + (UDP header or nothing) around `l4`; next header `nh`.
Bytes ipv6_frame(const Mac& dst, const Mac& src, uint16_t svid, uint16_t cvid, const V6& saddr,
                 const V6& daddr, uint8_t hop_limit, uint8_t nh, uint16_t sport, uint16_t dport,
                 std::span<const uint8_t> l4, size_t csum_off /* in l4 for ICMPv6 */) {
  bool udp = nh == 17;
  size_t plen = l4.size() + (udp ? 8 : 0);
  Bytes v;
  v.reserve(22 + 40 + plen);
  qinq(v, dst, src, svid, cvid, 0x86dd);
  size_t ip = v.size();
  put32(v, 0x60000000);
  put16(v, static_cast<uint16_t>(plen));
  v.push_back(nh);
  v.push_back(hop_limit);
  put(v, saddr.data(), 16);
  put(v, daddr.data(), 16);
  size_t l4_at = v.size();
  if (udp) {
    put16(v, sport);
    put16(v, dport);
    put16(v, static_cast<uint16_t>(plen));
    put16(v, 0);
  }
  put(v, l4.data(), l4.size());
  uint32_t s = csum_add(0, v.data() + ip + 8, 32);
  s += static_cast<uint32_t>(plen) + nh;
  size_t c_at = udp ? l4_at + 6 : l4_at + csum_off;
  v[c_at] = v[c_at + 1] = 0;
  s = csum_add(s, v.data() + l4_at, plen);
  uint16_t c = csum_fold(s);
  if (udp && c == 0) c = 0xffff;
  set16(v, c_at, c);
  return v;
}

void bootp_header(Bytes& b, uint8_t op, uint32_t xid, const Mac& chaddr, uint32_t yiaddr_be) {
  b.push_back(op);
  b.push_back(1);  // Ethernet
  b.push_back(6);
  b.push_back(0);  // hops
  put32(b, xid);
  put32(b, 0);  // secs, flags
  put32(b, 0);  // ciaddr
  put(b, &yiaddr_be, 4);
  put32(b, 0);  // siaddr
  put32(b, 0);  // giaddr
  put(b, chaddr.data(), 6);
  b.resize(b.size() + 10 + 64 + 128, 0);
  put32(b, 0x63825363);
}

Bytes dhcp4_client(const Cpe& c, uint8_t type, uint32_t xid, uint32_t requested_be,
                   uint32_t server_be) {
  Bytes b;
  b.reserve(300);
  bootp_header(b, 1, xid, c.mac, 0);
  b.insert(b.end(), {53, 1, type});
  b.insert(b.end(), {61, 7, 1});
  put(b, c.mac.data(), 6);
  if (requested_be) {
    b.insert(b.end(), {50, 4});
    put(b, &requested_be, 4);
  }
  if (server_be) {
    b.insert(b.end(), {54, 4});
    put(b, &server_be, 4);
  }
  b.insert(b.end(), {55, 6, 1, 3, 6, 15, 51, 121});
  b.push_back(255);
  if (b.size() < 300) b.resize(300, 0);  // BOOTP minimum, as real clients pad
  return ipv4_udp_frame(kBroadcast, c.mac, c.svid, c.cvid, 0, 0xffffffffu, 68, 67, b);
}

void put_opt_hdr(Bytes& b, uint16_t code, uint16_t len) {
  put16(b, code);
  put16(b, len);
}

Bytes dhcp6_client(const Cpe& c, uint8_t type, uint32_t xid, bool rapid,
                   std::span<const uint8_t> server_duid) {
  Bytes b;
  b.reserve(96);
  b.push_back(type);
  b.push_back(static_cast<uint8_t>(xid >> 16));
  b.push_back(static_cast<uint8_t>(xid >> 8));
  b.push_back(static_cast<uint8_t>(xid));
  put_opt_hdr(b, 1, 10);  // client id: DUID-LL
  put32(b, 0x00030001);
  put(b, c.mac.data(), 6);
  if (!server_duid.empty()) {
    put_opt_hdr(b, 2, static_cast<uint16_t>(server_duid.size()));
    put(b, server_duid.data(), server_duid.size());
  }
  put_opt_hdr(b, 8, 2);  // elapsed time
  put16(b, 0);
  put_opt_hdr(b, 6, 2);  // ORO: DNS
  put16(b, 23);
  if (rapid) put_opt_hdr(b, 14, 0);
  put_opt_hdr(b, 3, 12);  // IA_NA iaid 1
  put32(b, 1);
  put32(b, 0);
  put32(b, 0);
  put_opt_hdr(b, 25, 12);  // IA_PD iaid 2
  put32(b, 2);
  put32(b, 0);
  put32(b, 0);
  return ipv6_frame(kAllDhcp6, c.mac, c.svid, c.cvid, c.link_local(), kAllDhcp6Ip, 1, 17, 546, 547,
                    b, 0);
}

}  // namespace

V6 Cpe::link_local() const {
  V6 a{0xfe, 0x80};
  a[8] = mac[0] ^ 0x02;
  a[9] = mac[1];
  a[10] = mac[2];
  a[11] = 0xff;
  a[12] = 0xfe;
  a[13] = mac[3];
  a[14] = mac[4];
  a[15] = mac[5];
  return a;
}

Cpe cpe_of(uint32_t i) {
  Cpe c;
  c.svid = static_cast<uint16_t>(1 + i / PC_CVIDS_PER_SVID);
  c.cvid = static_cast<uint16_t>(1 + i % PC_CVIDS_PER_SVID);
  c.mac = {0x02,
           0x00,
           static_cast<uint8_t>(i >> 24),
           static_cast<uint8_t>(i >> 16),
           static_cast<uint8_t>(i >> 8),
           static_cast<uint8_t>(i)};
  return c;
}
int64_t index_of(uint16_t svid, uint16_t cvid) {
  if (svid < 1 || cvid < 1 || cvid > PC_CVIDS_PER_SVID) return -1;
  return int64_t(svid - 1) * PC_CVIDS_PER_SVID + (cvid - 1);
}
uint32_t sub_addr4_be(uint32_t i) { return htonl(PC_V4_BASE + i); }
V6 sub_addr6(uint32_t i) {
  uint32_t w[4] = {htonl(PC_V6_HOST_W0), htonl(PC_V6_HOST_W1), 0, htonl(PC_V6_HOST_W3_BASE + i)};
  V6 a;
  std::memcpy(a.data(), w, 16);
  return a;
}
V6 sub_pfx64(uint32_t i) {
  uint32_t w[2] = {htonl(PC_V6_PFX_W0), htonl(PC_V6_PFX_W1_BASE + i)};
  V6 a{};
  std::memcpy(a.data(), w, 8);
  return a;
}

Bytes dhcp4_discover(const Cpe& c, uint32_t xid) { return dhcp4_client(c, 1, xid, 0, 0); }
Bytes dhcp4_request(const Cpe& c, uint32_t xid, uint32_t requested_be, uint32_t server_be) {
  return dhcp4_client(c, 3, xid, requested_be, server_be);
}
Bytes dhcp6_solicit(const Cpe& c, uint32_t xid, bool rapid) {
  return dhcp6_client(c, 1, xid, rapid, {});
}
Bytes dhcp6_request(const Cpe& c, uint32_t xid, std::span<const uint8_t> duid) {
  return dhcp6_client(c, 3, xid, false, duid);
}

Bytes router_solicit(const Cpe& c) {
  Bytes b{133, 0, 0, 0, 0, 0, 0, 0, 1, 1};
  put(b, c.mac.data(), 6);
  return ipv6_frame(kAllRouters, c.mac, c.svid, c.cvid, c.link_local(), kAllRoutersIp, 255, 58, 0,
                    0, b, 2);
}

Bytes wrap_v6_udp(const Cpe& c, const Mac& port_mac, const V6& dst,
                  std::span<const uint8_t> payload) {
  return ipv6_frame(c.mac, port_mac, c.svid, c.cvid, kGatewayLl, dst, 255, 17, 547, 546, payload,
                    0);
}

Bytes wrap_v6_icmp(const Cpe& c, const Mac& port_mac, const V6& dst,
                   std::span<const uint8_t> icmp) {
  return ipv6_frame(c.mac, port_mac, c.svid, c.cvid, kGatewayLl, dst, 255, 58, 0, 0, icmp, 2);
}

Bytes dhcp4_reply(const Cpe& c, const Mac& port_mac, uint8_t type, uint32_t xid, uint32_t yiaddr_be,
                  uint32_t server_be) {
  Bytes b;
  b.reserve(300);
  bootp_header(b, 2, xid, c.mac, yiaddr_be);
  b.insert(b.end(), {53, 1, type, 54, 4});
  put(b, &server_be, 4);
  b.insert(b.end(), {51, 4});
  put32(b, 3600);
  b.insert(b.end(), {1, 4, 255, 255, 255, 255, 3, 4});
  put(b, &server_be, 4);
  b.push_back(255);
  if (b.size() < 300) b.resize(300, 0);
  return ipv4_udp_frame(c.mac, port_mac, c.svid, c.cvid, server_be, yiaddr_be, 67, 68, b);
}

namespace {

void parse_dhcp4(std::span<const uint8_t> b, Parsed* p) {
  if (b.size() < 240 || get32(b.data() + 236) != 0x63825363) return;
  p->xid = get32(b.data() + 4);
  std::memcpy(&p->yiaddr_be, b.data() + 16, 4);
  size_t i = 240;
  while (i < b.size()) {
    uint8_t code = b[i];
    if (code == 0) {
      ++i;
      continue;
    }
    if (code == 255 || i + 1 >= b.size()) break;
    uint8_t len = b[i + 1];
    if (i + 2 + len > b.size()) break;
    const uint8_t* o = b.data() + i + 2;
    if (code == 53 && len == 1) p->dhcp4_type = o[0];
    if (code == 54 && len == 4) std::memcpy(&p->server_id_be, o, 4);
    if (code == 50 && len == 4) std::memcpy(&p->requested_be, o, 4);
    i += 2 + len;
  }
  if (p->dhcp4_type) p->kind = Parsed::kDhcp4;
}

void parse_dhcp6(std::span<const uint8_t> b, Parsed* p) {
  if (b.size() < 4) return;
  p->dhcp6_type = b[0];
  p->xid = uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
  p->kind = Parsed::kDhcp6;
  size_t i = 4;
  while (i + 4 <= b.size()) {
    uint16_t code = get16(b.data() + i), len = get16(b.data() + i + 2);
    if (i + 4 + len > b.size()) break;
    const uint8_t* o = b.data() + i + 4;
    if (code == 2 && len <= 130) {
      p->server_duid_len = static_cast<uint8_t>(len);
      std::memcpy(p->server_duid.data(), o, len);
    }
    if ((code == 3 || code == 25) && len >= 12) {  // IA_NA / IA_PD: first live entry
      size_t j = 12;
      while (j + 4 <= len) {
        uint16_t sc = get16(o + j), sl = get16(o + j + 2);
        if (j + 4 + sl > len) break;
        const uint8_t* so = o + j + 4;
        if (code == 3 && sc == 5 && sl >= 24 && get32(so + 20) != 0 && !p->has_na) {
          p->has_na = true;
          std::memcpy(p->na.data(), so, 16);
        }
        if (code == 25 && sc == 26 && sl >= 25 && get32(so + 4) != 0 && !p->has_pd) {
          p->has_pd = true;
          p->pd_len = so[8];
          std::memcpy(p->pd.data(), so + 9, 16);
        }
        j += 4 + sl;
      }
    }
    i += 4 + len;
  }
}

}  // namespace

bool parse_frame(std::span<const uint8_t> f, int outer_vid, Parsed* p) {
  *p = Parsed{};
  if (f.size() < 14) return false;
  std::memcpy(p->dst.data(), f.data(), 6);
  std::memcpy(p->src.data(), f.data() + 6, 6);
  size_t at = 12;
  uint16_t tags[2];
  int ntags = 0;
  if (outer_vid >= 0) tags[ntags++] = static_cast<uint16_t>(outer_vid);
  uint16_t proto = get16(f.data() + at);
  while ((proto == kTpidOuter || proto == kTpidInner) && ntags < 2) {
    if (f.size() < at + 6) return false;
    tags[ntags++] = get16(f.data() + at + 2) & 0x0fff;
    at += 4;
    proto = get16(f.data() + at);
  }
  if (ntags != 2) return false;
  p->svid = tags[0];
  p->cvid = tags[1];
  at += 2;
  std::span<const uint8_t> l3 = f.subspan(at);
  if (proto == 0x0800) {
    if (l3.size() < 20) return false;
    size_t ihl = (l3[0] & 15) * 4u;
    if (l3[9] != 17 || l3.size() < ihl + 8) return false;
    uint16_t dport = get16(l3.data() + ihl + 2);
    if (dport != 68 && dport != 67) return false;
    size_t ulen = get16(l3.data() + ihl + 4);
    if (ulen < 8 || l3.size() < ihl + ulen) return false;
    p->l4 = l3.subspan(ihl + 8, ulen - 8);
    parse_dhcp4(p->l4, p);
    return p->kind != Parsed::kOther;
  }
  if (proto == 0x86dd) {
    if (l3.size() < 40) return false;
    size_t plen = get16(l3.data() + 4);
    if (l3.size() < 40 + plen) return false;
    std::memcpy(p->ip6_src.data(), l3.data() + 8, 16);
    std::span<const uint8_t> l4 = l3.subspan(40, plen);
    if (l3[6] == 17 && l4.size() >= 8) {
      uint16_t dport = get16(l4.data() + 2);
      if (dport != 546 && dport != 547) return false;
      p->l4 = l4.subspan(8);
      parse_dhcp6(p->l4, p);
      return true;
    }
    if (l3[6] == 58 && !l4.empty()) {
      p->l4 = l4;
      if (l4[0] == 134 && l4.size() >= 16) {
        p->kind = Parsed::kRa;
        p->router_lifetime = get16(l4.data() + 6);
      } else if (l4[0] == 133) {
        p->kind = Parsed::kRs;
      }
      return p->kind != Parsed::kOther;
    }
  }
  return false;
}

}  // namespace bringup
