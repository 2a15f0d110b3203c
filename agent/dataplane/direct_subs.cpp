// Direct subscribers at start: the access ports' declared S-VLAN ranges laid
// out in `direct_subscribers`, and the subscribers moved between the hash
// and the array when the layout changed since the last start (docs/design.md
// "Direct subscribers").
#include <bpf/bpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "dataplane/dataplane.h"

namespace xbng::agent {

namespace {

std::string errstr(int err) { return std::strerror(err < 0 ? -err : err); }

void write_direct_sub_table(int fd, const DirectSubLayout& d) {
  const uint32_t zero = 0;
  const struct xbng_direct_sub_table t = d.table();
  if (bpf_map_update_elem(fd, &zero, &t, BPF_ANY) != 0)
    throw DataplaneError(fmt::format("writing map direct_sub_ranges: {}", errstr(errno)));
}

}  // namespace

// Lays the access ports' `direct_svlans` out in `direct_subscribers` (as
// many as fit, in configuration order) and writes the table; when the pinned
// table differs, the subscribers move first (move_direct_subs). Runs once
// the new programs are attached, like configure_direct.
void Dataplane::configure_direct_subs() {
  std::vector<DirectSvlanRange> ranges;
  for (const auto& p : ports_) {
    if (p.role != XBNG_ROLE_ACCESS) continue;
    auto it = opts_.access_overrides.find(p.name);
    if (it == opts_.access_overrides.end()) continue;
    for (const auto& [first, last] : it->second.direct_svlans)
      ranges.push_back({p.ifindex, first, last,
                        first == last ? fmt::format("{} S-VLAN {}", p.name, first)
                                      : fmt::format("{} S-VLANs {}-{}", p.name, first, last)});
  }
  std::vector<std::string> skipped;
  const uint32_t slots = opts_.direct_subscriber_slots ? max_entries(MapId::kDirectSubs) : 0;
  DirectSubLayout want = DirectSubLayout::plan(ranges, slots, &skipped);
  for (const auto& r : skipped) {
    auto w = fmt::format(
        "{}: not in the direct subscriber array (limits.direct_subscriber_slots {} full at 4096 "
        "an S-VLAN, or {} ranges already): its subscribers stay on the hash path",
        r, slots, XBNG_DIRECT_SUB_RANGES);
    spdlog::warn("{}", w);
    warnings_.push_back(w);
  }
  DirectSubLayout have;
  if (int rc = direct_sub_read_layout(fd(MapId::kDirectSubRanges), &have))
    throw DataplaneError(fmt::format("reading map direct_sub_ranges: {}", errstr(rc)));
  direct_subs_ = want;
  for (const auto& e : want.r)
    spdlog::info("direct subscribers: port ifindex {} S-VLANs {}-{} at slots {}..{}", e.ifindex,
                 e.first_svid, e.first_svid + e.n_svids - 1, e.base,
                 e.base + uint32_t{e.n_svids} * XBNG_DIRECT_SUB_CVIDS - 1);
  if (have == want) return;
  move_direct_subs(have, want);
}

// The move, so that each subscriber is where the table the fast path reads
// says at every instant: every entry of the old layout is copied into the
// `subscribers` hash, the table emptied (every key on the hash path), the
// array cleared; then the hash entries inside the new layout are copied
// into the array, the new table written, and those hash entries deleted.
// Packets see the hash copy or the array copy, never neither; counter
// increments (and bucket updates) on a copy between the two copies are lost.
void Dataplane::move_direct_subs(const DirectSubLayout& have, const DirectSubLayout& want) {
  const int hash = fd(MapId::kSubscribers), arr = fd(MapId::kDirectSubs);
  size_t moved_out = 0;
  int rc = direct_sub_for_each(
      arr, have, [&](const struct xbng_sub_key& k, const struct xbng_subscriber& s) {
        if (bpf_map_update_elem(hash, &k, &s, BPF_ANY) != 0)
          throw DataplaneError(
              fmt::format("moving a direct subscriber into subscribers: {}", errstr(errno)));
        ++moved_out;
      });
  if (rc) throw DataplaneError(fmt::format("reading map direct_subscribers: {}", errstr(rc)));
  write_direct_sub_table(fd(MapId::kDirectSubRanges), DirectSubLayout{});
  const struct xbng_subscriber empty {};
  const uint64_t cap = max_entries(MapId::kDirectSubs);
  for (const auto& e : have.r)
    for (uint64_t i = 0; i < uint64_t{e.n_svids} * XBNG_DIRECT_SUB_CVIDS; ++i) {
      const uint32_t slot = static_cast<uint32_t>(e.base + i);
      if (slot >= cap) break;
      if (bpf_map_update_elem(arr, &slot, &empty, BPF_ANY) != 0)
        throw DataplaneError(fmt::format("clearing map direct_subscribers: {}", errstr(errno)));
    }
  std::vector<struct xbng_sub_key> in_keys;
  rc = map_for_each(hash, sizeof(struct xbng_sub_key), sizeof(struct xbng_subscriber),
                    [&](const void* k, const void* v) {
                      struct xbng_sub_key key;
                      std::memcpy(&key, k, sizeof key);
                      auto slot = want.slot_of(key);
                      if (!slot) return;
                      struct xbng_subscriber s;
                      std::memcpy(&s, v, sizeof s);
                      s.flags |= XBNG_SUB_F_PRESENT;
                      if (bpf_map_update_elem(arr, &*slot, &s, BPF_ANY) != 0)
                        throw DataplaneError(fmt::format(
                            "moving a subscriber into direct_subscribers: {}", errstr(errno)));
                      in_keys.push_back(key);
                    });
  if (rc) throw DataplaneError(fmt::format("reading map subscribers: {}", errstr(rc)));
  write_direct_sub_table(fd(MapId::kDirectSubRanges), want);
  for (const auto& k : in_keys)
    if (bpf_map_delete_elem(hash, &k) != 0 && errno != ENOENT)
      throw DataplaneError(fmt::format("deleting a moved subscriber: {}", errstr(errno)));
  spdlog::info("direct subscribers: layout changed; {} moved out of the array, {} into it",
               moved_out, in_keys.size());
}

}  // namespace xbng::agent
