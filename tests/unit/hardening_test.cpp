// Hardening: reserved-address matching, services allowed to the host, MAC
// policy names and their config checks (no system access).
#include <gtest/gtest.h>

#include "config/config.h"
#include "dataplane/host_services.h"
#include "dataplane/mac_policy.h"
#include "store/reserved.h"

using namespace xbng::agent;

namespace {

Prefix pfx(const char* s) { return *parse_prefix(s); }

PortInfo port(const char* name, uint32_t ifx, int role, const char* gw4) {
  PortInfo p;
  p.name = name;
  p.ifindex = ifx;
  p.role = role;
  if (gw4) p.cfg.gw_ipv4 = *parse_ipv4(gw4);
  return p;
}

}  // namespace

TEST(Reserved, OverlapInEitherDirection) {
  ReservedSet r;
  r.add(pfx("192.0.2.0/24"), "uplink subnet");
  r.add(pfx("100.64.0.1/32"), "gateway");
  r.add(pfx("2001:db8:ffff::/64"), "uplink subnet v6");
  EXPECT_NE(r.find(pfx("192.0.2.1/32")), nullptr);    // inside
  EXPECT_NE(r.find(pfx("192.0.2.255/32")), nullptr);  // broadcast
  EXPECT_NE(r.find(pfx("192.0.0.0/16")), nullptr);    // covers
  EXPECT_NE(r.find(pfx("100.64.0.0/24")), nullptr);   // covers the gateway
  EXPECT_EQ(r.find(pfx("100.64.0.2/32")), nullptr);
  EXPECT_EQ(r.find(pfx("192.0.3.0/24")), nullptr);
  EXPECT_NE(r.find(pfx("2001:db8:ffff::2/128")), nullptr);
  EXPECT_NE(r.find(pfx("2001:db8:ff00::/40")), nullptr);
  EXPECT_EQ(r.find(pfx("2001:db8:fffe::/64")), nullptr);
  EXPECT_EQ(r.find(pfx("192.0.2.1/32"))->what, "uplink subnet");
}

TEST(Reserved, BuiltFromPortsAddressesAndRanges) {
  std::vector<PortInfo> ports{port("acc0", 2, XBNG_ROLE_ACCESS, "100.64.0.1"),
                              port("upl0", 3, XBNG_ROLE_UPLINK, nullptr)};
  IfAddress up{3, pfx("192.0.2.1/24")}, acc{2, pfx("100.64.0.1/10")}, other{9, pfx("10.0.0.1/8")};
  up.addr.addr[3] = 1;  // the interface address itself, not the network
  acc.addr.addr[3] = 1;
  ReservedSet r = build_reserved(ports, {"203.0.113.0/24"}, {up, acc, other});
  ASSERT_NE(r.find(pfx("192.0.2.2/32")), nullptr);  // uplink subnet
  EXPECT_NE(r.find(pfx("192.0.2.2/32"))->what.find("upl0"), std::string::npos);
  EXPECT_NE(r.find(pfx("100.64.0.1/32")), nullptr);  // gateway / access address
  EXPECT_EQ(r.find(pfx("100.64.0.2/32")), nullptr);  // an access port's subnet is not reserved
  EXPECT_EQ(r.find(pfx("10.0.0.2/32")), nullptr);    // not an xbng port
  EXPECT_NE(r.find(pfx("203.0.113.7/32")), nullptr);
}

TEST(HostServices, ParseAndFormat) {
  LocalService s;
  ASSERT_FALSE(parse_local_service("tcp/22", &s));
  EXPECT_EQ(s.proto, 6);
  EXPECT_EQ(s.port, 22);
  ASSERT_FALSE(parse_local_service("icmp", &s));
  EXPECT_EQ(s.proto, 1);
  EXPECT_EQ(s.port, 0);
  ASSERT_FALSE(parse_local_service("47", &s));
  EXPECT_EQ(format_local_service(s), "gre");
  EXPECT_TRUE(parse_local_service("icmp/8", &s));
  EXPECT_TRUE(parse_local_service("tcp/0", &s));
  EXPECT_TRUE(parse_local_service("tcp/65536", &s));
  EXPECT_TRUE(parse_local_service("ssh", &s));
  EXPECT_TRUE(parse_local_service("", &s));
}

TEST(MacPolicy, NamesAndConfig) {
  EXPECT_EQ(*parse_mac_policy("follow"), XBNG_MAC_POLICY_FOLLOW);
  EXPECT_FALSE(parse_mac_policy("sticky"));
  Config c;
  c.access = {"acc0"};
  c.uplink = {"upl0"};
  c.gateway_ipv4 = "100.64.0.1";
  EXPECT_TRUE(check_config(c).ok());
  c.mac_policy = "sticky";
  c.allow_to_host = {"tcp/99999"};
  c.reserved = {"not-a-prefix"};
  c.access_options["acc0"].mac_policy = "nope";
  EXPECT_EQ(check_config(c).errors.size(), 4u);
  c = Config{};
  c.access = {"acc0"};
  c.uplink = {"upl0"};
  c.gateway_ipv4 = "100.64.0.1";
  c.access_options["acc0"].mac_policy = "enforce";
  c.allow_to_host = {"tcp/22", "tcp/22", "icmp"};
  DataplaneOptions o = to_dataplane_options(c);
  EXPECT_EQ(o.access_overrides["acc0"].mac_policy, XBNG_MAC_POLICY_ENFORCE);
  EXPECT_EQ(o.allow_to_host.size(), 2u);
}
