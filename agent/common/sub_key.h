// A subscriber's key (its port and VLAN pair, struct xbng_sub_key) as one
// 64-bit rank and back. The rank orders keys as listings do (ifindex, outer,
// inner); the store's index, the lease table and the RA scheduler key by it.
#pragma once

#include <cstdint>

#include "xbng/abi.h"

namespace xbng::agent {

using SubKey = struct xbng_sub_key;

inline uint64_t key_rank(const SubKey& k) {
  return (uint64_t{k.ifindex} << 32) | (uint64_t{k.outer_vid} << 16) | k.inner_vid;
}
inline SubKey key_of_rank(uint64_t rank) {
  SubKey k{};
  k.ifindex = static_cast<uint32_t>(rank >> 32);
  k.outer_vid = static_cast<uint16_t>(rank >> 16);
  k.inner_vid = static_cast<uint16_t>(rank);
  return k;
}

}  // namespace xbng::agent
