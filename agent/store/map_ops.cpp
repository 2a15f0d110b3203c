#include "store/map_ops.h"

#include <bpf/bpf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

BpfMapOps::BpfMapOps(const StoreMaps& maps) : maps_(maps) {
  // An array map's mapping holds its values in index order, each rounded
  // up to 8 bytes. A map without BPF_F_MMAPABLE (a test's) is read by
  // system call.
  struct bpf_map_info info {};
  uint32_t len = sizeof info;
  const int pfd = fd(MapId::kPolice);
  if (pfd < 0 || bpf_obj_get_info_by_fd(pfd, &info, &len) != 0) return;
  if (info.type != BPF_MAP_TYPE_ARRAY || !(info.map_flags & BPF_F_MMAPABLE)) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t stride = (size_t{info.value_size} + 7) & ~size_t{7};
  const size_t bytes = (stride * info.max_entries + page - 1) & ~(page - 1);
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, pfd, 0);
  if (p == MAP_FAILED) return;
  police_ = static_cast<const uint8_t*>(p);
  police_len_ = bytes;
  police_stride_ = stride;
  police_max_ = info.max_entries;
  police_vsize_ = info.value_size;
}

BpfMapOps::~BpfMapOps() {
  if (police_) munmap(const_cast<uint8_t*>(police_), police_len_);
}

int BpfMapOps::lookup(MapId m, const void* key, void* value) const {
  if (m == MapId::kPolice && police_) {
    uint32_t slot;
    std::memcpy(&slot, key, sizeof slot);
    if (slot >= police_max_) {
      errno = ENOENT;
      return -ENOENT;
    }
    std::memcpy(value, police_ + size_t{slot} * police_stride_, police_vsize_);
    return 0;
  }
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
