// Sessions from the access side (radius/session.h) with a fake RADIUS
// client whose answers the test gives, on a store over maps in memory.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <memory>
#include <vector>

#include <unistd.h>

#include "bringup/punt/counters.h"
#include "bringup/punt/frame.h"
#include "config/radius_config.h"
#include "radius/session.h"
#include "radius/session_table.h"
#include "api/radius_store.h"
#include "store_test_maps.h"

namespace xbng::test {
namespace {

using agent::agent_reason_value;
using agent::AgentReason;
using radius::AccessRequest;
using radius::AccessResult;
using radius::AccessSessions;
using radius::Outcome;

// Keeps every Access-Request and its completion; the test answers.
class FakeClient final : public radius::Client {
 public:
  struct Call {
    AccessRequest req;
    std::function<void(const AccessResult&)> done;
  };
  void authorize(const AccessRequest& r, std::function<void(const AccessResult&)> done) override {
    calls.push_back({r, std::move(done)});
  }
  void account(const radius::AccountingRequest&, std::function<void(bool)> done) override {
    done(false);
  }
  radius::CounterSnapshot counters() const override { return {}; }
  std::vector<Call> calls;
};

AccessResult accept_ipv4(const std::string& a) {
  AccessResult r;
  r.outcome = Outcome::kAccept;
  r.auth.framed_ip = *agent::parse_ipv4(a);
  r.server = "192.0.2.10:1812";
  return r;
}

AccessResult answer(Outcome o) {
  AccessResult r;
  r.outcome = o;
  return r;
}

// A DHCPv4 DISCOVER as the CPE (or an L2 access node adding option 82)
// sends it, in its QinQ frame.
std::vector<uint8_t> discover(uint16_t inner, uint8_t mac_last,
                              const std::vector<uint8_t>& opt82 = {}) {
  std::vector<uint8_t> p(240, 0);
  p[0] = 1;  // BOOTREQUEST
  p[1] = 1;
  p[2] = 6;
  p[4] = 0x12;  // xid
  const uint8_t mac[6] = {0x02, 0, 0, 0, 0x09, mac_last};
  std::copy(mac, mac + 6, p.begin() + 28);
  p[236] = 0x63, p[237] = 0x82, p[238] = 0x53, p[239] = 0x63;
  p.insert(p.end(), {53, 1, 1});
  if (!opt82.empty()) {
    p.push_back(82);
    p.push_back(static_cast<uint8_t>(opt82.size()));
    p.insert(p.end(), opt82.begin(), opt82.end());
  }
  p.push_back(255);
  agent::punt::L2 l2;
  l2.dst = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  std::copy(mac, mac + 6, l2.src.begin());
  l2.outer_vid = 100;
  l2.inner_vid = inner;
  return agent::punt::build_udp4(l2, 0, 0xffffffffu, 68, 67, p);
}

agent::punt::PuntedFrame punted(const std::vector<uint8_t>& f, uint16_t inner) {
  agent::punt::PuntedFrame pf;
  pf.kind = XBNG_PUNT_KIND_DHCPV4;
  pf.ifindex = 10;
  pf.outer_vid = 100;
  pf.inner_vid = inner;
  pf.frame = f;
  return pf;
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override { make(radius::AccessOptions{}); }
  void make(radius::AccessOptions o) {
    sessions_.reset();
    sessions_ = std::make_unique<AccessSessions>(
        &client_, std::move(o), [](uint32_t ifx) { return ifx == 10 ? "a0" : "?"; },
        [](uint32_t) { return 1500u; }, radius::store_creator(store_.get()),
        [this](const agent::punt::PuntedFrame& f) {
          redispatched_.emplace_back(f.frame.begin(), f.frame.end());
        },
        [this] { return now_ns_; }, [] { return uint64_t{1700000000}; });
  }
  bool provisioned(uint16_t inner, agent::SubscriberSpec* out = nullptr) {
    agent::SubscriberSpec s;
    std::optional<agent::Mac> learned;
    const bool found = store_->binding(key(inner), &s, &learned);
    if (out) *out = s;
    return found;
  }

  std::shared_ptr<MapState> st_ = std::make_shared<MapState>();
  std::unique_ptr<agent::SubscriberStore> store_ = make_store(st_);
  FakeClient client_;
  std::vector<std::vector<uint8_t>> redispatched_;
  uint64_t now_ns_ = 1000000000ull;
  std::unique_ptr<AccessSessions> sessions_;
};

TEST(UserNameTemplate, ExpandsEveryPlaceholder) {
  radius::TemplateVars v;
  v.port = "eth1";
  v.svlan = 100;
  v.cvlan = 200;
  v.mac = {0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee};
  v.circuit_id = "olt1 1/1/1";
  v.remote_id = "cpe-7";
  EXPECT_EQ(radius::expand_template(radius::kDefaultUserNameTemplate, v), "eth1:100:200");
  EXPECT_EQ(radius::expand_template("{mac}@{circuit_id}/{remote_id}", v),
            "02:aa:bb:cc:dd:ee@olt1 1/1/1/cpe-7");
  EXPECT_EQ(radius::expand_template("plain", v), "plain");
  EXPECT_EQ(radius::nas_port_id(v), "eth1:100.200");
}

TEST(UserNameTemplate, RefusesUnknownOrUnclosedPlaceholders) {
  EXPECT_FALSE(agent::check_username_template("{port}:{svlan}:{cvlan}"));
  EXPECT_FALSE(agent::check_username_template("{mac}{circuit_id}{remote_id}"));
  auto e = agent::check_username_template("{port}:{vlan}");
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("{vlan}"), std::string::npos) << *e;
  EXPECT_TRUE(agent::check_username_template("{port"));
  EXPECT_TRUE(agent::check_username_template("port}"));
}

TEST(RelayIds, FromOption82) {
  // Sub-option 1 Agent Circuit ID, 2 Agent Remote ID.
  const auto f = discover(200, 1, {1, 4, 'o', 'l', 't', '1', 2, 3, 'c', 'p', 'e'});
  std::string c, r;
  radius::relay_ids_of(f, &c, &r);
  EXPECT_EQ(c, "olt1");
  EXPECT_EQ(r, "cpe");
  std::string c2, r2;
  radius::relay_ids_of(discover(200, 1), &c2, &r2);
  EXPECT_EQ(c2, "");
  EXPECT_EQ(r2, "");
}

TEST_F(SessionTest, RequestCarriesTheTemplateAndTheCpe) {
  radius::AccessOptions o;
  o.username = "{mac}/{circuit_id}";
  o.password = "pw";
  make(o);
  const auto f = discover(200, 7, {1, 4, 'o', 'l', 't', '1', 2, 3, 'c', 'p', 'e'});
  sessions_->on_unknown(punted(f, 200));
  ASSERT_EQ(client_.calls.size(), 1u);
  const AccessRequest& r = client_.calls[0].req;
  EXPECT_EQ(r.user_name, "02:00:00:00:09:07/olt1");
  EXPECT_EQ(r.password, "pw");
  EXPECT_EQ(r.nas_port_id, "a0:100.200");
  EXPECT_EQ(r.calling_station_id, "02:00:00:00:09:07");
  EXPECT_EQ(r.circuit_id, "olt1");
  EXPECT_EQ(r.remote_id, "cpe");
}

TEST_F(SessionTest, ConcurrentTriggersAreCoalescedAndReplayedAfterTheAccept) {
  const uint64_t coalesced = agent_reason_value(AgentReason::kAUTH_COALESCED);
  const uint64_t accepted = agent_reason_value(AgentReason::kAUTH_ACCEPTED);
  std::vector<std::vector<uint8_t>> frames;
  for (uint8_t i = 0; i < 3; i++) frames.push_back(discover(200, 7));
  frames[1][30] ^= 1;  // three distinct frames (a byte of the IP id)
  frames[2][30] ^= 2;
  for (const auto& f : frames) sessions_->on_unknown(punted(f, 200));
  ASSERT_EQ(client_.calls.size(), 1u) << "one Access-Request per key";
  EXPECT_EQ(client_.calls[0].req.user_name, "a0:100:200");
  EXPECT_EQ(agent_reason_value(AgentReason::kAUTH_COALESCED) - coalesced, 2u);
  EXPECT_FALSE(provisioned(200));
  EXPECT_TRUE(redispatched_.empty());

  client_.calls[0].done(accept_ipv4("100.64.0.9"));
  agent::SubscriberSpec s;
  ASSERT_TRUE(provisioned(200, &s));
  EXPECT_TRUE(s.has_ipv4);
  EXPECT_EQ(agent::format_ipv4(s.ipv4), "100.64.0.9");
  EXPECT_EQ(agent_reason_value(AgentReason::kAUTH_ACCEPTED) - accepted, 1u);
  EXPECT_EQ(redispatched_, frames) << "the frames kept, in order, dispatched again";
  EXPECT_EQ(sessions_->pending(), 0u);
}

TEST_F(SessionTest, KeptFramesAreBounded) {
  radius::AccessOptions o;
  o.frames_per_key = 2;
  make(o);
  const uint64_t full = agent_reason_value(AgentReason::kAUTH_FRAME_QUEUE_FULL);
  const auto f = discover(200, 7);
  for (int i = 0; i < 5; i++) sessions_->on_unknown(punted(f, 200));
  EXPECT_EQ(client_.calls.size(), 1u);
  EXPECT_EQ(agent_reason_value(AgentReason::kAUTH_FRAME_QUEUE_FULL) - full, 3u);
  client_.calls[0].done(accept_ipv4("100.64.0.9"));
  EXPECT_EQ(redispatched_.size(), 2u);
}

TEST_F(SessionTest, RejectHoldsTheKeyBack) {
  radius::AccessOptions o;
  o.reject_hold_s = 10;
  make(o);
  const uint64_t rejected = agent_reason_value(AgentReason::kAUTH_REJECTED);
  const uint64_t held = agent_reason_value(AgentReason::kAUTH_HELD_DROPPED);
  const auto f = discover(200, 7);
  sessions_->on_unknown(punted(f, 200));
  sessions_->on_unknown(punted(f, 200));  // kept, then dropped with the reject
  client_.calls[0].done(answer(Outcome::kReject));
  EXPECT_FALSE(provisioned(200));
  EXPECT_TRUE(redispatched_.empty());
  EXPECT_TRUE(sessions_->held(key(200)));
  EXPECT_EQ(agent_reason_value(AgentReason::kAUTH_REJECTED) - rejected, 1u);
  EXPECT_EQ(agent_reason_value(AgentReason::kAUTH_HELD_DROPPED) - held, 2u);

  // During the hold: dropped and counted, no request.
  now_ns_ += 9'000'000'000ull;
  sessions_->on_unknown(punted(f, 200));
  EXPECT_EQ(client_.calls.size(), 1u);
  EXPECT_EQ(agent_reason_value(AgentReason::kAUTH_HELD_DROPPED) - held, 3u);
  // Another key is not held back.
  sessions_->on_unknown(punted(discover(201, 8), 201));
  EXPECT_EQ(client_.calls.size(), 2u);

  // After it: asked again, and this time accepted.
  now_ns_ += 1'000'000'000ull;
  sessions_->on_unknown(punted(f, 200));
  ASSERT_EQ(client_.calls.size(), 3u);
  client_.calls[2].done(accept_ipv4("100.64.0.9"));
  EXPECT_TRUE(provisioned(200));
  EXPECT_EQ(redispatched_.size(), 1u);
}

TEST_F(SessionTest, NoAnswerIsLikeAReject) {
  const uint64_t timeouts = agent_reason_value(AgentReason::kAUTH_TIMEOUT);
  sessions_->on_unknown(punted(discover(200, 7), 200));
  client_.calls[0].done(answer(Outcome::kTimeout));
  EXPECT_FALSE(provisioned(200));
  EXPECT_TRUE(sessions_->held(key(200)));
  EXPECT_EQ(agent_reason_value(AgentReason::kAUTH_TIMEOUT) - timeouts, 1u);
}

TEST_F(SessionTest, ConflictingAcceptIsAReject) {
  // 100.64.0.5 already belongs to 100/300 (provisioned over the API).
  ASSERT_TRUE(upsert(*store_, {sub(300, "100.64.0.5")}).ok());
  const uint64_t refused = agent_reason_value(AgentReason::kAUTH_ACCEPT_REFUSED);
  const auto before = st_->snapshot();
  sessions_->on_unknown(punted(discover(200, 7), 200));
  client_.calls[0].done(accept_ipv4("100.64.0.5"));
  EXPECT_FALSE(provisioned(200)) << "no address is given out twice";
  EXPECT_EQ(st_->snapshot(), before) << "maps untouched";
  EXPECT_TRUE(sessions_->held(key(200)));
  EXPECT_TRUE(redispatched_.empty());
  EXPECT_EQ(agent_reason_value(AgentReason::kAUTH_ACCEPT_REFUSED) - refused, 1u);
}

TEST_F(SessionTest, ReservedAddressIsAReject) {
  auto r = std::make_shared<agent::ReservedSet>();
  r->add(*agent::parse_prefix("100.64.0.0/24"), "reserved range (security.reserved)");
  store_->set_reserved(r);
  sessions_->on_unknown(punted(discover(200, 7), 200));
  client_.calls[0].done(accept_ipv4("100.64.0.7"));
  EXPECT_FALSE(provisioned(200));
  EXPECT_TRUE(sessions_->held(key(200)));
}

TEST_F(SessionTest, ProvisionedMeanwhileIsLeftAlone) {
  sessions_->on_unknown(punted(discover(200, 7), 200));
  ASSERT_TRUE(upsert(*store_, {sub(200, "100.64.0.20")}).ok());  // over the API, in between
  client_.calls[0].done(accept_ipv4("100.64.0.9"));
  agent::SubscriberSpec s;
  ASSERT_TRUE(provisioned(200, &s));
  EXPECT_EQ(agent::format_ipv4(s.ipv4), "100.64.0.20");
  EXPECT_EQ(redispatched_.size(), 1u) << "served by the API's subscriber";
  EXPECT_FALSE(sessions_->held(key(200)));
}

TEST_F(SessionTest, AcceptAfterDestructionIsIgnored) {
  sessions_->on_unknown(punted(discover(200, 7), 200));
  auto done = client_.calls[0].done;
  sessions_.reset();
  done(accept_ipv4("100.64.0.9"));
  EXPECT_FALSE(provisioned(200));
}

TEST_F(SessionTest, OriginAndSessionDataSurviveARestart) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("xbng-sessions-" + std::to_string(getpid())))
          .string();
  std::filesystem::remove(path);
  radius::SessionTable table(path);
  store_->set_change_hook([&](const agent::SubKey& k, const agent::SubscriberSpec* now, bool) {
    table.on_subscriber_change(k, now);
  });
  sessions_ = std::make_unique<AccessSessions>(
      &client_, radius::AccessOptions{}, [](uint32_t) { return std::string("a0"); },
      [](uint32_t) { return 1500u; }, radius::store_creator(store_.get(), &table),
      [](const agent::punt::PuntedFrame&) {}, [this] { return now_ns_; },
      [] { return uint64_t{1700000000}; });
  sessions_->on_unknown(punted(discover(200, 7), 200));
  AccessResult r = accept_ipv4("100.64.0.9");
  r.auth.classes = {std::string("c\x00\xff", 3)};
  client_.calls[0].done(r);
  agent::SubscriberSpec s;
  ASSERT_TRUE(provisioned(200, &s));
  EXPECT_EQ(s.origin, agent::kOriginRadius);
  // An API subscriber beside it.
  ASSERT_TRUE(upsert(*store_, {sub(300, "100.64.0.30")}).ok());
  ASSERT_TRUE(provisioned(300, &s));
  EXPECT_EQ(s.origin, agent::kOriginApi);

  // A new agent on the same maps and state file: the origins come back with
  // the entries, the session data from the file.
  auto store2 = make_store(st_);
  std::string summary;
  store2->rebuild(&summary);
  agent::SubscriberView v;
  ASSERT_TRUE(store2->get(key(200), &v).ok());
  EXPECT_EQ(v.spec.origin, agent::kOriginRadius);
  ASSERT_TRUE(store2->get(key(300), &v).ok());
  EXPECT_EQ(v.spec.origin, agent::kOriginApi);
  radius::SessionTable table2(path);
  ASSERT_FALSE(table2.load());
  table2.retain([&](const agent::SubKey& k) {
    agent::SubscriberView w;
    return store2->get(k, &w).ok() && w.spec.origin == agent::kOriginRadius;
  });
  auto d = table2.get(key(200));
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, *table.get(key(200)));
  EXPECT_EQ(d->user_name, "a0:100:200");
  EXPECT_EQ(d->classes, r.auth.classes);
  EXPECT_EQ(d->start_unix, 1700000000u);
  EXPECT_FALSE(d->session_id.empty());
  EXPECT_EQ(table2.size(), 1u);

  // Re-provisioned over the API: no longer RADIUS's, its record goes.
  ASSERT_TRUE(upsert(*store_, {sub(200, "100.64.0.9")}).ok());
  EXPECT_FALSE(table.get(key(200)));
  store_->set_change_hook(nullptr);
  std::filesystem::remove(path);
}

