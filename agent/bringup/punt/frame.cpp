#include "bringup/punt/frame.h"

#include <cstring>

#include "common/bytes.h"

namespace xbng::agent::punt {

namespace {

constexpr size_t kEth = 14, kTags = 8, kL2 = kEth + kTags;
constexpr uint16_t kIpv4 = 0x0800, kIpv6 = 0x86dd;
constexpr uint8_t kUdp = 17, kIcmpv6 = 58;

using be::get16;
using be::put16;
bool is_tpid(uint16_t t) { return t == 0x88a8 || t == 0x8100 || t == 0x9100; }

void put_l2(std::vector<uint8_t>& f, const L2& l2, uint16_t ethertype) {
  if (l2.outer_tpid == 0) {  // untagged (build_icmp6, build_arp)
    f.resize(kEth);
    std::memcpy(f.data(), l2.dst.data(), 6);
    std::memcpy(f.data() + 6, l2.src.data(), 6);
    put16(&f[12], ethertype);
    return;
  }
  f.resize(kL2);
  std::memcpy(f.data(), l2.dst.data(), 6);
  std::memcpy(f.data() + 6, l2.src.data(), 6);
  put16(&f[12], l2.outer_tpid);
  put16(&f[14], l2.outer_vid & 0x0fff);
  put16(&f[16], 0x8100);
  put16(&f[18], l2.inner_vid & 0x0fff);
  put16(&f[20], ethertype);
}

uint32_t pseudo6(const Ipv6& s, const Ipv6& d, uint32_t len, uint8_t proto) {
  uint32_t sum = csum_partial(s, 0);
  sum = csum_partial(d, sum);
  sum += (len >> 16) + (len & 0xffff);
  sum += proto;
  return sum;
}

void put_ipv6(std::vector<uint8_t>& f, const Ipv6& src, const Ipv6& dst, uint8_t next, uint8_t hop,
              size_t payload_len) {
  size_t o = f.size();
  f.resize(o + 40);
  uint8_t* h = &f[o];
  h[0] = 0x60;
  put16(h + 4, static_cast<uint16_t>(payload_len));
  h[6] = next;
  h[7] = hop;
  std::memcpy(h + 8, src.data(), 16);
  std::memcpy(h + 24, dst.data(), 16);
}

}  // namespace

const char* frame_error_name(FrameError e) {
  switch (e) {
    case FrameError::kNone:
      return "none";
    case FrameError::kTruncated:
      return "truncated";
    case FrameError::kNotQinq:
      return "not_qinq";
    case FrameError::kBadIpHeader:
      return "bad_ip_header";
    case FrameError::kUnsupported:
      return "unsupported";
  }
  return "?";
}

Mac ipv6_multicast_mac(const Ipv6& g) { return Mac{0x33, 0x33, g[12], g[13], g[14], g[15]}; }

std::optional<FrameView> parse_frame(std::span<const uint8_t> f, FrameError* err) {
  auto fail = [&](FrameError e) {
    if (err) *err = e;
    return std::nullopt;
  };
  if (err) *err = FrameError::kNone;
  if (f.size() < kL2) return fail(FrameError::kTruncated);
  FrameView v;
  std::memcpy(v.l2.dst.data(), &f[0], 6);
  std::memcpy(v.l2.src.data(), &f[6], 6);
  v.l2.outer_tpid = get16(&f[12]);
  if (!is_tpid(v.l2.outer_tpid) || get16(&f[16]) != 0x8100 || is_tpid(get16(&f[20])))
    return fail(FrameError::kNotQinq);
  v.l2.outer_vid = get16(&f[14]) & 0x0fff;
  v.l2.inner_vid = get16(&f[18]) & 0x0fff;
  const uint16_t et = get16(&f[20]);
  std::span<const uint8_t> l3 = f.subspan(kL2);
  std::span<const uint8_t> l4;
  if (et == kIpv4) {
    if (l3.size() < 20) return fail(FrameError::kTruncated);
    const size_t ihl = (l3[0] & 0xf) * 4u;
    if ((l3[0] >> 4) != 4 || ihl < 20) return fail(FrameError::kBadIpHeader);
    const size_t tot = get16(&l3[2]);
    if (l3.size() < ihl || tot > l3.size()) return fail(FrameError::kTruncated);
    if (tot < ihl) return fail(FrameError::kBadIpHeader);
    if (csum_fold(csum_partial(l3.first(ihl), 0)) != 0) return fail(FrameError::kBadIpHeader);
    if (get16(&l3[6]) & 0x3fff) return fail(FrameError::kBadIpHeader);  // MF or offset: fragment
    v.ip_version = 4;
    v.ttl = l3[8];
    v.proto = l3[9];
    std::memcpy(&v.src4, &l3[12], 4);
    std::memcpy(&v.dst4, &l3[16], 4);
    l4 = l3.subspan(ihl, tot - ihl);
  } else if (et == kIpv6) {
    if (l3.size() < 40) return fail(FrameError::kTruncated);
    if ((l3[0] >> 4) != 6) return fail(FrameError::kBadIpHeader);
    const size_t plen = get16(&l3[4]);
    if (40 + plen > l3.size()) return fail(FrameError::kTruncated);
    v.ip_version = 6;
    v.proto = l3[6];
    v.ttl = l3[7];
    std::memcpy(v.src6.data(), &l3[8], 16);
    std::memcpy(v.dst6.data(), &l3[24], 16);
    l4 = l3.subspan(40, plen);
  } else {
    return fail(FrameError::kUnsupported);
  }
  if (v.proto == kUdp) {
    if (l4.size() < 8) return fail(FrameError::kTruncated);
    const size_t ulen = get16(&l4[4]);
    if (ulen < 8 || ulen > l4.size()) return fail(FrameError::kTruncated);
    v.sport = get16(&l4[0]);
    v.dport = get16(&l4[2]);
    v.payload = l4.subspan(8, ulen - 8);
  } else if (v.proto == kIcmpv6 && v.ip_version == 6) {
    if (l4.size() < 4) return fail(FrameError::kTruncated);
    v.payload = l4;
  } else {
    return fail(FrameError::kUnsupported);
  }
  return v;
}

std::vector<uint8_t> build_udp4(const L2& l2, uint32_t src, uint32_t dst, uint16_t sport,
                                uint16_t dport, std::span<const uint8_t> payload) {
  std::vector<uint8_t> f;
  f.reserve(kL2 + 28 + payload.size());
  put_l2(f, l2, kIpv4);
  const size_t ulen = 8 + payload.size();
  f.resize(kL2 + 20 + ulen);
  uint8_t* ip = &f[kL2];
  ip[0] = 0x45;
  put16(ip + 2, static_cast<uint16_t>(20 + ulen));
  ip[8] = 64;
  ip[9] = kUdp;
  std::memcpy(ip + 12, &src, 4);
  std::memcpy(ip + 16, &dst, 4);
  put16(ip + 10, csum_fold(csum_partial({ip, 20}, 0)));
  uint8_t* u = ip + 20;
  put16(u, sport);
  put16(u + 2, dport);
  put16(u + 4, static_cast<uint16_t>(ulen));
  if (!payload.empty()) std::memcpy(u + 8, payload.data(), payload.size());
  uint32_t sum = csum_partial({ip + 12, 8}, 0) + kUdp + static_cast<uint32_t>(ulen);
  uint16_t c = csum_fold(csum_partial({u, ulen}, sum));
  put16(u + 6, c == 0 ? 0xffff : c);
  return f;
}

std::vector<uint8_t> build_udp6(const L2& l2, const Ipv6& src, const Ipv6& dst, uint16_t sport,
                                uint16_t dport, std::span<const uint8_t> payload,
                                uint8_t hop_limit) {
  std::vector<uint8_t> f;
  const size_t ulen = 8 + payload.size();
  f.reserve(kL2 + 40 + ulen);
  put_l2(f, l2, kIpv6);
  put_ipv6(f, src, dst, kUdp, hop_limit, ulen);
  const size_t o = f.size();
  f.resize(o + ulen);
  uint8_t* u = &f[o];
  put16(u, sport);
  put16(u + 2, dport);
  put16(u + 4, static_cast<uint16_t>(ulen));
  if (!payload.empty()) std::memcpy(u + 8, payload.data(), payload.size());
  uint16_t c = csum_fold(csum_partial({u, ulen}, pseudo6(src, dst, ulen, kUdp)));
  put16(u + 6, c == 0 ? 0xffff : c);
  return f;
}

std::vector<uint8_t> build_icmp6(const L2& l2, const Ipv6& src, const Ipv6& dst,
                                 std::span<const uint8_t> body, uint8_t hop_limit) {
  std::vector<uint8_t> f;
  f.reserve(kL2 + 40 + body.size());
  put_l2(f, l2, kIpv6);
  put_ipv6(f, src, dst, kIcmpv6, hop_limit, body.size());
  const size_t o = f.size();
  f.insert(f.end(), body.begin(), body.end());
  if (body.size() >= 4) {
    uint8_t* m = &f[o];
    put16(m + 2, 0);
    put16(m + 2,
          csum_fold(csum_partial({m, body.size()}, pseudo6(src, dst, body.size(), kIcmpv6))));
  }
  return f;
}

std::vector<uint8_t> build_arp(const L2& l2, uint16_t op, const Mac& sha, uint32_t spa,
                               const Mac& tha, uint32_t tpa) {
  std::vector<uint8_t> f;
  f.reserve(kL2 + 28);
  put_l2(f, l2, 0x0806);
  const size_t o = f.size();
  f.resize(o + 28);
  uint8_t* a = &f[o];
  put16(a, 1);  // Ethernet
  put16(a + 2, kIpv4);
  a[4] = 6;
  a[5] = 4;
  put16(a + 6, op);
  std::memcpy(a + 8, sha.data(), 6);
  std::memcpy(a + 14, &spa, 4);
  std::memcpy(a + 18, tha.data(), 6);
  std::memcpy(a + 24, &tpa, 4);
  return f;
}

}  // namespace xbng::agent::punt
