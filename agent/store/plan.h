// The store's plan of one change (private to agent/store/): the entries a
// request creates or updates, with their claims, as checked against the
// index by the planner, and what the writer will write for them.
#pragma once

#include <absl/container/btree_set.h>
#include <absl/container/flat_hash_map.h>
#include <absl/container/inlined_vector.h>

#include <optional>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "store/store.h"

namespace xbng::agent {

struct SubscriberStore::Plan {
  struct Entry {
    size_t input = 0;
    SubscriberSpec spec;
    int64_t old_rec = -1;
    absl::InlinedVector<RouteKey, 3> claims;
    uint64_t owned = 0;  // bit i: claims[i] had an owner when planned (i < 64)
    // Bit i: claims[i] was already this subscriber's when planned (i < 64).
    // No other entry of the plan claims it and only a claim the entry drops
    // is released before the entry is committed: it is still the
    // subscriber's then, and commit_index() does not look it up again.
    uint64_t own = 0;
  };
  std::vector<Entry> entries;                      // created or updated
  absl::flat_hash_map<uint64_t, size_t> keys;      // every planned key (unchanged included)
  absl::flat_hash_map<RouteKey, uint64_t> claims;  // route key → claiming key rank
  uint64_t adds[kMapCount] = {};
  uint64_t created = 0, updated = 0, unchanged = 0;
  std::vector<size_t> accepted;  // input indexes planned (incl. unchanged)
  bool force = false;            // rewrite every entry, unchanged ones too (journal recovery)
  bool resync = false;           // same provisioning = unchanged, even under "follow" (stream())
  // Nested overlaps inside the plan: prefix lengths in use and every claim
  // ordered by (start, len, rank, spec index << 32 | claim index).
  uint64_t len_count[2][65] = {};
  absl::btree_set<std::tuple<uint64_t, uint32_t, uint64_t, uint64_t>> ord[2];
};

// What apply() writes for a plan, and what each write replaces (for the
// rollback).
struct SubscriberStore::Staged {
  struct MapWrites {
    std::vector<uint8_t> keys;
    std::vector<struct xbng_route> vals;
    std::vector<std::optional<struct xbng_route>> old;
  };
  size_t n = 0;
  std::vector<SubKey> skeys;
  std::vector<struct xbng_subscriber> svals;
  std::vector<std::optional<struct xbng_subscriber>> sold;
  // The order of the police and subscriber writes: the updated entries (swapped over
  // what they replace, MapOps::swap_many), then the new ones; and each
  // updated entry's XBNG_SWAP_* input bits.
  std::vector<uint32_t> sorder;
  size_t updated = 0;  // the leading entries of sorder that are updates
  std::vector<uint8_t> sin;
  // Rate plans: each record's index is its slot in `police`; new entries take
  // theirs now (returned if the plan is rolled back).
  std::vector<uint32_t> slots;
  std::vector<uint32_t> taken;
  std::vector<struct xbng_police> pvals;
  std::vector<std::optional<struct xbng_police>> pold;
  std::vector<Mac> mac;
  std::vector<bool> mac_valid;
  std::vector<bool> down_policed;
  MapWrites w[kMapCount];
  std::vector<uint8_t> dels[kMapCount];  // replaced routes, removed last
  // The updated entries (plan order) that drop a claim: the only ones whose
  // old claims commit_index() walks.
  std::vector<size_t> drops;
};

// Runs a() and b(): b on a second thread when `parallel` (both on this one
// if a thread cannot be started).
template <typename A, typename B>
void run_pair(bool parallel, A&& a, B&& b) {
  std::optional<std::thread> t;
  if (parallel) {
    try {
      t.emplace(b);
    } catch (const std::system_error&) {
    }
  }
  a();
  if (t)
    t->join();
  else
    b();
}

// A map error as a status: RESOURCE_EXHAUSTED for a full map, INTERNAL otherwise.
absl::Status kernel_status(int err, const std::string& what);

inline constexpr size_t kPrefetchAhead = 8;

}  // namespace xbng::agent
