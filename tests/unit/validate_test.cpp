#include <gtest/gtest.h>

#include "api/convert.h"
#include "api/status.h"
#include "store/subscriber.h"
#include "xbng/v1/xbng.pb.h"

using namespace xbng::agent;
using grpc::StatusCode;

namespace {

// api/convert.h's validation, with the status a client would see.
grpc::Status validate(const xbng::v1::Subscriber& in, const PortResolver& ports,
                      std::string_view where, SubscriberSpec* out) {
  return to_grpc(validate_subscriber(in, ports, where, out));
}

PortResolver ports() {
  PortResolver r;
  r.access_ifindex = [](std::string_view n) -> std::optional<uint32_t> {
    if (n == "acc0") return 7;
    if (n == "acc1") return 9;
    return std::nullopt;
  };
  r.name = [](uint32_t i) { return i == 7 ? std::string("acc0") : std::string("acc1"); };
  return r;
}

xbng::v1::Subscriber good() {
  xbng::v1::Subscriber s;
  s.set_port("acc0");
  s.set_outer_vlan(100);
  s.set_inner_vlan(200);
  s.set_mac("02:00:00:00:00:01");
  s.set_ipv4("100.64.0.10");
  s.set_ipv6("2001:db8::10");
  s.add_ipv6_prefixes("2001:db8:100::/56");
  s.add_ipv4_prefixes("198.51.100.0/28");
  return s;
}

// Expects INVALID_ARGUMENT naming `field` and `value`.
void expect_invalid(const xbng::v1::Subscriber& s, const std::string& field,
                    const std::string& value) {
  SubscriberSpec out;
  auto st = validate(s, ports(), "subscribers[3]", &out);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << field << " " << value;
  EXPECT_NE(st.error_message().find("subscribers[3]"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find(field), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find(value), std::string::npos) << st.error_message();
}

}  // namespace

TEST(Validate, AcceptsAFullSubscriber) {
  SubscriberSpec out;
  auto st = validate(good(), ports(), "x", &out);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(out.key.ifindex, 7u);
  EXPECT_EQ(out.key.outer_vid, 100);
  EXPECT_EQ(out.key.inner_vid, 200);
  EXPECT_TRUE(out.has_mac);
  EXPECT_TRUE(out.has_ipv4);
  EXPECT_TRUE(out.has_ipv6);
  ASSERT_EQ(out.prefixes.size(), 2u);
}

TEST(Validate, VlanRange) {
  for (uint32_t v : {0u, 4095u, 4096u, 70000u}) {
    auto s = good();
    s.set_outer_vlan(v);
    expect_invalid(s, "outer_vlan", std::to_string(v));
    s = good();
    s.set_inner_vlan(v);
    expect_invalid(s, "inner_vlan", std::to_string(v));
  }
  for (uint32_t v : {1u, 4094u}) {
    auto s = good();
    s.set_outer_vlan(v);
    s.set_inner_vlan(v);
    SubscriberSpec out;
    EXPECT_TRUE(validate(s, ports(), "x", &out).ok());
  }
}

TEST(Validate, PortMustBeAConfiguredAccessPort) {
  auto s = good();
  s.set_port("upl0");
  expect_invalid(s, "port", "upl0");
  s.set_port("");
  expect_invalid(s, "port", "");
}

TEST(Validate, Mac) {
  for (const char* m : {"00:00:00:00:00:00", "01:00:5e:00:00:01", "ff:ff:ff:ff:ff:ff",
                        "02:00:00:00:00", "zz:00:00:00:00:01"}) {
    auto s = good();
    s.set_mac(m);
    expect_invalid(s, "mac", m);
  }
  auto s = good();
  s.set_mac("");
  SubscriberSpec out;
  ASSERT_TRUE(validate(s, ports(), "x", &out).ok());
  EXPECT_FALSE(out.has_mac);  // learn
}

TEST(Validate, Ipv4Unicast) {
  for (const char* a : {"0.1.2.3", "127.0.0.1", "224.0.0.1", "239.255.255.255", "240.0.0.1",
                        "255.255.255.255", "1.2.3", "2001:db8::1"}) {
    auto s = good();
    s.set_ipv4(a);
    expect_invalid(s, "ipv4", a);
  }
  for (const char* a : {"100.64.0.1", "192.0.2.1", "198.51.100.7", "203.0.113.9", "10.0.0.1"}) {
    auto s = good();
    s.set_ipv4(a);
    SubscriberSpec out;
    EXPECT_TRUE(validate(s, ports(), "x", &out).ok()) << a;
  }
}

TEST(Validate, Ipv6GlobalUnicast) {
  for (const char* a : {"fe80::1", "::1", "ff02::1", "fd00::1", "4000::1", "100.64.0.1"}) {
    auto s = good();
    s.set_ipv6(a);
    expect_invalid(s, "ipv6", a);
  }
  for (const char* a : {"2001:db8::1", "2a00::1", "3fff:ffff::1"}) {
    auto s = good();
    s.set_ipv6(a);
    SubscriberSpec out;
    EXPECT_TRUE(validate(s, ports(), "x", &out).ok()) << a;
  }
}

TEST(Validate, AtLeastOneAddress) {
  auto s = good();
  s.clear_ipv4();
  s.clear_ipv6();
  SubscriberSpec out;
  auto st = validate(s, ports(), "subscribers[0]", &out);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("ipv4"), std::string::npos);
  EXPECT_NE(st.error_message().find("ipv6"), std::string::npos);
  s.set_ipv6("2001:db8::5");
  EXPECT_TRUE(validate(s, ports(), "x", &out).ok());
  s.clear_ipv6();
  s.set_ipv4("100.64.0.5");
  EXPECT_TRUE(validate(s, ports(), "x", &out).ok());
}

