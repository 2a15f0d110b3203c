// The shared subscriber JSON decoder (import JSON Lines, fleet etcd values):
// its fast path takes the common forms in either spelling of the field
// names, and whatever it takes it reads as JsonStringToMessage does.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "api/subscriber_file.h"
#include "api/subscriber_json.h"
#include "xbng/v1/xbng.pb.h"

using namespace xbng::agent;

namespace {

// What JsonStringToMessage makes of json: the message, or nothing.
std::optional<std::string> exact(std::string_view json) {
  xbng::v1::Subscriber s;
  auto st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &s);
  if (!st.ok()) return std::nullopt;
  return s.SerializeAsString();
}

}  // namespace

TEST(SubscriberJson, FastPathTakesBothSpellings) {
  const char* common[] = {
      R"({"port":"eth1","outer_vlan":100,"inner_vlan":7,"ipv4":"100.64.0.7"})",
      R"({"port":"eth1","outerVlan":100,"innerVlan":7,"ipv4":"100.64.0.7"})",
      R"( { "port" : "eth1" , "outer_vlan" : 100 , "innerVlan" : 7 , "mac" : "02:00:00:00:00:01" } )",
      R"({"port":"eth1","outer_vlan":4094,"inner_vlan":1,"ipv6":"2001:db8::1",)"
      R"("ipv6_prefixes":["2001:db8:1::/56", "2001:db8:2::/56"],"ipv4Prefixes":[]})",
      "{\"port\":\"eth1\",\n\"outer_vlan\":100\n,\"inner_vlan\":7\r\n}",
      R"({})",
      R"({"port":"eth1","outer_vlan":100,"inner_vlan":7,"policy":{"up_rate_bps":25000000,)"
      R"("up_burst_bytes":312500,"down_rate_bps":50000000,"down_burst_bytes":625000}})",
      R"({"port":"eth1","policy":{"upRateBps":"25000000","downBurstBytes":"0"},"innerVlan":7})",
      R"({"policy":{"upBurstBytes":"312500","downRateBps":50000000}})",
      R"({"port":"eth1","policy" : { } })",
      R"({"policy":{ "down_rate_bps" : 9007199254740991 }})",
  };
  for (const char* c : common) {
    xbng::v1::Subscriber fast;
    ASSERT_TRUE(subscriber_from_json_fast(c, &fast)) << c;
    auto e = exact(c);
    ASSERT_TRUE(e) << c;
    EXPECT_EQ(fast.SerializeAsString(), *e) << c;
  }
  // One message reused line after line (as an import reads a file): each
  // line reads as it does alone, a rate plan of an earlier line not carried
  // over, whole or in part (the decoder reuses its allocation).
  for (int pass = 0; pass < 2; ++pass) {
    xbng::v1::Subscriber reused;
    for (size_t i = 0; i < std::size(common); ++i) {
      const char* c = common[pass ? std::size(common) - 1 - i : i];
      ASSERT_TRUE(subscriber_from_json_fast(c, &reused)) << c;
      EXPECT_EQ(reused.SerializeAsString(), *exact(c)) << c;
    }
  }
  xbng::v1::Subscriber s;
  ASSERT_FALSE(subscriber_from_json(common[3], &s));
  EXPECT_EQ(s.port(), "eth1");
  EXPECT_EQ(s.outer_vlan(), 4094u);
  ASSERT_EQ(s.ipv6_prefixes_size(), 2);
  EXPECT_EQ(s.ipv6_prefixes(1), "2001:db8:2::/56");
}

