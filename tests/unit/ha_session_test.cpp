// HA session replication (agent/ha/session_state.h, agent/ha/replica.h):
// the session value's encoding, a standby applying sessions through the
// store's validated upsert with their origin (and their RADIUS data into
// the session table), deletes and the full read's pruning, and the
// replica's writer and reader order (sessions before leases and MACs).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "api/convert.h"
#include "etcd_double.h"
#include "fleet/fleet.h"
#include "fleet/kv.h"
#include "ha/replica.h"
#include "ha/session_state.h"
#include "radius/session_table.h"
#include "store_test_maps.h"

namespace xbng::test {
namespace {

using namespace std::chrono_literals;
using agent::kOriginApi;
using agent::kOriginRadius;
using agent::kOriginRelay;
using agent::ReplicatedSession;
using agent::SessionReplication;
using agent::SubKey;
using agent::SubscriberSpec;
using agent::operator==;

SubKey skey(uint16_t outer, uint16_t inner) {
  SubKey k{};
  k.ifindex = 10;
  k.outer_vid = outer;
  k.inner_vid = inner;
  return k;
}

SubscriberSpec spec(uint16_t inner, const std::string& ipv4, uint8_t origin,
                    std::vector<std::string> v6_prefixes = {}) {
  v1::Subscriber m = sub(inner, ipv4, "", std::move(v6_prefixes));
  SubscriberSpec s;
  EXPECT_TRUE(agent::validate_subscriber(m, test_ports(), "s", &s).ok());
  s.origin = origin;
  return s;
}

radius::SessionData session(const std::string& sid) {
  radius::SessionData d;
  d.session_id = sid;
  d.user_name = "a0:100:" + sid;
  d.classes = {std::string("\x01\x00\xff", 3), "plain"};
  d.start_unix = 1'700'000'000;
  d.session_timeout = 3600;
  d.interim_interval = 60;
  d.filter_id = "gold";
  d.acct_started = true;
  d.acct_base = {1000, 10, 2000, 20};
  return d;
}

void put(agent::SubscriberStore& st, SubscriberSpec s) {
  std::vector<SubscriberSpec> one{std::move(s)};
  agent::UpsertResult r;
  ASSERT_TRUE(st.upsert(std::move(one), &r).ok());
}

uint8_t origin_of(agent::SubscriberStore& st, const SubKey& k) {
  agent::SubscriberView v;
  if (!st.get(k, &v).ok()) return 0xff;
  return v.spec.origin;
}

TEST(HaSessionValue, RoundTrip) {
  ReplicatedSession s;
  s.spec = spec(7, "100.64.0.7", kOriginRadius, {"2001:db8:2000::/56"});
  s.spec.has_policy = true;
  s.spec.policy = {2'000'000, 250'000, 10'000'000, 1'250'000};
  s.radius = session("sid-1");
  s.member = "m0";
  const std::string v = agent::encode_session_value(s, test_ports());
  // Compact: no output-only field (the effective policy is the store's).
  EXPECT_LT(v.size(), 600u) << v;
  const auto j = nlohmann::json::parse(v);
  EXPECT_EQ(j["v"], 1);
  EXPECT_EQ(j["origin"], "radius");
  EXPECT_EQ(j["subscriber"]["port"], "a0");
  EXPECT_FALSE(j["subscriber"].contains("origin")) << v;
  EXPECT_FALSE(j["subscriber"].contains("effectivePolicy")) << v;
  ReplicatedSession back;
  ASSERT_FALSE(agent::decode_session_value(v, "a0", 100, 7, test_ports(), &back)) << v;
  EXPECT_TRUE(back.spec.same_provisioning(s.spec));
  EXPECT_EQ(back.spec.origin, kOriginRadius);
  ASSERT_TRUE(back.radius);
  EXPECT_EQ(*back.radius, *s.radius);
  EXPECT_EQ(back.member, "m0");

  ReplicatedSession relay;
  relay.spec = spec(8, "100.64.0.8", kOriginRelay);
  relay.member = "m1";
  ReplicatedSession rb;
  ASSERT_FALSE(agent::decode_session_value(agent::encode_session_value(relay, test_ports()), "a0",
                                           100, 8, test_ports(), &rb));
  EXPECT_EQ(rb.spec.origin, kOriginRelay);
  EXPECT_TRUE(rb.spec.same_provisioning(relay.spec));
  EXPECT_FALSE(rb.radius);
}

TEST(HaSessionValue, RefusesWhatIsNoSession) {
  ReplicatedSession s;
  s.spec = spec(7, "100.64.0.7", kOriginRadius);
  s.radius = session("sid-1");
  s.member = "m0";
  const auto good = nlohmann::json::parse(agent::encode_session_value(s, test_ports()));
  auto refused = [&](const std::function<void(nlohmann::json&)>& change, uint32_t inner = 7) {
    nlohmann::json j = good;
    change(j);
    ReplicatedSession out;
    return agent::decode_session_value(j.dump(), "a0", 100, inner, test_ports(), &out).value_or("");
  };
  EXPECT_EQ(refused([](auto&) {}), "");
  EXPECT_NE(refused([](auto& j) { j["v"] = 2; }).find("version 2"), std::string::npos);
  EXPECT_NE(refused([](auto& j) { j.erase("v"); }), "");
  EXPECT_NE(refused([](auto& j) { j["origin"] = "etcd"; }), "");
  EXPECT_NE(refused([](auto& j) { j.erase("radius"); }), "");
  EXPECT_NE(refused([](auto& j) { j["radius"]["classes"] = {"0g"}; }), "");
  EXPECT_NE(refused([](auto& j) { j["radius"].erase("session_id"); }), "");
  EXPECT_NE(refused([](auto& j) { j["origin"] = "relay"; }), "");  // with RADIUS data
  EXPECT_NE(refused([](auto& j) { j["subscriber"]["ipv4"] = "127.0.0.1"; }), "");
  EXPECT_NE(refused([](auto& j) { j["subscriber"]["bogus"] = 1; }), "");
  EXPECT_NE(refused([](auto&) {}, 8).find("key says"), std::string::npos);  // another key
  ReplicatedSession out;
  EXPECT_TRUE(agent::decode_session_value("[1]", "a0", 100, 7, test_ports(), &out));
  EXPECT_TRUE(agent::decode_session_value("{", "a0", 100, 7, test_ports(), &out));
  // A port this member does not have.
  EXPECT_TRUE(agent::decode_session_value(good.dump(), "a9", 100, 7, test_ports(), &out));
}

// The active's values applied by a standby: the subscribers with their
// origin, the RADIUS data in the standby's session table (acct_base: what
// the active reported), nothing over a subscriber of another origin, deletes
// and pruning of sessions only.
TEST(HaSessionApply, StandbyTakesTheActivesSessions) {
  auto a_store = make_store(std::make_shared<MapState>(64));
  auto b_store = make_store(std::make_shared<MapState>(64));
  radius::SessionTable a_tab(""), b_tab("");
  // The session table follows the store (as the agent's change hook does).
  b_store->set_change_hook([&](const SubKey& k, const SubscriberSpec* now, bool) {
    b_tab.on_subscriber_change(k, now);
  });
  SessionReplication a(a_store.get(), &a_tab, "m0"), b(b_store.get(), &b_tab, "m1");
  const SubKey kr = skey(100, 1), kl = skey(100, 2), ke = skey(100, 3), kx = skey(100, 4);
  radius::SessionData d = session("sid-r");
  d.acct_base = {};
  ASSERT_TRUE(a_tab.record(kr, d));
  put(*a_store, spec(1, "100.64.0.1", kOriginRadius));
  put(*a_store, spec(2, "100.64.0.2", kOriginRelay));
  put(*a_store, spec(3, "100.64.0.3", kOriginApi));
  EXPECT_FALSE(a.value_of(ke)) << "an API subscriber is no session";
  EXPECT_FALSE(a.value_of(kx)) << "nothing at the key";
  auto vr = a.value_of(kr), vl = a.value_of(kl);
  ASSERT_TRUE(vr && vl);
  std::string why;
  EXPECT_EQ(b.apply(kr, "a0", *vr, false, &why), 1) << why;
  EXPECT_EQ(b.apply(kl, "a0", *vl, false, &why), 1) << why;
  EXPECT_EQ(origin_of(*b_store, kr), kOriginRadius);
  EXPECT_EQ(origin_of(*b_store, kl), kOriginRelay);
  ASSERT_TRUE(b_tab.get(kr));
  EXPECT_EQ(*b_tab.get(kr), d);
  EXPECT_EQ(b.apply(kr, "a0", *vr, false, &why), 0) << "the same value again changes nothing";
  // An interim reported on the active: the value carries it as acct_base.
  a.reported(kr, {5000, 50, 7000, 70});
  vr = a.value_of(kr);
  EXPECT_EQ(b.apply(kr, "a0", *vr, false, &why), 1) << why;
  EXPECT_EQ(b_tab.get(kr)->acct_base, (radius::AcctCounts{5000, 50, 7000, 70}));
  EXPECT_EQ(a_tab.get(kr)->acct_base, radius::AcctCounts{}) << "the active's own table unchanged";
  // A new plan on the active reaches the standby's subscriber.
  SubscriberSpec gold = spec(1, "100.64.0.1", kOriginRadius);
  gold.has_policy = true;
  gold.policy = {2'000'000, 250'000, 10'000'000, 1'250'000};
  put(*a_store, gold);
  EXPECT_EQ(b.apply(kr, "a0", *a.value_of(kr), false, &why), 1) << why;
  agent::SubscriberView v;
  ASSERT_TRUE(b_store->get(kr, &v).ok());
  EXPECT_TRUE(v.spec.has_policy);
  EXPECT_EQ(v.spec.policy, gold.policy);

  // Never over a subscriber another source provisioned on the standby.
  put(*b_store, spec(5, "100.64.0.5", kOriginApi));
  ReplicatedSession other;
  other.spec = spec(5, "100.64.0.55", kOriginRelay);
  other.member = "m0";
  EXPECT_EQ(
      b.apply(skey(100, 5), "a0", agent::encode_session_value(other, test_ports()), false, &why),
      -1);
  EXPECT_EQ(origin_of(*b_store, skey(100, 5)), kOriginApi);
  // A store refusal (the address another subscriber owns) leaves no
  // session record behind.
  ReplicatedSession clash;
  clash.spec = spec(6, "100.64.0.5", kOriginRadius);
  clash.radius = session("sid-clash");
  clash.member = "m0";
  EXPECT_EQ(
      b.apply(skey(100, 6), "a0", agent::encode_session_value(clash, test_ports()), false, &why),
      -1);
  EXPECT_FALSE(b_tab.get(skey(100, 6)));

  // The active itself: skips its own writes and what it has, takes what a
  // former active wrote for a key it does not have.
  EXPECT_EQ(a.apply(kr, "a0", *vr, true, &why), 0);
  EXPECT_EQ(b.apply(kr, "a0", *vr, true, &why), 0);
  radius::SessionTable c_tab("");
  auto c_store = make_store(std::make_shared<MapState>(64));
  SessionReplication c(c_store.get(), &c_tab, "m2");
  EXPECT_EQ(c.apply(kr, "a0", *vr, true, &why), 1) << why;
  EXPECT_EQ(origin_of(*c_store, kr), kOriginRadius);

  // A deleted key: the session goes, an API subscriber does not.
  EXPECT_TRUE(b.remove(kl));
  EXPECT_EQ(origin_of(*b_store, kl), 0xff);
  EXPECT_FALSE(b.remove(skey(100, 5)));
  EXPECT_EQ(origin_of(*b_store, skey(100, 5)), kOriginApi);
  // A full read: sessions without a key go, the rest stays.
  EXPECT_EQ(b.apply(kl, "a0", *vl, false, &why), 1);
  EXPECT_EQ(b.prune([&](const SubKey& k) { return k == kr; }), 1u);
  EXPECT_EQ(origin_of(*b_store, kr), kOriginRadius);
  EXPECT_EQ(origin_of(*b_store, kl), 0xff);
  EXPECT_EQ(origin_of(*b_store, skey(100, 5)), kOriginApi);
  EXPECT_EQ(b.prune([](const SubKey&) { return false; }), 1u);
  EXPECT_FALSE(b_tab.get(kr)) << "the session data goes with its subscriber";
  EXPECT_EQ(b_store->size(), 1u);
}

// ---- the replica against an etcd double ------------------------------------

using StateEtcd = EtcdDouble;
using StateKv = EtcdDoubleKv;

const std::string kPrefix = "/xbng/v1/ha/g/state/";

// The active writes a session before the lease of its key even when the
// lease changed first, reads the session's value at the flush, deletes the
// key once the subscriber is no session, and never writes a key for a
// subscriber that was never one.
TEST(HaReplicaSessions, WrittenBeforeLeasesAndDeletedWhenGone) {
  StateEtcd e;
  std::mutex mu;
  std::map<uint64_t, std::string> values;  // what session_value says, by rank
  agent::HaReplica::Hooks h;
  h.active = [] { return true; };
  h.ready = [] { return false; };  // no reading: this member writes only
  h.session_value = [&](const SubKey& k) -> std::optional<std::string> {
    std::lock_guard l(mu);
    auto it = values.find(agent::key_rank(k));
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
  h.apply_session = [](const SubKey&, std::string_view, std::string_view, bool, std::string*) {
    return 0;
  };
  agent::HaReplica r("g", "m0", std::make_unique<StateKv>(&e), test_ports(), h);
  auto wait_txns = [&](size_t n) {
    std::unique_lock l(e.mu);
    return e.cv.wait_for(l, 5s, [&] { return e.txns.size() >= n; });
  };
  auto ops = [&] {
    std::lock_guard l(e.mu);
    size_t n = 0;
    for (const auto& t : e.txns) n += t.size();
    return n;
  };
  agent::Lease lease;
  lease.bound = true;
  lease.address = "100.64.0.1";
  lease.bound_unix = 1000;
  lease.expires_unix = 1600;
  for (uint16_t i = 1; i <= 20; ++i) {
    {
      std::lock_guard l(mu);
      values[agent::key_rank(skey(100, i))] = "v1";
    }
    r.lease_changed(skey(100, i), agent::LeaseFamily::kV4, &lease);
    r.session_changed(skey(100, i), true);
  }
  r.session_changed(skey(100, 99), false);  // never a session: nothing
  for (int i = 0; i < 100 && ops() < 40; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(ops(), 40u);
  {
    std::lock_guard l(e.mu);
    for (const auto& t : e.txns) {
      bool lease_seen = false;
      for (const auto& op : t) {
        const bool is_session = op.key.rfind(kPrefix + "session/a0/100/", 0) == 0;
        EXPECT_TRUE(is_session || op.key.rfind(kPrefix + "lease4/a0/100/", 0) == 0) << op.key;
        EXPECT_FALSE(is_session && lease_seen) << "a session after a lease: " << op.key;
        lease_seen |= !is_session;
        if (is_session) {
          EXPECT_EQ(op.value, "v1");
        }
      }
    }
  }
  const SubKey k = skey(100, 1);
  const size_t base = [&] {
    std::lock_guard l(e.mu);
    return e.txns.size();
  }();
  // Changed twice before a flush: written once, as it is at the flush.
  {
    std::lock_guard l(mu);
    values[agent::key_rank(k)] = "v2";
  }
  r.session_changed(k, true);
  {
    std::lock_guard l(mu);
    values[agent::key_rank(k)] = "v3";
  }
  r.session_changed(k, true);
  ASSERT_TRUE(wait_txns(base + 1));
  {
    std::lock_guard l(e.mu);
    ASSERT_EQ(e.txns[base].size(), 1u);
    EXPECT_EQ(e.txns[base][0].value, "v3");
  }
  // No longer a session (deleted, or taken over by another source).
  {
    std::lock_guard l(mu);
    values.erase(agent::key_rank(k));
  }
  r.session_changed(k, false);
  ASSERT_TRUE(wait_txns(base + 2));
  {
    std::lock_guard l(e.mu);
    ASSERT_EQ(e.txns[base + 1].size(), 1u);
    EXPECT_EQ(e.txns[base + 1][0].type, agent::fleet::TxnOp::Type::kDelete);
    EXPECT_EQ(e.txns[base + 1][0].key, kPrefix + "session/a0/100/1");
  }
  r.session_changed(k, false);  // its key is gone already: nothing more
  std::this_thread::sleep_for(500ms);
  r.stop();
  std::lock_guard l(e.mu);
  EXPECT_EQ(e.txns.size(), base + 2);
}

// A standby's full read applies the sessions before the other keys (which
// sort before them), then deletes the sessions etcd has no key for.
TEST(HaReplicaSessions, FullReadAppliesSessionsFirstThenPrunes) {
  StateEtcd e;
  e.set(kPrefix + "mac/a0/100/1", R"({"mac":"02:00:00:00:00:01","member":"m0"})");
  e.set(kPrefix + "session/a0/100/1", "s1");
  e.set(kPrefix + "session/a9/100/2", "a port this member does not have");
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> order;
  bool pruned = false, present_1 = false, present_3 = true;
  agent::HaReplica::Hooks h;
  h.active = [] { return false; };
  h.ready = [] { return true; };
  h.apply_mac = [&](const SubKey&, const agent::Mac&) {
    std::lock_guard l(mu);
    order.push_back("mac");
    return true;
  };
  h.session_value = [](const SubKey&) { return std::optional<std::string>(); };
  h.apply_session = [&](const SubKey& k, std::string_view port, std::string_view v, bool active,
                        std::string*) {
    std::lock_guard l(mu);
    EXPECT_EQ(port, "a0");
    EXPECT_EQ(agent::key_rank(k), agent::key_rank(skey(100, 1)));
    EXPECT_EQ(v, "s1");
    EXPECT_FALSE(active);
    order.push_back("session");
    return 1;
  };
  h.remove_session = [](const SubKey&) { return true; };
  h.prune_sessions = [&](const std::function<bool(const SubKey&)>& present) {
    std::lock_guard l(mu);
    present_1 = present(skey(100, 1));
    present_3 = present(skey(100, 3));
    pruned = true;
    cv.notify_all();
    return size_t{0};
  };
  agent::HaReplica r("g", "m1", std::make_unique<StateKv>(&e), test_ports(), h);
  {
    std::unique_lock l(mu);
    ASSERT_TRUE(cv.wait_for(l, 5s, [&] { return pruned; }));
    EXPECT_EQ(order, (std::vector<std::string>{"session", "mac"}));
    EXPECT_TRUE(present_1);
    EXPECT_FALSE(present_3);
  }
  r.stop();
  EXPECT_EQ(r.stats().full_reads, 1u);
  EXPECT_EQ(r.stats().applied, 2u);
}

// Watched session keys: a standby applies a put and deletes the session on
// a delete; an active applies the put (its hooks decide) but never a
// delete (its own come back after it may have written the key again).
TEST(HaReplicaSessions, WatchedPutsAndDeletes) {
  for (const bool active : {false, true}) {
    StateEtcd e;
    agent::fleet::WatchEvent put, del;
    put.kv.key = kPrefix + "session/a0/100/1";
    put.kv.value = "s1";
    del.type = agent::fleet::WatchEvent::Type::kDelete;
    del.kv.key = put.kv.key;
    e.events = {put, del};
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> seen;
    agent::HaReplica::Hooks h;
    h.active = [active] { return active; };
    h.ready = [] { return true; };
    h.session_value = [](const SubKey&) { return std::optional<std::string>(); };
    h.apply_session = [&](const SubKey&, std::string_view, std::string_view v, bool a,
                          std::string*) {
      std::lock_guard l(mu);
      EXPECT_EQ(a, active);
      seen.push_back("put " + std::string(v));
      cv.notify_all();
      return 1;
    };
    h.remove_session = [&](const SubKey& k) {
      std::lock_guard l(mu);
      EXPECT_EQ(agent::key_rank(k), agent::key_rank(skey(100, 1)));
      seen.push_back("delete");
      cv.notify_all();
      return true;
    };
    h.prune_sessions = [](const std::function<bool(const SubKey&)>&) { return size_t{0}; };
    agent::HaReplica r("g", "m1", std::make_unique<StateKv>(&e), test_ports(), h);
    {
      std::unique_lock l(mu);
      ASSERT_TRUE(cv.wait_for(l, 5s, [&] { return !seen.empty(); }));
    }
    std::this_thread::sleep_for(300ms);  // the delete, when applied, is in by now
    r.stop();
    std::lock_guard l(mu);
    const std::vector<std::string> want =
        active ? std::vector<std::string>{"put s1"} : std::vector<std::string>{"put s1", "delete"};
    EXPECT_EQ(seen, want) << (active ? "active" : "standby");
  }
}

}  // namespace
}  // namespace xbng::test
