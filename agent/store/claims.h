// ClaimsIndex: who owns each address and prefix (the ownership index of the
// subscriber store) and the ordered indexes that find nested overlaps: a
// claim inside another subscriber's prefix, or a prefix containing another
// subscriber's claim. Records are the store's record numbers.
//
// Every claim but an IPv6 /128 is found in the ordered indexes themselves:
// they hold each IPv4 host and each prefix whole (start, length, record), so
// an exact owner is one ordered search, and a hash table beside them would
// hold the same claims a second time (~38 MB at 1M subscribers: the /32 and
// /64 tables, sized for --max-subscribers). The /128 table is the one hash
// table: the ordered index of IPv6 hosts keeps only their first 64 bits. It
// holds only the owner's record number, and finds an address through the
// record: record r owns address a exactly when records[r].ipv6 is a (a slot
// is 4 bytes instead of 20). The price is a rule for the store: a record's
// IPv6 does not change while it owns it (release the claim, change the
// record, take the claim).
#pragma once

#include <absl/container/btree_set.h>
#include <absl/container/flat_hash_set.h>
#include <absl/hash/hash.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

#include "common/route_key.h"
#include "store/subscriber.h"

namespace xbng::agent {

class ClaimsIndex {
 public:
  // `records` (the store's, indexed by record number) outlives the index.
  explicit ClaimsIndex(const std::vector<SubscriberSpec>* records);

  // Sizes the /128 table for `cap` subscribers up front (growing it at 1M
  // entries would briefly hold the old and the new table).
  void reserve(size_t cap);

  // The claims of a subscriber, in the order the store writes them: IPv4,
  // IPv6, then its prefixes.
  static void claims_of(const SubscriberSpec& s, std::vector<RouteKey>* out);

  // Owning record of exactly `k`, or -1.
  int64_t owner_of(const RouteKey& k) const;
  // `rec` owns `k` from now on (replacing any previous owner).
  void set_owner(const RouteKey& k, uint32_t rec);
  // `k` is free again, if `rec` owned it.
  void erase_owner(const RouteKey& k, uint32_t rec);
  // Starts loading the /128 slot a later owner_of/set_owner on s's claims
  // touches (the ordered indexes' upper levels stay in cache).
  void prefetch(const SubscriberSpec& s) const;
  // Entries of route map `m` the index holds (0 for other maps).
  uint64_t entries(MapId m) const;

  // Whether any owned prefix of family `fi` (0 IPv4, 1 IPv6) has length `len`.
  bool has_prefix_len(int fi, uint32_t len) const { return pfx_len_[fi][len] != 0; }

  // An owned claim strictly inside the prefix `sp`: a longer prefix, or a
  // host (whose address the caller reads from record `rec`).
  struct Inside {
    uint32_t rec = 0;
    bool host = false;
    Prefix prefix;  // when !host
  };
  // The first such claim (prefixes before hosts, in address order) whose
  // record satisfies `foreign(rec)`. The same prefix as `sp` is skipped
  // (exact duplicates are the owner check's).
  template <typename Foreign>
  std::optional<Inside> first_inside(const Span& sp, Foreign&& foreign) const;

 private:
  void ord_insert(const RouteKey& k, uint32_t rec);
  void ord_erase(const RouteKey& k, uint32_t rec);

  // Hash and equality of the /128 table's records by their IPv6 address
  // (`records[r].ipv6`), and of an address looked up.
  struct ByV6 {
    using is_transparent = void;
    const std::vector<SubscriberSpec>* recs;
    size_t operator()(uint32_t rec) const { return absl::Hash<Ipv6>{}((*recs)[rec].ipv6); }
    size_t operator()(const Ipv6& a) const { return absl::Hash<Ipv6>{}(a); }
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t rec, const Ipv6& a) const { return (*recs)[rec].ipv6 == a; }
    bool operator()(const Ipv6& a, uint32_t rec) const { return (*recs)[rec].ipv6 == a; }
  };

  const std::vector<SubscriberSpec>* recs_;
  absl::flat_hash_set<uint32_t, ByV6, ByV6> own_v6_;  // /128 → record
  // The ordered indexes, which are also the owner tables of every other
  // claim. Addresses as host-order integers: IPv4 whole, IPv6 its first 64
  // bits (every IPv6 prefix is /64 or shorter).
  uint64_t pfx_len_[2][65] = {};  // [v4, v6][length]: prefixes of that length (not hosts)
  // An ordered entry packed in 12 bytes (a pair of 64-bit words takes 16):
  // (start, tag) with tag = record for hosts, length << 24 | record for
  // prefixes (records are police slots, below --max-subscribers <= 16M < 2^24).
  struct Ord {
    uint32_t hi, lo, tag;
    Ord(uint64_t start, uint32_t t)
        : hi(static_cast<uint32_t>(start >> 32)), lo(static_cast<uint32_t>(start)), tag(t) {}
    uint64_t start() const { return uint64_t{hi} << 32 | lo; }
    friend bool operator<(const Ord& x, const Ord& y) {
      return std::tie(x.hi, x.lo, x.tag) < std::tie(y.hi, y.lo, y.tag);
    }
  };
  static constexpr int kLenShift = 24;
  absl::btree_set<Ord> ord_pfx_[2];        // (start, len << kLenShift | record): one per prefix
  absl::btree_set<uint64_t> ord_v4_host_;  // address << 32 | record: one per address
  absl::btree_set<Ord> ord_v6_host_;       // (first 64 bits, record)

  // The entry of prefix (start, len) in ord_pfx_[fi], or end().
  absl::btree_set<Ord>::const_iterator find_prefix(int fi, uint64_t start, uint32_t len) const;
  // The entry of IPv4 host `a` (host order) in ord_v4_host_, or end().
  absl::btree_set<uint64_t>::const_iterator find_v4(uint64_t a) const;
};

template <typename Foreign>
std::optional<ClaimsIndex::Inside> ClaimsIndex::first_inside(const Span& sp,
                                                             Foreign&& foreign) const {
  const int fi = sp.fi;
  const uint64_t end = sp.end();
  for (auto it = ord_pfx_[fi].lower_bound(Ord(sp.start, 0));
       it != ord_pfx_[fi].end() && it->start() <= end; ++it) {
    const uint32_t olen = it->tag >> kLenShift;
    const uint32_t orec = it->tag & ((1u << kLenShift) - 1);
    if (olen == sp.len && it->start() == sp.start) continue;  // the same prefix
    if (foreign(orec)) return Inside{orec, false, prefix_at(fi, it->start(), olen)};
  }
  if (fi == 0) {
    for (auto it = ord_v4_host_.lower_bound(sp.start << 32);
         it != ord_v4_host_.end() && (*it >> 32) <= end; ++it)
      if (const uint32_t orec = static_cast<uint32_t>(*it); foreign(orec))
        return Inside{orec, true, {}};
  } else {
    for (auto it = ord_v6_host_.lower_bound(Ord(sp.start, 0));
         it != ord_v6_host_.end() && it->start() <= end; ++it)
      if (foreign(it->tag)) return Inside{it->tag, true, {}};
  }
  return std::nullopt;
}

}  // namespace xbng::agent
