// The fleet's full read against an etcd double (fleet/kv.h) and a store on
// maps in memory: every key applied whatever the number of readers, the
// ranges read at the first answer's revision and serializable, refusals
// decided in key order, a read that falls behind compaction read again,
// stale subscribers deleted.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "api/convert.h"
#include "etcd/value_codec.h"
#include "etcd_double.h"
#include "fleet/fleet.h"
#include "store_test_maps.h"

namespace xbng::test {
namespace {

using namespace std::chrono_literals;

// One etcd at revision 100 whose ranges take 1 ms each, so that the
// readers' requests overlap.
struct ReadEtcd : EtcdDouble {
  ReadEtcd() {
    rev = 100;
    range_time = 1ms;
  }
};
using ReadKv = EtcdDoubleKv;

std::string key(uint32_t outer, uint32_t inner) {
  return agent::subscriber_etcd_key("n1", "a0", outer, inner);
}
std::string value(uint32_t outer, uint32_t inner, const std::string& ipv4) {
  return fmt::format(R"({{"port":"a0","outerVlan":{},"innerVlan":{},"ipv4":"{}"}})", outer, inner,
                     ipv4);
}

// kSubs valid subscribers on outer VLANs 1..429 (every range of the read
// has some), one value that is no subscriber, and two keys claiming the
// same address: the first in key order wins.
constexpr uint32_t kSubs = 3000;
void fill(ReadEtcd* e) {
  for (uint32_t i = 0; i < kSubs; ++i)
    e->set(key(1 + i / 7, 1 + i % 7),
           value(1 + i / 7, 1 + i % 7, fmt::format("100.64.{}.{}", i / 250, 1 + i % 250)));
  e->set(key(9, 100), R"({"port":"a0","outerVlan":9,"innerVlan":100,"bogus":1})");
  e->set(key(5, 100), value(5, 100, "100.127.0.1"));
  e->set(key(50, 100), value(50, 100, "100.127.0.1"));
}

agent::FleetOptions options(uint32_t readers) {
  agent::FleetOptions o;
  o.node = "n1";
  o.page_size = 60;  // ranges of up to 77 keys: several pages each, of 60 / readers keys
  o.full_read_readers = readers;
  o.access_ports = {"a0"};
  return o;
}

bool wait_until(const std::function<bool()>& f, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!f()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

class FleetRead : public ::testing::TestWithParam<uint32_t> {};

TEST_P(FleetRead, AppliesEveryKeyAtOneRevision) {
  const uint32_t readers = GetParam();
  ReadEtcd e;
  fill(&e);
  // A Subscriber the store's validation refuses: its reason names its
  // index in the stream of entries (every key in key order but those
  // refused before validation), whichever reader decoded it.
  e.set(key(7, 100), value(7, 100, "300.1.2.3"));
  size_t index = 0;
  for (const auto& [k, v] : e.kv) {
    if (k == key(7, 100)) break;
    if (k != key(9, 100)) ++index;
  }
  auto store = make_store(std::make_shared<MapState>(8192));
  agent::Fleet f(options(readers), store.get(), "boot", std::make_unique<ReadKv>(&e),
                 agent::subscriber_value_codec());
  ASSERT_TRUE(wait_until([&] { return f.state().full_syncs == 1; }, 30s));
  EXPECT_EQ(store->size(), kSubs + 1);
  // The revision of the first answer (the double's 100, plus the node's
  // own puts before the read).
  const int64_t at = f.state().applied_revision;
  EXPECT_GE(at, 100);
  const auto st = nlohmann::json::parse(f.status_json());
  f.stop();
  // Refused: the value that is no subscriber, and the later of the two
  // claims of one address whatever order the readers finished in.
  ASSERT_EQ(st["refused_count"], 3) << st.dump();
  EXPECT_EQ(st["refused"][0]["key"], key(50, 100));
  EXPECT_EQ(st["refused"][1]["key"], key(7, 100));
  EXPECT_EQ(
      st["refused"][1]["reason"].get<std::string>().rfind(fmt::format("entry {}: ", index), 0), 0u)
      << st["refused"][1];
  EXPECT_EQ(st["refused"][2]["key"], key(9, 100));
  EXPECT_EQ(st["full_read"]["readers"], readers);
  EXPECT_EQ(st["full_read"]["keys"], kSubs + 4);
  EXPECT_EQ(st["full_read"]["revision"], at);
  // The first request fixes the revision; every other reads at it,
  // serializable, in pages.
  ASSERT_GT(e.seen.size(), 60u);
  EXPECT_EQ(e.seen[0].revision, 0);
  EXPECT_FALSE(e.seen[0].serializable);
  for (size_t i = 1; i < e.seen.size(); ++i) {
    EXPECT_EQ(e.seen[i].revision, at) << i;
    EXPECT_TRUE(e.seen[i].serializable) << i;
    EXPECT_EQ(e.seen[i].limit, 60 / readers) << i;
  }
  EXPECT_LE(e.max_in_flight, static_cast<int>(readers));
  if (readers > 1) {
    EXPECT_GE(e.max_in_flight, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Readers, FleetRead, ::testing::Values(1u, 2u, 4u));

// A read whose revision is compacted meanwhile is read again from a new
// revision (counted as a compaction, not an outage); keys gone from etcd
// by the next full read are deleted from the store.
TEST(FleetReadAgain, CompactedMidReadThenStaleDeleted) {
  ReadEtcd e;
  fill(&e);
  e.compact_at = 20;
  auto store = make_store(std::make_shared<MapState>(8192));
  {
    agent::Fleet f(options(2), store.get(), "boot", std::make_unique<ReadKv>(&e),
                   agent::subscriber_value_codec());
    ASSERT_TRUE(wait_until([&] { return f.state().full_syncs == 1; }, 30s));
    EXPECT_EQ(f.state().compactions, 1u);
    EXPECT_EQ(f.state().outages, 0u);
    EXPECT_EQ(store->size(), kSubs + 1);
  }
  {
    std::lock_guard l(e.mu);
    e.kv.erase(key(1, 1));
    e.kv.erase(key(429, 4));
    e.rev = 200;
  }
  agent::Fleet f(options(2), store.get(), "boot", std::make_unique<ReadKv>(&e),
                 agent::subscriber_value_codec());
  ASSERT_TRUE(wait_until([&] { return f.state().full_syncs == 1; }, 30s));
  EXPECT_EQ(store->size(), kSubs - 1);
  agent::SubscriberView v;
  agent::SubKey k{};
  k.ifindex = 10;
  k.outer_vid = 1;
  k.inner_vid = 1;
  EXPECT_FALSE(store->get(k, &v).ok());
  k.inner_vid = 2;
  EXPECT_TRUE(store->get(k, &v).ok());
}

// Subscribers the access side created (origin radius, relay) are not the
// reconciler's: a full read keeps them although etcd has no key of theirs,
// and so does a watch delete of their key; an API subscriber etcd does not
// have goes, and a delete of an etcd subscriber's key deletes it.
TEST(FleetReadAgain, AccessSideSubscribersAreNotStale) {
  ReadEtcd e;
  e.set(key(1, 1), value(1, 1, "100.64.0.1"));
  e.set(key(1, 2), value(1, 2, "100.64.0.2"));
  auto store = make_store(std::make_shared<MapState>(64));
  auto add = [&](uint16_t inner, const std::string& ip, agent::Origin origin) {
    v1::Subscriber m;
    m.set_port("a0");
    m.set_outer_vlan(7);
    m.set_inner_vlan(inner);
    m.set_ipv4(ip);
    std::vector<agent::SubscriberSpec> specs(1);
    ASSERT_TRUE(agent::validate_subscriber(m, store->ports(), "s", &specs[0]).ok());
    specs[0].origin = origin;
    agent::UpsertResult r;
    ASSERT_TRUE(store->upsert(std::move(specs), &r).ok());
  };
  add(1, "100.64.1.1", agent::kOriginRadius);
  add(2, "100.64.1.2", agent::kOriginRelay);
  add(3, "100.64.1.3", agent::kOriginApi);
  auto has = [&](uint16_t outer, uint16_t inner) {
    agent::SubKey k{};
    k.ifindex = 10;
    k.outer_vid = outer;
    k.inner_vid = inner;
    agent::SubscriberView v;
    return store->get(k, &v).ok();
  };
  // The watch then deletes the RADIUS session's key (etcd never applied
  // it) and an etcd subscriber's.
  for (const auto& k : {key(7, 1), key(1, 2)}) {
    agent::fleet::WatchEvent ev;
    ev.type = agent::fleet::WatchEvent::Type::kDelete;
    ev.kv.key = k;
    ev.kv.mod_revision = 101;
    e.events.push_back(ev);
  }
  agent::Fleet f(options(1), store.get(), "boot", std::make_unique<ReadKv>(&e),
                 agent::subscriber_value_codec());
  ASSERT_TRUE(wait_until([&] { return f.state().full_syncs == 1 && f.state().events == 2; }, 30s));
  f.stop();
  EXPECT_TRUE(has(7, 1)) << "a RADIUS session deleted by the fleet";
  EXPECT_TRUE(has(7, 2)) << "a relay session deleted by the fleet";
  EXPECT_FALSE(has(7, 3)) << "an API subscriber etcd does not have kept";
  EXPECT_TRUE(has(1, 1));
  EXPECT_FALSE(has(1, 2)) << "the etcd subscriber whose key was deleted kept";
  EXPECT_EQ(store->size(), 3u);
}

}  // namespace
}  // namespace xbng::test