TEST(SpecFromAccept, AddressesPrefixesAndPlans) {
  const std::map<std::string, agent::PolicySpec> plans{
      {"gold", {20000000, 250000, 100000000, 1250000}}};
  radius::Authorization a;
  a.framed_ip = *agent::parse_ipv4("100.64.0.9");
  a.framed_ipv6 = *agent::parse_ipv6("2001:db8:1::9");
  a.delegated_v6.push_back(*agent::parse_prefix("2001:db8:2:100::/56"));
  a.framed_v6_prefix.push_back(*agent::parse_prefix("2001:db8:3:1::/64"));
  a.framed_routes.push_back("198.51.100.0/28 0.0.0.0 1");
  a.filter_id = "gold";
  agent::SubscriberSpec s;
  ASSERT_FALSE(radius::spec_from_accept(key(200), a, plans, 1500, &s));
  EXPECT_TRUE(s.has_ipv4 && s.has_ipv6 && s.has_policy);
  EXPECT_EQ(s.prefixes.size(), 3u);
  EXPECT_EQ(s.policy, plans.at("gold"));

  a.filter_id = "platinum";
  auto e = radius::spec_from_accept(key(200), a, plans, 1500, &s);
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("platinum"), std::string::npos);

  a.filter_id.reset();
  a.wispr_up_bps = 10000000;
  a.wispr_down_bps = 50000000;
  ASSERT_FALSE(radius::spec_from_accept(key(200), a, plans, 1500, &s));
  EXPECT_EQ(s.policy.up_rate, 10000000u);
  EXPECT_EQ(s.policy.down_rate, 50000000u);
  EXPECT_GE(s.policy.up_burst, 1500u);

  radius::Authorization empty;
  EXPECT_TRUE(radius::spec_from_accept(key(200), empty, plans, 1500, &s));
  // On a relay port the Accept may give only the plan: the relayed lease
  // gives the addresses.
  empty.filter_id = "gold";
  ASSERT_FALSE(radius::spec_from_accept(key(200), empty, plans, 1500, &s, true));
  EXPECT_FALSE(s.has_ipv4 || s.has_ipv6 || !s.prefixes.empty());
  EXPECT_TRUE(s.has_policy);
  EXPECT_EQ(s.policy, plans.at("gold"));
}

}  // namespace
}  // namespace xbng::test

