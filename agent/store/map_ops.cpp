#include "store/map_ops.h"

#include <bpf/bpf.h>

#include <cerrno>

namespace xbng::agent {

StoreMaps StoreMaps::from(const Dataplane& dp) {
  StoreMaps m{};
  for (int i = 0; i < kMapCount; ++i) {
    m.fd[i] = dp.fd(static_cast<MapId>(i));
    m.max_entries[i] = dp.max_entries(static_cast<MapId>(i));
  }
  return m;
}

namespace {

int rc_of(int rc) { return rc == 0 ? 0 : (rc < 0 && rc != -1 ? rc : -errno); }

}  // namespace

int BpfMapOps::lookup(MapId m, const void* key, void* value) const {
  return rc_of(bpf_map_lookup_elem(fd(m), key, value));
}

int BpfMapOps::update(MapId m, const void* key, const void* value, uint64_t flags) {
  return rc_of(bpf_map_update_elem(fd(m), key, value, flags));
}

int BpfMapOps::erase(MapId m, const void* key) { return rc_of(bpf_map_delete_elem(fd(m), key)); }

int BpfMapOps::update_many(MapId m, const void* keys, const void* values, size_t n, size_t key_size,
                           size_t value_size, size_t* done) {
  return map_update_many(fd(m), keys, values, n, key_size, value_size, done);
}

int BpfMapOps::delete_many(MapId m, const void* keys, size_t n, size_t key_size) {
  return map_delete_many(fd(m), keys, n, key_size);
}

int BpfMapOps::for_each(MapId m, size_t key_size, size_t value_size,
                        const std::function<void(const void*, const void*)>& fn) const {
  return map_for_each(fd(m), key_size, value_size, fn);
}

}  // namespace xbng::agent
