#include "store/map_ops.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "store_read.skel.h"
#include "xbng/store_read.h"

namespace xbng::agent {

StoreMaps StoreMaps::from(const Dataplane& dp) {
  StoreMaps m{};
  for (int i = 0; i < kMapCount; ++i) {
    m.fd[i] = dp.fd(static_cast<MapId>(i));
    m.max_entries[i] = dp.max_entries(static_cast<MapId>(i));
  }
  m.direct = dp.direct();
  m.direct_subs = dp.direct_subs();
  return m;
}

namespace {

int rc_of(int rc) { return rc == 0 ? 0 : (rc < 0 && rc != -1 ? rc : -errno); }

// The maps read_many reads, as its xbng_read_map; -1: not there.
int read_map_of(MapId m) {
  switch (m) {
    case MapId::kSubscribers:
      return XBNG_READ_SUBSCRIBERS;
    case MapId::kPolice:
      return XBNG_READ_POLICE;
    case MapId::kRoutesV4:
      return XBNG_READ_ROUTES_V4;
    case MapId::kRoutesV6:
      return XBNG_READ_ROUTES_V6;
    case MapId::kRoutesV6_64:
      return XBNG_READ_ROUTES_V6_64;
    default:
      return -1;
  }
}

}  // namespace

void MapOps::lookup_many(MapId m, const void* keys, size_t n, size_t key_size, void* values,
                         size_t value_size, uint8_t* found) const {
  const auto* k = static_cast<const uint8_t*>(keys);
  auto* v = static_cast<uint8_t*>(values);
  for (size_t i = 0; i < n; ++i) found[i] = lookup(m, k + i * key_size, v + i * value_size) == 0;
}

bool swap_merge(MapId m, void* value, const void* old, uint8_t in) {
  if (m == MapId::kSubscribers)
    return xbng_merge_subscriber(static_cast<struct xbng_subscriber*>(value),
                                 static_cast<const struct xbng_subscriber*>(old), in);
  if (m == MapId::kPolice)
    return xbng_merge_police(static_cast<struct xbng_police*>(value),
                             static_cast<const struct xbng_police*>(old), in);
  return xbng_merge_route(static_cast<struct xbng_route*>(value),
                          static_cast<const struct xbng_route*>(old), in);
}

int MapOps::swap_many(MapId m, const void* keys, size_t n, size_t key_size, const void* values,
                      void* old, size_t value_size, uint8_t* flags, size_t* done) {
  const auto* k = static_cast<const uint8_t*>(keys);
  const auto* v = static_cast<const uint8_t*>(values);
  auto* o = static_cast<uint8_t*>(old);
  std::vector<uint8_t> found(n), wk, wv(value_size);
  std::vector<size_t> at;
  lookup_many(m, keys, n, key_size, old, value_size, found.data());
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(wv.data() + at.size() * value_size, v + i * value_size, value_size);
    const bool write = !found[i] || swap_merge(m, wv.data() + at.size() * value_size,
                                               o + i * value_size, flags[i]);
    flags[i] = found[i] ? XBNG_SWAP_FOUND : 0;
    if (!write) continue;
    at.push_back(i);
    wk.insert(wk.end(), k + i * key_size, k + (i + 1) * key_size);
    wv.resize((at.size() + 1) * value_size);
  }
  size_t written = 0;
  const int rc =
      at.empty() ? 0
                 : update_many(m, wk.data(), wv.data(), at.size(), key_size, value_size, &written);
  for (size_t j = 0; j < written; ++j) flags[at[j]] |= XBNG_SWAP_WRITTEN;
  *done = rc ? at[written] : n;
  return rc;
}

