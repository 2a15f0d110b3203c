#include "store/claims.h"

#include <cassert>

namespace xbng::agent {

ClaimsIndex::ClaimsIndex(const std::vector<SubscriberSpec>* records)
    : recs_(records), own_v6_(0, ByV6{records}, ByV6{records}) {}

void ClaimsIndex::reserve(size_t cap) { own_v6_.reserve(cap); }

void ClaimsIndex::claims_of(const SubscriberSpec& s, std::vector<RouteKey>* out) {
  if (s.has_ipv4) out->push_back(RouteKey::host_v4(s.ipv4));
  if (s.has_ipv6) out->push_back(RouteKey::host_v6(s.ipv6.data()));
  for (const auto& p : s.prefixes) out->push_back(RouteKey::prefix(p));
}

void ClaimsIndex::prefetch(const SubscriberSpec& s) const {
  if (s.has_ipv6) own_v6_.prefetch(s.ipv6);
}

uint64_t ClaimsIndex::entries(MapId m) const {
  switch (m) {
    case MapId::kRoutesV4:
      return ord_v4_host_.size();
    case MapId::kRoutesV6:
      return own_v6_.size();
    case MapId::kRoutesV6_64:
      return pfx_len_[1][64];
    case MapId::kPrefixesV4:
      return ord_pfx_[0].size();
    case MapId::kPrefixesV6:
      return ord_pfx_[1].size() - pfx_len_[1][64];
    default:
      return 0;
  }
}

absl::btree_set<ClaimsIndex::Ord>::const_iterator ClaimsIndex::find_prefix(int fi, uint64_t start,
                                                                           uint32_t len) const {
  // Entries of one start are ordered by length, then record: the first at
  // or after (start, len, record 0) is this prefix's entry if it has one.
  auto it = ord_pfx_[fi].lower_bound(Ord(start, len << kLenShift));
  if (it != ord_pfx_[fi].end() && it->start() == start && (it->tag >> kLenShift) == len) return it;
  return ord_pfx_[fi].end();
}

absl::btree_set<uint64_t>::const_iterator ClaimsIndex::find_v4(uint64_t a) const {
  auto it = ord_v4_host_.lower_bound(a << 32);
  if (it != ord_v4_host_.end() && (*it >> 32) == a) return it;
  return ord_v4_host_.end();
}

int64_t ClaimsIndex::owner_of(const RouteKey& k) const {
  switch (k.map) {
    case MapId::kRoutesV4: {
      auto it = find_v4(span_of(k.as_prefix()).start);
      return it == ord_v4_host_.end() ? int64_t{-1} : int64_t{static_cast<uint32_t>(*it)};
    }
    case MapId::kRoutesV6: {
      Ipv6 a;
      std::memcpy(a.data(), k.b.data(), 16);
      auto it = own_v6_.find(a);
      return it == own_v6_.end() ? int64_t{-1} : int64_t{*it};
    }
    default: {
      const Span sp = span_of(k.as_prefix());
      auto it = find_prefix(sp.fi, sp.start, sp.len);
      return it == ord_pfx_[sp.fi].end() ? int64_t{-1} : int64_t{it->tag & ((1u << kLenShift) - 1)};
    }
  }
}

void ClaimsIndex::ord_insert(const RouteKey& k, uint32_t rec) {
  const Span sp = span_of(k.as_prefix());
  if (!sp.host) {
    assert(rec < (1u << kLenShift));
    ord_pfx_[sp.fi].insert(Ord(sp.start, sp.len << kLenShift | rec));
    ++pfx_len_[sp.fi][sp.len];
  } else if (sp.fi == 0) {
    ord_v4_host_.insert(sp.start << 32 | rec);
  } else {
    ord_v6_host_.insert(Ord(sp.start, rec));
  }
}

void ClaimsIndex::ord_erase(const RouteKey& k, uint32_t rec) {
  const Span sp = span_of(k.as_prefix());
  if (!sp.host) {
    if (ord_pfx_[sp.fi].erase(Ord(sp.start, sp.len << kLenShift | rec))) --pfx_len_[sp.fi][sp.len];
  } else if (sp.fi == 0) {
    ord_v4_host_.erase(sp.start << 32 | rec);
  } else {
    ord_v6_host_.erase(Ord(sp.start, rec));
  }
}

void ClaimsIndex::set_owner(const RouteKey& k, uint32_t rec) {
  // One owner per claim: a previous owner's entry leaves first.
  const int64_t old = owner_of(k);
  if (old == rec) return;
  if (old >= 0) ord_erase(k, static_cast<uint32_t>(old));
  if (k.map == MapId::kRoutesV6) {
    Ipv6 a;
    std::memcpy(a.data(), k.b.data(), 16);
    // The previous owner's record must still hold the address (it is how
    // the table finds it).
    if (auto it = own_v6_.find(a); it != own_v6_.end()) own_v6_.erase(it);
    own_v6_.insert(rec);
  }
  ord_insert(k, rec);
}

void ClaimsIndex::erase_owner(const RouteKey& k, uint32_t rec) {
  if (owner_of(k) != rec) return;
  if (k.map == MapId::kRoutesV6) {
    Ipv6 a;
    std::memcpy(a.data(), k.b.data(), 16);
    own_v6_.erase(own_v6_.find(a));
  }
  ord_erase(k, rec);
}

}  // namespace xbng::agent
