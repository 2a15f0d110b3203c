#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "api/grpc_code.h"
#include "telemetry/metrics.h"
#include "xbng/reasons.h"

using namespace xbng::agent;
using testing::HasSubstr;

namespace {

MetricsSnapshot fake_snapshot() {
  MetricsSnapshot s;
  for (uint32_t i = 0; i < XBNG_REASON_MAX; ++i)
    s.stats.reasons.push_back({reason_name(i), reason_kind(i), 10 + i, 1000 + i});
  PortCounters acc;
  acc.name = "acc0";
  acc.role = "access";
  acc.valid = true;
  acc.rx_packets = 5, acc.rx_bytes = 500, acc.tx_packets = 6, acc.tx_bytes = 600;
  PortCounters odd = acc;
  odd.name = "we\"ird\\";
  PortCounters gone = acc;
  gone.name = "gone0";
  gone.valid = false;
  s.stats.ports = {acc, odd, gone};
  s.stats.subscribers = 3000;
  s.stats.maps = {{"subscribers", 3000, 6000}, {"routes_v4", 0, 0}};
  GrpcMetrics g;
  g.record("xbng.v1.Subscribers/GetStats", 0, 0.0003);  // first bucket
  g.record("xbng.v1.Subscribers/GetStats", 0, 0.003);   // le 0.005
  g.record("xbng.v1.Subscribers/GetStats", 5, 100.0);   // only +Inf
  s.grpc = g.snapshot();
  s.version = "9.8.7";
  s.abi = 1;
  s.start_time_seconds = 1700000000.5;
  s.last_reload_ok = false;
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Sample lines as "name{labels}" -> value text.
std::map<std::string, std::string> samples_of(const std::string& text) {
  std::map<std::string, std::string> out;
  for (const auto& l : lines_of(text))
    if (!l.empty() && l[0] != '#') {
      auto sp = l.rfind(' ');
      out[l.substr(0, sp)] = l.substr(sp + 1);
    }
  return out;
}

uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

TEST(Metrics, EveryReasonOnceWithItsKind) {
  const auto s = samples_of(render_metrics(fake_snapshot()));
  for (uint32_t i = 0; i < XBNG_REASON_MAX; ++i) {
    const std::string labels =
        std::string("{reason=\"") + reason_name(i) + "\",kind=\"" + reason_kind(i) + "\"}";
    ASSERT_EQ(s.count("xbng_packets_total" + labels), 1u) << labels;
    EXPECT_EQ(s.at("xbng_packets_total" + labels), std::to_string(10 + i));
    EXPECT_EQ(s.at("xbng_bytes_total" + labels), std::to_string(1000 + i));
  }
  EXPECT_EQ(s.at("xbng_packets_total{reason=\"forward_upstream\",kind=\"forward\"}"), "10");
  EXPECT_EQ(s.count("xbng_packets_total{reason=\"drop_too_big\",kind=\"drop\"}"), 1u);
  EXPECT_EQ(s.count("xbng_packets_total{reason=\"event_sent\",kind=\"info\"}"), 1u);
}

TEST(Metrics, PortsSubscribersMapsBuildInfo) {
  const std::string text = render_metrics(fake_snapshot());
  const auto s = samples_of(text);
  EXPECT_EQ(s.at("xbng_port_rx_packets_total{port=\"acc0\",role=\"access\"}"), "5");
  EXPECT_EQ(s.at("xbng_port_rx_bytes_total{port=\"acc0\",role=\"access\"}"), "500");
  EXPECT_EQ(s.at("xbng_port_tx_packets_total{port=\"acc0\",role=\"access\"}"), "6");
  EXPECT_EQ(s.at("xbng_port_tx_bytes_total{port=\"acc0\",role=\"access\"}"), "600");
  // Label values are escaped; a port whose counters could not be read is left out.
  EXPECT_EQ(s.count("xbng_port_rx_packets_total{port=\"we\\\"ird\\\\\",role=\"access\"}"), 1u);
  EXPECT_THAT(text, testing::Not(HasSubstr("gone0")));
  EXPECT_EQ(s.at("xbng_subscribers"), "3000");
  EXPECT_EQ(s.at("xbng_map_entries{map=\"subscribers\"}"), "3000");
  EXPECT_EQ(s.at("xbng_map_max_entries{map=\"subscribers\"}"), "6000");
  EXPECT_EQ(s.at("xbng_map_fill_ratio{map=\"subscribers\"}"), "0.5");
  EXPECT_EQ(s.at("xbng_map_fill_ratio{map=\"routes_v4\"}"), "0");
  EXPECT_EQ(s.at("xbng_build_info{version=\"9.8.7\",abi=\"1\"}"), "1");
  EXPECT_EQ(s.at("xbng_start_time_seconds"), "1700000000.5");
  EXPECT_EQ(s.at("xbng_config_last_reload_successful"), "0");
}

TEST(Metrics, GrpcRequestsAndLatencyHistogram) {
  const auto s = samples_of(render_metrics(fake_snapshot()));
  const std::string m = "method=\"xbng.v1.Subscribers/GetStats\"";
  EXPECT_EQ(s.at("xbng_grpc_requests_total{" + m + ",code=\"OK\"}"), "2");
  EXPECT_EQ(s.at("xbng_grpc_requests_total{" + m + ",code=\"NOT_FOUND\"}"), "1");
  EXPECT_EQ(s.at("xbng_grpc_request_duration_seconds_bucket{" + m + ",le=\"0.0005\"}"), "1");
  EXPECT_EQ(s.at("xbng_grpc_request_duration_seconds_bucket{" + m + ",le=\"0.0025\"}"), "1");
  EXPECT_EQ(s.at("xbng_grpc_request_duration_seconds_bucket{" + m + ",le=\"0.005\"}"), "2");
  EXPECT_EQ(s.at("xbng_grpc_request_duration_seconds_bucket{" + m + ",le=\"60\"}"), "2");
  EXPECT_EQ(s.at("xbng_grpc_request_duration_seconds_bucket{" + m + ",le=\"+Inf\"}"), "3");
  EXPECT_EQ(s.at("xbng_grpc_request_duration_seconds_count{" + m + "}"), "3");
  EXPECT_NEAR(std::stod(s.at("xbng_grpc_request_duration_seconds_sum{" + m + "}")), 100.0033, 1e-9);
  // Buckets are cumulative: never decreasing.
  uint64_t prev = 0;
  for (double le : kLatencyBuckets) {
    std::ostringstream k;
    k << "xbng_grpc_request_duration_seconds_bucket{" << m << ",le=\"" << le << "\"}";
    ASSERT_EQ(s.count(k.str()), 1u) << k.str();
    uint64_t v = std::stoull(s.at(k.str()));
    EXPECT_GE(v, prev);
    prev = v;
  }
}

// The text format: every family has one HELP and one TYPE line before its
// samples, names are valid, counters end in _total, values parse.
TEST(Metrics, ExpositionFormat) {
  const std::string text = render_metrics(fake_snapshot());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*$)");
  const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)");
  const std::regex sample(
      R"re(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? (\S+)$)re");
  std::map<std::string, std::string> types;
  std::set<std::string> helped;
  for (const auto& l : lines_of(text)) {
    std::smatch m;
    if (std::regex_match(l, m, help)) {
      EXPECT_TRUE(helped.insert(m[1]).second) << "HELP twice: " << l;
    } else if (std::regex_match(l, m, type)) {
      EXPECT_TRUE(types.emplace(m[1], m[2]).second) << "TYPE twice: " << l;
      EXPECT_TRUE(helped.count(m[1])) << "TYPE before HELP: " << l;
      if (m[2] == "counter") {
        EXPECT_THAT(std::string(m[1]), testing::EndsWith("_total"));
      }
    } else {
      ASSERT_TRUE(std::regex_match(l, m, sample)) << "bad line: " << l;
      std::string family = m[1];
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        if (!types.count(family) && family.size() > strlen(suffix) &&
            family.compare(family.size() - strlen(suffix), std::string::npos, suffix) == 0)
          family.resize(family.size() - strlen(suffix));
      EXPECT_TRUE(types.count(family)) << "sample before its TYPE: " << l;
      const std::string v = m[5];
      if (v != "+Inf") {
        EXPECT_NO_THROW((void)std::stod(v)) << l;
      }
    }
  }
  for (const char* f :
       {"xbng_packets_total", "xbng_bytes_total", "xbng_port_rx_packets_total",
        "xbng_port_rx_bytes_total", "xbng_port_tx_packets_total", "xbng_port_tx_bytes_total",
        "xbng_subscribers", "xbng_map_entries", "xbng_map_max_entries", "xbng_map_fill_ratio",
        "xbng_grpc_requests_total", "xbng_grpc_request_duration_seconds", "xbng_build_info",
        "xbng_start_time_seconds"})
    EXPECT_TRUE(types.count(f)) << f;
  EXPECT_EQ(types["xbng_grpc_request_duration_seconds"], "histogram");
  EXPECT_EQ(types["xbng_subscribers"], "gauge");
}

