// The [radius] and [plans] sections: loading, --check-config's messages,
// and the client settings they become.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "config/config.h"
#include "config/radius_config.h"

using namespace xbng::agent;

namespace {

std::string write_tmp(const std::string& text) {
  char path[] = "/tmp/xbng-radius-config-test-XXXXXX";
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

Config base() {
  Config c;
  c.access = {"acc0"};
  c.uplink = {"upl0"};
  c.gateway_ipv4 = "100.64.0.1";
  return c;
}

std::string errors_of(const Config& c) {
  std::string s;
  for (const auto& e : check_config(c).errors) s += e + "\n";
  return s;
}

struct SecretFile {
  std::string path = write_tmp("s3cret\n");
  ~SecretFile() { std::remove(path.c_str()); }
};

}  // namespace

TEST(RadiusConfig, LoadsTheIssueSchema) {
  SecretFile sec;
  auto p = write_tmp(R"(
[radius]
servers = [{ address = "192.0.2.10", auth_port = 1812, acct_port = 1813, secret_file = ")" +
                     sec.path + R"(" },
           { address = "2001:db8::10", auth_port = 11812, acct_port = 11813, secret = "inline" }]
nas_identifier = "bng7"
username = "{mac}/{circuit_id}"
password = "pw"
timeout_ms = 500
retries = 2
dead_time_s = 20
interim_interval_s = 600
interim_min_s = 120
reject_hold_s = 5
require_message_authenticator = true
coa_listen = "192.0.2.1:3799"
coa_clients = [{ address = "192.0.2.10", secret_file = ")" +
                     sec.path + R"(" }]
[plans]
gold = { up_rate_bps = 20000000, up_burst_bytes = 250000, down_rate_bps = 100000000, down_burst_bytes = 1250000 }
silver = { up_rate_bps = 10000000, up_burst_bytes = 125000 }
)");
  Config c = base();
  load_config_file(p, &c);
  std::remove(p.c_str());
  ASSERT_TRUE(c.radius.present);
  ASSERT_EQ(c.radius.servers.size(), 2u);
  EXPECT_EQ(c.radius.servers[0].address, "192.0.2.10");
  EXPECT_EQ(c.radius.servers[0].secret_file, sec.path);
  EXPECT_EQ(c.radius.servers[1].auth_port, 11812u);
  EXPECT_EQ(c.radius.servers[1].secret, "inline");
  EXPECT_EQ(c.radius.nas_identifier, "bng7");
  EXPECT_EQ(c.radius.username, "{mac}/{circuit_id}");
  EXPECT_EQ(c.radius.password, "pw");
  EXPECT_EQ(c.radius.timeout_ms, 500u);
  EXPECT_EQ(c.radius.retries, 2u);
  EXPECT_EQ(c.radius.dead_time_s, 20u);
  EXPECT_EQ(c.radius.interim_interval_s, 600u);
  EXPECT_EQ(c.radius.interim_min_s, 120u);
  EXPECT_EQ(c.radius.reject_hold_s, 5u);
  EXPECT_EQ(c.radius.coa_listen, "192.0.2.1:3799");
  ASSERT_EQ(c.radius.coa_clients.size(), 1u);
  ASSERT_EQ(c.plans.size(), 2u);
  EXPECT_EQ(c.plans["gold"].down_rate, 100000000u);
  EXPECT_EQ(c.plans["silver"].down_rate, 0u);
  auto chk = check_config(c);
  EXPECT_TRUE(chk.ok()) << errors_of(c);
  EXPECT_TRUE(chk.warnings.empty());

  auto rc = to_radius_client_config(c.radius);
  ASSERT_TRUE(rc.ok()) << rc.status();
  ASSERT_EQ(rc->servers.size(), 2u);
  EXPECT_EQ(rc->servers[0].secret, "s3cret");  // trailing newline dropped
  EXPECT_EQ(rc->servers[1].secret, "inline");
  EXPECT_EQ(rc->servers[1].acct_port, 11813);
  EXPECT_EQ(rc->timeout_ms, 500u);
  EXPECT_TRUE(rc->require_message_authenticator);
}

TEST(RadiusConfig, DefaultsAndAbsentSection) {
  Config c = base();
  EXPECT_FALSE(c.radius.present);
  EXPECT_TRUE(check_config(c).ok());  // no [radius]: nothing required
  EXPECT_EQ(c.radius.username, "{port}:{svlan}:{cvlan}");
  EXPECT_EQ(c.radius.password, "");
  EXPECT_EQ(c.radius.timeout_ms, 1000u);
  EXPECT_EQ(c.radius.retries, 3u);
  EXPECT_EQ(c.radius.dead_time_s, 30u);
  EXPECT_EQ(c.radius.interim_interval_s, 300u);
  EXPECT_EQ(c.radius.reject_hold_s, 10u);
  EXPECT_TRUE(c.radius.require_message_authenticator);
  EXPECT_EQ(c.radius.coa_listen, "[::]:3799");
}

TEST(RadiusConfig, UnknownKeysAndBadTypes) {
  EXPECT_NE(load_error("[radius]\nserver = []\n").find("radius.server: unknown key"),
            std::string::npos);
  EXPECT_NE(load_error("[radius]\nservers = [{ address = \"192.0.2.1\", port = 1 }]\n")
                .find("radius.servers[0].port: unknown key"),
            std::string::npos);
  EXPECT_NE(load_error("[radius]\ntimeout_ms = \"1s\"\n")
                .find("radius.timeout_ms: expected a non-negative integer"),
            std::string::npos);
  EXPECT_NE(load_error("[radius]\nservers = \"192.0.2.1\"\n")
                .find("radius.servers: expected an array of tables"),
            std::string::npos);
  EXPECT_NE(
      load_error("[radius]\nrequire_message_authenticator = 1\n").find("expected true or false"),
      std::string::npos);
  EXPECT_NE(load_error("[plans]\ngold = 5\n").find("plans.gold: expected a table"),
            std::string::npos);
  EXPECT_NE(load_error("[plans]\ngold = { up_rate = 5 }\n").find("plans.gold.up_rate: unknown key"),
            std::string::npos);
}

TEST(RadiusConfig, ChecksEveryValue) {
  Config c = base();
  c.radius.present = true;
  EXPECT_NE(errors_of(c).find("radius.servers: at least one server is needed"), std::string::npos);
  c.radius.servers = {{"radius.example", 0, 70000, "", ""},
                      {"192.0.2.1", 1812, 1813, "a", "/nonexistent/secret"},
                      {"192.0.2.1", 1812, 1813, "b", ""}};
  c.radius.username = "{port}-{vlan}";
  c.radius.password = std::string(129, 'p');
  c.radius.timeout_ms = 0;
  c.radius.retries = 11;
  c.radius.dead_time_s = 3601;
  c.radius.interim_interval_s = 59;
  c.radius.interim_min_s = 0;
  c.radius.reject_hold_s = 4000;
  c.radius.coa_listen = "3799";
  c.radius.coa_clients = {{"not-an-ip", "", ""}, {"192.0.2.9", "x", ""}, {"192.0.2.9", "x", ""}};
  c.plans["bad"] = PolicySpec{1, 0, 0, 0};
  std::string e = errors_of(c);
  for (const char* want : {
           "radius.servers[0].address radius.example: not an IPv4 or IPv6 address",
           "radius.servers[0].auth_port 0: expected 1..65535",
           "radius.servers[0].acct_port 70000: expected 1..65535",
           "radius.servers[0]: needs secret_file (or secret)",
           "radius.servers[1]: give secret or secret_file, not both",
           "radius.servers[2]: 192.0.2.1 port 1812 is listed twice",
           "radius.username \"{port}-{vlan}\": unknown placeholder {vlan}",
           "radius.password: 129 characters, at most 128",
           "radius.timeout_ms 0: expected 10..60000",
           "radius.retries 11: expected 0..10",
           "radius.dead_time_s 3601: expected 0..3600",
           "radius.interim_interval_s 59: expected 60..604800",
           "radius.interim_min_s 0: expected 1..604800",
           "radius.reject_hold_s 4000: expected 0..3600",
           "radius.coa_listen 3799: expected HOST:PORT",
           "radius.coa_clients[0].address not-an-ip: not an IPv4 or IPv6 address",
           "radius.coa_clients[0]: needs secret_file (or secret)",
           "radius.coa_clients[2]: 192.0.2.9 is listed twice",
           "plans.bad: up_rate_bps 1",
       })
    EXPECT_NE(e.find(want), std::string::npos) << "missing: " << want << "\nin:\n" << e;
  // Secrets never appear in the messages.
  EXPECT_EQ(e.find("\"a\""), std::string::npos);
}

TEST(RadiusConfig, ShortInterimFloorIsAWarning) {
  Config c = base();
  c.radius.present = true;
  c.radius.servers = {{"192.0.2.1", 1812, 1813, "s", ""}};
  EXPECT_EQ(c.radius.interim_min_s, 60u);
  EXPECT_TRUE(check_config(c).warnings.empty());
  c.radius.interim_min_s = 1;
  auto chk = check_config(c);
  EXPECT_TRUE(chk.ok());
  ASSERT_EQ(chk.warnings.size(), 1u);
  EXPECT_NE(chk.warnings[0].find("radius.interim_min_s 1"), std::string::npos);
}

TEST(RadiusConfig, SecretFileProblems) {
  SecretFile empty;
  std::ofstream(empty.path, std::ios::trunc) << "\n";
  Config c = base();
  c.radius.present = true;
  c.radius.servers = {{"192.0.2.1", 1812, 1813, "", empty.path}};
  EXPECT_NE(errors_of(c).find("secret_file " + empty.path + ": empty"), std::string::npos);
  EXPECT_FALSE(to_radius_client_config(c.radius).ok());
}

TEST(RadiusConfig, MessageAuthenticatorOffIsAWarning) {
  Config c = base();
  c.radius.present = true;
  c.radius.servers = {{"192.0.2.1", 1812, 1813, "s", ""}};
  c.radius.require_message_authenticator = false;
  auto chk = check_config(c);
  EXPECT_TRUE(chk.ok());
  ASSERT_EQ(chk.warnings.size(), 1u);
  EXPECT_NE(chk.warnings[0].find("BlastRADIUS"), std::string::npos);
}

TEST(RadiusConfig, UsernameTemplates) {
  EXPECT_FALSE(check_username_template("{port}:{svlan}:{cvlan}"));
  EXPECT_FALSE(check_username_template("{mac}@{circuit_id}.{remote_id}"));
  EXPECT_FALSE(check_username_template("static"));
  EXPECT_TRUE(check_username_template(""));
  EXPECT_TRUE(check_username_template("{port"));
  EXPECT_TRUE(check_username_template("port}"));
  EXPECT_TRUE(check_username_template("{}"));
}

TEST(RadiusConfig, ReloadRefusesChanges) {
  Config a = base(), b = base();
  b.radius.present = true;
  b.radius.servers = {{"192.0.2.1", 1812, 1813, "topsecret", ""}};
  b.plans["gold"] = PolicySpec{8000, 1500, 8000, 1500};
  auto p = plan_reload(a, b);
  std::string all;
  for (const auto& r : p.refused) all += r + "\n";
  EXPECT_NE(all.find("radius: changed"), std::string::npos);
  EXPECT_NE(all.find("plans: changed"), std::string::npos);
  EXPECT_EQ(all.find("topsecret"), std::string::npos);
}
