// MapOps: the map operations the subscriber store performs, so that the
// store runs against the kernel maps (BpfMapOps) or, in unit tests, against
// maps in memory that can refuse a chosen write.
//
// Every operation returns 0 or -errno (and leaves errno set on failure).
// The store writes different route maps from two threads at once: an
// implementation must allow concurrent operations on different maps.
#pragma once

#include <linux/bpf.h>  // BPF_ANY, BPF_EXIST, BPF_NOEXIST

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "dataplane/dataplane.h"

namespace xbng::agent {

// The maps the store writes, as fds and capacities (a Dataplane, or maps a
// test creates itself).
struct StoreMaps {
  int fd[kMapCount];
  uint32_t max_entries[kMapCount];
  // Where host routes live: `routes_v4`, `routes_v6` and `routes_v6_64` are
  // each one logical map to the store, whose keys inside these pools are
  // slots of `direct_v4` or `direct_v6`.
  DirectLayout direct;
  // Where subscribers live: `subscribers` is one logical map to the store,
  // whose keys inside these S-VLAN ranges are slots of `direct_subscribers`.
  DirectSubLayout direct_subs;
  static StoreMaps from(const Dataplane& dp);
};

class MapOps {
 public:
  virtual ~MapOps() = default;
  virtual uint32_t max_entries(MapId m) const = 0;
  virtual int lookup(MapId m, const void* key, void* value) const = 0;
  // Looks up n keys (packed at key_size): found[i] is 1 and values[i]
  // (packed at value_size) the value if key i is present, found[i] 0 if it
  // is not. Here one lookup() each; the kernel maps read chunks of keys in
  // one system call.
  virtual void lookup_many(MapId m, const void* keys, size_t n, size_t key_size, void* values,
                           size_t value_size, uint8_t* found) const;
  // Writes n values (packed at value_size) over what their keys hold, m
  // `police`, `subscribers` or a route map: each merged with the value it replaces
  // (swap_merge) and written unless the merge says nothing changes. flags[i]
  // in: XBNG_SWAP_KEEP_MAC, XBNG_SWAP_REWRITE (xbng/store_read.h); out:
  // XBNG_SWAP_FOUND (old[i] is the value replaced) and XBNG_SWAP_WRITTEN.
  // Stops at the first refused write: *done is the keys processed before
  // it. Here lookup_many(), the merge and update_many(); the kernel maps
  // read, merge and write a chunk of keys in one system call.
  virtual int swap_many(MapId m, const void* keys, size_t n, size_t key_size, const void* values,
                        void* old, size_t value_size, uint8_t* flags, size_t* done);
  // flags: BPF_ANY, BPF_NOEXIST, BPF_EXIST.
  virtual int update(MapId m, const void* key, const void* value, uint64_t flags) = 0;
  virtual int erase(MapId m, const void* key) = 0;
  // Writes n entries in order; *done is the number of leading entries written.
  virtual int update_many(MapId m, const void* keys, const void* values, size_t n, size_t key_size,
                          size_t value_size, size_t* done) = 0;
  // Deletes n keys, ignoring keys that are absent.
  virtual int delete_many(MapId m, const void* keys, size_t n, size_t key_size) = 0;
  virtual int for_each(MapId m, size_t key_size, size_t value_size,
                       const std::function<void(const void*, const void*)>& fn) const = 0;
};

// The value swap_many() writes over `old` (value: the new one, merged in
// place; in: its XBNG_SWAP_* input bits); false when it would write
// nothing. xbng_merge_police, xbng_merge_subscriber or xbng_merge_route
// (xbng/store_read.h).
bool swap_merge(MapId m, void* value, const void* old, uint8_t in);

class StoreReader;

// The kernel maps themselves. MapId::kRoutesV4 stands for the `routes_v4`
// hash and the `direct_v4` array together, kRoutesV6 and kRoutesV6_64 for
// their hashes and the pools of /128s and of /64s in `direct_v6`: each key
// goes to the place the direct layout gives it (common/direct.h), for every
// operation; likewise MapId::kSubscribers stands for the `subscribers` hash
// and the `direct_subscribers` array (common/direct_sub.h,
// map_ops_direct_sub.cpp). lookup_many() of the subscribers, police and the three hash
// route maps runs bpf/store_read.bpf.c (a chunk of keys per system call);
// where that program does not load (an older kernel, no CAP_BPF), and for
// the LPM prefix maps, it looks up one key at a time. A key inside a direct
// pool is read from its line in place (a mapping of the array). A /64 is
// written into its line through the mapping, the route alone: the line's
// n128 count belongs to the writes of kRoutesV6, which may run on another
// thread at the same time. A /128 of kRoutesV6 inside a pool of /64s stays
// in the hash and is counted in its /64's line: the count raised before
// the /128 is inserted, lowered after it is deleted (abi.h
// xbng_direct_route), kRoutesV6 being written by one thread at a time.
class BpfMapOps final : public MapOps {
 public:
  // `chunked_reads` false: never load the program (what a kernel that
  // refuses it gives; the tests of that path).
  explicit BpfMapOps(const StoreMaps& maps, bool chunked_reads = true);
  ~BpfMapOps() override;
  BpfMapOps(const BpfMapOps&) = delete;
  BpfMapOps& operator=(const BpfMapOps&) = delete;
  uint32_t max_entries(MapId m) const override { return maps_.max_entries[static_cast<int>(m)]; }
  int lookup(MapId m, const void* key, void* value) const override;
  void lookup_many(MapId m, const void* keys, size_t n, size_t key_size, void* values,
                   size_t value_size, uint8_t* found) const override;
  // Whether lookup_many() reads through the program (tests, the log).
  bool reads_in_chunks() const { return reader_ != nullptr; }
  // Chunks read through the program so far.
  uint64_t program_runs() const;
  // Chunks swapped through the program so far.
  uint64_t swap_runs() const;
  int swap_many(MapId m, const void* keys, size_t n, size_t key_size, const void* values, void* old,
                size_t value_size, uint8_t* flags, size_t* done) override;
  int update(MapId m, const void* key, const void* value, uint64_t flags) override;
  int erase(MapId m, const void* key) override;
  int update_many(MapId m, const void* keys, const void* values, size_t n, size_t key_size,
                  size_t value_size, size_t* done) override;
  int delete_many(MapId m, const void* keys, size_t n, size_t key_size) override;
  int for_each(MapId m, size_t key_size, size_t value_size,
               const std::function<void(const void*, const void*)>& fn) const override;

