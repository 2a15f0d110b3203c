// gRPC tests: a real xbng agent (real maps, XDP links on veths, gRPC on a
// unix socket) inside a private network namespace that vanishes with the
// process. bpffs pins live under /sys/fs/bpf/xbng-test-<pid>, removed on
// every exit path.
#include <bpf/bpf.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "api/convert.h"
#include "bringup/punt/counters.h"
#include "daemon/agent.h"
#include "ctl/ctl.h"
#include "xbng/v1/xbng.grpc.pb.h"

using namespace xbng::agent;
namespace v1 = xbng::v1;
namespace fs = std::filesystem;
using grpc::StatusCode;

namespace {

std::string g_root;    // /sys/fs/bpf/xbng-test-<pid>
std::string g_rundir;  // /tmp/xbng-grpc-test-<pid>

void cleanup() {
  if (g_root.empty()) return;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(g_root, ec)) Dataplane::teardown(d.path());
  fs::remove_all(g_root, ec);
  fs::remove_all(g_rundir, ec);
}

void on_signal(int sig) {
  cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

void sh(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "setup command failed: %s\n", cmd.c_str());
    std::exit(1);
  }
}

v1::Subscriber make_sub(uint32_t outer, uint32_t inner, const std::string& port = "acc0") {
  v1::Subscriber s;
  s.set_port(port);
  s.set_outer_vlan(outer);
  s.set_inner_vlan(inner);
  const uint32_t n = outer * 4096 + inner;
  s.set_mac(fmt::format("02:00:{:02x}:{:02x}:{:02x}:{:02x}", (n >> 24) & 0xff, (n >> 16) & 0xff,
                        (n >> 8) & 0xff, n & 0xff));
  s.set_ipv4(fmt::format("100.{}.{}.{}", 64 + ((n >> 16) & 0x3f), (n >> 8) & 0xff, n & 0xff));
  s.set_ipv6(fmt::format("2001:db8:{:x}:{:x}::1", n >> 16, n & 0xffff));
  s.add_ipv6_prefixes(fmt::format("2001:db8:{:x}:{:x}00::/56", 0x8000 | (n >> 8), n & 0xff));
  return s;
}

uint64_t count_entries(int fd, size_t ks, size_t vs) {
  uint64_t n = 0;
  map_for_each(fd, ks, vs, [&](const void*, const void*) { ++n; });
  return n;
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    bpffs_ = g_root + "/" + info->name();
    socket_ = "unix://" + g_rundir + "/" + info->name() + ".sock";
  }
  void TearDown() override {
    stop();
    Dataplane::teardown(bpffs_);
  }
  void start(uint32_t max_subs = 4096, uint32_t direct_slots = 0,
             std::vector<std::string> acc0_pools = {}, uint32_t direct_slots_v6 = 0,
             std::vector<std::pair<uint16_t, uint16_t>> acc0_svlans = {},
             uint32_t direct_subscriber_slots = 0) {
    AgentOptions o;
    o.dataplane.direct_slots = direct_slots;
    o.dataplane.direct_slots_v6 = direct_slots_v6;
    o.dataplane.direct_subscriber_slots = direct_subscriber_slots;
    o.dataplane.access_overrides["acc0"].direct_svlans = acc0_svlans;
    for (const auto& p : acc0_pools)
      o.dataplane.access_overrides["acc0"].pools.push_back(*parse_prefix(p));
    o.dataplane.access = {"acc0", "acc1"};
    o.dataplane.uplink = {"upl0"};
    o.dataplane.gateway_ipv4 = *parse_ipv4("100.64.0.1");
    o.dataplane.gateway_ipv6 = *parse_ipv6("2001:db8::1");
    o.dataplane.bpffs = bpffs_;
    o.dataplane.max_subscribers = max_subs;
    o.dataplane.xdp_generic = true;
    o.server.listen = socket_;
    agent_ = std::make_unique<Agent>(o);
    CtlOptions co;
    co.server = socket_;
    stub_ = v1::Subscribers::NewStub(make_channel(co));
  }
  void stop() {
    stub_.reset();
    agent_.reset();
  }

  grpc::Status upsert(const std::vector<v1::Subscriber>& subs,
                      v1::UpsertSubscribersResponse* resp = nullptr) {
    v1::UpsertSubscribersRequest req;
    for (const auto& s : subs) *req.add_subscribers() = s;
    v1::UpsertSubscribersResponse r;
    grpc::ClientContext ctx;
    auto st = stub_->UpsertSubscribers(&ctx, req, resp ? resp : &r);
    return st;
  }
  v1::StreamSubscribersResponse stream(const std::vector<v1::Subscriber>& subs) {
    grpc::ClientContext ctx;
    v1::StreamSubscribersResponse resp;
    auto w = stub_->StreamSubscribers(&ctx, &resp);
    for (const auto& s : subs) EXPECT_TRUE(w->Write(s));
    w->WritesDone();
    auto st = w->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }
  grpc::Status get(uint32_t outer, uint32_t inner, v1::Subscriber* out,
                   const std::string& port = "acc0") {
    v1::GetSubscriberRequest req;
    req.mutable_key()->set_port(port);
    req.mutable_key()->set_outer_vlan(outer);
    req.mutable_key()->set_inner_vlan(inner);
    v1::GetSubscriberResponse resp;
    grpc::ClientContext ctx;
    auto st = stub_->GetSubscriber(&ctx, req, &resp);
    if (st.ok() && out) *out = resp.subscriber();
    return st;
  }
  grpc::Status del(const std::vector<std::pair<uint32_t, uint32_t>>& keys,
                   v1::DeleteSubscribersResponse* resp) {
    v1::DeleteSubscribersRequest req;
    for (auto [o, i] : keys) {
      auto* k = req.add_keys();
      k->set_port("acc0");
      k->set_outer_vlan(o);
      k->set_inner_vlan(i);
    }
    grpc::ClientContext ctx;
    return stub_->DeleteSubscribers(&ctx, req, resp);
  }
  // Every subscriber through ListSubscribers, checking pages and counts.
  std::vector<v1::Subscriber> list_all(uint32_t page_size, uint32_t outer = 0,
                                       uint64_t* total = nullptr) {
    std::vector<v1::Subscriber> out;
    v1::ListSubscribersRequest req;
    req.set_page_size(page_size);
    req.set_outer_vlan(outer);
    for (;;) {
      v1::ListSubscribersResponse resp;
      grpc::ClientContext ctx;
      auto st = stub_->ListSubscribers(&ctx, req, &resp);
      EXPECT_TRUE(st.ok()) << st.error_message();
      if (!st.ok()) break;
      if (total) *total = resp.total_count();
      for (auto& s : *resp.mutable_subscribers()) out.push_back(std::move(s));
      if (resp.next_page_token().empty()) break;
      EXPECT_EQ(resp.subscribers_size(), static_cast<int>(page_size));
      req.set_page_token(resp.next_page_token());
    }
    return out;
  }
  // The routes of the direct pools of unit u, by the hash map's key bytes.
  std::map<std::string, struct xbng_route> direct_routes_of(DirectUnit u) {
    PinnedMaps m(bpffs_);
    DirectLayout d;
    EXPECT_EQ(direct_read_layout(m.fd(MapId::kDirectPools), m.fd(MapId::kDirectPoolsV6), &d), 0);
    std::map<std::string, struct xbng_route> got;
    const size_t ks = direct_key_size(u);
    EXPECT_EQ(direct_for_each(m.fd(direct_array_map(u)), d, u,
                              [&](const void* k, const struct xbng_route& r) {
                                got[std::string(static_cast<const char*>(k), ks)] = r;
                              }),
              0);
    return got;
  }
  uint64_t kernel_count(MapId id) {
    PinnedMaps m(bpffs_);
    switch (id) {
      case MapId::kSubscribers:
        return count_entries(m.fd(id), 8, sizeof(struct xbng_subscriber));
      case MapId::kRoutesV4:
        return count_entries(m.fd(id), 4, 32);
      case MapId::kRoutesV6:
        return count_entries(m.fd(id), 16, 32);
      case MapId::kRoutesV6_64:
        return count_entries(m.fd(id), 8, 32);
      case MapId::kPrefixesV4:
        return count_entries(m.fd(id), 8, 32);
      default:
        return count_entries(m.fd(id), 20, 32);
    }
  }
  uint64_t kernel_routes() {
    return kernel_count(MapId::kRoutesV4) + kernel_count(MapId::kRoutesV6) +
           kernel_count(MapId::kRoutesV6_64) + kernel_count(MapId::kPrefixesV4) +
           kernel_count(MapId::kPrefixesV6);
  }

  std::string bpffs_, socket_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<v1::Subscribers::Stub> stub_;
};

