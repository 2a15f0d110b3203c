// Writing: a checked plan applied to the maps in an order that never
// blackholes (police slots, subscriber entries, new routes, then the
// replaced routes out), recorded in the journal first, and rolled back
// whole if the kernel refuses a write.
#include <absl/cleanup/cleanup.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "store/codec.h"
#include "store/map_ops.h"
#include "store/plan.h"
#include "xbng/store_read.h"

namespace xbng::agent {

using absl::Status;
using absl::StatusCode;

Status kernel_status(int err, const std::string& what) {
  err = err < 0 ? -err : err;
  const StatusCode code = (err == E2BIG || err == ENOMEM || err == ENOSPC)
                              ? StatusCode::kResourceExhausted
                              : StatusCode::kInternal;
  return Status(code, fmt::format("{}: {}", what, std::strerror(err)));
}

namespace {

// Appends to a route map's writes the first `done` swaps swap_many made
// that wrote (XBNG_SWAP_WRITTEN), each merged as the kernel merged it and
// with the value it replaced (none when the key was absent), for the
// rollback. `Writes` is Staged::MapWrites.
template <typename Writes>
void append_swapped(MapId m, size_t ks, size_t done, const std::vector<uint8_t>& keys,
                    const std::vector<uint8_t>& in, const std::vector<uint8_t>& out,
                    std::vector<struct xbng_route>* vals, const std::vector<struct xbng_route>& old,
                    Writes* mw) {
  mw->keys.reserve(mw->keys.size() + done * ks);
  mw->vals.reserve(mw->vals.size() + done);
  mw->old.reserve(mw->old.size() + done);
  for (size_t j = 0; j < done; ++j) {
    if (!(out[j] & XBNG_SWAP_WRITTEN)) continue;  // nothing to write
    mw->keys.insert(mw->keys.end(), &keys[j * ks], &keys[(j + 1) * ks]);
    if (out[j] & XBNG_SWAP_FOUND) {
      swap_merge(m, &(*vals)[j], &old[j], in[j]);
      mw->old.push_back(old[j]);
    } else {
      mw->old.push_back(std::nullopt);
    }
    mw->vals.push_back((*vals)[j]);
  }
}

}  // namespace

void SubscriberStore::rollback_failed(MapId m, size_t entries, int rc, const char* what) {
  rollback_failures_.fetch_add(entries, std::memory_order_relaxed);
  spdlog::error(
      "store: {}: {} entr{} of map {} could not be written ({}); the map holds them "
      "as the failed change left them until the next change of those subscribers",
      what, entries, entries == 1 ? "y" : "ies", map_name(m), std::strerror(-rc));
}

void SubscriberStore::stage_entries(const Plan& p, Staged* w) {
  const size_t n = w->n = p.entries.size();
  w->skeys.resize(n);
  w->svals.resize(n);
  w->sold.resize(n);
  w->mac.resize(n);
  w->mac_valid.resize(n);
  w->slots.resize(n);
  w->pvals.resize(n);
  w->pold.resize(n);
  w->down_policed.resize(n);
  uint32_t next_slot = static_cast<uint32_t>(recs_.size());
  for (size_t i = 0; i < n; ++i) {
    if (p.entries[i].old_rec >= 0) {
      w->slots[i] = static_cast<uint32_t>(p.entries[i].old_rec);
    } else if (!free_.empty()) {
      w->slots[i] = free_.back();
      free_.pop_back();
      w->taken.push_back(w->slots[i]);
    } else {
      w->slots[i] = next_slot++;
    }
  }
}

void SubscriberStore::stage_routes(const Plan& p, Staged* w) const {
  // Every claim's key now, in plan order (its value and the old value to
  // come: write_route_map(), which drops the routes that need no write).
  // Sized up front (see plan()): growing by doubling was the largest
  // transient of a maximal atomic upsert.
  size_t claims[kMapCount] = {}, key_bytes[kMapCount] = {};
  for (const auto& e : p.entries)
    for (const auto& c : e.claims) {
      ++claims[static_cast<int>(c.map)];
      key_bytes[static_cast<int>(c.map)] += c.size;
    }
  for (int m = 0; m < kMapCount; ++m) {
    w->w[m].keys.reserve(key_bytes[m]);
    w->w[m].vals.reserve(claims[m]);
    w->w[m].old.reserve(claims[m]);
  }
  std::vector<RouteKey> oc;
  for (const auto& e : p.entries) {
    for (const auto& c : e.claims) {
      auto& keys = w->w[static_cast<int>(c.map)].keys;
      keys.insert(keys.end(), c.b.begin(), c.b.begin() + c.size);
    }
    if (e.old_rec < 0) continue;
    // The routes it replaces: its old claims it no longer makes (nor
    // another entry of the plan does). A claim it keeps is found among its
    // own few first, not in the plan's table.
    oc.clear();
    claims_of(recs_[e.old_rec], &oc);
    bool drops = false;
    for (const auto& c : oc) {
      if (std::find(e.claims.begin(), e.claims.end(), c) != e.claims.end()) continue;
      drops = true;
      if (!p.claims.contains(c)) {
        auto& d = w->dels[static_cast<int>(c.map)];
        d.insert(d.end(), c.b.begin(), c.b.begin() + c.size);
      }
    }
    if (drops) w->drops.push_back(&e - p.entries.data());
  }
}

void SubscriberStore::encode_entries(const Plan& p, Staged* w) {
  w->sorder.clear();
  w->sin.assign(w->n, 0);
  for (size_t i = 0; i < w->n; ++i) {
    const auto& e = p.entries[i];
    const SubscriberSpec& s = e.spec;
    const PolicySpec pol = ports_.policy_of(s);
    w->pvals[i] = encode_police(pol, nullptr);  // merged with the old one as written
    w->down_policed[i] = pol.down_rate != 0;
    w->skeys[i] = s.key;
    w->svals[i] = encode_subscriber(s, w->slots[i], pol);
    if (e.old_rec >= 0) {
      w->sorder.push_back(static_cast<uint32_t>(i));
      // Keep a learned MAC when the request still asks to learn, except
      // under "follow": an upsert without MAC makes it learn again.
      if (!s.has_mac && !recs_[e.old_rec].has_mac &&
          effective_mac_policy(s) != XBNG_MAC_POLICY_FOLLOW)
        w->sin[i] = XBNG_SWAP_KEEP_MAC;
    }
    set_mac(w, i);
  }
  w->updated = w->sorder.size();
  for (size_t i = 0; i < w->n; ++i)
    if (p.entries[i].old_rec < 0) w->sorder.push_back(static_cast<uint32_t>(i));
}

void SubscriberStore::set_mac(Staged* w, size_t i) {
  std::memcpy(w->mac[i].data(), w->svals[i].mac, 6);
  w->mac_valid[i] = w->svals[i].flags & XBNG_SUB_F_MAC_VALID;
}

// Writes entries in w->sorder: the updated ones swapped over the values
// they replace (read, merged and written in one pass: MapOps::swap_many),
// then the new ones. Gathers each one's key and value (key(i), val(i): the
// entry's), and hands what an updated one replaced and the value written
// to got(i, old, merged). *done: the leading entries of w->sorder written.
template <typename V, typename K, typename KeyOf, typename ValOf, typename Got>
int SubscriberStore::write_in_order(MapId m, Staged* w, KeyOf key, ValOf val, Got got,
                                    size_t* done) {
  const size_t n = w->n, nu = w->updated;
  std::vector<K> keys(n);
  std::vector<V> vals(n), old(nu);
  std::vector<uint8_t> in(nu);
  for (size_t j = 0; j < n; ++j) {
    keys[j] = key(w->sorder[j]);
    vals[j] = val(w->sorder[j]);
    if (j < nu) in[j] = w->sin[w->sorder[j]];
  }
  size_t swapped = 0;
  int rc = maps_->swap_many(m, keys.data(), nu, sizeof(K), vals.data(), old.data(), sizeof(V),
                            in.data(), &swapped);
  for (size_t j = 0; j < swapped; ++j) {
    const size_t i = w->sorder[j];
    if (!(in[j] & XBNG_SWAP_FOUND)) continue;
    swap_merge(m, &vals[j], &old[j], w->sin[i]);
    got(i, old[j], vals[j]);
  }
  *done = swapped;
  if (rc || nu == n) return rc;
  size_t created = 0;
  rc = maps_->update_many(m, &keys[nu], &vals[nu], n - nu, sizeof(K), sizeof(V), &created);
  *done = nu + (rc ? created : n - nu);
  return rc;
}

int SubscriberStore::write_police(Staged* w, size_t* done) {
  return write_in_order<struct xbng_police, uint32_t>(
      MapId::kPolice, w, [&](size_t i) { return w->slots[i]; },
      [&](size_t i) { return w->pvals[i]; },
      [&](size_t i, const struct xbng_police& old, const struct xbng_police& v) {
        w->pold[i] = old;
        w->pvals[i] = v;
      },
      done);
}

int SubscriberStore::write_subscribers(Staged* w, size_t* done) {
  return write_in_order<struct xbng_subscriber, SubKey>(
      MapId::kSubscribers, w, [&](size_t i) { return w->skeys[i]; },
      [&](size_t i) { return w->svals[i]; },
      [&](size_t i, const struct xbng_subscriber& old, const struct xbng_subscriber& v) {
        w->sold[i] = old;
        w->svals[i] = v;
        set_mac(w, i);
      },
      done);
}

// One route map's writes: the new routes, then those that replace one
// already the subscriber's (or another's, moved by this plan) swapped over
// it (MapOps::swap_many: read, counters carried over, written unless
// nothing changes, in one pass). mw then lists what was written, in that
// order, and what each replaced; *written: how many.
int SubscriberStore::write_route_map(const Plan& p, MapId m, Staged* w, size_t* written) const {
  auto& mw = w->w[static_cast<int>(m)];
  const size_t ks = route_key_size(m);
  const std::vector<uint8_t> keys = std::move(mw.keys);  // every claim's, in plan order
  const size_t count = keys.size() / ks;
  // A claim the entry already owns is rewritten through swap_many, any
  // other inserted by the batch write: each list sized exactly, so that a
  // create reserves nothing for swaps (its stream's peak) and an update
  // nothing for inserts.
  auto owned = [&](const auto& e, size_t ci) {
    return ci < 64 ? (e.owned >> ci) & 1 : claims_.owner_of(e.claims[ci]) >= 0;
  };
  size_t n_owned = 0;
  for (size_t i = 0; i < w->n; ++i)
    for (size_t ci = 0; ci < p.entries[i].claims.size(); ++ci)
      if (p.entries[i].claims[ci].map == m && owned(p.entries[i], ci)) ++n_owned;
  mw.keys.clear();
  mw.keys.reserve((count - n_owned) * ks);
  mw.vals.clear();
  mw.vals.reserve(count - n_owned);
  mw.old.clear();
  std::vector<uint8_t> okeys, in;
  std::vector<struct xbng_route> ovals;
  okeys.reserve(n_owned * ks);
  ovals.reserve(n_owned);
  in.reserve(n_owned);
  size_t at = 0;
  for (size_t i = 0; i < w->n; ++i) {
    const auto& e = p.entries[i];
    // A new downstream bucket (new plan): the routes are rewritten too, so
    // that no credit drawn under the old plan is spent under the new one.
    const bool new_bucket =
        w->down_policed[i] &&
        !(w->pold[i] && w->pold[i]->down.byte_ns_fp == w->pvals[i].down.byte_ns_fp &&
          w->pold[i]->down.burst_bytes == w->pvals[i].down.burst_bytes);
    for (size_t ci = 0; ci < e.claims.size(); ++ci) {
      const RouteKey& c = e.claims[ci];
      if (c.map != m) continue;
      const uint8_t* key = &keys[at++ * ks];
      // The first XBNG_CREDIT_ROUTES routes (host /32, /128, then prefixes)
      // hold prepaid credit; the shared bucket's depth leaves room for them.
      const struct xbng_route r =
          encode_route(e.spec.key, w->slots[i], w->mac_valid[i] ? &w->mac[i] : nullptr,
                       w->down_policed[i], ci < XBNG_CREDIT_ROUTES);
      if (owned(e, ci)) {
        okeys.insert(okeys.end(), key, key + ks);
        ovals.push_back(r);
        in.push_back(new_bucket ? XBNG_SWAP_REWRITE : 0);
      } else {
        mw.keys.insert(mw.keys.end(), key, key + ks);
        mw.vals.push_back(r);
      }
    }
  }
  mw.old.resize(mw.vals.size());
  size_t done = 0;
  int rc = mw.vals.empty() ? 0
                           : maps_->update_many(m, mw.keys.data(), mw.vals.data(), mw.vals.size(),
                                                ks, sizeof(struct xbng_route), &done);
  *written = rc ? done : mw.vals.size();
  if (rc || ovals.empty()) return rc;
  std::vector<uint8_t> out = in;
  std::vector<struct xbng_route> old(ovals.size());
  rc = maps_->swap_many(m, okeys.data(), ovals.size(), ks, ovals.data(), old.data(),
                        sizeof(struct xbng_route), out.data(), &done);
  append_swapped(m, ks, done, okeys, in, out, &ovals, old, &mw);
  *written = mw.vals.size();
  return rc;
}

// Restores what the first `routes[m]` route writes (of each route map, in
// kRouteMaps order; null: none), the first `subs` subscriber writes (in
// w->sorder) and the first `police` police writes replaced, and returns
// the slots taken.
void SubscriberStore::undo(Staged* w, size_t police, size_t subs, const size_t* routes) {
  for (size_t mi = 0; routes && mi < std::size(kRouteMaps); ++mi) {
    const MapId m = kRouteMaps[mi];
    auto& mw = w->w[static_cast<int>(m)];
    const size_t ks = route_key_size(m);
    size_t failed = 0;
    int last = 0;
    for (size_t i = 0; i < routes[mi]; ++i) {
      const int rc = mw.old[i] ? maps_->update(m, &mw.keys[i * ks], &*mw.old[i], BPF_ANY)
                               : maps_->erase(m, &mw.keys[i * ks]);
      if (rc && !(rc == -ENOENT && !mw.old[i])) ++failed, last = rc;
    }
    if (failed) rollback_failed(m, failed, last, "rolling back the routes of a refused change");
  }
  size_t failed = 0;
  int last = 0;
  for (size_t k = 0; k < subs; ++k) {
    const size_t i = w->sorder[k];
    const int rc = w->sold[i]
                       ? maps_->update(MapId::kSubscribers, &w->skeys[i], &*w->sold[i], BPF_ANY)
                       : maps_->erase(MapId::kSubscribers, &w->skeys[i]);
    if (rc && !(rc == -ENOENT && !w->sold[i])) ++failed, last = rc;
  }
  if (failed) rollback_failed(MapId::kSubscribers, failed, last, "rolling back a refused change");
  failed = 0;
  for (size_t k = 0; k < police; ++k)
    if (const size_t i = w->sorder[k]; w->pold[i])
      if (int rc = maps_->update(MapId::kPolice, &w->slots[i], &*w->pold[i], BPF_ANY))
        ++failed, last = rc;
  if (failed) rollback_failed(MapId::kPolice, failed, last, "rolling back a refused change");
  free_.insert(free_.end(), w->taken.begin(), w->taken.end());
}

Status SubscriberStore::write_staged(const Plan& p, Staged* w) {
  const size_t n = w->n;
  // Policers first: a route flagged POLICED always finds its bucket.
  size_t done = 0;
  if (int rc = write_police(w, &done)) {
    undo(w, done, 0, nullptr);
    return kernel_status(rc, fmt::format("writing map police (entry {})",
                                         p.entries[w->sorder[std::min(done, n - 1)]].input));
  }
  crash_point("upsert", "police");
  done = 0;
  if (int rc = write_subscribers(w, &done)) {
    undo(w, n, done, nullptr);
    return kernel_status(rc, fmt::format("writing map subscribers (entry {})",
                                         p.entries[w->sorder[std::min(done, n - 1)]].input));
  }
  crash_point("upsert", "subscribers");
  // The route maps are independent of each other: with a large batch, write
  // them from two threads (two cores). Any failure rolls back everything.
  int rc[std::size(kRouteMaps)] = {};
  size_t written[std::size(kRouteMaps)] = {};
  auto write_map = [&](size_t mi) { rc[mi] = write_route_map(p, kRouteMaps[mi], w, &written[mi]); };
  // kRouteMaps order: v4, v6, v6_64, prefixes v4, prefixes v6.
  run_pair(
      n >= kParallelApply,
      [&] {
        write_map(0);
        write_map(2);
        crash_point("upsert", "routes-partial");
        write_map(3);
      },
      [&] {
        write_map(1);
        write_map(4);
      });
  crash_point("upsert", "routes");
  for (size_t mi = 0; mi < std::size(kRouteMaps); ++mi) {
    if (!rc[mi]) continue;
    undo(w, n, n, written);
    return kernel_status(rc[mi], fmt::format("writing map {}", map_name(kRouteMaps[mi])));
  }
  return absl::OkStatus();
}

// Index: release the old claims first, then take the new ones (an address
// may move between two subscribers of the same request). A claim an updated
// subscriber keeps is left as it is: no other entry of the plan can claim
// it, and releasing and retaking it would cost an update of 1M subscribers
// (a new rate plan, the same addresses) 6M index operations for nothing.
void SubscriberStore::commit_index(Plan& p, const Staged& w) {
  std::vector<RouteKey> oc;
  for (const size_t i : w.drops) {
    const auto& e = p.entries[i];
    oc.clear();
    claims_of(recs_[e.old_rec], &oc);
    for (const auto& c : oc)
      if (std::find(e.claims.begin(), e.claims.end(), c) == e.claims.end())
        claims_.erase_owner(c, static_cast<uint32_t>(e.old_rec));
  }
  const size_t n = p.entries.size();
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) claims_.prefetch(p.entries[i + kPrefetchAhead].spec);
    auto& e = p.entries[i];
    uint32_t rec;
    if (e.old_rec >= 0) {
      rec = static_cast<uint32_t>(e.old_rec);
      recs_[rec] = std::move(e.spec);
    } else {
      const SubKey key = e.spec.key;
      rec = w.slots[i];
      place_record(rec, std::move(e.spec));
      index_.emplace(key_rank(key), rec);
      count_key(key, +1);
    }
    for (size_t ci = 0; ci < e.claims.size(); ++ci)
      if (ci >= 64 || !((e.own >> ci) & 1)) claims_.set_owner(e.claims[ci], rec);
    const SubscriberSpec& sp = recs_[rec];
    if (change_hook_) change_hook_(sp.key, &sp, e.old_rec < 0);
    publish(e.old_rec >= 0 ? EventType::kSubscriberUpdated : EventType::kSubscriberAdded, sp.key,
            sp.has_mac ? &sp.mac : nullptr);
  }
}

