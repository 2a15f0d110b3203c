// The store's claims index alone: exact ownership per route map, the owner
// replaced and released, entry counts, and the ordered indexes that find a
// claim nested inside a prefix.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "store/claims.h"

using namespace xbng::agent;

namespace {

RouteKey v4(const char* a) { return RouteKey::host_v4(*parse_ipv4(a)); }
RouteKey v6(const char* a) { return RouteKey::host_v6(parse_ipv6(a)->data()); }
RouteKey pfx(const char* p) { return RouteKey::prefix(*parse_prefix(p)); }
auto anyone = [](uint32_t) { return true; };

// The store's records, as the host tables read them: record r holds the
// addresses it owns.
struct Records {
  std::vector<SubscriberSpec> recs = std::vector<SubscriberSpec>(16);
  void v4(uint32_t r, const char* a) {
    recs[r].has_ipv4 = true;
    recs[r].ipv4 = *parse_ipv4(a);
  }
  void v6(uint32_t r, const char* a) {
    recs[r].has_ipv6 = true;
    recs[r].ipv6 = *parse_ipv6(a);
  }
};

TEST(StoreClaims, OwnershipPerMap) {
  Records r;
  r.v4(1, "100.64.0.1");
  r.v6(1, "2001:db8::1");
  ClaimsIndex ix(&r.recs);
  ix.set_owner(v4("100.64.0.1"), 1);
  ix.set_owner(v6("2001:db8::1"), 1);
  ix.set_owner(pfx("2001:db8:1:2::/64"), 2);
  ix.set_owner(pfx("2001:db8:100::/48"), 2);
  ix.set_owner(pfx("198.51.100.0/24"), 3);
  EXPECT_EQ(ix.owner_of(v4("100.64.0.1")), 1);
  EXPECT_EQ(ix.owner_of(v4("100.64.0.2")), -1);
  EXPECT_EQ(ix.owner_of(v6("2001:db8::1")), 1);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:1:2::/64")), 2);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:100::/48")), 2);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:100::/56")), -1);
  EXPECT_EQ(ix.owner_of(pfx("198.51.100.0/24")), 3);
  EXPECT_EQ(ix.entries(MapId::kRoutesV4), 1u);
  EXPECT_EQ(ix.entries(MapId::kRoutesV6), 1u);
  EXPECT_EQ(ix.entries(MapId::kRoutesV6_64), 1u);
  EXPECT_EQ(ix.entries(MapId::kPrefixesV6), 1u);
  EXPECT_EQ(ix.entries(MapId::kPrefixesV4), 1u);
  EXPECT_EQ(ix.entries(MapId::kSubscribers), 0u);  // not a route map
}

TEST(StoreClaims, EraseOnlyByItsOwner) {
  Records r;
  ClaimsIndex ix(&r.recs);
  ix.set_owner(pfx("198.51.100.0/24"), 3);
  ix.erase_owner(pfx("198.51.100.0/24"), 4);  // not the owner: kept
  EXPECT_EQ(ix.owner_of(pfx("198.51.100.0/24")), 3);
  EXPECT_TRUE(ix.has_prefix_len(0, 24));
  ix.erase_owner(pfx("198.51.100.0/24"), 3);
  EXPECT_EQ(ix.owner_of(pfx("198.51.100.0/24")), -1);
  EXPECT_EQ(ix.entries(MapId::kPrefixesV4), 0u);
  EXPECT_FALSE(ix.has_prefix_len(0, 24));
  EXPECT_FALSE(ix.first_inside(span_of(*parse_prefix("198.51.0.0/16")), anyone));
}

TEST(StoreClaims, ReplacedOwnerLeavesTheOrderedIndex) {
  Records r;
  ClaimsIndex ix(&r.recs);
  ix.set_owner(pfx("198.51.100.0/24"), 1);
  ix.set_owner(pfx("198.51.100.0/24"), 2);  // moved to record 2
  EXPECT_EQ(ix.owner_of(pfx("198.51.100.0/24")), 2);
  EXPECT_EQ(ix.entries(MapId::kPrefixesV4), 1u);
  auto in = ix.first_inside(span_of(*parse_prefix("198.51.0.0/16")), anyone);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->rec, 2u);
  // Record 1 is gone from the ordered index too: only record 2 is foreign.
  EXPECT_FALSE(
      ix.first_inside(span_of(*parse_prefix("198.51.0.0/16")), [](uint32_t r) { return r == 1; }));
}

