#include "store/claims.h"

#include <cassert>

namespace xbng::agent {

ClaimsIndex::ClaimsIndex(const std::vector<SubscriberSpec>* records)
    : recs_(records),
      own_v4_(0, ByV4{records}, ByV4{records}),
      own_v6_(0, ByV6{records}, ByV6{records}) {}

void ClaimsIndex::reserve(size_t cap) {
  own_v4_.reserve(cap);
  own_v6_.reserve(cap);
  own_v6_64_.reserve(cap);
}

void ClaimsIndex::claims_of(const SubscriberSpec& s, std::vector<RouteKey>* out) {
  if (s.has_ipv4) out->push_back(RouteKey::host_v4(s.ipv4));
  if (s.has_ipv6) out->push_back(RouteKey::host_v6(s.ipv6.data()));
  for (const auto& p : s.prefixes) out->push_back(RouteKey::prefix(p));
}

void ClaimsIndex::prefetch(const SubscriberSpec& s) const {
  if (s.has_ipv4) own_v4_.prefetch(V4{s.ipv4});
  if (s.has_ipv6) own_v6_.prefetch(s.ipv6);
  for (const auto& p : s.prefixes) {
    if (p.family == 6 && p.len == 64) {
      uint64_t a;
      std::memcpy(&a, p.addr.data(), 8);
      own_v6_64_.prefetch(a);
    } else {
      own_lpm_.prefetch(p);
    }
  }
}

uint64_t ClaimsIndex::entries(MapId m) const {
  switch (m) {
    case MapId::kRoutesV4:
      return own_v4_.size();
    case MapId::kRoutesV6:
      return own_v6_.size();
    case MapId::kRoutesV6_64:
      return own_v6_64_.size();
    case MapId::kPrefixesV4:
      return lpm_v4_count_;
    case MapId::kPrefixesV6:
      return lpm_v6_count_;
    default:
      return 0;
  }
}

namespace {

template <typename Table, typename Addr>
int64_t find_owner(const Table& t, const Addr& a) {
  auto it = t.find(a);
  return it == t.end() ? int64_t{-1} : int64_t{it->second};
}

template <typename Table, typename Addr>
int64_t find_host(const Table& t, const Addr& a) {
  auto it = t.find(a);
  return it == t.end() ? int64_t{-1} : int64_t{*it};
}

}  // namespace

int64_t ClaimsIndex::owner_of(const RouteKey& k) const {
  switch (k.map) {
    case MapId::kRoutesV4: {
      uint32_t a;
      std::memcpy(&a, k.b.data(), 4);
      return find_host(own_v4_, V4{a});
    }
    case MapId::kRoutesV6: {
      Ipv6 a;
      std::memcpy(a.data(), k.b.data(), 16);
      return find_host(own_v6_, a);
    }
    case MapId::kRoutesV6_64: {
      uint64_t a;
      std::memcpy(&a, k.b.data(), 8);
      auto it = own_v6_64_.find(a);
      return it == own_v6_64_.end() ? int64_t{-1} : int64_t{it->rec};
    }
    default:
      return find_owner(own_lpm_, k.as_prefix());
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

template <typename By, typename Key>
bool ClaimsIndex::take_host(HostTable<By>& t, const Key& key, const RouteKey& k, uint32_t rec) {
  auto it = t.find(key);
  const bool had = it != t.end();
  if (had) {
    if (*it == rec) return false;
    ord_erase(k, *it);
    t.erase(it);
  }
  t.insert(rec);
  ord_insert(k, rec);
  return !had;
}

void ClaimsIndex::set_owner(const RouteKey& k, uint32_t rec) {
  // The ordered index follows the owner tables: drop a previous owner's entry.
  auto take = [&](auto& table, const auto& a) {
    auto [it, inserted] = table.try_emplace(a, rec);
    if (!inserted) {
      if (it->second == rec) return false;
      ord_erase(k, it->second);
      it->second = rec;
    }
    ord_insert(k, rec);
    return inserted;
  };
  switch (k.map) {
    case MapId::kRoutesV4: {
      uint32_t a;
      std::memcpy(&a, k.b.data(), 4);
      take_host(own_v4_, V4{a}, k, rec);
      break;
    }
    case MapId::kRoutesV6: {
      Ipv6 a;
      std::memcpy(a.data(), k.b.data(), 16);
      take_host(own_v6_, a, k, rec);
      break;
    }
    case MapId::kRoutesV6_64: {
      uint64_t a;
      std::memcpy(&a, k.b.data(), 8);
      if (auto it = own_v6_64_.find(a); it != own_v6_64_.end()) {
        if (it->rec == rec) break;
        ord_erase(k, it->rec);
        it->rec = rec;  // not part of the hash
      } else {
        Own64 o;
        std::memcpy(o.a, &a, 8);
        o.rec = rec;
        own_v6_64_.insert(o);
      }
      ord_insert(k, rec);
      break;
    }
    default:
      if (take(own_lpm_, k.as_prefix()))
        ++(k.map == MapId::kPrefixesV4 ? lpm_v4_count_ : lpm_v6_count_);
  }
}

void ClaimsIndex::erase_owner(const RouteKey& k, uint32_t rec) {
  // Erases `a` from `table` when `rec` owns it; true when it did.
  auto drop = [&](auto& table, const auto& a) {
    auto it = table.find(a);
    if (it == table.end() || it->second != rec) return false;
    table.erase(it);
    ord_erase(k, rec);
    return true;
  };
  auto drop_host = [&](auto& table, const auto& key) {
    auto it = table.find(key);
    if (it == table.end() || *it != rec) return;
    table.erase(it);
    ord_erase(k, rec);
  };
  switch (k.map) {
    case MapId::kRoutesV4: {
      uint32_t a;
      std::memcpy(&a, k.b.data(), 4);
      drop_host(own_v4_, V4{a});
      break;
    }
    case MapId::kRoutesV6: {
      Ipv6 a;
      std::memcpy(a.data(), k.b.data(), 16);
      drop_host(own_v6_, a);
      break;
    }
    case MapId::kRoutesV6_64: {
      uint64_t a;
      std::memcpy(&a, k.b.data(), 8);
      if (auto it = own_v6_64_.find(a); it != own_v6_64_.end() && it->rec == rec) {
        own_v6_64_.erase(it);
        ord_erase(k, rec);
      }
      break;
    }
    default:
      if (drop(own_lpm_, k.as_prefix()))
        --(k.map == MapId::kPrefixesV4 ? lpm_v4_count_ : lpm_v6_count_);
  }
}

}  // namespace xbng::agent