TEST(Validate, Ipv6Prefixes) {
  for (const char* p : {"2001:db8::/39", "2001:db8::/65", "2001:db8::/128", "2001:db8:100:1::/56",
                        "fd00::/48", "2001:db8::", "10.0.0.0/24"}) {
    auto s = good();
    s.clear_ipv6_prefixes();
    s.add_ipv6_prefixes("2001:db8:200::/56");
    s.add_ipv6_prefixes(p);
    expect_invalid(s, "ipv6_prefixes[1]", p);
  }
  for (const char* p : {"2001:db8::/40", "2001:db8:0:1::/64", "2001:db8:100::/48"}) {
    auto s = good();
    s.clear_ipv6_prefixes();
    s.add_ipv6_prefixes(p);
    SubscriberSpec out;
    EXPECT_TRUE(validate(s, ports(), "x", &out).ok()) << p;
  }
}

TEST(Validate, Ipv4Prefixes) {
  for (const char* p : {"10.0.0.0/7", "198.51.100.0/32", "198.51.100.1/28", "127.0.0.0/8",
                        "224.0.0.0/8", "0.0.0.0/8", "2001:db8::/48", "198.51.100.0"}) {
    auto s = good();
    s.clear_ipv4_prefixes();
    s.add_ipv4_prefixes(p);
    expect_invalid(s, "ipv4_prefixes[0]", p);
  }
  for (const char* p : {"10.0.0.0/8", "198.51.100.0/31", "100.64.0.0/10"}) {
    auto s = good();
    s.clear_ipv4_prefixes();
    s.add_ipv4_prefixes(p);
    SubscriberSpec out;
    EXPECT_TRUE(validate(s, ports(), "x", &out).ok()) << p;
  }
}

TEST(Validate, DuplicatePrefixInOneEntry) {
  auto s = good();
  s.add_ipv6_prefixes("2001:db8:100::/56");
  SubscriberSpec out;
  auto st = validate(s, ports(), "x", &out);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("2001:db8:100::/56"), std::string::npos);
}

TEST(Validate, CanonicalFormMakesEqualSpecsEqual) {
  auto a = good();
  a.clear_ipv6_prefixes();
  a.add_ipv6_prefixes("2001:db8:200::/56");
  a.add_ipv6_prefixes("2001:db8:100::/56");
  auto b = a;
  b.clear_ipv6_prefixes();
  b.add_ipv6_prefixes("2001:DB8:100::/56");
  b.add_ipv6_prefixes("2001:db8:200:0::/56");
  b.set_mac("02-00-00-00-00-01");
  SubscriberSpec sa, sb;
  ASSERT_TRUE(validate(a, ports(), "x", &sa).ok());
  ASSERT_TRUE(validate(b, ports(), "x", &sb).ok());
  EXPECT_TRUE(sa.same_provisioning(sb));
  b.set_ipv4("100.64.0.11");
  ASSERT_TRUE(validate(b, ports(), "x", &sb).ok());
  EXPECT_FALSE(sa.same_provisioning(sb));
}

TEST(Validate, SpecRoundTripsToProto) {
  SubscriberSpec s;
  ASSERT_TRUE(validate(good(), ports(), "x", &s).ok());
  xbng::v1::Subscriber out;
  spec_to_proto(s, ports(), &out);
  EXPECT_EQ(out.port(), "acc0");
  EXPECT_EQ(out.outer_vlan(), 100u);
  EXPECT_EQ(out.inner_vlan(), 200u);
  EXPECT_EQ(out.mac(), "02:00:00:00:00:01");
  EXPECT_EQ(out.ipv4(), "100.64.0.10");
  EXPECT_EQ(out.ipv6(), "2001:db8::10");
  ASSERT_EQ(out.ipv6_prefixes_size(), 1);
  EXPECT_EQ(out.ipv6_prefixes(0), "2001:db8:100::/56");
  ASSERT_EQ(out.ipv4_prefixes_size(), 1);
  EXPECT_EQ(out.ipv4_prefixes(0), "198.51.100.0/28");
  EXPECT_EQ(key_to_string(s.key, ports()), "acc0/100/200");
}

