// RADIUS accounting (agent/radius/accounting.h) without sockets: the
// schedule, counters to attributes, timers, the queue and its state file.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "radius/accounting.h"
#include "radius/codec.h"

namespace xbng::radius {
namespace {

namespace fs = std::filesystem;

SubKey key(uint16_t c) {
  SubKey k{};
  k.ifindex = 7;
  k.outer_vid = 100;
  k.inner_vid = c;
  return k;
}

SessionData data(const std::string& sid, uint64_t start_unix) {
  SessionData d;
  d.session_id = sid;
  d.user_name = "eth1:100:" + sid;
  d.classes = {std::string("\x01\x00\xff", 3)};
  d.start_unix = start_unix;
  return d;
}

const Attribute* find(const std::vector<Attribute>& a, uint8_t type) {
  for (const auto& x : a)
    if (x.type == type) return &x;
  return nullptr;
}
uint32_t u32(const std::vector<Attribute>& a, uint8_t type) {
  const Attribute* x = find(a, type);
  EXPECT_NE(x, nullptr) << int(type);
  return x ? *as_u32(x->value) : 0;
}

// A store, a lease table and a client, all fake; the clock is `now`.
struct Rig {
  uint64_t now = 1'700'000'000'000;  // unix ms
  SessionTable table;
  std::map<uint64_t, AcctView> subs;  // provisioned, by rank
  std::map<uint64_t, bool> bound;
  std::vector<AccountingRequest> sent;
  std::vector<std::function<void(bool)>> pending;
  bool answer = true;  // answer at once with this
  bool hold = false;   // keep completions in `pending`
  std::unique_ptr<Accounting> acct;
  std::function<bool()> active;  // HA (set before make())
  std::vector<std::pair<SubKey, AcctCounts>> reported;
  // The batched view (hooks.views) as xbngd has it; false: `view` one by one.
  bool batch_views = true;
  size_t view_calls = 0, views_calls = 0;

