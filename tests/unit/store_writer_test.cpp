// The store's writer against a map double that refuses a chosen write: the
// change is reported, the maps hold exactly what they held before, the index
// is unchanged, the slots taken are given back; a rollback that itself
// fails is counted.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include "store_test_maps.h"

using namespace xbng::agent;
using namespace xbng::test;
using ::testing::HasSubstr;

namespace {

class StoreWriter : public ::testing::Test {
 protected:
  void SetUp() override {
    st_ = std::make_shared<MapState>();
    store_ = make_store(st_, &maps_);
    ASSERT_TRUE(upsert(*store_, {sub(1, "100.64.0.1", "2001:db8::1", {"2001:db8:1:1::/64"}),
                                 sub(2, "100.64.0.2")})
                    .ok());
    before_ = st_->snapshot();
    ASSERT_TRUE(store_->binding(key(1), &spec1_, &learned_));
  }
  // The change below: subscriber 1 moves to other addresses, 3 is created.
  grpc::Status change() {
    return upsert(*store_, {sub(1, "100.64.0.11", "2001:db8::11", {"2001:db8:1:9::/64"}),
                            sub(3, "100.64.0.3")});
  }
  // Every map as before; police slots newly taken may hold the refused
  // values (an array map in the kernel: its entries always exist).
  void expect_maps_as_before() {
    auto now = st_->snapshot();
    for (int m = 0; m < kMapCount; ++m) {
      if (m == static_cast<int>(MapId::kPolice)) {
        for (const auto& [k, v] : before_[m]) EXPECT_EQ(now[m].at(k), v);
        continue;
      }
      EXPECT_EQ(now[m], before_[m]) << map_name(static_cast<MapId>(m));
    }
  }
  void expect_index_as_before() {
    EXPECT_EQ(store_->size(), 2u);
    SubscriberSpec s;
    ASSERT_TRUE(store_->binding(key(1), &s, &learned_));
    EXPECT_TRUE(s.same_provisioning(spec1_));
    EXPECT_FALSE(store_->binding(key(3), &s, &learned_));
    EXPECT_EQ(store_->map_entries(MapId::kRoutesV4), 2u);
    EXPECT_EQ(store_->map_entries(MapId::kRoutesV6_64), 1u);
  }
  std::shared_ptr<MapState> st_;
  FakeMaps* maps_ = nullptr;
  std::unique_ptr<SubscriberStore> store_;
  std::array<std::map<std::string, std::string>, kMapCount> before_;
  SubscriberSpec spec1_;
  std::optional<Mac> learned_;
};

TEST_F(StoreWriter, ChangeApplies) {
  UpsertResult r;
  ASSERT_TRUE(upsert(*store_, {sub(1, "100.64.0.11"), sub(3, "100.64.0.3")}, &r).ok());
  EXPECT_EQ(r.created, 1u);
  EXPECT_EQ(r.updated, 1u);
  auto now = st_->snapshot();
  const uint32_t old_a = *parse_ipv4("100.64.0.1"), new_a = *parse_ipv4("100.64.0.11");
  auto& v4 = now[static_cast<int>(MapId::kRoutesV4)];
  EXPECT_FALSE(v4.contains(std::string(reinterpret_cast<const char*>(&old_a), 4)));
  EXPECT_TRUE(v4.contains(std::string(reinterpret_cast<const char*>(&new_a), 4)));
  EXPECT_EQ(now[static_cast<int>(MapId::kSubscribers)].size(), 3u);
  EXPECT_EQ(store_->rollback_failures(), 0u);
}

TEST_F(StoreWriter, RefusedRouteWriteRollsBackEverything) {
  maps_->fault[static_cast<int>(MapId::kRoutesV6_64)].batch_after = 0;
  grpc::Status st = change();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("writing map"));
  expect_maps_as_before();
  expect_index_as_before();
  EXPECT_EQ(store_->rollback_failures(), 0u);
  // The slot taken for subscriber 3 was given back: the same change now
  // applies, and 3 takes the lowest free slot.
  ASSERT_TRUE(change().ok());
  EXPECT_EQ(store_->size(), 3u);
}

