#include "store/codec.h"

#include <cstring>

namespace xbng::agent {

struct xbng_subscriber encode_subscriber(const SubscriberSpec& s, uint32_t slot,
                                         const PolicySpec& pol) {
  struct xbng_subscriber v {};
  uint16_t flags = 0;
  v.slot = slot;
  v.up = {0, policy_byte_ns_fp(pol.up_rate), static_cast<uint32_t>(pol.up_burst)};
  if (s.has_policy) flags |= XBNG_SUB_F_POLICY_SET;
  if (s.has_ipv4) flags |= XBNG_SUB_F_HAS_IPV4, v.ipv4 = s.ipv4;
  if (s.has_ipv6) flags |= XBNG_SUB_F_HAS_IPV6, std::memcpy(v.ipv6, s.ipv6.data(), 16);
  for (const auto& pf : s.prefixes)
    flags |= pf.family == 4 ? XBNG_SUB_F_V4_PREFIX : XBNG_SUB_F_V6_PREFIX;
  if (s.has_mac) {
    flags |= XBNG_SUB_F_MAC_VALID;
    std::memcpy(v.mac, s.mac.data(), 6);
  } else {
    flags |= XBNG_SUB_F_LEARN_MAC;
  }
  flags |= static_cast<uint16_t>(s.mac_policy << XBNG_SUB_F_MAC_POLICY_SHIFT);
  flags |= static_cast<uint16_t>((s.origin << XBNG_SUB_F_ORIGIN_SHIFT) & XBNG_SUB_F_ORIGIN_MASK);
  v.flags = flags;
  return v;
}

struct xbng_police encode_police(const PolicySpec& pol, const struct xbng_police* old) {
  struct xbng_police pv {};
  if (old) pv = *old;  // counters carried over
  pv.up_rate_bps = pol.up_rate;
  pv.down_rate_bps = pol.down_rate;
  const uint32_t down_fp = policy_byte_ns_fp(pol.down_rate);
  if (pv.down.byte_ns_fp != down_fp || pv.down.burst_bytes != pol.down_burst)
    pv.down = {0, down_fp, static_cast<uint32_t>(pol.down_burst)};
  return pv;
}

struct xbng_route encode_route(const SubKey& k, uint32_t slot, const Mac* mac, bool policed,
                               bool credit) {
  struct xbng_route r {};
  r.sub = k;
  r.slot = slot;
  if (mac) {
    std::memcpy(r.mac, mac->data(), 6);
    r.flags = XBNG_ROUTE_F_MAC_VALID;
  }
  if (policed) r.flags |= XBNG_ROUTE_F_POLICED;
  if (policed && credit) r.flags |= XBNG_ROUTE_F_CREDIT;
  return r;
}

PolicySpec decode_policy(const struct xbng_subscriber& v, const struct xbng_police& police) {
  return {police.up_rate_bps, v.up.burst_bytes, police.down_rate_bps, police.down.burst_bytes};
}

SubscriberSpec decode_subscriber(const SubKey& k, const struct xbng_subscriber& v,
                                 const struct xbng_police* police) {
  SubscriberSpec s;
  s.key = k;
  s.has_mac = (v.flags & XBNG_SUB_F_MAC_VALID) && !(v.flags & XBNG_SUB_F_LEARN_MAC);
  if (s.has_mac) std::memcpy(s.mac.data(), v.mac, 6);
  s.mac_policy =
      static_cast<uint8_t>((v.flags & XBNG_SUB_F_MAC_POLICY_MASK) >> XBNG_SUB_F_MAC_POLICY_SHIFT);
  s.origin = static_cast<uint8_t>((v.flags & XBNG_SUB_F_ORIGIN_MASK) >> XBNG_SUB_F_ORIGIN_SHIFT);
  s.has_ipv4 = v.flags & XBNG_SUB_F_HAS_IPV4;
  if (s.has_ipv4) s.ipv4 = v.ipv4;
  s.has_ipv6 = v.flags & XBNG_SUB_F_HAS_IPV6;
  if (s.has_ipv6) std::memcpy(s.ipv6.data(), v.ipv6, 16);
  s.has_policy = v.flags & XBNG_SUB_F_POLICY_SET;
  if (s.has_policy) s.policy = decode_policy(v, police ? *police : xbng_police{});
  return s;
}

}  // namespace xbng::agent