namespace xbng::test {
namespace {

std::string journal_path(const char* name) {
  const std::string p = (std::filesystem::temp_directory_path() /
                         (std::string("xbng-journal-") + name + "-" + std::to_string(getpid())))
                            .string();
  for (const char* s : {"", ".log", ".damaged", ".log.damaged"}) std::filesystem::remove(p + s);
  return p;
}

agent::SubKey jkey(uint16_t inner) {
  agent::SubKey k{};
  k.ifindex = 3;
  k.outer_vid = 100;
  k.inner_vid = inner;
  return k;
}

radius::SessionData jdata(uint16_t inner) {
  radius::SessionData d;
  d.session_id = "sid-" + std::to_string(inner);
  d.user_name = "u" + std::to_string(inner);
  d.start_unix = 1700000000 + inner;
  d.classes = {std::string("c\0x", 3)};
  return d;
}

}  // namespace

TEST(SessionJournal, ReplaysRecordsUpdatesAndRemovals) {
  const std::string p = journal_path("replay");
  {
    radius::SessionTable t(p);
    ASSERT_FALSE(t.load());
    for (uint16_t i = 1; i <= 5; ++i) ASSERT_TRUE(t.record(jkey(i), jdata(i)));
    ASSERT_TRUE(t.mark_acct_started(jkey(2)));
    ASSERT_TRUE(t.update(jkey(3), [](radius::SessionData* d) { d->idle_timeout = 60; }));
    t.on_subscriber_change(jkey(4), nullptr);
    ASSERT_TRUE(t.flush());
  }
  radius::SessionTable t(p);
  ASSERT_FALSE(t.load());
  EXPECT_EQ(t.size(), 4u);
  EXPECT_TRUE(t.get(jkey(2))->acct_started);
  EXPECT_EQ(t.get(jkey(3))->idle_timeout, 60u);
  EXPECT_FALSE(t.get(jkey(4)));
  EXPECT_EQ(*t.get(jkey(5)), jdata(5));
  EXPECT_EQ(t.find_by_session_id("sid-5").size(), 1u);
}

// The journal's record encoder writes what nlohmann's dump() wrote before
// it, byte for byte, for every field present or absent and for strings
// that need escapes or hold UTF-8; a string that is not UTF-8 is left to
// dump() (which refuses it).
TEST(SessionJournal, RecordJsonIsNlohmannsDump) {
  const std::vector<std::string> strings = {"",
                                            "acc0:100:200",
                                            "q\"uote\\back",
                                            std::string("nul\0ctl\x01\x1f\x7f", 10),
                                            "\b\f\n\r\t",
                                            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                                            "/{}[]:,"};
  for (int n = 0; n < 128; ++n) {
    const std::string& s = strings[n % strings.size()];
    agent::SubKey k{};
    k.ifindex = 1 + n * 977u;
    k.outer_vid = static_cast<uint16_t>(1 + n % 4094);
    k.inner_vid = static_cast<uint16_t>(4094 - n);
    radius::SessionData d;
    d.session_id = "sid-" + std::to_string(n) + s;
    d.user_name = s + std::to_string(n);
    if (n % 3) d.classes = {s, std::string("\x00\xff", 2)};
    d.start_unix = 1700000000ull + n * 1234567ull;
    if (n & 1) d.session_timeout = n * 60;
    if (n & 2) d.idle_timeout = 0;
    if (n & 4) d.interim_interval = 300;
    if (n & 8) d.filter_id = s;
    d.acct_started = n & 16;
    if (n & 32) d.acct_base = {uint64_t{1} << 40, 3, n + 0ull, 0};
    nlohmann::json j = radius::session_data_json(d);
    j["ifindex"] = k.ifindex;
    j["outer_vlan"] = k.outer_vid;
    j["inner_vlan"] = k.inner_vid;
    std::string got = "x";
    ASSERT_TRUE(radius::append_record_json(&got, k, d, false)) << n;
    EXPECT_EQ(got.substr(1), j.dump()) << n;  // appended to what was there
    EXPECT_EQ(got[0], 'x');
    j["op"] = "put";
    got.clear();
    ASSERT_TRUE(radius::append_record_json(&got, k, d, true)) << n;
    EXPECT_EQ(got, j.dump()) << n;
  }
  for (const std::string bad : {"\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                "a\xff"
                                "b"}) {
    radius::SessionData d;
    d.user_name = bad;
    std::string got = "kept";
    EXPECT_FALSE(radius::append_record_json(&got, agent::SubKey{}, d, true));
    EXPECT_EQ(got, "kept");
    EXPECT_THROW(radius::session_data_json(d).dump(), nlohmann::json::exception);
  }
}

TEST(SessionJournal, ConcurrentRecordsShareCommits) {
  const std::string p = journal_path("group");
  radius::SessionTable t(p);
  ASSERT_FALSE(t.load());
  constexpr int kThreads = 8, kEach = 50;
  std::vector<std::thread> th;
  for (int i = 0; i < kThreads; ++i)
    th.emplace_back([&, i] {
      for (int j = 0; j < kEach; ++j) {
        const auto inner = static_cast<uint16_t>(1 + i * kEach + j);
        EXPECT_TRUE(t.record(jkey(inner), jdata(inner)));
      }
    });
  for (auto& x : th) x.join();
  const auto s = t.stats();
  EXPECT_EQ(s.records, uint64_t{kThreads * kEach});
  // Every record waited for its commit; a commit never holds more lines
  // than were staged, and at least one held more than one (8 writers).
  EXPECT_LE(s.commits, s.records);
  radius::SessionTable t2(p);
  ASSERT_FALSE(t2.load());
  EXPECT_EQ(t2.size(), size_t{kThreads * kEach});
}

// A batch of Accepts (store_creator_many): every record in one journal
// commit, every subscriber in one store upsert; a conflicting Accept in the
// batch is refused on its own (its record goes again) and the others are
// created.
TEST_F(SessionTest, ABatchOfAcceptsIsOneJournalWriteAndAConflictStaysAlone) {
  const std::string p = journal_path("accepts");
  radius::SessionTable table(p);
  ASSERT_FALSE(table.load());
  store_->set_change_hook([&](const agent::SubKey& k, const agent::SubscriberSpec* now, bool) {
    table.on_subscriber_change(k, now);
  });
  ASSERT_TRUE(upsert(*store_, {sub(300, "100.64.0.5")}).ok());  // holds 100.64.0.5
  auto create = radius::store_creator_many(store_.get(), &table);
  std::vector<std::pair<agent::SubscriberSpec, radius::SessionData>> batch;
  for (uint16_t i = 1; i <= 20; ++i) {
    agent::SubscriberSpec s;
    s.key = key(static_cast<uint16_t>(200 + i));
    s.has_ipv4 = true;
    s.ipv4 = *agent::parse_ipv4(i == 7 ? "100.64.0.5" : "100.64.1." + std::to_string(i));
    batch.emplace_back(s, jdata(static_cast<uint16_t>(200 + i)));
  }
  auto st = create(batch);
  ASSERT_EQ(st.size(), 20u);
  for (uint16_t i = 1; i <= 20; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(st[i - 1].ok(), i != 7) << st[i - 1];
    EXPECT_EQ(provisioned(static_cast<uint16_t>(200 + i)), i != 7);
    EXPECT_EQ(table.get(key(static_cast<uint16_t>(200 + i))).has_value(), i != 7);
  }
  // The batch's 20 records, then the refused one's removal.
  EXPECT_EQ(table.stats().commits, 2u);

  // Without a conflict: one upsert for the batch, every subscriber RADIUS's.
  batch.clear();
  for (uint16_t i = 1; i <= 5; ++i) {
    agent::SubscriberSpec s;
    s.key = key(static_cast<uint16_t>(400 + i));
    s.has_ipv4 = true;
    s.ipv4 = *agent::parse_ipv4("100.64.2." + std::to_string(i));
    batch.emplace_back(s, jdata(static_cast<uint16_t>(400 + i)));
  }
  st = create(batch);
  for (uint16_t i = 1; i <= 5; ++i) {
    agent::SubscriberSpec s;
    ASSERT_TRUE(provisioned(static_cast<uint16_t>(400 + i), &s));
    EXPECT_EQ(s.origin, agent::kOriginRadius);
  }
  EXPECT_EQ(table.stats().commits, 3u);
  store_->set_change_hook(nullptr);
}

// With workers, the completions queued meanwhile are taken together: every
// Accept of a storm becomes its subscriber and its frames are answered.
TEST_F(SessionTest, WorkersCompleteEveryAcceptOfAStorm) {
  std::atomic<size_t> redispatched{0};
  sessions_ = std::make_unique<AccessSessions>(
      &client_, radius::AccessOptions{}, [](uint32_t) { return std::string("a0"); },
      [](uint32_t) { return 1500u; }, radius::store_creator(store_.get()),
      [&](const agent::punt::PuntedFrame&) { redispatched++; }, [this] { return now_ns_; },
      [] { return uint64_t{1700000000}; });
  sessions_->set_workers(3, radius::store_creator_many(store_.get()));
  constexpr uint16_t kN = 300;
  for (uint16_t i = 1; i <= kN; ++i) sessions_->on_unknown(punted(discover(i, 7), i));
  ASSERT_EQ(client_.calls.size(), size_t{kN});
  for (uint16_t i = 1; i <= kN; ++i)
    client_.calls[i - 1].done(
        accept_ipv4("100.64." + std::to_string(i / 200) + "." + std::to_string(1 + i % 200)));
  for (int t = 0; t < 500 && redispatched < kN; ++t)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(redispatched.load(), size_t{kN});
  for (uint16_t i = 1; i <= kN; ++i) EXPECT_TRUE(provisioned(i)) << i;
  EXPECT_EQ(sessions_->pending(), 0u);
}

TEST(SessionJournal, ABatchIsOneCommit) {
  const std::string p = journal_path("batch");
  {
    radius::SessionTable t(p);
    ASSERT_FALSE(t.load());
    std::vector<std::pair<agent::SubKey, radius::SessionData>> rs;
    for (uint16_t i = 1; i <= 100; ++i) rs.emplace_back(jkey(i), jdata(i));
    const auto ok = t.record_many(rs);
    EXPECT_EQ(ok, std::vector<bool>(100, true));
    EXPECT_EQ(t.stats().commits, 1u) << "the whole batch in one write";
    EXPECT_EQ(t.stats().records, 100u);
    // Starts noted for 50 of them and a key without a record: one more commit.
    std::vector<agent::SubKey> ks;
    for (uint16_t i = 1; i <= 50; ++i) ks.push_back(jkey(i));
    ks.push_back(jkey(500));
    const auto noted = t.mark_acct_started_many(ks);
    EXPECT_EQ(std::count(noted.begin(), noted.end(), true), 50);
    EXPECT_FALSE(noted.back()) << "no record, nothing noted";
    EXPECT_EQ(t.stats().commits, 2u);
    // Noted already: nothing to write.
    t.mark_acct_started_many({jkey(1), jkey(2)});
    EXPECT_EQ(t.stats().commits, 2u);
  }
  radius::SessionTable t(p);
  ASSERT_FALSE(t.load());
  EXPECT_EQ(t.size(), 100u);
  EXPECT_TRUE(t.get(jkey(50))->acct_started);
  EXPECT_FALSE(t.get(jkey(51))->acct_started);
  EXPECT_EQ(t.get(jkey(77))->session_id, "sid-77");
}

TEST(SessionJournal, AFailedBatchLeavesTheTableAsBefore) {
  // Beneath a regular file: no write can succeed.
  const std::string file = journal_path("notadir");
  std::ofstream(file) << "x";
  radius::SessionTable t(file + "/radius-sessions.json");
  std::vector<std::pair<agent::SubKey, radius::SessionData>> rs = {{jkey(1), jdata(1)},
                                                                   {jkey(2), jdata(2)}};
  EXPECT_EQ(t.record_many(rs), std::vector<bool>(2, false));
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(t.find_by_session_id("sid-1").empty());
  std::filesystem::remove(file);
}

TEST(SessionJournal, TornLastRecordIsCutOff) {
  const std::string p = journal_path("torn");
  {
    radius::SessionTable t(p);
    ASSERT_FALSE(t.load());
    ASSERT_TRUE(t.record(jkey(1), jdata(1)));
    ASSERT_TRUE(t.record(jkey(2), jdata(2)));
  }
  const auto full = std::filesystem::file_size(p + ".log");
  std::filesystem::resize_file(p + ".log", full - 7);  // the second line torn
  {
    radius::SessionTable t(p);
    ASSERT_FALSE(t.load());
    EXPECT_EQ(t.size(), 1u);
    EXPECT_TRUE(t.get(jkey(1)));
    // Appending after a torn tail: the tail is cut first.
    ASSERT_TRUE(t.record(jkey(3), jdata(3)));
  }
  radius::SessionTable t(p);
  ASSERT_FALSE(t.load());
  EXPECT_EQ(t.size(), 2u);
  EXPECT_TRUE(t.get(jkey(3)));
}

TEST(SessionJournal, CompactsIntoASnapshot) {
  const std::string p = journal_path("compact");
  {
    radius::SessionTable t(p);
    t.set_compact_min_bytes(4096);
    ASSERT_FALSE(t.load());
    for (int round = 0; round < 40; ++round)
      for (uint16_t i = 1; i <= 4; ++i) {
        auto d = jdata(i);
        d.idle_timeout = static_cast<uint32_t>(round + 1);
        ASSERT_TRUE(t.record(jkey(i), d));
      }
    const auto s = t.stats();
    EXPECT_GE(s.compactions, 1u);
    EXPECT_LE(s.log_bytes, 4096u + 1024u);
    EXPECT_TRUE(std::filesystem::exists(p));
  }
  // The snapshot, written entry by entry, is the bytes of its document's
  // dump, every session in it.
  std::ifstream f(p);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc.dump(), text);
  EXPECT_EQ(doc.at("sessions").size(), 4u);
  radius::SessionTable t(p);
  ASSERT_FALSE(t.load());
  EXPECT_EQ(t.size(), 4u);
  for (uint16_t i = 1; i <= 4; ++i) EXPECT_EQ(t.get(jkey(i))->idle_timeout, 40u);
}