TEST(StoreClaims, NestedPrefixesAndHosts) {
  Records r;
  r.v4(6, "203.0.113.9");
  r.v6(7, "2001:db8:7::1");
  ClaimsIndex ix(&r.recs);
  ix.set_owner(pfx("198.51.100.0/28"), 5);
  ix.set_owner(v4("203.0.113.9"), 6);
  ix.set_owner(v6("2001:db8:7::1"), 7);
  // A longer prefix inside.
  auto in = ix.first_inside(span_of(*parse_prefix("198.51.100.0/24")), anyone);
  ASSERT_TRUE(in);
  EXPECT_FALSE(in->host);
  EXPECT_EQ(in->rec, 5u);
  EXPECT_EQ(format_prefix(in->prefix), "198.51.100.0/28");
  // The same prefix is not "inside" (the exact check is the owner's).
  EXPECT_FALSE(ix.first_inside(span_of(*parse_prefix("198.51.100.0/28")), anyone));
  // Hosts inside a prefix, IPv4 and IPv6.
  in = ix.first_inside(span_of(*parse_prefix("203.0.113.0/24")), anyone);
  ASSERT_TRUE(in);
  EXPECT_TRUE(in->host);
  EXPECT_EQ(in->rec, 6u);
  in = ix.first_inside(span_of(*parse_prefix("2001:db8:7::/48")), anyone);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->rec, 7u);
  // Disjoint ranges find nothing; claims of the caller itself are skipped.
  EXPECT_FALSE(ix.first_inside(span_of(*parse_prefix("203.0.114.0/24")), anyone));
  EXPECT_FALSE(ix.first_inside(span_of(*parse_prefix("2001:db8:8::/48")), anyone));
  EXPECT_FALSE(
      ix.first_inside(span_of(*parse_prefix("203.0.113.0/24")), [](uint32_t r) { return r != 6; }));
}

// Hosts move between records and are released only by their owner. The
// /128 table holds record numbers and finds an address through the record:
// a record that changes its address (after releasing the old one) is found
// by the new one only.
TEST(StoreClaims, HostsByRecordNumber) {
  Records r;
  r.v4(2, "100.64.0.9");
  r.v4(3, "100.64.0.9");
  r.v6(2, "2001:db8::9");
  r.v6(3, "2001:db8::9");
  ClaimsIndex ix(&r.recs);
  ix.reserve(1000);
  ix.set_owner(v4("100.64.0.9"), 2);
  ix.set_owner(v6("2001:db8::9"), 2);
  EXPECT_EQ(ix.owner_of(v4("100.64.0.9")), 2);
  EXPECT_EQ(ix.owner_of(v6("2001:db8::9")), 2);
  EXPECT_EQ(ix.owner_of(v4("100.64.0.10")), -1);
  EXPECT_EQ(ix.owner_of(v6("2001:db8::10")), -1);
  ix.set_owner(v4("100.64.0.9"), 3);  // moved to record 3
  ix.set_owner(v6("2001:db8::9"), 3);
  EXPECT_EQ(ix.owner_of(v4("100.64.0.9")), 3);
  EXPECT_EQ(ix.owner_of(v6("2001:db8::9")), 3);
  EXPECT_EQ(ix.entries(MapId::kRoutesV4), 1u);
  EXPECT_EQ(ix.entries(MapId::kRoutesV6), 1u);
  ix.erase_owner(v4("100.64.0.9"), 2);  // not the owner any more: kept
  EXPECT_EQ(ix.owner_of(v4("100.64.0.9")), 3);
  auto in = ix.first_inside(span_of(*parse_prefix("2001:db8::/48")), anyone);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->rec, 3u);  // record 2 left the ordered index
  // Record 3 releases its addresses, takes new ones.
  ix.erase_owner(v4("100.64.0.9"), 3);
  ix.erase_owner(v6("2001:db8::9"), 3);
  r.v4(3, "100.64.0.77");
  r.v6(3, "2001:db8::77");
  ix.set_owner(v4("100.64.0.77"), 3);
  ix.set_owner(v6("2001:db8::77"), 3);
  EXPECT_EQ(ix.owner_of(v4("100.64.0.9")), -1);
  EXPECT_EQ(ix.owner_of(v6("2001:db8::9")), -1);
  EXPECT_EQ(ix.owner_of(v4("100.64.0.77")), 3);
  EXPECT_EQ(ix.owner_of(v6("2001:db8::77")), 3);
  // Many owners at once (the table grows; each record is found by its address).
  std::vector<SubscriberSpec> many(5000);
  ClaimsIndex big(&many);
  for (uint32_t i = 0; i < many.size(); ++i) {
    many[i].ipv4 = htonl(0x64400000u + i);
    many[i].ipv6[15] = static_cast<uint8_t>(i);
    many[i].ipv6[14] = static_cast<uint8_t>(i >> 8);
    big.set_owner(RouteKey::host_v4(many[i].ipv4), i);
    big.set_owner(RouteKey::host_v6(many[i].ipv6.data()), i);
  }
  for (uint32_t i = 0; i < many.size(); ++i) {
    ASSERT_EQ(big.owner_of(RouteKey::host_v4(many[i].ipv4)), i);
    ASSERT_EQ(big.owner_of(RouteKey::host_v6(many[i].ipv6.data())), i);
  }
  EXPECT_EQ(big.entries(MapId::kRoutesV4), many.size());
  EXPECT_EQ(big.entries(MapId::kRoutesV6), many.size());
}

