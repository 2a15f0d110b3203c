// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#include "packet.h"

#include <arpa/inet.h>

#include <cstdio>
#include <stdexcept>

namespace testpkt {

namespace {

void put16(Bytes& b, size_t off, uint16_t v) {
  b.at(off) = v >> 8;
  b.at(off + 1) = v & 0xff;
}

void put32(Bytes& b, size_t off, uint32_t v) {
  put16(b, off, v >> 16);
  put16(b, off + 2, v & 0xffff);
}

uint16_t get16(const Bytes& b, size_t off) { return (uint16_t)(b.at(off) << 8 | b.at(off + 1)); }

void append(Bytes& b, const uint8_t* p, size_t n) { b.insert(b.end(), p, p + n); }

void append16(Bytes& b, uint16_t v) {
  b.push_back(v >> 8);
  b.push_back(v & 0xff);
}

// Sum of 16-bit big-endian words, not folded.
uint32_t sum16(const uint8_t* p, size_t n, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
  if (n & 1) sum += (uint32_t)p[n - 1] << 8;
  return sum;
}

// Pseudo-header partial sum for an L4 payload of `len` bytes after the IP
// header at `l3` (version taken from the header).
uint32_t pseudo_sum(const Bytes& f, size_t l3, uint8_t proto, uint32_t len) {
  uint32_t s = 0;
  if ((f.at(l3) >> 4) == 4) {
    s = sum16(&f.at(l3 + 12), 8);
  } else {
    s = sum16(&f.at(l3 + 8), 32);
    s += len >> 16;
  }
  s += len & 0xffff;
  s += proto;
  return s;
}

bool is_tpid(uint16_t t) { return t == kTpid8021Q || t == kTpid8021AD || t == kTpid9100; }

}  // namespace

// ---- addresses ----------------------------------------------------------------
Mac mac(std::string_view text) {
  Mac m;
  unsigned v[6];
  char tail;
  std::string s(text);
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                  &tail) != 6)
    throw std::invalid_argument("bad MAC: " + s);
  for (int i = 0; i < 6; i++) {
    if (v[i] > 0xff) throw std::invalid_argument("bad MAC: " + s);
    m.b[i] = (uint8_t)v[i];
  }
  return m;
}

Ip4 ip4(std::string_view text) {
  Ip4 a;
  std::string s(text);
  if (inet_pton(AF_INET, s.c_str(), a.b.data()) != 1)
    throw std::invalid_argument("bad IPv4 address: " + s);
  return a;
}

Ip6 ip6(std::string_view text) {
  Ip6 a;
  std::string s(text);
  if (inet_pton(AF_INET6, s.c_str(), a.b.data()) != 1)
    throw std::invalid_argument("bad IPv6 address: " + s);
  return a;
}

std::string Mac::str() const {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4],
                b[5]);
  return buf;
}

uint32_t Ip4::be() const {
  uint32_t v;
  static_assert(sizeof(v) == 4);
  __builtin_memcpy(&v, b.data(), 4);
  return v;
}

std::string Ip4::str() const {
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, b.data(), buf, sizeof(buf));
  return buf;
}

std::string Ip6::str() const {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, b.data(), buf, sizeof(buf));
  return buf;
}

