#include <gtest/gtest.h>

#include <cstring>

#include "common/direct.h"
#include "common/direct_sub.h"
#include "common/net.h"

using namespace xbng::agent;

TEST(Net, ParsesAndFormatsMac) {
  auto m = parse_mac("02:00:5E:0a:0b:ff");
  ASSERT_TRUE(m);
  EXPECT_EQ(format_mac(m->data()), "02:00:5e:0a:0b:ff");
  EXPECT_TRUE(parse_mac("02-00-5e-0a-0b-ff"));
  for (const char* bad : {"", "02:00:5e:0a:0b", "02:00:5e:0a:0b:ff:00", "0200.5e0a.0bff",
                          "02:00:5e:0a:0b:fg", "02:00-5e:0a:0b:ff"})
    EXPECT_FALSE(parse_mac(bad)) << bad;
  EXPECT_TRUE(mac_is_zero(parse_mac("00:00:00:00:00:00")->data()));
  EXPECT_TRUE(mac_is_multicast(parse_mac("01:00:5e:00:00:01")->data()));
  EXPECT_TRUE(mac_is_multicast(parse_mac("ff:ff:ff:ff:ff:ff")->data()));
  EXPECT_FALSE(mac_is_multicast(parse_mac("02:00:00:00:00:01")->data()));
}

TEST(Net, ParsesIpv4InNetworkOrder) {
  auto a = parse_ipv4("100.64.0.1");
  ASSERT_TRUE(a);
  const auto* b = reinterpret_cast<const uint8_t*>(&*a);
  EXPECT_EQ(b[0], 100);
  EXPECT_EQ(b[3], 1);
  EXPECT_EQ(format_ipv4(*a), "100.64.0.1");
  for (const char* bad : {"", "1.2.3", "1.2.3.256", "1.2.3.4/32", "::1", " 1.2.3.4", "01.2.3.4x"})
    EXPECT_FALSE(parse_ipv4(bad)) << bad;
}

TEST(Net, ParsesIpv6) {
  auto a = parse_ipv6("2001:DB8::1");
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)[0], 0x20);
  EXPECT_EQ((*a)[15], 1);
  EXPECT_EQ(format_ipv6(a->data()), "2001:db8::1");
  for (const char* bad : {"", "2001:db8::1::2", "2001:db8::/64", "1.2.3.4", "g::1"})
    EXPECT_FALSE(parse_ipv6(bad)) << bad;
}

TEST(Net, ParsesPrefixes) {
  auto p = parse_prefix("2001:db8:100::/56");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->family, 6);
  EXPECT_EQ(p->len, 56);
  EXPECT_EQ(format_prefix(*p), "2001:db8:100::/56");
  auto q = parse_prefix("198.51.100.0/28", 4);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->family, 4);
  EXPECT_EQ(format_prefix(*q), "198.51.100.0/28");
  EXPECT_FALSE(parse_prefix("198.51.100.0/28", 6));
  EXPECT_FALSE(parse_prefix("2001:db8::/64", 4));
  for (const char* bad : {"", "10.0.0.0", "10.0.0.0/", "10.0.0.0/33", "2001:db8::/129",
                          "10.0.0.0/2x", "10.0.0.0/-1", "/24"})
    EXPECT_FALSE(parse_prefix(bad)) << bad;
}

TEST(Net, HostBits) {
  auto p = parse_prefix("10.0.0.0/8");
  EXPECT_TRUE(host_bits_zero(p->addr.data(), 4, 8));
  auto q = parse_prefix("10.0.0.1/8");
  EXPECT_FALSE(host_bits_zero(q->addr.data(), 4, 8));
  auto r = parse_prefix("2001:db8:100:80::/56");
  EXPECT_FALSE(host_bits_zero(r->addr.data(), 16, 56));
  auto s = parse_prefix("2001:db8:100:ff00::/56");
  EXPECT_TRUE(host_bits_zero(s->addr.data(), 16, 56));
}

TEST(Net, ParsesU16) {
  EXPECT_EQ(parse_u16("0x88a8"), 0x88a8);
  EXPECT_EQ(parse_u16("33024"), 0x8100);
  EXPECT_FALSE(parse_u16("0x10000"));
  EXPECT_FALSE(parse_u16("88a8"));
  EXPECT_FALSE(parse_u16(""));
}