// The IPv4 hosts and every prefix have no hash table: their owner is found
// in the ordered index, whose entries of one start differ by length and
// record. Prefixes of one start and different lengths are different claims
// (different owners, released one by one); a /64 and a /48 at the same
// address are counted in their own maps; neighbours are not mistaken for
// the claim looked up.
TEST(StoreClaims, OwnersFoundInTheOrderedIndex) {
  Records r;
  ClaimsIndex ix(&r.recs);
  ix.set_owner(pfx("2001:db8:5::/48"), 1);
  ix.set_owner(pfx("2001:db8:5::/56"), 2);
  ix.set_owner(pfx("2001:db8:5::/64"), 3);
  ix.set_owner(pfx("2001:db8::/40"), 4);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8::/40")), 4);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/48")), 1);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/56")), 2);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/64")), 3);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/52")), -1);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5:1::/64")), -1);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:4:ffff::/64")), -1);
  EXPECT_EQ(ix.entries(MapId::kRoutesV6_64), 1u);
  EXPECT_EQ(ix.entries(MapId::kPrefixesV6), 3u);
  // Released one by one, by their owner only.
  ix.erase_owner(pfx("2001:db8:5::/56"), 1);  // record 1 owns the /48, not the /56
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/56")), 2);
  ix.erase_owner(pfx("2001:db8:5::/56"), 2);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/56")), -1);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/48")), 1);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/64")), 3);
  EXPECT_FALSE(ix.has_prefix_len(1, 56));
  EXPECT_EQ(ix.entries(MapId::kPrefixesV6), 2u);
  // A /64 moves to another record: one entry, found under the new owner.
  ix.set_owner(pfx("2001:db8:5::/64"), 9);
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/64")), 9);
  EXPECT_EQ(ix.entries(MapId::kRoutesV6_64), 1u);
  ix.erase_owner(pfx("2001:db8:5::/64"), 3);  // its previous owner: kept
  EXPECT_EQ(ix.owner_of(pfx("2001:db8:5::/64")), 9);
  ix.erase_owner(pfx("2001:db8:5::/64"), 9);
  EXPECT_EQ(ix.entries(MapId::kRoutesV6_64), 0u);
  EXPECT_FALSE(ix.has_prefix_len(1, 64));
  // IPv4 prefixes and hosts side by side: a host is not a prefix of its address.
  ix.set_owner(pfx("198.51.100.0/24"), 5);
  ix.set_owner(pfx("198.51.100.0/25"), 6);
  ix.set_owner(v4("198.51.100.0"), 7);
  ix.set_owner(v4("198.51.100.2"), 8);
  EXPECT_EQ(ix.owner_of(pfx("198.51.100.0/24")), 5);
  EXPECT_EQ(ix.owner_of(pfx("198.51.100.0/25")), 6);
  EXPECT_EQ(ix.owner_of(pfx("198.51.100.0/26")), -1);
  EXPECT_EQ(ix.owner_of(v4("198.51.100.0")), 7);
  EXPECT_EQ(ix.owner_of(v4("198.51.100.1")), -1);
  EXPECT_EQ(ix.owner_of(v4("198.51.100.2")), 8);
  EXPECT_EQ(ix.owner_of(v4("198.51.100.3")), -1);
  EXPECT_EQ(ix.entries(MapId::kPrefixesV4), 2u);
  EXPECT_EQ(ix.entries(MapId::kRoutesV4), 2u);
  // A host that moves leaves one entry (the nested check sees the new owner only).
  ix.set_owner(v4("198.51.100.2"), 3);
  EXPECT_EQ(ix.owner_of(v4("198.51.100.2")), 3);
  EXPECT_EQ(ix.entries(MapId::kRoutesV4), 2u);
  EXPECT_FALSE(ix.first_inside(span_of(*parse_prefix("198.51.100.0/30")),
                               [](uint32_t rec) { return rec == 8; }));
  // The extremes of the address space.
  ix.set_owner(v4("255.255.255.255"), 10);
  ix.set_owner(v4("0.0.0.0"), 11);
  EXPECT_EQ(ix.owner_of(v4("255.255.255.255")), 10);
  EXPECT_EQ(ix.owner_of(v4("0.0.0.0")), 11);
  EXPECT_EQ(ix.owner_of(v4("255.255.255.254")), -1);
  // Many claims (records up to 2^24 - 1, the largest the tag holds).
  ClaimsIndex big(&r.recs);
  const uint32_t kTop = (1u << 24) - 1;
  for (uint32_t i = 0; i < 5000; ++i) {
    Prefix p = *parse_prefix("2001:db8:2000::/64");
    p.addr[6] = static_cast<uint8_t>(i >> 8);
    p.addr[7] = static_cast<uint8_t>(i);
    big.set_owner(RouteKey::prefix(p), kTop - i);
    big.set_owner(RouteKey::host_v4(htonl(0x64400000u + 2 * i)), kTop - i);
  }
  for (uint32_t i = 0; i < 5000; ++i) {
    Prefix p = *parse_prefix("2001:db8:2000::/64");
    p.addr[6] = static_cast<uint8_t>(i >> 8);
    p.addr[7] = static_cast<uint8_t>(i);
    ASSERT_EQ(big.owner_of(RouteKey::prefix(p)), kTop - i);
    ASSERT_EQ(big.owner_of(RouteKey::host_v4(htonl(0x64400000u + 2 * i))), kTop - i);
    ASSERT_EQ(big.owner_of(RouteKey::host_v4(htonl(0x64400000u + 2 * i + 1))), -1);
  }
  EXPECT_EQ(big.entries(MapId::kRoutesV6_64), 5000u);
  EXPECT_EQ(big.entries(MapId::kRoutesV4), 5000u);
}