// The unusual forms go to JsonStringToMessage, which decides: the result of
// subscriber_from_json is always exactly its.
TEST(SubscriberJson, UnusualFormsGoToTheExactParser) {
  const char* unusual[] = {
      R"({"port":"eth1","outer_vlan":"100","inner_vlan":7})",              // quoted number
      R"({"port":"eth\u0031","outer_vlan":100,"inner_vlan":7})",           // escape
      R"({"port":"eth1","outer_vlan":100,"outerVlan":100})",               // twice, two spellings
      R"({"port":"eth1","outer_vlan":100,"outer_vlan":100})",              // twice
      R"({"port":"eth1","outer_vlan":100,"inner_vlan":7,"ipv4":null})",    // null
      R"({"port":"eth1","outer_vlan":0100})",                              // leading zero
      R"({"port":"eth1","outer_vlan":100.0})",                             // fraction
      R"({"port":"eth1","outer_vlan":1e2})",                               // exponent
      R"({"port":"eth1","outer_vlan":-1})",                                // sign
      R"({"port":"eth1","outer_vlan":4294967296})",                        // > uint32
      R"({"port":"eth1","outer_vlan":12345678901})",                       // 11 digits
      R"({"port":"eth1","outer_vlan":100,"counters":{"upPackets":"1"}})",  // output-only
      R"({"port":"eth1","macLearned":true})",                              // output-only
      R"({"port":"eth1","bogus":1})",                                      // unknown
      R"({"port":"eth1","outer_vlan":100} x)",                             // trailing junk
      R"({"port":"eth1","outer_vlan":100,})",                              // trailing comma
      R"({"port":"eth1","ipv6_prefixes":["a",]})",                         // trailing comma
      R"({"port":"eth1")",                                                 // unterminated
      R"({"port":"ethé"})",                                                // non-ASCII
      R"({"policy":{"up_rate_bps":1,"up_rate_bps":2}})",                   // twice in policy
      R"({"policy":{"up_rate_bps":1,"upRateBps":2}})",                     // two spellings
      R"({"policy":{"up_rate_bps":-1}})",                                  // sign
      R"({"policy":{"up_rate_bps":0100}})",                                // leading zero
      R"({"policy":{"up_rate_bps":"0100"}})",                              // quoted, leading 0
      R"({"policy":{"up_rate_bps":9007199254740992}})",                    // >= 2^53
      R"({"policy":{"up_rate_bps":1.5}})",                                 // fraction
      R"({"policy":{"up_rate_bps":"1}})",                                  // unterminated
      R"({"policy":{"bogus":1}})",                                         // unknown
      R"({"policy":null})",                                                // null
      R"({"policy":{"up_rate_bps":1,}})",                                  // trailing comma
      R"([])",
      "",
  };
  for (const char* c : unusual) {
    xbng::v1::Subscriber fast;
    EXPECT_FALSE(subscriber_from_json_fast(c, &fast)) << c;
    xbng::v1::Subscriber s;
    auto err = subscriber_from_json(c, &s);
    auto e = exact(c);
    EXPECT_EQ(!err, e.has_value()) << c;
    if (!err && e) {
      EXPECT_EQ(s.SerializeAsString(), *e) << c;
    }
    if (err) {
      EXPECT_FALSE(err->empty()) << c;
    }
  }
}

// `xbngctl sub import` JSON Lines go through the same decoder: either
// spelling, and a bad line is reported with its number and skipped.
TEST(SubscriberJson, ImportFileJsonLines) {
  const std::string path = ::testing::TempDir() + "xbng_import_test.jsonl";
  {
    std::ofstream f(path);
    f << R"({"port":"eth1","outer_vlan":100,"inner_vlan":7,"ipv4":"100.64.0.7"})"
      << "\n"
      << R"({"port":"eth1","outerVlan":100,"innerVlan":8,"ipv4":"100.64.0.8"})"
      << "\n"
      << R"({"port":"eth1","outer_vlan":"100","inner_vlan":9})"
      << "\n"
      << R"({"port":"eth1","outer_vlan":100,"inner_vlan":10,"bogus":1})"
      << "\n";
  }
  std::vector<std::string> got, errors;
  const uint64_t bad = read_import_file(
      path,
      [&](const xbng::v1::Subscriber& s) {
        got.push_back(s.port() + "/" + std::to_string(s.outer_vlan()) + "/" +
                      std::to_string(s.inner_vlan()));
        return true;
      },
      &errors);
  std::remove(path.c_str());
  EXPECT_EQ(bad, 1u);
  EXPECT_EQ(got, (std::vector<std::string>{"eth1/100/7", "eth1/100/8", "eth1/100/9"}));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find(":4: "), std::string::npos) << errors[0];
}
