// Reads: one subscriber or a page of them, as protos with their counters.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "store/plan.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

using grpc::Status;
using grpc::StatusCode;

void SubscriberStore::fill_counters(uint32_t rec, xbng::v1::Subscriber* out) const {
  const SubscriberSpec& s = recs_[rec];
  auto* c = out->mutable_counters();
  struct xbng_subscriber v;
  if (maps_->lookup(MapId::kSubscribers, &s.key, &v) == 0) {
    c->set_up_packets(v.up_packets);
    c->set_up_bytes(v.up_bytes);
    if (!s.has_mac && (v.flags & XBNG_SUB_F_MAC_VALID)) {
      out->set_mac(format_mac(v.mac));
      out->set_mac_learned(true);
    }
  }
  std::vector<RouteKey> cl;
  claims_of(s, &cl);
  uint64_t pk = 0, by = 0;
  for (const auto& k : cl) {
    struct xbng_route r;
    if (maps_->lookup(k.map, k.b.data(), &r) == 0) {
      pk += r.down_packets;
      by += r.down_bytes;
    }
  }
  c->set_down_packets(pk);
  c->set_down_bytes(by);
  struct xbng_police pv;
  if (maps_->lookup(MapId::kPolice, &rec, &pv) == 0) {
    c->set_up_policed_packets(pv.up_policed_packets);
    c->set_up_policed_bytes(pv.up_policed_bytes);
    c->set_down_policed_packets(pv.down_policed_packets);
    c->set_down_policed_bytes(pv.down_policed_bytes);
  }
}

void SubscriberStore::to_proto(uint32_t rec, bool counters, xbng::v1::Subscriber* out) const {
  spec_to_proto(recs_[rec], ports_, out);
  if (counters) fill_counters(rec, out);
}

Status SubscriberStore::get(const xbng::v1::SubscriberKey& key, xbng::v1::Subscriber* out) {
  SubKey k;
  if (Status st = validate_key(key, ports_, "key", &k); !st.ok()) return st;
  std::shared_lock l(mu_);
  auto it = index_.find(key_rank(k));
  if (it == index_.end())
    return Status(StatusCode::NOT_FOUND,
                  fmt::format("subscriber {} is not provisioned", key_to_string(k, ports_)));
  to_proto(it->second, true, out);
  return Status::OK;
}

Status SubscriberStore::list(const ListQuery& q, std::vector<xbng::v1::Subscriber>* out,
                             std::string* next_token, uint64_t* total) {
  uint32_t page = q.page_size == 0 ? 1000 : std::min<uint32_t>(q.page_size, 10000);
  uint64_t after = 0;
  bool has_after = false;
  if (!q.page_token.empty()) {
    char* end = nullptr;
    errno = 0;
    after = std::strtoull(q.page_token.c_str(), &end, 16);
    if (errno || *end || q.page_token.size() != 16)
      return Status(StatusCode::INVALID_ARGUMENT,
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
          StatusCode::INVALID_ARGUMENT,
          fmt::format("field port: {} is not a configured access port", quote_value(q.port)));
  }
  if (q.outer > 4094)
    return Status(StatusCode::INVALID_ARGUMENT,
                  fmt::format("field outer_vlan: \"{}\" is outside 1..4094 (0 = any)", q.outer));
  std::shared_lock l(mu_);
  // Ranges of key_rank matching the filter, in order.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  auto port_range = [&](uint32_t ifx) {
    if (q.outer)
      ranges.emplace_back((uint64_t{ifx} << 32) | (uint64_t{q.outer} << 16),
                          (uint64_t{ifx} << 32) | (uint64_t{q.outer} << 16) | 0xffff);
    else
      ranges.emplace_back(uint64_t{ifx} << 32, (uint64_t{ifx} << 32) | 0xffffffffull);
  };
  if (port) {
    port_range(*port);
    *total = q.outer ? (per_port_outer_.contains((uint64_t{*port} << 16) | q.outer)
                            ? per_port_outer_.at((uint64_t{*port} << 16) | q.outer)
                            : 0)
                     : (per_port_.contains(*port) ? per_port_.at(*port) : 0);
  } else if (q.outer) {
    std::vector<uint32_t> ifxs;
    for (const auto& [ifx, n] : per_port_)
      if (n) ifxs.push_back(ifx);
    std::sort(ifxs.begin(), ifxs.end());
    *total = 0;
    for (uint32_t ifx : ifxs) {
      port_range(ifx);
      if (auto it = per_port_outer_.find((uint64_t{ifx} << 16) | q.outer);
          it != per_port_outer_.end())
        *total += it->second;
    }
  } else {
    ranges.emplace_back(0, ~0ull);
    *total = index_.size();
  }
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
      to_proto(it->second, q.with_counters, &out->back());
      last = it->first;
    }
    if (full) break;
  }
  return Status::OK;
}

}  // namespace xbng::agent
