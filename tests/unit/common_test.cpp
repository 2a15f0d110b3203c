// The shared byte-level pieces of agent/common/: big-endian loads and stores,
// the Internet checksum (RFC 1071), the subscriber key rank and SI numbers.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "common/bytes.h"
#include "common/checksum.h"
#include "common/sub_key.h"
#include "common/units.h"

namespace xbng::agent {
namespace {

TEST(Bytes, BigEndianLoadsAndStores) {
  const uint8_t b[] = {0x12, 0x34, 0x56, 0x78, 0x9a};
  EXPECT_EQ(be::get16(b), 0x1234);
  EXPECT_EQ(be::get16(b + 3), 0x789a);
  EXPECT_EQ(be::get32(b), 0x12345678u);
  EXPECT_EQ(be::get32(b + 1), 0x3456789au);
  std::array<uint8_t, 6> out{};
  be::put16(out.data(), 0xbeef);
  be::put32(out.data() + 2, 0xdeadc0de);
  EXPECT_EQ(out, (std::array<uint8_t, 6>{0xbe, 0xef, 0xde, 0xad, 0xc0, 0xde}));
  EXPECT_EQ(be::get16(out.data()), 0xbeef);
  EXPECT_EQ(be::get32(out.data() + 2), 0xdeadc0deu);
}

// RFC 1071 section 3: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2 (carries
// folded); the checksum is its complement.
TEST(Checksum, Rfc1071Example) {
  const std::vector<uint8_t> d = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(csum_partial(d, 0), 0xddf2u);
  EXPECT_EQ(csum_fold(csum_partial(d, 0)), 0x220d);
  // Summing in two pieces (at an even offset) gives the same sum.
  EXPECT_EQ(csum_partial(std::span(d).subspan(4), csum_partial(std::span(d).first(4), 0)), 0xddf2u);
}

// An IPv4 header (192.168.0.1 -> 192.168.0.199, UDP, 115 bytes): its checksum
// is b861, and with the checksum in place the header sums to ffff (fold 0).
TEST(Checksum, Ipv4Header) {
  std::vector<uint8_t> h = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                            0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(csum_fold(csum_partial(h, 0)), 0xb861);
  be::put16(&h[10], 0xb861);
  EXPECT_EQ(csum_fold(csum_partial(h, 0)), 0);
}

// An odd last byte counts as the high byte of a word padded with zero
// (RFC 1071 section 4.1: "add left-over byte").
TEST(Checksum, OddLength) {
  const std::vector<uint8_t> odd = {0x01, 0x02, 0x03};
  const std::vector<uint8_t> padded = {0x01, 0x02, 0x03, 0x00};
  EXPECT_EQ(csum_partial(odd, 0), 0x0402u);
  EXPECT_EQ(csum_partial(odd, 0), csum_partial(padded, 0));
  EXPECT_EQ(csum_fold(0), 0xffff);
}

// Carries out of 16 bits are added back (end-around carry), also for long
// runs whose 32-bit total would overflow without folding.
TEST(Checksum, EndAroundCarry) {
  const std::vector<uint8_t> d = {0xff, 0xff, 0x00, 0x01};
  EXPECT_EQ(csum_partial(d, 0), 0x0001u);
  const std::vector<uint8_t> big(1 << 20, 0xff);
  EXPECT_EQ(csum_partial(big, 0xffffu), 0xffffu);
  EXPECT_EQ(csum_fold(0x1fffeu), 0x0000);
}

TEST(SubKeyRank, RoundTripAndOrder) {
  SubKey k{};
  k.ifindex = 0x01020304;
  k.outer_vid = 4094;
  k.inner_vid = 7;
  const uint64_t r = key_rank(k);
  EXPECT_EQ(r, 0x0102030400000000ull | (uint64_t{4094} << 16) | 7);
  const SubKey back = key_of_rank(r);
  EXPECT_EQ(back.ifindex, k.ifindex);
  EXPECT_EQ(back.outer_vid, k.outer_vid);
  EXPECT_EQ(back.inner_vid, k.inner_vid);
  SubKey a{}, b{};
  a.ifindex = 1;
  a.outer_vid = 4095;
  a.inner_vid = 4095;
  b.ifindex = 2;
  EXPECT_LT(key_rank(a), key_rank(b));  // ifindex first, then outer, then inner
  b = a;
  b.inner_vid = 4094;
  EXPECT_GT(key_rank(a), key_rank(b));
}

TEST(Units, ParseSi) {
  EXPECT_EQ(parse_si("20M"), 20000000u);
  EXPECT_EQ(parse_si("20m"), 20000000u);
  EXPECT_EQ(parse_si("1G"), 1000000000u);
  EXPECT_EQ(parse_si("1500"), 1500u);
  EXPECT_EQ(parse_si("1.5k"), 1500u);
  EXPECT_EQ(parse_si("1.5K"), 1500u);
  EXPECT_EQ(parse_si("0"), 0u);
  EXPECT_EQ(parse_si("2.500M"), 2500000u);
  EXPECT_EQ(parse_si("18446744073G"), 18446744073000000000u);
  EXPECT_FALSE(parse_si("99999999999999999999"));
  EXPECT_FALSE(parse_si("18446744074G"));  // overflows once scaled
  EXPECT_FALSE(parse_si("1.5"));           // finer than one unit
  EXPECT_FALSE(parse_si("1.0005k"));
  EXPECT_FALSE(parse_si(""));
  EXPECT_FALSE(parse_si("k"));
  EXPECT_FALSE(parse_si("-3"));
  EXPECT_FALSE(parse_si("1.2.3"));
  EXPECT_FALSE(parse_si("10T"));
  EXPECT_FALSE(parse_si(" 10"));
}

TEST(Units, ParseRatePlan) {
  RatePlanValues v{};
  EXPECT_EQ(parse_rate_plan({"20M", "125k", "", "1G"}, &v), std::nullopt);
  EXPECT_EQ(v, (RatePlanValues{20000000, 125000, 0, 1000000000}));
  EXPECT_EQ(parse_rate_plan({"", "", "", ""}, &v), std::nullopt);
  EXPECT_EQ(v, (RatePlanValues{0, 0, 0, 0}));
  EXPECT_EQ(parse_rate_plan({"1M", "1k", "fast", "x"}, &v), std::optional<size_t>(2));
  EXPECT_EQ(std::string_view(kRatePlanFields[2]), "down_rate_bps");
}

}  // namespace
}  // namespace xbng::agent
