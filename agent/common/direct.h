// Direct routes: where a host route lives. An IPv4 /32 inside a pool the
// direct table lists lives in `direct_v4` at slot base + (address - pool
// start); an IPv6 /128 inside a pool of /128s, or a delegated /64 inside a
// pool of /64s, lives in `direct_v6` at base + its offset in the pool;
// everything else in the hashes (`routes_v4`, `routes_v6`, `routes_v6_64`).
// The layout is planned once at start from the declared pools
// (configuration order, each pool while it fits in what is left of its
// family's array) and written whole to `direct_pools` and
// `direct_pools_v6`; the store (BpfMapOps), the start-up migration and
// `xbngctl bpf dump` translate with it. See abi.h "direct routes".
#pragma once

#include <arpa/inet.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "xbng/abi.h"
#include "common/net.h"

namespace xbng::agent {

// What a direct slot holds, by the prefix length of the hash key it stands
// for: an IPv4 /32 (`routes_v4`, key 4 bytes), an IPv6 /64 (`routes_v6_64`,
// key 8 bytes) or an IPv6 /128 (`routes_v6`, key 16 bytes).
enum class DirectUnit : uint32_t { kV4 = 32, kV6_64 = 64, kV6_128 = 128 };

inline size_t direct_key_size(DirectUnit u) {
  return u == DirectUnit::kV4 ? 4 : u == DirectUnit::kV6_64 ? 8 : 16;
}

inline uint64_t load_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

inline void store_be64(uint8_t* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}

struct DirectLayout {
  std::vector<struct xbng_direct_pool> v4;
  std::vector<struct xbng_direct_pool_v6> v6;

  // Lays out the pools of `pools` in order: the IPv4 ones in `slots` slots,
  // the IPv6 ones in `slots_v6` (a /L with L < 64: its /64s, else its
  // /128s). A pool that does not fit in what is left of its family's slots
  // (or after XBNG_DIRECT_POOLS of them) is named in *skipped: it stays on
  // the hash path. A family without slots: nothing laid out, nothing
  // skipped.
  static DirectLayout plan(const std::vector<Prefix>& pools, uint32_t slots, uint32_t slots_v6,
                           std::vector<std::string>* skipped) {
    DirectLayout d;
    uint64_t used = 0, used_v6 = 0;
    for (const auto& p : pools) {
      const bool v4 = p.family == 4;
      if ((v4 ? slots : slots_v6) == 0) continue;
      const uint32_t unit = v4 ? 32 : p.len < 64 ? 64 : 128;
      const uint32_t bits = unit - p.len;  // at most 32 + 24: size in 64 bits
      const uint64_t size = bits >= 63 ? ~uint64_t{0} : uint64_t{1} << bits;
      const size_t n = v4 ? d.v4.size() : d.v6.size();
      uint64_t& at = v4 ? used : used_v6;
      if (n == XBNG_DIRECT_POOLS || size > (v4 ? slots : slots_v6) - at) {
        if (skipped) skipped->push_back(format_prefix(p));
        continue;
      }
      if (v4) {
        struct xbng_direct_pool e {};
        uint32_t be;
        std::memcpy(&be, p.addr.data(), 4);
        e.start = ntohl(be);
        e.size = static_cast<uint32_t>(size);
        e.base = static_cast<uint32_t>(at);
        d.v4.push_back(e);
      } else {
        struct xbng_direct_pool_v6 e {};
        e.hi = load_be64(p.addr.data());
        e.lo = unit == 128 ? load_be64(p.addr.data() + 8) : 0;
        e.size = static_cast<uint32_t>(size);
        e.base = static_cast<uint32_t>(at);
        e.unit = unit;
        d.v6.push_back(e);
      }
      at += size;
    }
    return d;
  }

  static DirectLayout from_tables(const struct xbng_direct_table& t,
                                  const struct xbng_direct_table_v6& t6) {
    DirectLayout d;
    for (uint32_t i = 0; i < t.n_v4 && i < XBNG_DIRECT_POOLS; ++i) d.v4.push_back(t.v4[i]);
    for (uint32_t i = 0; i < t6.n && i < XBNG_DIRECT_POOLS; ++i) d.v6.push_back(t6.pools[i]);
    return d;
  }

  struct xbng_direct_table table() const {
    struct xbng_direct_table t {};
    t.n_v4 = static_cast<uint32_t>(v4.size());
    for (size_t i = 0; i < v4.size(); ++i) t.v4[i] = v4[i];
    return t;
  }

  struct xbng_direct_table_v6 table_v6() const {
    struct xbng_direct_table_v6 t {};
    t.n = static_cast<uint32_t>(v6.size());
    for (size_t i = 0; i < v6.size(); ++i) t.pools[i] = v6[i];
    return t;
  }

