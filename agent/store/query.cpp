// Reads: one subscriber or a page of them, with their counters.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "store/plan.h"

namespace xbng::agent {

using absl::Status;
using absl::StatusCode;

void SubscriberStore::fill_counters(uint32_t rec, SubscriberView* out) const {
  const SubscriberSpec& s = recs_[rec];
  SubscriberCounters& c = out->counters;
  c = SubscriberCounters{};
  out->has_counters = true;
  out->learned_mac.reset();
  struct xbng_subscriber v;
  if (maps_->lookup(MapId::kSubscribers, &s.key, &v) == 0) {
    c.up_packets = v.up_packets;
    c.up_bytes = v.up_bytes;
    if (!s.has_mac && (v.flags & XBNG_SUB_F_MAC_VALID)) {
      Mac m;
      std::memcpy(m.data(), v.mac, 6);
      out->learned_mac = m;
    }
  }
  std::vector<RouteKey> cl;
  claims_of(s, &cl);
  for (const auto& k : cl) {
    struct xbng_route r;
    if (maps_->lookup(k.map, k.b.data(), &r) == 0) {
      c.down_packets += r.down_packets;
      c.down_bytes += r.down_bytes;
    }
  }
  struct xbng_police pv;
  if (maps_->lookup(MapId::kPolice, &rec, &pv) == 0) {
    c.up_policed_packets = pv.up_policed_packets;
    c.up_policed_bytes = pv.up_policed_bytes;
    c.down_policed_packets = pv.down_policed_packets;
    c.down_policed_bytes = pv.down_policed_bytes;
  }
}

void SubscriberStore::view_of(uint32_t rec, bool counters, SubscriberView* out) const {
  out->spec = recs_[rec];
  out->has_counters = false;
  out->learned_mac.reset();
  if (counters) fill_counters(rec, out);
}

Status SubscriberStore::get(const SubKey& k, SubscriberView* out) const {
  std::shared_lock l(mu_);
  auto it = index_.find(key_rank(k));
  if (it == index_.end())
    return Status(StatusCode::kNotFound,
                  fmt::format("subscriber {} is not provisioned", key_to_string(k, ports_)));
  view_of(it->second, true, out);
  return absl::OkStatus();
}

void SubscriberStore::get_many(std::span<const SubKey> keys, std::vector<SubscriberView>* out,
                               std::vector<uint8_t>* found) const {
  const size_t n = keys.size();
  out->assign(n, SubscriberView{});
  found->assign(n, 0);
  std::shared_lock l(mu_);
  // Per map, the packed keys to read and the view each one counts into.
  std::vector<SubKey> skeys;
  std::vector<uint32_t> sat, pkeys, pat;
  std::vector<uint8_t> rkeys[kMapCount];
  std::vector<uint32_t> rat[kMapCount];
  std::vector<RouteKey> cl;
  for (size_t i = 0; i < n; ++i) {
    auto it = index_.find(key_rank(keys[i]));
    if (it == index_.end()) continue;
    (*found)[i] = 1;
    SubscriberView& v = (*out)[i];
    view_of(it->second, false, &v);
    v.has_counters = true;
    skeys.push_back(keys[i]);
    sat.push_back(static_cast<uint32_t>(i));
    pkeys.push_back(it->second);
    pat.push_back(static_cast<uint32_t>(i));
    cl.clear();
    claims_of(v.spec, &cl);
    for (const auto& k : cl) {
      const int m = static_cast<int>(k.map);
      rkeys[m].insert(rkeys[m].end(), k.b.begin(), k.b.begin() + k.size);
      rat[m].push_back(static_cast<uint32_t>(i));
    }
  }
  std::vector<uint8_t> hit;
  if (!skeys.empty()) {
    std::vector<struct xbng_subscriber> vals(skeys.size());
    hit.assign(skeys.size(), 0);
    maps_->lookup_many(MapId::kSubscribers, skeys.data(), skeys.size(), sizeof(SubKey), vals.data(),
                       sizeof vals[0], hit.data());
    for (size_t j = 0; j < skeys.size(); ++j) {
      if (!hit[j]) continue;
      SubscriberView& v = (*out)[sat[j]];
      v.counters.up_packets = vals[j].up_packets;
      v.counters.up_bytes = vals[j].up_bytes;
      if (!v.spec.has_mac && (vals[j].flags & XBNG_SUB_F_MAC_VALID)) {
        Mac m;
        std::memcpy(m.data(), vals[j].mac, 6);
        v.learned_mac = m;
      }
    }
  }
  for (MapId m : kRouteMaps) {
    const int mi = static_cast<int>(m);
    const size_t k = rat[mi].size();
    if (!k) continue;
    std::vector<struct xbng_route> vals(k);
    hit.assign(k, 0);
    maps_->lookup_many(m, rkeys[mi].data(), k, route_key_size(m), vals.data(), sizeof vals[0],
                       hit.data());
    for (size_t j = 0; j < k; ++j)
      if (hit[j]) {
        SubscriberCounters& c = (*out)[rat[mi][j]].counters;
        c.down_packets += vals[j].down_packets;
        c.down_bytes += vals[j].down_bytes;
      }
  }
  if (!pkeys.empty()) {
    std::vector<struct xbng_police> vals(pkeys.size());
    hit.assign(pkeys.size(), 0);
    maps_->lookup_many(MapId::kPolice, pkeys.data(), pkeys.size(), sizeof(uint32_t), vals.data(),
                       sizeof vals[0], hit.data());
    for (size_t j = 0; j < pkeys.size(); ++j)
      if (hit[j]) {
        SubscriberCounters& c = (*out)[pat[j]].counters;
        c.up_policed_packets = vals[j].up_policed_packets;
        c.up_policed_bytes = vals[j].up_policed_bytes;
        c.down_policed_packets = vals[j].down_policed_packets;
        c.down_policed_bytes = vals[j].down_policed_bytes;
      }
  }
}

// Ranges of key_rank matching the filter (port, outer VLAN; nullopt / 0 =
// any), in order; returns how many subscribers match (under mu_).
uint64_t SubscriberStore::key_ranges(std::optional<uint32_t> port, uint32_t outer,
                                     std::vector<std::pair<uint64_t, uint64_t>>* ranges) const {
  auto port_range = [&](uint32_t ifx) {
    if (outer)
      ranges->emplace_back((uint64_t{ifx} << 32) | (uint64_t{outer} << 16),
                           (uint64_t{ifx} << 32) | (uint64_t{outer} << 16) | 0xffff);
    else
      ranges->emplace_back(uint64_t{ifx} << 32, (uint64_t{ifx} << 32) | 0xffffffffull);
  };
  if (port) {
    port_range(*port);
    if (outer) {
      auto it = per_port_outer_.find((uint64_t{*port} << 16) | outer);
      return it != per_port_outer_.end() ? it->second : 0;
    }
    auto it = per_port_.find(*port);
    return it != per_port_.end() ? it->second : 0;
  }
  if (outer) {
    std::vector<uint32_t> ifxs;
    for (const auto& [ifx, n] : per_port_)
      if (n) ifxs.push_back(ifx);
    std::sort(ifxs.begin(), ifxs.end());
    uint64_t total = 0;
    for (uint32_t ifx : ifxs) {
      port_range(ifx);
      if (auto it = per_port_outer_.find((uint64_t{ifx} << 16) | outer);
          it != per_port_outer_.end())
        total += it->second;
    }
    return total;
  }
  ranges->emplace_back(0, ~0ull);
  return index_.size();
}

Status SubscriberStore::list(const ListQuery& q, std::vector<SubscriberView>* out,
                             std::string* next_token, uint64_t* total) const {
  uint32_t page = q.page_size == 0 ? 1000 : std::min<uint32_t>(q.page_size, 10000);
  uint64_t after = 0;
  bool has_after = false;
  if (!q.page_token.empty()) {
    char* end = nullptr;
    errno = 0;
    after = std::strtoull(q.page_token.c_str(), &end, 16);
    if (errno || *end || q.page_token.size() != 16)
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("field page_token: {} is not a token returned by "
                                "ListSubscribers",
                                quote_value(q.page_token)));
    has_after = true;
  }
  std::optional<uint32_t> port;
  if (!q.port.empty()) {
    port = ports_.access_ifindex(q.port);
    if (!port)
      return Status(
          StatusCode::kInvalidArgument,
          fmt::format("field port: {} is not a configured access port", quote_value(q.port)));
  }
  if (q.outer > 4094)
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("field outer_vlan: \"{}\" is outside 1..4094 (0 = any)", q.outer));
  std::shared_lock l(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  *total = key_ranges(port, q.outer, &ranges);
  next_token->clear();
  out->clear();
  uint64_t last = 0;
  bool full = false;
  for (const auto& [lo, hi] : ranges) {
    if (has_after && after >= hi) continue;
    auto it = has_after && after >= lo ? index_.upper_bound(after) : index_.lower_bound(lo);
    for (; it != index_.end() && it->first <= hi; ++it) {
      if (out->size() == page) {  // a further match exists: hand out a token
        *next_token = fmt::format("{:016x}", last);
        full = true;
        break;
      }
      out->emplace_back();
      view_of(it->second, q.with_counters, &out->back());
      last = it->first;
    }
    if (full) break;
  }
  return absl::OkStatus();
}

}  // namespace xbng::agent