TEST_F(StoreWriter, RefusedRouteWriteHalfwayRollsBack) {
  // The IPv4 host map takes one of its two entries, then refuses.
  maps_->fault[static_cast<int>(MapId::kRoutesV4)].batch_after = 1;
  EXPECT_FALSE(change().ok());
  expect_maps_as_before();
  expect_index_as_before();
}

TEST_F(StoreWriter, RefusedSubscriberWriteRollsBack) {
  maps_->fault[static_cast<int>(MapId::kSubscribers)].batch_after = 1;  // 1 written, 3 refused
  grpc::Status st = change();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.error_message(), HasSubstr("writing map subscribers (entry 1)"));
  expect_maps_as_before();
  expect_index_as_before();
}

TEST_F(StoreWriter, RefusedPoliceWriteChangesNothing) {
  maps_->fault[static_cast<int>(MapId::kPolice)].batch_after = 0;
  EXPECT_FALSE(change().ok());
  EXPECT_EQ(st_->snapshot(), before_);
  expect_index_as_before();
}

TEST_F(StoreWriter, FailedRollbackIsCounted) {
  maps_->fault[static_cast<int>(MapId::kRoutesV6_64)].batch_after = 0;
  // The IPv4 routes (written before the /64 map) cannot be restored.
  maps_->fault[static_cast<int>(MapId::kRoutesV4)].singles = true;
  EXPECT_FALSE(change().ok());
  EXPECT_EQ(store_->rollback_failures(), 2u);  // 100.64.0.11 added, 100.64.0.3 added
  expect_index_as_before();
}

// An update writes each value over the one it replaces in one pass
// (MapOps::swap_many): the fast path's counters (subscriber entry, route,
// police slot) and a learned MAC are carried over, and a refused write restores exactly what was
// there.
TEST_F(StoreWriter, UpdateKeepsCountersAndMacAndARefusalRestoresThem) {
  const SubKey k1 = key(1);
  const std::string skey(reinterpret_cast<const char*>(&k1), sizeof k1);
  const uint32_t a = *parse_ipv4("100.64.0.1");
  const std::string rkey(reinterpret_cast<const char*>(&a), 4);
  auto& subs = st_->m[static_cast<int>(MapId::kSubscribers)];
  auto& v4 = st_->m[static_cast<int>(MapId::kRoutesV4)];
  {  // What the fast path leaves: counters, a learned MAC.
    struct xbng_subscriber sv;
    std::memcpy(&sv, subs.at(skey).data(), sizeof sv);
    sv.up_packets = 11, sv.up_bytes = 22;
    sv.flags |= XBNG_SUB_F_MAC_VALID;
    const uint8_t mac[6] = {2, 0, 0, 0, 0, 0x42};
    std::memcpy(sv.mac, mac, 6);
    subs.at(skey).assign(reinterpret_cast<const char*>(&sv), sizeof sv);
    struct xbng_route rv;
    std::memcpy(&rv, v4.at(rkey).data(), sizeof rv);
    rv.down_packets = 33, rv.down_bytes = 44;
    v4.at(rkey).assign(reinterpret_cast<const char*>(&rv), sizeof rv);
    auto& pol = st_->m[static_cast<int>(MapId::kPolice)];
    const std::string pkey(reinterpret_cast<const char*>(&sv.slot), 4);
    struct xbng_police pv;
    std::memcpy(&pv, pol.at(pkey).data(), sizeof pv);
    pv.down_policed_packets = 55;
    pol.at(pkey).assign(reinterpret_cast<const char*>(&pv), sizeof pv);
  }
  before_ = st_->snapshot();
  xbng::v1::Subscriber priced = sub(1, "100.64.0.1", "2001:db8::1", {"2001:db8:1:1::/64"});
  priced.mutable_policy()->set_down_rate_bps(50000000);
  priced.mutable_policy()->set_down_burst_bytes(625000);
  maps_->fault[static_cast<int>(MapId::kRoutesV6_64)].batch_after = 0;
  EXPECT_FALSE(upsert(*store_, {priced}).ok());
  expect_maps_as_before();
  ASSERT_TRUE(upsert(*store_, {priced}).ok());
  struct xbng_subscriber sv;
  std::memcpy(&sv, subs.at(skey).data(), sizeof sv);
  EXPECT_EQ(sv.up_packets, 11u);
  EXPECT_EQ(sv.up_bytes, 22u);
  EXPECT_TRUE(sv.flags & XBNG_SUB_F_MAC_VALID);
  EXPECT_EQ(sv.mac[5], 0x42);
  struct xbng_route rv;
  std::memcpy(&rv, v4.at(rkey).data(), sizeof rv);
  EXPECT_EQ(rv.down_packets, 33u);
  EXPECT_EQ(rv.down_bytes, 44u);
  EXPECT_TRUE(rv.flags & XBNG_ROUTE_F_POLICED);
  EXPECT_TRUE(rv.flags & XBNG_ROUTE_F_MAC_VALID);
  EXPECT_EQ(rv.mac[5], 0x42);
  struct xbng_police pv;
  const std::string pkey(reinterpret_cast<const char*>(&sv.slot), 4);
  std::memcpy(&pv, st_->m[static_cast<int>(MapId::kPolice)].at(pkey).data(), sizeof pv);
  EXPECT_EQ(pv.down_policed_packets, 55u);
  EXPECT_EQ(pv.down_rate_bps, 50000000u);
}