TEST(Metrics, GrpcCodeNames) {
  EXPECT_STREQ(grpc_code_name(grpc::StatusCode::OK), "OK");
  EXPECT_STREQ(grpc_code_name(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(grpc_code_name(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_STREQ(grpc_code_name(99), "UNKNOWN");
}

// The endpoint on loopback: serves /metrics, 500 with the reason when the
// scrape fails, refuses an address in use, and stops when destroyed.
TEST(Metrics, ServerServesAndStops) {
  const uint16_t port = free_port();
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  bool fail = false;
  {
    MetricsServer srv(listen, [&] {
      if (fail) throw std::runtime_error("reading map stats[0]: boom");
      return std::string("xbng_subscribers 7\n");
    });
    httplib::Client cli("127.0.0.1", port);
    auto r = cli.Get("/metrics");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "xbng_subscribers 7\n");
    EXPECT_THAT(r->get_header_value("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
    fail = true;
    r = cli.Get("/metrics");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 500);
    EXPECT_THAT(r->body, HasSubstr("boom"));
    EXPECT_EQ(cli.Get("/nope")->status, 404);
    try {
      MetricsServer second(listen, [] { return std::string(); });
      ADD_FAILURE() << "bound " << listen << " twice";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(listen));
    }
  }
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(1);
  EXPECT_FALSE(cli.Get("/metrics")) << "still serving after destruction";
  EXPECT_THROW(MetricsServer("127.0.0.1", [] { return std::string(); }), std::runtime_error);
}