Status SubscriberStore::apply(Plan& p) {
  if (p.entries.empty()) return absl::OkStatus();
  // Write-ahead: what every touched key was before. From here
  // on, every return leaves the maps consistent (written, or undone), so
  // the intent is cleared on every path.
  {
    JournalIntent intent;
    intent.op = JournalIntent::Op::kUpsert;
    for (const auto& e : p.entries)
      if (e.old_rec < 0)
        intent.created.push_back(e.spec.key);
      else
        intent.before.push_back(recs_[e.old_rec]);
    if (Status st = journal_begin(intent); !st.ok()) return st;
  }
  auto clear_journal = absl::MakeCleanup([this] { journal_clear(); });
  crash_point("upsert", "journal");
  Staged w;
  stage_entries(p, &w);
  stage_routes(p, &w);
  encode_entries(p, &w);
  if (Status st = write_staged(p, &w); !st.ok()) return st;
  for (MapId m : kRouteMaps) {
    auto& d = w.dels[static_cast<int>(m)];
    if (d.empty()) continue;
    const size_t ks = route_key_size(m);
    if (int rc = maps_->delete_many(m, d.data(), d.size() / ks, ks))
      rollback_failed(m, d.size() / ks, rc, "removing replaced routes");
  }
  crash_point("upsert", "old-routes");
  commit_index(p, w);
  return absl::OkStatus();
}

}  // namespace xbng::agent