// ---- layers -------------------------------------------------------------------
Packet& Packet::eth(const Mac& dst, const Mac& src) {
  Layer l{Kind::Eth, {}};
  append(l.hdr, dst.b.data(), 6);
  append(l.hdr, src.b.data(), 6);
  append16(l.hdr, 0);  // type: fixed up in build()
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::vlan(uint16_t tpid, uint16_t vid, uint8_t pcp) {
  Layer l{Kind::Vlan, {}};
  l.tpid = tpid;
  append16(l.hdr, (uint16_t)((pcp & 7) << 13 | (vid & 0x0fff)));
  append16(l.hdr, 0);  // next type
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::qinq(uint16_t outer_tpid, uint16_t outer_vid, uint16_t inner_vid) {
  vlan(outer_tpid, outer_vid);
  return vlan(kTpid8021Q, inner_vid);
}

Packet& Packet::ethertype(uint16_t type) {
  ethertype_ = type;
  return *this;
}

Packet& Packet::ipv4(const Ip4& src, const Ip4& dst, const Ipv4Opts& o) {
  Layer l{Kind::Ipv4, {}};
  Bytes opts = o.options;
  while (opts.size() % 4) opts.push_back(0);  // EOL
  if (opts.size() > 40) throw std::invalid_argument("IPv4 options longer than 40 bytes");
  l.hdr.push_back((uint8_t)(0x40 | (5 + opts.size() / 4)));
  l.hdr.push_back(o.tos);
  append16(l.hdr, 0);  // total length
  append16(l.hdr, o.id);
  append16(l.hdr, o.frag);
  l.hdr.push_back(o.ttl);
  l.hdr.push_back(0);  // protocol
  append16(l.hdr, 0);  // checksum
  append(l.hdr, src.b.data(), 4);
  append(l.hdr, dst.b.data(), 4);
  append(l.hdr, opts.data(), opts.size());
  l.proto_override = o.protocol;
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::ipv6(const Ip6& src, const Ip6& dst, const Ipv6Opts& o) {
  Layer l{Kind::Ipv6, {}};
  uint32_t w0 = 6u << 28 | (uint32_t)o.traffic_class << 20 | (o.flow_label & 0xfffff);
  l.hdr.resize(8);
  put32(l.hdr, 0, w0);
  l.hdr[7] = o.hop_limit;
  append(l.hdr, src.b.data(), 16);
  append(l.hdr, dst.b.data(), 16);
  l.proto_override = o.next_header;
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::udp(uint16_t sport, uint16_t dport) {
  Layer l{Kind::Udp, Bytes(8, 0)};
  put16(l.hdr, 0, sport);
  put16(l.hdr, 2, dport);
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::tcp_syn(uint16_t sport, uint16_t dport) {
  Layer l{Kind::Tcp, Bytes(20, 0)};
  put16(l.hdr, 0, sport);
  put16(l.hdr, 2, dport);
  put32(l.hdr, 4, 0x01020304);  // sequence
  l.hdr[12] = 5 << 4;           // data offset
  l.hdr[13] = 0x02;             // SYN
  put16(l.hdr, 14, 65535);      // window
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::tcp(uint16_t sport, uint16_t dport, uint8_t flags, const Bytes& options) {
  Bytes opts = options;
  while (opts.size() % 4) opts.push_back(0);
  Layer l{Kind::Tcp, Bytes(20, 0)};
  put16(l.hdr, 0, sport);
  put16(l.hdr, 2, dport);
  put32(l.hdr, 4, 0x01020304);                    // sequence
  if (flags & 0x10) put32(l.hdr, 8, 0x0a0b0c0d);  // acknowledgment
  l.hdr[12] = (uint8_t)((5 + opts.size() / 4) << 4);
  l.hdr[13] = flags;
  put16(l.hdr, 14, 64240);  // window
  append(l.hdr, opts.data(), opts.size());
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::icmp4(uint8_t type, uint8_t code, const Bytes& body) {
  Layer l{Kind::Icmp4, {type, code, 0, 0}};
  append(l.hdr, body.data(), body.size());
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::icmp_echo(uint16_t id, uint16_t seq) {
  Layer l{Kind::Icmp4, Bytes(8, 0)};
  l.hdr[0] = 8;
  put16(l.hdr, 4, id);
  put16(l.hdr, 6, seq);
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::icmp6(uint8_t type, uint8_t code, const Bytes& body) {
  Layer l{Kind::Icmp6, {type, code, 0, 0}};
  append(l.hdr, body.data(), body.size());
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::icmp6_echo(uint16_t id, uint16_t seq) {
  Bytes body(4, 0);
  put16(body, 0, id);
  put16(body, 2, seq);
  return icmp6(128, 0, body);
}

Packet& Packet::icmp6_ns(const Ip6& target, std::optional<Mac> sll) {
  Bytes body(4, 0);  // reserved
  append(body, target.b.data(), 16);
  if (sll) {
    body.push_back(1);  // source link-layer address
    body.push_back(1);
    append(body, sll->b.data(), 6);
  }
  return icmp6(135, 0, body);
}

Packet& Packet::icmp6_na(const Ip6& target, uint32_t flags, std::optional<Mac> tll) {
  Bytes body(4, 0);
  put32(body, 0, flags);
  append(body, target.b.data(), 16);
  if (tll) {
    body.push_back(2);  // target link-layer address
    body.push_back(1);
    append(body, tll->b.data(), 6);
  }
  return icmp6(136, 0, body);
}

Packet& Packet::icmp6_rs(std::optional<Mac> sll) {
  Bytes body(4, 0);
  if (sll) {
    body.push_back(1);
    body.push_back(1);
    append(body, sll->b.data(), 6);
  }
  return icmp6(133, 0, body);
}

Packet& Packet::arp(uint16_t op, const Mac& sha, const Ip4& spa, const Mac& tha, const Ip4& tpa) {
  Layer l{Kind::Arp, {}};
  append16(l.hdr, 1);       // Ethernet
  append16(l.hdr, 0x0800);  // IPv4
  l.hdr.push_back(6);
  l.hdr.push_back(4);
  append16(l.hdr, op);
  append(l.hdr, sha.b.data(), 6);
  append(l.hdr, spa.b.data(), 4);
  append(l.hdr, tha.b.data(), 6);
  append(l.hdr, tpa.b.data(), 4);
  layers_.push_back(std::move(l));
  return *this;
}

Packet& Packet::payload(const Bytes& bytes) {
  layers_.push_back(Layer{Kind::Raw, bytes});
  return *this;
}

Packet& Packet::payload(size_t n, uint8_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(seed + i);
  return payload(b);
}

uint16_t Packet::ethertype_of(size_t next) const {
  if (next < layers_.size()) {
    switch (layers_[next].kind) {
      case Kind::Vlan:
        return layers_[next].tpid;
      case Kind::Ipv4:
        return ethertype_.value_or(kEthIpv4);
      case Kind::Ipv6:
        return ethertype_.value_or(kEthIpv6);
      case Kind::Arp:
        return ethertype_.value_or(kEthArp);
      default:
        break;
    }
  }
  return ethertype_.value_or(0x88b5);  // IEEE local experimental
}

uint8_t Packet::proto_of(size_t next) const {
  if (next < layers_.size()) {
    switch (layers_[next].kind) {
      case Kind::Udp:
        return kProtoUdp;
      case Kind::Tcp:
        return kProtoTcp;
      case Kind::Icmp4:
        return kProtoIcmp;
      case Kind::Icmp6:
        return kProtoIcmpv6;
      default:
        break;
    }
  }
  return 59;  // IPv6 "no next header"; unassigned-as-data for IPv4 tests
}

Bytes Packet::build() const {
  Bytes out;
  std::vector<size_t> off(layers_.size());
  for (size_t i = 0; i < layers_.size(); i++) {
    off[i] = out.size();
    append(out, layers_[i].hdr.data(), layers_[i].hdr.size());
  }
  const size_t total = out.size();

  // Types and lengths, outside in.
  for (size_t i = 0; i < layers_.size(); i++) {
    const Layer& l = layers_[i];
    size_t o = off[i];
    switch (l.kind) {
      case Kind::Eth:
        put16(out, o + 12, ethertype_of(i + 1));
        break;
      case Kind::Vlan:
        put16(out, o + 2, ethertype_of(i + 1));
        break;
      case Kind::Ipv4:
        out[o + 9] = l.proto_override.value_or(proto_of(i + 1));
        put16(out, o + 2, (uint16_t)(total - o));
        break;
      case Kind::Ipv6:
        out[o + 6] = l.proto_override.value_or(proto_of(i + 1));
        put16(out, o + 4, (uint16_t)(total - o - 40));
        break;
      case Kind::Udp:
        put16(out, o + 4, (uint16_t)(total - o));
        break;
      default:
        break;
    }
  }

  // Checksums, inside out (an L4 checksum does not cover the IP header).
  for (size_t i = layers_.size(); i-- > 0;) {
    const Layer& l = layers_[i];
    size_t o = off[i];
    size_t len = total - o;
    bool after_ip =
        i > 0 && (layers_[i - 1].kind == Kind::Ipv4 || layers_[i - 1].kind == Kind::Ipv6);
    switch (l.kind) {
      case Kind::Udp:
      case Kind::Tcp:
      case Kind::Icmp6: {
        if (!after_ip) break;
        size_t csum_off = l.kind == Kind::Udp ? 6 : l.kind == Kind::Tcp ? 16 : 2;
        uint8_t proto = l.kind == Kind::Udp   ? kProtoUdp
                        : l.kind == Kind::Tcp ? kProtoTcp
                                              : kProtoIcmpv6;
        uint32_t ps = pseudo_sum(out, off[i - 1], proto, (uint32_t)len);
        uint16_t c = inet_checksum(&out[o], len, ps);
        if (l.kind == Kind::Udp && c == 0) c = 0xffff;
        put16(out, o + csum_off, c);
        break;
      }
      case Kind::Icmp4:
        put16(out, o + 2, inet_checksum(&out[o], len));
        break;
      case Kind::Ipv4:
        put16(out, o + 10, inet_checksum(&out[o], l.hdr.size()));
        break;
      default:
        break;
    }
  }
  return out;
}

// ---- checks -------------------------------------------------------------------
uint16_t inet_checksum(const uint8_t* p, size_t n, uint32_t initial) {
  uint32_t sum = sum16(p, n, initial);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return (uint16_t)~sum;
}

size_t l3_offset(const Bytes& f) {
  size_t off = 12;
  while (off + 2 <= f.size() && is_tpid(get16(f, off))) off += 4;
  return off + 2;
}

uint16_t l3_ethertype(const Bytes& f) {
  size_t off = l3_offset(f);
  return off <= f.size() ? get16(f, off - 2) : 0;
}

bool ipv4_header_checksum_ok(const Bytes& f, size_t l3) {
  size_t ihl = (f.at(l3) & 0xf) * 4u;
  if (l3 + ihl > f.size()) return false;
  return inet_checksum(&f[l3], ihl) == 0;
}

void set_ipv4_header_checksum(Bytes& f, size_t l3) {
  size_t ihl = (f.at(l3) & 0xf) * 4u;
  if (l3 + ihl > f.size()) throw std::invalid_argument("IPv4 header beyond the frame");
  put16(f, l3 + 10, 0);
  put16(f, l3 + 10, inet_checksum(&f[l3], ihl));
}

bool icmpv6_checksum_ok(const Bytes& f, size_t l3) {
  size_t len = get16(f, l3 + 4);
  if (l3 + 40 + len > f.size() || len < 4) return false;
  return inet_checksum(&f[l3 + 40], len, pseudo_sum(f, l3, kProtoIcmpv6, (uint32_t)len)) == 0;
}

bool icmpv4_checksum_ok(const Bytes& f, size_t l3) {
  size_t ihl = (f.at(l3) & 0xf) * 4u;
  size_t tot = get16(f, l3 + 2);
  if (l3 + tot > f.size() || tot < ihl + 4) return false;
  return inet_checksum(&f[l3 + ihl], tot - ihl) == 0;
}

bool udp_checksum_ok(const Bytes& f, size_t l3) {
  bool v4 = (f.at(l3) >> 4) == 4;
  size_t l4 = v4 ? l3 + (f.at(l3) & 0xf) * 4u : l3 + 40;
  if (l4 + 8 > f.size()) return false;
  size_t len = get16(f, l4 + 4);
  if (l4 + len > f.size() || len < 8) return false;
  if (v4 && get16(f, l4 + 6) == 0) return true;  // no checksum
  return inet_checksum(&f[l4], len, pseudo_sum(f, l3, kProtoUdp, (uint32_t)len)) == 0;
}

bool tcp_checksum_ok(const Bytes& f, size_t l3) {
  bool v4 = (f.at(l3) >> 4) == 4;
  size_t l4 = v4 ? l3 + (f.at(l3) & 0xf) * 4u : l3 + 40;
  size_t end = v4 ? l3 + get16(f, l3 + 2) : l3 + 40 + get16(f, l3 + 4);
  if (l4 + 20 > end || end > f.size()) return false;
  size_t len = end - l4;
  return inet_checksum(&f[l4], len, pseudo_sum(f, l3, kProtoTcp, (uint32_t)len)) == 0;
}

bool all_checksums_ok(const Bytes& f, std::string* why) {
  auto fail = [&](const char* what) {
    if (why) *why = what;
    return false;
  };
  size_t l3 = l3_offset(f);
  if (l3 > f.size()) return true;
  uint16_t type = get16(f, l3 - 2);
  if (type == kEthIpv4 && l3 + 20 <= f.size() && (f[l3] >> 4) == 4) {
    size_t ihl = (f[l3] & 0xf) * 4u;
    size_t tot = get16(f, l3 + 2);
    if (l3 + ihl > f.size() || ihl < 20) return true;
    if (!ipv4_header_checksum_ok(f, l3)) return fail("IPv4 header checksum");
    bool first_fragment = (get16(f, l3 + 6) & 0x1fff) == 0;
    bool whole = l3 + tot <= f.size() && !(get16(f, l3 + 6) & 0x2000) && first_fragment;
    if (whole && f[l3 + 9] == kProtoUdp && tot >= ihl + 8 && !udp_checksum_ok(f, l3))
      return fail("UDP checksum (IPv4)");
    if (whole && f[l3 + 9] == kProtoIcmp && tot >= ihl + 4 && !icmpv4_checksum_ok(f, l3))
      return fail("ICMP checksum");
    if (whole && f[l3 + 9] == kProtoTcp && tot >= ihl + 20 && !tcp_checksum_ok(f, l3))
      return fail("TCP checksum (IPv4)");
  } else if (type == kEthIpv6 && l3 + 40 <= f.size() && (f[l3] >> 4) == 6) {
    size_t len = get16(f, l3 + 4);
    if (l3 + 40 + len > f.size()) return true;
    if (f[l3 + 6] == kProtoIcmpv6 && len >= 4 && !icmpv6_checksum_ok(f, l3))
      return fail("ICMPv6 checksum");
    if (f[l3 + 6] == kProtoUdp && len >= 8 && !udp_checksum_ok(f, l3))
      return fail("UDP checksum (IPv6)");
    if (f[l3 + 6] == kProtoTcp && len >= 20 && !tcp_checksum_ok(f, l3))
      return fail("TCP checksum (IPv6)");
  }
  return true;
}

std::string hexdump(const Bytes& f) {
  std::string s;
  char buf[24];
  for (size_t i = 0; i < f.size(); i++) {
    if (i % 16 == 0) {
      std::snprintf(buf, sizeof(buf), "%s%04zx:", i ? "\n" : "", i);
      s += buf;
    }
    std::snprintf(buf, sizeof(buf), " %02x", f[i]);
    s += buf;
  }
  return s;
}

std::string diff(const Bytes& got, const Bytes& want) {
  if (got == want) return {};
  std::string s;
  char buf[64];
  if (got.size() != want.size()) {
    std::snprintf(buf, sizeof(buf), "length %zu, want %zu; ", got.size(), want.size());
    s += buf;
  }
  int shown = 0;
  for (size_t i = 0; i < got.size() && i < want.size() && shown < 12; i++) {
    if (got[i] != want[i]) {
      std::snprintf(buf, sizeof(buf), "[%zu] %02x want %02x; ", i, got[i], want[i]);
      s += buf;
      shown++;
    }
  }
  s += "\ngot:\n" + hexdump(got) + "\nwant:\n" + hexdump(want);
  return s;
}

}  // namespace testpkt
