// High availability: the [ha] config section, the group's keys, and the
// election (HaMember) against an in-memory etcd with real leases: one active
// at a time, a member cut off from etcd stops acting active (its data-plane
// deadline passes) before the other can win, priority, switchover.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "config/config.h"
#include "etcd_double.h"
#include "fleet/kv.h"
#include "bringup/lease/lease.h"
#include "ha/ha.h"
#include "xbng/abi.h"

using namespace xbng::agent;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::string write_tmp(const std::string& text) {
  char path[] = "/tmp/xbng-ha-test-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

Config base() {
  Config c;
  c.access = {"acc0"};
  c.uplink = {"upl0"};
  c.gateway_ipv4 = "100.64.0.1";
  c.etcd_endpoints = {"127.0.0.1:2379"};
  c.etcd_node = "bng1";
  c.ha_group = "bng-pair-1";
  c.ha_member = "a";
  return c;
}

std::string errors(const Config& c) {
  std::string s;
  for (const auto& e : check_config(c).errors) s += e + "\n";
  return s;
}

// ---- an etcd in memory (etcd_double.h): keys, leases that expire --------------
using FakeEtcd = xbng::test::EtcdDouble;
using FakeKv = xbng::test::EtcdDoubleKv;

// The data plane of one member: its deadline, and whether it acts active now.
struct FakeNode final : HaActions {
  std::atomic<uint64_t> deadline{XBNG_HA_STANDBY};
  std::atomic<int> actives{0}, standbys{0};
  void set_deadline(uint64_t ns) override { deadline = ns; }
  void became_active(const std::string&) override { ++actives; }
  void became_standby(const std::string&) override { ++standbys; }
  std::string ports_down() override {
    std::lock_guard l(mu);
    return down;
  }
  void set_ports_down(std::string why) {
    std::lock_guard l(mu);
    down = std::move(why);
  }
  bool acting_active() const {
    const uint64_t now = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count());
    const uint64_t d = deadline;
    return d != XBNG_HA_ALWAYS_ACTIVE && now < d;
  }
  std::mutex mu;
  std::string down;  // what ports_down() says
};

HaOptions opts(const std::string& member, uint32_t priority, bool preempt = false) {
  HaOptions o;
  o.group = "g";
  o.member = member;
  o.priority = priority;
  o.preempt = preempt;
  o.lease_ttl_s = 2;
  o.poll = 20ms;
  return o;
}

bool wait_until(const std::function<bool()>& f, std::chrono::milliseconds t) {
  for (auto end = Clock::now() + t; Clock::now() < end; std::this_thread::sleep_for(5ms))
    if (f()) return true;
  return f();
}

}  // namespace

TEST(HaConfig, LoadsTheSection) {
  const std::string p = write_tmp(
      "[ports]\naccess = [\"acc0\"]\nuplink = [\"upl0\"]\n[gateway]\nipv4 = \"100.64.0.1\"\n"
      "[etcd]\nendpoints = [\"127.0.0.1:2379\"]\nnode = \"bng1\"\n"
      "[ha]\ngroup = \"bng-pair-1\"\nmember = \"a\"\npriority = 100\npreempt = false\n"
      "lease_ttl_s = 2\nvirtual_mac = \"02:00:5e:00:01:01\"\nuplink_vip_v4 = \"192.0.2.1/24\"\n"
      "uplink_vip_v6 = \"2001:db8:ffff::1/64\"\n");
  Config c;
  load_config_file(p, &c);
  std::remove(p.c_str());
  EXPECT_EQ(errors(c), "");
  auto h = to_ha_options(c);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->group, "bng-pair-1");
  EXPECT_EQ(h->member, "a");
  EXPECT_EQ(h->priority, 100u);
  EXPECT_FALSE(h->preempt);
  EXPECT_EQ(h->lease_ttl_s, 2u);
  EXPECT_EQ(format_mac(h->virtual_mac.data()), "02:00:5e:00:01:01");
  ASSERT_TRUE(h->vip4 && h->vip6);
  EXPECT_EQ(format_interface_address(*h->vip4), "192.0.2.1/24");
  EXPECT_EQ(format_interface_address(*h->vip6), "2001:db8:ffff::1/64");
  auto f = to_fleet_options(c);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->subscribers_of, "bng-pair-1");  // the group's desired state
  DataplaneOptions d = to_dataplane_options(c);
  EXPECT_TRUE(d.ha);
  EXPECT_EQ(format_ipv4(d.ha_vip4), "192.0.2.1");
  // Without the section: no HA.
  EXPECT_FALSE(to_ha_options(Config{}));
}