// A batch large enough for two writer threads: a refusal on one thread's
// map rolls back the other's too.
TEST(StoreWriterParallel, RefusedWriteRollsBackBothThreads) {
  auto st = std::make_shared<MapState>(8192);
  FakeMaps* maps = nullptr;
  auto store = make_store(st, &maps);
  const size_t n = SubscriberStore::kParallelApply + 10;
  std::vector<xbng::v1::Subscriber> subs;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = 0x64400000u + 16 + static_cast<uint32_t>(i);  // 100.64.0.16 + i
    subs.push_back(
        sub(static_cast<uint32_t>(1 + i % 4000),
            fmt::format("{}.{}.{}.{}", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255),
            fmt::format("2001:db8:1000::{:x}", 16 + i)));
    subs.back().set_outer_vlan(static_cast<uint32_t>(100 + i / 4000));
  }
  maps->fault[static_cast<int>(MapId::kRoutesV6)].batch_after = 1000;  // the second thread's
  EXPECT_FALSE(upsert(*store, subs).ok());
  auto now = st->snapshot();
  for (int m = 0; m < kMapCount; ++m) {
    if (m != static_cast<int>(MapId::kPolice)) {
      EXPECT_TRUE(now[m].empty()) << map_name(static_cast<MapId>(m));
    }
  }
  EXPECT_EQ(store->size(), 0u);
  EXPECT_EQ(store->rollback_failures(), 0u);
  ASSERT_TRUE(upsert(*store, subs).ok());
  EXPECT_EQ(st->snapshot()[static_cast<int>(MapId::kRoutesV6)].size(), n);
}

}  // namespace

namespace {

// A stream batch the kernel refuses is rolled back whole, then retried
// entry by entry: each entry is applied or reported on its own.
TEST_F(StoreWriter, RefusedStreamBatchIsRetriedEntryByEntry) {
  maps_->fault[static_cast<int>(MapId::kRoutesV4)].batch_after = 1;  // refuses once
  StreamOutcome r = stream(*store_, {sub(1, "100.64.0.11", "2001:db8::11", {"2001:db8:1:9::/64"}),
                                     sub(3, "100.64.0.3")});
  EXPECT_EQ(r.applied, 2u);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(store_->size(), 3u);
  EXPECT_EQ(store_->rollback_failures(), 0u);
  SubscriberSpec s;
  ASSERT_TRUE(store_->binding(key(3), &s, &learned_));
  EXPECT_EQ(s.ipv4, *parse_ipv4("100.64.0.3"));
}

}  // namespace