// bpf/store_read.bpf.c loaded on the store's maps, and its scratch array
// mapped into the agent: XBNG_READ_SLOTS chunks, one per reader at once.
class StoreReader {
 public:
  // Null (and why, logged) when the program cannot be loaded here.
  static std::unique_ptr<StoreReader> open(const StoreMaps& maps) {
    auto r = std::unique_ptr<StoreReader>(new StoreReader());
    const char* step = "opening";
    int err = 0;
    r->sk_ = store_read__open();
    if (!r->sk_) {
      err = -errno;
    } else {
      for (MapId m : {MapId::kSubscribers, MapId::kPolice, MapId::kRoutesV4, MapId::kRoutesV6,
                      MapId::kRoutesV6_64}) {
        struct bpf_map* bm = bpf_object__find_map_by_name(r->sk_->obj, map_name(m));
        step = "reusing a map";
        err = bm ? bpf_map__reuse_fd(bm, maps.fd[static_cast<int>(m)]) : -ENOENT;
        if (err) break;
      }
      if (!err) {
        step = "loading";
        err = store_read__load(r->sk_);
      }
      if (!err) {
        step = "mapping read_scratch";
        r->len_ = (sizeof(struct xbng_read_scratch) * XBNG_READ_SLOTS + 4095) & ~size_t{4095};
        void* mem = mmap(nullptr, r->len_, PROT_READ | PROT_WRITE, MAP_SHARED,
                         bpf_map__fd(r->sk_->maps.read_scratch), 0);
        if (mem == MAP_FAILED) {
          err = -errno;
          r->len_ = 0;
        } else {
          r->mem_ = static_cast<struct xbng_read_scratch*>(mem);
        }
      }
    }
    if (err) {
      spdlog::warn("store: reads of replaced values one system call each ({} store_read.bpf.o: {})",
                   step, std::strerror(-err));
      return nullptr;
    }
    r->prog_ = bpf_program__fd(r->sk_->progs.read_many);
    r->swap_prog_ = bpf_program__fd(r->sk_->progs.swap_many);
    return r;
  }

  ~StoreReader() {
    if (mem_) munmap(mem_, len_);
    if (sk_) store_read__destroy(sk_);
  }

  // Reads n keys of m (packed at the map's key and value sizes) into
  // values and found; false if it could not (no slot free, m not read
  // here, the program failed), the caller then reads them itself.
  bool read(MapId m, const uint8_t* keys, size_t n, size_t ks, uint8_t* values, size_t vs,
            uint8_t* found) {
    int map;
    const int slot = begin(m, ks, vs, &map);
    if (slot < 0) return false;
    struct xbng_read_scratch* sc = &mem_[slot];
    bool ok = true;
    for (size_t at = 0; ok && at < n; at += XBNG_READ_CHUNK) {
      const uint32_t c = static_cast<uint32_t>(std::min<size_t>(XBNG_READ_CHUNK, n - at));
      std::memcpy(sc->keys, keys + at * ks, c * ks);
      struct xbng_read_args args = {static_cast<uint32_t>(map), c, static_cast<uint32_t>(slot)};
      LIBBPF_OPTS(bpf_test_run_opts, ro, .ctx_in = &args, .ctx_size_in = sizeof args);
      ok = bpf_prog_test_run_opts(prog_, &ro) == 0 && ro.retval == c;
      if (!ok) break;
      runs_.fetch_add(1, std::memory_order_relaxed);
      std::memcpy(values + at * vs, sc->vals, c * vs);
      std::memcpy(found + at, sc->found, c);
    }
    busy_.fetch_and(~(1u << slot), std::memory_order_release);
    if (!ok && !failed_.exchange(true))
      spdlog::warn("store: store_read.bpf.o failed ({}); reading one system call a key",
                   std::strerror(errno));
    return ok;
  }