TEST(HaConfig, DefaultVirtualMacFromTheGroup) {
  Config c = base();
  auto h = to_ha_options(c);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->virtual_mac, ha_default_virtual_mac("bng-pair-1"));
  EXPECT_EQ(h->virtual_mac[0], 0x02);  // locally administered, unicast
  EXPECT_NE(ha_default_virtual_mac("bng-pair-1"), ha_default_virtual_mac("bng-pair-2"));
}

TEST(HaConfig, ChecksValues) {
  EXPECT_EQ(errors(base()), "");
  struct Case {
    std::function<void(Config&)> mutate;
    const char* expect;
  };
  const Case cases[] = {
      {[](Config& c) { c.ha_member = ""; }, "ha.member: required"},
      {[](Config& c) { c.ha_member = "a/b"; }, "ha.member"},
      {[](Config& c) { c.ha_group = ""; }, "needs ha.group"},
      {[](Config& c) { c.etcd_endpoints.clear(), c.etcd_node.clear(); }, "needs fleet mode"},
      {[](Config& c) { c.ha_lease_ttl_s = 1; }, "ha.lease_ttl_s 1"},
      {[](Config& c) { c.ha_lease_ttl_s = 61; }, "ha.lease_ttl_s 61"},
      {[](Config& c) { c.ha_priority = 70000; }, "ha.priority 70000"},
      {[](Config& c) { c.ha_virtual_mac = "01:00:5e:00:00:01"; }, "must be a unicast MAC"},
      {[](Config& c) { c.ha_virtual_mac = "nope"; }, "not a MAC address"},
      {[](Config& c) { c.ha_uplink_vip_v4 = "192.0.2.1"; }, "ha.uplink_vip_v4 192.0.2.1"},
      {[](Config& c) { c.ha_uplink_vip_v4 = "2001:db8::1/64"; }, "ha.uplink_vip_v4"},
      {[](Config& c) { c.ha_uplink_vip_v6 = "fe80::1/64"; }, "ha.uplink_vip_v6 fe80::1/64"},
      {[](Config& c) {
         c.ha_uplink_vip_v4 = "192.0.2.1/24";
         c.uplink = {"upl0", "upl1"};
       },
       "exactly one uplink"},
  };
  for (const auto& k : cases) {
    Config c = base();
    k.mutate(c);
    EXPECT_NE(errors(c).find(k.expect), std::string::npos) << k.expect << "\n" << errors(c);
  }
}

TEST(HaKeys, Schema) {
  EXPECT_EQ(ha_leader_key("g1"), "/xbng/v1/ha/g1/leader");
  EXPECT_EQ(ha_member_key("g1", "a"), "/xbng/v1/ha/g1/members/a");
  EXPECT_EQ(ha_last_takeover_key("g1"), "/xbng/v1/ha/g1/last_takeover");
}

// Two members: exactly one active.
TEST(HaElection, OneActive) {
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, up_b{true};
  FakeNode na, nb;
  HaMember b(opts("b", 50), std::make_unique<FakeKv>(&etcd, &up_b), &nb);
  std::this_thread::sleep_for(5ms);
  HaMember a(opts("a", 100), std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.active() || b.active(); }, 3s));
  std::this_thread::sleep_for(300ms);
  EXPECT_NE(a.active(), b.active());
  EXPECT_NE(na.acting_active(), nb.acting_active());
  EXPECT_EQ(a.status().members.size(), 2u);
}

