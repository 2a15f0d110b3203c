#include "store/map_ops.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace xbng::agent {

StoreMaps StoreMaps::from(const Dataplane& dp) {
  StoreMaps m{};
  for (int i = 0; i < kMapCount; ++i) {
    m.fd[i] = dp.fd(static_cast<MapId>(i));
    m.max_entries[i] = dp.max_entries(static_cast<MapId>(i));
  }
  m.direct = dp.direct();
  return m;
}

namespace {

int rc_of(int rc) { return rc == 0 ? 0 : (rc < 0 && rc != -1 ? rc : -errno); }

uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

int BpfMapOps::direct_lookup(uint32_t slot, void* value) const {
  struct xbng_direct_route e;
  if (bpf_map_lookup_elem(fd(MapId::kDirectV4), &slot, &e) != 0) return -errno;
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
int BpfMapOps::direct_update(uint32_t slot, const void* value, uint64_t flags) {
  if (flags != BPF_ANY) {
    struct xbng_route old;
    const int rc = direct_lookup(slot, &old);
    if (rc != 0 && rc != -ENOENT) return rc;
    const bool present = rc == 0;
    if (flags == BPF_NOEXIST && present) return errno = EEXIST, -EEXIST;
    if (flags == BPF_EXIST && !present) return errno = ENOENT, -ENOENT;
  }
  struct xbng_direct_route e {};
  std::memcpy(&e.r, value, sizeof e.r);
  if (e.r.sub.ifindex == 0) return errno = EINVAL, -EINVAL;  // would read as empty
  return rc_of(bpf_map_update_elem(fd(MapId::kDirectV4), &slot, &e, BPF_ANY));
}

int BpfMapOps::direct_erase(uint32_t slot) {
  struct xbng_route old;
  if (int rc = direct_lookup(slot, &old)) return rc;
  const struct xbng_direct_route empty {};
  return rc_of(bpf_map_update_elem(fd(MapId::kDirectV4), &slot, &empty, BPF_ANY));
}

int BpfMapOps::lookup(MapId m, const void* key, void* value) const {
  if (direct(m))
    if (auto slot = maps_.direct.slot_of(load_u32(key))) return direct_lookup(*slot, value);
  return rc_of(bpf_map_lookup_elem(fd(m), key, value));
}

int BpfMapOps::update(MapId m, const void* key, const void* value, uint64_t flags) {
  if (direct(m))
    if (auto slot = maps_.direct.slot_of(load_u32(key))) return direct_update(*slot, value, flags);
  return rc_of(bpf_map_update_elem(fd(m), key, value, flags));
}

int BpfMapOps::erase(MapId m, const void* key) {
  if (direct(m))
    if (auto slot = maps_.direct.slot_of(load_u32(key))) return direct_erase(*slot);
  return rc_of(bpf_map_delete_elem(fd(m), key));
}

// Runs of consecutive keys on one path, each in batches: the hash's as
// they are, the array's as slots and line-sized values.
int BpfMapOps::update_many(MapId m, const void* keys, const void* values, size_t n, size_t key_size,
                           size_t value_size, size_t* done) {
  if (!direct(m)) return map_update_many(fd(m), keys, values, n, key_size, value_size, done);
  const auto* k = static_cast<const uint8_t*>(keys);
  const auto* v = static_cast<const uint8_t*>(values);
  *done = 0;
  std::vector<uint32_t> slots;
  std::vector<struct xbng_direct_route> lines;
  while (*done < n) {
    slots.clear();
    lines.clear();
    for (size_t i = *done; i < n; ++i) {
      auto slot = maps_.direct.slot_of(load_u32(k + i * key_size));
      if (!slot) break;
      struct xbng_direct_route e {};
      std::memcpy(&e.r, v + i * value_size, sizeof e.r);
      if (e.r.sub.ifindex == 0) break;  // would read as empty: direct_update refuses it below
      slots.push_back(*slot);
      lines.push_back(e);
    }
    if (!slots.empty()) {
      size_t part = 0;
      const int rc = map_update_many(fd(MapId::kDirectV4), slots.data(), lines.data(), slots.size(),
                                     sizeof(uint32_t), sizeof(struct xbng_direct_route), &part);
      *done += part;
      if (rc) return rc;
      continue;
    }
    if (maps_.direct.slot_of(load_u32(k + *done * key_size))) {
      if (int rc = direct_update(*maps_.direct.slot_of(load_u32(k + *done * key_size)),
                                 v + *done * value_size, BPF_ANY))
        return rc;
      ++*done;
      continue;
    }
    size_t end = *done + 1;
    while (end < n && !maps_.direct.slot_of(load_u32(k + end * key_size))) ++end;
    size_t part = 0;
    const int rc = map_update_many(fd(m), k + *done * key_size, v + *done * value_size,
                                   end - *done, key_size, value_size, &part);
    *done += part;
    if (rc) return rc;
  }
  return 0;
}

int BpfMapOps::delete_many(MapId m, const void* keys, size_t n, size_t key_size) {
  if (!direct(m)) return map_delete_many(fd(m), keys, n, key_size);
  const auto* k = static_cast<const uint8_t*>(keys);
  std::vector<uint8_t> hashed;
  for (size_t i = 0; i < n; ++i) {
    if (auto slot = maps_.direct.slot_of(load_u32(k + i * key_size))) {
      if (int rc = direct_erase(*slot); rc && rc != -ENOENT) return rc;
      continue;
    }
    hashed.insert(hashed.end(), k + i * key_size, k + (i + 1) * key_size);
  }
  if (hashed.empty()) return 0;
  return map_delete_many(fd(m), hashed.data(), hashed.size() / key_size, key_size);
}

int BpfMapOps::for_each(MapId m, size_t key_size, size_t value_size,
                        const std::function<void(const void*, const void*)>& fn) const {
  if (int rc = map_for_each(fd(m), key_size, value_size, fn)) return rc;
  if (!direct(m)) return 0;
  std::vector<uint8_t> value(value_size);
  return direct_for_each(fd(MapId::kDirectV4), maps_.direct,
                         [&](uint32_t be, const struct xbng_route& r) {
                           std::memcpy(value.data(), &r, std::min(value_size, sizeof r));
                           fn(&be, value.data());
                         });
}

}  // namespace xbng::agent