// ---- validation ---------------------------------------------------------------

struct BadCase {
  const char* what;
  std::function<void(v1::Subscriber&)> mutate;
  StatusCode code;
  const char* field;
  const char* value;
};

TEST_F(AgentTest, EveryValidationErrorIsPreciseAndChangesNothing) {
  start();
  const std::vector<BadCase> cases = {
      {"outer 0", [](auto& s) { s.set_outer_vlan(0); }, StatusCode::INVALID_ARGUMENT, "outer_vlan",
       "0"},
      {"outer 4095", [](auto& s) { s.set_outer_vlan(4095); }, StatusCode::INVALID_ARGUMENT,
       "outer_vlan", "4095"},
      {"inner 0", [](auto& s) { s.set_inner_vlan(0); }, StatusCode::INVALID_ARGUMENT, "inner_vlan",
       "0"},
      {"inner 5000", [](auto& s) { s.set_inner_vlan(5000); }, StatusCode::INVALID_ARGUMENT,
       "inner_vlan", "5000"},
      {"uplink port", [](auto& s) { s.set_port("upl0"); }, StatusCode::INVALID_ARGUMENT, "port",
       "upl0"},
      {"unknown port", [](auto& s) { s.set_port("eth9"); }, StatusCode::INVALID_ARGUMENT, "port",
       "eth9"},
      {"zero mac", [](auto& s) { s.set_mac("00:00:00:00:00:00"); }, StatusCode::INVALID_ARGUMENT,
       "mac", "00:00:00:00:00:00"},
      {"multicast mac", [](auto& s) { s.set_mac("01:00:5e:00:00:01"); },
       StatusCode::INVALID_ARGUMENT, "mac", "01:00:5e:00:00:01"},
      {"bad mac", [](auto& s) { s.set_mac("02:00:00"); }, StatusCode::INVALID_ARGUMENT, "mac",
       "02:00:00"},
      {"ipv4 0/8", [](auto& s) { s.set_ipv4("0.0.0.1"); }, StatusCode::INVALID_ARGUMENT, "ipv4",
       "0.0.0.1"},
      {"ipv4 loopback", [](auto& s) { s.set_ipv4("127.0.0.2"); }, StatusCode::INVALID_ARGUMENT,
       "ipv4", "127.0.0.2"},
      {"ipv4 multicast", [](auto& s) { s.set_ipv4("224.1.1.1"); }, StatusCode::INVALID_ARGUMENT,
       "ipv4", "224.1.1.1"},
      {"ipv4 240/4", [](auto& s) { s.set_ipv4("250.0.0.1"); }, StatusCode::INVALID_ARGUMENT, "ipv4",
       "250.0.0.1"},
      {"ipv4 garbage", [](auto& s) { s.set_ipv4("100.64.0"); }, StatusCode::INVALID_ARGUMENT,
       "ipv4", "100.64.0"},
      {"ipv6 link-local", [](auto& s) { s.set_ipv6("fe80::5"); }, StatusCode::INVALID_ARGUMENT,
       "ipv6", "fe80::5"},
      {"ipv6 ula", [](auto& s) { s.set_ipv6("fd00::5"); }, StatusCode::INVALID_ARGUMENT, "ipv6",
       "fd00::5"},
      {"no address",
       [](auto& s) {
         s.clear_ipv4();
         s.clear_ipv6();
       },
       StatusCode::INVALID_ARGUMENT, "ipv4", ""},
      {"v6 prefix /39", [](auto& s) { s.add_ipv6_prefixes("2001:db8::/39"); },
       StatusCode::INVALID_ARGUMENT, "ipv6_prefixes[1]", "2001:db8::/39"},
      {"v6 prefix /65", [](auto& s) { s.add_ipv6_prefixes("2001:db8:ffff::/65"); },
       StatusCode::INVALID_ARGUMENT, "ipv6_prefixes[1]", "2001:db8:ffff::/65"},
      {"v6 prefix host bits", [](auto& s) { s.add_ipv6_prefixes("2001:db8:ffff:1::/56"); },
       StatusCode::INVALID_ARGUMENT, "ipv6_prefixes[1]", "2001:db8:ffff:1::/56"},
      {"v4 prefix /7", [](auto& s) { s.add_ipv4_prefixes("10.0.0.0/7"); },
       StatusCode::INVALID_ARGUMENT, "ipv4_prefixes[0]", "10.0.0.0/7"},
      {"v4 prefix /32", [](auto& s) { s.add_ipv4_prefixes("198.51.100.1/32"); },
       StatusCode::INVALID_ARGUMENT, "ipv4_prefixes[0]", "198.51.100.1/32"},
      {"v4 prefix host bits", [](auto& s) { s.add_ipv4_prefixes("198.51.100.1/28"); },
       StatusCode::INVALID_ARGUMENT, "ipv4_prefixes[0]", "198.51.100.1/28"},
  };
  for (const auto& c : cases) {
    auto s = make_sub(10, 20);
    c.mutate(s);
    grpc::Status st = upsert({make_sub(10, 1), s});
    EXPECT_EQ(st.error_code(), c.code) << c.what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("subscribers[1]"), std::string::npos)
        << c.what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(c.field), std::string::npos)
        << c.what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(c.value), std::string::npos)
        << c.what << ": " << st.error_message();
  }
  uint64_t total = 99;
  EXPECT_TRUE(list_all(100, 0, &total).empty());
  EXPECT_EQ(total, 0u);
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 0u);
  EXPECT_EQ(kernel_routes(), 0u);
}

TEST_F(AgentTest, BatchIsAllOrNothing) {
  start();
  std::vector<v1::Subscriber> batch;
  for (uint32_t i = 1; i <= 10; ++i) batch.push_back(make_sub(200, i));
  batch[7].set_ipv4("127.0.0.1");
  auto st = upsert(batch);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("subscribers[7]"), std::string::npos) << st.error_message();
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 0u);
  EXPECT_EQ(kernel_routes(), 0u);
  batch[7] = make_sub(200, 8);
  v1::UpsertSubscribersResponse r;
  ASSERT_TRUE(upsert(batch, &r).ok());
  EXPECT_EQ(r.created(), 10u);
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 10u);
  EXPECT_EQ(kernel_routes(), 30u);
}