  explicit Rig(AcctOptions o = {}, std::string table_file = "", bool batch = true)
      : table(std::move(table_file)), batch_views(batch) {
    make(std::move(o));
  }
  void make(AcctOptions o) {
    Accounting::Hooks h;
    h.send = [this](const AccountingRequest& r, std::function<void(bool)> done) {
      sent.push_back(r);
      if (hold)
        pending.push_back(std::move(done));
      else
        done(answer);
    };
    h.view = [this](const SubKey& k, AcctView* out) {
      ++view_calls;
      auto it = subs.find(agent::key_rank(k));
      if (it == subs.end()) return false;
      *out = it->second;
      return true;
    };
    if (batch_views)
      h.views = [this](std::span<const SubKey> keys, std::vector<AcctView>* out,
                       std::vector<uint8_t>* found) {
        ++views_calls;
        out->assign(keys.size(), AcctView{});
        found->assign(keys.size(), 0);
        for (size_t i = 0; i < keys.size(); ++i)
          if (auto it = subs.find(agent::key_rank(keys[i])); it != subs.end()) {
            (*out)[i] = it->second;
            (*found)[i] = 1;
          }
      };
    h.remove = [this](const SubKey& k) { return remove(k); };
    h.lease_bound = [this](const SubKey& k) { return bound[agent::key_rank(k)]; };
    h.now_ms = [this] { return now; };
    h.active = active;
    h.reported = [this](const SubKey& k, const AcctCounts& c) { reported.emplace_back(k, c); };
    acct = std::make_unique<Accounting>(&table, std::move(o), std::move(h));
  }
  // The store deletes k (its hooks run).
  absl::Status remove(const SubKey& k) {
    auto it = subs.find(agent::key_rank(k));
    if (it == subs.end()) return absl::NotFoundError("no");
    acct->on_removing(k, it->second);
    subs.erase(it);
    acct->on_subscriber_change(k, nullptr);
    table.on_subscriber_change(k, nullptr);
    return absl::OkStatus();
  }
  void create(const SubKey& k, const SessionData& d) {
    ASSERT_TRUE(table.record(k, d));
    AcctView v;
    v.nas_port_id = "eth1:100." + std::to_string(k.inner_vid);
    v.framed_ip = 0x0a000001;
    subs[agent::key_rank(k)] = v;
  }
  void bind(const SubKey& k) {
    bound[agent::key_rank(k)] = true;
    acct->on_lease(k, Accounting::LeaseChange::kBound);
  }
  // Advances the clock in 100 ms ticks.
  void run_for(uint64_t ms) {
    for (uint64_t t = 0; t < ms; t += 100) {
      now += 100;
      acct->tick();
    }
  }
  size_t count(AcctStatus s) const {
    return std::count_if(sent.begin(), sent.end(),
                         [s](const AccountingRequest& r) { return r.status == s; });
  }
};

TEST(AcctGrid, SpreadsEvenlyOverTheInterval) {
  // 200K sessions at 300 s in 1 s slots: every slot near the mean (a hash
  // spreads them like random draws: 667 a slot, standard deviation ~26).
  const uint64_t interval = 300'000, tick = 1000, n = 200'000;
  std::vector<uint32_t> per_slot(interval / tick);
  const uint64_t t0 = 1'700'000'000'000;
  for (uint64_t i = 0; i < n; ++i) {
    const std::string sid = fmt::format("{:016x}-{:012x}", t0 * 1000 + i * 7919, i);
    const uint64_t due = next_on_grid(sid, interval, tick, t0);
    ASSERT_GE(due, t0);
    ASSERT_LT(due, t0 + interval);
    ASSERT_EQ(due % tick, 0u);
    ++per_slot[(due - t0) / tick];
    // The same grid in another process (a restart).
    ASSERT_EQ(next_on_grid(sid, interval, tick, due + 1), due + interval);
  }
  const double mean = double(n) / per_slot.size();
  const uint32_t mx = *std::max_element(per_slot.begin(), per_slot.end());
  const uint32_t mn = *std::min_element(per_slot.begin(), per_slot.end());
  EXPECT_LT(mx, mean * 1.25) << "max " << mx << " mean " << mean;
  EXPECT_GT(mn, mean * 0.75) << "min " << mn << " mean " << mean;
}

TEST(AcctGrid, IntervalFromTheAcceptIsFloored) {
  AcctOptions o;
  o.interim_interval_s = 300;
  o.interim_min_s = 60;
  SessionData d;
  EXPECT_EQ(effective_interim_s(d, o), 300u);
  d.interim_interval = 10;
  EXPECT_EQ(effective_interim_s(d, o), 60u);
  d.interim_interval = 600;
  EXPECT_EQ(effective_interim_s(d, o), 600u);
  o.interim_min_s = 1;
  d.interim_interval = 2;
  EXPECT_EQ(effective_interim_s(d, o), 2u);
}

TEST(AcctAttributes, CountersGigawordsClassAndTime) {
  SessionData d = data("s1", 1000);
  AcctView v;
  v.nas_port_id = "eth1:100.5";
  v.up_bytes = (uint64_t{5} << 32) + 123;  // 5 gigawords + 123
  v.up_packets = 77;
  v.down_bytes = (uint64_t{1} << 32) - 1;
  v.down_packets = 88;
  AccountingRequest r = make_request(AcctStatus::kStop, d, v, 1090);
  r.terminate_cause = cause::kIdleTimeout;
  Config cfg;
  const auto a = accounting_attributes(cfg, r);
  EXPECT_EQ(u32(a, attr::kAcctStatusType), 2u);
  EXPECT_EQ(u32(a, attr::kAcctInputOctets), 123u);
  EXPECT_EQ(u32(a, attr::kAcctInputGigawords), 5u);
  EXPECT_EQ(u32(a, attr::kAcctOutputOctets), 0xffffffffu);
  EXPECT_EQ(u32(a, attr::kAcctOutputGigawords), 0u);
  EXPECT_EQ(u32(a, attr::kAcctInputPackets), 77u);
  EXPECT_EQ(u32(a, attr::kAcctOutputPackets), 88u);
  EXPECT_EQ(u32(a, attr::kAcctSessionTime), 90u);
  EXPECT_EQ(u32(a, attr::kAcctTerminateCause), cause::kIdleTimeout);
  ASSERT_NE(find(a, attr::kClass), nullptr);
  EXPECT_EQ(find(a, attr::kClass)->value, std::string("\x01\x00\xff", 3));
  EXPECT_EQ(find(a, attr::kAcctSessionId)->value, "s1");
  EXPECT_EQ(find(a, attr::kNasPortId)->value, "eth1:100.5");
  // A Start carries no counters.
  const auto s = accounting_attributes(cfg, make_request(AcctStatus::kStart, d, v, 1000));
  EXPECT_EQ(find(s, attr::kAcctInputOctets), nullptr);
}

TEST(Accounting, StartOnceInterimsOnTheGridAndStopWithTheNotedCause) {
  AcctOptions o;
  o.interim_interval_s = 10;
  o.interim_min_s = 1;
  Rig r(o);
  const SubKey k = key(1);
  SessionData d = data("sess-1", r.now / 1000);
  d.interim_interval = 2;
  r.create(k, d);
  r.acct->tick();
  EXPECT_TRUE(r.sent.empty()) << "no Start before a family is bound";
  r.bind(k);
  r.acct->tick();
  ASSERT_EQ(r.count(AcctStatus::kStart), 1u);
  EXPECT_TRUE(r.table.get(k)->acct_started);
  r.bind(k);  // the other family
  r.run_for(10'000);
  EXPECT_EQ(r.count(AcctStatus::kStart), 1u);
  // 2 s interims over 10 s: 4 or 5, each 2 s apart.
  std::vector<uint32_t> ts;
  for (const auto& q : r.sent)
    if (q.status == AcctStatus::kInterimUpdate) ts.push_back(*q.event_timestamp);
  ASSERT_GE(ts.size(), 4u);
  ASSERT_LE(ts.size(), 5u);
  for (size_t i = 1; i < ts.size(); ++i) EXPECT_EQ(ts[i] - ts[i - 1], 2u);
  // Counters go up, then a reading below them is reported as the last.
  r.subs[agent::key_rank(k)].up_bytes = 5000;
  r.subs[agent::key_rank(k)].down_bytes = 7000;
  r.run_for(2'000);
  EXPECT_EQ(r.sent.back().input_octets, 5000u);
  r.subs[agent::key_rank(k)].down_bytes = 100;
  r.run_for(2'000);
  EXPECT_EQ(r.sent.back().status, AcctStatus::kInterimUpdate);
  EXPECT_EQ(r.sent.back().output_octets, 7000u);
  // A Disconnect (the CoA side) ends it with its cause.
  r.subs[agent::key_rank(k)].up_bytes = 6000;
  ASSERT_TRUE(r.acct->end_session(k, cause::kAdminReset).ok());
  r.acct->tick();
  ASSERT_EQ(r.sent.back().status, AcctStatus::kStop);
  EXPECT_EQ(*r.sent.back().terminate_cause, cause::kAdminReset);
  EXPECT_EQ(r.sent.back().input_octets, 6000u) << "the counters read just before the delete";
  EXPECT_EQ(r.sent.back().output_octets, 7000u);
  EXPECT_EQ(r.sent.back().classes, d.classes);
  const size_t n = r.sent.size();
  r.run_for(5'000);
  EXPECT_EQ(r.sent.size(), n) << "nothing after the Stop";
  EXPECT_EQ(r.acct->counters().sessions, 0u);
}

// The sessions due in a pass have their views read together (hooks.views)
// and their records read in place: the same requests, in the same order, as
// a view read per session, timers included.
TEST(Accounting, BatchedViewsSendWhatOneByOneSends) {
  auto scenario = [](bool batch) {
    AcctOptions o;
    o.interim_interval_s = 2;
    o.interim_min_s = 1;
    auto r = std::make_unique<Rig>(o, "", batch);
    for (uint16_t i = 1; i <= 40; ++i) {
      SessionData d = data(fmt::format("batch-{}", i), r->now / 1000);
      if (i % 7 == 0) d.session_timeout = 5;
      if (i % 5 == 0) d.idle_timeout = 3;
      r->create(key(i), d);
      r->bind(key(i));
    }
    r->acct->tick();
    for (int step = 0; step < 10; ++step) {
      for (uint16_t i = 1; i <= 40; ++i) {
        AcctView& v = r->subs[agent::key_rank(key(i))];
        if (i % 3 == 0) continue;  // no traffic: the idle ones among them end
        v.up_bytes += 1000 * i;
        v.up_packets += i;
        v.down_bytes += 3000 * i;
        v.down_packets += 2 * i;
      }
      if (step == 4) (void)r->remove(key(11));  // deleted by another source
      r->run_for(1'000);
    }
    return r;
  };
  auto one = scenario(false), many = scenario(true);
  EXPECT_EQ(one->views_calls, 0u);
  EXPECT_GT(many->views_calls, 0u);
  EXPECT_LT(many->view_calls, one->view_calls / 4) << "the views read in batches";
  ASSERT_EQ(one->sent.size(), many->sent.size());
  EXPECT_GT(one->count(AcctStatus::kInterimUpdate), 100u);
  EXPECT_GT(one->count(AcctStatus::kStop), 5u);
  for (size_t i = 0; i < one->sent.size(); ++i) {
    const AccountingRequest &a = one->sent[i], &b = many->sent[i];
    EXPECT_EQ(a.status, b.status) << i;
    EXPECT_EQ(a.session_id, b.session_id) << i;
    EXPECT_EQ(a.user_name, b.user_name) << i;
    EXPECT_EQ(a.nas_port_id, b.nas_port_id) << i;
    EXPECT_EQ(a.framed_ip, b.framed_ip) << i;
    EXPECT_EQ(a.classes, b.classes) << i;
    EXPECT_EQ(a.input_octets, b.input_octets) << i;
    EXPECT_EQ(a.output_octets, b.output_octets) << i;
    EXPECT_EQ(a.input_packets, b.input_packets) << i;
    EXPECT_EQ(a.output_packets, b.output_packets) << i;
    EXPECT_EQ(a.session_time, b.session_time) << i;
    EXPECT_EQ(a.terminate_cause, b.terminate_cause) << i;
    EXPECT_EQ(a.event_timestamp, b.event_timestamp) << i;
  }
}

TEST(Accounting, AdminDeleteIsAdminResetAndReleaseIsUserRequest) {
  Rig r;
  const SubKey a = key(1), b = key(2);
  r.create(a, data("a", r.now / 1000));
  r.create(b, data("b", r.now / 1000));
  r.bind(a);
  r.bind(b);
  r.acct->tick();
  // An admin delete: no cause noted.
  r.acct->on_subscriber_change(a, nullptr);
  r.table.on_subscriber_change(a, nullptr);
  r.acct->tick();
  ASSERT_EQ(r.sent.back().status, AcctStatus::kStop);
  EXPECT_EQ(*r.sent.back().terminate_cause, cause::kAdminReset);
  // b: the CPE released its only lease.
  r.bound[agent::key_rank(b)] = false;
  r.acct->on_lease(b, Accounting::LeaseChange::kReleased);
  r.acct->tick();  // ends it (delete)
  r.acct->tick();  // sends the Stop
  ASSERT_EQ(r.sent.back().status, AcctStatus::kStop);
  EXPECT_EQ(r.sent.back().session_id, "b");
  EXPECT_EQ(*r.sent.back().terminate_cause, cause::kUserRequest);
  EXPECT_FALSE(r.subs.count(agent::key_rank(b)));
}

TEST(Accounting, LeaseExpiryOfEveryFamilyIsLostService) {
  Rig r;
  const SubKey k = key(3);
  r.create(k, data("c", r.now / 1000));
  r.bind(k);
  r.acct->tick();
  r.acct->on_lease(k, Accounting::LeaseChange::kExpired);  // one family; the other still bound
  r.acct->tick();
  EXPECT_TRUE(r.subs.count(agent::key_rank(k)));
  r.bound[agent::key_rank(k)] = false;
  r.acct->on_lease(k, Accounting::LeaseChange::kExpired);
  r.acct->tick();
  r.acct->tick();
  EXPECT_EQ(*r.sent.back().terminate_cause, cause::kLostService);
}

TEST(Accounting, SessionTimeoutEndsOnTime) {
  Rig r;
  const SubKey k = key(4);
  SessionData d = data("st", r.now / 1000);
  d.session_timeout = 5;
  r.create(k, d);
  r.bind(k);
  r.acct->tick();
  r.run_for(4'800);
  EXPECT_TRUE(r.subs.count(agent::key_rank(k)));
  r.run_for(400);
  EXPECT_FALSE(r.subs.count(agent::key_rank(k)));
  r.acct->tick();
  EXPECT_EQ(*r.sent.back().terminate_cause, cause::kSessionTimeout);
}

// A session no lease binds for (an RS-only CPE, routes that need no DHCP,
// a CPE that never finished DHCP) is in the maps all the same: its Start
// goes out start_grace_s after its creation and its timers run from then.
TEST(Accounting, ASessionWithoutALeaseStartsAfterTheGraceAndEndsOnItsTimers) {
  AcctOptions o;
  o.start_grace_s = 3;
  Rig r(o);
  const SubKey k = key(5);
  SessionData d = data("nolease", r.now / 1000);
  d.session_timeout = 8;
  r.create(k, d);
  r.acct->on_created(k);
  r.run_for(2'900);
  EXPECT_EQ(r.count(AcctStatus::kStart), 0u) << "a lease may still come";
  r.run_for(200);
  ASSERT_EQ(r.count(AcctStatus::kStart), 1u);
  EXPECT_TRUE(r.table.get(k)->acct_started);
  EXPECT_EQ(r.acct->counters().sessions, 1u);
  // Session-Timeout counts from the session's start (its creation).
  r.run_for(4'800);
  EXPECT_TRUE(r.subs.count(agent::key_rank(k)));
  r.run_for(400);
  EXPECT_FALSE(r.subs.count(agent::key_rank(k)));
  r.acct->tick();
  ASSERT_EQ(r.count(AcctStatus::kStop), 1u);
  EXPECT_EQ(*r.sent.back().terminate_cause, cause::kSessionTimeout);
}

// A lease within the grace: the Start comes with it, never a second one.
TEST(Accounting, ALeaseWithinTheGraceStartsOnce) {
  AcctOptions o;
  o.start_grace_s = 3;
  Rig r(o);
  const SubKey k = key(6);
  r.create(k, data("lease", r.now / 1000));
  r.acct->on_created(k);
  r.run_for(1'000);
  r.bind(k);
  r.acct->tick();
  ASSERT_EQ(r.count(AcctStatus::kStart), 1u);
  r.run_for(5'000);
  EXPECT_EQ(r.count(AcctStatus::kStart), 1u);
}

// Created but not started when xbngd stopped: the next start gives it the
// grace again (a lease or the grace starts it, once).
TEST(Accounting, ACreatedSessionNotStartedBeforeARestartStartsAfterIt) {
  AcctOptions o;
  o.start_grace_s = 2;
  Rig r(o);
  const SubKey k = key(7);
  r.create(k, data("restart", r.now / 1000));
  ASSERT_FALSE(r.acct->load_and_adopt());
  r.run_for(1'900);
  EXPECT_EQ(r.count(AcctStatus::kStart), 0u);
  r.run_for(200);
  EXPECT_EQ(r.count(AcctStatus::kStart), 1u);
}

TEST(Accounting, IdleTimeoutCountsBothDirectionsAndFollowsTheTable) {
  Rig r;
  const SubKey k = key(5);
  SessionData d = data("idle", r.now / 1000);
  d.idle_timeout = 4;
  r.create(k, d);
  r.bind(k);
  r.acct->tick();
  // Downstream traffic only, every 2 s, for 12 s: still alive.
  for (int i = 0; i < 6; ++i) {
    r.run_for(2'000);
    r.subs[agent::key_rank(k)].down_packets += 1;
  }
  EXPECT_TRUE(r.subs.count(agent::key_rank(k)));
  // Silence: ends between 4 and 5 s later.
  r.run_for(3'900);
  EXPECT_TRUE(r.subs.count(agent::key_rank(k)));
  r.run_for(1'200);
  EXPECT_FALSE(r.subs.count(agent::key_rank(k)));
  r.acct->tick();
  EXPECT_EQ(*r.sent.back().terminate_cause, cause::kIdleTimeout);

  // A CoA shortening the timer counts at once.
  const SubKey k2 = key(6);
  SessionData d2 = data("idle2", r.now / 1000);
  d2.idle_timeout = 100;
  r.create(k2, d2);
  r.bind(k2);
  r.acct->tick();
  r.run_for(3'000);
  d2.idle_timeout = 2;
  d2.acct_started = true;
  ASSERT_TRUE(r.table.record(k2, d2));
  r.acct->timers_changed(k2);
  r.acct->tick();
  EXPECT_FALSE(r.subs.count(agent::key_rank(k2)));
}

TEST(Accounting, UndeliveredAreQueuedBoundedReplacedAndRetried) {
  AcctOptions o;
  o.queue_max = 3;
  o.queue_retry_s = 5;
  o.interim_interval_s = 10;
  Rig r(o);
  r.answer = false;
  for (uint16_t i = 1; i <= 3; ++i) {
    r.create(key(i), data("q" + std::to_string(i), r.now / 1000));
    r.bind(key(i));
  }
  r.acct->tick();
  EXPECT_EQ(r.acct->queued().size(), 3u);  // three Starts
  EXPECT_EQ(r.acct->counters().undelivered, 3u);
  // Interims of q1 twice: the newer replaces the older; the queue stays bounded.
  r.run_for(30'000);
  const auto q = r.acct->queued();
  EXPECT_LE(q.size(), 3u);
  EXPECT_GT(r.acct->counters().dropped, 0u);
  std::map<std::string, int> interims;
  for (const auto& x : q)
    if (x.status == AcctStatus::kInterimUpdate) ++interims[x.session_id];
  for (const auto& [sid, n] : interims) EXPECT_EQ(n, 1) << sid;
  // The server comes back: the queue drains, with Acct-Delay-Time.
  r.answer = true;
  const size_t before = r.sent.size();
  r.run_for(6'000);
  EXPECT_TRUE(r.acct->queued().empty());
  bool delayed = false;
  for (size_t i = before; i < r.sent.size(); ++i) delayed = delayed || r.sent[i].delay_time > 0;
  EXPECT_TRUE(delayed);
}

TEST(Accounting, QueueAndStartSurviveARestart) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("xbng-acct-{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  AcctOptions o;
  o.state_file = (dir / "radius-accounting.json").string();
  o.interim_interval_s = 60;
  const std::string table_file = (dir / "radius-sessions.json").string();
  const SubKey k = key(9);
  uint64_t now = 0;
  AcctView counters_before;
  {
    Rig r(o, table_file);
    r.create(k, data("r1", r.now / 1000));
    r.bind(k);
    r.acct->tick();
    r.subs[agent::key_rank(k)].up_bytes = 10'000;
    r.answer = false;
    r.run_for(91'000);  // one Interim at least (½..1½ intervals), undelivered
    ASSERT_EQ(r.acct->queued().size(), 1u);
    r.acct->stop();
    r.acct->flush();
    r.table.flush();
    now = r.now;
    counters_before = r.subs[agent::key_rank(k)];
  }
  Rig r(o, table_file);
  r.now = now + 2'000;
  ASSERT_FALSE(r.table.load());
  ASSERT_TRUE(r.table.get(k)->acct_started);
  r.subs[agent::key_rank(k)] = counters_before;
  ASSERT_FALSE(r.acct->load_and_adopt());
  ASSERT_EQ(r.acct->queued().size(), 1u);
  EXPECT_EQ(r.acct->queued()[0].input_octets, 10'000u);
  r.bind(k);  // a renewal-like bind after the restart: no second Start
  r.run_for(70'000);
  EXPECT_EQ(r.count(AcctStatus::kStart), 0u);
  EXPECT_GE(r.count(AcctStatus::kInterimUpdate), 2u);  // the queued one and the next
  EXPECT_TRUE(r.acct->queued().empty());
  for (const auto& q : r.sent) EXPECT_GE(q.input_octets, 10'000u);
  fs::remove_all(dir);
}

// HA: a standby sends nothing for the sessions it holds (no Start, no
// Interim, no Stop, no timer); once active it goes on with them: no second
// Start for a session a former active started, its counters the replicated
// acct_base plus what its own subscriber counted since the takeover (even
// traffic forwarded before its first pass as active; counts of an earlier
// active period of its own are in the base), what it reported told; a
// session the former active never started starts after the grace.
TEST(Accounting, StandbyIsSilentAndTheNewActiveGoesOnFromTheBase) {
  AcctOptions o;
  o.interim_min_s = 1;
  Rig r(o);
  bool is_active = true;
  r.active = [&] { return is_active; };
  r.make(o);
  const uint64_t t0 = r.now / 1000;
  SessionData started = data("s-started", t0 - 100);
  started.interim_interval = 10;
  started.acct_started = true;
  started.acct_base = {1000, 10, 2000, 20};
  started.session_timeout = 115;  // would end 15 s from now: while standby
  SessionData fresh = data("s-fresh", t0 - 1);
  SessionData ended = data("s-ended", t0 - 50);
  ended.acct_started = true;
  r.create(key(1), started);
  r.create(key(3), ended);
  // Active first: its subscriber counts 30 octets up, reported above the base.
  AcctView& own = r.subs[agent::key_rank(key(1))];
  own.up_bytes = 30, own.up_packets = 3, own.down_bytes = 40, own.down_packets = 4;
  ASSERT_FALSE(r.acct->load_and_adopt());
  r.run_for(10'000);
  ASSERT_FALSE(r.sent.empty());
  EXPECT_EQ(r.sent.back().input_octets, 1030u);
  // A standby: nothing is sent whatever happens to its sessions.
  is_active = false;
  r.run_for(100);
  const size_t n0 = r.sent.size();
  r.create(key(2), fresh);
  r.acct->on_created(key(2));
  r.bind(key(1));
  ASSERT_TRUE(r.remove(key(3)).ok());  // replication deletes it
  r.run_for(12'000);                   // past key(1)'s Session-Timeout of the time
  EXPECT_EQ(r.sent.size(), n0) << "a standby sent something";
  EXPECT_EQ(r.acct->counters().sessions, 0u);
  // The other member took over, reported 1500 octets (its base: this
  // member's 1030, plus its own) and a CoA gave a longer Session-Timeout.
  ASSERT_TRUE(r.table.update(key(1), [&](SessionData* d) {
    d->acct_base = {1500, 15, 2500, 25};
    d->session_timeout = 3600;
  }));
  // This member takes over again; its data plane forwards 50 octets before
  // accounting's first pass as active.
  own.up_bytes += 50, own.up_packets += 1, own.down_bytes += 70, own.down_packets += 2;
  is_active = true;
  r.run_for(12'000);
  size_t starts_1 = 0, starts_2 = 0;
  std::vector<AccountingRequest> interims;
  for (size_t i = n0; i < r.sent.size(); ++i) {
    const auto& q = r.sent[i];
    if (q.status == AcctStatus::kStart) (q.session_id == "s-started" ? starts_1 : starts_2)++;
    if (q.status == AcctStatus::kInterimUpdate && q.session_id == "s-started") {
      interims.push_back(q);
      EXPECT_EQ(q.classes, started.classes);
    }
  }
  ASSERT_FALSE(interims.empty());
  for (const auto& q : interims) {
    EXPECT_EQ(q.input_octets, 1550u);
    EXPECT_EQ(q.input_packets, 16u);
    EXPECT_EQ(q.output_octets, 2570u);
    EXPECT_EQ(q.output_packets, 27u);
  }
  EXPECT_EQ(starts_1, 0u) << "a second Start";
  EXPECT_EQ(starts_2, 1u) << "the session the former active never started";
  EXPECT_EQ(r.count(AcctStatus::kStop), 0u);
  std::optional<AcctCounts> told;  // the last counts told of key(1)
  for (const auto& [k, c] : r.reported)
    if (agent::key_rank(k) == agent::key_rank(key(1))) told = c;
  ASSERT_TRUE(told);
  EXPECT_EQ(*told, (AcctCounts{1550, 16, 2570, 27}));
  // Its Stop carries the base too.
  ASSERT_TRUE(r.acct->end_session(key(1), cause::kAdminReset).ok());
  r.run_for(200);
  ASSERT_EQ(r.count(AcctStatus::kStop), 1u);
  EXPECT_EQ(r.sent.back().input_octets, 1550u);
  // A standby again: nothing more.
  is_active = false;
  const size_t n = r.sent.size();
  r.run_for(30'000);
  EXPECT_EQ(r.sent.size(), n);
}

TEST(Accounting, OnAndOff) {
  Rig r;
  r.acct->accounting_on();
  r.acct->accounting_off();
  ASSERT_EQ(r.sent.size(), 2u);
  EXPECT_EQ(r.sent[0].status, AcctStatus::kAccountingOn);
  EXPECT_EQ(r.sent[1].status, AcctStatus::kAccountingOff);
  EXPECT_EQ(r.acct->counters().on_off, 2u);
  const auto a = accounting_attributes(Config{}, r.sent[0]);
  EXPECT_EQ(find(a, attr::kUserName), nullptr);
}

TEST(Accounting, MetricsNameEveryCounter) {
  AcctCounters c;
  c.starts = 3;
  c.queued = 7;
  c.dropped = 2;
  c.ended_idle_timeout = 1;
  CounterSnapshot cl;
  cl.retransmits = 9;
  const std::string m = render_acct_metrics(c, cl);
  for (const char* want : {"xbng_radius_acct_requests_total{type=\"start\"} 3\n",
                           "# TYPE xbng_radius_acct_queued gauge\n", "xbng_radius_acct_queued 7\n",
                           "xbng_radius_acct_queue_dropped_total 2\n",
                           "xbng_radius_acct_sessions_ended_total{reason=\"idle_timeout\"} 1\n",
                           "xbng_radius_retransmits_total 9\n"})
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
}

}  // namespace
}  // namespace xbng::radius
