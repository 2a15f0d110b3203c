// Adoption: the index rebuilt from the maps a previous agent left pinned
// (decoded with the writer's codec), orphan routes removed, missing host
// routes reinstalled, and a change the previous agent left pending in the
// journal resolved.
#include <absl/cleanup/cleanup.h>
#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "store/codec.h"
#include "store/plan.h"

namespace xbng::agent {

using absl::Status;
using absl::StatusCode;

// ---- journal -------------------------------------------------------------------

void SubscriberStore::set_journal(std::unique_ptr<Journal> j) {
  std::unique_lock l(mu_);
  journal_ = std::move(j);
}

std::string SubscriberStore::discard_journal() {
  std::unique_lock l(mu_);
  if (!journal_) return "";
  std::string err;
  auto in = journal_->pending(&err);
  journal_clear();
  if (in)
    return fmt::format(
        "journal {}: a change of {} subscribers left pending is void: the maps are "
        "new",
        journal_->path(), in->size());
  return err.empty() ? "" : "journal " + err + " (discarded: the maps are new)";
}

Status SubscriberStore::journal_begin(const JournalIntent& intent) {
  if (!journal_ || recovering_) return absl::OkStatus();
  if (int rc = journal_->begin(intent))
    return kernel_status(
        rc, fmt::format("writing the store journal {} (nothing was changed)", journal_->path()));
  return absl::OkStatus();
}

void SubscriberStore::journal_clear() {
  if (!journal_ || recovering_) return;
  if (int rc = journal_->clear())
    spdlog::error("store journal {}: clearing: {}", journal_->path(), std::strerror(-rc));
}

std::string SubscriberStore::recover(const JournalIntent& in) {
  const char* what = in.op == JournalIntent::Op::kDelete ? "delete" : "upsert";
  if (in.op == JournalIntent::Op::kDelete) {
    // Rolled forward: every key removed whole, as requested.
    std::vector<SubKey> keys = in.created;
    for (const auto& s : in.before) keys.push_back(s.key);  // (none are written)
    uint64_t deleted = 0, gone = 0;
    Status st = remove_locked(keys, &deleted, &gone);
    if (!st.ok())
      return fmt::format(
          "journal: an interrupted delete of {} subscribers could NOT be "
          "completed: {}",
          keys.size(), status_message(st));
    return fmt::format(
        "journal: an interrupted delete of {} subscribers was rolled forward: {} "
        "removed now, {} were already gone",
        keys.size(), deleted, gone);
  }
  // An upsert is rolled back: keys it created removed, every other key given
  // its previous spec again (rewritten whole, routes included).
  uint64_t removed = 0, absent = 0;
  if (Status st = remove_locked(in.created, &removed, &absent); !st.ok())
    return fmt::format(
        "journal: an interrupted {} of {} subscribers could NOT be rolled back "
        "(removing the {} it created: {})",
        what, in.size(), in.created.size(), status_message(st));
  Plan p;
  p.force = true;
  Status err;
  std::vector<size_t> idx(in.before.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  plan(in.before, idx, Mode::kAtomic, &p, &err, nullptr);
  if (err.ok()) err = apply(p);
  if (!err.ok())
    return fmt::format(
        "journal: an interrupted {} of {} subscribers could NOT be rolled back "
        "(restoring {} previous specs: {}); they are as the maps show them",
        what, in.size(), in.before.size(), status_message(err));
  return fmt::format(
      "journal: an interrupted {} of {} subscribers was rolled back: {} restored "
      "to their previous provisioning, {} it had created removed",
      what, in.size(), in.before.size(), removed);
}

// ---- adoption ------------------------------------------------------------------

struct SubscriberStore::Adopted {
  // Rate plans: records whose entries must be rewritten (the port default
  // changed since they were written, or their slot was unusable).
  std::vector<uint32_t> refresh;
  std::vector<SubscriberSpec> reslot;
  uint64_t routes = 0, orphans = 0, repaired = 0;
};

void SubscriberStore::adopt_subscribers(Adopted* a) {
  const uint32_t police_max = maps_->max_entries(MapId::kPolice);
  int rc = maps_->for_each(MapId::kSubscribers, sizeof(SubKey), sizeof(struct xbng_subscriber),
                           [&](const void* k, const void* v) {
                             SubKey key;
                             std::memcpy(&key, k, sizeof key);
                             struct xbng_subscriber sv;
                             std::memcpy(&sv, v, sizeof sv);
                             // Rate plan: the policy in force, from the subscriber's bucket and
                             // its police entry.
                             struct xbng_police pv {};
                             const bool slot_ok =
                                 sv.slot < police_max &&
                                 (sv.slot >= recs_.size() || recs_[sv.slot].key.ifindex == 0) &&
                                 maps_->lookup(MapId::kPolice, &sv.slot, &pv) == 0;
                             SubscriberSpec s = decode_subscriber(key, sv, &pv);
                             if (!slot_ok) {  // no usable slot: placed after the others
                               a->reslot.push_back(std::move(s));
                               return;
                             }
                             const bool stale = ports_.policy_of(s) != decode_policy(sv, pv);
                             place_record(sv.slot, std::move(s));
                             index_.emplace(key_rank(key), sv.slot);
                             count_key(key, +1);
                             if (stale) a->refresh.push_back(sv.slot);
                           });
  if (rc) throw DataplaneError(fmt::format("reading map subscribers: {}", std::strerror(-rc)));
  for (uint32_t r = 0; r < recs_.size(); ++r)
    if (recs_[r].key.ifindex == 0) free_.push_back(r);
  std::reverse(free_.begin(), free_.end());  // lowest slots first
  for (auto& s : a->reslot) {
    const SubKey key = s.key;
    const uint32_t rec = alloc_record(std::move(s));
    index_.emplace(key_rank(key), rec);
    count_key(key, +1);
    a->refresh.push_back(rec);
  }
}

void SubscriberStore::adopt_routes(Adopted* a) {
  std::vector<uint8_t> orphans[kMapCount];
  for (MapId m : kRouteMaps) {
    const size_t ks = route_key_size(m);
    int rc = maps_->for_each(m, ks, sizeof(struct xbng_route), [&](const void* k, const void* v) {
      const RouteKey rk = RouteKey::from_raw(m, k);
      struct xbng_route r;
      std::memcpy(&r, v, sizeof r);
      auto it = index_.find(key_rank(r.sub));
      bool ok = it != index_.end();
      if (ok) {
        SubscriberSpec& s = recs_[it->second];
        if (m == MapId::kRoutesV4)
          ok = s.has_ipv4 && std::memcmp(&s.ipv4, k, 4) == 0;
        else if (m == MapId::kRoutesV6)
          ok = s.has_ipv6 && std::memcmp(s.ipv6.data(), k, 16) == 0;
        else
          s.prefixes.push_back(rk.as_prefix());
      }
      if (!ok) {
        auto& o = orphans[static_cast<int>(m)];
        o.insert(o.end(), rk.b.begin(), rk.b.begin() + ks);
        return;
      }
      claims_.set_owner(rk, it->second);
      ++a->routes;
    });
    if (rc)
      throw DataplaneError(fmt::format("reading map {}: {}", map_name(m), std::strerror(-rc)));
  }
  for (MapId m : kRouteMaps) {
    auto& o = orphans[static_cast<int>(m)];
    if (o.empty()) continue;
    const size_t ks = route_key_size(m);
    a->orphans += o.size() / ks;
    if (int rc = maps_->delete_many(m, o.data(), o.size() / ks, ks))
      rollback_failed(m, o.size() / ks, rc, "adoption: removing orphan routes");
  }
}

// A host route missing for an address the subscriber entry claims (an
// interrupted update): install it again.
void SubscriberStore::repair_host_routes(Adopted* a) {
  std::vector<RouteKey> cl;
  for (auto& [rank, rec] : index_) {
    SubscriberSpec& s = recs_[rec];
    std::sort(s.prefixes.begin(), s.prefixes.end());
    cl.clear();
    claims_of(s, &cl);
    for (const auto& c : cl) {
      if (claims_.owner_of(c) >= 0) continue;
      struct xbng_subscriber sv;
      Mac mac;
      const bool known =
          maps_->lookup(MapId::kSubscribers, &s.key, &sv) == 0 && (sv.flags & XBNG_SUB_F_MAC_VALID);
      if (known) std::memcpy(mac.data(), sv.mac, 6);
      const struct xbng_route r = encode_route(s.key, 0, known ? &mac : nullptr, false);
      if (int rc = maps_->update(c.map, c.b.data(), &r, BPF_ANY); rc != 0) {
        rollback_failed(c.map, 1, rc, "adoption: reinstalling a missing host route");
        continue;
      }
      claims_.set_owner(c, rec);
      ++a->repaired;
    }
  }
}

// Rewrites the records whose default policy changed (except those the
// journal recovery rewrote: they carry the current defaults already).
void SubscriberStore::refresh_policies(const std::optional<JournalIntent>& intent, Adopted* a) {
  if (intent) {
    absl::flat_hash_set<uint64_t> touched;
    for (const auto& k : intent->created) touched.insert(key_rank(k));
    for (const auto& s : intent->before) touched.insert(key_rank(s.key));
    std::erase_if(a->refresh, [&](uint32_t rec) {
      return recs_[rec].key.ifindex == 0 || touched.contains(key_rank(recs_[rec].key));
    });
  }
  if (a->refresh.empty()) return;
  Plan p;
  for (uint32_t rec : a->refresh) {
    Plan::Entry e;
    e.spec = recs_[rec];
    e.old_rec = rec;
    std::vector<RouteKey> cl;
    claims_of(e.spec, &cl);
    e.claims.assign(cl.begin(), cl.end());
    e.owned = ~uint64_t{0};
    for (const auto& c : cl) p.claims[c] = key_rank(e.spec.key);
    p.entries.push_back(std::move(e));
  }
  if (Status st = apply(p); !st.ok())
    spdlog::warn("adoption: rewriting {} subscribers with a changed default policy: {}",
                 a->refresh.size(), status_message(st));
}

size_t SubscriberStore::rebuild(std::string* summary) {
  std::unique_lock l(mu_);
  // The change a killed agent left half-applied, if any: resolved below,
  // once the index is rebuilt. The journal keeps it pending until then
  // (killed again meanwhile, the next agent starts over from it).
  std::optional<JournalIntent> intent;
  if (journal_) {
    std::string err;
    intent = journal_->pending(&err);
    // Damaged: nothing is replayed (the maps stay as they are); the file is
    // kept aside for inspection, not silently reused.
    if (!err.empty())
      spdlog::error(
          "store journal {}; no pending change resolved, the maps are left as they are; "
          "{}",
          err, journal_->set_aside());
  }
  recovering_ = true;
  auto done_recovering = absl::MakeCleanup([this] { recovering_ = false; });
  Adopted a;
  adopt_subscribers(&a);
  adopt_routes(&a);
  repair_host_routes(&a);
  std::string recovered;
  if (intent) {
    recovered = recover(*intent);
    spdlog::warn("{}", recovered);
  }
  refresh_policies(intent, &a);
  *summary = fmt::format("{} subscribers and {} routes adopted from the pinned maps", index_.size(),
                         a.routes);
  if (!a.refresh.empty())
    *summary += fmt::format(", {} rewritten for the current default policies", a.refresh.size());
  if (a.orphans) *summary += fmt::format(", {} orphan routes removed", a.orphans);
  if (a.repaired) *summary += fmt::format(", {} missing host routes reinstalled", a.repaired);
  if (!recovered.empty()) *summary += "; " + recovered;
  std::move(done_recovering).Invoke();
  if (intent) journal_clear();
  return index_.size();
}

}  // namespace xbng::agent
