// Unsolicited Router Advertisements, spread evenly in time over every
// subscriber: a timing wheel of `slots` slots that turns once per
// `interval`. Each key (the caller's subscriber id, e.g. key_rank of its
// SubKey) lives in exactly one slot, so it is due exactly once per turn:
// every host hears an RA every `interval` (keep it below the router
// lifetime and no default route expires), and no key is ever starved.
// The k-th key added goes to slot k·φ·slots mod slots (golden-ratio
// stride: any number of keys spreads over the whole turn), or the next slot
// with room (a bitmap of non-full slots finds it in a few word scans), so
// adding 1M keys at once still yields batches of ≤ slot_capacity per tick:
// never a burst.
//
// add/remove are O(1) (hash index + intrusive lists in a node pool); memory
// is bounded by `capacity` (fixed at construction: no growth beyond it).
// The index holds node numbers only and finds a key through its node
// (~5 bytes a slot instead of 16 for key → node: at 1M keys, 10 MB, not
// 34), and the pool is reserved whole up front (pages never written are not
// resident), so it never moves while growing.
// Not thread-safe: one owner (the punt/RA thread) calls everything.
#pragma once

#include <absl/container/flat_hash_set.h>
#include <absl/hash/hash.h>

#include <cstdint>
#include <vector>

namespace xbng::agent::ra {

class RaScheduler {
 public:
  // interval_ns: one turn; slots: ticks per turn (tick = interval/slots);
  // capacity: the most keys ever held. slot_capacity = ceil(capacity/slots)
  // * 5/4 + 1 (25% slack keeps adds O(1) under churn).
  RaScheduler(uint64_t interval_ns, uint32_t slots, uint32_t capacity);
  // The index's hasher and comparator point into this object.
  RaScheduler(const RaScheduler&) = delete;
  RaScheduler& operator=(const RaScheduler&) = delete;

  // false: already present, or full (capacity reached).
  bool add(uint64_t key);
  bool remove(uint64_t key);  // false: not present
  bool contains(uint64_t key) const { return index_.contains(KeyRef{key}); }
  size_t size() const { return index_.size(); }

  // Appends to *due every key whose slot came up in (last tick, now_ns],
  // and returns how many. The first call starts the wheel at now_ns. A
  // caller late by more than one turn gets each key once (not once per
  // missed turn): never a catch-up burst.
  size_t tick(uint64_t now_ns, std::vector<uint64_t>* due);
  // When the next slot comes up (0 before the first tick).
  uint64_t next_tick_ns() const { return next_ns_; }

  uint64_t tick_ns() const { return tick_ns_; }
  uint32_t slots() const { return static_cast<uint32_t>(slots_.size()); }
  uint32_t slot_capacity() const { return slot_cap_; }
  uint32_t slot_size(uint32_t slot) const { return slots_[slot].count; }
  // The slot a key lives in (for tests); UINT32_MAX when absent.
  uint32_t slot_of(uint64_t key) const;

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Node {
    uint64_t key;
    uint32_t prev, next;  // in the slot list, or next free node
    uint32_t slot;
  };
  struct Slot {
    uint32_t head = kNil;
    uint32_t count = 0;
  };
  // Index entries are node numbers; lookups by key go through KeyRef.
  // Hash and equality read a node's key, so a node is written before it
  // is indexed and unindexed before it is freed.
  struct KeyRef {
    uint64_t key;
  };
  struct NodeHash {
    using is_transparent = void;
    const std::vector<Node>* nodes;
    size_t operator()(KeyRef k) const { return absl::Hash<uint64_t>{}(k.key); }
    size_t operator()(uint32_t id) const { return (*this)(KeyRef{(*nodes)[id].key}); }
  };
  struct NodeEq {
    using is_transparent = void;
    const std::vector<Node>* nodes;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(KeyRef k, uint32_t id) const { return (*nodes)[id].key == k.key; }
    bool operator()(uint32_t id, KeyRef k) const { return (*this)(k, id); }
  };
  uint32_t find_slot_with_room();
  void set_full(uint32_t slot, bool full);

  uint64_t interval_ns_, tick_ns_;
  uint32_t capacity_, slot_cap_;
  std::vector<Slot> slots_;
  std::vector<uint64_t> not_full_;  // bitmap: 1 = slot has room
  std::vector<Node> nodes_;         // grows up to capacity_ (reserved)
  uint32_t free_ = kNil;
  uint32_t insert_seq_ = 0, stride_ = 1;
  absl::flat_hash_set<uint32_t, NodeHash, NodeEq> index_;  // node numbers, by key
  bool started_ = false;
  uint32_t cursor_ = 0;  // next slot to fire
  uint64_t next_ns_ = 0;
};

}  // namespace xbng::agent::ra