TEST(SessionJournal, AJournalOfAnOlderGenerationIsIgnored) {
  const std::string p = journal_path("gen");
  {
    std::ofstream(p) << R"({"generation":2,"sessions":[]})";
    std::ofstream(p + ".log")
        << R"({"generation":1})"
        << "\n"
        << R"({"op":"put","ifindex":3,"outer_vlan":100,"inner_vlan":9,"session_id":"s","user_name":"u","classes":[],"start_unix":1})"
        << "\n";
  }
  radius::SessionTable t(p);
  ASSERT_FALSE(t.load());
  EXPECT_EQ(t.size(), 0u);
}

TEST(SessionJournal, ADamagedEntryIsRefusedWithFileAndLine) {
  const std::string p = journal_path("damaged");
  {
    std::ofstream(p + ".log")
        << R"({"generation":0})"
        << "\n"
        << R"({"op":"put","ifindex":3,"outer_vlan":100,"inner_vlan":9,"session_id":"s","user_name":"u","classes":[],"start_unix":1})"
        << "\n"
        << R"({"op":"put","ifindex":3})"
        << "\n"
        << R"({"op":"del","ifindex":3,"outer_vlan":100,"inner_vlan":9})"
        << "\n";
  }
  radius::SessionTable t(p);
  auto e = t.load();
  ASSERT_TRUE(e);
  EXPECT_NE(e->find(p + ".log: line 3"), std::string::npos) << *e;
  EXPECT_EQ(t.size(), 0u);
  // The next write sets the damaged file aside rather than appending to it.
  ASSERT_TRUE(t.record(jkey(1), jdata(1)));
  EXPECT_TRUE(std::filesystem::exists(p + ".log.damaged"));
  radius::SessionTable t2(p);
  ASSERT_FALSE(t2.load());
  EXPECT_EQ(t2.size(), 1u);

  std::ofstream(p) << R"({"sessions":[{"ifindex":3}]})";
  radius::SessionTable t3(p);
  e = t3.load();
  ASSERT_TRUE(e);
  EXPECT_NE(e->find(p + ": session 1"), std::string::npos) << *e;
}

}  // namespace xbng::test