TEST_F(AgentTest, ConflictsNameTheOwner) {
  start();
  ASSERT_TRUE(upsert({make_sub(1, 1)}).ok());
  // Against an existing owner.
  auto s = make_sub(1, 2);
  s.set_ipv4(make_sub(1, 1).ipv4());
  auto st = upsert({make_sub(1, 3), s});
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("acc0/1/1"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("ipv4"), std::string::npos) << st.error_message();
  // Prefix owned by another subscriber.
  s = make_sub(1, 2);
  s.clear_ipv6_prefixes();
  s.add_ipv6_prefixes(make_sub(1, 1).ipv6_prefixes(0));
  st = upsert({s});
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("ipv6_prefixes"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("acc0/1/1"), std::string::npos) << st.error_message();
  // Inside one batch.
  auto a = make_sub(2, 1), b = make_sub(2, 2);
  b.set_ipv6(a.ipv6());
  st = upsert({a, b});
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("acc0/2/1"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("ipv6"), std::string::npos) << st.error_message();
  // Same key twice in one request.
  st = upsert({make_sub(3, 1), make_sub(3, 1)});
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 1u);
  EXPECT_EQ(kernel_routes(), 3u);
  // An address may move between two subscribers of the same request.
  auto moved_from = make_sub(1, 1);
  moved_from.set_ipv4("100.99.0.1");
  auto moved_to = make_sub(1, 2);
  moved_to.set_ipv4(make_sub(1, 1).ipv4());
  v1::UpsertSubscribersResponse r;
  ASSERT_TRUE(upsert({moved_to, moved_from}, &r).ok());
  EXPECT_EQ(r.created(), 1u);
  EXPECT_EQ(r.updated(), 1u);
  v1::Subscriber g;
  ASSERT_TRUE(get(1, 2, &g).ok());
  EXPECT_EQ(g.ipv4(), make_sub(1, 1).ipv4());
  EXPECT_EQ(kernel_count(MapId::kRoutesV4), 2u);
}

// Nested overlaps between different subscribers (a host inside another's
// prefix, prefixes nested in each other) are refused like exact duplicates;
// a subscriber may overlap itself.
TEST_F(AgentTest, NestedOverlapsAreRefused) {
  start();
  auto mk = [](uint32_t inner, const std::string& v4, const std::string& v6,
               std::vector<std::string> v6p = {}, std::vector<std::string> v4p = {}) {
    auto s = make_sub(10, inner);
    s.set_ipv4(v4);
    s.set_ipv6(v6);
    s.clear_ipv6_prefixes();
    for (const auto& p : v6p) s.add_ipv6_prefixes(p);
    for (const auto& p : v4p) s.add_ipv4_prefixes(p);
    return s;
  };
  // Each overlaps itself: host inside its own prefixes, a /64 inside its /48.
  const auto a = mk(1, "100.80.0.1", "2001:db8:a::1", {"2001:db8:a::/48", "2001:db8:a:1::/64"},
                    {"100.80.0.0/16"});
  const auto b = mk(2, "100.71.0.1", "2001:db8:b:100::1",
                    {"2001:db8:b:100::/56", "2001:db8:bb:1::/64"}, {"100.90.1.0/24"});
  const auto h = mk(4, "100.73.0.1", "2001:db8:dd::1");
  ASSERT_TRUE(upsert({a, b, h}).ok());
  ASSERT_TRUE(upsert({a}).ok());  // again: unchanged, still fine
  const uint64_t routes = kernel_routes();
  ASSERT_EQ(routes, 12u);

  struct Case {
    const char* what;
    v1::Subscriber sub;
    std::vector<std::string> want;  // substrings of the message
  };
  const std::string c4 = "100.72.0.1", c6 = "2001:db8:c::1";
  const std::vector<Case> cases = {
      {"v6 prefix inside a shorter one",
       mk(3, c4, c6, {"2001:db8:a:200::/56"}),
       {"ipv6_prefixes", "\"2001:db8:a:200::/56\"", "\"2001:db8:a::/48\"", "acc0/10/1"}},
      {"v6 /64 inside a /56",
       mk(3, c4, c6, {"2001:db8:b:1a0::/64"}),
       {"ipv6_prefixes", "\"2001:db8:b:1a0::/64\"", "\"2001:db8:b:100::/56\"", "acc0/10/2"}},
      {"v6 prefix containing a longer one",
       mk(3, c4, c6, {"2001:db8:b::/48"}),
       {"ipv6_prefixes", "\"2001:db8:b::/48\"", "\"2001:db8:b:100::/56\"", "acc0/10/2"}},
      {"v6 prefix containing a /64",
       mk(3, c4, c6, {"2001:db8:bb::/56"}),
       {"ipv6_prefixes", "\"2001:db8:bb::/56\"", "\"2001:db8:bb:1::/64\"", "acc0/10/2"}},
      {"v6 host inside a prefix",
       mk(3, c4, "2001:db8:a:5::9"),
       {"field ipv6:", "\"2001:db8:a:5::9\"", "\"2001:db8:a::/48\"", "acc0/10/1"}},
      {"v6 prefix containing a host",
       mk(3, c4, c6, {"2001:db8:dd::/48"}),
       {"ipv6_prefixes", "\"2001:db8:dd::/48\"", "ipv6 \"2001:db8:dd::1\"", "acc0/10/4"}},
      {"v6 /64 containing a host",
       mk(3, c4, c6, {"2001:db8:dd::/64"}),
       {"ipv6_prefixes", "\"2001:db8:dd::/64\"", "ipv6 \"2001:db8:dd::1\"", "acc0/10/4"}},
      {"v4 host inside a prefix",
       mk(3, "100.80.3.4", c6),
       {"field ipv4:", "\"100.80.3.4\"", "\"100.80.0.0/16\"", "acc0/10/1"}},
      {"v4 prefix inside a shorter one",
       mk(3, c4, c6, {}, {"100.80.2.0/24"}),
       {"ipv4_prefixes", "\"100.80.2.0/24\"", "\"100.80.0.0/16\"", "acc0/10/1"}},
      {"v4 prefix containing a longer one",
       mk(3, c4, c6, {}, {"100.90.0.0/16"}),
       {"ipv4_prefixes", "\"100.90.0.0/16\"", "\"100.90.1.0/24\"", "acc0/10/2"}},
      {"v4 prefix containing a host",
       mk(3, c4, c6, {}, {"100.73.0.0/24"}),
       {"ipv4_prefixes", "\"100.73.0.0/24\"", "ipv4 \"100.73.0.1\"", "acc0/10/4"}},
  };
  for (const auto& c : cases) {
    auto st = upsert({c.sub});
    EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION) << c.what;
    for (const auto& w : c.want)
      EXPECT_NE(st.error_message().find(w), std::string::npos)
          << c.what << ": \"" << w << "\" not in: " << st.error_message();
    EXPECT_NE(st.error_message().find("subscribers[0]"), std::string::npos) << st.error_message();
    EXPECT_EQ(get(10, 3, nullptr).error_code(), StatusCode::NOT_FOUND) << c.what;
    // An existing subscriber taking the same thing: refused, left as it was.
    auto upd = c.sub;
    upd.set_inner_vlan(4);
    upd.set_mac(h.mac());
    if (c.sub.ipv4() == c4) upd.set_ipv4(h.ipv4());
    if (c.sub.ipv6() == c6) upd.set_ipv6(h.ipv6());
    if (std::string(c.what).find("containing a host") == std::string::npos) {
      st = upsert({upd});
      EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION) << c.what << " (update)";
      v1::Subscriber g;
      ASSERT_TRUE(get(10, 4, &g).ok());
      EXPECT_EQ(g.ipv6_prefixes_size(), 0) << c.what;
      EXPECT_EQ(g.ipv4_prefixes_size(), 0) << c.what;
    }
    // In a stream: reported, the rest applied.
    auto resp = stream({c.sub});
    EXPECT_EQ(resp.applied(), 0u) << c.what;
    ASSERT_EQ(resp.failures_size(), 1) << c.what;
    EXPECT_EQ(resp.failures(0).code(), static_cast<int>(StatusCode::FAILED_PRECONDITION));
    EXPECT_NE(resp.failures(0).message().find(c.want[2]), std::string::npos)
        << resp.failures(0).message();
  }
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 3u);
  EXPECT_EQ(kernel_routes(), routes);

  // Inside one request, whichever comes first.
  const auto p48 = mk(5, "100.74.0.1", "2001:db8:e0::1", {"2001:db8:e::/48"}, {"100.100.0.0/16"});
  const auto in_p48 = mk(6, "100.74.0.2", "2001:db8:e:7::1");
  const auto in_v4 = mk(7, "100.100.9.9", "2001:db8:e1::1");
  const auto p64 = mk(8, "100.74.0.3", "2001:db8:e2::1", {"2001:db8:e:8::/64"});
  for (const auto& [x, y, want] :
       std::vector<std::tuple<v1::Subscriber, v1::Subscriber, std::string>>{
           {p48, in_p48, "\"2001:db8:e::/48\""},
           {in_p48, p48, "\"2001:db8:e:7::1\""},
           {p48, in_v4, "\"100.100.0.0/16\""},
           {in_v4, p48, "\"100.100.9.9\""},
           {p48, p64, "\"2001:db8:e::/48\""},
           {p64, p48, "\"2001:db8:e:8::/64\""}}) {
    auto st = upsert({x, y});
    EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION) << want;
    EXPECT_NE(st.error_message().find(want), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find("in this request"), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find("subscribers[1]"), std::string::npos) << st.error_message();
    // A stream keeps the first and reports the second.
    auto resp = stream({x, y});
    EXPECT_EQ(resp.applied(), 1u) << want;
    ASSERT_EQ(resp.failures_size(), 1) << want;
    EXPECT_EQ(resp.failures(0).index(), 1u);
    EXPECT_NE(resp.failures(0).message().find(want), std::string::npos)
        << resp.failures(0).message();
    v1::DeleteSubscribersResponse dr;
    ASSERT_TRUE(del({{10, x.inner_vlan()}}, &dr).ok());
    EXPECT_EQ(dr.deleted(), 1u);
  }
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 3u);
  EXPECT_EQ(kernel_routes(), routes);

  // A prefix given up in the same request may be taken inside it.
  auto b2 = b;
  b2.clear_ipv6_prefixes();
  b2.add_ipv6_prefixes("2001:db8:bb:1::/64");
  ASSERT_TRUE(upsert({mk(3, c4, c6, {"2001:db8:b:1a0::/64"}), b2}).ok());

  // Once the owner is gone, the overlapping entry is accepted.
  v1::DeleteSubscribersResponse dr;
  ASSERT_TRUE(del({{10, 1}}, &dr).ok());
  ASSERT_TRUE(
      upsert({mk(9, "100.80.3.4", "2001:db8:a:5::9", {"2001:db8:a:200::/56"}, {"100.80.2.0/24"})})
          .ok());
  // The index follows deletions and restarts.
  stop();
  start();
  auto st = upsert({mk(11, "100.80.2.7", "2001:db8:a:2ff::1")});
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("acc0/10/9"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("\"100.80.2.0/24\""), std::string::npos) << st.error_message();
}

