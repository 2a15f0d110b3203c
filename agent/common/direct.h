// Direct routes: where an IPv4 /32 host route lives. Inside a pool the
// direct table lists, in `direct_v4` at slot base + (address - pool start);
// elsewhere in the `routes_v4` hash. The layout is planned once at start
// from the declared pools (configuration order, each pool while it fits in
// what is left of the array) and written whole to `direct_pools`; the store
// (BpfMapOps), the start-up migration and `xbngctl bpf dump` translate with
// it. See abi.h "direct routes".
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "xbng/abi.h"
#include "common/net.h"

namespace xbng::agent {

struct DirectLayout {
  std::vector<struct xbng_direct_pool> v4;

  // Lays out the IPv4 pools of `pools` (others ignored) in `slots` slots.
  // A pool that does not fit in what is left is named in *skipped (it stays
  // on the hash path). No slots: nothing is laid out, nothing skipped.
  static DirectLayout plan(const std::vector<Prefix>& pools, uint32_t slots,
                           std::vector<std::string>* skipped) {
    DirectLayout d;
    uint64_t used = 0;
    for (const auto& p : pools) {
      if (p.family != 4 || slots == 0) continue;
      const uint64_t size = uint64_t{1} << (32 - p.len);
      if (d.v4.size() == XBNG_DIRECT_POOLS || used + size > slots) {
        if (skipped) skipped->push_back(format_prefix(p));
        continue;
      }
      struct xbng_direct_pool e {};
      uint32_t be;
      std::memcpy(&be, p.addr.data(), 4);
      e.start = ntohl(be);
      e.size = static_cast<uint32_t>(size);
      e.base = static_cast<uint32_t>(used);
      d.v4.push_back(e);
      used += size;
    }
    return d;
  }

  static DirectLayout from_table(const struct xbng_direct_table& t) {
    DirectLayout d;
    for (uint32_t i = 0; i < t.n_v4 && i < XBNG_DIRECT_POOLS; ++i) d.v4.push_back(t.v4[i]);
    return d;
  }

  struct xbng_direct_table table() const {
    struct xbng_direct_table t {};
    t.n_v4 = static_cast<uint32_t>(v4.size());
    for (size_t i = 0; i < v4.size(); ++i) t.v4[i] = v4[i];
    return t;
  }

  bool empty() const { return v4.empty(); }

  // The slot of IPv4 address `be` (network order), or none: the hash path.
  std::optional<uint32_t> slot_of(uint32_t be) const {
    const uint32_t a = ntohl(be);
    for (const auto& p : v4)
      if (a - p.start < p.size) return p.base + (a - p.start);
    return std::nullopt;
  }

  // The address (network order) a slot stands for, or none (no pool's).
  std::optional<uint32_t> addr_of(uint32_t slot) const {
    for (const auto& p : v4)
      if (slot - p.base < p.size) return htonl(p.start + (slot - p.base));
    return std::nullopt;
  }

  // Slots in use by the layout.
  uint64_t slots() const {
    uint64_t n = 0;
    for (const auto& p : v4) n += p.size;
    return n;
  }

  friend bool operator==(const DirectLayout& a, const DirectLayout& b) {
    if (a.v4.size() != b.v4.size()) return false;
    for (size_t i = 0; i < a.v4.size(); ++i)
      if (a.v4[i].start != b.v4[i].start || a.v4[i].size != b.v4[i].size ||
          a.v4[i].base != b.v4[i].base)
        return false;
    return true;
  }
};

}  // namespace xbng::agent
