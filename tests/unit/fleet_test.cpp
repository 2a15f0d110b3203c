// Fleet key schema (docs/fleet.md) and the [etcd] config section.
#include <google/protobuf/util/json_util.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

#include "config/config.h"
#include "etcd/value_codec.h"
#include "fleet/fleet.h"
#include "xbng/v1/xbng.pb.h"

using namespace xbng::agent;

TEST(FleetKeys, Schema) {
  EXPECT_EQ(subscriber_etcd_key("bng1", "eth1", 100, 7),
            "/xbng/v1/nodes/bng1/subscribers/eth1/100/7");
  EXPECT_EQ(node_subscribers_prefix("bng1"), "/xbng/v1/nodes/bng1/subscribers/");
  EXPECT_EQ(status_etcd_key("bng1"), "/xbng/v1/status/bng1");
  EXPECT_EQ(prefix_range_end("/a/"), "/a0");
  EXPECT_EQ(prefix_range_end(std::string("a\xff", 2)), "b");
}

TEST(FleetKeys, NodeNames) {
  EXPECT_FALSE(check_node_name("bng-1.pop_a"));
  EXPECT_TRUE(check_node_name(""));
  EXPECT_TRUE(check_node_name("a/b"));
  EXPECT_TRUE(check_node_name(std::string(65, 'a')));
}

TEST(FleetKeys, Suffix) {
  std::string port;
  uint32_t o = 0, i = 0;
  EXPECT_FALSE(parse_subscriber_key_suffix("eth1/100/4094", &port, &o, &i));
  EXPECT_EQ(port, "eth1");
  EXPECT_EQ(o, 100u);
  EXPECT_EQ(i, 4094u);
  for (const char* bad : {"eth1/100", "eth1/100/7/8", "/100/7", "eth1/0100/7", "eth1/100/4095",
                          "eth1/0/7", "eth1/x/7", "eth1/100/", "eth1/+1/7"})
    EXPECT_TRUE(parse_subscriber_key_suffix(bad, &port, &o, &i)) << bad;
}

TEST(FleetKeys, ValueRoundTripAndMismatch) {
  xbng::v1::Subscriber s;
  s.set_port("eth1");
  s.set_outer_vlan(100);
  s.set_inner_vlan(7);
  s.set_ipv4("100.64.0.7");
  s.add_ipv6_prefixes("2001:db8:2000::/64");
  const std::string js = encode_subscriber_value(s);
  EXPECT_NE(js.find("\"outerVlan\":100"), std::string::npos) << js;  // canonical proto3 JSON
  xbng::v1::Subscriber back;
  EXPECT_FALSE(decode_subscriber_value(js, "eth1", 100, 7, &back));
  EXPECT_EQ(back.SerializeAsString(), s.SerializeAsString());
  // Original field names are accepted too (JsonStringToMessage).
  EXPECT_FALSE(decode_subscriber_value(R"({"port":"eth1","outer_vlan":100,"inner_vlan":7})", "eth1",
                                       100, 7, &back));
  auto e = decode_subscriber_value(js, "eth1", 100, 8, &back);
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("key says eth1/100/8"), std::string::npos) << *e;
  EXPECT_TRUE(decode_subscriber_value(js, "eth2", 100, 7, &back));
  EXPECT_TRUE(decode_subscriber_value("{not json", "eth1", 100, 7, &back));
  EXPECT_TRUE(decode_subscriber_value(R"({"port":"eth1","bogus":1})", "eth1", 100, 7, &back));
}

TEST(FleetKeys, Endpoints) {
  EXPECT_EQ(split_endpoints("a:1, b:2,,https://c:3"),
            (std::vector<std::string>{"a:1", "b:2", "https://c:3"}));
}

