#include "store/store.h"

#include <absl/cleanup/cleanup.h>
#include <absl/container/flat_hash_set.h>
#include <absl/container/inlined_vector.h>
#include <bpf/bpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <optional>
#include <system_error>

#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

using grpc::Status;
using grpc::StatusCode;

StoreMaps StoreMaps::from(const Dataplane& dp) {
  StoreMaps m{};
  for (int i = 0; i < kMapCount; ++i) {
    m.fd[i] = dp.fd(static_cast<MapId>(i));
    m.max_entries[i] = dp.max_entries(static_cast<MapId>(i));
  }
  return m;
}

// A key of one of the five route maps, laid out as the kernel map key.
struct SubscriberStore::RouteKey {
  MapId map = MapId::kRoutesV4;
  uint8_t size = 0;
  std::array<uint8_t, 20> b{};

  friend bool operator==(const RouteKey& x, const RouteKey& y) {
    return x.map == y.map && x.b == y.b;
  }
  template <typename H>
  friend H AbslHashValue(H h, const RouteKey& k) {
    return H::combine(std::move(h), static_cast<int>(k.map), k.b);
  }
  static RouteKey host_v4(uint32_t be) {
    RouteKey k;
    k.map = MapId::kRoutesV4;
    k.size = 4;
    std::memcpy(k.b.data(), &be, 4);
    return k;
  }
  static RouteKey host_v6(const uint8_t* a) {
    RouteKey k;
    k.map = MapId::kRoutesV6;
    k.size = 16;
    std::memcpy(k.b.data(), a, 16);
    return k;
  }
  static RouteKey prefix(const Prefix& p) {
    RouteKey k;
    if (p.family == 6 && p.len == 64) {
      k.map = MapId::kRoutesV6_64;
      k.size = 8;
      std::memcpy(k.b.data(), p.addr.data(), 8);
      return k;
    }
    const uint32_t len = p.len;
    std::memcpy(k.b.data(), &len, 4);
    if (p.family == 4) {
      k.map = MapId::kPrefixesV4;
      k.size = 8;
      std::memcpy(k.b.data() + 4, p.addr.data(), 4);
    } else {
      k.map = MapId::kPrefixesV6;
      k.size = 20;
      std::memcpy(k.b.data() + 4, p.addr.data(), 16);
    }
    return k;
  }
  Prefix as_prefix() const {
    Prefix p;
    switch (map) {
      case MapId::kRoutesV4:
        p.family = 4, p.len = 32;
        std::memcpy(p.addr.data(), b.data(), 4);
        break;
      case MapId::kRoutesV6:
        p.family = 6, p.len = 128;
        std::memcpy(p.addr.data(), b.data(), 16);
        break;
      case MapId::kRoutesV6_64:
        p.family = 6, p.len = 64;
        std::memcpy(p.addr.data(), b.data(), 8);
        break;
      default: {
        uint32_t len;
        std::memcpy(&len, b.data(), 4);
        p.family = map == MapId::kPrefixesV4 ? 4 : 6;
        p.len = static_cast<uint8_t>(len);
        std::memcpy(p.addr.data(), b.data() + 4, p.family == 4 ? 4 : 16);
      }
    }
    return p;
  }
  // The Subscriber field this key comes from, and its text.
  std::pair<const char*, std::string> describe() const {
    Prefix p = as_prefix();
    switch (map) {
      case MapId::kRoutesV4:
        return {"ipv4", format_prefix(p).substr(0, format_prefix(p).find('/'))};
      case MapId::kRoutesV6:
        return {"ipv6", format_ipv6(p.addr.data())};
      case MapId::kPrefixesV4:
        return {"ipv4_prefixes", format_prefix(p)};
      default:
        return {"ipv6_prefixes", format_prefix(p)};
    }
  }
};


namespace {

// A claim as (family index, length, start): IPv4 as a 32-bit integer, IPv6 as
// its first 64 bits (host order).
struct Span {
  int fi = 0;
  uint32_t len = 0;
  uint64_t start = 0;
  bool host = false;
  // Last value covered (hosts: the start itself).
  uint64_t end() const {
    if (host) return start;
    return start | ((uint64_t{1} << ((fi ? 64 : 32) - len)) - 1);
  }
  uint64_t masked(uint32_t l) const {
    const uint64_t width = fi ? 64 : 32;
    return start & ~((uint64_t{1} << (width - l)) - 1);
  }
};

uint64_t load_be(const uint8_t* a, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | a[i];
  return v;
}

Prefix prefix_at(int fi, uint64_t start, uint32_t len) {
  Prefix p;
  p.family = fi ? 6 : 4;
  p.len = static_cast<uint8_t>(len);
  const size_t n = fi ? 8 : 4;
  for (size_t i = 0; i < n; ++i) p.addr[i] = static_cast<uint8_t>(start >> (8 * (n - 1 - i)));
  return p;
}

constexpr uint32_t kMinPrefix[2] = {8, 40}, kMaxPrefix[2] = {31, 64};

Span span_of(const Prefix& p) {
  Span s;
  s.fi = p.family == 4 ? 0 : 1;
  s.len = p.len;
  s.host = p.len == (s.fi ? 128 : 32);
  s.start = load_be(p.addr.data(), s.fi ? 8 : 4);
  return s;
}

}  // namespace

struct SubscriberStore::Plan {
  struct Entry {
    size_t input = 0;
    SubscriberSpec spec;
    int64_t old_rec = -1;
    absl::InlinedVector<RouteKey, 3> claims;
    uint64_t owned = 0;  // bit i: claims[i] had an owner when planned (i < 64)
  };
  std::vector<Entry> entries;  // created or updated
  absl::flat_hash_map<uint64_t, size_t> keys;  // every planned key (unchanged included)
  absl::flat_hash_map<RouteKey, uint64_t> claims;  // route key → claiming key rank
  uint64_t adds[kMapCount] = {};
  uint64_t created = 0, updated = 0, unchanged = 0;
  std::vector<size_t> accepted;  // input indexes planned (incl. unchanged)
  bool force = false;   // rewrite every entry, unchanged ones too (journal recovery)
  bool resync = false;  // same provisioning = unchanged, even under "follow" (stream())
  // Nested overlaps inside the plan: prefix lengths in use and every claim
  // ordered by (start, len, rank, spec index << 32 | claim index).
  uint64_t len_count[2][65] = {};
  absl::btree_set<std::tuple<uint64_t, uint32_t, uint64_t, uint64_t>> ord[2];
};

namespace {

constexpr size_t kPrefetchAhead = 8;

constexpr MapId kRouteMaps[] = {MapId::kRoutesV4, MapId::kRoutesV6, MapId::kRoutesV6_64,
                                MapId::kPrefixesV4, MapId::kPrefixesV6};

// Key size of a route map (struct xbng_v6_key etc. in abi.h).
constexpr size_t route_key_size(MapId m) {
  return m == MapId::kRoutesV4     ? 4
         : m == MapId::kRoutesV6    ? 16
         : m == MapId::kRoutesV6_64 ? 8
         : m == MapId::kPrefixesV4  ? 8
                                    : 20;
}

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

Status kernel_status(int err, const std::string& what) {
  err = err < 0 ? -err : err;
  const StatusCode code = (err == E2BIG || err == ENOMEM || err == ENOSPC)
                              ? StatusCode::RESOURCE_EXHAUSTED
                              : StatusCode::INTERNAL;
  return Status(code, fmt::format("{}: {}", what, std::strerror(err)));
}

}  // namespace

// Validation message with the entry's position prefixed (formatted only on
// error: the hot path of a bulk load formats nothing).
Status validate_at(const xbng::v1::Subscriber& m, const PortResolver& ports, bool in_request,
                   size_t i, SubscriberSpec* out) {
  Status st = validate_subscriber(m, ports, "", out);
  if (st.ok()) return st;
  return Status(st.error_code(), in_request
                                     ? fmt::format("subscribers[{}]{}", i, st.error_message())
                                     : fmt::format("entry {}{}", i, st.error_message()));
}