// Prepaid downstream credit: the first three routes of a policed subscriber
// carry XBNG_ROUTE_F_CREDIT; an unchanged plan leaves the routes (and the
// credit the fast path holds on them) alone; a new plan rewrites them with
// no credit, so none drawn under the old plan is spent under the new one.
TEST(StoreWriterCredit, FirstThreeRoutesAndNewPlanClearsCredit) {
  auto st = std::make_shared<MapState>();
  auto store = make_store(st);
  auto policed = [](uint64_t rate) {
    xbng::v1::Subscriber s =
        sub(5, "100.64.0.5", "2001:db8::5", {"2001:db8:1:5::/64", "198.51.100.16/28"});
    s.mutable_policy()->set_down_rate_bps(rate);
    s.mutable_policy()->set_down_burst_bytes(1000000);
    return s;
  };
  auto routes = [&] {
    std::vector<std::pair<int, struct xbng_route>> out;
    auto snap = st->snapshot();
    for (MapId m : {MapId::kRoutesV4, MapId::kRoutesV6, MapId::kRoutesV6_64, MapId::kPrefixesV4,
                    MapId::kPrefixesV6})
      for (const auto& [k, v] : snap[static_cast<int>(m)]) {
        struct xbng_route r;
        EXPECT_EQ(v.size(), sizeof r);
        std::memcpy(&r, v.data(), sizeof r);
        out.emplace_back(static_cast<int>(m), r);
      }
    return out;
  };
  ASSERT_TRUE(upsert(*store, {policed(10000000)}).ok());
  auto r = routes();
  ASSERT_EQ(r.size(), 4u);
  int with_credit = 0;
  for (const auto& [m, v] : r) {
    EXPECT_TRUE(v.flags & XBNG_ROUTE_F_POLICED);
    if (v.flags & XBNG_ROUTE_F_CREDIT) ++with_credit;
    EXPECT_EQ(v.credit, 0u);
  }
  EXPECT_EQ(with_credit, XBNG_CREDIT_ROUTES);
  // The host /32 holds credit (as the fast path leaves it).
  {
    auto& v4 = st->m[static_cast<int>(MapId::kRoutesV4)];
    ASSERT_EQ(v4.size(), 1u);
    struct xbng_route rv;
    std::memcpy(&rv, v4.begin()->second.data(), sizeof rv);
    EXPECT_TRUE(rv.flags & XBNG_ROUTE_F_CREDIT);
    rv.credit = 777;
    v4.begin()->second.assign(reinterpret_cast<const char*>(&rv), sizeof rv);
  }
  auto credit_v4 = [&] {
    struct xbng_route rv;
    std::memcpy(&rv, st->m[static_cast<int>(MapId::kRoutesV4)].begin()->second.data(), sizeof rv);
    return rv.credit;
  };
  ASSERT_TRUE(upsert(*store, {policed(10000000)}).ok());
  EXPECT_EQ(credit_v4(), 777u) << "same plan: the route is not rewritten";
  ASSERT_TRUE(upsert(*store, {policed(20000000)}).ok());
  EXPECT_EQ(credit_v4(), 0u) << "new plan: the route starts without credit";
  // Unpoliced: no flag at all.
  xbng::v1::Subscriber plain =
      sub(5, "100.64.0.5", "2001:db8::5", {"2001:db8:1:5::/64", "198.51.100.16/28"});
  ASSERT_TRUE(upsert(*store, {plain}).ok());
  for (const auto& [m, v] : routes())
    EXPECT_FALSE(v.flags & (XBNG_ROUTE_F_CREDIT | XBNG_ROUTE_F_POLICED));
}