TEST_F(AgentTest, UpsertIsIdempotent) {
  start();
  v1::UpsertSubscribersResponse r;
  ASSERT_TRUE(upsert({make_sub(5, 5), make_sub(5, 6)}, &r).ok());
  EXPECT_EQ(r.created(), 2u);
  ASSERT_TRUE(upsert({make_sub(5, 5), make_sub(5, 6)}, &r).ok());
  EXPECT_EQ(r.created(), 0u);
  EXPECT_EQ(r.updated(), 0u);
  EXPECT_EQ(r.unchanged(), 2u);
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 2u);
  EXPECT_EQ(kernel_routes(), 6u);
}

TEST_F(AgentTest, ReplaceNeverLosesTheSubscriber) {
  start();
  ASSERT_TRUE(upsert({make_sub(7, 7)}).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> missing{0}, reads{0};
  std::thread reader([&] {
    CtlOptions co;
    co.server = socket_;
    auto stub = v1::Subscribers::NewStub(make_channel(co));
    while (!stop) {
      v1::GetSubscriberRequest req;
      req.mutable_key()->set_port("acc0");
      req.mutable_key()->set_outer_vlan(7);
      req.mutable_key()->set_inner_vlan(7);
      v1::GetSubscriberResponse resp;
      grpc::ClientContext ctx;
      if (!stub->GetSubscriber(&ctx, req, &resp).ok()) ++missing;
      ++reads;
    }
  });
  for (int i = 0; i < 200; ++i) {
    auto s = make_sub(7, 7);
    s.set_ipv4(fmt::format("100.70.{}.{}", i / 200, 1 + i % 200));
    s.set_ipv6(fmt::format("2001:db8:77::{:x}", i + 1));
    s.clear_ipv6_prefixes();
    s.add_ipv6_prefixes(fmt::format("2001:db8:7000:{:x}::/64", i));
    ASSERT_TRUE(upsert({s}).ok());
  }
  stop = true;
  reader.join();
  EXPECT_EQ(missing.load(), 0);
  EXPECT_GT(reads.load(), 0);
  // Final state: only the last routes remain.
  EXPECT_EQ(kernel_count(MapId::kRoutesV4), 1u);
  EXPECT_EQ(kernel_count(MapId::kRoutesV6), 1u);
  EXPECT_EQ(kernel_count(MapId::kRoutesV6_64), 1u);
  PinnedMaps m(bpffs_);
  uint32_t last = *parse_ipv4("100.70.0.200");
  struct xbng_route r;
  ASSERT_EQ(bpf_map_lookup_elem(m.fd(MapId::kRoutesV4), &last, &r), 0);
  EXPECT_EQ(r.sub.outer_vid, 7);
  EXPECT_TRUE(r.flags & XBNG_ROUTE_F_MAC_VALID);
}

// Direct routes: an IPv4 /32 inside a direct pool lives only in the array
// (slot = offset), the others in the hash; counters are read and carried
// over from wherever the route lives; a restart adopts the array; a
// restart with other pools moves the routes between the two places.
TEST_F(AgentTest, DirectRoutesLiveInTheArrayAndMoveWithThePools) {
  const std::vector<std::string> pools = {"100.70.0.0/24"};
  start(4096, 256, pools);
  auto in = make_sub(13, 1), out = make_sub(13, 2);
  in.set_ipv4("100.70.0.5");
  out.set_ipv4("100.71.0.5");
  ASSERT_TRUE(upsert({in, out}).ok());
  auto direct_routes = [&] {
    std::map<uint32_t, struct xbng_route> got;
    for (auto& [k, r] : direct_routes_of(DirectUnit::kV4)) {
      uint32_t be;
      std::memcpy(&be, k.data(), 4);
      got[be] = r;
    }
    return got;
  };
  const uint32_t a_in = *parse_ipv4("100.70.0.5");
  EXPECT_EQ(kernel_count(MapId::kRoutesV4), 1u);  // only the address outside
  {
    auto got = direct_routes();
    ASSERT_EQ(got.size(), 1u);
    ASSERT_TRUE(got.count(a_in));
    EXPECT_EQ(got[a_in].sub.outer_vid, 13);
    EXPECT_EQ(got[a_in].sub.inner_vid, 1);
    EXPECT_TRUE(got[a_in].flags & XBNG_ROUTE_F_MAC_VALID);
    // What the fast path does: count in the slot (offset 5 in the pool).
    PinnedMaps m(bpffs_);
    uint32_t slot = 5;
    struct xbng_direct_route e;
    ASSERT_EQ(bpf_map_lookup_elem(m.fd(MapId::kDirectV4), &slot, &e), 0);
    EXPECT_EQ(std::memcmp(&e.r, &got[a_in], sizeof e.r), 0);
    e.r.down_packets = 7;
    e.r.down_bytes = 700;
    ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kDirectV4), &slot, &e, BPF_EXIST), 0);
  }
  auto down = [&](uint32_t inner) {
    v1::Subscriber g;
    EXPECT_TRUE(get(13, inner, &g).ok());
    return g.counters().down_packets();
  };
  EXPECT_EQ(down(1), 7u);
  in.clear_ipv6_prefixes();  // an update rewrites the route: the counters stay
  ASSERT_TRUE(upsert({in}).ok());
  EXPECT_EQ(down(1), 7u);

  stop();  // a restart adopts what the array holds
  start(4096, 256, pools);
  EXPECT_EQ(down(1), 7u);
  EXPECT_EQ(direct_routes().size(), 1u);
  EXPECT_EQ(kernel_count(MapId::kRoutesV4), 1u);

  stop();  // the pool no longer declared: its routes move into the hash
  start(4096, 256, {});
  EXPECT_EQ(direct_routes().size(), 0u);
  EXPECT_EQ(kernel_count(MapId::kRoutesV4), 2u);
  EXPECT_EQ(down(1), 7u);

  stop();  // declared again: back into the array
  start(4096, 256, pools);
  EXPECT_EQ(direct_routes().size(), 1u);
  EXPECT_EQ(kernel_count(MapId::kRoutesV4), 1u);
  EXPECT_EQ(down(1), 7u);

  v1::DeleteSubscribersResponse r;  // a delete empties the slot
  ASSERT_TRUE(del({{13, 1}}, &r).ok());
  EXPECT_EQ(r.deleted(), 1u);
  EXPECT_EQ(direct_routes().size(), 0u);
  auto again = make_sub(13, 3);  // and the address can be held again
  again.set_ipv4("100.70.0.5");
  ASSERT_TRUE(upsert({again}).ok());
  ASSERT_EQ(direct_routes().size(), 1u);
  EXPECT_EQ(direct_routes().begin()->second.sub.inner_vid, 3);
  EXPECT_EQ(down(3), 0u);
}