namespace {

struct MapWrites {
  std::vector<uint8_t> keys;
  std::vector<struct xbng_route> vals;
  std::vector<std::optional<struct xbng_route>> old;
};

}  // namespace

SubscriberStore::SubscriberStore(const StoreMaps& maps, PortResolver ports, EventHub* hub)
    : maps_(maps), ports_(std::move(ports)), hub_(hub) {
  // Reserve up front: growing a table at 1M entries would briefly hold the
  // old and the new table (an RSS peak). Untouched slots are not resident.
  const size_t cap = maps_.max_entries[static_cast<int>(MapId::kSubscribers)];
  own_v4_.reserve(cap);
  own_v6_.reserve(cap);
  own_v6_64_.reserve(cap);
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
    spdlog::warn("{} provisioned address(es)/prefix(es) overlap reserved addresses (router, "
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
  learned->reset();
  if (!out->has_mac) {
    struct xbng_subscriber v;
    if (bpf_map_lookup_elem(maps_.fd[static_cast<int>(MapId::kSubscribers)], &k, &v) == 0 &&
        (v.flags & XBNG_SUB_F_MAC_VALID)) {
      Mac m;
      std::memcpy(m.data(), v.mac, 6);
      *learned = m;
    }
  }
  return true;
}

Status SubscriberStore::learn_mac(const SubKey& k, const Mac& mac) {
  std::unique_lock l(mu_);
  auto it = index_.find(key_rank(k));
  if (it == index_.end())
    return Status(StatusCode::NOT_FOUND, key_to_string(k, ports_) + ": not provisioned");
  const SubscriberSpec& s = recs_[it->second];
  if (s.has_mac) {
    if (s.mac == mac) return Status::OK;
    return Status(StatusCode::FAILED_PRECONDITION,
                  key_to_string(k, ports_) + ": provisioned with another MAC");
  }
  const int fd = maps_.fd[static_cast<int>(MapId::kSubscribers)];
  struct xbng_subscriber v;
  if (bpf_map_lookup_elem(fd, &k, &v) != 0)
    return Status(StatusCode::INTERNAL, fmt::format("{}: reading the subscriber entry: {}",
                                                    key_to_string(k, ports_), std::strerror(errno)));
  if (v.flags & XBNG_SUB_F_MAC_VALID) {
    if (std::memcmp(v.mac, mac.data(), 6) == 0) return Status::OK;
    return Status(StatusCode::FAILED_PRECONDITION,
                  fmt::format("{}: MAC {} already learned", key_to_string(k, ports_),
                              format_mac(v.mac)));
  }
  std::memcpy(v.mac, mac.data(), 6);
  v.flags |= XBNG_SUB_F_MAC_VALID;
  if (bpf_map_update_elem(fd, &k, &v, BPF_EXIST) != 0)
    return Status(StatusCode::INTERNAL, fmt::format("{}: writing the learned MAC: {}",
                                                    key_to_string(k, ports_), std::strerror(errno)));
  publish(xbng::v1::Event::MAC_LEARNED, k, &mac);
  return Status::OK;
}

uint64_t SubscriberStore::map_entries(MapId id) const {
  std::shared_lock l(mu_);
  return map_entries_locked(id);
}

void SubscriberStore::claims_of(const SubscriberSpec& s, std::vector<RouteKey>* out) {
  if (s.has_ipv4) out->push_back(RouteKey::host_v4(s.ipv4));
  if (s.has_ipv6) out->push_back(RouteKey::host_v6(s.ipv6.data()));
  for (const auto& p : s.prefixes) out->push_back(RouteKey::prefix(p));
}

void SubscriberStore::prefetch_owners(const SubscriberSpec& s) const {
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

int64_t SubscriberStore::owner_of(const RouteKey& k) const {
  switch (k.map) {
    case MapId::kRoutesV4: {
      uint32_t a;
      std::memcpy(&a, k.b.data(), 4);
      auto it = own_v4_.find(a);
      return it == own_v4_.end() ? int64_t{-1} : int64_t{it->second};
    }
    case MapId::kRoutesV6: {
      Ipv6 a;
      std::memcpy(a.data(), k.b.data(), 16);
      auto it = own_v6_.find(a);
      return it == own_v6_.end() ? int64_t{-1} : int64_t{it->second};
    }
    case MapId::kRoutesV6_64: {
      uint64_t a;
      std::memcpy(&a, k.b.data(), 8);
      auto it = own_v6_64_.find(a);
      return it == own_v6_64_.end() ? int64_t{-1} : int64_t{it->second};
    }
    default: {
      auto it = own_lpm_.find(k.as_prefix());
      return it == own_lpm_.end() ? int64_t{-1} : int64_t{it->second};
    }
  }
}

void SubscriberStore::ord_insert(const RouteKey& k, uint32_t rec) {
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

void SubscriberStore::ord_erase(const RouteKey& k, uint32_t rec) {
  const Span sp = span_of(k.as_prefix());
  if (!sp.host) {
    if (ord_pfx_[sp.fi].erase({sp.start, uint64_t{sp.len} << 32 | rec})) --pfx_len_[sp.fi][sp.len];
  } else if (sp.fi == 0) {
    ord_v4_host_.erase(sp.start << 32 | rec);
  } else {
    ord_v6_host_.erase({sp.start, rec});
  }
}

void SubscriberStore::set_owner(const RouteKey& k, uint32_t rec) {
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
    default: {
      if (take(own_lpm_, k.as_prefix()))
        ++(k.map == MapId::kPrefixesV4 ? lpm_v4_count_ : lpm_v6_count_);
    }
  }
}

void SubscriberStore::erase_owner(const RouteKey& k, uint32_t rec) {
  switch (k.map) {
    case MapId::kRoutesV4: {
      uint32_t a;
      std::memcpy(&a, k.b.data(), 4);
      if (auto it = own_v4_.find(a); it != own_v4_.end() && it->second == rec) {
        own_v4_.erase(it);
        ord_erase(k, rec);
      }
      break;
    }
    case MapId::kRoutesV6: {
      Ipv6 a;
      std::memcpy(a.data(), k.b.data(), 16);
      if (auto it = own_v6_.find(a); it != own_v6_.end() && it->second == rec) {
        own_v6_.erase(it);
        ord_erase(k, rec);
      }
      break;
    }
    case MapId::kRoutesV6_64: {
      uint64_t a;
      std::memcpy(&a, k.b.data(), 8);
      if (auto it = own_v6_64_.find(a); it != own_v6_64_.end() && it->second == rec) {
        own_v6_64_.erase(it);
        ord_erase(k, rec);
      }
      break;
    }
    default: {
      if (auto it = own_lpm_.find(k.as_prefix()); it != own_lpm_.end() && it->second == rec) {
        own_lpm_.erase(it);
        ord_erase(k, rec);
        --(k.map == MapId::kPrefixesV4 ? lpm_v4_count_ : lpm_v6_count_);
      }
    }
  }
}

Status SubscriberStore::overlap(const RouteKey& c, uint64_t rank, const SubKey& key,
                                const absl::flat_hash_map<uint64_t, size_t>& released,
                                const Plan& p, const std::vector<SubscriberSpec>& specs,
                                bool atomic, size_t input) const {
  auto where = [&] {
    return atomic ? fmt::format("subscribers[{}]", input) : fmt::format("entry {}", input);
  };
  const Span sp = span_of(c.as_prefix());
  const int fi = sp.fi;
  auto foreign = [&](uint32_t rec) {
    const SubKey& ok = recs_[rec].key;
    return !(ok == key) && !released.contains(key_rank(ok));
  };
  auto owned_err = [&](const char* ofield, const std::string& ovalue, uint32_t rec) {
    auto [field, value] = c.describe();
    return Status(StatusCode::FAILED_PRECONDITION,
                  fmt::format("{}: field {}: \"{}\" overlaps {} \"{}\" owned by subscriber {}",
                              where(), field, value, ofield, ovalue, owner_name(rec)));
  };
  auto claimed_err = [&](const RouteKey& oc, uint64_t orank) {
    auto [field, value] = c.describe();
    auto [ofield, ovalue] = oc.describe();
    SubKey ok{};
    ok.ifindex = static_cast<uint32_t>(orank >> 32);
    ok.outer_vid = static_cast<uint16_t>(orank >> 16);
    ok.inner_vid = static_cast<uint16_t>(orank);
    return Status(StatusCode::FAILED_PRECONDITION,
                  fmt::format("{}: field {}: \"{}\" overlaps {} \"{}\" claimed by subscriber {} in "
                              "this request",
                              where(), field, value, ofield, ovalue, key_to_string(ok, ports_)));
  };
  const char* pfield = fi ? "ipv6_prefixes" : "ipv4_prefixes";
  // Inside a shorter prefix: one exact lookup per prefix length in use.
  for (uint32_t l = kMinPrefix[fi]; l <= kMaxPrefix[fi] && l < sp.len; ++l) {
    const bool in_index = pfx_len_[fi][l] != 0, in_plan = p.len_count[fi][l] != 0;
    if (!in_index && !in_plan) continue;
    const Prefix m = prefix_at(fi, sp.masked(l), l);
    const RouteKey mk = RouteKey::prefix(m);
    if (in_index) {
      const int64_t o = owner_of(mk);
      if (o >= 0 && foreign(static_cast<uint32_t>(o)))
        return owned_err(pfield, format_prefix(m), static_cast<uint32_t>(o));
    }
    if (in_plan)
      if (auto pc = p.claims.find(mk); pc != p.claims.end() && pc->second != rank)
        return claimed_err(mk, pc->second);
  }
  if (sp.host) return Status::OK;
  // Contains a longer prefix or a host: range queries on the ordered indexes.
  const uint64_t end = sp.end();
  for (auto it = ord_pfx_[fi].lower_bound({sp.start, 0}); it != ord_pfx_[fi].end() &&
                                                           it->first <= end;
       ++it) {
    const uint32_t olen = static_cast<uint32_t>(it->second >> 32);
    const uint32_t orec = static_cast<uint32_t>(it->second);
    if (olen == sp.len && it->first == sp.start) continue;  // the same prefix: exact check
    if (foreign(orec)) return owned_err(pfield, format_prefix(prefix_at(fi, it->first, olen)), orec);
  }
  if (fi == 0) {
    for (auto it = ord_v4_host_.lower_bound(sp.start << 32);
         it != ord_v4_host_.end() && (*it >> 32) <= end; ++it) {
      const uint32_t orec = static_cast<uint32_t>(*it);
      if (foreign(orec)) {
        auto [f, v] = RouteKey::host_v4(recs_[orec].ipv4).describe();
        return owned_err(f, v, orec);
      }
    }
  } else {
    for (auto it = ord_v6_host_.lower_bound({sp.start, 0});
         it != ord_v6_host_.end() && it->first <= end; ++it) {
      if (foreign(it->second)) {
        auto [f, v] = RouteKey::host_v6(recs_[it->second].ipv6.data()).describe();
        return owned_err(f, v, it->second);
      }
    }
  }
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
  return Status::OK;
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

void SubscriberStore::publish(int type, const SubKey& k, const Mac* mac) {
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

// ---- adoption -----------------------------------------------------------------

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
    return fmt::format("journal {}: a change of {} subscribers left pending is void: the maps are "
                       "new",
                       journal_->path(), in->size());
  return err.empty() ? "" : "journal " + err + " (discarded: the maps are new)";
}

Status SubscriberStore::journal_begin(const JournalIntent& intent) {
  if (!journal_ || recovering_) return Status::OK;
  if (int rc = journal_->begin(intent))
    return kernel_status(rc, fmt::format("writing the store journal {} (nothing was changed)",
                                         journal_->path()));
  return Status::OK;
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
      return fmt::format("journal: an interrupted delete of {} subscribers could NOT be "
                         "completed: {}",
                         keys.size(), st.error_message());
    return fmt::format("journal: an interrupted delete of {} subscribers was rolled forward: {} "
                       "removed now, {} were already gone",
                       keys.size(), deleted, gone);
  }
  // An upsert is rolled back: keys it created removed, every other key given
  // its previous spec again (rewritten whole, routes included).
  uint64_t removed = 0, absent = 0;
  if (Status st = remove_locked(in.created, &removed, &absent); !st.ok())
    return fmt::format("journal: an interrupted {} of {} subscribers could NOT be rolled back "
                       "(removing the {} it created: {})",
                       what, in.size(), in.created.size(), st.error_message());
  Plan p;
  p.force = true;
  Status err;
  std::vector<size_t> idx(in.before.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  plan(in.before, idx, Mode::kAtomic, &p, &err, nullptr);
  if (err.ok()) err = apply(p);
  if (!err.ok())
    return fmt::format("journal: an interrupted {} of {} subscribers could NOT be rolled back "
                       "(restoring {} previous specs: {}); they are as the maps show them",
                       what, in.size(), in.before.size(), err.error_message());
  return fmt::format("journal: an interrupted {} of {} subscribers was rolled back: {} restored "
                     "to their previous provisioning, {} it had created removed",
                     what, in.size(), in.before.size(), removed);
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
    if (!err.empty()) spdlog::error("store journal: {}; no pending change resolved", err);
  }
  recovering_ = true;
  auto done_recovering = absl::MakeCleanup([this] { recovering_ = false; });
  const int sfd = maps_.fd[static_cast<int>(MapId::kSubscribers)];
  const int pfd = maps_.fd[static_cast<int>(MapId::kPolice)];
  // Issue 12: records whose entries must be rewritten (the port default
  // changed since they were written, or their slot was unusable).
  std::vector<uint32_t> refresh;
  std::vector<SubscriberSpec> reslot;
  int rc = map_for_each(sfd, sizeof(SubKey), sizeof(struct xbng_subscriber),
                        [&](const void* k, const void* v) {
                          SubscriberSpec s;
                          std::memcpy(&s.key, k, sizeof(SubKey));
                          struct xbng_subscriber sv;
                          std::memcpy(&sv, v, sizeof sv);
                          s.has_mac = (sv.flags & XBNG_SUB_F_MAC_VALID) &&
                                      !(sv.flags & XBNG_SUB_F_LEARN_MAC);
                          if (s.has_mac) std::memcpy(s.mac.data(), sv.mac, 6);
                          s.mac_policy = static_cast<uint8_t>(
                              (sv.flags & XBNG_SUB_F_MAC_POLICY_MASK) >>
                              XBNG_SUB_F_MAC_POLICY_SHIFT);
                          s.has_ipv4 = sv.flags & XBNG_SUB_F_HAS_IPV4;
                          if (s.has_ipv4) s.ipv4 = sv.ipv4;
                          s.has_ipv6 = sv.flags & XBNG_SUB_F_HAS_IPV6;
                          if (s.has_ipv6) std::memcpy(s.ipv6.data(), sv.ipv6, 16);
                          // Issue 12: the policy in force, from the
                          // subscriber's bucket and its police entry.
                          struct xbng_police pv {};
                          const bool slot_ok =
                              sv.slot < maps_.max_entries[static_cast<int>(MapId::kPolice)] &&
                              (sv.slot >= recs_.size() || recs_[sv.slot].key.ifindex == 0) &&
                              bpf_map_lookup_elem(pfd, &sv.slot, &pv) == 0;
                          const PolicySpec in_maps{pv.up_rate_bps, sv.up.burst_bytes,
                                                   pv.down_rate_bps, pv.down.burst_bytes};
                          s.has_policy = sv.flags & XBNG_SUB_F_POLICY_SET;
                          if (s.has_policy) s.policy = in_maps;
                          const SubKey key = s.key;
                          if (!slot_ok) {  // no usable slot: placed after the others
                            reslot.push_back(std::move(s));
                            return;
                          }
                          const bool stale = ports_.policy_of(s) != in_maps;
                          place_record(sv.slot, std::move(s));
                          index_.emplace(key_rank(key), sv.slot);
                          count_key(key, +1);
                          if (stale) refresh.push_back(sv.slot);
                        });
  if (rc) throw DataplaneError(fmt::format("reading map subscribers: {}", std::strerror(-rc)));
  for (uint32_t r = 0; r < recs_.size(); ++r)
    if (recs_[r].key.ifindex == 0) free_.push_back(r);
  std::reverse(free_.begin(), free_.end());  // lowest slots first
  for (auto& s : reslot) {
    const SubKey key = s.key;
    const uint32_t rec = alloc_record(std::move(s));
    index_.emplace(key_rank(key), rec);
    count_key(key, +1);
    refresh.push_back(rec);
  }
  uint64_t routes = 0;
  std::vector<uint8_t> orphans[kMapCount];
  for (MapId m : kRouteMaps) {
    const size_t ks = route_key_size(m);
    rc = map_for_each(maps_.fd[static_cast<int>(m)], ks, sizeof(struct xbng_route),
                      [&](const void* k, const void* v) {
                        RouteKey rk;
                        rk.map = m;
                        rk.size = static_cast<uint8_t>(ks);
                        std::memcpy(rk.b.data(), k, ks);
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
                          orphans[static_cast<int>(m)].insert(
                              orphans[static_cast<int>(m)].end(), rk.b.begin(),
                              rk.b.begin() + ks);
                          return;
                        }
                        set_owner(rk, it->second);
                        ++routes;
                      });
    if (rc)
      throw DataplaneError(fmt::format("reading map {}: {}", map_name(m), std::strerror(-rc)));
  }
  uint64_t norphans = 0;
  for (MapId m : kRouteMaps) {
    auto& o = orphans[static_cast<int>(m)];
    if (o.empty()) continue;
    const size_t ks = route_key_size(m);
    norphans += o.size() / ks;
    map_delete_many(maps_.fd[static_cast<int>(m)], o.data(), o.size() / ks, ks);
  }
  // A host route missing for an address the subscriber entry claims (an
  // interrupted update): install it again.
  uint64_t repaired = 0;
  for (auto& [rank, rec] : index_) {
    SubscriberSpec& s = recs_[rec];
    std::sort(s.prefixes.begin(), s.prefixes.end());
    std::vector<RouteKey> cl;
    claims_of(s, &cl);
    for (const auto& c : cl) {
      if (owner_of(c) >= 0) continue;
      struct xbng_route r {};
      r.sub = s.key;
      struct xbng_subscriber sv;
      if (bpf_map_lookup_elem(sfd, &s.key, &sv) == 0 && (sv.flags & XBNG_SUB_F_MAC_VALID)) {
        std::memcpy(r.mac, sv.mac, 6);
        r.flags = XBNG_ROUTE_F_MAC_VALID;
      }
      if (bpf_map_update_elem(maps_.fd[static_cast<int>(c.map)], c.b.data(), &r, BPF_ANY) == 0) {
        set_owner(c, rec);
        ++repaired;
      }
    }
  }
  std::string recovered;
  if (intent) {
    recovered = recover(*intent);
    spdlog::warn("{}", recovered);
    // Records the recovery rewrote carry the current defaults already.
    absl::flat_hash_set<uint64_t> touched;
    for (const auto& k : intent->created) touched.insert(key_rank(k));
    for (const auto& s : intent->before) touched.insert(key_rank(s.key));
    std::erase_if(refresh, [&](uint32_t rec) {
      return recs_[rec].key.ifindex == 0 || touched.contains(key_rank(recs_[rec].key));
    });
  }
  if (!refresh.empty()) {
    Plan p;
    for (uint32_t rec : refresh) {
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
                   refresh.size(), st.error_message());
  }
  *summary = fmt::format("{} subscribers and {} routes adopted from the pinned maps", index_.size(),
                         routes);
  if (!refresh.empty())
    *summary += fmt::format(", {} rewritten for the current default policies", refresh.size());
  if (norphans) *summary += fmt::format(", {} orphan routes removed", norphans);
  if (repaired) *summary += fmt::format(", {} missing host routes reinstalled", repaired);
  if (!recovered.empty()) *summary += "; " + recovered;
  std::move(done_recovering).Invoke();
  if (intent) journal_clear();
  return index_.size();
}

// ---- planning ---------------------------------------------------------------

size_t SubscriberStore::plan(const std::vector<SubscriberSpec>& specs,
                             const std::vector<size_t>& input_index, Mode mode, Plan* p,
                             Status* atomic_error,
                             std::vector<std::pair<size_t, Status>>* failures) {
  const bool atomic = mode == Mode::kAtomic;
  auto where = [&](size_t i) {
    return atomic ? fmt::format("subscribers[{}]", input_index[i])
                  : fmt::format("entry {}", input_index[i]);
  };
  absl::flat_hash_map<uint64_t, size_t> batch_keys;
  if (atomic) {
    for (size_t i = 0; i < specs.size(); ++i) {
      auto [it, ok] = batch_keys.emplace(key_rank(specs[i].key), i);
      if (!ok) {
        *atomic_error = Status(
            StatusCode::INVALID_ARGUMENT,
            fmt::format("{}: key {} appears twice in the request (also subscribers[{}])",
                        where(i), key_to_string(specs[i].key, ports_), input_index[it->second]));
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
    if (i + kPrefetchAhead < specs.size()) prefetch_owners(specs[i + kPrefetchAhead]);
    const SubscriberSpec& s = specs[i];
    const uint64_t rank = key_rank(s.key);
    if (!atomic && p->keys.contains(rank)) return i;  // needs the earlier entry applied first
    auto it = index_.find(rank);
    const int64_t old = it == index_.end() ? int64_t{-1} : int64_t{it->second};
    // Under "follow", an upsert without MAC is a request to learn again.
    const bool unchanged = !p->force && old >= 0 && recs_[old].same_provisioning(s) &&
                           (s.has_mac || p->resync ||
                            effective_mac_policy(s) != XBNG_MAC_POLICY_FOLLOW);
    cl.clear();
    claims_of(s, &cl);
    Status err;
    uint64_t adds[kMapCount] = {};
    uint64_t owned = 0;
    for (size_t ci = 0; ci < cl.size(); ++ci) {
      const RouteKey& c = cl[ci];
      if (reserved_)
        if (const auto* r = reserved_->find(c.as_prefix())) {
          auto [field, value] = c.describe();
          err = Status(StatusCode::FAILED_PRECONDITION,
                       fmt::format("{}: field {}: \"{}\" conflicts with {}: {} is reserved, never "
                                   "a subscriber's",
                                   where(i), field, value, r->what, format_prefix(r->prefix)));
          break;
        }
      if (auto pc = p->claims.find(c); pc != p->claims.end() && pc->second != rank) {
        SubKey ok{};
        ok.ifindex = static_cast<uint32_t>(pc->second >> 32);
        ok.outer_vid = static_cast<uint16_t>(pc->second >> 16);
        ok.inner_vid = static_cast<uint16_t>(pc->second);
        auto [field, value] = c.describe();
        err = Status(StatusCode::FAILED_PRECONDITION,
                     fmt::format("{}: field {}: \"{}\" is also claimed by subscriber {} in this "
                                 "request",
                                 where(i), field, value, key_to_string(ok, ports_)));
        break;
      }
      const int64_t o = owner_of(c);
      if (o >= 0 && !(recs_[o].key == s.key)) {
        const uint64_t orank = key_rank(recs_[o].key);
        const bool released = atomic ? batch_keys.contains(orank) : p->keys.contains(orank);
        if (!released) {
          auto [field, value] = c.describe();
          err = Status(StatusCode::FAILED_PRECONDITION,
                       fmt::format("{}: field {}: \"{}\" is owned by subscriber {}", where(i),
                                   field, value, owner_name(static_cast<uint32_t>(o))));
          break;
        }
      }
      err = overlap(c, rank, s.key, atomic ? batch_keys : p->keys, *p, specs, atomic,
                    input_index[i]);
      if (!err.ok()) break;
      if (o < 0)
        ++adds[static_cast<int>(c.map)];
      else if (ci < 64)
        owned |= uint64_t{1} << ci;
    }
    if (err.ok() && old < 0) ++adds[static_cast<int>(MapId::kSubscribers)];
    if (err.ok()) {
      for (int m = 0; m < kMapCount; ++m) {
        if (!adds[m]) continue;
        const uint64_t cur = map_entries_locked(static_cast<MapId>(m));
        if (cur + p->adds[m] + adds[m] > maps_.max_entries[m]) {
          err = Status(StatusCode::RESOURCE_EXHAUSTED,
                       fmt::format("{}: map {} is full: {} entries + {} to add > {} max_entries "
                                   "(--max-subscribers)",
                                   where(i), map_name(static_cast<MapId>(m)), cur,
                                   p->adds[m] + adds[m], maps_.max_entries[m]));
          break;
        }
      }
    }
    if (!err.ok()) {
      if (atomic) {
        *atomic_error = err;
        return specs.size();
      }
      failures->emplace_back(input_index[i], err);
      continue;
    }
    for (size_t ci = 0; ci < cl.size(); ++ci) {
      const RouteKey& c = cl[ci];
      p->claims[c] = rank;
      const Span sp = span_of(c.as_prefix());
      if (!sp.host) ++p->len_count[sp.fi][sp.len];
      p->ord[sp.fi].insert({sp.start, sp.len, rank, uint64_t{i} << 32 | ci});
    }
    for (int m = 0; m < kMapCount; ++m) p->adds[m] += adds[m];
    p->keys[rank] = i;
    p->accepted.push_back(input_index[i]);
    if (unchanged) {
      ++p->unchanged;
      continue;
    }
    (old < 0 ? p->created : p->updated)++;
    p->entries.push_back(
        Plan::Entry{input_index[i], s, old, {cl.begin(), cl.end()}, owned});
  }
  return specs.size();
}

uint8_t SubscriberStore::effective_mac_policy(const SubscriberSpec& s) const {
  if (s.mac_policy != XBNG_MAC_POLICY_DEFAULT) return s.mac_policy;
  struct xbng_port port {};
  if (bpf_map_lookup_elem(maps_.fd[static_cast<int>(MapId::kPorts)], &s.key.ifindex, &port) == 0 &&
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
    const int fd = maps_.fd[static_cast<int>(c.map)];
    struct xbng_route r;
    if (bpf_map_lookup_elem(fd, c.b.data(), &r) != 0 || !(r.sub == k)) continue;
    if ((r.flags & XBNG_ROUTE_F_MAC_VALID) && std::memcmp(r.mac, mac.data(), 6) == 0) continue;
    std::memcpy(r.mac, mac.data(), 6);
    r.flags |= XBNG_ROUTE_F_MAC_VALID;
    if (bpf_map_update_elem(fd, c.b.data(), &r, BPF_EXIST) == 0) ++moved;
  }
  spdlog::info("subscriber {}: MAC moved to {} (mac policy follow); {} route(s) follow it",
               key_to_string(k, ports_), format_mac(mac.data()), moved);
}

uint64_t SubscriberStore::map_entries_locked(MapId id) const {
  switch (id) {
    case MapId::kSubscribers:
      return index_.size();
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

// ---- applying -----------------------------------------------------------------

Status SubscriberStore::apply(Plan& p) {
  if (p.entries.empty()) return Status::OK;
  // Write-ahead: what every touched key was before (issue 14). From here
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
  const int sfd = maps_.fd[static_cast<int>(MapId::kSubscribers)];
  const int pfd = maps_.fd[static_cast<int>(MapId::kPolice)];
  const size_t n = p.entries.size();
  std::vector<SubKey> skeys(n);
  std::vector<struct xbng_subscriber> svals(n);
  std::vector<std::optional<struct xbng_subscriber>> sold(n);
  std::vector<Mac> mac(n);
  std::vector<bool> mac_valid(n);
  // Issue 12: each record's index is its slot in `police`; new entries take
  // theirs now (returned if the plan is rolled back).
  std::vector<uint32_t> slots(n);
  std::vector<uint32_t> taken;
  std::vector<struct xbng_police> pvals(n);
  std::vector<std::optional<struct xbng_police>> pold(n);
  std::vector<bool> down_policed(n);
  uint32_t next_slot = static_cast<uint32_t>(recs_.size());
  for (size_t i = 0; i < n; ++i) {
    if (p.entries[i].old_rec >= 0) {
      slots[i] = static_cast<uint32_t>(p.entries[i].old_rec);
    } else if (!free_.empty()) {
      slots[i] = free_.back();
      free_.pop_back();
      taken.push_back(slots[i]);
    } else {
      slots[i] = next_slot++;
    }
  }
  auto give_back_slots = [&] { free_.insert(free_.end(), taken.begin(), taken.end()); };
  for (size_t i = 0; i < n; ++i) {
    const auto& e = p.entries[i];
    const SubscriberSpec& s = e.spec;
    struct xbng_subscriber v {};
    uint16_t flags = 0;
    const PolicySpec pol = ports_.policy_of(s);
    struct xbng_police pv {};
    if (e.old_rec >= 0) {
      struct xbng_police opv;
      if (bpf_map_lookup_elem(pfd, &slots[i], &opv) == 0) {
        pold[i] = opv;
        pv = opv;  // counters carried over
      }
    }
    // A changed rate or depth starts from a full bucket; an unchanged one
    // keeps its state (no free burst on every unrelated update).
    pv.up_rate_bps = pol.up_rate;
    pv.down_rate_bps = pol.down_rate;
    const uint32_t down_fp = policy_byte_ns_fp(pol.down_rate);
    if (pv.down.byte_ns_fp != down_fp || pv.down.burst_bytes != pol.down_burst)
      pv.down = {0, down_fp, static_cast<uint32_t>(pol.down_burst)};
    pvals[i] = pv;
    down_policed[i] = pol.down_rate != 0;
    v.slot = slots[i];
    v.up = {0, policy_byte_ns_fp(pol.up_rate), static_cast<uint32_t>(pol.up_burst)};
    if (s.has_policy) flags |= XBNG_SUB_F_POLICY_SET;
    if (s.has_ipv4) flags |= XBNG_SUB_F_HAS_IPV4, v.ipv4 = s.ipv4;
    if (s.has_ipv6) flags |= XBNG_SUB_F_HAS_IPV6, std::memcpy(v.ipv6, s.ipv6.data(), 16);
    for (const auto& pf : s.prefixes)
      flags |= pf.family == 4 ? XBNG_SUB_F_V4_PREFIX : XBNG_SUB_F_V6_PREFIX;
    if (s.has_mac) {
      flags |= XBNG_SUB_F_MAC_VALID;
      std::memcpy(v.mac, s.mac.data(), 6);
    } else {
      flags |= XBNG_SUB_F_LEARN_MAC;
    }
    flags |= static_cast<uint16_t>(s.mac_policy << XBNG_SUB_F_MAC_POLICY_SHIFT);
    if (e.old_rec >= 0) {
      struct xbng_subscriber ov;
      if (bpf_map_lookup_elem(sfd, &s.key, &ov) == 0) {
        sold[i] = ov;
        v.up_packets = ov.up_packets;
        v.up_bytes = ov.up_bytes;
        if (ov.up.byte_ns_fp == v.up.byte_ns_fp && ov.up.burst_bytes == v.up.burst_bytes)
          v.up.tat_ns = ov.up.tat_ns;
        // Keep a learned MAC when the request still asks to learn, except
        // under "follow": an upsert without MAC makes it learn again.
        if (!s.has_mac && !recs_[e.old_rec].has_mac && (ov.flags & XBNG_SUB_F_MAC_VALID) &&
            effective_mac_policy(s) != XBNG_MAC_POLICY_FOLLOW) {
          flags |= XBNG_SUB_F_MAC_VALID;
          std::memcpy(v.mac, ov.mac, 6);
        }
      }
    }
    v.flags = flags;
    skeys[i] = s.key;
    svals[i] = v;
    std::memcpy(mac[i].data(), v.mac, 6);
    mac_valid[i] = flags & XBNG_SUB_F_MAC_VALID;
  }

  MapWrites w[kMapCount];
  std::vector<uint8_t> dels[kMapCount];
  {
    // Sized up front (see plan()): growing them by doubling was the largest
    // transient of a maximal atomic upsert.
    size_t claims[kMapCount] = {}, key_bytes[kMapCount] = {};
    for (const auto& e : p.entries)
      for (const auto& c : e.claims) {
        ++claims[static_cast<int>(c.map)];
        key_bytes[static_cast<int>(c.map)] += c.size;
      }
    for (int m = 0; m < kMapCount; ++m) {
      w[m].keys.reserve(key_bytes[m]);
      w[m].vals.reserve(claims[m]);
      w[m].old.reserve(claims[m]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const auto& e = p.entries[i];
    for (size_t ci = 0; ci < e.claims.size(); ++ci) {
      const RouteKey& c = e.claims[ci];
      struct xbng_route r {};
      r.sub = e.spec.key;
      r.slot = slots[i];
      if (mac_valid[i]) {
        std::memcpy(r.mac, mac[i].data(), 6);
        r.flags = XBNG_ROUTE_F_MAC_VALID;
      }
      if (down_policed[i]) r.flags |= XBNG_ROUTE_F_POLICED;
      std::optional<struct xbng_route> old;
      if (ci < 64 ? (e.owned >> ci) & 1 : owner_of(c) >= 0) {
        struct xbng_route orv;
        if (bpf_map_lookup_elem(maps_.fd[static_cast<int>(c.map)], c.b.data(), &orv) == 0) {
          old = orv;
          if (orv.sub == r.sub) {  // our own route, kept: keep its counters
            r.down_packets = orv.down_packets;
            r.down_bytes = orv.down_bytes;
            if (std::memcmp(orv.mac, r.mac, 6) == 0 && orv.flags == r.flags &&
                orv.slot == r.slot)
              continue;
          }
        }
      }
      auto& mw = w[static_cast<int>(c.map)];
      mw.keys.insert(mw.keys.end(), c.b.begin(), c.b.begin() + c.size);
      mw.vals.push_back(r);
      mw.old.push_back(old);
    }
    if (e.old_rec >= 0) {
      std::vector<RouteKey> oc;
      claims_of(recs_[e.old_rec], &oc);
      for (const auto& c : oc)
        if (!p.claims.contains(c)) {
          auto& d = dels[static_cast<int>(c.map)];
          d.insert(d.end(), c.b.begin(), c.b.begin() + c.size);
        }
    }
  }

  auto undo_subs = [&](size_t upto) {
    for (size_t i = 0; i < upto; ++i) {
      if (sold[i])
        bpf_map_update_elem(sfd, &skeys[i], &*sold[i], BPF_ANY);
      else
        bpf_map_delete_elem(sfd, &skeys[i]);
    }
  };
  auto undo_routes = [&](MapId m, size_t upto) {
    auto& mw = w[static_cast<int>(m)];
    const size_t ks = mw.vals.empty() ? 0 : mw.keys.size() / mw.vals.size();
    const int fd = maps_.fd[static_cast<int>(m)];
    for (size_t i = 0; i < upto; ++i) {
      if (mw.old[i])
        bpf_map_update_elem(fd, &mw.keys[i * ks], &*mw.old[i], BPF_ANY);
      else
        bpf_map_delete_elem(fd, &mw.keys[i * ks]);
    }
  };

  auto undo_police = [&](size_t upto) {
    for (size_t i = 0; i < upto; ++i)
      if (pold[i]) bpf_map_update_elem(pfd, &slots[i], &*pold[i], BPF_ANY);
  };
  // Policers first: a route flagged POLICED always finds its bucket.
  size_t done = 0;
  if (int rc = map_update_many(pfd, slots.data(), pvals.data(), n, sizeof(uint32_t),
                               sizeof(struct xbng_police), &done)) {
    undo_police(done);
    give_back_slots();
    return kernel_status(rc, fmt::format("writing map police (entry {})",
                                         p.entries[std::min(done, n - 1)].input));
  }
  crash_point("upsert", "police");
  done = 0;
  if (int rc = map_update_many(sfd, skeys.data(), svals.data(), n, sizeof(SubKey),
                               sizeof(struct xbng_subscriber), &done)) {
    undo_subs(done);
    undo_police(n);
    give_back_slots();
    return kernel_status(rc, fmt::format("writing map subscribers (entry {})",
                                         p.entries[std::min(done, n - 1)].input));
  }
  crash_point("upsert", "subscribers");
  // The route maps are independent of each other: with a large batch, write
  // them from two threads (two cores). Any failure rolls back everything.
  struct WriteResult {
    int rc = 0;
    size_t done = 0;
  };
  WriteResult wr[std::size(kRouteMaps)];
  auto write_map = [&](size_t mi) {
    const MapId m = kRouteMaps[mi];
    auto& mw = w[static_cast<int>(m)];
    if (mw.vals.empty()) return;
    const size_t ks = mw.keys.size() / mw.vals.size();
    wr[mi].rc = map_update_many(maps_.fd[static_cast<int>(m)], mw.keys.data(), mw.vals.data(),
                                mw.vals.size(), ks, sizeof(struct xbng_route), &wr[mi].done);
  };
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
    if (!wr[mi].rc) continue;
    for (size_t mj = 0; mj < std::size(kRouteMaps); ++mj) {
      const MapId m = kRouteMaps[mj];
      undo_routes(m, wr[mj].rc ? wr[mj].done : w[static_cast<int>(m)].vals.size());
    }
    undo_subs(n);
    undo_police(n);
    give_back_slots();
    return kernel_status(wr[mi].rc, fmt::format("writing map {}", map_name(kRouteMaps[mi])));
  }
  for (MapId m : kRouteMaps) {
    auto& d = dels[static_cast<int>(m)];
    if (d.empty()) continue;
    const size_t key_size = route_key_size(m);
    if (int rc = map_delete_many(maps_.fd[static_cast<int>(m)], d.data(), d.size() / key_size,
                                 key_size))
      spdlog::warn("removing replaced routes from {}: {}", map_name(m), std::strerror(-rc));
  }
  crash_point("upsert", "old-routes");

  // Index: release the old claims first, then take the new ones (an address
  // may move between two subscribers of the same request).
  for (const auto& e : p.entries) {
    if (e.old_rec < 0) continue;
    std::vector<RouteKey> oc;
    claims_of(recs_[e.old_rec], &oc);
    for (const auto& c : oc) erase_owner(c, static_cast<uint32_t>(e.old_rec));
  }
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchAhead < n) prefetch_owners(p.entries[i + kPrefetchAhead].spec);
    auto& e = p.entries[i];
    uint32_t rec;
    if (e.old_rec >= 0) {
      rec = static_cast<uint32_t>(e.old_rec);
      recs_[rec] = std::move(e.spec);
    } else {
      const SubKey key = e.spec.key;
      rec = slots[i];
      place_record(rec, std::move(e.spec));
      index_.emplace(key_rank(key), rec);
      count_key(key, +1);
    }
    for (const auto& c : e.claims) set_owner(c, rec);
    const SubscriberSpec& sp = recs_[rec];
    publish(e.old_rec >= 0 ? xbng::v1::Event::SUBSCRIBER_UPDATED : xbng::v1::Event::SUBSCRIBER_ADDED,
            sp.key, sp.has_mac ? &sp.mac : nullptr);
  }
  return Status::OK;
}

// ---- RPC-level operations ---------------------------------------------------

Status SubscriberStore::upsert(const std::vector<const xbng::v1::Subscriber*>& in,
                               UpsertResult* out) {
  std::vector<SubscriberSpec> specs(in.size());
  std::vector<size_t> idx(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    idx[i] = i;
    Status st = validate_at(*in[i], ports_, true, i, &specs[i]);
    if (!st.ok()) return st;
  }
  std::unique_lock l(mu_);
  Plan p;
  Status err;
  plan(specs, idx, Mode::kAtomic, &p, &err, nullptr);
  if (!err.ok()) return err;
  if (Status st = apply(p); !st.ok()) return st;
  out->created = p.created;
  out->updated = p.updated;
  out->unchanged = p.unchanged;
  return Status::OK;
}

void SubscriberStore::stream(const std::function<bool(xbng::v1::Subscriber*)>& next,
                             StreamResult* out, bool resync) {
  // Two stages: a reader thread receives and validates batch N+1 while this
  // thread plans and applies batch N.
  struct Batch {
    size_t base = 0, got = 0;
    std::vector<xbng::v1::Subscriber> msgs;
    std::vector<SubscriberSpec> specs;
    std::vector<size_t> idx;
    std::vector<std::pair<size_t, Status>> invalid;
  };
  std::mutex qmu;
  std::condition_variable qcv;
  std::deque<std::unique_ptr<Batch>> q;
  // Processed batches come back for reuse: their messages keep the memory of
  // their strings, so receiving the next batch allocates (almost) nothing.
  std::vector<std::unique_ptr<Batch>> pool;
  bool done = false, abort = false;
  std::thread reader([&] {
    size_t base = 0;
    bool more = true;
    while (more) {
      std::unique_ptr<Batch> b;
      {
        std::lock_guard l(qmu);
        if (!pool.empty()) {
          b = std::move(pool.back());
          pool.pop_back();
        }
      }
      if (!b) {
        b = std::make_unique<Batch>();
        b->msgs.resize(kStreamBatch);
      }
      b->base = base;
      b->got = 0;
      b->specs.clear();
      b->idx.clear();
      b->invalid.clear();
      while (b->got < kStreamBatch && (more = next(&b->msgs[b->got]))) ++b->got;
      if (!b->got) break;
      b->specs.reserve(b->got);
      b->idx.reserve(b->got);
      for (size_t i = 0; i < b->got; ++i) {
        SubscriberSpec sp;
        Status st = validate_at(b->msgs[i], ports_, false, base + i, &sp);
        if (!st.ok()) {
          b->invalid.emplace_back(base + i, st);
          continue;
        }
        b->specs.push_back(std::move(sp));
        b->idx.push_back(base + i);
      }
      base += b->got;
      std::unique_lock l(qmu);
      qcv.wait(l, [&] { return q.size() < 2 || abort; });
      if (abort) break;
      q.push_back(std::move(b));
      qcv.notify_all();
    }
    std::lock_guard l(qmu);
    done = true;
    qcv.notify_all();
  });

  std::vector<std::pair<size_t, Status>> failures;
  for (;;) {
    std::unique_ptr<Batch> b;
    {
      std::unique_lock l(qmu);
      qcv.wait(l, [&] { return !q.empty() || done; });
      if (q.empty()) break;
      b = std::move(q.front());
      q.pop_front();
      qcv.notify_all();
    }
    auto msg = [&](size_t index) { return &b->msgs[index - b->base]; };
    auto fail = [&](size_t index, const Status& st) {
      ++out->failed;
      if (out->failures.size() >= kMaxReportedFailures) return;
      xbng::v1::Failure f;
      f.set_index(index);
      const auto* m = msg(index);
      f.mutable_key()->set_port(m->port());
      f.mutable_key()->set_outer_vlan(m->outer_vlan());
      f.mutable_key()->set_inner_vlan(m->inner_vlan());
      f.set_code(static_cast<int>(st.error_code()));
      f.set_message(st.error_message());
      out->failures.push_back(std::move(f));
    };
    for (auto& [i, st] : b->invalid) fail(i, st);
    std::unique_lock l(mu_);
    size_t pos = 0;
    while (pos < b->specs.size()) {
      std::vector<SubscriberSpec> sub;
      std::vector<size_t> sidx;
      if (pos == 0) {
        sub.swap(b->specs);
        sidx.swap(b->idx);
      } else {
        sub.assign(std::make_move_iterator(b->specs.begin() + pos),
                   std::make_move_iterator(b->specs.end()));
        sidx.assign(b->idx.begin() + pos, b->idx.end());
      }
      Plan p;
      p.resync = resync;
      failures.clear();
      size_t stop = plan(sub, sidx, Mode::kSequential, &p, nullptr, &failures);
      for (auto& [i, st] : failures) fail(i, st);
      Status st = apply(p);
      if (st.ok()) {
        out->applied += p.accepted.size();
      } else {
        // The batch was rolled back: retry its entries one by one so that
        // each is applied whole or reported with its own error.
        spdlog::warn("stream batch of {} rolled back ({}); retrying entry by entry",
                     p.entries.size(), st.error_message());
        out->applied += p.unchanged;
        for (const auto& e : p.entries) {
          Plan one;
          one.resync = resync;
          std::vector<std::pair<size_t, Status>> f1;
          plan({e.spec}, {e.input}, Mode::kSequential, &one, nullptr, &f1);
          Status s1 = f1.empty() ? apply(one) : f1[0].second;
          if (s1.ok())
            ++out->applied;
          else
            fail(e.input, s1);
        }
      }
      if (stop < sub.size()) {
        // Put the unplanned tail back for the next round.
        b->specs.assign(std::make_move_iterator(sub.begin() + stop),
                        std::make_move_iterator(sub.end()));
        b->idx.assign(sidx.begin() + stop, sidx.end());
        pos = 0;
        if (b->specs.empty()) break;
        continue;
      }
      // Keep the larger buffers with the batch for its next use.
      if (sub.capacity() > b->specs.capacity()) b->specs.swap(sub);
      if (sidx.capacity() > b->idx.capacity()) b->idx.swap(sidx);
      break;
    }
    l.unlock();
    std::lock_guard ql(qmu);
    pool.push_back(std::move(b));
  }
  {
    std::lock_guard l(qmu);
    abort = true;
    qcv.notify_all();
  }
  reader.join();
  std::sort(out->failures.begin(), out->failures.end(),
            [](const auto& a, const auto& b) { return a.index() < b.index(); });
}

Status SubscriberStore::remove(const std::vector<const xbng::v1::SubscriberKey*>& keys,
                               uint64_t* deleted, uint64_t* not_found) {
  std::vector<SubKey> ks(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Status st = validate_key(*keys[i], ports_, "", &ks[i]);
    if (!st.ok())  // the position is formatted only on error
      return Status(st.error_code(), fmt::format("keys[{}]{}", i, st.error_message()));
  }
  std::unique_lock l(mu_);
  return remove_locked(ks, deleted, not_found);
}

Status SubscriberStore::remove_locked(const std::vector<SubKey>& ks, uint64_t* deleted,
                                      uint64_t* not_found) {
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(ks.size());
  std::vector<uint32_t> recs;
  recs.reserve(ks.size());
  std::vector<uint8_t> dels[kMapCount];
  std::vector<SubKey> sdel;
  *deleted = *not_found = 0;
  std::vector<RouteKey> cl;
  for (const auto& k : ks) {
    const uint64_t rank = key_rank(k);
    if (!seen.insert(rank).second) continue;
    auto it = index_.find(rank);
    if (it == index_.end()) {
      ++*not_found;
      continue;
    }
    recs.push_back(it->second);
    sdel.push_back(k);
    cl.clear();
    claims_of(recs_[it->second], &cl);
    for (const auto& c : cl) {
      auto& d = dels[static_cast<int>(c.map)];
      d.insert(d.end(), c.b.begin(), c.b.begin() + c.size);
    }
  }
  if (recs.empty()) return Status::OK;
  // Write-ahead (issue 14): a delete interrupted by a crash is completed on
  // adoption. Cleared once the maps are consistent again.
  {
    JournalIntent intent;
    intent.op = JournalIntent::Op::kDelete;
    intent.created.reserve(recs.size());
    for (uint32_t rec : recs) intent.created.push_back(recs_[rec].key);
    if (Status st = journal_begin(intent); !st.ok()) return st;
  }
  auto clear_journal = absl::MakeCleanup([this] { journal_clear(); });
  crash_point("delete", "journal");
  // Routes first: downstream stops before the subscriber disappears. The
  // route maps are independent: large deletions use two threads.
  int drc[std::size(kRouteMaps)] = {};
  auto delete_map = [&](size_t mi) {
    const MapId m = kRouteMaps[mi];
    auto& d = dels[static_cast<int>(m)];
    if (d.empty()) return;
    const size_t key_size = route_key_size(m);
    drc[mi] = map_delete_many(maps_.fd[static_cast<int>(m)], d.data(), d.size() / key_size,
                              key_size);
  };
  run_pair(
      recs.size() >= kParallelApply,
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
  // A refused delete leaves the intent pending: the next adoption completes it.
  for (size_t mi = 0; mi < std::size(kRouteMaps); ++mi)
    if (drc[mi]) {
      std::move(clear_journal).Cancel();
      return kernel_status(drc[mi], fmt::format("deleting from map {}", map_name(kRouteMaps[mi])));
    }
  if (!sdel.empty())
    if (int rc = map_delete_many(maps_.fd[static_cast<int>(MapId::kSubscribers)], sdel.data(),
                                 sdel.size(), sizeof(SubKey))) {
      std::move(clear_journal).Cancel();
      return kernel_status(rc, "deleting from map subscribers");
    }
  crash_point("delete", "subscribers");
  for (size_t i = 0; i < recs.size(); ++i) {
    if (i + kPrefetchAhead < recs.size()) prefetch_owners(recs_[recs[i + kPrefetchAhead]]);
    const uint32_t rec = recs[i];
    SubscriberSpec& s = recs_[rec];
    cl.clear();
    claims_of(s, &cl);
    for (const auto& c : cl) erase_owner(c, rec);
    index_.erase(key_rank(s.key));
    count_key(s.key, -1);
    publish(xbng::v1::Event::SUBSCRIBER_REMOVED, s.key, s.has_mac ? &s.mac : nullptr);
    s = SubscriberSpec{};
    free_.push_back(rec);
  }
  *deleted = recs.size();
  return Status::OK;
}

void SubscriberStore::fill_counters(uint32_t rec, xbng::v1::Subscriber* out) const {
  const SubscriberSpec& s = recs_[rec];
  auto* c = out->mutable_counters();
  struct xbng_subscriber v;
  if (bpf_map_lookup_elem(maps_.fd[static_cast<int>(MapId::kSubscribers)], &s.key, &v) == 0) {
    c->set_up_packets(v.up_packets);
    c->set_up_bytes(v.up_bytes);
    if (!s.has_mac && (v.flags & XBNG_SUB_F_MAC_VALID)) {
      out->set_mac(format_mac(v.mac));
      out->set_mac_learned(true);
    }
  }
  std::vector<RouteKey> cl;
  claims_of(s, &cl);
  uint64_t pk = 0, by = 0;
  for (const auto& k : cl) {
    struct xbng_route r;
    if (bpf_map_lookup_elem(maps_.fd[static_cast<int>(k.map)], k.b.data(), &r) == 0) {
      pk += r.down_packets;
      by += r.down_bytes;
    }
  }
  c->set_down_packets(pk);
  c->set_down_bytes(by);
  struct xbng_police pv;
  if (bpf_map_lookup_elem(maps_.fd[static_cast<int>(MapId::kPolice)], &rec, &pv) == 0) {
    c->set_up_policed_packets(pv.up_policed_packets);
    c->set_up_policed_bytes(pv.up_policed_bytes);
    c->set_down_policed_packets(pv.down_policed_packets);
    c->set_down_policed_bytes(pv.down_policed_bytes);
  }
}

void SubscriberStore::to_proto(uint32_t rec, bool counters, xbng::v1::Subscriber* out) const {
  spec_to_proto(recs_[rec], ports_, out);
  if (counters) fill_counters(rec, out);
}

Status SubscriberStore::get(const xbng::v1::SubscriberKey& key, xbng::v1::Subscriber* out) {
  SubKey k;
  if (Status st = validate_key(key, ports_, "key", &k); !st.ok()) return st;
  std::shared_lock l(mu_);
  auto it = index_.find(key_rank(k));
  if (it == index_.end())
    return Status(StatusCode::NOT_FOUND,
                  fmt::format("subscriber {} is not provisioned", key_to_string(k, ports_)));
  to_proto(it->second, true, out);
  return Status::OK;
}

Status SubscriberStore::list(const ListQuery& q, std::vector<xbng::v1::Subscriber>* out,
                             std::string* next_token, uint64_t* total) {
  uint32_t page = q.page_size == 0 ? 1000 : std::min<uint32_t>(q.page_size, 10000);
  uint64_t after = 0;
  bool has_after = false;
  if (!q.page_token.empty()) {
    char* end = nullptr;
    errno = 0;
    after = std::strtoull(q.page_token.c_str(), &end, 16);
    if (errno || *end || q.page_token.size() != 16)
      return Status(StatusCode::INVALID_ARGUMENT,
                    fmt::format("field page_token: {} is not a token returned by "
                                "ListSubscribers",
                                quote_value(q.page_token)));
    has_after = true;
  }
  std::optional<uint32_t> port;
  if (!q.port.empty()) {
    port = ports_.access_ifindex(q.port);
    if (!port)
      return Status(StatusCode::INVALID_ARGUMENT,
                    fmt::format("field port: {} is not a configured access port",
                                quote_value(q.port)));
  }
  if (q.outer > 4094)
    return Status(StatusCode::INVALID_ARGUMENT,
                  fmt::format("field outer_vlan: \"{}\" is outside 1..4094 (0 = any)", q.outer));
  std::shared_lock l(mu_);
  // Ranges of key_rank matching the filter, in order.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  auto port_range = [&](uint32_t ifx) {
    if (q.outer)
      ranges.emplace_back((uint64_t{ifx} << 32) | (uint64_t{q.outer} << 16),
                          (uint64_t{ifx} << 32) | (uint64_t{q.outer} << 16) | 0xffff);
    else
      ranges.emplace_back(uint64_t{ifx} << 32, (uint64_t{ifx} << 32) | 0xffffffffull);
  };
  if (port) {
    port_range(*port);
    *total = q.outer ? (per_port_outer_.contains((uint64_t{*port} << 16) | q.outer)
                            ? per_port_outer_.at((uint64_t{*port} << 16) | q.outer)
                            : 0)
                     : (per_port_.contains(*port) ? per_port_.at(*port) : 0);
  } else if (q.outer) {
    std::vector<uint32_t> ifxs;
    for (const auto& [ifx, n] : per_port_)
      if (n) ifxs.push_back(ifx);
    std::sort(ifxs.begin(), ifxs.end());
    *total = 0;
    for (uint32_t ifx : ifxs) {
      port_range(ifx);
      if (auto it = per_port_outer_.find((uint64_t{ifx} << 16) | q.outer);
          it != per_port_outer_.end())
        *total += it->second;
    }
  } else {
    ranges.emplace_back(0, ~0ull);
    *total = index_.size();
  }
  next_token->clear();
  out->clear();
  uint64_t last = 0;
  bool full = false;
  for (const auto& [lo, hi] : ranges) {
    if (has_after && after >= hi) continue;
    auto it = has_after && after >= lo ? index_.upper_bound(after) : index_.lower_bound(lo);
    for (; it != index_.end() && it->first <= hi; ++it) {
      if (out->size() == page) {  // a further match exists: hand out a token
        *next_token = fmt::format("{:016x}", last);
        full = true;
        break;
      }
      out->emplace_back();
      to_proto(it->second, q.with_counters, &out->back());
      last = it->first;
    }
    if (full) break;
  }
  return Status::OK;
}

}  // namespace xbng::agent
