// Planning: every entry of a change checked against the index, the
// reserved addresses and the other entries of the same change, before any
// map is written.
#include <fmt/format.h>

#include "store/plan.h"

namespace xbng::agent {

namespace {

// Whether `b` provisions what `a` does, whoever provisioned each.
bool same_but_origin(const SubscriberSpec& a, const SubscriberSpec& b) {
  if (a.origin == b.origin) return false;  // same_provisioning said no already
  SubscriberSpec c = b;
  c.origin = a.origin;
  return a.same_provisioning(c);
}

}  // namespace

using absl::Status;
using absl::StatusCode;

namespace {

std::string where_of(bool atomic, size_t input) {
  return atomic ? fmt::format("subscribers[{}]", input) : fmt::format("entry {}", input);
}

}  // namespace

Status SubscriberStore::overlap(const RouteKey& c, uint64_t rank, const SubKey& key,
                                const absl::flat_hash_map<uint64_t, size_t>& released,
                                const Plan& p, const std::vector<SubscriberSpec>& specs,
                                bool atomic, size_t input) const {
  const Span sp = span_of(c.as_prefix());
  const int fi = sp.fi;
  auto foreign = [&](uint32_t rec) {
    const SubKey& ok = recs_[rec].key;
    return !(ok == key) && !released.contains(key_rank(ok));
  };
  auto owned_err = [&](const char* ofield, const std::string& ovalue, uint32_t rec) {
    auto [field, value] = c.describe();
    return Status(
        StatusCode::kFailedPrecondition,
        fmt::format("{}: field {}: \"{}\" overlaps {} \"{}\" owned by subscriber {}",
                    where_of(atomic, input), field, value, ofield, ovalue, owner_name(rec)));
  };
  auto claimed_err = [&](const RouteKey& oc, uint64_t orank) {
    auto [field, value] = c.describe();
    auto [ofield, ovalue] = oc.describe();
    return Status(StatusCode::kFailedPrecondition,
                  fmt::format("{}: field {}: \"{}\" overlaps {} \"{}\" claimed by subscriber {} in "
                              "this request",
                              where_of(atomic, input), field, value, ofield, ovalue,
                              key_to_string(key_of_rank(orank), ports_)));
  };
  const char* pfield = fi ? "ipv6_prefixes" : "ipv4_prefixes";
  // Inside a shorter prefix: one exact lookup per prefix length in use.
  for (uint32_t l = kMinPrefix[fi]; l <= kMaxPrefix[fi] && l < sp.len; ++l) {
    const bool in_index = claims_.has_prefix_len(fi, l), in_plan = p.len_count[fi][l] != 0;
    if (!in_index && !in_plan) continue;
    const Prefix m = prefix_at(fi, sp.masked(l), l);
    const RouteKey mk = RouteKey::prefix(m);
    if (in_index) {
      const int64_t o = claims_.owner_of(mk);
      if (o >= 0 && foreign(static_cast<uint32_t>(o)))
        return owned_err(pfield, format_prefix(m), static_cast<uint32_t>(o));
    }
    if (in_plan)
      if (auto pc = p.claims.find(mk); pc != p.claims.end() && pc->second != rank)
        return claimed_err(mk, pc->second);
  }
  if (sp.host) return absl::OkStatus();
  // Contains a longer prefix or a host: range queries on the ordered indexes.
  if (auto in = claims_.first_inside(sp, foreign)) {
    if (!in->host) return owned_err(pfield, format_prefix(in->prefix), in->rec);
    const SubscriberSpec& o = recs_[in->rec];
    auto [f, v] =
        (fi == 0 ? RouteKey::host_v4(o.ipv4) : RouteKey::host_v6(o.ipv6.data())).describe();
    return owned_err(f, v, in->rec);
  }
  const uint64_t end = sp.end();
  const auto& po = p.ord[fi];
  for (auto it = po.lower_bound({sp.start, 0, 0, 0}); it != po.end() && std::get<0>(*it) <= end;
       ++it) {
    const auto& [ostart, olen, orank, where_in] = *it;
    if (orank == rank) continue;
    if (olen == sp.len && ostart == sp.start) continue;  // the same prefix: exact check
    std::vector<RouteKey> ocl;
    claims_of(specs[where_in >> 32], &ocl);
    return claimed_err(ocl[where_in & 0xffffffff], orank);
  }
  return absl::OkStatus();
}

Status SubscriberStore::check_entry(const SubscriberSpec& s, const std::vector<RouteKey>& cl,
                                    bool atomic, size_t input,
                                    const absl::flat_hash_map<uint64_t, size_t>& released,
                                    const Plan& p, const std::vector<SubscriberSpec>& specs,
                                    uint64_t* adds, uint64_t* owned, uint64_t* own) const {
  const uint64_t rank = key_rank(s.key);
  for (size_t ci = 0; ci < cl.size(); ++ci) {
    const RouteKey& c = cl[ci];
    if (reserved_)
      if (const auto* r = reserved_->find(c.as_prefix())) {
        auto [field, value] = c.describe();
        return Status(
            StatusCode::kFailedPrecondition,
            fmt::format("{}: field {}: \"{}\" conflicts with {}: {} is reserved, never "
                        "a subscriber's",
                        where_of(atomic, input), field, value, r->what, format_prefix(r->prefix)));
      }
    if (auto pc = p.claims.find(c); pc != p.claims.end() && pc->second != rank) {
      auto [field, value] = c.describe();
      return Status(StatusCode::kFailedPrecondition,
                    fmt::format("{}: field {}: \"{}\" is also claimed by subscriber {} in this "
                                "request",
                                where_of(atomic, input), field, value,
                                key_to_string(key_of_rank(pc->second), ports_)));
    }
    const int64_t o = claims_.owner_of(c);
    if (o >= 0 && !(recs_[o].key == s.key) && !released.contains(key_rank(recs_[o].key))) {
      auto [field, value] = c.describe();
      return Status(
          StatusCode::kFailedPrecondition,
          fmt::format("{}: field {}: \"{}\" is owned by subscriber {}", where_of(atomic, input),
                      field, value, owner_name(static_cast<uint32_t>(o))));
    }
    if (Status err = overlap(c, rank, s.key, released, p, specs, atomic, input); !err.ok())
      return err;
    if (o < 0) {
      ++adds[static_cast<int>(c.map)];
    } else if (ci < 64) {
      *owned |= uint64_t{1} << ci;
      if (recs_[o].key == s.key) *own |= uint64_t{1} << ci;
    }
  }
  return absl::OkStatus();
}

Status SubscriberStore::check_capacity(const Plan& p, const uint64_t* adds, bool atomic,
                                       size_t input) const {
  for (int m = 0; m < kMapCount; ++m) {
    if (!adds[m]) continue;
    const uint64_t cur = map_entries_locked(static_cast<MapId>(m));
    const uint32_t max = maps_->max_entries(static_cast<MapId>(m));
    if (cur + p.adds[m] + adds[m] > max)
      return Status(StatusCode::kResourceExhausted,
                    fmt::format("{}: map {} is full: {} entries + {} to add > {} max_entries "
                                "(--max-subscribers)",
                                where_of(atomic, input), map_name(static_cast<MapId>(m)), cur,
                                p.adds[m] + adds[m], max));
  }
  return absl::OkStatus();
}

void SubscriberStore::add_to_plan(Plan* p, const SubscriberSpec& s, const std::vector<RouteKey>& cl,
                                  size_t i, const uint64_t* adds) {
  const uint64_t rank = key_rank(s.key);
  for (size_t ci = 0; ci < cl.size(); ++ci) {
    const RouteKey& c = cl[ci];
    p->claims[c] = rank;
    const Span sp = span_of(c.as_prefix());
    if (!sp.host) ++p->len_count[sp.fi][sp.len];
    p->ord[sp.fi].insert({sp.start, sp.len, rank, uint64_t{i} << 32 | ci});
  }
  for (int m = 0; m < kMapCount; ++m) p->adds[m] += adds[m];
}

size_t SubscriberStore::plan(const std::vector<SubscriberSpec>& specs,
                             const std::vector<size_t>& input_index, Mode mode, Plan* p,
                             Status* atomic_error,
                             std::vector<std::pair<size_t, Status>>* failures) {
  const bool atomic = mode == Mode::kAtomic;
  absl::flat_hash_map<uint64_t, size_t> batch_keys;
  if (atomic) {
    for (size_t i = 0; i < specs.size(); ++i) {
      auto [it, ok] = batch_keys.emplace(key_rank(specs[i].key), i);
      if (!ok) {
        *atomic_error =
            Status(StatusCode::kInvalidArgument,
                   fmt::format("{}: key {} appears twice in the request (also subscribers[{}])",
                               where_of(true, input_index[i]), key_to_string(specs[i].key, ports_),
                               input_index[it->second]));
        return specs.size();
      }
    }
  }
  p->claims.reserve(p->claims.size() + specs.size() * 3);
  p->keys.reserve(p->keys.size() + specs.size());
  // Reserved, not grown: at the largest request (~175K entries of ~250
  // bytes) doubling would hold the old and the new array at once, 1.5x
  // more at the peak than the entries themselves.
  p->entries.reserve(p->entries.size() + specs.size());
  p->accepted.reserve(p->accepted.size() + specs.size());
  std::vector<RouteKey> cl;
  for (size_t i = 0; i < specs.size(); ++i) {
    // The owner tables are large and accessed at random: overlap the misses.
    if (i + kPrefetchAhead < specs.size()) claims_.prefetch(specs[i + kPrefetchAhead]);
    const SubscriberSpec& s = specs[i];
    const uint64_t rank = key_rank(s.key);
    if (!atomic && p->keys.contains(rank)) return i;  // needs the earlier entry applied first
    auto it = index_.find(rank);
    const int64_t old = it == index_.end() ? int64_t{-1} : int64_t{it->second};
    // Under "follow", an upsert without MAC is a request to learn again.
    // A resync restates what a source of truth holds: an entry that differs
    // only in its origin (say, adopted from maps older than the origin
    // field) is left alone, and so is a MAC it learned.
    const bool unchanged =
        !p->force && old >= 0 &&
        (recs_[old].same_provisioning(s) || (p->resync && same_but_origin(recs_[old], s))) &&
        (s.has_mac || p->resync || effective_mac_policy(s) != XBNG_MAC_POLICY_FOLLOW);
    cl.clear();
    claims_of(s, &cl);
    uint64_t adds[kMapCount] = {};
    uint64_t owned = 0, own = 0;
    Status err = check_entry(s, cl, atomic, input_index[i], atomic ? batch_keys : p->keys, *p,
                             specs, adds, &owned, &own);
    if (err.ok() && old < 0) ++adds[static_cast<int>(MapId::kSubscribers)];
    if (err.ok()) err = check_capacity(*p, adds, atomic, input_index[i]);
    if (!err.ok()) {
      if (atomic) {
        *atomic_error = err;
        return specs.size();
      }
      failures->emplace_back(input_index[i], err);
      continue;
    }
    add_to_plan(p, s, cl, i, adds);
    p->keys[rank] = i;
    p->accepted.push_back(input_index[i]);
    if (unchanged) {
      ++p->unchanged;
      continue;
    }
    (old < 0 ? p->created : p->updated)++;
    p->entries.push_back(Plan::Entry{input_index[i], s, old, {cl.begin(), cl.end()}, owned, own});
  }
  return specs.size();
}

}  // namespace xbng::agent