// IPv6 direct routes: a /128 inside a pool of /128s and a delegated /64
// inside a pool of /64s live only in direct_v6, another subscriber's /128
// and /64 outside them in the hashes; counters are read from the slots and
// carried over; a restart adopts the array; the pools removed, the routes
// move into the hashes, and back when declared again; a delete empties the
// slots. A third subscriber's /128 inside a /64 of the pool nobody
// delegated stays in the hash, counted in that /64's line (n128) through
// every restart and move, uncounted when deleted.
TEST_F(AgentTest, DirectRoutesV6LiveInTheArrayAndMoveWithThePools) {
  // The /128s first (slots 0..255), then the /56's /64s (256..511).
  const std::vector<std::string> pools = {"2001:db8:67::/120", "2001:db8:6600::/56"};
  start(4096, 0, pools, 512);
  auto in = make_sub(14, 1), out = make_sub(14, 2);
  in.set_ipv6("2001:db8:67::5");
  in.clear_ipv6_prefixes();
  in.add_ipv6_prefixes("2001:db8:6600:7::/64");
  out.set_ipv6("2001:db8:68::5");
  out.clear_ipv6_prefixes();
  out.add_ipv6_prefixes("2001:db8:6700:7::/64");
  auto lone = make_sub(14, 3);
  lone.set_ipv6("2001:db8:6600:9::1");  // the /56's /64 number 9: slot 256 + 9
  lone.clear_ipv6_prefixes();
  ASSERT_TRUE(upsert({in, out, lone}).ok());
  auto n128 = [&](uint32_t slot) {
    PinnedMaps m(bpffs_);
    struct xbng_direct_route e {};
    EXPECT_EQ(bpf_map_lookup_elem(m.fd(MapId::kDirectV6), &slot, &e), 0);
    return e.n128;
  };
  auto addr = [](const char* text) { return parse_prefix(std::string(text) + "/128")->addr; };
  auto a128 = addr("2001:db8:67::5"), a64 = addr("2001:db8:6600:7::");
  auto check = [&](size_t in_array, size_t in_hashes) {
    auto d128 = direct_routes_of(DirectUnit::kV6_128), d64 = direct_routes_of(DirectUnit::kV6_64);
    EXPECT_EQ(d128.size(), in_array);
    EXPECT_EQ(d64.size(), in_array);
    if (in_array) {
      ASSERT_TRUE(d128.count(std::string(a128.begin(), a128.end())));
      ASSERT_TRUE(d64.count(std::string(a64.begin(), a64.begin() + 8)));
      EXPECT_EQ(d64.begin()->second.sub.inner_vid, 1);
    }
    EXPECT_EQ(kernel_count(MapId::kRoutesV6), in_hashes + 1);  // and lone's /128
    EXPECT_EQ(kernel_count(MapId::kRoutesV6_64), in_hashes);
    if (in_array) {
      EXPECT_EQ(n128(256 + 9), 1u);
      EXPECT_EQ(n128(256 + 7), 0u);
    }
  };
  check(1, 1);  // only the other subscriber's in the hashes
  {
    // What the fast path does: count in the slots.
    PinnedMaps m(bpffs_);
    for (auto [slot, n] : {std::pair<uint32_t, uint64_t>{5, 7}, {256 + 7, 5}}) {
      struct xbng_direct_route e;
      ASSERT_EQ(bpf_map_lookup_elem(m.fd(MapId::kDirectV6), &slot, &e), 0);
      ASSERT_EQ(e.r.sub.inner_vid, 1);
      e.r.down_packets = n;
      ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kDirectV6), &slot, &e, BPF_EXIST), 0);
    }
  }
  auto down = [&](uint32_t inner) {
    v1::Subscriber g;
    EXPECT_TRUE(get(14, inner, &g).ok());
    return g.counters().down_packets();
  };
  EXPECT_EQ(down(1), 12u);
  stop();  // a restart adopts what the array holds
  start(4096, 0, pools, 512);
  EXPECT_EQ(down(1), 12u);
  check(1, 1);
  stop();  // the pools no longer declared: their routes move into the hashes
  start(4096, 0, {}, 512);
  check(0, 2);
  EXPECT_EQ(down(1), 12u);
  stop();  // declared again: back into the array
  start(4096, 0, pools, 512);
  check(1, 1);
  EXPECT_EQ(down(1), 12u);
  v1::DeleteSubscribersResponse r;  // a delete empties the slots
  ASSERT_TRUE(del({{14, 1}}, &r).ok());
  EXPECT_EQ(r.deleted(), 1u);
  check(0, 1);
  EXPECT_EQ(n128(256 + 9), 1u);
  ASSERT_TRUE(del({{14, 3}}, &r).ok());
  EXPECT_EQ(n128(256 + 9), 0u);
}