// The active is cut off from etcd: its data plane stops acting active by
// itself before the other member wins; never both at once.
TEST(HaElection, CutOffActiveStopsBeforeTheOtherWins) {
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, up_b{true};
  FakeNode na, nb;
  HaMember a(opts("a", 100), std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.active(); }, 3s));
  HaMember b(opts("b", 50), std::make_unique<FakeKv>(&etcd, &up_b), &nb);
  ASSERT_TRUE(wait_until([&] { return b.status().members.size() == 2; }, 3s));
  EXPECT_FALSE(b.active());
  up_a = false;  // a cannot renew any more
  bool overlap = false;
  const auto until = Clock::now() + 6s;
  while (Clock::now() < until && !nb.acting_active()) {
    overlap |= na.acting_active() && nb.acting_active();
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(nb.acting_active()) << "b never took over";
  EXPECT_FALSE(overlap);
  EXPECT_FALSE(na.acting_active());
  EXPECT_TRUE(wait_until([&] { return !a.active(); }, 3s)) << "a did not step down";
  EXPECT_NE(b.status().last_takeover_cause.find("a"), std::string::npos);
  up_a = true;  // a comes back: it stays standby (no preempt)
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(a.active());
  EXPECT_TRUE(b.active());
}

TEST(HaElection, SwitchoverHandsOver) {
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, up_b{true};
  FakeNode na, nb;
  HaMember a(opts("a", 100), std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.active(); }, 3s));
  // Alone: nobody to hand over to.
  EXPECT_EQ(a.switchover("test", 2s), "no other member is ready to take over");
  EXPECT_TRUE(a.active());
  HaMember b(opts("b", 50), std::make_unique<FakeKv>(&etcd, &up_b), &nb);
  ASSERT_TRUE(wait_until([&] { return a.status().members.size() == 2; }, 3s));
  EXPECT_EQ(b.switchover("test", 1s), "this member is not active");
  // b can take over once etcd has answered it for a TTL (synced).
  ASSERT_TRUE(wait_until(
      [&] {
        for (const auto& m : a.status().members)
          if (m.member == "b") return m.synced;
        return false;
      },
      4s));
  EXPECT_EQ(a.switchover("test", 3s), "");
  EXPECT_FALSE(a.active());
  EXPECT_FALSE(na.acting_active());
  ASSERT_TRUE(wait_until([&] { return b.active(); }, 3s));
  EXPECT_NE(b.status().last_takeover_cause.find("stepped down: test"), std::string::npos)
      << b.status().last_takeover_cause;
  // The higher priority member holds off: b stays active.
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(b.active());
  EXPECT_FALSE(a.active());
}

// preempt: a higher-priority member with preempt on takes over when it comes back.
TEST(HaElection, PreemptTakesOver) {
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, up_b{true};
  FakeNode na, nb;
  HaMember b(opts("b", 50), std::make_unique<FakeKv>(&etcd, &up_b), &nb);
  ASSERT_TRUE(wait_until([&] { return b.active(); }, 3s));
  HaMember a(opts("a", 100, true), std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.active(); }, 5s));
  EXPECT_FALSE(b.active());
  EXPECT_NE(a.status().last_takeover_cause.find("preempted by a"), std::string::npos)
      << a.status().last_takeover_cause;
}

// Without preempt the active keeps its role.
TEST(HaElection, NoPreemptKeepsTheActive) {
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, up_b{true};
  FakeNode na, nb;
  HaMember b(opts("b", 50), std::make_unique<FakeKv>(&etcd, &up_b), &nb);
  ASSERT_TRUE(wait_until([&] { return b.active(); }, 3s));
  HaMember a(opts("a", 100, false), std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.status().members.size() == 2; }, 3s));
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(b.active());
  EXPECT_FALSE(a.active());
}

