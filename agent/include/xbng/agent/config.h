// xbngd configuration: a TOML file (--config) overridden by command-line
// flags. The file's sections mirror the flags:
//   [ports]   access = ["eth1"], uplink = ["eth0"], outer_tpid = "0x88a8", xdp_generic = false
//   [gateway] ipv4 = "100.64.0.1", ipv6 = "2001:db8::1"
//   [grpc]    listen = "unix:///run/xbng/xbngd.sock", tls_cert, tls_key, tls_client_ca,
//             insecure_tcp = false
//   [bpf]     bpffs = "/sys/fs/bpf/xbng", max_subscribers = 1000000, events_per_sec = 1000,
//             unknown_interval_ms = 1000
//   [log]     level = "info"
// Unknown sections or keys are errors (a typo must not be silently ignored).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xbng/agent/dataplane.h"
#include "xbng/agent/service.h"

namespace xbng::agent {

struct Config {
  std::vector<std::string> access, uplink;
  std::string gateway_ipv4, gateway_ipv6;
  std::string grpc = "unix:///run/xbng/xbngd.sock";
  std::string tls_cert, tls_key, tls_client_ca;
  bool insecure_tcp = false;
  std::string bpffs = "/sys/fs/bpf/xbng";
  uint64_t max_subscribers = XBNG_DEFAULT_MAX_SUBSCRIBERS;
  std::string outer_tpid = "0x88a8";
  bool xdp_generic = false;
  uint64_t events_per_sec = XBNG_DEFAULT_EVENTS_PER_SEC;
  uint64_t unknown_interval_ms = XBNG_DEFAULT_UNKNOWN_INTERVAL_NS / 1000000;
  std::string log_level = "info";
};

// Merges the TOML file into cfg. Throws std::runtime_error naming the file,
// the key and the problem.
void load_config_file(const std::string& path, Config* cfg);

// Checks the values and converts them. Throws std::runtime_error.
DataplaneOptions to_dataplane_options(const Config& cfg);
ServerOptions to_server_options(const Config& cfg);

}  // namespace xbng::agent
