#include "store/claims.h"

namespace xbng::agent {

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
  if (s.has_ipv4) own_v4_.prefetch(s.ipv4);
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

}  // namespace

int64_t ClaimsIndex::owner_of(const RouteKey& k) const {
  switch (k.map) {
    case MapId::kRoutesV4: {
      uint32_t a;
      std::memcpy(&a, k.b.data(), 4);
      return find_owner(own_v4_, a);
    }
    case MapId::kRoutesV6: {
      Ipv6 a;
      std::memcpy(a.data(), k.b.data(), 16);
      return find_owner(own_v6_, a);
    }
    case MapId::kRoutesV6_64: {
      uint64_t a;
      std::memcpy(&a, k.b.data(), 8);
      return find_owner(own_v6_64_, a);
    }
    default:
      return find_owner(own_lpm_, k.as_prefix());
  }
}

void ClaimsIndex::ord_insert(const RouteKey& k, uint32_t rec) {
  const Span sp = span_of(k.as_prefix());
  if (!sp.host) {
    ord_pfx_[sp.fi].insert({sp.start, uint64_t{sp.len} << 32 | rec});
    ++pfx_len_[sp.fi][sp.len];
  } else if (sp.fi == 0) {
    ord_v4_host_.insert(sp.start << 32 | rec);
  } else {
    ord_v6_host_.insert({sp.start, rec});
  }
}

void ClaimsIndex::ord_erase(const RouteKey& k, uint32_t rec) {
  const Span sp = span_of(k.as_prefix());
  if (!sp.host) {
    if (ord_pfx_[sp.fi].erase({sp.start, uint64_t{sp.len} << 32 | rec})) --pfx_len_[sp.fi][sp.len];
  } else if (sp.fi == 0) {
    ord_v4_host_.erase(sp.start << 32 | rec);
  } else {
    ord_v6_host_.erase({sp.start, rec});
  }
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
      take(own_v4_, a);
      break;
    }
    case MapId::kRoutesV6: {
      Ipv6 a;
      std::memcpy(a.data(), k.b.data(), 16);
      take(own_v6_, a);
      break;
    }
    case MapId::kRoutesV6_64: {
      uint64_t a;
      std::memcpy(&a, k.b.data(), 8);
      take(own_v6_64_, a);
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
  switch (k.map) {
    case MapId::kRoutesV4: {
      uint32_t a;
      std::memcpy(&a, k.b.data(), 4);
      drop(own_v4_, a);
      break;
    }
    case MapId::kRoutesV6: {
      Ipv6 a;
      std::memcpy(a.data(), k.b.data(), 16);
      drop(own_v6_, a);
      break;
    }
    case MapId::kRoutesV6_64: {
      uint64_t a;
      std::memcpy(&a, k.b.data(), 8);
      drop(own_v6_64_, a);
      break;
    }
    default:
      if (drop(own_lpm_, k.as_prefix()))
        --(k.map == MapId::kPrefixesV4 ? lpm_v4_count_ : lpm_v6_count_);
  }
}

}  // namespace xbng::agent
