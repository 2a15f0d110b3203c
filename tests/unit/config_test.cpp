#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "config/config.h"
#include "api/subscriber_file.h"
#include "common/net.h"

using namespace xbng::agent;

namespace {
std::string write_tmp(const std::string& text) {
  char path[] = "/tmp/xbng-config-test-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

std::string load_error(const std::string& text) {
  auto p = write_tmp(text);
  Config c;
  std::string what;
  try {
    load_config_file(p, &c);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  std::remove(p.c_str());
  return what;
}

// The errors check_config reports, joined, for a config built by `mutate`
// from a valid one.
Config valid_config() {
  Config c;
  c.access = {"acc0"};
  c.uplink = {"upl0"};
  c.gateway_ipv4 = "100.64.0.1";
  return c;
}
template <typename F>
ConfigCheck check_with(F mutate) {
  Config c = valid_config();
  mutate(c);
  return check_config(c);
}
std::string errors_of(const ConfigCheck& chk) {
  std::string s;
  for (const auto& e : chk.errors) s += e + "\n";
  return s;
}
}  // namespace

TEST(Config, LoadsEverySection) {
  auto p = write_tmp(R"(
[ports]
access = ["acc0", { name = "acc1", outer_tpid = 0x9100, mtu = 1508, gateway_ipv4 = "100.65.0.1" }]
uplink = "upl0"
outer_tpid = "0x8100"
xdp_generic = true
xdp_attach = "libxdp"
xdp_priority = 30
[gateway]
ipv4 = "100.64.0.1"
ipv6 = "2001:db8::1"
[limits]
max_subscribers = 5000
events_per_sec = 10
unknown_event_interval_ms = 250
[grpc]
listen = "127.0.0.1:50051"
tls_cert = "/c.pem"
tls_key = "/k.pem"
tls_no_client_auth = true
[api]
max_connections = 10
max_request_bytes = 1048576
max_watchers = 3
watcher_queue = 100
[metrics]
listen = "[::1]:9100"
[bpf]
bpffs = "/sys/fs/bpf/x"
[log]
level = "debug"
)");
  Config c;
  load_config_file(p, &c);
  std::remove(p.c_str());
  EXPECT_EQ(c.access, (std::vector<std::string>{"acc0", "acc1"}));
  EXPECT_EQ(c.uplink, (std::vector<std::string>{"upl0"}));
  ASSERT_EQ(c.access_options.count("acc1"), 1u);
  EXPECT_EQ(c.access_options["acc1"].outer_tpid, "0x9100");
  EXPECT_EQ(c.access_options["acc1"].mtu, 1508u);
  EXPECT_TRUE(c.xdp_generic);
  EXPECT_EQ(c.xdp_attach, "libxdp");
  EXPECT_EQ(c.xdp_priority, 30u);
  EXPECT_EQ(c.max_subscribers, 5000u);
  EXPECT_EQ(c.events_per_sec, 10u);
  EXPECT_EQ(c.unknown_interval_ms, 250u);
  EXPECT_EQ(c.metrics_listen, "[::1]:9100");
  EXPECT_EQ(c.log_level, "debug");
  // The TLS files do not exist: converting is refused, naming them.
  EXPECT_THROW(to_dataplane_options(c), std::runtime_error);
  c.tls_cert = c.tls_key = c.tls_client_ca = "/dev/null";
  auto d = to_dataplane_options(c);
  EXPECT_EQ(d.outer_tpid, 0x8100);
  EXPECT_EQ(d.max_subscribers, 5000u);
  EXPECT_EQ(d.events_per_sec, 10u);
  EXPECT_EQ(d.unknown_interval_ns, 250'000'000u);
  EXPECT_EQ(d.bpffs, "/sys/fs/bpf/x");
  ASSERT_EQ(d.access_overrides.count("acc1"), 1u);
  EXPECT_EQ(d.access_overrides.count("acc0"), 0u);
  const auto& o = d.access_overrides["acc1"];
  EXPECT_EQ(o.outer_tpid, std::optional<uint16_t>(0x9100));
  EXPECT_EQ(o.mtu, 1508);
  EXPECT_EQ(o.gateway_ipv4, parse_ipv4("100.65.0.1"));
  EXPECT_FALSE(o.gateway_ipv6.has_value());
  auto s = to_server_options(c);
  EXPECT_EQ(s.listen, "127.0.0.1:50051");
  EXPECT_TRUE(s.tls_no_client_auth);
  EXPECT_EQ(s.max_connections, 10u);
  EXPECT_EQ(s.max_request_bytes, 1048576u);
  EXPECT_EQ(s.max_watchers, 3u);
  EXPECT_EQ(s.watcher_queue, 100u);
}

// TLS without a client CA needs an explicit opt-out.
TEST(Config, TlsWithoutClientCaNeedsTheExplicitFlag) {
  Config c = valid_config();
  c.grpc = "127.0.0.1:50051";
  c.tls_cert = c.tls_key = "/dev/null";
  auto chk = check_config(c);
  ASSERT_FALSE(chk.ok());
  EXPECT_THAT(chk.errors[0], ::testing::HasSubstr("tls_no_client_auth"));
  c.tls_no_client_auth = true;
  chk = check_config(c);
  EXPECT_TRUE(chk.ok());
  ASSERT_FALSE(chk.warnings.empty());
  EXPECT_THAT(chk.warnings.back(), ::testing::HasSubstr("without client certificates"));
  c.tls_no_client_auth = false;
  c.tls_client_ca = "/dev/null";
  EXPECT_TRUE(check_config(c).ok());
}

TEST(Config, PortTablesLongForm) {
  auto p = write_tmp(R"(
[[ports.access]]
name = "acc0"
[[ports.access]]
name = "acc1"
outer_tpid = "0x8100"
)");
  Config c;
  load_config_file(p, &c);
  std::remove(p.c_str());
  EXPECT_EQ(c.access, (std::vector<std::string>{"acc0", "acc1"}));
  EXPECT_EQ(c.access_options.count("acc0"), 1u);
  EXPECT_EQ(c.access_options["acc1"].outer_tpid, "0x8100");
}

TEST(Config, RejectsUnknownKeysAndBadTypes) {
  for (const char* text :
       {"[ports]\naccess = [\"a\"]\nacess = 1\n", "[nope]\nx = 1\n",
        "[limits]\nmax_subscribers = \"many\"\n", "[limits]\nmax_subscribers = -1\n",
        "[limits]\nmax_subscribers = 1.5\n", "[ports]\naccess = [{ outer_tpid = \"0x8100\" }]\n",
        "[ports]\naccess = [{ name = \"a\", tpid = \"0x8100\" }]\n",
        "[ports]\naccess = [{ name = \"a\" }, { name = \"a\" }]\n", "[ports]\naccess = [1]\n",
        "[metrics]\nlisten = 9469\n", "[ports\n"}) {
    EXPECT_NE(load_error(text), "") << text;
  }
  // Errors name the file, the key and say what is wrong.
  EXPECT_THAT(load_error("[ports]\naccess = [\"a\"]\nacess = 1\n"),
              testing::HasSubstr("ports.acess: unknown key"));
  EXPECT_THAT(load_error("[ports]\naccess = [{ name = \"a\", tpid = \"0x8100\" }]\n"),
              testing::HasSubstr("ports.access[0].tpid: unknown key"));
  // Syntax errors carry line:column.
  EXPECT_THAT(load_error("[log]\nlevel = \"info\"\n[ports\n"), testing::HasSubstr(":3:"));
  // A key of an older layout points to its new place.
  EXPECT_THAT(load_error("[bpf]\nmax_subscribers = 10\n"),
              testing::HasSubstr("now limits.max_subscribers"));
}

TEST(Config, ChecksValues) {
  EXPECT_TRUE(check_config(valid_config()).ok()) << errors_of(check_config(valid_config()));
  EXPECT_NO_THROW(to_dataplane_options(valid_config()));
  struct Case {
    std::function<void(Config&)> mutate;
    const char* expect;  // substring of the error
  };
  const Case cases[] = {
      {[](Config& x) { x.access.clear(); }, "no access port"},
      {[](Config& x) { x.uplink.clear(); }, "no uplink port"},
      {[](Config& x) { x.uplink = {"acc0"}; }, "acc0: configured twice"},
      {[](Config& x) { x.access = {"a/b"}; }, "not a valid interface name"},
      {[](Config& x) { x.access = {"sixteen-chars-xx"}; }, "not a valid interface name"},
      {[](Config& x) { x.outer_tpid = "0x0800"; }, "0x0800: expected 0x88a8, 0x8100 or 0x9100"},
      {[](Config& x) { x.punt_transport = "afxdp"; },
       "punt.transport afxdp: expected ringbuf or af_xdp"},
      {[](Config& x) { x.xdp_attach = "native"; }, "ports.xdp_attach native: expected link"},
      {[](Config& x) { x.xdp_priority = 1ull << 32; }, "ports.xdp_priority 4294967296"},
      {[](Config& x) { x.access_options["acc0"].outer_tpid = "0x86dd"; }, "acc0 outer_tpid 0x86dd"},
      {[](Config& x) { x.access_options["acc0"].mtu = 70000; }, "acc0 mtu 70000"},
      {[](Config& x) { x.access_options["acc0"].gateway_ipv6 = "fe80::1"; }, "fe80::1"},
      {[](Config& x) { x.gateway_ipv4 = "127.0.0.1"; }, "127.0.0.1"},
      {[](Config& x) { x.gateway_ipv4 = "100.64.0.256"; }, "not an IPv4 address"},
      {[](Config& x) { x.gateway_ipv4 = ""; }, "access port acc0 has no gateway"},
      {[](Config& x) { x.gateway_ipv6 = "fe80::1"; }, "gateway.ipv6"},
      {[](Config& x) { x.max_subscribers = 0; }, "max_subscribers"},
      {[](Config& x) { x.max_subscribers = 16'000'001; }, "max_subscribers"},
      {[](Config& x) { x.direct_slots = 16'777'217; }, "limits.direct_slots 16777217"},
      {[](Config& x) { x.direct_slots_v6 = 16'777'217; }, "limits.direct_slots_v6 16777217"},
      {[](Config& x) { x.direct_subscriber_slots = 16'777'217; },
       "limits.direct_subscriber_slots 16777217"},
      {[](Config& x) { x.access_options["acc0"].direct_svlans = {"0-10"}; },
       "acc0 direct_svlans: \"0-10\" is not an S-VLAN range"},
      {[](Config& x) { x.access_options["acc0"].direct_svlans = {"20-10"}; },
       "\"20-10\" is not an S-VLAN range"},
      {[](Config& x) { x.access_options["acc0"].direct_svlans = {"4095"}; },
       "\"4095\" is not an S-VLAN range"},
      {[](Config& x) { x.access_options["acc0"].direct_svlans = {"100-x"}; },
       "\"100-x\" is not an S-VLAN range"},
      {[](Config& x) {
         x.access_options["acc0"].direct_svlans = {"100-200", "150"};
       },
       "acc0 direct_svlans: 150 overlaps 100-200"},
      {[](Config& x) { x.unknown_interval_ms = 0; }, "unknown_event_interval_ms"},
      {[](Config& x) { x.bpffs = "relative"; }, "absolute path"},
      {[](Config& x) { x.grpc = "unix://relative.sock"; }, "unix:///absolute/path"},
      {[](Config& x) { x.grpc = "127.0.0.1:50051"; }, "TCP needs TLS"},
      {[](Config& x) { x.grpc = "127.0.0.1:99999"; }, "port 99999"},
      {[](Config& x) { x.grpc = "::1:50051"; }, "needs brackets"},
      {[](Config& x) {
         x.grpc = "[::1]:50051";
         x.tls_cert = "/dev/null";
       },
       "both tls_cert and tls_key"},
      {[](Config& x) {
         x.grpc = "[::1]:50051";
         x.tls_cert = "/dev/null";
         x.tls_key = "/nonexistent/xbng.key";
       },
       "grpc.tls_key /nonexistent/xbng.key: cannot read"},
      {[](Config& x) { x.metrics_listen = "9469"; }, "expected HOST:PORT"},
      {[](Config& x) { x.metrics_listen = ":9469"; }, "empty host"},
      {[](Config& x) { x.metrics_listen = "[fe80::zz]:9469"; }, "not an IPv6 address"},
      {[](Config& x) { x.metrics_listen = "localhost:http"; }, "port http"},
      {[](Config& x) { x.log_level = "verbose"; }, "log.level"},
  };
  for (const auto& c : cases) {
    ConfigCheck chk = check_with(c.mutate);
    EXPECT_FALSE(chk.ok()) << c.expect;
    EXPECT_THAT(errors_of(chk), testing::HasSubstr(c.expect));
    Config x = valid_config();
    c.mutate(x);
    EXPECT_THROW(to_dataplane_options(x), std::runtime_error) << c.expect;
  }
  // Every problem is reported, not only the first.
  ConfigCheck many = check_with([](Config& x) {
    x.access.clear();
    x.outer_tpid = "1";
    x.log_level = "loud";
  });
  EXPECT_EQ(many.errors.size(), 3u) << errors_of(many);
}

TEST(Config, AcceptsAndWarns) {
  for (auto mutate : std::vector<std::function<void(Config&)>>{
           [](Config& x) { x.metrics_listen = ""; },
           [](Config& x) { x.metrics_listen = "[::1]:9469"; },
           [](Config& x) { x.metrics_listen = "localhost:9469"; },
           [](Config& x) { x.grpc = "unix:///run/x/x.sock"; },
           [](Config& x) {
             x.grpc = "[::]:50051";
             x.tls_cert = x.tls_key = x.tls_client_ca = "/dev/null";
           },
           [](Config& x) {
             x.gateway_ipv4 = "";
             x.access_options["acc0"].gateway_ipv6 = "2001:db8::1";
           },
           [](Config& x) {
             AccessPortConfig o;
             o.outer_tpid = "0x9100";
             o.mtu = 1508;
             x.access_options["acc0"] = o;
           },
       }) {
    ConfigCheck chk = check_with(mutate);
    EXPECT_TRUE(chk.ok()) << errors_of(chk);
    EXPECT_TRUE(chk.warnings.empty());
  }
  auto warns = [](auto mutate, const char* what) {
    ConfigCheck chk = check_with(mutate);
    EXPECT_TRUE(chk.ok()) << errors_of(chk);
    std::string w;
    for (const auto& s : chk.warnings) w += s;
    EXPECT_THAT(w, testing::HasSubstr(what));
  };
  warns([](Config& x) { x.metrics_listen = "0.0.0.0:9469"; }, "no authentication");
  warns(
      [](Config& x) {
        x.grpc = "10.0.0.1:50051";
        x.insecure_tcp = true;
      },
      "plaintext TCP");
  warns([](Config& x) { x.access_options["acc0"].mtu = 1000; }, "IPv6");
  warns([](Config& x) { x.access_options["eth9"].mtu = 1508; }, "eth9");
}

TEST(Config, ParsesListen) {
  std::string host;
  uint16_t port = 0;
  EXPECT_EQ(parse_listen("127.0.0.1:9469", &host, &port), std::nullopt);
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9469);
  EXPECT_EQ(parse_listen("[2001:db8::1]:443", &host, &port), std::nullopt);
  EXPECT_EQ(host, "2001:db8::1");
  EXPECT_EQ(port, 443);
  EXPECT_EQ(parse_listen("metrics.example.net:1", &host, &port), std::nullopt);
  for (const char* bad :
       {"", ":1", "h:", "h:0", "h:65536", "[::1]", "[::1]9469", "1.2.3:80", "a b:80", "::1:80"})
    EXPECT_NE(parse_listen(bad, &host, &port), std::nullopt) << bad;
}

// deploy/xbngd.toml is what operators copy: it must load and check clean.
TEST(Config, ExampleConfigIsValid) {
  Config c;
  load_config_file(XBNG_SOURCE_DIR "/deploy/xbngd.toml", &c);
  ConfigCheck chk = check_config(c);
  EXPECT_TRUE(chk.ok()) << errors_of(chk);
  EXPECT_TRUE(chk.warnings.empty());
  EXPECT_EQ(c.metrics_listen, kDefaultMetricsListen);
  auto d = to_dataplane_options(c);
  EXPECT_EQ(d.access.size(), 2u);
  ASSERT_EQ(d.access_overrides.count("eth2"), 1u);
  EXPECT_EQ(d.access_overrides["eth2"].outer_tpid, std::optional<uint16_t>(0x8100));
  EXPECT_EQ(d.access_overrides["eth2"].sub_mtu, 1500);
  EXPECT_EQ(d.access_overrides["eth2"].pools.size(), 3u);
}

// [punt] transport: the ring buffer unless "af_xdp" is chosen, which reaches
// both the XDP program (punt_xsk) and the bring-up (the sockets' RX).
TEST(Config, PuntTransport) {
  Config c = valid_config();
  EXPECT_EQ(c.punt_transport, "ringbuf");
  EXPECT_FALSE(to_dataplane_options(c).punt_xsk);
  EXPECT_FALSE(to_bringup_options(c).af_xdp);
  c.punt_transport = "af_xdp";
  EXPECT_TRUE(check_config(c).ok()) << errors_of(check_config(c));
  EXPECT_TRUE(to_dataplane_options(c).punt_xsk);
  EXPECT_TRUE(to_bringup_options(c).af_xdp);
}

// [ports] xdp_attach: xbng's own link unless "libxdp" is chosen, which
// reaches the dataplane with the run priority.
TEST(Config, XdpAttach) {
  Config c = valid_config();
  EXPECT_EQ(c.xdp_attach, "link");
  EXPECT_FALSE(to_dataplane_options(c).xdp_libxdp);
  c.xdp_attach = "libxdp";
  c.xdp_priority = 20;
  EXPECT_TRUE(check_config(c).ok()) << errors_of(check_config(c));
  EXPECT_TRUE(to_dataplane_options(c).xdp_libxdp);
  EXPECT_EQ(to_dataplane_options(c).xdp_priority, 20u);
  c.xdp_attach = "link";
  EXPECT_TRUE(check_config(c).ok());  // a priority without libxdp: a warning only
}

TEST(Config, ReloadAppliesLiveSettingsAndRefusesTheRest) {
  Config a = valid_config();
  EXPECT_TRUE(plan_reload(a, a).applied.empty());
  EXPECT_TRUE(plan_reload(a, a).refused.empty());

  Config b = a;
  b.log_level = "debug";
  b.metrics_listen = "";
  ReloadPlan p = plan_reload(a, b);
  EXPECT_TRUE(p.log_level);
  EXPECT_TRUE(p.metrics_listen);
  EXPECT_EQ(p.applied.size(), 2u);
  EXPECT_TRUE(p.refused.empty());

  struct Case {
    std::function<void(Config&)> mutate;
    const char* key;
    const char* how;
  };
  const Case cases[] = {
      {[](Config& x) { x.access.push_back("acc1"); }, "ports.access:", "restart"},
      {[](Config& x) { x.access_options["acc0"].mtu = 1508; }, "per-port", "restart"},
      {[](Config& x) { x.uplink = {"upl1"}; }, "ports.uplink:", "restart"},
      {[](Config& x) { x.outer_tpid = "0x8100"; }, "ports.outer_tpid:", "restart"},
      {[](Config& x) { x.xdp_generic = true; }, "ports.xdp_generic:", "teardown"},
      {[](Config& x) { x.xdp_attach = "libxdp"; }, "ports.xdp_attach: link -> libxdp", "restart"},
      {[](Config& x) { x.xdp_priority = 10; }, "ports.xdp_priority: 100 -> 10", "restart"},
      {[](Config& x) { x.gateway_ipv4 = "100.64.0.2"; }, "gateway.ipv4:", "restart"},
      {[](Config& x) { x.gateway_ipv6 = "2001:db8::1"; }, "gateway.ipv6:", "restart"},
      {[](Config& x) { x.max_subscribers = 2'000'000; }, "limits.max_subscribers:", "teardown"},
      {[](Config& x) { x.direct_slots = 65536; }, "limits.direct_slots:", "teardown"},
      {[](Config& x) { x.direct_slots_v6 = 65536; }, "limits.direct_slots_v6:", "teardown"},
      {[](Config& x) { x.direct_subscriber_slots = 65536; },
       "limits.direct_subscriber_slots:", "teardown"},
      {[](Config& x) { x.access_options["acc0"].direct_svlans = {"100-115"}; }, "per-port",
       "restart"},
      {[](Config& x) { x.events_per_sec = 5; }, "limits.events_per_sec:", "const volatile"},
      {[](Config& x) { x.unknown_interval_ms = 5; }, "unknown_event_interval_ms:", "restart"},
      {[](Config& x) { x.bpffs = "/sys/fs/bpf/y"; }, "bpf.bpffs:", "teardown"},
      {[](Config& x) { x.grpc = "unix:///run/y.sock"; }, "grpc.listen:", "restart"},
      {[](Config& x) { x.tls_cert = "/c"; }, "grpc.tls_cert:", "restart"},
      {[](Config& x) { x.tls_key = "/k"; }, "grpc.tls_key:", "restart"},
      {[](Config& x) { x.tls_client_ca = "/ca"; }, "grpc.tls_client_ca:", "restart"},
      {[](Config& x) { x.insecure_tcp = true; }, "grpc.insecure_tcp:", "restart"},
  };
  for (const auto& c : cases) {
    Config n = a;
    c.mutate(n);
    ReloadPlan r = plan_reload(a, n);
    EXPECT_FALSE(r.log_level);
    EXPECT_FALSE(r.metrics_listen);
    ASSERT_EQ(r.refused.size(), 1u) << c.key;
    EXPECT_THAT(r.refused[0], testing::HasSubstr(c.key));
    EXPECT_THAT(r.refused[0], testing::HasSubstr("cannot change live"));
    EXPECT_THAT(r.refused[0], testing::HasSubstr(c.how));
  }
}

TEST(Ctl, ParsesCsvLines) {
  xbng::v1::Subscriber s;
  EXPECT_EQ(parse_csv_line("acc0,100,200,02:00:00:00:00:01,100.64.0.1,2001:db8::1,"
                           "2001:db8:100::/56;2001:db8:200::/56,198.51.100.0/28\r",
                           &s),
            "");
  EXPECT_EQ(s.port(), "acc0");
  EXPECT_EQ(s.outer_vlan(), 100u);
  EXPECT_EQ(s.inner_vlan(), 200u);
  EXPECT_EQ(s.ipv6_prefixes_size(), 2);
  EXPECT_EQ(s.ipv4_prefixes(0), "198.51.100.0/28");
  EXPECT_EQ(parse_csv_line("acc0,100,200,,100.64.0.1,,,", &s), "");
  EXPECT_TRUE(s.mac().empty());
  EXPECT_EQ(s.ipv6_prefixes_size(), 0);
  EXPECT_NE(parse_csv_line("acc0,100,200", &s), "");
  EXPECT_NE(parse_csv_line("acc0,x,200,,100.64.0.1,,,", &s), "");
}

// Router correctness: subscriber MTU, MSS clamping, pools, uplink ICMP sources, [icmp].
TEST(Config, RouterSettings) {
  auto p = write_tmp(R"(
[ports]
access = [{ name = "acc0", subscriber_mtu = 1400, mss_clamp = false, pools = ["100.64.0.0/16", "2001:db8:1000::/36"] },
          { name = "acc1", mtu = 1508 }, "acc2"]
uplink = [{ name = "upl0", icmp_source_ipv4 = "192.0.2.1", icmp_source_ipv6 = "2001:db8:ffff::1" }]
[gateway]
ipv4 = "100.64.0.1"
[icmp]
rate_per_sec = 200
burst = 10
)");
  Config c;
  load_config_file(p, &c);
  std::remove(p.c_str());
  EXPECT_EQ(c.uplink, (std::vector<std::string>{"upl0"}));
  EXPECT_EQ(c.access_options["acc0"].subscriber_mtu, 1400u);
  EXPECT_EQ(c.icmp_rate_per_sec, 200u);
  ConfigCheck chk = check_config(c);
  EXPECT_TRUE(chk.ok()) << errors_of(chk);
  auto d = to_dataplane_options(c);
  EXPECT_EQ(d.access_overrides["acc0"].sub_mtu, 1400);
  EXPECT_FALSE(d.access_overrides["acc0"].mss_clamp);
  ASSERT_EQ(d.access_overrides["acc0"].pools.size(), 2u);
  EXPECT_EQ(format_prefix(d.access_overrides["acc0"].pools[1]), "2001:db8:1000::/36");
  EXPECT_EQ(d.access_overrides["acc1"].sub_mtu, 1500);  // mtu 1508 = 1500 + tags
  EXPECT_TRUE(d.access_overrides["acc1"].mss_clamp);
  EXPECT_EQ(d.access_overrides.count("acc2"), 0u);  // defaults: 1500, clamp on
  EXPECT_EQ(d.uplink_overrides["upl0"].icmp_source_ipv4, parse_ipv4("192.0.2.1"));
  EXPECT_EQ(d.icmp_rate_per_sec, 200u);
  EXPECT_EQ(d.icmp_burst, 10u);
}

TEST(Config, RouterSettingsChecked) {
  Config base;
  base.access = {"acc0", "acc1"};
  base.uplink = {"upl0"};
  base.gateway_ipv4 = "100.64.0.1";
  auto fails = [&](auto edit, const std::string& what) {
    Config c = base;
    edit(c);
    ConfigCheck chk = check_config(c);
    EXPECT_FALSE(chk.ok()) << what;
    EXPECT_NE(errors_of(chk).find(what), std::string::npos) << errors_of(chk);
  };
  fails([](Config& x) { x.access_options["acc0"].subscriber_mtu = 60; }, "subscriber_mtu 60");
  fails(
      [](Config& x) {
        x.access_options["acc0"].subscriber_mtu = 1500;
        x.access_options["acc0"].mtu = 1508;
      },
      "both mtu");
  fails([](Config& x) { x.access_options["acc0"].pools = {"100.64.0.1/16"}; }, "host bits");
  fails([](Config& x) { x.access_options["acc0"].pools = {"banana"}; }, "not a prefix");
  fails(
      [](Config& x) {
        x.access_options["acc0"].pools = {"100.64.0.0/16"};
        x.access_options["acc1"].pools = {"100.64.128.0/17"};
      },
      "overlap");
  fails([](Config& x) { x.uplink_options["upl0"].icmp_source_ipv4 = "x"; }, "icmp_source_ipv4");
  fails([](Config& x) { x.icmp_burst = 0; }, "icmp.burst");
}

TEST(Net, PrefixesOverlap) {
  auto P = [](const char* s) { return *parse_prefix(s); };
  EXPECT_TRUE(prefixes_overlap(P("100.64.0.0/10"), P("100.64.1.0/24")));
  EXPECT_TRUE(prefixes_overlap(P("100.64.1.0/24"), P("100.64.0.0/10")));
  EXPECT_FALSE(prefixes_overlap(P("100.64.0.0/16"), P("100.65.0.0/16")));
  EXPECT_FALSE(prefixes_overlap(P("100.64.0.0/16"), P("2001:db8::/32")));
  EXPECT_TRUE(prefixes_overlap(P("2001:db8:1000::/36"), P("2001:db8:1fff::/48")));
  EXPECT_FALSE(prefixes_overlap(P("2001:db8:1000::/36"), P("2001:db8:2000::/36")));
}

// A port's default rate plan, its checks, and the CSV policy columns.
TEST(Config, PortDefaultPolicy) {
  auto p = write_tmp(R"(
[ports]
access = [{ name = "acc0", policy = { up_rate_bps = 20000000, up_burst_bytes = 125000, down_rate_bps = 50000000, down_burst_bytes = 312500 } }, "acc1"]
uplink = ["up0"]
[gateway]
ipv4 = "100.64.0.1"
)");
  Config c;
  load_config_file(p, &c);
  std::remove(p.c_str());
  EXPECT_EQ(c.access_options["acc0"].policy, (PolicySpec{20000000, 125000, 50000000, 312500}));
  EXPECT_TRUE(check_config(c).ok());
  EXPECT_EQ(to_dataplane_options(c).access_overrides["acc0"].default_policy.down_rate, 50000000u);
  c.access_options["acc0"].policy.up_burst = 100;  // below one packet
  auto chk = check_config(c);
  ASSERT_FALSE(chk.ok());
  EXPECT_NE(chk.errors[0].find("up_burst_bytes"), std::string::npos) << chk.errors[0];
  EXPECT_NE(load_error("[ports]\naccess = [{ name = \"acc0\", policy = { up_rate = 1 } }]\n")
                .find("unknown key"),
            std::string::npos);
}

TEST(Ctl, ParsesCsvPolicyColumnsAndSiNumbers) {
  xbng::v1::Subscriber s;
  EXPECT_EQ(parse_csv_line("acc0,100,200,,100.64.0.1,,,,20M,125k,50M,312.5k", &s), "");
  ASSERT_TRUE(s.has_policy());
  EXPECT_EQ(s.policy().up_rate_bps(), 20000000u);
  EXPECT_EQ(s.policy().up_burst_bytes(), 125000u);
  EXPECT_EQ(s.policy().down_rate_bps(), 50000000u);
  EXPECT_EQ(s.policy().down_burst_bytes(), 312500u);
  EXPECT_EQ(parse_csv_line("acc0,100,200,,100.64.0.1,,,,,,,", &s), "");
  EXPECT_FALSE(s.has_policy());  // four empty cells: the port default
  EXPECT_EQ(parse_csv_line("acc0,100,200,,100.64.0.1,,,,0,,,", &s), "");
  EXPECT_TRUE(s.has_policy());  // explicit: unlimited
  EXPECT_NE(parse_csv_line("acc0,100,200,,100.64.0.1,,,,fast,,,", &s), "");
  EXPECT_EQ(parse_si("1.5k"), 1500u);
  EXPECT_EQ(parse_si("2G"), 2000000000u);
  EXPECT_FALSE(parse_si("1.5"));
  EXPECT_FALSE(parse_si(""));
  EXPECT_FALSE(parse_si("-3"));
}

TEST(Config, RelaySectionLoadsAndIsChecked) {
  auto p = write_tmp(R"(
[relay]
servers_v4 = ["192.0.2.67", "192.0.2.68"]
relay_address_v4 = "192.0.2.1"
circuit_id = "{port}:{svlan}:{cvlan}"
remote_id = "{mac}"
remote_id_enterprise = 4491
option82_policy = "keep"
[ports]
access = [{ name = "acc0", dhcp = "relay" }]
uplink = ["upl0"]
[gateway]
ipv4 = "100.64.0.1"
)");
  Config c;
  load_config_file(p, &c);
  std::remove(p.c_str());
  EXPECT_TRUE(c.relay.present);
  EXPECT_EQ(c.relay.servers_v4.size(), 2u);
  EXPECT_EQ(c.access_options["acc0"].dhcp, "relay");
  EXPECT_TRUE(check_config(c).ok()) << errors_of(check_config(c));
  EXPECT_EQ(relay_ports_of(c), std::vector<std::string>{"acc0"});
  // The relay port punts unknown keys; the bring-up knows it relays.
  EXPECT_TRUE(to_dataplane_options(c).access_overrides.at("acc0").punt_unknown);
  EXPECT_EQ(to_bringup_options(c).relay4_ports.count("acc0"), 1u);
  const auto ro = to_relay4_options(c.relay);
  EXPECT_EQ(ro.servers.size(), 2u);
  EXPECT_EQ(ro.relay_address, *parse_ipv4("192.0.2.1"));
  EXPECT_EQ(ro.policy, relay::Policy::kKeep);
  EXPECT_EQ(to_relay6_options(c.relay).enterprise, 4491u);
  EXPECT_EQ(to_relay6_options(RelayConfig{}).enterprise, relay::kDefaultRemoteIdEnterprise);
  EXPECT_THAT(load_error("[relay]\nremote_id_enterprise = -1\n"),
              testing::HasSubstr("expected a non-negative integer"));
  EXPECT_THAT(load_error("[relay]\nserver = [\"192.0.2.67\"]\n"),
              testing::HasSubstr("relay.server: unknown key"));

  auto relay = [](Config& x) {
    x.access_options["acc0"].dhcp = "relay";
    x.relay.present = true;
    x.relay.servers_v4 = {"192.0.2.67"};
  };
  EXPECT_TRUE(check_with(relay).ok()) << errors_of(check_with(relay));
  // One family only: accepted, and check-config says which one is relayed.
  auto v6_only = [&](Config& x) {
    relay(x);
    x.relay.servers_v4.clear();
    x.relay.servers_v6 = {"2001:db8:ffff::547"};
    x.gateway_ipv6 = "2001:db8:1000::1";
  };
  ConfigCheck r6 = check_with(v6_only);
  EXPECT_TRUE(r6.ok()) << errors_of(r6);
  EXPECT_THAT(testing::PrintToString(r6.warnings), testing::HasSubstr("relays DHCPv6 only"));
  Config c6 = valid_config();
  v6_only(c6);
  EXPECT_TRUE(to_bringup_options_unchecked(c6).relay4_ports.empty());
  EXPECT_EQ(to_bringup_options_unchecked(c6).relay6_ports.count("acc0"), 1u);
  struct Case {
    std::function<void(Config&)> mutate;
    const char* expect;
  };
  const Case cases[] = {
      {[](Config& x) { x.access_options["acc0"].dhcp = "proxy"; }, "expected \"server\" or"},
      {[](Config& x) { x.relay = RelayConfig{}; }, "needs a [relay] section"},
      {[](Config& x) { x.relay.servers_v4.clear(); }, "relay.servers_v6 are both empty"},
      {[](Config& x) {
         x.relay.servers_v4 = {"192.0.2.67", "192.0.2.67"};
       },
       "listed twice"},
      {[](Config& x) { x.relay.servers_v4 = {"kea"}; }, "not an IPv4 address"},
      {[](Config& x) { x.relay.servers_v6 = {"2001:db8::zz"}; }, "not an IPv6 address"},
      {[](Config& x) { x.relay.relay_address_v4 = "0.0.0.0"; }, "relay.relay_address_v4"},
      {[](Config& x) { x.relay.circuit_id = "{mac}"; }, "must hold {port}, {svlan} and {cvlan}"},
      {[](Config& x) { x.relay.circuit_id = "{port}{svlan}:{cvlan}"; }, "separated"},
      {[](Config& x) { x.relay.remote_id = "{user}"; }, "unknown placeholder"},
      {[](Config& x) { x.relay.option82_policy = "append"; }, "relay.option82_policy"},
      {[](Config& x) { x.relay.remote_id_enterprise = 0; }, "relay.remote_id_enterprise 0"},
      {[](Config& x) { x.relay.remote_id_enterprise = 1ull << 32; },
       "relay.remote_id_enterprise 4294967296"},
      {[](Config& x) { x.punt_enabled = false; }, "needs the punt path"},
      {[](Config& x) { x.gateway_ipv4.clear(); }, "needs an IPv4 gateway"},
  };
  for (const auto& tc : cases) {
    auto chk = check_with([&](Config& x) {
      relay(x);
      tc.mutate(x);
    });
    EXPECT_FALSE(chk.ok()) << tc.expect;
    EXPECT_THAT(errors_of(chk), testing::HasSubstr(tc.expect));
  }
  // servers_v6: the DHCPv6 relay of the same ports, from their IPv6 gateway.
  auto relay6 = [&](Config& x) {
    relay(x);
    x.gateway_ipv6 = "2001:db8:1000::1";
    x.relay.servers_v6 = {"2001:db8:ffff::547"};
  };
  auto v6 = check_with(relay6);
  EXPECT_TRUE(v6.ok()) << errors_of(v6);
  EXPECT_TRUE(v6.warnings.empty());
  const Case cases6[] = {
      {[](Config& x) { x.relay.servers_v6 = {"ff02::1:3"}; }, "the multicast groups are"},
      {[](Config& x) {
         x.relay.servers_v6 = {"ff05::1:3", "2001:db8::1"};
       },
       "must be the only entry"},
      {[](Config& x) { x.relay.servers_v6 = {"fe80::1"}; }, "not a global unicast address"},
      {[](Config& x) {
         x.relay.servers_v6 = {"2001:db8::1", "2001:db8:0::1"};
       },
       "listed twice"},
      {[](Config& x) { x.gateway_ipv6.clear(); }, "needs an IPv6 gateway"},
  };
  for (const auto& tc : cases6) {
    auto chk = check_with([&](Config& x) {
      relay6(x);
      tc.mutate(x);
    });
    EXPECT_FALSE(chk.ok()) << tc.expect;
    EXPECT_THAT(errors_of(chk), testing::HasSubstr(tc.expect));
  }
  // A DHCP multicast group alone: Relay-Forwards out of the uplink (a
  // warning says who may answer).
  for (const char* group : {"ff05::1:3", "ff02::1:2"}) {
    auto mc = check_with([&](Config& x) {
      relay6(x);
      x.relay.servers_v6 = {group};
    });
    EXPECT_TRUE(mc.ok()) << errors_of(mc);
    ASSERT_EQ(mc.warnings.size(), 1u) << group;
    EXPECT_THAT(mc.warnings[0], testing::HasSubstr("multicast out of the first uplink"));
  }
  // The multicast uplink: one of ports.uplink (default the first), loaded,
  // checked, and handed to the DHCPv6 relay.
  {
    auto p = write_tmp(
        "[relay]\nservers_v4 = [\"192.0.2.67\"]\nservers_v6 = [\"ff02::1:2\"]\n"
        "multicast_uplink = \"upl1\"\n"
        "[ports]\naccess = [{ name = \"acc0\", dhcp = \"relay\" }]\n"
        "uplink = [\"upl0\", \"upl1\"]\n[gateway]\nipv4 = \"100.64.0.1\"\n"
        "ipv6 = \"2001:db8:1000::1\"\n");
    Config c;
    load_config_file(p, &c);
    std::remove(p.c_str());
    EXPECT_EQ(c.relay.multicast_uplink, "upl1");
    ConfigCheck chk = check_config(c);
    EXPECT_TRUE(chk.ok()) << errors_of(chk);
    ASSERT_EQ(chk.warnings.size(), 1u);
    EXPECT_THAT(chk.warnings[0],
                testing::HasSubstr("multicast out of relay.multicast_uplink upl1"));
    EXPECT_EQ(to_relay6_options(c.relay).uplink, "upl1");
    EXPECT_EQ(to_relay6_options(RelayConfig{}).uplink, "");
  }
  auto mc_uplink = [&](const char* uplink, const std::vector<std::string>& servers) {
    return check_with([&](Config& x) {
      relay6(x);
      x.uplink = {"upl0", "upl1"};
      x.relay.servers_v6 = servers;
      x.relay.multicast_uplink = uplink;
    });
  };
  EXPECT_TRUE(mc_uplink("upl0", {"ff02::1:2"}).ok());
  ConfigCheck not_uplink = mc_uplink("acc0", {"ff02::1:2"});
  EXPECT_FALSE(not_uplink.ok());
  EXPECT_THAT(errors_of(not_uplink),
              testing::HasSubstr("relay.multicast_uplink \"acc0\": not an uplink port "
                                 "(ports.uplink: upl0, upl1)"));
  EXPECT_FALSE(mc_uplink("upl9", {"ff05::1:3"}).ok());
  // Beside unicast servers it is not used: said, not refused.
  ConfigCheck unicast = mc_uplink("upl1", {"2001:db8:ffff::547"});
  EXPECT_TRUE(unicast.ok()) << errors_of(unicast);
  std::string w;
  for (const auto& s : unicast.warnings) w += s;
  EXPECT_THAT(w, testing::HasSubstr("relay.multicast_uplink upl1: not used"));
  {
    Config c = valid_config();
    relay6(c);
    const punt::BringupOptions b = to_bringup_options(c);
    EXPECT_EQ(b.relay6_ports, b.relay4_ports);
    EXPECT_EQ(to_relay6_options(c.relay).servers.size(), 1u);
  }
  // A [relay] change is refused live.
  Config a = valid_config(), b = valid_config();
  relay(a);
  relay(b);
  b.relay.servers_v4 = {"192.0.2.68"};
  auto plan = plan_reload(a, b);
  ASSERT_EQ(plan.refused.size(), 1u);
  EXPECT_THAT(plan.refused[0], testing::HasSubstr("relay: changed"));
}

TEST(Config, PuntRealtimePriority) {
  // Unset ("auto"): the default policy on a host whose ports do not relay.
  EXPECT_FALSE(valid_config().punt_realtime_priority.has_value());
  EXPECT_EQ(to_bringup_options(valid_config()).realtime_priority, 0);
  const char* head =
      "[ports]\naccess = [\"acc0\"]\nuplink = \"upl0\"\n[gateway]\nipv4 = \"100.64.0.1\"\n";
  auto load = [&](const std::string& punt) {
    auto p = write_tmp(std::string(head) + "[punt]\n" + punt + "\n");
    Config c;
    load_config_file(p, &c);
    std::remove(p.c_str());
    return c;
  };
  Config c = load("realtime_priority = 10");
  EXPECT_EQ(c.punt_realtime_priority, 10u);
  EXPECT_TRUE(check_config(c).ok()) << errors_of(check_config(c));
  EXPECT_EQ(to_bringup_options(c).realtime_priority, 10);
  EXPECT_TRUE(to_bringup_options(c).realtime_required);
  EXPECT_FALSE(load("realtime_priority = \"auto\"").punt_realtime_priority.has_value());
  EXPECT_EQ(load("realtime_priority = 0").punt_realtime_priority, 0u);
  EXPECT_THAT(load_error("[punt]\nrealtime_priority = \"high\"\n"),
              testing::HasSubstr("expected \"auto\" or an integer 0..99"));
  EXPECT_THAT(load_error("[punt]\nrealtime_priority = -1\n"),
              testing::HasSubstr("expected a non-negative integer"));
  for (uint64_t ok : {0u, 1u, 99u})
    EXPECT_TRUE(check_with([ok](Config& x) { x.punt_realtime_priority = ok; }).ok()) << ok;
  for (uint64_t bad : {100u, 1000u}) {
    ConfigCheck chk = check_with([bad](Config& x) { x.punt_realtime_priority = bad; });
    EXPECT_FALSE(chk.ok()) << bad;
    EXPECT_THAT(errors_of(chk), testing::HasSubstr("punt.realtime_priority"));
    Config x = valid_config();
    x.punt_realtime_priority = bad;
    EXPECT_THROW(to_bringup_options(x), std::runtime_error);
  }
  // A relaying host runs the threads at SCHED_FIFO kRelayRealtimePriority
  // unless told otherwise; a refusal of that is not fatal. 0 keeps the
  // default policy; a set priority must hold.
  auto relay = [](Config& x) {
    x.access_options["acc0"].dhcp = "relay";
    x.relay.present = true;
    x.relay.servers_v4 = {"192.0.2.67"};
  };
  Config r = valid_config();
  relay(r);
  ASSERT_TRUE(check_config(r).ok()) << errors_of(check_config(r));
  EXPECT_EQ(to_bringup_options(r).realtime_priority, kRelayRealtimePriority);
  EXPECT_FALSE(to_bringup_options(r).realtime_required);
  r.punt_realtime_priority = 0;
  EXPECT_EQ(to_bringup_options(r).realtime_priority, 0);
  r.punt_realtime_priority = 30;
  EXPECT_EQ(to_bringup_options(r).realtime_priority, 30);
  EXPECT_TRUE(to_bringup_options(r).realtime_required);
  // With the punt path off it would set nothing: said, not refused.
  ConfigCheck off = check_with([](Config& x) {
    x.punt_realtime_priority = 10;
    x.punt_enabled = false;
  });
  EXPECT_TRUE(off.ok()) << errors_of(off);
  ASSERT_EQ(off.warnings.size(), 1u);
  EXPECT_THAT(off.warnings[0], testing::HasSubstr("no effect"));
  // The threads are started with it: a reload cannot change it, "auto"
  // to a number included.
  for (uint64_t v : {0u, 20u}) {
    Config b = valid_config();
    b.punt_realtime_priority = v;
    ReloadPlan plan = plan_reload(valid_config(), b);
    ASSERT_EQ(plan.refused.size(), 1u) << v;
    EXPECT_THAT(plan.refused[0], testing::HasSubstr("punt/dhcp/dhcpv6/ra"));
  }
}