// Direct routes: pools laid out in order while they fit; an address maps to
// base + offset and back; outside every laid-out pool, none.
TEST(Net, DirectLayoutPlacesPoolsWhileTheyFit) {
  std::vector<Prefix> pools = {*parse_prefix("100.64.0.0/24"), *parse_prefix("2001:db8::/48"),
                               *parse_prefix("100.65.0.0/22"), *parse_prefix("100.66.0.0/25")};
  std::vector<std::string> skipped;
  DirectLayout d = DirectLayout::plan(pools, 1024 + 128, 0, &skipped);
  ASSERT_EQ(d.v4.size(), 2u);  // the /24 and the /25; the /22 does not fit after the /24
  EXPECT_EQ(skipped, std::vector<std::string>{"100.65.0.0/22"});
  EXPECT_EQ(d.v4[0].base, 0u);
  EXPECT_EQ(d.v4[0].size, 256u);
  EXPECT_EQ(d.v4[1].base, 256u);
  EXPECT_EQ(d.v4[1].size, 128u);
  EXPECT_EQ(d.slots(DirectUnit::kV4), 384u);
  EXPECT_TRUE(d.v6.empty());  // no IPv6 slots: the /48 is neither laid out nor skipped
  EXPECT_EQ(d.slot_of(*parse_ipv4("100.64.0.0")), 0u);
  EXPECT_EQ(d.slot_of(*parse_ipv4("100.64.0.255")), 255u);
  EXPECT_EQ(d.slot_of(*parse_ipv4("100.66.0.127")), 383u);
  EXPECT_FALSE(d.slot_of(*parse_ipv4("100.66.0.128")));
  EXPECT_FALSE(d.slot_of(*parse_ipv4("100.65.0.1")));
  EXPECT_FALSE(d.slot_of(*parse_ipv4("100.63.255.255")));
  EXPECT_EQ(d.addr_of(257), *parse_ipv4("100.66.0.1"));
  EXPECT_FALSE(d.addr_of(384));
  // The table round-trips; no slots: nothing laid out, nothing skipped.
  EXPECT_TRUE(DirectLayout::from_tables(d.table(), d.table_v6()) == d);
  skipped.clear();
  EXPECT_TRUE(DirectLayout::plan(pools, 0, 0, &skipped).empty());
  EXPECT_TRUE(skipped.empty());
}

// IPv6: a pool /L with L < 64 is laid out as its /64s, one with L >= 64 as
// its /128s, in order in the IPv6 slots (the IPv4 ones apart); a key of each
// unit maps to base + offset and back, and only to pools of its unit.
TEST(Net, DirectLayoutV6PoolsOf64sAnd128s) {
  std::vector<Prefix> pools = {
      *parse_prefix("2001:db8:100::/48"),     // 65536 /64s: does not fit in 4096 + 256
      *parse_prefix("2001:db8:200::/52"),     // 4096 /64s, slots 0..4095
      *parse_prefix("100.64.0.0/24"),         // IPv4: its own slots
      *parse_prefix("2001:db8:77::/64"),      // 2^64 /128s (SLAAC): never fits
      *parse_prefix("2001:db8:88::100/120"),  // 256 /128s, slots 4096..4351
      *parse_prefix("2001:db8:99::/120")};    // no room left
  std::vector<std::string> skipped;
  DirectLayout d = DirectLayout::plan(pools, 256, 4096 + 256, &skipped);
  EXPECT_EQ(skipped, (std::vector<std::string>{"2001:db8:100::/48", "2001:db8:77::/64",
                                               "2001:db8:99::/120"}));
  ASSERT_EQ(d.v4.size(), 1u);
  EXPECT_EQ(d.v4[0].base, 0u);
  ASSERT_EQ(d.v6.size(), 2u);
  EXPECT_EQ(d.v6[0].unit, 64u);
  EXPECT_EQ(d.v6[0].base, 0u);
  EXPECT_EQ(d.v6[0].size, 4096u);
  EXPECT_EQ(d.v6[0].hi, 0x20010db802000000ull);
  EXPECT_EQ(d.v6[1].unit, 128u);
  EXPECT_EQ(d.v6[1].base, 4096u);
  EXPECT_EQ(d.v6[1].size, 256u);
  EXPECT_EQ(d.v6[1].hi, 0x20010db800880000ull);
  EXPECT_EQ(d.v6[1].lo, 0x100ull);
  EXPECT_EQ(format_prefix(DirectLayout::prefix_of(d.v6[0])), "2001:db8:200::/52");
  EXPECT_EQ(format_prefix(DirectLayout::prefix_of(d.v6[1])), "2001:db8:88::100/120");
  EXPECT_TRUE(d.has(DirectUnit::kV6_64));
  EXPECT_TRUE(d.has(DirectUnit::kV6_128));
  EXPECT_EQ(d.slots(DirectUnit::kV6_64), 4096u);
  EXPECT_EQ(d.slots(DirectUnit::kV6_128), 256u);

  auto a = [](const char* text) { return parse_prefix(std::string(text) + "/128")->addr; };
  // /64 keys are the upper 8 bytes.
  EXPECT_EQ(d.slot_of(DirectUnit::kV6_64, a("2001:db8:200::").data()), 0u);
  EXPECT_EQ(d.slot_of(DirectUnit::kV6_64, a("2001:db8:200:fff::").data()), 4095u);
  EXPECT_FALSE(d.slot_of(DirectUnit::kV6_64, a("2001:db8:201::").data()));
  EXPECT_FALSE(d.slot_of(DirectUnit::kV6_64, a("2001:db8:1ff:ffff::").data()));
  EXPECT_FALSE(d.slot_of(DirectUnit::kV6_64, a("2001:db8:88::").data()));  // a pool of /128s
  // /128 keys: the same /64 and the low bits inside the range.
  EXPECT_EQ(d.slot_of(DirectUnit::kV6_128, a("2001:db8:88::100").data()), 4096u);
  EXPECT_EQ(d.slot_of(DirectUnit::kV6_128, a("2001:db8:88::1ff").data()), 4351u);
  EXPECT_FALSE(d.slot_of(DirectUnit::kV6_128, a("2001:db8:88::ff").data()));
  EXPECT_FALSE(d.slot_of(DirectUnit::kV6_128, a("2001:db8:88::200").data()));
  EXPECT_FALSE(d.slot_of(DirectUnit::kV6_128, a("2001:db8:88:1::100").data()));  // other /64
  EXPECT_FALSE(d.slot_of(DirectUnit::kV6_128, a("2001:db8:200::1").data()));     // a pool of /64s
  // And back: the key a slot stands for, in its unit only.
  uint8_t k[16] = {};
  ASSERT_TRUE(d.key_of(DirectUnit::kV6_64, 7, k));
  EXPECT_EQ(std::memcmp(k, a("2001:db8:200:7::").data(), 8), 0);
  ASSERT_TRUE(d.key_of(DirectUnit::kV6_128, 4096 + 0x42, k));
  EXPECT_EQ(std::memcmp(k, a("2001:db8:88::142").data(), 16), 0);
  EXPECT_FALSE(d.key_of(DirectUnit::kV6_64, 4096, k));
  EXPECT_FALSE(d.key_of(DirectUnit::kV6_128, 7, k));
  EXPECT_FALSE(d.key_of(DirectUnit::kV6_128, 4352, k));
  // Tables round-trip; one family alone; a layout differing in IPv6 only.
  EXPECT_TRUE(DirectLayout::from_tables(d.table(), d.table_v6()) == d);
  EXPECT_TRUE(d.family(4) == DirectLayout::plan(pools, 256, 0, nullptr));
  EXPECT_TRUE(d.family(6).v4.empty());
  EXPECT_FALSE(d.family(6) == DirectLayout::plan(pools, 256, 4096 + 512, nullptr).family(6));
}