// Direct subscribers: a key inside a declared S-VLAN range lives only in the
// array (slot = (S-VID - first) * 4096 + C-VID), the others in the hash;
// counters are read and carried over from wherever the subscriber lives; a
// restart adopts the array; a restart with other ranges moves the
// subscribers between the two places.
TEST_F(AgentTest, DirectSubscribersLiveInTheArrayAndMoveWithTheRanges) {
  const std::vector<std::pair<uint16_t, uint16_t>> svlans = {{20, 21}};
  const uint32_t slots = 2 * XBNG_DIRECT_SUB_CVIDS;
  start(4096, 0, {}, 0, svlans, slots);
  auto in = make_sub(21, 5), out = make_sub(22, 5);
  ASSERT_TRUE(upsert({in, out}).ok());
  auto direct_subs = [&] {
    PinnedMaps m(bpffs_);
    DirectSubLayout d;
    EXPECT_EQ(direct_sub_read_layout(m.fd(MapId::kDirectSubRanges), &d), 0);
    std::map<std::pair<uint16_t, uint16_t>, struct xbng_subscriber> got;
    EXPECT_EQ(
        direct_sub_for_each(m.fd(MapId::kDirectSubs), d,
                            [&](const struct xbng_sub_key& k, const struct xbng_subscriber& v) {
                              got[{k.outer_vid, k.inner_vid}] = v;
                            }),
        0);
    return got;
  };
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 1u);  // only the key outside
  {
    auto got = direct_subs();
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(got.count({21, 5}), 1u);
    const struct xbng_subscriber& v = got[std::make_pair(uint16_t{21}, uint16_t{5})];
    EXPECT_TRUE(v.flags & XBNG_SUB_F_MAC_VALID);
    EXPECT_FALSE(v.flags & XBNG_SUB_F_PRESENT);  // stripped on reading
    // What the fast path does: count in the slot ((21 - 20) * 4096 + 5).
    PinnedMaps m(bpffs_);
    uint32_t slot = XBNG_DIRECT_SUB_CVIDS + 5;
    struct xbng_subscriber e;
    ASSERT_EQ(bpf_map_lookup_elem(m.fd(MapId::kDirectSubs), &slot, &e), 0);
    EXPECT_TRUE(e.flags & XBNG_SUB_F_PRESENT);
    e.up_packets = 9;
    e.up_bytes = 900;
    ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kDirectSubs), &slot, &e, BPF_EXIST), 0);
  }
  auto up = [&](uint32_t outer, uint32_t inner) {
    v1::Subscriber g;
    EXPECT_TRUE(get(outer, inner, &g).ok());
    return g.counters().up_packets();
  };
  EXPECT_EQ(up(21, 5), 9u);
  in.clear_ipv6_prefixes();  // an update rewrites the entry: the counters stay
  ASSERT_TRUE(upsert({in}).ok());
  EXPECT_EQ(up(21, 5), 9u);

  stop();  // a restart adopts what the array holds
  start(4096, 0, {}, 0, svlans, slots);
  EXPECT_EQ(up(21, 5), 9u);
  EXPECT_EQ(direct_subs().size(), 1u);
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 1u);

  stop();  // the range no longer declared: its subscribers move into the hash
  start(4096, 0, {}, 0, {}, slots);
  EXPECT_EQ(direct_subs().size(), 0u);
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 2u);
  EXPECT_EQ(up(21, 5), 9u);

  stop();  // another range: both keys in the array
  start(4096, 0, {}, 0, {{21, 22}}, slots);
  EXPECT_EQ(direct_subs().size(), 2u);
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 0u);
  EXPECT_EQ(up(21, 5), 9u);

  v1::DeleteSubscribersResponse r;  // a delete empties the slot
  ASSERT_TRUE(del({{21, 5}}, &r).ok());
  EXPECT_EQ(r.deleted(), 1u);
  EXPECT_EQ(direct_subs().size(), 1u);
  EXPECT_EQ(get(21, 5, nullptr).error_code(), StatusCode::NOT_FOUND);
  ASSERT_TRUE(upsert({make_sub(21, 5)}).ok());  // and the key can be provisioned again
  EXPECT_EQ(direct_subs().size(), 2u);
  EXPECT_EQ(up(21, 5), 0u);
}

TEST_F(AgentTest, DeleteMissingIsOk) {
  start();
  ASSERT_TRUE(upsert({make_sub(9, 1), make_sub(9, 2)}).ok());
  v1::DeleteSubscribersResponse r;
  ASSERT_TRUE(del({{9, 1}, {9, 3}}, &r).ok());
  EXPECT_EQ(r.deleted(), 1u);
  EXPECT_EQ(r.not_found(), 1u);
  EXPECT_EQ(get(9, 1, nullptr).error_code(), StatusCode::NOT_FOUND);
  EXPECT_TRUE(get(9, 2, nullptr).ok());
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 1u);
  EXPECT_EQ(kernel_routes(), 3u);
  // The freed addresses can be reused by someone else.
  auto s = make_sub(9, 4);
  s.set_ipv4(make_sub(9, 1).ipv4());
  EXPECT_TRUE(upsert({s}).ok());
}

TEST_F(AgentTest, GetReportsAndUpdatesKeepCounters) {
  start();
  auto s = make_sub(11, 1);
  s.set_mac("");  // learn
  ASSERT_TRUE(upsert({s}).ok());
  {
    PinnedMaps m(bpffs_);
    struct xbng_sub_key k {};
    k.ifindex = agent_->dataplane().ports()[0].ifindex;
    k.outer_vid = 11;
    k.inner_vid = 1;
    struct xbng_subscriber v;
    ASSERT_EQ(bpf_map_lookup_elem(m.fd(MapId::kSubscribers), &k, &v), 0);
    EXPECT_TRUE(v.flags & XBNG_SUB_F_LEARN_MAC);
    // What the fast path does: learn the MAC, count.
    v.up_packets = 5;
    v.up_bytes = 500;
    v.flags |= XBNG_SUB_F_MAC_VALID;
    uint8_t mac[6] = {0x02, 0xaa, 0, 0, 0, 1};
    std::memcpy(v.mac, mac, 6);
    ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kSubscribers), &k, &v, BPF_EXIST), 0);
    uint32_t a = *parse_ipv4(s.ipv4());
    struct xbng_route r;
    ASSERT_EQ(bpf_map_lookup_elem(m.fd(MapId::kRoutesV4), &a, &r), 0);
    r.down_packets = 7;
    r.down_bytes = 700;
    ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kRoutesV4), &a, &r, BPF_EXIST), 0);
    auto v6 = *parse_ipv6(s.ipv6());
    ASSERT_EQ(bpf_map_lookup_elem(m.fd(MapId::kRoutesV6), v6.data(), &r), 0);
    r.down_packets = 3;
    r.down_bytes = 300;
    ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kRoutesV6), v6.data(), &r, BPF_EXIST), 0);
  }
  v1::Subscriber g;
  ASSERT_TRUE(get(11, 1, &g).ok());
  EXPECT_EQ(g.counters().up_packets(), 5u);
  EXPECT_EQ(g.counters().up_bytes(), 500u);
  EXPECT_EQ(g.counters().down_packets(), 10u);
  EXPECT_EQ(g.counters().down_bytes(), 1000u);
  EXPECT_EQ(g.mac(), "02:aa:00:00:00:01");
  EXPECT_TRUE(g.mac_learned());
  // Update (new prefix, still learning): counters and the learned MAC stay.
  s.clear_ipv6_prefixes();
  s.add_ipv6_prefixes("2001:db8:5555::/48");
  v1::UpsertSubscribersResponse r;
  ASSERT_TRUE(upsert({s}, &r).ok());
  EXPECT_EQ(r.updated(), 1u);
  ASSERT_TRUE(get(11, 1, &g).ok());
  EXPECT_EQ(g.counters().up_packets(), 5u);
  EXPECT_EQ(g.counters().down_packets(), 10u);
  EXPECT_EQ(g.mac(), "02:aa:00:00:00:01");
  EXPECT_EQ(g.ipv6_prefixes(0), "2001:db8:5555::/48");
  EXPECT_EQ(kernel_count(MapId::kPrefixesV6), 1u);
  EXPECT_EQ(kernel_count(MapId::kRoutesV6_64), 0u);
}

