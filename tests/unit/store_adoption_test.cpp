// Adoption: the value codec round trip (what the writer encodes, adoption
// decodes to the same provisioning), and a store rebuilt from the maps
// another store wrote knows every subscriber as it was provisioned.
#include <gmock/gmock.h>

#include "store/codec.h"
#include "store_test_maps.h"

using namespace xbng::agent;
using namespace xbng::test;
using ::testing::HasSubstr;

namespace {

SubscriberSpec full_spec() {
  SubscriberSpec s;
  s.key = {10, 100, 7};
  s.has_mac = true;
  s.mac = {2, 0, 0, 0, 0, 7};
  s.has_ipv4 = true;
  s.ipv4 = *parse_ipv4("100.64.0.7");
  s.has_ipv6 = true;
  s.ipv6 = *parse_ipv6("2001:db8::7");
  s.has_policy = true;
  s.policy = {10000000, 64000, 50000000, 128000};
  s.mac_policy = XBNG_MAC_POLICY_FOLLOW;
  return s;
}

TEST(StoreCodec, SubscriberRoundTrip) {
  const SubscriberSpec s = full_spec();
  const PolicySpec pol = s.policy;
  const struct xbng_subscriber v = encode_subscriber(s, 42, pol);
  const struct xbng_police pv = encode_police(pol, nullptr);
  EXPECT_EQ(v.slot, 42u);
  EXPECT_EQ(decode_policy(v, pv), pol);
  const SubscriberSpec d = decode_subscriber(s.key, v, &pv);
  EXPECT_TRUE(d.same_provisioning(s));
  EXPECT_TRUE(d.key == s.key);
}

TEST(StoreCodec, LearningSubscriberRoundTrip) {
  SubscriberSpec s;
  s.key = {10, 100, 8};
  s.has_ipv4 = true;
  s.ipv4 = *parse_ipv4("100.64.0.8");
  s.prefixes = {*parse_prefix("2001:db8:8::/48")};
  struct xbng_subscriber v = encode_subscriber(s, 1, {});
  EXPECT_TRUE(v.flags & XBNG_SUB_F_LEARN_MAC);
  EXPECT_TRUE(v.flags & XBNG_SUB_F_V6_PREFIX);
  // The fast path learns a MAC: still not part of the provisioning.
  v.flags |= XBNG_SUB_F_MAC_VALID;
  v.mac[0] = 2;
  const SubscriberSpec d = decode_subscriber(s.key, v, nullptr);
  EXPECT_FALSE(d.has_mac);
  EXPECT_FALSE(d.has_policy);
  SubscriberSpec no_prefixes = s;
  no_prefixes.prefixes.clear();  // prefixes are the routes', not the entry's
  EXPECT_TRUE(d.same_provisioning(no_prefixes));
}

TEST(StoreCodec, PoliceKeepsCountersAndUnchangedBucket) {
  const PolicySpec pol{10000000, 64000, 50000000, 128000};
  struct xbng_police old = encode_police(pol, nullptr);
  old.down.tat_ns = 12345;
  old.up_policed_packets = 9;
  struct xbng_police same = encode_police(pol, &old);
  EXPECT_EQ(same.down.tat_ns, 12345u);
  EXPECT_EQ(same.up_policed_packets, 9u);
  PolicySpec faster = pol;
  faster.down_rate *= 2;
  struct xbng_police changed = encode_police(faster, &old);
  EXPECT_EQ(changed.down.tat_ns, 0u);  // a full bucket
  EXPECT_EQ(changed.up_policed_packets, 9u);
}

TEST(StoreCodec, Route) {
  const Mac mac{2, 0, 0, 0, 0, 9};
  struct xbng_route r = encode_route({10, 100, 9}, 5, &mac, true);
  EXPECT_EQ(r.slot, 5u);
  EXPECT_EQ(r.flags, XBNG_ROUTE_F_MAC_VALID | XBNG_ROUTE_F_POLICED);
  EXPECT_EQ(encode_route({10, 100, 9}, 5, nullptr, false).flags, 0);
}

TEST(StoreAdoption, RebuildFindsWhatWasWritten) {
  auto st = std::make_shared<MapState>();
  auto a = make_store(st);
  auto s1 = sub(1, "100.64.0.1", "2001:db8::1", {"2001:db8:1:1::/64", "2001:db8:2::/48"});
  s1.set_mac("02:00:00:00:00:01");
  s1.mutable_policy()->set_up_rate_bps(10000000);
  s1.mutable_policy()->set_up_burst_bytes(64000);
  s1.mutable_policy()->set_down_rate_bps(20000000);
  s1.mutable_policy()->set_down_burst_bytes(128000);
  auto s2 = sub(2, "100.64.0.2", "", {"198.51.100.0/28"});
  s2.set_mac_policy(xbng::v1::MAC_POLICY_FOLLOW);
  ASSERT_TRUE(upsert(*a, {s1, s2, sub(3, "", "2001:db8::3")}).ok());

  auto b = make_store(st);
  std::string summary;
  EXPECT_EQ(b->rebuild(&summary), 3u);
  EXPECT_EQ(summary, "3 subscribers and 7 routes adopted from the pinned maps");
  for (uint16_t i = 1; i <= 3; ++i) {
    SubscriberSpec sa, sb;
    std::optional<Mac> la, lb;
    ASSERT_TRUE(a->binding(key(i), &sa, &la));
    ASSERT_TRUE(b->binding(key(i), &sb, &lb));
    EXPECT_TRUE(sa.same_provisioning(sb)) << i;
  }
  for (MapId m : kRouteMaps) EXPECT_EQ(a->map_entries(m), b->map_entries(m)) << map_name(m);
  // The adopted index is whole: the same request is unchanged (s2, without
  // MAC under "follow", is a request to learn again: an update).
  UpsertResult r;
  ASSERT_TRUE(upsert(*b, {s1, s2}, &r).ok());
  EXPECT_EQ(r.unchanged, 1u);
  EXPECT_EQ(r.updated, 1u);
  // And it owns the addresses: another subscriber cannot take them.
  grpc::Status taken = upsert(*b, {sub(4, "100.64.9.4", "", {"198.51.100.8/29"})});
  EXPECT_THAT(taken.error_message(), HasSubstr("owned by subscriber a0/100/2"));
}

TEST(StoreAdoption, OrphanRoutesRemovedMissingHostRouteReinstalled) {
  auto st = std::make_shared<MapState>();
  auto a = make_store(st);
  ASSERT_TRUE(upsert(*a, {sub(1, "100.64.0.1", "2001:db8::1")}).ok());
  // An orphan (its subscriber is gone) and a lost host route.
  const uint32_t orphan = *parse_ipv4("100.64.0.99");
  struct xbng_route r {};
  r.sub = key(9);
  st->m[static_cast<int>(MapId::kRoutesV4)]
       [std::string(reinterpret_cast<const char*>(&orphan), 4)] =
      std::string(reinterpret_cast<const char*>(&r), sizeof r);
  st->m[static_cast<int>(MapId::kRoutesV6)].clear();

  auto b = make_store(st);
  std::string summary;
  EXPECT_EQ(b->rebuild(&summary), 1u);
  EXPECT_THAT(summary, HasSubstr("1 orphan routes removed"));
  EXPECT_THAT(summary, HasSubstr("1 missing host routes reinstalled"));
  EXPECT_EQ(st->m[static_cast<int>(MapId::kRoutesV4)].size(), 1u);
  EXPECT_EQ(st->m[static_cast<int>(MapId::kRoutesV6)].size(), 1u);
  EXPECT_EQ(b->rollback_failures(), 0u);
}

}  // namespace
