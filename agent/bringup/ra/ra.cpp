// RS parsing and RA building (RFC 4861, RFC 8106).
#include "bringup/ra/ra.h"

#include "common/wire.h"

namespace xbng::agent::ra {

std::string_view rs_error_name(RsError e) {
  switch (e) {
#define XBNG_RS_NAME_(en, m, d) \
  case RsError::en:             \
    return m;
    XBNG_RS_PARSE_ERRORS(XBNG_RS_NAME_)
#undef XBNG_RS_NAME_
  }
  return "unknown";
}

std::string_view rs_error_description(RsError e) {
  switch (e) {
#define XBNG_RS_DESC_(en, m, d) \
  case RsError::en:             \
    return d;
    XBNG_RS_PARSE_ERRORS(XBNG_RS_DESC_)
#undef XBNG_RS_DESC_
  }
  return "unknown";
}

RsError parse_rs(std::span<const uint8_t> b, bool source_unspecified, RouterSolicit* out) {
  // type, code, checksum, reserved (4): 8 bytes (§4.1).
  if (b.size() < 8) return RsError::kTooShort;
  if (b.size() > kMaxRs) return RsError::kOversized;
  if (b[0] != kIcmpRouterSolicit) return RsError::kNotRs;
  if (b[1] != 0) return RsError::kBadCode;
  out->has_source_lla = false;
  size_t p = 8;
  while (p < b.size()) {
    if (b.size() - p < 2) return RsError::kTruncatedOption;
    uint8_t type = b[p], units = b[p + 1];
    if (units == 0) return RsError::kZeroLengthOption;  // §6.1.1: discard
    size_t len = size_t{units} * 8;
    if (len > b.size() - p) return RsError::kTruncatedOption;
    if (type == kOptSourceLla) {
      // Ethernet: exactly one 8-byte option (RFC 2464 §8).
      if (len != 8 || out->has_source_lla) return RsError::kBadSourceLla;
      if (source_unspecified) return RsError::kLlaWithUnspecified;  // §6.1.1
      out->has_source_lla = true;
      std::copy(b.begin() + static_cast<ptrdiff_t>(p + 2),
                b.begin() + static_cast<ptrdiff_t>(p + 8), out->source_lla.begin());
    }
    p += len;  // other options: ignored (§4.1: future options)
  }
  return RsError::kOk;
}

std::vector<std::string> check_settings(const Settings& s) {
  std::vector<std::string> e;
  auto n = [](uint64_t v) { return std::to_string(v); };
  if (s.router_lifetime > 9000)
    e.push_back("router lifetime " + n(s.router_lifetime) + " s exceeds 9000");
  if (s.reachable_time > 3600000)
    e.push_back("reachable time " + n(s.reachable_time) + " ms exceeds 3600000");
  if (s.mtu != 0 && s.mtu < 1280)
    e.push_back("MTU " + n(s.mtu) + " is below the IPv6 minimum 1280");
  if (s.rdnss.size() > 16) e.push_back("more than 16 RDNSS addresses");
  if (!s.rdnss.empty() && s.rdnss_lifetime < s.router_lifetime)
    e.push_back("RDNSS lifetime " + n(s.rdnss_lifetime) +
                " s is shorter than the router lifetime " + n(s.router_lifetime) + " s");
  if (s.pio_preferred > s.pio_valid)
    e.push_back("PIO preferred lifetime " + n(s.pio_preferred) + " exceeds the valid lifetime " +
                n(s.pio_valid));
  return e;
}

std::string check_interval(const Settings& s, uint32_t interval_s) {
  if (interval_s == 0) return "unsolicited RA interval: 0";
  if (s.router_lifetime != 0 && interval_s >= s.router_lifetime)
    return "unsolicited RA interval " + std::to_string(interval_s) +
           " s does not keep the default route: router lifetime is " +
           std::to_string(s.router_lifetime) + " s";
  return {};
}

size_t build_ra(const Settings& s, const Mac& port_mac, const Prefix* slaac_prefix,
                std::vector<uint8_t>* out) {
  wire::Writer w(out);
  w.u8(kIcmpRouterAdvert);
  w.u8(0);   // code
  w.u16(0);  // checksum: the frame layer's
  w.u8(s.cur_hop_limit);
  // M, O; router preference medium (00, RFC 4191); no home agent/proxy bits.
  w.u8(static_cast<uint8_t>((s.managed ? 0x80 : 0) | (s.other ? 0x40 : 0)));
  w.u16(s.router_lifetime);
  w.u32(s.reachable_time);
  w.u32(s.retrans_timer);
  // Source link-layer address (§4.6.1): hosts learn the router's MAC without
  // a neighbour solicitation.
  w.u8(kOptSourceLla);
  w.u8(1);
  w.bytes(port_mac.data(), 6);
  if (s.mtu) {  // §4.6.4
    w.u8(kOptMtu);
    w.u8(1);
    w.u16(0);
    w.u32(s.mtu);
  }
  if (!s.rdnss.empty()) {  // RFC 8106 §5.1: length = 1 + 2 * addresses
    w.u8(kOptRdnss);
    w.u8(static_cast<uint8_t>(1 + 2 * s.rdnss.size()));
    w.u16(0);
    w.u32(s.rdnss_lifetime);
    for (const Ipv6& a : s.rdnss) w.bytes(a.data(), 16);
  }
  if (slaac_prefix && slaac_prefix->family == 6) {  // §4.6.2
    w.u8(kOptPrefixInfo);
    w.u8(4);
    w.u8(slaac_prefix->len);
    bool autonomous = slaac_prefix->len == 64;
    w.u8(static_cast<uint8_t>((s.pio_on_link ? 0x80 : 0) | (autonomous ? 0x40 : 0)));
    w.u32(s.pio_valid);
    w.u32(s.pio_preferred);
    w.u32(0);  // reserved2
    w.bytes(slaac_prefix->addr.data(), 16);
  }
  return w.size();
}

}  // namespace xbng::agent::ra
