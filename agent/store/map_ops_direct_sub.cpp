// BpfMapOps for MapId::kSubscribers with a direct subscriber layout: each
// key goes to its slot of `direct_subscribers` (common/direct_sub.h) or to
// the `subscribers` hash, for every operation, so that the store sees one
// logical map. A slot's entry carries XBNG_SUB_F_PRESENT in the array only:
// set here on every write, stripped on every read.
#include <bpf/bpf.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "store/map_ops.h"

namespace xbng::agent {

namespace {

int rc_of(int rc) { return rc == 0 ? 0 : (rc < 0 && rc != -1 ? rc : -errno); }

struct xbng_sub_key key_at(const uint8_t* k) {
  struct xbng_sub_key key;
  std::memcpy(&key, k, sizeof key);
  return key;
}

}  // namespace

int BpfMapOps::dsub_lookup(uint32_t slot, void* value) const {
  struct xbng_subscriber s;
  if (bpf_map_lookup_elem(fd(MapId::kDirectSubs), &slot, &s) != 0) return -errno;
  if (!(s.flags & XBNG_SUB_F_PRESENT)) {
    errno = ENOENT;
    return -ENOENT;
  }
  s.flags &= static_cast<uint16_t>(~XBNG_SUB_F_PRESENT);
  std::memcpy(value, &s, sizeof s);
  return 0;
}

// As direct_update: BPF_NOEXIST and BPF_EXIST are decided on the present
// mark; the store writes each subscriber from one thread at a time.
int BpfMapOps::dsub_update(uint32_t slot, const void* value, uint64_t flags) {
  if (flags != BPF_ANY) {
    struct xbng_subscriber old;
    const int rc = dsub_lookup(slot, &old);
    if (rc != 0 && rc != -ENOENT) return rc;
    const bool present = rc == 0;
    if (flags == BPF_NOEXIST && present) return errno = EEXIST, -EEXIST;
    if (flags == BPF_EXIST && !present) return errno = ENOENT, -ENOENT;
  }
  struct xbng_subscriber s;
  std::memcpy(&s, value, sizeof s);
  s.flags |= XBNG_SUB_F_PRESENT;
  return rc_of(bpf_map_update_elem(fd(MapId::kDirectSubs), &slot, &s, BPF_ANY));
}

int BpfMapOps::dsub_erase(uint32_t slot) {
  struct xbng_subscriber old;
  if (int rc = dsub_lookup(slot, &old)) return rc;
  const struct xbng_subscriber empty {};
  return rc_of(bpf_map_update_elem(fd(MapId::kDirectSubs), &slot, &empty, BPF_ANY));
}

std::optional<uint32_t> BpfMapOps::dsub_slot(MapId m, const void* key) const {
  if (m != MapId::kSubscribers || maps_.direct_subs.empty()) return std::nullopt;
  return maps_.direct_subs.slot_of(key_at(static_cast<const uint8_t*>(key)));
}

// Runs of consecutive keys on one path (split_runs), each in batches: the
// hash's as they are, the array's as slots with the present mark.
int BpfMapOps::dsub_update_many(const void* keys, const void* values, size_t n, size_t key_size,
                                size_t value_size, size_t* done) {
  const auto* k = static_cast<const uint8_t*>(keys);
  const auto* v = static_cast<const uint8_t*>(values);
  std::vector<uint32_t> slots;
  std::vector<struct xbng_subscriber> lines;
  auto slot_at = [&](size_t i) { return maps_.direct_subs.slot_of(key_at(k + i * key_size)); };
  auto inside = [&](size_t i) { return slot_at(i).has_value(); };
  auto array = [&](size_t i, size_t end, size_t* part) {
    slots.clear();
    lines.clear();
    for (; i < end; ++i) {
      struct xbng_subscriber s;
      std::memcpy(&s, v + i * value_size, sizeof s);
      s.flags |= XBNG_SUB_F_PRESENT;
      slots.push_back(*slot_at(i));
      lines.push_back(s);
    }
    return map_update_many(fd(MapId::kDirectSubs), slots.data(), lines.data(), slots.size(),
                           sizeof(uint32_t), sizeof(struct xbng_subscriber), part);
  };
  auto hashed = [&](size_t i, size_t end, size_t* part) {
    return map_update_many(fd(MapId::kSubscribers), k + i * key_size, v + i * value_size, end - i,
                           key_size, value_size, part);
  };
  return split_runs(n, done, inside, array, hashed);
}

int BpfMapOps::dsub_delete_many(const void* keys, size_t n, size_t key_size) {
  const auto* k = static_cast<const uint8_t*>(keys);
  std::vector<uint8_t> hashed;
  for (size_t i = 0; i < n; ++i) {
    if (auto slot = maps_.direct_subs.slot_of(key_at(k + i * key_size))) {
      if (int rc = dsub_erase(*slot); rc && rc != -ENOENT) return rc;
      continue;
    }
    hashed.insert(hashed.end(), k + i * key_size, k + (i + 1) * key_size);
  }
  if (hashed.empty()) return 0;
  return map_delete_many(fd(MapId::kSubscribers), hashed.data(), hashed.size() / key_size,
                         key_size);
}

// The hash's entries, then the array's present slots as their keys.
int BpfMapOps::dsub_for_each(size_t key_size, size_t value_size,
                             const std::function<void(const void*, const void*)>& fn) const {
  if (int rc = map_for_each(fd(MapId::kSubscribers), key_size, value_size, fn)) return rc;
  std::vector<uint8_t> value(value_size);
  return direct_sub_for_each(fd(MapId::kDirectSubs), maps_.direct_subs,
                             [&](const struct xbng_sub_key& key, const struct xbng_subscriber& s) {
                               std::memcpy(value.data(), &s, std::min(value_size, sizeof s));
                               fn(&key, value.data());
                             });
}

// The hash's keys in chunks through the reader (lookup_many), the array's
// one system call each.
void BpfMapOps::dsub_lookup_many(const void* keys, size_t n, size_t key_size, void* values,
                                 size_t value_size, uint8_t* found) const {
  const auto* k = static_cast<const uint8_t*>(keys);
  auto* v = static_cast<uint8_t*>(values);
  std::vector<size_t> hashed;
  for (size_t i = 0; i < n; ++i) {
    if (auto slot = maps_.direct_subs.slot_of(key_at(k + i * key_size)))
      found[i] = dsub_lookup(*slot, v + i * value_size) == 0;
    else
      hashed.push_back(i);
  }
  if (hashed.empty()) return;
  std::vector<uint8_t> hk(hashed.size() * key_size), hv(hashed.size() * value_size),
      hf(hashed.size());
  for (size_t j = 0; j < hashed.size(); ++j)
    std::memcpy(hk.data() + j * key_size, k + hashed[j] * key_size, key_size);
  hash_lookup_many(MapId::kSubscribers, hk.data(), hashed.size(), key_size, hv.data(), value_size,
                   hf.data());
  for (size_t j = 0; j < hashed.size(); ++j) {
    found[hashed[j]] = hf[j];
    if (hf[j]) std::memcpy(v + hashed[j] * value_size, hv.data() + j * value_size, value_size);
  }
}

}  // namespace xbng::agent