 private:
  int fd(MapId m) const { return maps_.fd[static_cast<int>(m)]; }
  // The unit of m's keys when some of them live in a direct array.
  std::optional<DirectUnit> direct(MapId m) const;
  std::optional<uint32_t> slot_of(DirectUnit u, const void* key) const {
    return maps_.direct.slot_of(u, key);
  }
  int direct_lookup(DirectUnit u, uint32_t slot, void* value) const;
  int direct_update(DirectUnit u, uint32_t slot, const void* value, uint64_t flags);
  int direct_erase(DirectUnit u, uint32_t slot);
  void direct_lookup_many(DirectUnit u, const void* keys, size_t n, size_t key_size, void* values,
                          size_t value_size, uint8_t* found) const;
  int direct_update_many(DirectUnit u, const uint8_t* keys, const uint8_t* values, size_t n,
                         size_t key_size, size_t value_size, size_t* done);
  // Splits keys 0..n-1 into runs of consecutive keys on one path (inside(i):
  // key i lives in the array) and writes each run with array(i, end, &part)
  // or hash(i, end, &part), which return 0 or -errno and set part to the
  // leading keys of the run they wrote; *done adds them up. Stops at the
  // first error. Shared by the direct routes and the direct subscribers.
  template <typename Inside, typename Array, typename Hash>
  static int split_runs(size_t n, size_t* done, Inside inside, Array array, Hash hash);
  // The line of a /64 (a slot of a pool of /64s) that counts a key of m:
  // m is kRoutesV6 and the key's /64 is inside such a pool; else null.
  struct xbng_direct_route* counting_line(MapId m, const void* key) const;
  // The /128s of keys (kRoutesV6) inside pools of /64s that are present
  // in the hash (present) or absent from it, each key once: their indexes.
  // Absent ones are counted before a write, present ones uncounted after a
  // delete.
  std::vector<size_t> counted_128(const uint8_t* keys, size_t n, bool present) const;
  void add_128(const uint8_t* key, int delta);
  int v6_update_many(const uint8_t* keys, const uint8_t* values, size_t n, size_t value_size,
                     size_t* done);
  int v6_delete_many(const uint8_t* keys, size_t n);
  int route_update_many(MapId m, const void* keys, const void* values, size_t n, size_t key_size,
                        size_t value_size, size_t* done);
  int route_delete_many(MapId m, const void* keys, size_t n, size_t key_size);
  // Reads n keys of a hash map: in chunks through the reader, else one
  // system call each.
  void hash_lookup_many(MapId m, const void* keys, size_t n, size_t key_size, void* values,
                        size_t value_size, uint8_t* found) const;
  // The slot of a key of m when m is `subscribers` with a direct layout
  // and the key is inside it; else none.
  std::optional<uint32_t> dsub_slot(MapId m, const void* key) const;
  int dsub_lookup(uint32_t slot, void* value) const;
  int dsub_update(uint32_t slot, const void* value, uint64_t flags);
  int dsub_erase(uint32_t slot);
  int dsub_update_many(const void* keys, const void* values, size_t n, size_t key_size,
                       size_t value_size, size_t* done);
  int dsub_delete_many(const void* keys, size_t n, size_t key_size);
  int dsub_for_each(size_t key_size, size_t value_size,
                    const std::function<void(const void*, const void*)>& fn) const;
  void dsub_lookup_many(const void* keys, size_t n, size_t key_size, void* values,
                        size_t value_size, uint8_t* found) const;
  StoreMaps maps_;
  DirectLines lines_v4_;  // mapped read-only (lookups)
  DirectLines lines_v6_;  // mapped writable with a pool of /64s (their routes, the counts)
  std::unique_ptr<StoreReader> reader_;
};

template <typename Inside, typename Array, typename Hash>
int BpfMapOps::split_runs(size_t n, size_t* done, Inside inside, Array array, Hash hash) {
  *done = 0;
  while (*done < n) {
    const bool in = inside(*done);
    size_t end = *done + 1;
    while (end < n && inside(end) == in) ++end;
    size_t part = 0;
    const int rc = in ? array(*done, end, &part) : hash(*done, end, &part);
    *done += part;
    if (rc) return rc;
  }
  return 0;
}

}  // namespace xbng::agent