// The active loses a port: it hands over to the standby that has them all,
// which then stays active when the port is back (no preempt).
TEST(HaElection, PortDownHandsOver) {
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, up_b{true};
  FakeNode na, nb;
  HaMember a(opts("a", 100), std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.active(); }, 3s));
  HaMember b(opts("b", 50), std::make_unique<FakeKv>(&etcd, &up_b), &nb);
  ASSERT_TRUE(wait_until([&] { return a.status().members.size() == 2; }, 3s));
  na.set_ports_down("access eth1 has no carrier");
  ASSERT_TRUE(wait_until([&] { return b.active(); }, 3s)) << "b did not take over";
  EXPECT_FALSE(a.active());
  EXPECT_FALSE(na.acting_active());
  EXPECT_NE(b.status().last_takeover_cause.find("ports down: access eth1 has no carrier"),
            std::string::npos)
      << b.status().last_takeover_cause;
  EXPECT_EQ(a.status().port_step_downs, 1u);
  EXPECT_EQ(a.status().ports_down, "access eth1 has no carrier");
  na.set_ports_down("");
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(b.active());
  EXPECT_FALSE(a.active());
  EXPECT_NE(a.render_metrics().find("xbng_ha_ports_up{group=\"g\",member=\"a\"} 1"),
            std::string::npos);
}

// With no member that has every port, the active keeps its role (it still
// serves the ports it has), and a standby with a port down does not win
// against one with all of them.
TEST(HaElection, PortDownWithoutReadyStandbyKeepsTheActive) {
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, up_b{true};
  FakeNode na, nb;
  nb.set_ports_down("uplink eth0 is down");
  HaMember a(opts("a", 100), std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.active(); }, 3s));
  HaMember b(opts("b", 150), std::make_unique<FakeKv>(&etcd, &up_b), &nb);
  ASSERT_TRUE(wait_until([&] { return a.status().members.size() == 2; }, 3s));
  na.set_ports_down("access eth1 has no carrier");
  std::this_thread::sleep_for(600ms);
  EXPECT_TRUE(a.active()) << "a handed over to a member without its ports";
  EXPECT_FALSE(b.active());
  EXPECT_EQ(a.switchover("test", 1s), "no other member is ready to take over");
  EXPECT_TRUE(a.active());
  // b's ports come back: a hands over to it.
  nb.set_ports_down("");
  ASSERT_TRUE(wait_until([&] { return b.active(); }, 3s));
  EXPECT_FALSE(a.active());
}

// A preempting member whose maps are still filling is not handed over to
// (nor switched over to) until it is synced; then it preempts.
TEST(HaElection, PreemptWaitsUntilSynced) {
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, up_b{true}, synced_a{false};
  FakeNode na, nb;
  HaMember b(opts("b", 50), std::make_unique<FakeKv>(&etcd, &up_b), &nb);
  ASSERT_TRUE(wait_until([&] { return b.active(); }, 3s));
  HaOptions oa = opts("a", 100, true);
  oa.synced = [&] { return synced_a.load(); };
  HaMember a(oa, std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return b.status().members.size() == 2; }, 3s));
  std::this_thread::sleep_for(600ms);
  EXPECT_TRUE(b.active()) << "b handed over to a member whose maps are filling";
  EXPECT_FALSE(a.active());
  EXPECT_FALSE(a.status().synced);
  for (const auto& m : b.status().members) {
    if (m.member == "a") {
      EXPECT_FALSE(m.synced);
    }
  }
  EXPECT_EQ(b.switchover("test", 1s), "no other member is ready to take over");
  EXPECT_TRUE(b.active());
  EXPECT_NE(a.render_metrics().find("xbng_ha_synced{group=\"g\",member=\"a\"} 0"),
            std::string::npos);
  synced_a = true;
  ASSERT_TRUE(wait_until([&] { return a.active(); }, 5s)) << "a did not preempt once synced";
  EXPECT_FALSE(b.active());
  EXPECT_TRUE(a.status().synced);
}

