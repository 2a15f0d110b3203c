#include "daemon/flags.h"

#include <cstdint>
#include <type_traits>
#include <variant>
#include <vector>

#include "fleet/fleet.h"

namespace xbng::agent {

namespace {

// --etcd: a comma-separated list into Config::etcd_endpoints.
struct Endpoints {};

// What a flag sets: a Config field (merged over the file when given), a
// field of the Invocation, or the etcd endpoint list.
using Target =
    std::variant<std::string Config::*, std::vector<std::string> Config::*, bool Config::*,
                 uint64_t Config::*, std::string Invocation::*, bool Invocation::*, Endpoints>;

struct FlagSpec {
  const char* name;  // as CLI11 takes it ("!--no-x": a switch that sets false)
  Target target;
  const char* help;
  bool show_default = false;  // --help shows the built-in default (Config's)
  // Cleared when the flag is given (a password file replaces the password).
  std::string Config::*clears = nullptr;
};

// The command line, in --help order. A bool target is a switch (add_flag).
const FlagSpec kFlags[] = {
    {"--access", &Config::access, "access port (QinQ, subscriber side); repeatable"},
    {"--uplink", &Config::uplink, "uplink port (untagged, network side); repeatable"},
    {"--gateway-ipv4", &Config::gateway_ipv4, "unnumbered IPv4 gateway of access ports"},
    {"--gateway-ipv6", &Config::gateway_ipv6, "IPv6 gateway of access ports"},
    {"--grpc", &Config::grpc, "unix:///path or HOST:PORT (TCP needs TLS)", true},
    {"--tls-cert", &Config::tls_cert, "server certificate (PEM) for TCP"},
    {"--tls-key", &Config::tls_key, "server key (PEM) for TCP"},
    {"--tls-client-ca", &Config::tls_client_ca, "require client certificates from this CA"},
    {"--insecure-tcp", &Config::insecure_tcp, "allow plaintext TCP (dangerous)"},
    {"--tls-no-client-auth", &Config::tls_no_client_auth,
     "TLS without --tls-client-ca: accept clients without certificates (dangerous)"},
    {"--grpc-max-connections", &Config::api_max_connections,
     "concurrent gRPC connections; more are refused", true},
    {"--metrics-listen", &Config::metrics_listen,
     "Prometheus endpoint HOST:PORT (GET /metrics); \"\" disables", true},
    {"--bpffs", &Config::bpffs, "pin directory on a bpf filesystem", true},
    {"--max-subscribers", &Config::max_subscribers, "subscriber map size at load", true},
    {"--outer-tpid", &Config::outer_tpid,
     "outer TPID of access ports without their own: 0x88a8, 0x8100, 0x9100", true},
    {"--config", &Invocation::config_file, "TOML configuration file (flags override it)"},
    {"--check-config", &Invocation::check_file,
     "validate this TOML file (with any flags given) without touching the system, "
     "then exit 0 (valid) or 1"},
    {"--xdp-generic", &Config::xdp_generic, "attach in generic (SKB) mode"},
    {"--xdp-attach", &Config::xdp_attach,
     "link (xbng's own XDP link) or libxdp (libxdp's dispatcher, beside other programs)", true},
    {"--xdp-priority", &Config::xdp_priority,
     "run priority in libxdp's dispatcher (lower runs first)", true},
    {"--lease-file", &Config::lease_file,
     "DHCP lease state file (default: /var/lib/xbng/leases.json, or "
     "/run/xbng/<bpffs name>/leases.json with a non-default --bpffs)"},
    {"!--no-bringup", &Config::punt_enabled,
     "do not punt or answer DHCP/DHCPv6/RS (drop them, counted)"},
    {"--teardown", &Invocation::teardown, "detach the XDP links and remove every pin, then exit"},
    {"--log-level", &Config::log_level, "trace|debug|info|warn|error", true},
    {"--version", &Invocation::version, "print the version and exit"},
    {"--etcd", Endpoints{},
     "fleet mode: etcd endpoints HOST:PORT[,HOST:PORT...] (http:// or https://); "
     "subscribers come from etcd, gRPC writes are refused"},
    {"--node", &Config::etcd_node, "fleet mode: this node's name in the etcd keys"},
    {"--etcd-ca", &Config::etcd_ca, "CA of the etcd servers (PEM; enables TLS)"},
    {"--etcd-cert", &Config::etcd_cert, "client certificate for etcd (PEM)"},
    {"--etcd-key", &Config::etcd_key, "client key for etcd (PEM)"},
    {"--etcd-username", &Config::etcd_username, "etcd user (authentication)"},
    {"--etcd-password-file", &Config::etcd_password_file, "file holding the etcd user's password",
     false, &Config::etcd_password},
};

template <typename T>
constexpr bool kConfigField = false;
template <typename V>
constexpr bool kConfigField<V Config::*> = true;

// The built-in value of a Config field, as --help shows it.
template <typename V>
std::string default_of(V Config::*m) {
  static const Config defaults;
  if constexpr (std::is_same_v<V, std::string>)
    return defaults.*m;
  else if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>)
    return std::to_string(defaults.*m);
  else
    return {};  // lists and switches show none
}

// The flag's name as app.count() takes it ("--no-bringup" for "!--no-bringup").
std::string count_name(const FlagSpec& f) { return f.name[0] == '!' ? f.name + 1 : f.name; }

}  // namespace

CommandLine::CommandLine(CLI::App* app) : app_(app) {
  for (const FlagSpec& f : kFlags) {
    CLI::Option* o = std::visit(
        [&](auto t) -> CLI::Option* {
          using T = decltype(t);
          if constexpr (std::is_same_v<T, Endpoints>)
            return app->add_option(f.name, etcd_endpoints_, f.help);
          else if constexpr (std::is_same_v<T, bool Config::*>)
            return app->add_flag(f.name, values_.*t, f.help);
          else if constexpr (std::is_same_v<T, bool Invocation::*>)
            return app->add_flag(f.name, run_.*t, f.help);
          else if constexpr (std::is_same_v<T, std::string Invocation::*>)
            return app->add_option(f.name, run_.*t, f.help);
          else
            return app->add_option(f.name, values_.*t, f.help);
        },
        f.target);
    if (f.show_default)
      std::visit(
          [&](auto t) {
            if constexpr (kConfigField<decltype(t)>) o->default_str(default_of(t));
          },
          f.target);
  }
}

void CommandLine::apply(Config* cfg) const {
  for (const FlagSpec& f : kFlags) {
    if (app_->count(count_name(f)) == 0) continue;
    std::visit(
        [&](auto t) {
          using T = decltype(t);
          if constexpr (std::is_same_v<T, Endpoints>)
            cfg->etcd_endpoints = split_endpoints(etcd_endpoints_);
          else if constexpr (kConfigField<T>)
            cfg->*t = values_.*t;
        },
        f.target);
    if (f.clears) (cfg->*f.clears).clear();
  }
}

}  // namespace xbng::agent