TEST(FleetConfig, SectionAndChecks) {
  const std::string path = ::testing::TempDir() + "/fleet.toml";
  {
    std::ofstream f(path);
    f << "[etcd]\nendpoints = [\"10.0.0.1:2379\", \"https://10.0.0.2:2379\"]\nnode = \"bng1\"\n"
         "username = \"xbng\"\npassword = \"secret\"\nstatus_ttl = 5\nfull_read_readers = 3\n";
  }
  Config c;
  c.access = {"eth1"};
  c.uplink = {"eth0"};
  c.gateway_ipv4 = "100.64.0.1";
  load_config_file(path, &c);
  EXPECT_TRUE(check_config(c).ok());
  auto fo = to_fleet_options(c);
  ASSERT_TRUE(fo);
  EXPECT_EQ(fo->node, "bng1");
  EXPECT_EQ(fo->etcd.endpoints.size(), 2u);
  EXPECT_EQ(fo->etcd.password, "secret");
  EXPECT_EQ(fo->status_ttl_seconds, 5u);
  EXPECT_EQ(fo->full_read_readers, 3u);
  Config dflt;
  dflt.etcd_endpoints = {"a:1"};
  EXPECT_EQ(to_fleet_options(dflt)->full_read_readers, 4u);  // the default

  Config no = c;
  no.etcd_node.clear();
  EXPECT_FALSE(check_config(no).ok());
  no = c;
  no.etcd_endpoints = {"nohostport"};
  EXPECT_FALSE(check_config(no).ok());
  no = c;
  no.etcd_node = "a/b";
  EXPECT_FALSE(check_config(no).ok());
  for (uint64_t bad : {0, 9}) {
    no = c;
    no.etcd_full_read_readers = bad;
    EXPECT_FALSE(check_config(no).ok()) << bad;
  }
  no = c;
  no.etcd_full_read_readers = 1;
  EXPECT_FALSE(plan_reload(c, no).refused.empty());  // read at start only
  no = c;
  no.etcd_username.clear();
  EXPECT_FALSE(check_config(no).ok());  // a password without a user
  Config single = c;
  single.etcd_endpoints.clear();
  single.etcd_node.clear();
  EXPECT_FALSE(to_fleet_options(single));  // without etcd nothing changes
  EXPECT_FALSE(plan_reload(c, no).refused.empty());
  std::remove(path.c_str());
}

// The fast value parser and JsonStringToMessage agree: same message, or both
// refuse (the fast path declines anything unusual and the exact one decides).
TEST(FleetKeys, FastAndExactParsersAgree) {
  const char* cases[] = {
      R"({"port":"eth1","outerVlan":100,"innerVlan":7,"ipv4":"100.64.0.7","ipv6Prefixes":["2001:db8::/64"]})",
      R"( { "port" : "eth1" , "outer_vlan" : 100 , "inner_vlan" : 7 , "mac" : "02:00:00:00:00:01" } )",
      R"({"port":"eth1","outerVlan":"100","innerVlan":7})",
      R"({"port":"eth\u0031","outerVlan":100,"innerVlan":7})",
      R"({"port":"eth1","outerVlan":100,"innerVlan":7,"counters":{"upPackets":"1"}})",
      R"({"port":"eth1","outerVlan":100,"innerVlan":7,"macLearned":true})",
      R"({"port":"eth1","outerVlan":100,"outerVlan":100,"innerVlan":7})",
      R"({"port":"eth1","outerVlan":100,"innerVlan":7,"ipv4Prefixes":[]})",
      R"({"port":"eth1","outerVlan":100,"innerVlan":7,"ipv4":null})",
      R"({"port":"eth1","outerVlan":0100,"innerVlan":7})",
      R"({"port":"eth1","outerVlan":100.0,"innerVlan":7})",
      R"({"port":"eth1","outerVlan":100,"innerVlan":7} x)",
      R"({"port":"eth1","outerVlan":100,"innerVlan":7,})",
  };
  for (const char* c : cases) {
    xbng::v1::Subscriber fast, exact;
    auto e1 = decode_subscriber_value(c, "eth1", 100, 7, &fast);
    auto st = google::protobuf::util::JsonStringToMessage(c, &exact);
    EXPECT_EQ(!e1, st.ok() && exact.port() == "eth1" && exact.outer_vlan() == 100 &&
                       exact.inner_vlan() == 7)
        << c;
    if (!e1) {
      EXPECT_EQ(fast.SerializeAsString(), exact.SerializeAsString()) << c;
    }
  }
}

TEST(FleetKeys, FullReadRangesCoverThePrefix) {
  const std::string pre = node_subscribers_prefix("n1");
  auto r = full_read_ranges(pre, {"eth1", "acc0"});
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r.front().first, pre);
  EXPECT_EQ(r.back().second, prefix_range_end(pre));
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_EQ(r[i].first, r[i - 1].second);
    EXPECT_LT(r[i].first, r[i].second);
  }
  // Every key falls in exactly one range; one (port, outer) never spans two.
  auto where = [&](const std::string& k) {
    int n = 0, at = -1;
    for (size_t i = 0; i < r.size(); ++i)
      if (r[i].first <= k && k < r[i].second) ++n, at = static_cast<int>(i);
    EXPECT_EQ(n, 1) << k;
    return at;
  };
  for (const char* port : {"eth1", "acc0", "zzz", "a"})
    for (uint32_t outer : {1u, 9u, 10u, 100u, 109u, 1000u, 4094u})
      EXPECT_EQ(where(subscriber_etcd_key("n1", port, outer, 1)),
                where(subscriber_etcd_key("n1", port, outer, 4094)));
}