TEST(Validate, KeyOrderIsPortOuterInner) {
  SubKey a{7, 1, 4094}, b{7, 2, 1}, c{9, 1, 1};
  EXPECT_LT(key_rank(a), key_rank(b));
  EXPECT_LT(key_rank(b), key_rank(c));
}

// Rate plans: policy ranges.
TEST(Validate, Policy) {
  auto with = [](uint64_t ur, uint64_t ub, uint64_t dr, uint64_t db) {
    auto s = good();
    auto* p = s.mutable_policy();
    p->set_up_rate_bps(ur);
    p->set_up_burst_bytes(ub);
    p->set_down_rate_bps(dr);
    p->set_down_burst_bytes(db);
    return s;
  };
  SubscriberSpec out;
  ASSERT_TRUE(validate(with(20000000, 125000, 0, 0), ports(), "s", &out).ok());
  EXPECT_TRUE(out.has_policy);
  EXPECT_EQ(out.policy, (PolicySpec{20000000, 125000, 0, 0}));
  ASSERT_TRUE(validate(good(), ports(), "s", &out).ok());
  EXPECT_FALSE(out.has_policy);
  struct Bad {
    uint64_t ur, ub, dr, db;
    const char* field;
  } bad[] = {{20000000, 1499, 0, 0, "up_burst_bytes"},         // < one 1500-byte packet
             {0, 0, 7999, 64000, "down_rate_bps"},             // < 8 kbit/s
             {0, 0, 100000000001ull, 64000, "down_rate_bps"},  // > 100 Gbit/s
             {0, 1500, 0, 0, "up_burst_bytes"},                // burst without a rate
             {0, 0, 1000000, (1ull << 30) + 1, "down_burst_bytes"}};
  for (const auto& b : bad) {
    auto st = validate(with(b.ur, b.ub, b.dr, b.db), ports(), "subscribers[3]", &out);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << b.field;
    EXPECT_NE(st.error_message().find(b.field), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find("subscribers[3]"), std::string::npos) << st.error_message();
  }
  // A port with a larger MTU raises the floor.
  auto r = ports();
  r.max_packet = [](uint32_t) { return 9000u; };
  EXPECT_FALSE(validate(with(20000000, 8999, 0, 0), r, "s", &out).ok());
  EXPECT_TRUE(validate(with(20000000, 9000, 0, 0), r, "s", &out).ok());
  EXPECT_EQ(policy_byte_ns_fp(8000000), 4096000u);  // 1000 ns per byte, exact
  EXPECT_EQ(policy_byte_ns_fp(0), 0u);
}

namespace {

// The core's statuses reach clients with their code and message as they are.
TEST(ApiStatus, SameCodeSameMessage) {
  const absl::Status core(absl::StatusCode::kFailedPrecondition, "subscribers[1]: owned");
  const grpc::Status g = to_grpc(core);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(g.error_message(), "subscribers[1]: owned");
  EXPECT_EQ(from_grpc(g), core);
  EXPECT_TRUE(to_grpc(absl::OkStatus()).ok());
  EXPECT_EQ(to_grpc(resource_exhausted("map {} full", "police")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

// A Get/List result back into a proto: the spec, counters when read, and a
// learned MAC marked as such.
TEST(ApiConvert, ViewToProto) {
  SubscriberView v;
  auto in = good();
  in.clear_mac();
  ASSERT_TRUE(validate_subscriber(in, ports(), "x", &v.spec).ok());
  xbng::v1::Subscriber a;
  view_to_proto(v, ports(), &a);
  EXPECT_FALSE(a.has_counters());
  EXPECT_EQ(a.mac(), "");
  v.has_counters = true;
  v.counters.up_packets = 3;
  v.counters.down_policed_bytes = 9;
  v.learned_mac = Mac{2, 0, 0, 0, 0, 0x42};
  xbng::v1::Subscriber b;
  view_to_proto(v, ports(), &b);
  EXPECT_EQ(b.counters().up_packets(), 3u);
  EXPECT_EQ(b.counters().down_policed_bytes(), 9u);
  EXPECT_EQ(b.mac(), "02:00:00:00:00:42");
  EXPECT_TRUE(b.mac_learned());
  EXPECT_EQ(b.ipv4(), in.ipv4());
  EXPECT_EQ(b.port(), "acc0");
}

TEST(ApiConvert, FailureToProto) {
  StreamFailure f;
  f.index = 12;
  f.key.port = "nowhere";
  f.key.outer_vlan = 5;
  f.key.inner_vlan = 6;
  f.status = invalid_argument("entry 12: field port: {}", "x");
  xbng::v1::Failure p;
  failure_to_proto(f, &p);
  EXPECT_EQ(p.index(), 12u);
  EXPECT_EQ(p.key().port(), "nowhere");
  EXPECT_EQ(p.key().outer_vlan(), 5u);
  EXPECT_EQ(p.key().inner_vlan(), 6u);
  EXPECT_EQ(p.code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(p.message(), "entry 12: field port: x");
}

}  // namespace