  // MapOps::swap_many of n keys of m (a hash), a chunk per program run:
  // *done keys processed, *rc the refused write's error. False if it
  // stopped for another reason (no slot free, the program failed): the
  // caller swaps the keys from *done on itself.
  bool swap(MapId m, const uint8_t* keys, size_t n, size_t ks, const uint8_t* values, uint8_t* old,
            size_t vs, uint8_t* flags, size_t* done, int* rc) {
    *done = 0;
    *rc = 0;
    int map;
    const int slot = begin(m, ks, vs, &map);
    if (slot < 0) return false;
    struct xbng_read_scratch* sc = &mem_[slot];
    bool ok = true;
    for (size_t at = 0; at < n && !*rc; at += XBNG_READ_CHUNK) {
      const uint32_t c = static_cast<uint32_t>(std::min<size_t>(XBNG_READ_CHUNK, n - at));
      std::memcpy(sc->keys, keys + at * ks, c * ks);
      std::memcpy(sc->vals, values + at * vs, c * vs);
      std::memcpy(sc->found, flags + at, c);
      struct xbng_swap_args args = {static_cast<uint32_t>(map), c, static_cast<uint32_t>(slot), 0,
                                    0};
      LIBBPF_OPTS(bpf_test_run_opts, ro, .ctx_in = &args, .ctx_size_in = sizeof args);
      ok = bpf_prog_test_run_opts(swap_prog_, &ro) == 0 && ro.retval == 0 && args.done <= c &&
           (args.done == c || args.err != 0);
      if (!ok) break;
      swaps_.fetch_add(1, std::memory_order_relaxed);
      std::memcpy(old + at * vs, sc->vals, args.done * vs);
      std::memcpy(flags + at, sc->found, args.done);
      *done += args.done;
      *rc = args.err;
    }
    busy_.fetch_and(~(1u << slot), std::memory_order_release);
    if (!ok && !failed_.exchange(true))
      spdlog::warn("store: store_read.bpf.o failed ({}); reading one system call a key",
                   std::strerror(errno));
    return ok;
  }

 private:
  StoreReader() = default;
  // The slot of read_scratch a run over m takes (*map: m's number for the
  // program), or -1 when m is not read here, its sizes do not fit or no
  // slot is free: the caller then does the work itself.
  int begin(MapId m, size_t ks, size_t vs, int* map) {
    *map = read_map_of(m);
    if (*map < 0 || ks > XBNG_READ_KEY_MAX || vs > XBNG_READ_VALUE_MAX) return -1;
    return take_slot();
  }
  // A free slot of read_scratch taken, or -1.
  int take_slot() {
    uint32_t slot = 0, busy = busy_.load(std::memory_order_relaxed);
    for (;;) {
      while (slot < XBNG_READ_SLOTS && (busy >> slot) & 1) ++slot;
      if (slot == XBNG_READ_SLOTS) return -1;
      if (busy_.compare_exchange_weak(busy, busy | (1u << slot), std::memory_order_acquire))
        return static_cast<int>(slot);
      slot = 0;
    }
  }
  struct store_read* sk_ = nullptr;
  int prog_ = -1;
  int swap_prog_ = -1;
  struct xbng_read_scratch* mem_ = nullptr;
  size_t len_ = 0;
  std::atomic<uint32_t> busy_{0};  // bit i: slot i in use
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> runs_{0};
  std::atomic<uint64_t> swaps_{0};

 public:
  uint64_t runs() const { return runs_.load(std::memory_order_relaxed); }
  uint64_t swaps() const { return swaps_.load(std::memory_order_relaxed); }
};

BpfMapOps::BpfMapOps(const StoreMaps& maps, bool chunked_reads)
    : maps_(maps), reader_(chunked_reads ? StoreReader::open(maps) : nullptr) {
  // Test maps (no direct arrays) and a layout without a family map nothing.
  if (maps_.direct.has(DirectUnit::kV4) && lines_v4_.map(fd(MapId::kDirectV4), false) != 0)
    spdlog::warn("store: direct_v4 not mapped ({}); its lines read one system call each",
                 std::strerror(errno));
  // With a pool of /64s its lines are written through the mapping (the
  // route and the count of a line have two writers): no way around it.
  const bool counts = maps_.direct.has(DirectUnit::kV6_64);
  if (!maps_.direct.v6.empty() && lines_v6_.map(fd(MapId::kDirectV6), counts) != 0) {
    if (counts)
      throw DataplaneError(fmt::format("store: mapping direct_v6: {}", std::strerror(errno)));
    spdlog::warn("store: direct_v6 not mapped ({}); its lines read one system call each",
                 std::strerror(errno));
  }
}

BpfMapOps::~BpfMapOps() = default;

uint64_t BpfMapOps::program_runs() const { return reader_ ? reader_->runs() : 0; }

uint64_t BpfMapOps::swap_runs() const { return reader_ ? reader_->swaps() : 0; }

