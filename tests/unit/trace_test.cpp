// decode_frame (xbngctl trace's decoder of input and output frames): both
// tags, L3/L4 fields, an ICMP error's quoted packet, and every truncation of
// a frame decoded without reading past its end (run under ASan by
// scripts/test-sanitize).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dataplane/trace.h"

using namespace xbng::agent;

namespace {

// QinQ (0x88a8 vid 100, 0x8100 vid 7), IPv4 192.0.2.1 -> 100.64.0.16 TTL 64,
// ICMP time exceeded quoting 100.64.0.16 -> 192.0.2.2 UDP 40000 -> 9.
std::vector<uint8_t> icmp_error_frame() {
  std::vector<uint8_t> f = {0x02, 0, 0, 0, 0, 0x10, 0x02, 0, 0, 0, 0, 0x01,  // dst, src
                            0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x07, 0x08, 0x00,
                            // IPv4: 20 + 8 + 28 = 56 bytes
                            0x45, 0, 0, 56, 0, 0, 0, 0, 64, 1, 0, 0, 192, 0, 2, 1, 100, 64, 0, 16,
                            11, 0, 0, 0, 0, 0, 0, 0,  // ICMP time exceeded
                            0x45, 0, 0, 28, 0, 0, 0x40, 0, 1, 17, 0, 0, 100, 64, 0, 16, 192, 0, 2,
                            2, 0x9c, 0x40, 0, 9, 0, 8, 0, 0};
  return f;
}

}  // namespace

TEST(TraceDecode, TagsAddressesAndQuotedPacket) {
  const auto f = icmp_error_frame();
  DecodedFrame d;
  decode_frame(f.data(), f.size(), &d);
  EXPECT_EQ(d.length, f.size());
  EXPECT_EQ(d.dst_mac, "02:00:00:00:00:10");
  EXPECT_EQ(d.src_mac, "02:00:00:00:00:01");
  ASSERT_EQ(d.tags.size(), 2u);
  EXPECT_EQ(d.tags[0].tpid, 0x88a8u);
  EXPECT_EQ(d.tags[0].vid, 100u);
  EXPECT_EQ(d.tags[1].tpid, 0x8100u);
  EXPECT_EQ(d.tags[1].vid, 7u);
  EXPECT_EQ(d.tags[1].pcp, 1u);
  EXPECT_EQ(d.ethertype, "ipv4");
  EXPECT_EQ(d.src, "192.0.2.1");
  EXPECT_EQ(d.dst, "100.64.0.16");
  EXPECT_EQ(d.ttl, 64u);
  EXPECT_EQ(d.proto, "icmp");
  EXPECT_EQ(d.icmp_type, 11u);
  EXPECT_EQ(d.inner, "ipv4 100.64.0.16 > 192.0.2.2 ttl 1 len 28, udp 40000 > 9");
}

TEST(TraceDecode, EveryTruncationStaysInBounds) {
  const auto full = icmp_error_frame();
  for (size_t n = 0; n <= full.size(); ++n) {
    // A heap copy of exactly n bytes: ASan flags any read past it.
    std::vector<uint8_t> f(full.begin(), full.begin() + static_cast<long>(n));
    DecodedFrame d;
    decode_frame(f.data(), f.size(), &d);
    EXPECT_EQ(d.length, n);
    EXPECT_FALSE(d.text.empty()) << n;
  }
}
