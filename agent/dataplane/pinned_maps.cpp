// The pinned maps by name, and reading and writing many entries of a map:
// what needs only libbpf and the pin directory, not the BPF object. xbngd
// (through Dataplane) and `xbngctl bpf dump` use it.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "dataplane/dataplane.h"

namespace xbng::agent {

namespace {

// One row per map of include/xbng/maps.def: its name, whether its size
// follows --max-subscribers, whether the trace build reuses the running map.
enum class Sizing { kFixed, kSubscribers, kDirect, kDirect6, kDirectSubs };
struct MapRow {
  const char* name;
  Sizing sizing;
  bool shared_with_trace;
};
constexpr Sizing kSizing_SUBSCRIBERS = Sizing::kSubscribers, kSizing_FIXED = Sizing::kFixed,
                 kSizing_DIRECT = Sizing::kDirect, kSizing_DIRECT6 = Sizing::kDirect6,
                 kSizing_DIRECT_SUBS = Sizing::kDirectSubs;
constexpr bool kTrace_SHARED = true, kTrace_PRIVATE = false;
constexpr MapRow kMaps[kMapCount] = {
#define XBNG_MAP(id, name, sizing, trace) {#name, kSizing_##sizing, kTrace_##trace},
#include "xbng/maps.def"
#undef XBNG_MAP
};

std::string errstr(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace

const char* map_name(MapId id) { return kMaps[static_cast<int>(id)].name; }
bool map_sized_by_subscribers(MapId id) {
  return kMaps[static_cast<int>(id)].sizing == Sizing::kSubscribers;
}
bool map_sized_by_direct(MapId id) {
  const Sizing s = kMaps[static_cast<int>(id)].sizing;
  return s == Sizing::kDirect || s == Sizing::kDirect6;
}
uint32_t map_direct_slots(MapId id, const DataplaneOptions& o) {
  return kMaps[static_cast<int>(id)].sizing == Sizing::kDirect6 ? o.direct_slots_v6
                                                                : o.direct_slots;
}
bool map_sized_by_direct_subs(MapId id) {
  return kMaps[static_cast<int>(id)].sizing == Sizing::kDirectSubs;
}
bool map_shared_with_trace(MapId id) { return kMaps[static_cast<int>(id)].shared_with_trace; }

std::string pin_root(const std::string& bpffs) {
  return fmt::format("{}/v{}", bpffs, XBNG_ABI_VERSION);
}
std::string map_pin_path(const std::string& bpffs, MapId id) {
  return fmt::format("{}/maps/{}", pin_root(bpffs), map_name(id));
}
std::string link_pin_path(const std::string& bpffs, const std::string& ifname) {
  return fmt::format("{}/links/{}", pin_root(bpffs), ifname);
}

PinnedMaps::PinnedMaps(const std::string& bpffs) {
  for (int& f : fds_) f = -1;
  for (int i = 0; i < kMapCount; ++i) {
    const std::string path = map_pin_path(bpffs, static_cast<MapId>(i));
    fds_[i] = bpf_obj_get(path.c_str());
    if (fds_[i] < 0) {
      int e = errno;
      for (int j = 0; j < i; ++j) close(fds_[j]);
      throw DataplaneError(
          fmt::format("{}: {} (is xbngd set up with this --bpffs?)", path, errstr(e)));
    }
  }
}

PinnedMaps::~PinnedMaps() {
  for (int f : fds_)
    if (f >= 0) close(f);
}

// ---- map helpers ----------------------------------------------------------

int map_update_many(int fd, const void* keys, const void* values, size_t n, size_t key_size,
                    size_t value_size, size_t* done) {
  *done = 0;
  const auto* k = static_cast<const uint8_t*>(keys);
  const auto* v = static_cast<const uint8_t*>(values);
  LIBBPF_OPTS(bpf_map_batch_opts, bo, .elem_flags = BPF_ANY);
  while (*done < n) {
    uint32_t count = static_cast<uint32_t>(n - *done);
    int rc = bpf_map_update_batch(fd, k + *done * key_size, v + *done * value_size, &count, &bo);
    if (rc == 0) {
      *done = n;
      return 0;
    }
    int err = errno;
    if (err == EINVAL || err == ENOTSUP || err == EOPNOTSUPP) {
      if (count != 0) {
        *done += count;
        return -err;
      }
      // No batch support for this map type: one by one.
      for (; *done < n; ++*done)
        if (bpf_map_update_elem(fd, k + *done * key_size, v + *done * value_size, BPF_ANY) != 0)
          return -errno;
      return 0;
    }
    *done += count;
    return -err;
  }
  return 0;
}

int map_delete_many(int fd, const void* keys, size_t n, size_t key_size) {
  const auto* k = static_cast<const uint8_t*>(keys);
  size_t done = 0;
  LIBBPF_OPTS(bpf_map_batch_opts, bo);
  while (done < n) {
    uint32_t count = static_cast<uint32_t>(n - done);
    int rc = bpf_map_delete_batch(fd, k + done * key_size, &count, &bo);
    if (rc == 0) return 0;
    int err = errno;
    done += count;
    if (err == ENOENT) {
      ++done;  // absent key: skip it
      continue;
    }
    if (err == EINVAL || err == ENOTSUP || err == EOPNOTSUPP) {
      for (; done < n; ++done)
        if (bpf_map_delete_elem(fd, k + done * key_size) != 0 && errno != ENOENT) return -errno;
      return 0;
    }
    return -err;
  }
  return 0;
}

int map_for_each(int fd, size_t key_size, size_t value_size,
                 const std::function<void(const void*, const void*)>& fn) {
  // Batched lookups first (hash maps: ~100x fewer syscalls at 1M entries).
  constexpr uint32_t kChunk = 4096;
  std::vector<uint8_t> keys(kChunk * key_size), values(kChunk * value_size);
  std::vector<uint8_t> in(std::max<size_t>(key_size, 8)), out(std::max<size_t>(key_size, 8));
  LIBBPF_OPTS(bpf_map_batch_opts, bo);
  bool first = true;
  for (;;) {
    uint32_t count = kChunk;
    int rc = bpf_map_lookup_batch(fd, first ? nullptr : in.data(), out.data(), keys.data(),
                                  values.data(), &count, &bo);
    int err = rc ? errno : 0;
    if (rc && err != ENOENT) {
      if (first && (err == EINVAL || err == ENOTSUP || err == EOPNOTSUPP)) break;  // no batch
      return -err;
    }
    for (uint32_t i = 0; i < count; ++i) fn(&keys[i * key_size], &values[i * value_size]);
    if (rc) return 0;  // ENOENT: done
    first = false;
    in = out;
  }
  std::vector<uint8_t> key(key_size), next(key_size), value(value_size);
  void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    if (bpf_map_lookup_elem(fd, next.data(), value.data()) == 0) fn(next.data(), value.data());
    key = next;
    prev = key.data();
  }
  return errno == ENOENT ? 0 : -errno;
}

}  // namespace xbng::agent