// `police` and the hashes alone (no direct array, no /128 counted in a
// line) swap through the program; the rest, and what it could not run, through
// MapOps::swap_many.
int BpfMapOps::swap_many(MapId m, const void* keys, size_t n, size_t key_size, const void* values,
                         void* old, size_t value_size, uint8_t* flags, size_t* done) {
  *done = 0;
  if (n == 0) return 0;
  const bool hash_only = !direct(m) && !(m == MapId::kSubscribers && !maps_.direct_subs.empty()) &&
                         !(m == MapId::kRoutesV6 && maps_.direct.has(DirectUnit::kV6_64));
  int rc = 0;
  const auto* k = static_cast<const uint8_t*>(keys);
  const auto* v = static_cast<const uint8_t*>(values);
  auto* o = static_cast<uint8_t*>(old);
  if (hash_only && reader_ && reader_->swap(m, k, n, key_size, v, o, value_size, flags, done, &rc))
    return rc ? (errno = -rc, rc) : 0;
  if (rc) return errno = -rc, rc;
  const size_t at = *done;
  size_t rest = 0;
  rc = MapOps::swap_many(m, k + at * key_size, n - at, key_size, v + at * value_size,
                         o + at * value_size, value_size, flags + at, &rest);
  *done = at + rest;
  return rc;
}

std::optional<DirectUnit> BpfMapOps::direct(MapId m) const {
  auto u = direct_unit_of(m);
  if (u && maps_.direct.has(*u)) return u;
  return std::nullopt;
}

void BpfMapOps::lookup_many(MapId m, const void* keys, size_t n, size_t key_size, void* values,
                            size_t value_size, uint8_t* found) const {
  if (n == 0) return;
  if (auto u = direct(m))
    return direct_lookup_many(*u, keys, n, key_size, values, value_size, found);
  if (m == MapId::kSubscribers && !maps_.direct_subs.empty())
    return dsub_lookup_many(keys, n, key_size, values, value_size, found);
  hash_lookup_many(m, keys, n, key_size, values, value_size, found);
}

void BpfMapOps::hash_lookup_many(MapId m, const void* keys, size_t n, size_t key_size, void* values,
                                 size_t value_size, uint8_t* found) const {
  if (reader_ && reader_->read(m, static_cast<const uint8_t*>(keys), n, key_size,
                               static_cast<uint8_t*>(values), value_size, found))
    return;
  for (size_t i = 0; i < n; ++i)
    found[i] = rc_of(bpf_map_lookup_elem(fd(m), static_cast<const uint8_t*>(keys) + i * key_size,
                                         static_cast<uint8_t*>(values) + i * value_size)) == 0;
}

// The keys inside the pools are read from their lines (in place); the
// others from the hash, through the reader program in chunks where it runs.
void BpfMapOps::direct_lookup_many(DirectUnit u, const void* keys, size_t n, size_t key_size,
                                   void* values, size_t value_size, uint8_t* found) const {
  const auto* k = static_cast<const uint8_t*>(keys);
  auto* v = static_cast<uint8_t*>(values);
  std::vector<size_t> at;
  std::vector<uint8_t> hk;
  for (size_t i = 0; i < n; ++i) {
    if (auto slot = slot_of(u, k + i * key_size)) {
      found[i] = direct_lookup(u, *slot, v + i * value_size) == 0;
      continue;
    }
    at.push_back(i);
    hk.insert(hk.end(), k + i * key_size, k + (i + 1) * key_size);
  }
  if (at.empty()) return;
  const MapId hash = direct_hash_map(u);
  std::vector<uint8_t> hv(at.size() * value_size), hf(at.size());
  if (!reader_ ||
      !reader_->read(hash, hk.data(), at.size(), key_size, hv.data(), value_size, hf.data()))
    MapOps::lookup_many(hash, hk.data(), at.size(), key_size, hv.data(), value_size, hf.data());
  for (size_t j = 0; j < at.size(); ++j) {
    found[at[j]] = hf[j];
    if (hf[j]) std::memcpy(v + at[j] * value_size, hv.data() + j * value_size, value_size);
  }
}