// Alone, a member whose maps are still filling still becomes active (a
// group with no other member gets an active).
TEST(HaElection, UnsyncedMemberAloneBecomesActive) {
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, synced_a{false};
  FakeNode na;
  HaOptions oa = opts("a", 100);
  oa.synced = [&] { return synced_a.load(); };
  HaMember a(oa, std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.active(); }, 5s)) << "alone, a never became active";
  EXPECT_FALSE(a.status().synced);
}

// The group's DHCPv6 DUID: a DUID-UUID (version 5) of the group name, the
// same on every member, another for another group.
TEST(HaDuid, DerivedFromTheGroup) {
  const auto a = ha_group_duid("bng-pair-1");
  ASSERT_EQ(a.size(), 18u);
  EXPECT_EQ(a[0], 0);
  EXPECT_EQ(a[1], 4);
  EXPECT_EQ(a[2 + 6] >> 4, 5);       // version 5
  EXPECT_EQ(a[2 + 8] & 0xc0, 0x80);  // RFC 4122 variant
  EXPECT_EQ(ha_group_duid("bng-pair-1"), a);
  EXPECT_NE(ha_group_duid("bng-pair-2"), a);
}

namespace {

// A listening TCP socket on 127.0.0.1 (port chosen by the kernel).
struct TcpListener {
  int fd = -1;
  uint16_t port = 0;
  TcpListener() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd, 4), 0);
    socklen_t l = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l);
    port = ntohs(a.sin_port);
  }
  ~TcpListener() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

}  // namespace

TEST(HaEtcdProbe, RefusedAcceptedUnknown) {
  TcpListener l;
  const std::string ep = "127.0.0.1:" + std::to_string(l.port);
  EXPECT_EQ(probe_endpoint(ep, 200ms), EndpointProbe::kAccepted);
  EXPECT_EQ(probe_endpoint("http://" + ep, 200ms), EndpointProbe::kAccepted);
  l.close();
  EXPECT_EQ(probe_endpoint(ep, 200ms), EndpointProbe::kRefused);
  EXPECT_EQ(probe_endpoint("https://" + ep + "/", 200ms), EndpointProbe::kRefused);
  EXPECT_EQ(probe_endpoint("no-port", 200ms), EndpointProbe::kUnknown);
}

// etcd down entirely (every endpoint refuses connections): the active keeps
// its role and its data plane deadline moves on, well past a TTL; the
// standby does not take over. etcd back: the same roles.
TEST(HaElection, EtcdDownEntirelyKeepsTheRoles) {
  TcpListener l;
  const std::string ep = "127.0.0.1:" + std::to_string(l.port);
  l.close();  // nothing listens there: refused
  FakeEtcd etcd;
  std::atomic<bool> up_a{true}, up_b{true};
  FakeNode na, nb;
  HaOptions oa = opts("a", 100), ob = opts("b", 50);
  oa.etcd_endpoints = ob.etcd_endpoints = {ep};
  HaMember a(oa, std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.active(); }, 4s));
  HaMember b(ob, std::make_unique<FakeKv>(&etcd, &up_b), &nb);
  ASSERT_TRUE(wait_until([&] { return b.status().members.size() == 2; }, 3s));
  up_a = up_b = false;                   // etcd down for both
  const auto until = Clock::now() + 5s;  // 2.5 TTLs
  bool dropped = false;
  while (Clock::now() < until) {
    dropped |= !na.acting_active();
    EXPECT_FALSE(nb.acting_active());
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_FALSE(dropped) << "the active's data plane stopped with etcd down entirely";
  EXPECT_TRUE(a.active());
  EXPECT_FALSE(b.active());
  EXPECT_TRUE(a.status().etcd_down);
  EXPECT_EQ(a.status().etcd_down_kept, 1u);
  // Back (the fake etcd kept a's lease, as a restarted etcd does).
  {
    std::lock_guard g(etcd.mu);
    for (auto& [id, exp] : etcd.leases) exp = Clock::now() + 2s;
  }
  up_a = up_b = true;
  std::this_thread::sleep_for(3s);
  EXPECT_TRUE(a.active());
  EXPECT_FALSE(b.active());
  EXPECT_FALSE(a.status().etcd_down);
  EXPECT_NE(a.render_metrics().find("xbng_ha_etcd_down_kept_total{group=\"g\",member=\"a\"} 1"),
            std::string::npos)
      << a.render_metrics();
}