// Direct subscribers: ranges laid out in order while they fit, 4096 slots an
// S-VLAN; a key maps to base + (S-VID - first) * 4096 + C-VID and back; a
// key of another port, or outside every laid-out range, none.
TEST(Net, DirectSubLayoutPlacesRangesWhileTheyFit) {
  std::vector<DirectSvlanRange> ranges = {
      {7, 100, 101, "a 100-101"}, {7, 200, 203, "a 200-203"}, {9, 100, 100, "b 100"}};
  std::vector<std::string> skipped;
  DirectSubLayout d = DirectSubLayout::plan(ranges, 3 * 4096, &skipped);
  ASSERT_EQ(d.r.size(), 2u);  // 100-101 and b's 100; 200-203 does not fit after 100-101
  EXPECT_EQ(skipped, std::vector<std::string>{"a 200-203"});
  EXPECT_EQ(d.r[0].base, 0u);
  EXPECT_EQ(d.r[0].n_svids, 2u);
  EXPECT_EQ(d.r[1].base, 8192u);
  EXPECT_EQ(d.r[1].ifindex, 9u);
  EXPECT_EQ(d.slots(), 3u * 4096);
  auto key = [](uint32_t ifx, uint16_t s, uint16_t c) { return xbng_sub_key{ifx, s, c}; };
  EXPECT_EQ(d.slot_of(key(7, 100, 1)), 1u);
  EXPECT_EQ(d.slot_of(key(7, 101, 4094)), 4096u + 4094);
  EXPECT_EQ(d.slot_of(key(9, 100, 5)), 8192u + 5);
  EXPECT_FALSE(d.slot_of(key(7, 102, 1)));  // past the range
  EXPECT_FALSE(d.slot_of(key(7, 99, 1)));   // before it
  EXPECT_FALSE(d.slot_of(key(9, 101, 1)));  // b declares 100 only
  EXPECT_FALSE(d.slot_of(key(8, 100, 1)));  // another port
  EXPECT_FALSE(d.slot_of(key(7, 200, 1)));  // the range that did not fit: the hash
  auto k = d.key_of(4096 + 17);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->ifindex, 7u);
  EXPECT_EQ(k->outer_vid, 101);
  EXPECT_EQ(k->inner_vid, 17);
  EXPECT_EQ(d.key_of(8192 + 3)->ifindex, 9u);
  EXPECT_FALSE(d.key_of(3 * 4096));
  // Every slot round-trips.
  for (uint32_t slot = 0; slot < d.slots(); slot += 97) EXPECT_EQ(d.slot_of(*d.key_of(slot)), slot);
  EXPECT_TRUE(DirectSubLayout::from_table(d.table()) == d);
  skipped.clear();
  EXPECT_TRUE(DirectSubLayout::plan(ranges, 0, &skipped).empty());
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(parse_svlan_range("100-163"), std::make_pair(uint16_t{100}, uint16_t{163}));
  EXPECT_EQ(parse_svlan_range("4094"), std::make_pair(uint16_t{4094}, uint16_t{4094}));
  for (const char* bad : {"", "0", "4095", "10-9", "a", "1-", "-1", "1-2-3", " 1"})
    EXPECT_FALSE(parse_svlan_range(bad)) << bad;
}