  // The layout of one family (4 or 6) alone.
  DirectLayout family(int f) const {
    DirectLayout d;
    if (f == 4) d.v4 = v4;
    if (f == 6) d.v6 = v6;
    return d;
  }

  bool empty() const { return v4.empty() && v6.empty(); }

  // Whether some pool's slots hold keys of unit u.
  bool has(DirectUnit u) const {
    if (u == DirectUnit::kV4) return !v4.empty();
    for (const auto& p : v6)
      if (p.unit == static_cast<uint32_t>(u)) return true;
    return false;
  }

  // The slot of IPv4 address `be` (network order), or none: the hash path.
  std::optional<uint32_t> slot_of(uint32_t be) const {
    const uint32_t a = ntohl(be);
    for (const auto& p : v4)
      if (a - p.start < p.size) return p.base + (a - p.start);
    return std::nullopt;
  }

  // The slot of a key of unit u (the hash map's key bytes), or none.
  std::optional<uint32_t> slot_of(DirectUnit u, const void* key) const {
    const auto* k = static_cast<const uint8_t*>(key);
    if (u == DirectUnit::kV4) {
      uint32_t be;
      std::memcpy(&be, k, 4);
      return slot_of(be);
    }
    const uint64_t hi = load_be64(k), lo = u == DirectUnit::kV6_128 ? load_be64(k + 8) : 0;
    for (const auto& p : v6) {
      if (p.unit != static_cast<uint32_t>(u)) continue;
      if (u == DirectUnit::kV6_128 && hi != p.hi) continue;
      const uint64_t off = u == DirectUnit::kV6_128 ? lo - p.lo : hi - p.hi;
      if (off < p.size) return p.base + static_cast<uint32_t>(off);
    }
    return std::nullopt;
  }

  // The address (network order) an IPv4 slot stands for, or none.
  std::optional<uint32_t> addr_of(uint32_t slot) const {
    for (const auto& p : v4)
      if (slot - p.base < p.size) return htonl(p.start + (slot - p.base));
    return std::nullopt;
  }

  // Writes the key (direct_key_size(u) bytes) a slot of unit u stands for;
  // false when no pool of that unit holds the slot.
  bool key_of(DirectUnit u, uint32_t slot, void* key) const {
    auto* k = static_cast<uint8_t*>(key);
    if (u == DirectUnit::kV4) {
      auto a = addr_of(slot);
      if (a) std::memcpy(k, &*a, 4);
      return a.has_value();
    }
    for (const auto& p : v6) {
      if (p.unit != static_cast<uint32_t>(u) || slot - p.base >= p.size) continue;
      const uint64_t off = slot - p.base;
      store_be64(k, u == DirectUnit::kV6_128 ? p.hi : p.hi + off);
      if (u == DirectUnit::kV6_128) store_be64(k + 8, p.lo + off);
      return true;
    }
    return false;
  }

  // The prefix an IPv6 pool entry stands for.
  static Prefix prefix_of(const struct xbng_direct_pool_v6& p) {
    Prefix x;
    x.family = 6;
    x.len = static_cast<uint8_t>(p.unit - std::countr_zero(p.size));
    store_be64(x.addr.data(), p.hi);
    store_be64(x.addr.data() + 8, p.lo);
    return x;
  }

  // Calls fn(base, size) for each pool whose slots hold unit u.
  template <typename F>
  void each_range(DirectUnit u, F fn) const {
    if (u == DirectUnit::kV4)
      for (const auto& p : v4) fn(p.base, p.size);
    else
      for (const auto& p : v6)
        if (p.unit == static_cast<uint32_t>(u)) fn(p.base, p.size);
  }

  // Slots in use by the pools of unit u.
  uint64_t slots(DirectUnit u) const {
    uint64_t n = 0;
    each_range(u, [&](uint32_t, uint32_t size) { n += size; });
    return n;
  }

  friend bool operator==(const DirectLayout& a, const DirectLayout& b) {
    if (a.v4.size() != b.v4.size() || a.v6.size() != b.v6.size()) return false;
    for (size_t i = 0; i < a.v4.size(); ++i)
      if (a.v4[i].start != b.v4[i].start || a.v4[i].size != b.v4[i].size ||
          a.v4[i].base != b.v4[i].base)
        return false;
    for (size_t i = 0; i < a.v6.size(); ++i)
      if (a.v6[i].hi != b.v6[i].hi || a.v6[i].lo != b.v6[i].lo || a.v6[i].size != b.v6[i].size ||
          a.v6[i].base != b.v6[i].base || a.v6[i].unit != b.v6[i].unit)
        return false;
    return true;
  }
};

}  // namespace xbng::agent