// The same cut-off with an endpoint that accepts connections (etcd up, this
// member cut off at the etcd level): no evidence, the active steps down.
TEST(HaElection, CutOffWithEtcdListeningStepsDown) {
  TcpListener l;
  FakeEtcd etcd;
  std::atomic<bool> up_a{true};
  FakeNode na;
  HaOptions oa = opts("a", 100);
  oa.etcd_endpoints = {"127.0.0.1:" + std::to_string(l.port)};
  HaMember a(oa, std::make_unique<FakeKv>(&etcd, &up_a), &na);
  ASSERT_TRUE(wait_until([&] { return a.active(); }, 4s));
  up_a = false;
  EXPECT_TRUE(wait_until([&] { return !na.acting_active(); }, 3s));
  EXPECT_TRUE(wait_until([&] { return !a.active(); }, 3s));
  EXPECT_EQ(a.status().etcd_down_kept, 0u);
}

// A replicated lease: applied when not older than the one held, ignored when
// already expired, removed by a delete; a change told to the sink, a
// replica not.
TEST(HaReplicaLeases, ApplyReplica) {
  PortResolver ports;
  ports.name = [](uint32_t) { return std::string("acc0"); };
  ports.access_ifindex = [](std::string_view) -> std::optional<uint32_t> { return 1; };
  LeaseTable t(nullptr, ports, "");
  int told = 0;
  t.set_change_sink([&](const SubKey&, LeaseFamily, const Lease*) { ++told; });
  SubKey k{};
  k.ifindex = 1;
  k.outer_vid = 100;
  k.inner_vid = 7;
  Lease l;
  l.bound = true;
  l.address = "100.64.0.7";
  l.bound_unix = 1000;
  l.expires_unix = 1600;
  EXPECT_TRUE(t.apply_replica(k, LeaseFamily::kV4, &l, 1100));
  EXPECT_FALSE(t.apply_replica(k, LeaseFamily::kV4, &l, 1100));  // the same again
  Lease older = l;
  older.bound_unix = 900;
  older.expires_unix = 1500;
  EXPECT_FALSE(t.apply_replica(k, LeaseFamily::kV4, &older, 1100));
  EXPECT_EQ(t.get(k, LeaseFamily::kV4)->bound_unix, 1000u);
  Lease renewed = l;
  renewed.bound_unix = 1300;
  renewed.expires_unix = 1900;
  EXPECT_TRUE(t.apply_replica(k, LeaseFamily::kV4, &renewed, 1300));
  EXPECT_EQ(t.get(k, LeaseFamily::kV4)->expires_unix, 1900u);
  Lease gone = l;
  gone.bound_unix = 1400;
  gone.expires_unix = 1450;
  EXPECT_FALSE(t.apply_replica(k, LeaseFamily::kV4, &gone, 1500));  // expired already
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(told, 0);
  EXPECT_TRUE(t.apply_replica(k, LeaseFamily::kV4, nullptr, 1500));
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.get(k, LeaseFamily::kV4));
  // The table's own changes reach the sink: a bind, a release.
  t.bind(k, LeaseFamily::kV4, "100.64.0.7", {}, 600, 2000);
  t.release(k, LeaseFamily::kV4, 2001);
  EXPECT_EQ(told, 2);
}