int BpfMapOps::direct_lookup(DirectUnit u, uint32_t slot, void* value) const {
  struct xbng_direct_route e;
  const DirectLines& lines = u == DirectUnit::kV4 ? lines_v4_ : lines_v6_;
  if (const struct xbng_direct_route* l = lines.line(slot))
    std::memcpy(&e, l, sizeof e);
  else if (bpf_map_lookup_elem(fd(direct_array_map(u)), &slot, &e) != 0)
    return -errno;
  if (e.r.sub.ifindex == 0) {
    errno = ENOENT;
    return -ENOENT;
  }
  std::memcpy(value, &e.r, sizeof e.r);
  return 0;
}

// An array entry cannot be created or deleted: BPF_NOEXIST and BPF_EXIST,
// and deletion, are decided on the present mark (sub.ifindex). The store
// writes each route from one thread at a time (its lock), so the test and
// the write do not race with another writer.
int BpfMapOps::direct_update(DirectUnit u, uint32_t slot, const void* value, uint64_t flags) {
  if (flags != BPF_ANY) {
    struct xbng_route old;
    const int rc = direct_lookup(u, slot, &old);
    if (rc != 0 && rc != -ENOENT) return rc;
    const bool present = rc == 0;
    if (flags == BPF_NOEXIST && present) return errno = EEXIST, -EEXIST;
    if (flags == BPF_EXIST && !present) return errno = ENOENT, -ENOENT;
  }
  struct xbng_direct_route e {};
  std::memcpy(&e.r, value, sizeof e.r);
  if (e.r.sub.ifindex == 0) return errno = EINVAL, -EINVAL;  // would read as empty
  if (u == DirectUnit::kV6_64) {  // the route alone: the count is kRoutesV6's
    struct xbng_direct_route* l = lines_v6_.line(slot);
    if (!l) return errno = E2BIG, -E2BIG;
    std::memcpy(&l->r, &e.r, sizeof e.r);
    return 0;
  }
  return rc_of(bpf_map_update_elem(fd(direct_array_map(u)), &slot, &e, BPF_ANY));
}

int BpfMapOps::direct_erase(DirectUnit u, uint32_t slot) {
  struct xbng_route old;
  if (int rc = direct_lookup(u, slot, &old)) return rc;
  if (u == DirectUnit::kV6_64) {
    std::memset(&lines_v6_.line(slot)->r, 0, sizeof old);
    return 0;
  }
  const struct xbng_direct_route empty {};
  return rc_of(bpf_map_update_elem(fd(direct_array_map(u)), &slot, &empty, BPF_ANY));
}

struct xbng_direct_route* BpfMapOps::counting_line(MapId m, const void* key) const {
  if (m != MapId::kRoutesV6 || !maps_.direct.has(DirectUnit::kV6_64)) return nullptr;
  auto slot = slot_of(DirectUnit::kV6_64, key);  // the key's first 8 bytes: its /64
  return slot ? lines_v6_.line(*slot) : nullptr;
}

void BpfMapOps::add_128(const uint8_t* key, int delta) {
  if (struct xbng_direct_route* l = counting_line(MapId::kRoutesV6, key))
    __atomic_fetch_add(&l->n128, static_cast<uint32_t>(delta), __ATOMIC_SEQ_CST);
}

int BpfMapOps::lookup(MapId m, const void* key, void* value) const {
  if (auto slot = dsub_slot(m, key)) return dsub_lookup(*slot, value);
  if (auto u = direct(m))
    if (auto slot = slot_of(*u, key)) return direct_lookup(*u, *slot, value);
  return rc_of(bpf_map_lookup_elem(fd(m), key, value));
}

int BpfMapOps::update(MapId m, const void* key, const void* value, uint64_t flags) {
  if (auto slot = dsub_slot(m, key)) return dsub_update(*slot, value, flags);
  if (auto u = direct(m))
    if (auto slot = slot_of(*u, key)) return direct_update(*u, *slot, value, flags);
  if (counting_line(m, key)) {  // a /128 inside a pool of /64s: counted first
    struct xbng_route old;
    const bool had = bpf_map_lookup_elem(fd(m), key, &old) == 0;
    if (!had) add_128(static_cast<const uint8_t*>(key), +1);
    const int rc = rc_of(bpf_map_update_elem(fd(m), key, value, flags));
    if (rc && !had) add_128(static_cast<const uint8_t*>(key), -1);
    return rc ? (errno = -rc, rc) : 0;
  }
  return rc_of(bpf_map_update_elem(fd(m), key, value, flags));
}

