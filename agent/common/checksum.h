// The Internet checksum (RFC 1071) of IPv4 headers, UDP, TCP and ICMPv6.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/bytes.h"

namespace xbng::agent {

// Adds `d` as big-endian 16-bit words (an odd last byte padded with zero) to
// the running one's-complement sum `sum`. The result has its carries folded
// back (it fits 16 bits), so it may be continued with more data, pseudo-header
// words, or passed to csum_fold.
inline uint32_t csum_partial(std::span<const uint8_t> d, uint32_t sum) {
  uint64_t s = sum;
  size_t i = 0;
  for (; i + 1 < d.size(); i += 2) s += be::get16(&d[i]);
  if (i < d.size()) s += uint32_t{d[i]} << 8;
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint32_t>(s);
}

// The checksum field of a running sum: carries folded, complemented. Over
// data that holds a correct checksum it is 0.
inline uint16_t csum_fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum & 0xffff);
}

}  // namespace xbng::agent
