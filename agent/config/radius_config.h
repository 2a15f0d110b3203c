// The [radius] and [plans] sections of the config file:
//   [radius]
//   servers = [{ address = "192.0.2.10", auth_port = 1812, acct_port = 1813,
//                secret_file = "/etc/xbng/radius.secret" }]   # priority order; `secret` inline too
//   nas_identifier = "xbng"
//   username = "{port}:{svlan}:{cvlan}"  # also {mac}, {circuit_id}, {remote_id}
//   password = ""
//   timeout_ms = 1000, retries = 3, dead_time_s = 30
//   interim_interval_s = 300, interim_min_s = 60, reject_hold_s = 10
//   require_message_authenticator = true
//   coa_listen = "[::]:3799"            # or "HOST:PORT"; "" = no CoA listener
//   coa_clients = [{ address = "192.0.2.10", secret_file = "/etc/xbng/coa.secret" }]
//   [plans]
//   gold = { up_rate_bps = 20000000, up_burst_bytes = 250000, down_rate_bps = 100000000,
//            down_burst_bytes = 1250000 }
// Kept apart from config.cpp so the RADIUS settings stay in their own structs.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "radius/client.h"
#include "store/subscriber.h"

namespace xbng::agent {

struct RadiusServerConfig {
  std::string address;
  uint64_t auth_port = 1812, acct_port = 1813;
  std::string secret, secret_file;  // exactly one of them
  friend bool operator==(const RadiusServerConfig&, const RadiusServerConfig&) = default;
};

struct CoaClientConfig {
  std::string address;
  std::string secret, secret_file;  // exactly one of them
  friend bool operator==(const CoaClientConfig&, const CoaClientConfig&) = default;
};

struct RadiusConfig {
  bool present = false;  // the file has a [radius] section
  std::vector<RadiusServerConfig> servers;
  std::string nas_identifier = "xbng";
  std::string username = "{port}:{svlan}:{cvlan}";
  std::string password;
  uint64_t timeout_ms = 1000;
  uint64_t retries = 3;
  uint64_t dead_time_s = 30;
  uint64_t interim_interval_s = 300;
  uint64_t interim_min_s = 60;  // floor of an Access-Accept's Acct-Interim-Interval
  uint64_t reject_hold_s = 10;
  bool require_message_authenticator = true;
  std::string coa_listen = "[::]:3799";
  std::vector<CoaClientConfig> coa_clients;
  friend bool operator==(const RadiusConfig&, const RadiusConfig&) = default;
};

// Rate plans by name (Filter-Id of an Access-Accept or CoA-Request).
using PlanTable = std::map<std::string, PolicySpec>;

// Reading both sections from TOML: radius_config_toml.h (for config.cpp).

// Every problem of both sections, each naming its key (secret files are read
// to prove they are readable and not empty; their content is never shown).
void check_radius_config(const RadiusConfig& r, const PlanTable& plans,
                         std::vector<std::string>* errors, std::vector<std::string>* warnings);

// The placeholders of radius.username.
inline constexpr const char* kUsernamePlaceholders[] = {"port", "svlan",      "cvlan",
                                                        "mac",  "circuit_id", "remote_id"};
// "{x}" of an unknown name or a stray brace: the error; nullopt when valid.
std::optional<std::string> check_username_template(const std::string& t);

// The client's settings, secrets read from their files (trailing newline
// dropped).
absl::StatusOr<radius::Config> to_radius_client_config(const RadiusConfig& r);
// A secret, inline or from its file.
absl::StatusOr<std::string> read_secret(const std::string& inline_secret, const std::string& file);

}  // namespace xbng::agent
