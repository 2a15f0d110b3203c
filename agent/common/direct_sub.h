// Direct subscribers: where a subscriber entry lives. A key (port, S-VID,
// C-VID) inside an S-VLAN range the direct table lists is in
// `direct_subscribers` at slot base + (S-VID - first) * 4096 + C-VID;
// every other key is in the `subscribers` hash. The layout is planned once
// at start from the access ports' declared ranges (configuration order,
// each range while it fits in what is left of the array) and written whole
// to `direct_sub_ranges`; the store (BpfMapOps), the start-up migration,
// the trace, HA and `xbngctl bpf dump` translate with it. See abi.h
// "direct subscribers".
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xbng/abi.h"

namespace xbng::agent {

// An S-VLAN range as written in a port's `direct_svlans`: "A-B" or "A",
// S-VIDs 1..4094, A <= B. None when it is not one.
inline std::optional<std::pair<uint16_t, uint16_t>> parse_svlan_range(std::string_view s) {
  auto num = [](std::string_view t) -> std::optional<uint16_t> {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v < 1 || v > 4094)
      return std::nullopt;
    return static_cast<uint16_t>(v);
  };
  const size_t dash = s.find('-');
  auto a = num(s.substr(0, dash));
  auto b = dash == std::string_view::npos ? a : num(s.substr(dash + 1));
  if (!a || !b || *a > *b) return std::nullopt;
  return std::make_pair(*a, *b);
}

// An S-VLAN range an access port declares (`direct_svlans`).
struct DirectSvlanRange {
  uint32_t ifindex = 0;
  uint16_t first = 0, last = 0;  // S-VIDs, first <= last
  std::string name;              // for the log: "acc0 S-VLANs 100-163"
};

struct DirectSubLayout {
  std::vector<struct xbng_direct_sub_range> r;

  // Lays out `ranges` in `slots` slots, 4096 per S-VLAN. A range that does
  // not fit in what is left (or past XBNG_DIRECT_SUB_RANGES) is named in
  // *skipped (its subscribers stay on the hash path). No slots: nothing is
  // laid out, nothing skipped.
  static DirectSubLayout plan(const std::vector<DirectSvlanRange>& ranges, uint32_t slots,
                              std::vector<std::string>* skipped) {
    DirectSubLayout d;
    uint64_t used = 0;
    for (const auto& g : ranges) {
      if (slots == 0) break;
      const uint64_t n = uint64_t{g.last} - g.first + 1;
      const uint64_t size = n * XBNG_DIRECT_SUB_CVIDS;
      if (g.first > g.last || d.r.size() == XBNG_DIRECT_SUB_RANGES || used + size > slots) {
        if (skipped) skipped->push_back(g.name);
        continue;
      }
      struct xbng_direct_sub_range e {};
      e.ifindex = g.ifindex;
      e.first_svid = g.first;
      e.n_svids = static_cast<uint16_t>(n);
      e.base = static_cast<uint32_t>(used);
      d.r.push_back(e);
      used += size;
    }
    return d;
  }

  static DirectSubLayout from_table(const struct xbng_direct_sub_table& t) {
    DirectSubLayout d;
    for (uint32_t i = 0; i < t.n && i < XBNG_DIRECT_SUB_RANGES; ++i) d.r.push_back(t.r[i]);
    return d;
  }

  struct xbng_direct_sub_table table() const {
    struct xbng_direct_sub_table t {};
    t.n = static_cast<uint32_t>(r.size());
    for (size_t i = 0; i < r.size(); ++i) t.r[i] = r[i];
    return t;
  }

  bool empty() const { return r.empty(); }

  // The slot of a key, or none: the hash path. As the fast path computes it
  // (bpf/lib/lookup.h direct_sub_lookup): the first range of the port that
  // holds the S-VID; C-VID 0..4095.
  std::optional<uint32_t> slot_of(const struct xbng_sub_key& k) const {
    for (const auto& e : r) {
      const uint32_t off = uint32_t{k.outer_vid} - e.first_svid;
      if (e.ifindex != k.ifindex || off >= e.n_svids) continue;
      if (k.inner_vid >= XBNG_DIRECT_SUB_CVIDS) return std::nullopt;
      return e.base + off * XBNG_DIRECT_SUB_CVIDS + k.inner_vid;
    }
    return std::nullopt;
  }

  // The key a slot stands for, or none (no range's).
  std::optional<struct xbng_sub_key> key_of(uint32_t slot) const {
    for (const auto& e : r) {
      const uint64_t off = uint64_t{slot} - e.base;
      if (slot < e.base || off >= uint64_t{e.n_svids} * XBNG_DIRECT_SUB_CVIDS) continue;
      struct xbng_sub_key k {};
      k.ifindex = e.ifindex;
      k.outer_vid = static_cast<uint16_t>(e.first_svid + off / XBNG_DIRECT_SUB_CVIDS);
      k.inner_vid = static_cast<uint16_t>(off % XBNG_DIRECT_SUB_CVIDS);
      return k;
    }
    return std::nullopt;
  }

  // Slots in use by the layout.
  uint64_t slots() const {
    uint64_t n = 0;
    for (const auto& e : r) n += uint64_t{e.n_svids} * XBNG_DIRECT_SUB_CVIDS;
    return n;
  }

  friend bool operator==(const DirectSubLayout& a, const DirectSubLayout& b) {
    if (a.r.size() != b.r.size()) return false;
    for (size_t i = 0; i < a.r.size(); ++i)
      if (a.r[i].ifindex != b.r[i].ifindex || a.r[i].first_svid != b.r[i].first_svid ||
          a.r[i].n_svids != b.r[i].n_svids || a.r[i].base != b.r[i].base)
        return false;
    return true;
  }
};

}  // namespace xbng::agent