int BpfMapOps::erase(MapId m, const void* key) {
  if (auto slot = dsub_slot(m, key)) return dsub_erase(*slot);
  if (auto u = direct(m))
    if (auto slot = slot_of(*u, key)) return direct_erase(*u, *slot);
  const int rc = rc_of(bpf_map_delete_elem(fd(m), key));
  if (rc == 0 && counting_line(m, key)) add_128(static_cast<const uint8_t*>(key), -1);
  return rc;
}

int BpfMapOps::update_many(MapId m, const void* keys, const void* values, size_t n, size_t key_size,
                           size_t value_size, size_t* done) {
  if (m == MapId::kSubscribers && !maps_.direct_subs.empty())
    return dsub_update_many(keys, values, n, key_size, value_size, done);
  if (m == MapId::kRoutesV6 && maps_.direct.has(DirectUnit::kV6_64))
    return v6_update_many(static_cast<const uint8_t*>(keys), static_cast<const uint8_t*>(values), n,
                          value_size, done);
  return route_update_many(m, keys, values, n, key_size, value_size, done);
}

int BpfMapOps::route_update_many(MapId m, const void* keys, const void* values, size_t n,
                                 size_t key_size, size_t value_size, size_t* done) {
  auto u = direct(m);
  if (!u) return map_update_many(fd(m), keys, values, n, key_size, value_size, done);
  return direct_update_many(*u, static_cast<const uint8_t*>(keys),
                            static_cast<const uint8_t*>(values), n, key_size, value_size, done);
}

// Runs of consecutive keys on one path, each in batches: the hash's as
// they are, the array's as slots and line-sized values (a pool of /64s:
// the routes copied into their lines, the counts left as they are).
int BpfMapOps::direct_update_many(DirectUnit u, const uint8_t* k, const uint8_t* v, size_t n,
                                  size_t key_size, size_t value_size, size_t* done) {
  const MapId hash = direct_hash_map(u), arr = direct_array_map(u);
  std::vector<uint32_t> slots;
  std::vector<struct xbng_direct_route> lines;
  auto inside = [&](size_t i) { return slot_of(u, k + i * key_size).has_value(); };
  auto array = [&](size_t i, size_t end, size_t* part) {
    slots.clear();
    lines.clear();
    for (; i < end; ++i) {
      struct xbng_direct_route e {};
      std::memcpy(&e.r, v + i * value_size, sizeof e.r);
      if (e.r.sub.ifindex == 0) break;  // would read as empty: refused below
      slots.push_back(*slot_of(u, k + i * key_size));
      lines.push_back(e);
    }
    int rc = 0;
    if (u == DirectUnit::kV6_64) {
      for (*part = 0; *part < slots.size() && rc == 0; ++*part)
        rc = direct_update(u, slots[*part], &lines[*part].r, BPF_ANY);
      if (rc) --*part;
    } else if (!slots.empty()) {
      rc = map_update_many(fd(arr), slots.data(), lines.data(), slots.size(), sizeof(uint32_t),
                           sizeof(struct xbng_direct_route), part);
    }
    if (rc == 0 && i < end) rc = (errno = EINVAL, -EINVAL);
    return rc;
  };
  auto hashed = [&](size_t i, size_t end, size_t* part) {
    return map_update_many(fd(hash), k + i * key_size, v + i * value_size, end - i, key_size,
                           value_size, part);
  };
  return split_runs(n, done, inside, array, hashed);
}

// The /128s new to the hash inside pools of /64s are counted before the
// write; those the write left out, uncounted after it.
int BpfMapOps::v6_update_many(const uint8_t* k, const uint8_t* v, size_t n, size_t value_size,
                              size_t* done) {
  const std::vector<size_t> counted = counted_128(k, n, /*present=*/false);
  for (size_t i : counted) add_128(k + i * 16, +1);
  const int rc = route_update_many(MapId::kRoutesV6, k, v, n, 16, value_size, done);
  if (rc) {
    for (size_t i : counted)
      if (i >= *done) add_128(k + i * 16, -1);
    errno = -rc;
  }
  return rc;
}