TEST_F(AgentTest, CapacityIsEnforcedWithoutPartialApply) {
  start(64);
  std::vector<v1::Subscriber> many;
  for (uint32_t i = 1; i <= 65; ++i) many.push_back(make_sub(12, i));
  auto st = upsert(many);
  EXPECT_EQ(st.error_code(), StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("subscribers"), std::string::npos);
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 0u);
  EXPECT_EQ(kernel_routes(), 0u);
  auto resp = stream(many);
  EXPECT_EQ(resp.applied(), 64u);
  EXPECT_EQ(resp.failed(), 1u);
  ASSERT_EQ(resp.failures_size(), 1);
  EXPECT_EQ(resp.failures(0).index(), 64u);
  EXPECT_EQ(resp.failures(0).code(), static_cast<int>(StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 64u);
}

TEST_F(AgentTest, StreamReportsEachFailure) {
  start(20000);
  std::vector<v1::Subscriber> subs;
  for (uint32_t i = 0; i < 10000; ++i) subs.push_back(make_sub(100 + i / 4000, 1 + i % 4000));
  subs[3].set_ipv4("127.0.0.1");         // invalid
  subs[9000].set_ipv4(subs[10].ipv4());  // owned by entry 10 (earlier in the stream)
  subs[9001] = subs[9002];               // same key as 9002: applied in order
  subs[9001].set_ipv6("2001:db8:ffff::1");
  auto resp = stream(subs);
  EXPECT_EQ(resp.applied(), 9998u);
  EXPECT_EQ(resp.failed(), 2u);
  ASSERT_EQ(resp.failures_size(), 2);
  EXPECT_EQ(resp.failures(0).index(), 3u);
  EXPECT_EQ(resp.failures(0).code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(resp.failures(1).index(), 9000u);
  EXPECT_EQ(resp.failures(1).code(), static_cast<int>(StatusCode::FAILED_PRECONDITION));
  EXPECT_NE(resp.failures(1).message().find("acc0/"), std::string::npos);
  uint64_t total = 0;
  list_all(5000, 0, &total);
  EXPECT_EQ(total, 9997u);  // 10000 - 2 failed - 1 key given twice
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 9997u);
  v1::Subscriber g;
  ASSERT_TRUE(get(subs[9002].outer_vlan(), subs[9002].inner_vlan(), &g).ok());
  EXPECT_EQ(g.ipv6(), subs[9002].ipv6());  // the later entry won
}

TEST_F(AgentTest, PaginationIsExactAt100K) {
  start(120000);
  std::vector<v1::Subscriber> subs;
  const uint32_t n = 100000;
  for (uint32_t i = 0; i < n; ++i) subs.push_back(make_sub(1 + i / 4000, 1 + i % 4000));
  auto resp = stream(subs);
  ASSERT_EQ(resp.applied(), n);
  for (uint32_t page : {1000u, 7777u}) {
    uint64_t total = 0;
    auto all = list_all(page, 0, &total);
    EXPECT_EQ(total, n);
    ASSERT_EQ(all.size(), n);
    std::set<std::pair<uint32_t, uint32_t>> keys;
    for (const auto& s : all) keys.emplace(s.outer_vlan(), s.inner_vlan());
    EXPECT_EQ(keys.size(), n);  // no duplicate, none missing
    for (size_t i = 1; i < all.size(); ++i)
      ASSERT_LT(std::make_pair(all[i - 1].outer_vlan(), all[i - 1].inner_vlan()),
                std::make_pair(all[i].outer_vlan(), all[i].inner_vlan()));
  }
  uint64_t total = 0;
  auto outer5 = list_all(333, 5, &total);
  EXPECT_EQ(total, 4000u);
  EXPECT_EQ(outer5.size(), 4000u);
  for (const auto& s : outer5) EXPECT_EQ(s.outer_vlan(), 5u);
  // Port filter.
  v1::ListSubscribersRequest req;
  req.set_port("acc1");
  v1::ListSubscribersResponse lr;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->ListSubscribers(&ctx, req, &lr).ok());
  EXPECT_EQ(lr.total_count(), 0u);
  // A bad token is an error, not an empty page.
  req.set_port("");
  req.set_page_token("nonsense");
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub_->ListSubscribers(&ctx2, req, &lr).error_code(), StatusCode::INVALID_ARGUMENT);
}

TEST_F(AgentTest, GetStatsReportsReasonsPortsAndFill) {
  start();
  ASSERT_TRUE(upsert({make_sub(1, 1), make_sub(1, 2)}).ok());
  v1::GetStatsResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->GetStats(&ctx, v1::GetStatsRequest(), &resp).ok());
  // The fast path's reasons in enum order, then the agent's (bring-up).
  EXPECT_EQ(resp.reasons_size(), XBNG_REASON_MAX + static_cast<int>(agent_counters().size()));
  EXPECT_EQ(resp.reasons(XBNG_REASON_MAX).reason(), "punt_received");
  EXPECT_EQ(resp.reasons(XBNG_PUNT_DHCPV4).kind(), "punt");
  EXPECT_EQ(resp.reasons(XBNG_DROP_SPOOFED_V4).reason(), "drop_spoofed_ipv4");
  EXPECT_EQ(resp.reasons(XBNG_DROP_SPOOFED_V4).kind(), "drop");
  EXPECT_EQ(resp.reasons(XBNG_FWD_UPSTREAM).kind(), "forward");
  EXPECT_EQ(resp.ports_size(), 3);
  EXPECT_EQ(resp.subscribers(), 2u);
  bool seen = false;
  for (const auto& m : resp.maps())
    if (m.name() == "routes_v6_64") {
      seen = true;
      EXPECT_EQ(m.entries(), 0u);  // /56 prefixes live in the trie
      EXPECT_EQ(m.max_entries(), 4096u);
    } else if (m.name() == "prefixes_v6") {
      EXPECT_EQ(m.entries(), 2u);
    }
  EXPECT_TRUE(seen);
  EXPECT_EQ(resp.boot_id(), agent_->boot_id());
  auto md = ctx.GetServerInitialMetadata();
  auto it = md.find("xbng-boot-id");
  ASSERT_NE(it, md.end());
  EXPECT_EQ(std::string(it->second.data(), it->second.size()), agent_->boot_id());
}

TEST_F(AgentTest, WatchEventsStartsWithAgentStarted) {
  start();
  grpc::ClientContext ctx;
  auto reader = stub_->WatchEvents(&ctx, v1::WatchEventsRequest());
  v1::Event e;
  ASSERT_TRUE(reader->Read(&e));
  EXPECT_EQ(e.type(), v1::Event::AGENT_STARTED);
  EXPECT_EQ(e.boot_id(), agent_->boot_id());
  ASSERT_TRUE(upsert({make_sub(3, 3)}).ok());
  auto s = make_sub(3, 3);
  s.set_ipv4("100.99.9.9");
  ASSERT_TRUE(upsert({s}).ok());
  v1::DeleteSubscribersResponse dr;
  ASSERT_TRUE(del({{3, 3}}, &dr).ok());
  std::vector<v1::Event::Type> want = {v1::Event::SUBSCRIBER_ADDED, v1::Event::SUBSCRIBER_UPDATED,
                                       v1::Event::SUBSCRIBER_REMOVED};
  for (auto t : want) {
    ASSERT_TRUE(reader->Read(&e));
    EXPECT_EQ(e.type(), t);
    EXPECT_EQ(e.key().port(), "acc0");
    EXPECT_EQ(e.key().outer_vlan(), 3u);
    EXPECT_EQ(e.key().inner_vlan(), 3u);
  }
  ctx.TryCancel();
}

