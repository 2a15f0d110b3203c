// Timing wheel for unsolicited RAs: see scheduler.h.
#include "bringup/ra/scheduler.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace xbng::agent::ra {

RaScheduler::RaScheduler(uint64_t interval_ns, uint32_t slots, uint32_t capacity)
    : interval_ns_(interval_ns),
      capacity_(capacity),
      index_(0, NodeHash{&nodes_}, NodeEq{&nodes_}) {
  if (slots == 0 || interval_ns < slots || capacity == 0)
    throw std::invalid_argument("RaScheduler: interval, slots and capacity must be positive");
  tick_ns_ = interval_ns / slots;
  uint64_t per = (uint64_t{capacity} + slots - 1) / slots;
  slot_cap_ = static_cast<uint32_t>(per + per / 4 + 1);
  slots_.resize(slots);
  not_full_.assign((slots + 63) / 64, 0);
  for (uint32_t i = 0; i < slots; ++i) set_full(i, false);
  nodes_.reserve(capacity);
  index_.reserve(std::min<uint32_t>(capacity, 1u << 16));
  // Golden-ratio stride, coprime with the slot count: the k-th key goes to
  // slot k * stride mod slots, so any number of keys is spread over the whole
  // turn (three-distance theorem), not packed into its first slots.
  stride_ = std::max<uint32_t>(1, static_cast<uint32_t>(slots * 0.6180339887));
  while (std::gcd(stride_, slots) != 1) ++stride_;
}

void RaScheduler::set_full(uint32_t slot, bool full) {
  uint64_t bit = uint64_t{1} << (slot % 64);
  if (full)
    not_full_[slot / 64] &= ~bit;
  else
    not_full_[slot / 64] |= bit;
}

// The next slot with room at or after the k-th key's golden-ratio slot.
// Scans 64 slots per word; with 25% slack free room is never far.
uint32_t RaScheduler::find_slot_with_room() {
  uint32_t n = static_cast<uint32_t>(slots_.size());
  uint32_t words = static_cast<uint32_t>(not_full_.size());
  uint32_t start = static_cast<uint32_t>((uint64_t{insert_seq_} * stride_) % n);
  uint32_t w = start / 64;
  uint64_t word = not_full_[w] & (~uint64_t{0} << (start % 64));
  for (uint32_t scanned = 0; scanned <= words; ++scanned) {
    if (word) {
      uint32_t slot = w * 64 + static_cast<uint32_t>(__builtin_ctzll(word));
      if (slot < n) return slot;
    }
    w = (w + 1) % words;
    word = not_full_[w];
  }
  return kNil;
}

bool RaScheduler::add(uint64_t key) {
  if (index_.size() >= capacity_ || contains(key)) return false;
  uint32_t slot = find_slot_with_room();
  if (slot == kNil) return false;
  uint32_t id;
  if (free_ != kNil) {
    id = free_;
    free_ = nodes_[id].next;
  } else {
    id = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back({});
  }
  Slot& s = slots_[slot];
  nodes_[id] = Node{key, kNil, s.head, slot};
  if (s.head != kNil) nodes_[s.head].prev = id;
  s.head = id;
  if (++s.count == slot_cap_) set_full(slot, true);
  index_.insert(id);
  ++insert_seq_;
  return true;
}

bool RaScheduler::remove(uint64_t key) {
  auto it = index_.find(KeyRef{key});
  if (it == index_.end()) return false;
  uint32_t id = *it;
  index_.erase(it);
  Node& nd = nodes_[id];
  Slot& s = slots_[nd.slot];
  if (nd.prev != kNil)
    nodes_[nd.prev].next = nd.next;
  else
    s.head = nd.next;
  if (nd.next != kNil) nodes_[nd.next].prev = nd.prev;
  if (s.count-- == slot_cap_) set_full(nd.slot, false);
  nd.next = free_;
  nd.slot = kNil;
  free_ = id;
  return true;
}

uint32_t RaScheduler::slot_of(uint64_t key) const {
  auto it = index_.find(KeyRef{key});
  return it == index_.end() ? kNil : nodes_[*it].slot;
}

size_t RaScheduler::tick(uint64_t now_ns, std::vector<uint64_t>* due) {
  if (!started_) {
    started_ = true;
    cursor_ = 0;
    next_ns_ = now_ns;
  }
  size_t before = due->size();
  uint32_t n = static_cast<uint32_t>(slots_.size());
  // More than a turn late: fire each slot once, then resume from now.
  uint32_t fired = 0;
  while (next_ns_ <= now_ns && fired < n) {
    for (uint32_t id = slots_[cursor_].head; id != kNil; id = nodes_[id].next)
      due->push_back(nodes_[id].key);
    cursor_ = (cursor_ + 1) % n;
    next_ns_ += tick_ns_;
    ++fired;
  }
  if (next_ns_ <= now_ns) next_ns_ = now_ns + tick_ns_;
  return due->size() - before;
}

}  // namespace xbng::agent::ra
