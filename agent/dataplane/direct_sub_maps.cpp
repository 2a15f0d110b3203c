// Direct subscribers on the pinned maps (libbpf only): the layout in
// `direct_sub_ranges`, the present entries of `direct_subscribers`, and a
// lookup that finds a key where the layout puts it. Shared by the agent,
// the start-up migration and `xbngctl bpf dump`.
#include <bpf/bpf.h>

#include <cerrno>
#include <cstring>

#include "dataplane/dataplane.h"

namespace xbng::agent {

int direct_sub_for_each(
    int fd, const DirectSubLayout& d,
    const std::function<void(const struct xbng_sub_key&, const struct xbng_subscriber&)>& fn) {
  if (d.empty()) return 0;
  return map_for_each(fd, sizeof(uint32_t), sizeof(struct xbng_subscriber),
                      [&](const void* k, const void* v) {
                        uint32_t slot;
                        struct xbng_subscriber s;
                        std::memcpy(&slot, k, 4);
                        std::memcpy(&s, v, sizeof s);
                        if (!(s.flags & XBNG_SUB_F_PRESENT)) return;
                        s.flags &= static_cast<uint16_t>(~XBNG_SUB_F_PRESENT);
                        if (auto key = d.key_of(slot)) fn(*key, s);
                      });
}

int direct_sub_read_layout(int ranges_fd, DirectSubLayout* out) {
  const uint32_t zero = 0;
  struct xbng_direct_sub_table t {};
  if (bpf_map_lookup_elem(ranges_fd, &zero, &t) != 0) return -errno;
  *out = DirectSubLayout::from_table(t);
  return 0;
}

int direct_sub_lookup(int hash_fd, int array_fd, const DirectSubLayout& d,
                      const struct xbng_sub_key& key, struct xbng_subscriber* out) {
  auto slot = d.slot_of(key);
  if (!slot) return bpf_map_lookup_elem(hash_fd, &key, out) == 0 ? 0 : -errno;
  if (bpf_map_lookup_elem(array_fd, &*slot, out) != 0) return -errno;
  if (!(out->flags & XBNG_SUB_F_PRESENT)) {
    errno = ENOENT;
    return -ENOENT;
  }
  out->flags &= static_cast<uint16_t>(~XBNG_SUB_F_PRESENT);
  return 0;
}

}  // namespace xbng::agent