TEST(StoreClaims, ClaimsOfASpecInWriteOrder) {
  SubscriberSpec s;
  s.has_ipv4 = true;
  s.ipv4 = *parse_ipv4("100.64.0.1");
  s.has_ipv6 = true;
  s.ipv6 = *parse_ipv6("2001:db8::1");
  s.prefixes = {*parse_prefix("2001:db8:1:2::/64"), *parse_prefix("198.51.100.0/24")};
  std::vector<RouteKey> cl;
  ClaimsIndex::claims_of(s, &cl);
  ASSERT_EQ(cl.size(), 4u);
  EXPECT_EQ(cl[0].map, MapId::kRoutesV4);
  EXPECT_EQ(cl[1].map, MapId::kRoutesV6);
  EXPECT_EQ(cl[2].map, MapId::kRoutesV6_64);
  EXPECT_EQ(cl[3].map, MapId::kPrefixesV4);
  // The key codec round trip.
  for (const auto& c : cl) EXPECT_EQ(RouteKey::from_raw(c.map, c.b.data()), c);
  EXPECT_EQ(RouteKey::prefix(cl[2].as_prefix()), cl[2]);
  EXPECT_EQ(RouteKey::prefix(cl[3].as_prefix()), cl[3]);
  EXPECT_EQ(format_prefix(cl[1].as_prefix()), "2001:db8::1/128");
  EXPECT_EQ(cl[0].describe().first, std::string("ipv4"));
  EXPECT_EQ(cl[0].describe().second, "100.64.0.1");
  EXPECT_EQ(cl[3].describe().second, "198.51.100.0/24");
}

}  // namespace
