// ClaimsIndex: who owns each address and prefix (the ownership index of the
// subscriber store) and the ordered indexes that find nested overlaps: a
// claim inside another subscriber's prefix, or a prefix containing another
// subscriber's claim. Records are the store's record numbers.
//
// The host tables (/32, /128) hold only the owner's record number, and find
// an address through the record: record r owns address a exactly when
// records[r] has a as its IPv4 (IPv6). A slot is 4 bytes instead of 8 (/32)
// and 20 (/128): ~40 MB less at 1M subscribers. The price is a rule for the
// store: a record's IPv4 and IPv6 do not change while it owns them (release
// the claim, change the record, take the claim).
#pragma once

#include <absl/container/btree_set.h>
#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <absl/hash/hash.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/route_key.h"
#include "store/subscriber.h"

namespace xbng::agent {

class ClaimsIndex {
 public:
  // `records` (the store's, indexed by record number) outlives the index.
  explicit ClaimsIndex(const std::vector<SubscriberSpec>* records);

  // Sizes the exact-match tables for `cap` subscribers up front (growing
  // one at 1M entries would briefly hold the old and the new table).
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
  // Starts loading the slots a later owner_of/set_owner on s's claims touch.
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

  // Lookup keys of the host tables (an address, told from a record number).
  struct V4 {
    uint32_t a;  // network order
  };
  // Hash and equality of a host table's records by their address
  // (`records[r].*Addr`), and of an address looked up (V4 or Ipv6).
  template <typename Addr, typename Key, Addr SubscriberSpec::*kField>
  struct ByAddr {
    using is_transparent = void;
    const std::vector<SubscriberSpec>* recs;
    static const Addr& addr(const Key& k) {
      if constexpr (std::is_same_v<Key, V4>)
        return k.a;
      else
        return k;
    }
    size_t operator()(uint32_t rec) const { return absl::Hash<Addr>{}((*recs)[rec].*kField); }
    size_t operator()(const Key& k) const { return absl::Hash<Addr>{}(addr(k)); }
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t rec, const Key& k) const { return (*recs)[rec].*kField == addr(k); }
    bool operator()(const Key& k, uint32_t rec) const { return (*recs)[rec].*kField == addr(k); }
  };
  using ByV4 = ByAddr<uint32_t, V4, &SubscriberSpec::ipv4>;
  using ByV6 = ByAddr<Ipv6, Ipv6, &SubscriberSpec::ipv6>;
  template <typename By>
  using HostTable = absl::flat_hash_set<uint32_t, By, By>;
  // Makes `rec` the owner of host `key` in `t` (replacing another owner,
  // whose record must still hold the address); true when it had none.
  template <typename By, typename Key>
  bool take_host(HostTable<By>& t, const Key& key, const RouteKey& k, uint32_t rec);

  const std::vector<SubscriberSpec>* recs_;
  HostTable<ByV4> own_v4_;  // /32 → record
  HostTable<ByV6> own_v6_;  // /128 → record
  // /64 → record, packed in 12 bytes (a map of uint64_t to uint32_t pads
  // its slot to 16: ~9 MB more at 1M subscribers).
  struct Own64 {
    uint32_t a[2];  // the /64's first 64 bits, as its map key holds them
    mutable uint32_t rec;
    uint64_t addr() const {
      uint64_t v;
      std::memcpy(&v, a, 8);
      return v;
    }
  };
  struct By64 {
    using is_transparent = void;
    size_t operator()(const Own64& o) const { return absl::Hash<uint64_t>{}(o.addr()); }
    size_t operator()(uint64_t a) const { return absl::Hash<uint64_t>{}(a); }
    bool operator()(const Own64& x, const Own64& y) const { return x.addr() == y.addr(); }
    bool operator()(const Own64& x, uint64_t a) const { return x.addr() == a; }
    bool operator()(uint64_t a, const Own64& x) const { return x.addr() == a; }
  };
  absl::flat_hash_set<Own64, By64, By64> own_v6_64_;
  absl::flat_hash_map<Prefix, uint32_t> own_lpm_;  // other prefixes → record
  uint64_t lpm_v4_count_ = 0, lpm_v6_count_ = 0;
  // For nested overlaps. Addresses as host-order integers: IPv4 whole, IPv6
  // its first 64 bits (every IPv6 prefix is /64 or shorter).
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
  absl::btree_set<Ord> ord_pfx_[2];        // (start, len << kLenShift | record)
  absl::btree_set<uint64_t> ord_v4_host_;  // address << 32 | record
  absl::btree_set<Ord> ord_v6_host_;       // (first 64 bits, record)
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