TEST(FleetKeys, Utf8CheckAndEscape) {
  EXPECT_FALSE(invalid_utf8_at("plain /xbng/v1/ é € 𝄞"));
  EXPECT_EQ(invalid_utf8_at("ab\xff"), 2u);
  EXPECT_EQ(invalid_utf8_at("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(invalid_utf8_at("\xed\xa0\x80"), 0u);      // a surrogate
  EXPECT_EQ(invalid_utf8_at("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(invalid_utf8_at("x\xe2\x82"), 1u);         // truncated
  // Past and inside runs of eight ASCII bytes (checked a word at a time).
  EXPECT_EQ(invalid_utf8_at("/xbng/v1/nodes/\xff"), 15u);
  EXPECT_EQ(invalid_utf8_at("/xbng/v1\xc0\xaf/nodes/"), 8u);
  EXPECT_EQ(invalid_utf8_at("0123456789abcdef\xe2\x82"), 16u);
  EXPECT_FALSE(invalid_utf8_at("0123456789abcdef\xe2\x82\xac 0123456789"));
  EXPECT_EQ(escape_bytes("a\xff\xfe"
                         "b é"),
            "a\\xff\\xfeb é");
  EXPECT_EQ(escape_bytes("\xc3("), "\\xc3(");
}

TEST(FleetKeys, KvNotUtf8IsRefused) {
  const std::string p = node_subscribers_prefix("n1");
  std::string port;
  uint32_t o = 0, i = 0;
  bool key_ok = false;
  xbng::v1::Subscriber m;
  auto e = decode_subscriber_kv(
      p, p + "acc0/102/1",
      "{\"port\":\"acc0\",\"outerVlan\":102,\"innerVlan\":1,\"ipv4\":\"100.64.4.1\","
      "\"mac\":\"\xff\xfe\xfd\"}",
      &port, &o, &i, &key_ok, &m);
  ASSERT_TRUE(e);
  EXPECT_TRUE(key_ok);  // the key parsed: a subscriber applied before keeps its state
  EXPECT_EQ(port, "acc0");
  EXPECT_NE(e->find("value is not valid UTF-8 (byte 0xff at offset 72"), std::string::npos) << *e;
  EXPECT_FALSE(invalid_utf8_at(*e));
  e = decode_subscriber_kv(p, p + "acc0/102/1\xff",
                           R"({"port":"acc0","outerVlan":102,"innerVlan":1})", &port, &o, &i,
                           &key_ok, &m);
  ASSERT_TRUE(e);
  EXPECT_FALSE(key_ok);
  EXPECT_NE(e->find("key is not valid UTF-8 (byte 0xff at offset"), std::string::npos) << *e;
  EXPECT_FALSE(decode_subscriber_kv(p, p + "acc0/102/1",
                                    R"({"port":"acc0","outerVlan":102,"innerVlan":1})", &port, &o,
                                    &i, &key_ok, &m));
}

TEST(FleetStatus, RawBytesAreEscapedNeverThrown) {
  std::map<std::string, std::string> refused;
  for (int k = 0; k < 150; ++k) refused[fmt::format("/k/{:03}\xff", k)] = "bad \xfe value";
  FleetStatus s;
  s.node = "n1";
  s.refused = &refused;
  s.last_error = "watch via x: \xc3(";
  std::string js;
  ASSERT_NO_THROW(js = render_fleet_status(s));
  auto j = nlohmann::json::parse(js);
  EXPECT_EQ(j["refused_count"], 150);
  EXPECT_EQ(j["refused"].size(), kStatusRefusedListed);
  EXPECT_EQ(j["refused"][0]["key"], "/k/000\\xff");
  EXPECT_EQ(j["refused"][0]["reason"], "bad \\xfe value");
  EXPECT_EQ(j["etcd"]["last_error"], "watch via x: \\xc3(");
}
