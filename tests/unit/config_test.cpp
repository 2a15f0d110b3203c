#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "xbng/agent/config.h"
#include "xbng/agent/ctl.h"

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
}  // namespace

TEST(Config, LoadsEverySection) {
  auto p = write_tmp(R"(
[ports]
access = ["acc0", "acc1"]
uplink = "upl0"
outer_tpid = "0x8100"
xdp_generic = true
[gateway]
ipv4 = "100.64.0.1"
ipv6 = "2001:db8::1"
[grpc]
listen = "127.0.0.1:50051"
tls_cert = "/c.pem"
tls_key = "/k.pem"
[bpf]
bpffs = "/sys/fs/bpf/x"
max_subscribers = 5000
[log]
level = "debug"
)");
  Config c;
  load_config_file(p, &c);
  std::remove(p.c_str());
  EXPECT_EQ(c.access, (std::vector<std::string>{"acc0", "acc1"}));
  EXPECT_EQ(c.uplink, (std::vector<std::string>{"upl0"}));
  EXPECT_TRUE(c.xdp_generic);
  EXPECT_EQ(c.max_subscribers, 5000u);
  auto d = to_dataplane_options(c);
  EXPECT_EQ(d.outer_tpid, 0x8100);
  EXPECT_EQ(d.max_subscribers, 5000u);
  EXPECT_EQ(d.bpffs, "/sys/fs/bpf/x");
  auto s = to_server_options(c);
  EXPECT_EQ(s.listen, "127.0.0.1:50051");
  EXPECT_EQ(c.log_level, "debug");
}

TEST(Config, RejectsUnknownKeysAndBadTypes) {
  for (const char* text : {"[ports]\naccess = [\"a\"]\nacess = 1\n", "[nope]\nx = 1\n",
                           "[bpf]\nmax_subscribers = \"many\"\n", "[ports\n"}) {
    auto p = write_tmp(text);
    Config c;
    EXPECT_THROW(load_config_file(p, &c), std::runtime_error) << text;
    std::remove(p.c_str());
  }
}

TEST(Config, ChecksValues) {
  Config c;
  c.access = {"acc0"};
  c.uplink = {"upl0"};
  c.gateway_ipv4 = "100.64.0.1";
  EXPECT_NO_THROW(to_dataplane_options(c));
  auto bad = [&](auto mutate) {
    Config x = c;
    mutate(x);
    EXPECT_THROW(to_dataplane_options(x), std::runtime_error);
  };
  bad([](Config& x) { x.access.clear(); });
  bad([](Config& x) { x.uplink.clear(); });
  bad([](Config& x) { x.outer_tpid = "0x0800"; });
  bad([](Config& x) { x.gateway_ipv4 = "127.0.0.1"; });
  bad([](Config& x) { x.gateway_ipv4 = ""; });
  bad([](Config& x) { x.gateway_ipv6 = "fe80::1"; });
  bad([](Config& x) { x.max_subscribers = 0; });
  bad([](Config& x) { x.bpffs = "relative"; });
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