std::vector<size_t> BpfMapOps::counted_128(const uint8_t* k, size_t n, bool present) const {
  std::vector<size_t> at;
  for (size_t i = 0; i < n; ++i)
    if (counting_line(MapId::kRoutesV6, k + i * 16)) at.push_back(i);
  std::vector<size_t> out;
  if (at.empty()) return out;
  std::vector<uint8_t> hk(at.size() * 16), hv(at.size() * sizeof(struct xbng_route)), hf(at.size());
  for (size_t j = 0; j < at.size(); ++j) std::memcpy(&hk[j * 16], k + at[j] * 16, 16);
  hash_lookup_many(MapId::kRoutesV6, hk.data(), at.size(), 16, hv.data(), sizeof(struct xbng_route),
                   hf.data());
  std::set<std::array<uint8_t, 16>> seen;  // a key twice in the batch: once
  for (size_t j = 0; j < at.size(); ++j) {
    std::array<uint8_t, 16> key;
    std::memcpy(key.data(), &hk[j * 16], 16);
    if (static_cast<bool>(hf[j]) == present && seen.insert(key).second) out.push_back(at[j]);
  }
  return out;
}

// The /128s inside pools of /64s that were present are uncounted once
// deleted (after a failure: those gone).
int BpfMapOps::v6_delete_many(const uint8_t* k, size_t n) {
  const std::vector<size_t> present = counted_128(k, n, /*present=*/true);
  const int rc = route_delete_many(MapId::kRoutesV6, k, n, 16);
  for (size_t i : present) {
    struct xbng_route r;
    if (rc && bpf_map_lookup_elem(fd(MapId::kRoutesV6), k + i * 16, &r) == 0) continue;
    add_128(k + i * 16, -1);
  }
  if (rc) errno = -rc;
  return rc;
}

int BpfMapOps::delete_many(MapId m, const void* keys, size_t n, size_t key_size) {
  if (m == MapId::kSubscribers && !maps_.direct_subs.empty())
    return dsub_delete_many(keys, n, key_size);
  if (m == MapId::kRoutesV6 && maps_.direct.has(DirectUnit::kV6_64))
    return v6_delete_many(static_cast<const uint8_t*>(keys), n);
  return route_delete_many(m, keys, n, key_size);
}

int BpfMapOps::route_delete_many(MapId m, const void* keys, size_t n, size_t key_size) {
  auto u = direct(m);
  if (!u) return map_delete_many(fd(m), keys, n, key_size);
  const auto* k = static_cast<const uint8_t*>(keys);
  std::vector<uint8_t> hashed;
  for (size_t i = 0; i < n; ++i) {
    if (auto slot = slot_of(*u, k + i * key_size)) {
      if (int rc = direct_erase(*u, *slot); rc && rc != -ENOENT) return rc;
      continue;
    }
    hashed.insert(hashed.end(), k + i * key_size, k + (i + 1) * key_size);
  }
  if (hashed.empty()) return 0;
  return map_delete_many(fd(m), hashed.data(), hashed.size() / key_size, key_size);
}

int BpfMapOps::for_each(MapId m, size_t key_size, size_t value_size,
                        const std::function<void(const void*, const void*)>& fn) const {
  if (m == MapId::kSubscribers && !maps_.direct_subs.empty())
    return dsub_for_each(key_size, value_size, fn);
  if (int rc = map_for_each(fd(m), key_size, value_size, fn)) return rc;
  auto u = direct(m);
  if (!u) return 0;
  std::vector<uint8_t> value(value_size);
  return direct_for_each(fd(direct_array_map(*u)), maps_.direct, *u,
                         [&](const void* key, const struct xbng_route& r) {
                           std::memcpy(value.data(), &r, std::min(value_size, sizeof r));
                           fn(key, value.data());
                         });
}

}  // namespace xbng::agent
