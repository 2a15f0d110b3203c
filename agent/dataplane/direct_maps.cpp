// Direct routes in the maps: the direct arrays mapped into the process, the
// walk of their present entries, the tables, and the move of the host routes
// between the hashes and the arrays when a layout changes (abi.h "direct
// routes", common/direct.h).
#include <bpf/bpf.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "dataplane/dataplane.h"

namespace xbng::agent {

namespace {

std::string errstr(int err) { return std::strerror(err < 0 ? -err : err); }

// Calls fn(first, count) for each pool range of unit u, cut to the array's
// `n` lines (a pinned array may be smaller than a table claims).
template <typename F>
void each_line_range(const DirectLayout& d, DirectUnit u, uint32_t n, F fn) {
  d.each_range(u, [&](uint32_t base, uint32_t size) {
    if (base >= n) return;
    fn(base, std::min<uint32_t>(size, n - base));
  });
}

}  // namespace

std::vector<DirectUnit> direct_units(int f) {
  if (f == 4) return {DirectUnit::kV4};
  return {DirectUnit::kV6_128, DirectUnit::kV6_64};
}

MapId direct_hash_map(DirectUnit u) {
  return u == DirectUnit::kV4      ? MapId::kRoutesV4
         : u == DirectUnit::kV6_64 ? MapId::kRoutesV6_64
                                   : MapId::kRoutesV6;
}

MapId direct_array_map(DirectUnit u) {
  return u == DirectUnit::kV4 ? MapId::kDirectV4 : MapId::kDirectV6;
}

std::optional<DirectUnit> direct_unit_of(MapId route_map) {
  switch (route_map) {
    case MapId::kRoutesV4:
      return DirectUnit::kV4;
    case MapId::kRoutesV6:
      return DirectUnit::kV6_128;
    case MapId::kRoutesV6_64:
      return DirectUnit::kV6_64;
    default:
      return std::nullopt;
  }
}

DirectLines::~DirectLines() {
  if (mem_) munmap(mem_, len_);
}

int DirectLines::map(int fd, bool write) {
  struct bpf_map_info info {};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return -errno;
  if (info.value_size != sizeof(struct xbng_direct_route)) return -EINVAL;
  const size_t bytes = (size_t{info.max_entries} * info.value_size + 4095) & ~size_t{4095};
  void* mem = mmap(nullptr, bytes, PROT_READ | (write ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) return -errno;
  if (mem_) munmap(mem_, len_);
  mem_ = static_cast<struct xbng_direct_route*>(mem);
  len_ = bytes;
  n_ = info.max_entries;
  return 0;
}

int direct_for_each(int fd, const DirectLayout& d, DirectUnit u,
                    const std::function<void(const void* key, const struct xbng_route&)>& fn) {
  if (!d.has(u)) return 0;
  DirectLines lines;
  if (int rc = lines.map(fd, false)) return rc;
  uint8_t key[16];
  each_line_range(d, u, lines.size(), [&](uint32_t first, uint32_t count) {
    for (uint32_t slot = first; slot < first + count; ++slot) {
      struct xbng_route r;
      std::memcpy(&r, &lines.line(slot)->r, sizeof r);
      if (r.sub.ifindex == 0 || !d.key_of(u, slot, key)) continue;
      fn(key, r);
    }
  });
  return 0;
}

int direct_read_layout(int pools_fd, int pools_v6_fd, DirectLayout* out) {
  const uint32_t zero = 0;
  struct xbng_direct_table t {};
  struct xbng_direct_table_v6 t6 {};
  if (bpf_map_lookup_elem(pools_fd, &zero, &t) != 0) return -errno;
  if (bpf_map_lookup_elem(pools_v6_fd, &zero, &t6) != 0) return -errno;
  *out = DirectLayout::from_tables(t, t6);
  return 0;
}

void direct_write_table(int f, int pools_fd, const DirectLayout& d) {
  const uint32_t zero = 0;
  const struct xbng_direct_table t = d.table();
  const struct xbng_direct_table_v6 t6 = d.table_v6();
  const void* v = f == 4 ? static_cast<const void*>(&t) : static_cast<const void*>(&t6);
  if (bpf_map_update_elem(pools_fd, &zero, v, BPF_ANY) != 0)
    throw DataplaneError(fmt::format("writing map {}: {}",
                                     map_name(f == 4 ? MapId::kDirectPools : MapId::kDirectPoolsV6),
                                     errstr(errno)));
}

size_t direct_count_v6(int routes_v6_fd, const DirectLines& lines, const DirectLayout& d) {
  if (!d.has(DirectUnit::kV6_64)) return 0;
  std::unordered_map<uint32_t, uint32_t> count;  // slot -> /128s inside its /64
  size_t n = 0;
  int rc =
      map_for_each(routes_v6_fd, 16, sizeof(struct xbng_route), [&](const void* k, const void*) {
        auto slot = d.slot_of(DirectUnit::kV6_64, k);  // the key's first 8 bytes: its /64
        if (!slot || *slot >= lines.size()) return;
        ++count[*slot];
        ++n;
      });
  if (rc) throw DataplaneError(fmt::format("reading map routes_v6: {}", errstr(rc)));
  each_line_range(d, DirectUnit::kV6_64, lines.size(), [&](uint32_t first, uint32_t size) {
    for (uint32_t slot = first; slot < first + size; ++slot) {
      auto it = count.find(slot);
      if (struct xbng_direct_route* l = lines.line(slot))
        __atomic_store_n(&l->n128, it == count.end() ? 0u : it->second, __ATOMIC_SEQ_CST);
    }
  });
  return n;
}

// Each host route is in exactly the place the table says at every instant
// the fast path can look: every entry of the old layout is copied into its
// hash, the table emptied (all on the hash path), the lines of both layouts
// cleared (memset through the mapping: a line outside the old layout may
// hold what a move cut short left); then the hash entries inside the new
// layout are copied into their lines, the /128s inside its pools of /64s
// counted in their lines (direct_count_v6), the new table written, and
// those hash entries deleted.
std::pair<size_t, size_t> direct_relayout(int f, const DirectLayout& have, const DirectLayout& want,
                                          const std::function<int(MapId)>& fd) {
  const MapId arr = f == 4 ? MapId::kDirectV4 : MapId::kDirectV6;
  const MapId table = f == 4 ? MapId::kDirectPools : MapId::kDirectPoolsV6;
  const std::vector<DirectUnit> units = direct_units(f);
  DirectLines lines;
  if (int rc = lines.map(fd(arr), true))
    throw DataplaneError(fmt::format("mapping map {}: {}", map_name(arr), errstr(rc)));
  size_t out = 0, in = 0;
  for (DirectUnit u : units) {
    const MapId hash = direct_hash_map(u);
    int rc = direct_for_each(fd(arr), have, u, [&](const void* k, const struct xbng_route& r) {
      if (bpf_map_update_elem(fd(hash), k, &r, BPF_ANY) != 0)
        throw DataplaneError(
            fmt::format("moving a direct route into {}: {}", map_name(hash), errstr(errno)));
      ++out;
    });
    if (rc) throw DataplaneError(fmt::format("reading map {}: {}", map_name(arr), errstr(rc)));
  }
  direct_write_table(f, fd(table), DirectLayout{});
  for (DirectUnit u : units)
    for (const DirectLayout* d : {&have, &want})
      each_line_range(*d, u, lines.size(), [&](uint32_t first, uint32_t count) {
        std::memset(lines.line(first), 0, size_t{count} * sizeof(struct xbng_direct_route));
      });
  std::vector<std::vector<uint8_t>> moved(units.size());  // keys, per unit
  for (size_t i = 0; i < units.size(); ++i) {
    if (!want.has(units[i])) continue;
    const size_t ks = direct_key_size(units[i]);
    const MapId hash = direct_hash_map(units[i]);
    int rc =
        map_for_each(fd(hash), ks, sizeof(struct xbng_route), [&](const void* k, const void* v) {
          auto slot = want.slot_of(units[i], k);
          if (!slot || *slot >= lines.size()) return;
          std::memcpy(&lines.line(*slot)->r, v, sizeof(struct xbng_route));
          const auto* kb = static_cast<const uint8_t*>(k);
          moved[i].insert(moved[i].end(), kb, kb + ks);
        });
    if (rc) throw DataplaneError(fmt::format("reading map {}: {}", map_name(hash), errstr(rc)));
  }
  if (f == 6) direct_count_v6(fd(MapId::kRoutesV6), lines, want);
  direct_write_table(f, fd(table), want);
  for (size_t i = 0; i < units.size(); ++i) {
    const size_t ks = direct_key_size(units[i]);
    if (int rc = map_delete_many(fd(direct_hash_map(units[i])), moved[i].data(),
                                 moved[i].size() / ks, ks))
      throw DataplaneError(fmt::format("deleting a moved host route: {}", errstr(rc)));
    in += moved[i].size() / ks;
  }
  return {out, in};
}

}  // namespace xbng::agent