TEST_F(AgentTest, RestartAdoptsThePinnedMaps) {
  start(20000);
  std::vector<v1::Subscriber> subs;
  for (uint32_t i = 0; i < 5000; ++i) subs.push_back(make_sub(30 + i / 1000, 1 + i % 1000));
  subs[0].add_ipv4_prefixes("198.51.100.0/28");
  subs[1].set_mac("");
  ASSERT_EQ(stream(subs).applied(), 5000u);
  auto before = list_all(1000);
  const std::string boot1 = agent_->boot_id();
  EXPECT_FALSE(agent_->adopted());
  stop();  // no teardown: links and maps stay pinned
  EXPECT_TRUE(fs::exists(link_pin_path(bpffs_, "acc0")));
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 5000u);

  start(100);  // a different size is ignored: the pinned maps win
  EXPECT_TRUE(agent_->adopted());
  EXPECT_NE(agent_->boot_id(), boot1);
  uint64_t total = 0;
  auto after = list_all(1000, 0, &total);
  EXPECT_EQ(total, 5000u);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i)
    ASSERT_EQ(after[i].SerializeAsString(), before[i].SerializeAsString()) << i;
  // The rebuilt index still enforces ownership and idempotence.
  v1::UpsertSubscribersResponse r;
  ASSERT_TRUE(upsert({subs[0], subs[1], subs[2]}, &r).ok());
  EXPECT_EQ(r.unchanged(), 3u);
  auto s = make_sub(99, 99);
  s.set_ipv4(subs[4].ipv4());
  EXPECT_EQ(upsert({s}).error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(kernel_count(MapId::kSubscribers), 5000u);
}

// MAC policy with the fleet: under mac policy "follow" an upsert without
// MAC makes the subscriber learn again, but a full re-read of etcd (stream
// with resync) restates the same provisioning and must keep the learned MAC
// (else every fleet resync cuts downstream until each CPE sends a frame).
TEST_F(AgentTest, ResyncKeepsALearnedMacUnderFollow) {
  start();
  auto s = make_sub(7, 7);
  s.set_mac("");
  s.set_mac_policy(v1::MAC_POLICY_FOLLOW);
  ASSERT_TRUE(upsert({s}).ok());
  auto& store = agent_->store();
  const SubKey k{*agent_->dataplane().resolver().access_ifindex("acc0"), 7, 7};
  const Mac mac{2, 0, 0, 0, 0x77, 0x77};
  ASSERT_TRUE(store.learn_mac(k, mac).ok());
  auto learned = [&] {
    SubscriberSpec spec;
    std::optional<Mac> m;
    EXPECT_TRUE(store.binding(k, &spec, &m));
    return m;
  };
  ASSERT_EQ(learned(), mac);
  auto restate = [&](bool resync) {
    bool sent = false;
    StreamResult r;
    store.stream(stream_source(
                     [&](v1::Subscriber* m) {
                       if (sent) return false;
                       *m = s;
                       sent = true;
                       return true;
                     },
                     store.ports(), kOriginEtcd),
                 &r, resync);
    EXPECT_EQ(r.applied, 1u);
  };
  restate(/*resync=*/true);
  EXPECT_EQ(learned(), mac) << "a resync must not clear the learned MAC";
  restate(/*resync=*/false);
  EXPECT_FALSE(learned()) << "a request without MAC under follow learns again";
}

// A rejected value is quoted by a short prefix only, so a
// huge value neither bloats the status (gRPC caps its metadata at ~8 KB,
// which turned the error into a client-side RESOURCE_EXHAUSTED) nor costs
// memory to echo.
TEST_F(AgentTest, RejectedValuesAreQuotedByAShortPrefix) {
  start();
  for (auto field : {"mac", "ipv4", "ipv6", "ipv6_prefixes", "port"}) {
    auto s = make_sub(5, 5);
    const std::string huge(256 << 10, 'z');  // within api.max_request_bytes (512 KiB)
    const std::string f = field;
    if (f == "mac") s.set_mac(huge);
    if (f == "ipv4") s.set_ipv4(huge);
    if (f == "ipv6") s.set_ipv6(huge);
    if (f == "ipv6_prefixes") s.add_ipv6_prefixes(huge);
    if (f == "port") s.set_port(huge);
    auto st = upsert({s});
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT)
        << f << ": " << st.error_message().size();
    EXPECT_LT(st.error_message().size(), 300u) << f;
    EXPECT_NE(st.error_message().find("(262144 bytes)"), std::string::npos) << st.error_message();
  }
  v1::ListSubscribersRequest req;
  req.set_page_token(std::string(100000, '\x01'));
  v1::ListSubscribersResponse resp;
  grpc::ClientContext ctx;
  auto st = stub_->ListSubscribers(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(st.error_message().size(), 400u);
  EXPECT_NE(st.error_message().find("\\x01"), std::string::npos) << st.error_message();
}

// One agent per pin directory, in-process too (the lock is
// per open file description).
TEST_F(AgentTest, SecondAgentOnThePinsIsRefused) {
  start();
  AgentOptions o;
  o.dataplane.access = {"acc0"};
  o.dataplane.uplink = {"upl0"};
  o.dataplane.gateway_ipv4 = *parse_ipv4("100.64.0.1");
  o.dataplane.bpffs = bpffs_;
  o.dataplane.xdp_generic = true;
  o.server.listen = "unix://" + g_rundir + "/second.sock";
  try {
    Agent second(o);
    FAIL() << "a second agent started on " << bpffs_;
  } catch (const DataplaneError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("PID {}", getpid())), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(g_rundir + "/second.sock"));
  const auto r = Dataplane::teardown(bpffs_);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.removed.empty());
  EXPECT_TRUE(fs::exists(link_pin_path(bpffs_, "acc0")));
  v1::GetStatsResponse resp;
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub_->GetStats(&ctx, v1::GetStatsRequest(), &resp).ok());
}

TEST_F(AgentTest, PinsOfAnotherAbiAreAClearError) {
  const std::string other = bpffs_ + "/v99/maps";
  fs::create_directories(other);
  int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "subscribers", 8, 40, 16, nullptr);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(bpf_obj_pin(fd, (other + "/subscribers").c_str()), 0);
  close(fd);
  try {
    start();
    FAIL() << "adopted pins of ABI 99";
  } catch (const DataplaneError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(bpffs_ + "/v99"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--teardown"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ABI version 99"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(pin_root(bpffs_) + "/maps/subscribers"));
  unlink((other + "/subscribers").c_str());
}

}  // namespace

// A run that was SIGKILLed cannot clean up after itself: remove the pins and
// run dirs of runs whose process is gone, so that they do not accumulate.
void sweep_stale_runs() {
  for (const auto& [dir, prefix] :
       {std::pair{"/sys/fs/bpf", "xbng-test-"}, std::pair{"/tmp", "xbng-grpc-test-"}}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::string name = e.path().filename();
      if (name.rfind(prefix, 0) != 0) continue;
      pid_t pid = static_cast<pid_t>(std::strtol(name.c_str() + std::strlen(prefix), nullptr, 10));
      if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
    }
  }
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "xbng_grpc_tests needs root (BPF, network namespaces): skipped\n");
    return 77;
  }
  // A private network namespace first: the veths, XDP links and sysctls of
  // this run vanish with the process; the root namespace is never touched.
  if (unshare(CLONE_NEWNET) != 0) {
    std::perror("unshare(CLONE_NEWNET)");
    return 77;
  }
  sweep_stale_runs();
  g_root = fmt::format("/sys/fs/bpf/xbng-test-{}", getpid());
  g_rundir = fmt::format("/tmp/xbng-grpc-test-{}", getpid());
  std::atexit(cleanup);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGABRT, SIGSEGV}) signal(s, on_signal);
  fs::create_directories(g_rundir);
  sh("ip link set lo up");
  for (const char* p : {"acc0", "acc1", "upl0"}) {
    sh(fmt::format("ip link add {} type veth peer name {}p", p, p));
    sh(fmt::format("ip link set {} up && ip link set {}p up", p, p));
  }
  int rc = RUN_ALL_TESTS();
  cleanup();
  return rc;
}