// bindings_many() gives what binding() gives each key, the learned MAC of a
// subscriber provisioned without one included, and marks keys not
// provisioned.
TEST_F(StoreWriter, BindingsManyReadsWhatBindingReads) {
  const std::vector<SubKey> keys = {key(2), key(9), key(1)};
  for (const SubKey& k : {key(1), key(2)}) {  // the fast path learned a MAC for one of them
    struct xbng_subscriber sv;
    ASSERT_EQ(maps_->lookup(MapId::kSubscribers, &k, &sv), 0);
    if (sv.flags & XBNG_SUB_F_MAC_VALID) continue;
    const uint8_t mac[6] = {0x02, 0, 0, 0, 0x0b, static_cast<uint8_t>(k.inner_vid)};
    std::memcpy(sv.mac, mac, 6);
    sv.flags |= XBNG_SUB_F_MAC_VALID;
    ASSERT_EQ(maps_->update(MapId::kSubscribers, &k, &sv, BPF_ANY), 0);
    break;
  }
  std::vector<SubscriberSpec> specs;
  std::vector<std::optional<Mac>> learned;
  std::vector<uint8_t> found;
  store_->bindings_many(keys, &specs, &learned, &found);
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 0, 1}));
  int with_learned = 0;
  for (size_t i : {0u, 2u}) {
    SubscriberSpec one;
    std::optional<Mac> l;
    ASSERT_TRUE(store_->binding(keys[i], &one, &l));
    EXPECT_TRUE(specs[i].same_provisioning(one)) << i;
    EXPECT_EQ(learned[i], l) << i;
    with_learned += l.has_value();
  }
  EXPECT_GE(with_learned, 1);
  EXPECT_FALSE(learned[1]);
}

// get_many() gives what get() gives each key, counters included (read per
// map in chunks), and marks keys not provisioned.
TEST_F(StoreWriter, GetManyReadsWhatGetReads) {
  struct xbng_subscriber sv;
  ASSERT_EQ(maps_->lookup(MapId::kSubscribers, &spec1_.key, &sv), 0);
  sv.up_bytes = 1234;
  sv.up_packets = 12;
  ASSERT_EQ(maps_->update(MapId::kSubscribers, &spec1_.key, &sv, BPF_ANY), 0);
  uint64_t n = 0;
  for (MapId m : {MapId::kRoutesV4, MapId::kRoutesV6, MapId::kRoutesV6_64})
    for (auto& [k, v] : st_->m[static_cast<int>(m)]) {
      struct xbng_route r;
      std::memcpy(&r, v.data(), sizeof r);
      r.down_bytes = 1000 * ++n;
      r.down_packets = n;
      std::memcpy(v.data(), &r, sizeof r);
    }
  ASSERT_GE(n, 4u);
  const std::vector<SubKey> keys = {key(2), key(9), key(1)};
  std::vector<SubscriberView> views;
  std::vector<uint8_t> found;
  store_->get_many(keys, &views, &found);
  ASSERT_EQ(views.size(), 3u);
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 0, 1}));
  for (size_t i : {0u, 2u}) {
    SubscriberView one;
    ASSERT_TRUE(store_->get(keys[i], &one).ok());
    EXPECT_TRUE(views[i].spec.same_provisioning(one.spec)) << i;
    EXPECT_TRUE(views[i].has_counters);
    EXPECT_EQ(views[i].counters.up_bytes, one.counters.up_bytes) << i;
    EXPECT_EQ(views[i].counters.up_packets, one.counters.up_packets) << i;
    EXPECT_EQ(views[i].counters.down_bytes, one.counters.down_bytes) << i;
    EXPECT_EQ(views[i].counters.down_packets, one.counters.down_packets) << i;
    EXPECT_EQ(views[i].learned_mac, one.learned_mac) << i;
  }
  EXPECT_EQ(views[2].counters.up_bytes, 1234u);
  EXPECT_GT(views[2].counters.down_bytes, 0u) << "subscriber 1's three routes summed";
  EXPECT_GT(views[0].counters.down_bytes, 0u);
}
