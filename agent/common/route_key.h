// The kernel key codec of the five route maps: a subscriber's claim (its
// IPv4 /32, IPv6 /128 or a delegated prefix) laid out as the key of the map
// that holds it (struct xbng_v6_key etc. in abi.h), and back.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "dataplane/dataplane.h"
#include "common/net.h"

namespace xbng::agent {

inline constexpr MapId kRouteMaps[] = {MapId::kRoutesV4, MapId::kRoutesV6, MapId::kRoutesV6_64,
                                       MapId::kPrefixesV4, MapId::kPrefixesV6};

// Key size of a route map.
constexpr size_t route_key_size(MapId m) {
  return m == MapId::kRoutesV4      ? 4
         : m == MapId::kRoutesV6    ? 16
         : m == MapId::kRoutesV6_64 ? 8
         : m == MapId::kPrefixesV4  ? 8
                                    : 20;
}

// A key of one of the five route maps, laid out as the kernel map key.
struct RouteKey {
  MapId map = MapId::kRoutesV4;
  uint8_t size = 0;
  std::array<uint8_t, 20> b{};

  friend bool operator==(const RouteKey& x, const RouteKey& y) {
    return x.map == y.map && x.b == y.b;
  }
  template <typename H>
  friend H AbslHashValue(H h, const RouteKey& k) {
    return H::combine(std::move(h), static_cast<int>(k.map), k.b);
  }
  static RouteKey host_v4(uint32_t be) {
    RouteKey k;
    k.map = MapId::kRoutesV4;
    k.size = 4;
    std::memcpy(k.b.data(), &be, 4);
    return k;
  }
  static RouteKey host_v6(const uint8_t* a) {
    RouteKey k;
    k.map = MapId::kRoutesV6;
    k.size = 16;
    std::memcpy(k.b.data(), a, 16);
    return k;
  }
  static RouteKey prefix(const Prefix& p) {
    RouteKey k;
    if (p.family == 6 && p.len == 64) {
      k.map = MapId::kRoutesV6_64;
      k.size = 8;
      std::memcpy(k.b.data(), p.addr.data(), 8);
      return k;
    }
    const uint32_t len = p.len;
    std::memcpy(k.b.data(), &len, 4);
    if (p.family == 4) {
      k.map = MapId::kPrefixesV4;
      k.size = 8;
      std::memcpy(k.b.data() + 4, p.addr.data(), 4);
    } else {
      k.map = MapId::kPrefixesV6;
      k.size = 20;
      std::memcpy(k.b.data() + 4, p.addr.data(), 16);
    }
    return k;
  }
  // The key of map `m` whose kernel bytes are `raw` (route_key_size(m) of them).
  static RouteKey from_raw(MapId m, const void* raw) {
    RouteKey k;
    k.map = m;
    k.size = static_cast<uint8_t>(route_key_size(m));
    std::memcpy(k.b.data(), raw, k.size);
    return k;
  }
  Prefix as_prefix() const {
    Prefix p;
    switch (map) {
      case MapId::kRoutesV4:
        p.family = 4, p.len = 32;
        std::memcpy(p.addr.data(), b.data(), 4);
        break;
      case MapId::kRoutesV6:
        p.family = 6, p.len = 128;
        std::memcpy(p.addr.data(), b.data(), 16);
        break;
      case MapId::kRoutesV6_64:
        p.family = 6, p.len = 64;
        std::memcpy(p.addr.data(), b.data(), 8);
        break;
      default: {
        uint32_t len;
        std::memcpy(&len, b.data(), 4);
        p.family = map == MapId::kPrefixesV4 ? 4 : 6;
        p.len = static_cast<uint8_t>(len);
        std::memcpy(p.addr.data(), b.data() + 4, p.family == 4 ? 4 : 16);
      }
    }
    return p;
  }
  // The Subscriber field this key comes from, and its text.
  std::pair<const char*, std::string> describe() const {
    Prefix p = as_prefix();
    switch (map) {
      case MapId::kRoutesV4:
        return {"ipv4", format_prefix(p).substr(0, format_prefix(p).find('/'))};
      case MapId::kRoutesV6:
        return {"ipv6", format_ipv6(p.addr.data())};
      case MapId::kPrefixesV4:
        return {"ipv4_prefixes", format_prefix(p)};
      default:
        return {"ipv6_prefixes", format_prefix(p)};
    }
  }
};

// A claim as (family index, length, start): IPv4 as a 32-bit integer, IPv6 as
// its first 64 bits (host order). The ordered indexes of nested overlaps
// work on these.
struct Span {
  int fi = 0;
  uint32_t len = 0;
  uint64_t start = 0;
  bool host = false;
  // Last value covered (hosts: the start itself).
  uint64_t end() const {
    if (host) return start;
    return start | ((uint64_t{1} << ((fi ? 64 : 32) - len)) - 1);
  }
  uint64_t masked(uint32_t l) const {
    const uint64_t width = fi ? 64 : 32;
    return start & ~((uint64_t{1} << (width - l)) - 1);
  }
};

inline uint64_t load_be(const uint8_t* a, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | a[i];
  return v;
}

inline Prefix prefix_at(int fi, uint64_t start, uint32_t len) {
  Prefix p;
  p.family = fi ? 6 : 4;
  p.len = static_cast<uint8_t>(len);
  const size_t n = fi ? 8 : 4;
  for (size_t i = 0; i < n; ++i) p.addr[i] = static_cast<uint8_t>(start >> (8 * (n - 1 - i)));
  return p;
}

inline constexpr uint32_t kMinPrefix[2] = {8, 40}, kMaxPrefix[2] = {31, 64};

inline Span span_of(const Prefix& p) {
  Span s;
  s.fi = p.family == 4 ? 0 : 1;
  s.len = p.len;
  s.host = p.len == (s.fi ? 128 : 32);
  s.start = load_be(p.addr.data(), s.fi ? 8 : 4);
  return s;
}

}  // namespace xbng::agent
