// SubscriberStore: the facade. Records, the key index and per-port counts;
// the single-entry operations (bindings, MAC learning and follow); the
// request-level operations, which validate, plan (planner.cpp) and apply
// (writer.cpp) under the store's lock; deletes.
#include "store/store.h"

#include <absl/cleanup/cleanup.h>
#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "store/plan.h"

namespace xbng::agent {

using absl::Status;
using absl::StatusCode;

SubscriberStore::SubscriberStore(const StoreMaps& maps, PortResolver ports, EventHub* hub)
    : SubscriberStore(std::make_unique<BpfMapOps>(maps), std::move(ports), hub) {}

SubscriberStore::SubscriberStore(std::unique_ptr<MapOps> maps, PortResolver ports, EventHub* hub)
    : maps_(std::move(maps)), ports_(std::move(ports)), hub_(hub) {
  // Reserve up front: growing a table at 1M entries would briefly hold the
  // old and the new table (an RSS peak). Untouched slots are not resident.
  const size_t cap = maps_->max_entries(MapId::kSubscribers);
  claims_.reserve(cap);
  // Reserved whole for the same reason (and to skip the copies of growth);
  // pages are only resident once used.
  recs_.reserve(cap);
}

void SubscriberStore::set_reserved(std::shared_ptr<const ReservedSet> r) {
  std::vector<ReservedConflict> found;
  uint64_t total = 0;
  {
    std::unique_lock l(mu_);
    reserved_ = std::move(r);
    if (reserved_) {
      std::vector<RouteKey> cl;
      for (const auto& [rank, rec] : index_) {
        cl.clear();
        claims_of(recs_[rec], &cl);
        for (const auto& c : cl)
          if (const auto* e = reserved_->find(c.as_prefix())) {
            ++total;
            if (found.size() >= kMaxReportedConflicts) continue;
            auto [field, value] = c.describe();
            found.push_back({recs_[rec].key, field, value,
                             fmt::format("{} ({})", e->what, format_prefix(e->prefix))});
          }
      }
    }
  }
  for (size_t i = 0; i < found.size() && i < 20; ++i)
    spdlog::warn("reserved address conflict: subscriber {} field {} \"{}\" overlaps {}",
                 key_to_string(found[i].key, ports_), found[i].field, found[i].value,
                 found[i].reserved);
  if (total)
    spdlog::warn(
        "{} provisioned address(es)/prefix(es) overlap reserved addresses (router, "
        "gateways, uplink subnets, security.reserved): traffic for them may go to the "
        "wrong place; change or delete those subscribers (GetStats lists the first {})",
        total, kMaxReportedConflicts);
  std::lock_guard l(conflicts_mu_);
  if (conflicts_total_ && !total) spdlog::info("no reserved address conflicts any more");
  conflicts_ = std::move(found);
  conflicts_total_ = total;
}

std::vector<ReservedConflict> SubscriberStore::reserved_conflicts(uint64_t* total) const {
  std::lock_guard l(conflicts_mu_);
  *total = conflicts_total_;
  return conflicts_;
}

size_t SubscriberStore::size() const {
  std::shared_lock l(mu_);
  return index_.size();
}

bool SubscriberStore::binding(const SubKey& k, SubscriberSpec* out,
                              std::optional<Mac>* learned) const {
  std::shared_lock l(mu_);
  auto it = index_.find(key_rank(k));
  if (it == index_.end()) return false;
  *out = recs_[it->second];
  if (!learned) return true;
  learned->reset();
  if (!out->has_mac) {
    struct xbng_subscriber v;
    if (maps_->lookup(MapId::kSubscribers, &k, &v) == 0 && (v.flags & XBNG_SUB_F_MAC_VALID)) {
      Mac m;
      std::memcpy(m.data(), v.mac, 6);
      *learned = m;
    }
  }
  return true;
}

void SubscriberStore::bindings_many(std::span<const SubKey> keys, std::vector<SubscriberSpec>* out,
                                    std::vector<std::optional<Mac>>* learned,
                                    std::vector<uint8_t>* found) const {
  const size_t n = keys.size();
  out->assign(n, SubscriberSpec{});
  learned->assign(n, std::nullopt);
  found->assign(n, 0);
  std::vector<SubKey> read;  // provisioned without MAC: the map may hold a learned one
  std::vector<uint32_t> at;
  {
    std::shared_lock l(mu_);
    for (size_t i = 0; i < n; ++i) {
      auto it = index_.find(key_rank(keys[i]));
      if (it == index_.end()) continue;
      (*found)[i] = 1;
      (*out)[i] = recs_[it->second];
      if ((*out)[i].has_mac) continue;
      read.push_back(keys[i]);
      at.push_back(static_cast<uint32_t>(i));
    }
  }
  if (read.empty()) return;
  // The map read without the store's lock: a batch of keys takes a while,
  // and the writers (upserts of the bring-up's workers) must not wait for
  // it. A subscriber deleted meanwhile reads as having learned nothing.
  std::vector<struct xbng_subscriber> vals(read.size());
  std::vector<uint8_t> hit(read.size(), 0);
  maps_->lookup_many(MapId::kSubscribers, read.data(), read.size(), sizeof(SubKey), vals.data(),
                     sizeof vals[0], hit.data());
  for (size_t j = 0; j < read.size(); ++j) {
    if (!hit[j] || !(vals[j].flags & XBNG_SUB_F_MAC_VALID)) continue;
    Mac m;
    std::memcpy(m.data(), vals[j].mac, 6);
    (*learned)[at[j]] = m;
  }
}

std::optional<SubKey> SubscriberStore::owner_of_ipv4(uint32_t be) const {
  std::shared_lock l(mu_);
  const int64_t rec = claims_.owner_of(RouteKey::host_v4(be));
  if (rec < 0 || static_cast<size_t>(rec) >= recs_.size()) return std::nullopt;
  return recs_[static_cast<size_t>(rec)].key;
}

Status SubscriberStore::learn_mac(const SubKey& k, const Mac& mac) {
  std::unique_lock l(mu_);
  auto it = index_.find(key_rank(k));
  if (it == index_.end())
    return Status(StatusCode::kNotFound, key_to_string(k, ports_) + ": not provisioned");
  const SubscriberSpec& s = recs_[it->second];
  if (s.has_mac) {
    if (s.mac == mac) return absl::OkStatus();
    return Status(StatusCode::kFailedPrecondition,
                  key_to_string(k, ports_) + ": provisioned with another MAC");
  }
  struct xbng_subscriber v;
  if (int rc = maps_->lookup(MapId::kSubscribers, &k, &v))
    return Status(StatusCode::kInternal, fmt::format("{}: reading the subscriber entry: {}",
                                                     key_to_string(k, ports_), std::strerror(-rc)));
  if (v.flags & XBNG_SUB_F_MAC_VALID) {
    if (std::memcmp(v.mac, mac.data(), 6) == 0) return absl::OkStatus();
    return Status(
        StatusCode::kFailedPrecondition,
        fmt::format("{}: MAC {} already learned", key_to_string(k, ports_), format_mac(v.mac)));
  }
  std::memcpy(v.mac, mac.data(), 6);
  v.flags |= XBNG_SUB_F_MAC_VALID;
  if (int rc = maps_->update(MapId::kSubscribers, &k, &v, BPF_EXIST))
    return Status(StatusCode::kInternal, fmt::format("{}: writing the learned MAC: {}",
                                                     key_to_string(k, ports_), std::strerror(-rc)));
  publish(EventType::kMacLearned, k, &mac);
  if (mac_hook_) mac_hook_(k, mac);
  return absl::OkStatus();
}

bool SubscriberStore::apply_replica_mac(const SubKey& k, const Mac& mac) {
  {
    std::unique_lock l(mu_);
    auto it = index_.find(key_rank(k));
    if (it == index_.end() || recs_[it->second].has_mac) return false;
    struct xbng_subscriber v;
    if (maps_->lookup(MapId::kSubscribers, &k, &v)) return false;
    if ((v.flags & XBNG_SUB_F_MAC_VALID) && std::memcmp(v.mac, mac.data(), 6) == 0) return false;
    std::memcpy(v.mac, mac.data(), 6);
    v.flags |= XBNG_SUB_F_MAC_VALID;
    if (int rc = maps_->update(MapId::kSubscribers, &k, &v, BPF_EXIST)) {
      spdlog::warn("{}: writing the replicated MAC: {}", key_to_string(k, ports_),
                   std::strerror(-rc));
      return false;
    }
  }
  follow_mac(k, mac);
  return true;
}

uint64_t SubscriberStore::map_entries(MapId id) const {
  std::shared_lock l(mu_);
  return map_entries_locked(id);
}

void SubscriberStore::place_record(uint32_t rec, SubscriberSpec&& s) {
  // The caller owns the slot (taken from free_ or past the end); a rebuild
  // recomputes free_ once all records are placed.
  if (rec >= recs_.size()) recs_.resize(rec + 1);
  recs_[rec] = std::move(s);
}

uint32_t SubscriberStore::alloc_record(SubscriberSpec&& s) {
  if (!free_.empty()) {
    uint32_t r = free_.back();
    free_.pop_back();
    recs_[r] = std::move(s);
    return r;
  }
  recs_.push_back(std::move(s));
  return static_cast<uint32_t>(recs_.size() - 1);
}

void SubscriberStore::count_key(const SubKey& k, int delta) {
  per_port_[k.ifindex] += delta;
  per_port_outer_[(uint64_t{k.ifindex} << 16) | k.outer_vid] += delta;
  if (per_port_outer_[(uint64_t{k.ifindex} << 16) | k.outer_vid] == 0)
    per_port_outer_.erase((uint64_t{k.ifindex} << 16) | k.outer_vid);
}

std::string SubscriberStore::owner_name(uint32_t rec) const {
  return key_to_string(recs_[rec].key, ports_);
}

void SubscriberStore::publish(EventType type, const SubKey& k, const Mac* mac) {
  if (!hub_ || !hub_->has_watchers()) return;
  AgentEvent e;
  e.type = type;
  e.key = k;
  if (mac) {
    e.has_mac = true;
    e.mac = *mac;
  }
  e.timestamp_unix_ns = unix_now_ns();
  hub_->publish(e);
}

uint8_t SubscriberStore::effective_mac_policy(const SubscriberSpec& s) const {
  if (s.mac_policy != XBNG_MAC_POLICY_DEFAULT) return s.mac_policy;
  struct xbng_port port {};
  if (maps_->lookup(MapId::kPorts, &s.key.ifindex, &port) == 0 &&
      port.mac_policy != XBNG_MAC_POLICY_DEFAULT)
    return port.mac_policy;
  return XBNG_MAC_POLICY_LEARN_ONCE;
}

void SubscriberStore::follow_mac(const SubKey& k, const Mac& mac) {
  std::unique_lock l(mu_);
  auto it = index_.find(key_rank(k));
  if (it == index_.end()) return;
  std::vector<RouteKey> cl;
  claims_of(recs_[it->second], &cl);
  size_t moved = 0;
  for (const auto& c : cl) {
    struct xbng_route r;
    if (maps_->lookup(c.map, c.b.data(), &r) != 0 || !(r.sub == k)) continue;
    if ((r.flags & XBNG_ROUTE_F_MAC_VALID) && std::memcmp(r.mac, mac.data(), 6) == 0) continue;
    std::memcpy(r.mac, mac.data(), 6);
    r.flags |= XBNG_ROUTE_F_MAC_VALID;
    r.credit = 0;  // what the fast path spends meanwhile must not be spent twice
    if (int rc = maps_->update(c.map, c.b.data(), &r, BPF_EXIST))
      rollback_failed(c.map, 1, rc, "mac follow: moving a route to the new MAC");
    else
      ++moved;
  }
  spdlog::info("subscriber {}: MAC moved to {} (mac policy follow); {} route(s) follow it",
               key_to_string(k, ports_), format_mac(mac.data()), moved);
}

uint64_t SubscriberStore::map_entries_locked(MapId id) const {
  return id == MapId::kSubscribers ? index_.size() : claims_.entries(id);
}

// ---- RPC-level operations ---------------------------------------------------

Status SubscriberStore::upsert(std::vector<SubscriberSpec> specs, UpsertResult* out) {
  std::vector<size_t> idx(specs.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::unique_lock l(mu_);
  Plan p;
  Status err;
  plan(specs, idx, Mode::kAtomic, &p, &err, nullptr);
  if (!err.ok()) return err;
  if (Status st = apply(p); !st.ok()) return st;
  out->created = p.created;
  out->updated = p.updated;
  out->unchanged = p.unchanged;
  return absl::OkStatus();
}

Status SubscriberStore::remove(const std::vector<SubKey>& keys, uint64_t* deleted,
                               uint64_t* not_found) {
  std::unique_lock l(mu_);
  return remove_locked(keys, deleted, not_found);
}

// The indexed keys among `ks` (each once), and the map keys of their claims.
struct SubscriberStore::Removal {
  std::vector<uint32_t> recs;
  std::vector<SubKey> keys;
  std::vector<uint8_t> dels[kMapCount];
};

void SubscriberStore::collect_removal(const std::vector<SubKey>& ks, Removal* r,
                                      uint64_t* not_found) const {
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(ks.size());
  r->recs.reserve(ks.size());
  std::vector<RouteKey> cl;
  for (const auto& k : ks) {
    const uint64_t rank = key_rank(k);
    if (!seen.insert(rank).second) continue;
    auto it = index_.find(rank);
    if (it == index_.end()) {
      ++*not_found;
      continue;
    }
    r->recs.push_back(it->second);
    r->keys.push_back(k);
    cl.clear();
    claims_of(recs_[it->second], &cl);
    for (const auto& c : cl) {
      auto& d = r->dels[static_cast<int>(c.map)];
      d.insert(d.end(), c.b.begin(), c.b.begin() + c.size);
    }
  }
}

// Routes first: downstream stops before the subscriber disappears. The
// route maps are independent: large deletions use two threads.
Status SubscriberStore::delete_removal(Removal& r) {
  int drc[std::size(kRouteMaps)] = {};
  auto delete_map = [&](size_t mi) {
    const MapId m = kRouteMaps[mi];
    auto& d = r.dels[static_cast<int>(m)];
    if (d.empty()) return;
    const size_t key_size = route_key_size(m);
    drc[mi] = maps_->delete_many(m, d.data(), d.size() / key_size, key_size);
  };
  run_pair(
      r.recs.size() >= kParallelApply,
      [&] {
        delete_map(0);
        delete_map(2);
        crash_point("delete", "routes-partial");
        delete_map(3);
      },
      [&] {
        delete_map(1);
        delete_map(4);
      });
  crash_point("delete", "routes");
  for (size_t mi = 0; mi < std::size(kRouteMaps); ++mi)
    if (drc[mi])
      return kernel_status(drc[mi], fmt::format("deleting from map {}", map_name(kRouteMaps[mi])));
  if (!r.keys.empty())
    if (int rc =
            maps_->delete_many(MapId::kSubscribers, r.keys.data(), r.keys.size(), sizeof(SubKey)))
      return kernel_status(rc, "deleting from map subscribers");
  crash_point("delete", "subscribers");
  return absl::OkStatus();
}

// The deleted subscribers out of the index (their records freed).
void SubscriberStore::forget(const std::vector<uint32_t>& recs) {
  std::vector<RouteKey> cl;
  for (size_t i = 0; i < recs.size(); ++i) {
    if (i + kPrefetchAhead < recs.size()) claims_.prefetch(recs_[recs[i + kPrefetchAhead]]);
    const uint32_t rec = recs[i];
    SubscriberSpec& s = recs_[rec];
    cl.clear();
    claims_of(s, &cl);
    for (const auto& c : cl) claims_.erase_owner(c, rec);
    index_.erase(key_rank(s.key));
    count_key(s.key, -1);
    publish(EventType::kSubscriberRemoved, s.key, s.has_mac ? &s.mac : nullptr);
    if (change_hook_) change_hook_(s.key, nullptr, false);
    s = SubscriberSpec{};
    free_.push_back(rec);
  }
}

Status SubscriberStore::remove_locked(const std::vector<SubKey>& ks, uint64_t* deleted,
                                      uint64_t* not_found) {
  *deleted = *not_found = 0;
  Removal r;
  collect_removal(ks, &r, not_found);
  if (r.recs.empty()) return absl::OkStatus();
  // Write-ahead: a delete interrupted by a crash is completed on
  // adoption. Cleared once the maps are consistent again.
  {
    JournalIntent intent;
    intent.op = JournalIntent::Op::kDelete;
    intent.created.reserve(r.recs.size());
    for (uint32_t rec : r.recs) intent.created.push_back(recs_[rec].key);
    if (Status st = journal_begin(intent); !st.ok()) return st;
  }
  auto clear_journal = absl::MakeCleanup([this] { journal_clear(); });
  crash_point("delete", "journal");
  if (removal_hook_)
    for (uint32_t rec : r.recs)
      if (recs_[rec].origin == removal_origin_) {
        SubscriberView v;
        view_of(rec, /*counters=*/true, &v);
        removal_hook_(v);
      }
  if (Status st = delete_removal(r); !st.ok()) {
    // A refused delete leaves the intent pending: the next adoption completes it.
    std::move(clear_journal).Cancel();
    return st;
  }
  forget(r.recs);
  *deleted = r.recs.size();
  return absl::OkStatus();
}

}  // namespace xbng::agent
