// xbngd: loads/adopts the XDP data plane and serves the xbng.v1 API.
//   exit 0: stopped (forwarding continues) or --check-config passed
//   exit 1: runtime failure, or --check-config found problems
//   exit 2: invalid configuration at start (the unit does not restart on it)
#include <absl/synchronization/mutex.h>
#include <malloc.h>
#include <CLI/CLI.hpp>
#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "xbng/abi.h"
#include "daemon/agent.h"
#include "config/config.h"

using namespace xbng::agent;

namespace {

int check_config_file(const std::string& path, const Config& cfg) {
  ConfigCheck chk = check_config(cfg);
  for (const auto& w : chk.warnings)
    std::printf("config %s: warning: %s\n", path.c_str(), w.c_str());
  if (!chk.ok()) {
    std::fprintf(stderr, "config %s: %zu problem(s):\n", path.c_str(), chk.errors.size());
    for (const auto& e : chk.errors) std::fprintf(stderr, "  - %s\n", e.c_str());
    return 1;
  }
  std::printf(
      "config %s: OK: access [%s], uplink [%s], grpc %s, metrics %s, bpffs %s, "
      "max_subscribers %llu\n",
      path.c_str(), fmt::format("{}", fmt::join(cfg.access, ",")).c_str(),
      fmt::format("{}", fmt::join(cfg.uplink, ",")).c_str(), cfg.grpc.c_str(),
      cfg.metrics_listen.empty() ? "off" : cfg.metrics_listen.c_str(), cfg.bpffs.c_str(),
      static_cast<unsigned long long>(cfg.max_subscribers));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // absl's lock-order graph (on by default in gRPC's absl) costs ~7% of the
  // agent's CPU during a bulk load; our locks are few and ordered.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // gRPC's threads would each get a glibc malloc arena that keeps freed
  // stream buffers: two arenas hold the agent's peak RSS at 1M subscribers
  // ~15 MB lower at the same speed (bench/provision.py).
  mallopt(M_ARENA_MAX, 2);
  CLI::App app{"xbngd: XDP QinQ subscriber termination daemon"};
  Config flags;
  std::string config_file, check_file, log_level = "info", outer_tpid;
  bool teardown = false, version = false;
  app.add_option("--access", flags.access, "access port (QinQ, subscriber side); repeatable");
  app.add_option("--uplink", flags.uplink, "uplink port (untagged, network side); repeatable");
  app.add_option("--gateway-ipv4", flags.gateway_ipv4, "unnumbered IPv4 gateway of access ports");
  app.add_option("--gateway-ipv6", flags.gateway_ipv6, "IPv6 gateway of access ports");
  app.add_option("--grpc", flags.grpc, "unix:///path or HOST:PORT (TCP needs TLS)")
      ->default_str(flags.grpc);
  app.add_option("--tls-cert", flags.tls_cert, "server certificate (PEM) for TCP");
  app.add_option("--tls-key", flags.tls_key, "server key (PEM) for TCP");
  app.add_option("--tls-client-ca", flags.tls_client_ca,
                 "require client certificates from this CA");
  app.add_flag("--insecure-tcp", flags.insecure_tcp, "allow plaintext TCP (dangerous)");
  app.add_flag("--tls-no-client-auth", flags.tls_no_client_auth,
               "TLS without --tls-client-ca: accept clients without certificates (dangerous)");
  app.add_option("--grpc-max-connections", flags.api_max_connections,
                 "concurrent gRPC connections; more are refused")
      ->default_str("1024");
  app.add_option("--metrics-listen", flags.metrics_listen,
                 "Prometheus endpoint HOST:PORT (GET /metrics); \"\" disables")
      ->default_str(kDefaultMetricsListen);
  app.add_option("--bpffs", flags.bpffs, "pin directory on a bpf filesystem")
      ->default_str(flags.bpffs);
  app.add_option("--max-subscribers", flags.max_subscribers, "subscriber map size at load")
      ->default_str("1000000");
  app.add_option("--outer-tpid", outer_tpid,
                 "outer TPID of access ports without their own: 0x88a8, 0x8100, 0x9100")
      ->default_str("0x88a8");
  app.add_option("--config", config_file, "TOML configuration file (flags override it)");
  app.add_option("--check-config", check_file,
                 "validate this TOML file (with any flags given) without touching the system, "
                 "then exit 0 (valid) or 1");
  app.add_flag("--xdp-generic", flags.xdp_generic, "attach in generic (SKB) mode");
  app.add_option("--lease-file", flags.lease_file,
                 "DHCP lease state file (default: /var/lib/xbng/leases.json, or "
                 "/run/xbng/<bpffs name>/leases.json with a non-default --bpffs)");
  app.add_flag("!--no-bringup", flags.punt_enabled,
               "do not punt or answer DHCP/DHCPv6/RS (drop them, counted)");
  app.add_flag("--teardown", teardown, "detach the XDP links and remove every pin, then exit");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->default_str("info");
  app.add_flag("--version", version, "print the version and exit");
  std::string etcd_endpoints;
  app.add_option("--etcd", etcd_endpoints,
                 "fleet mode: etcd endpoints HOST:PORT[,HOST:PORT...] (http:// or https://); "
                 "subscribers come from etcd, gRPC writes are refused");
  app.add_option("--node", flags.etcd_node, "fleet mode: this node's name in the etcd keys");
  app.add_option("--etcd-ca", flags.etcd_ca, "CA of the etcd servers (PEM; enables TLS)");
  app.add_option("--etcd-cert", flags.etcd_cert, "client certificate for etcd (PEM)");
  app.add_option("--etcd-key", flags.etcd_key, "client key for etcd (PEM)");
  app.add_option("--etcd-username", flags.etcd_username, "etcd user (authentication)");
  app.add_option("--etcd-password-file", flags.etcd_password_file,
                 "file holding the etcd user's password");
  CLI11_PARSE(app, argc, argv);

  if (version) {
    std::printf("xbngd %s (ABI %d)\n", XBNG_VERSION, XBNG_ABI_VERSION);
    return 0;
  }
  // Flags override the file: start from the file, then apply what was given.
  // A reload (SIGHUP) does the same, so flags keep winning.
  auto given = [&](const char* f) { return app.count(f) > 0; };
  auto apply_flags = [&](Config& cfg) {
    if (given("--access")) cfg.access = flags.access;
    if (given("--uplink")) cfg.uplink = flags.uplink;
    if (given("--gateway-ipv4")) cfg.gateway_ipv4 = flags.gateway_ipv4;
    if (given("--gateway-ipv6")) cfg.gateway_ipv6 = flags.gateway_ipv6;
    if (given("--grpc")) cfg.grpc = flags.grpc;
    if (given("--tls-cert")) cfg.tls_cert = flags.tls_cert;
    if (given("--tls-key")) cfg.tls_key = flags.tls_key;
    if (given("--tls-client-ca")) cfg.tls_client_ca = flags.tls_client_ca;
    if (given("--insecure-tcp")) cfg.insecure_tcp = true;
    if (given("--tls-no-client-auth")) cfg.tls_no_client_auth = true;
    if (given("--grpc-max-connections")) cfg.api_max_connections = flags.api_max_connections;
    if (given("--metrics-listen")) cfg.metrics_listen = flags.metrics_listen;
    if (given("--bpffs")) cfg.bpffs = flags.bpffs;
    if (given("--max-subscribers")) cfg.max_subscribers = flags.max_subscribers;
    if (given("--outer-tpid")) cfg.outer_tpid = outer_tpid;
    if (given("--xdp-generic")) cfg.xdp_generic = true;
    if (given("--log-level")) cfg.log_level = log_level;
    if (given("--etcd")) cfg.etcd_endpoints = split_endpoints(etcd_endpoints);
    if (given("--node")) cfg.etcd_node = flags.etcd_node;
    if (given("--etcd-ca")) cfg.etcd_ca = flags.etcd_ca;
    if (given("--etcd-cert")) cfg.etcd_cert = flags.etcd_cert;
    if (given("--etcd-key")) cfg.etcd_key = flags.etcd_key;
    if (given("--etcd-username")) cfg.etcd_username = flags.etcd_username;
    if (given("--etcd-password-file")) {
      cfg.etcd_password_file = flags.etcd_password_file;
      cfg.etcd_password.clear();
    }
    if (given("--lease-file")) cfg.lease_file = flags.lease_file;
    if (given("--no-bringup")) cfg.punt_enabled = false;
  };
  auto read_config = [&](const std::string& file) {
    Config cfg;
    if (!file.empty()) load_config_file(file, &cfg);
    apply_flags(cfg);
    return cfg;
  };

  if (!check_file.empty()) {
    try {
      return check_config_file(check_file, read_config(check_file));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }

  Config cfg;
  try {
    cfg = read_config(config_file);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xbngd: %s\n", e.what());
    return 2;
  }
  auto lvl = spdlog::level::from_str(cfg.log_level);
  if (lvl == spdlog::level::off && cfg.log_level != "off") {
    std::fprintf(stderr, "xbngd: --log-level %s: expected trace|debug|info|warn|error\n",
                 cfg.log_level.c_str());
    return 2;
  }
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ xbngd: %v");

  if (teardown) {
    // Exit 0 only when everything is gone (or nothing was there); 1 on any
    // failure, with each one named.
    const auto r = Dataplane::teardown(cfg.bpffs);
    for (const auto& l : r.removed) spdlog::info("teardown: {}", l);
    for (const auto& e : r.errors) spdlog::error("teardown: {}", e);
    if (!r.ok()) {
      spdlog::error("teardown of {} FAILED: {} problem(s), {} object(s) removed", cfg.bpffs,
                    r.errors.size(), r.removed.size());
      return 1;
    }
    if (r.nothing_to_remove)
      spdlog::info("teardown of {}: nothing to remove", cfg.bpffs);
    else
      spdlog::info("teardown of {} done: XDP detached, {} pin(s) removed", cfg.bpffs,
                   r.removed.size());
    return 0;
  }

  AgentOptions o;
  try {
    ConfigCheck chk = check_config(cfg);
    for (const auto& w : chk.warnings) spdlog::warn("config: {}", w);
    o.dataplane = to_dataplane_options(cfg);
    o.server = to_server_options(cfg);
    o.metrics_listen = cfg.metrics_listen;
    o.fleet = to_fleet_options(cfg);
    o.reserved = cfg.reserved;
    o.bringup = to_bringup_options(cfg);
    o.journal_file = store_journal_path(cfg);
    if (cfg.radius.present) {
      auto client = to_radius_client_config(cfg.radius);
      if (!client.ok()) throw std::runtime_error(std::string(client.status().message()));
      AgentOptions::Radius r;
      r.client = *client;
      r.access.username = cfg.radius.username;
      r.access.password = cfg.radius.password;
      r.access.reject_hold_s = static_cast<uint32_t>(cfg.radius.reject_hold_s);
      r.access.plans = cfg.plans;
      o.radius = std::move(r);
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }

  // Signals are taken synchronously by this thread (sigwait below): no work
  // in a handler. Every thread the agent starts inherits the blocked mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  // While the agent starts (maps, adoption, state files, etcd), SIGTERM and
  // SIGINT must still stop it: a thread takes them and ends the process at
  // once. That is safe at any point of the start, as a kill is: every change
  // is journaled, every state file replaced atomically, the pins stay.
  // SIGHUP stays blocked (pending) until the loop below takes it.
  std::atomic<bool> started{false};
  std::atomic<int> handed_over{0};
  std::thread start_signals([&] {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    const timespec tick{0, 100 * 1000 * 1000};
    while (!started) {
      const int s = sigtimedwait(&stop, nullptr, &tick);
      if (s <= 0) continue;
      if (started) {  // the start completed meanwhile: the main loop takes it
        handed_over = s;
        return;
      }
      spdlog::warn(
          "{} during the start: exiting now, as a kill would (changes are journaled, "
          "state files replaced atomically; the pins stay)",
          s == SIGTERM ? "SIGTERM" : "SIGINT");
      spdlog::shutdown();
      std::_Exit(128 + s);
    }
  });
  auto join_start_signals = [&] {
    started = true;
    if (start_signals.joinable()) start_signals.join();
  };

  std::unique_ptr<Agent> agent;
  try {
    spdlog::info("xbngd {} starting (ABI {}): access [{}], uplink [{}], bpffs {}", XBNG_VERSION,
                 XBNG_ABI_VERSION, fmt::join(cfg.access, ","), fmt::join(cfg.uplink, ","),
                 cfg.bpffs);
    agent = std::make_unique<Agent>(o);
  } catch (const std::exception& e) {
    join_start_signals();
    spdlog::error("{}", e.what());
    return 1;
  }
  join_start_signals();
  spdlog::info("ready: XDP attached on {} port(s), {} subscribers, serving {}",
               agent->dataplane().ports().size(), agent->store().size(), agent->address());
  sd_notifyf(0, "READY=1\nSTATUS=forwarding on %zu port(s); gRPC %s",
             agent->dataplane().ports().size(), agent->address().c_str());

  // SIGHUP: re-read the file, apply what can change live, refuse the rest
  // by name. A file that does not parse or check changes nothing.
  auto reload = [&] {
    if (config_file.empty()) {
      spdlog::warn("SIGHUP: xbngd was started without --config: nothing to reload");
      return;
    }
    sd_notify(0, "RELOADING=1");
    Config next;
    try {
      next = read_config(config_file);
    } catch (const std::exception& e) {
      spdlog::error("reload: {}; nothing changed", e.what());
      agent->set_last_reload_ok(false);
      sd_notify(0, "READY=1");
      return;
    }
    ConfigCheck chk = check_config(next);
    if (!chk.ok()) {
      spdlog::error("reload: config {} rejected, nothing changed: {}", config_file,
                    fmt::join(chk.errors, "; "));
      agent->set_last_reload_ok(false);
      sd_notify(0, "READY=1");
      return;
    }
    for (const auto& w : chk.warnings) spdlog::warn("reload: config: {}", w);
    ReloadPlan plan = plan_reload(cfg, next);
    bool ok = plan.refused.empty();
    // The access netdevs must still carry subscriber_mtu + tags (someone
    // may have lowered an MTU by hand).
    if (auto err = agent->dataplane().ensure_access_mtu()) {
      spdlog::error("reload: {}", *err);
      ok = false;
    }
    if (plan.log_level) {
      spdlog::set_level(spdlog::level::from_str(next.log_level));
      cfg.log_level = next.log_level;
    }
    if (plan.metrics_listen) {
      try {
        agent->set_metrics_listen(next.metrics_listen);
        cfg.metrics_listen = next.metrics_listen;
      } catch (const std::exception& e) {
        spdlog::error("reload: {}; metrics stay on \"{}\"", e.what(), cfg.metrics_listen);
        ok = false;
        std::erase_if(plan.applied,
                      [](const std::string& s) { return s.rfind("metrics.listen", 0) == 0; });
      }
    }
    if (plan.allow_to_host) {
      try {
        agent->dataplane().set_allow_to_host(allow_to_host_of(next));
        cfg.allow_to_host = next.allow_to_host;
      } catch (const std::exception& e) {
        spdlog::error("reload: {}; security.allow_to_host unchanged", e.what());
        ok = false;
        std::erase_if(plan.applied, [](const std::string& s) {
          return s.rfind("security.allow_to_host", 0) == 0;
        });
      }
    }
    if (plan.reserved) {
      agent->set_reserved_ranges(next.reserved);
      cfg.reserved = next.reserved;
    }
    for (const auto& a : plan.applied) spdlog::info("reload: applied {}", a);
    for (const auto& r : plan.refused) spdlog::warn("reload: refused {}", r);
    if (plan.applied.empty() && plan.refused.empty())
      spdlog::info("reload: config {} re-read: no change", config_file);
    agent->set_last_reload_ok(ok);
    sd_notify(0, "READY=1");
  };

  // systemd's watchdog (WatchdogSec=): pinged only while the API works
  // (accept loop alive, gRPC answering a health check). A refused flood is
  // not a fault and does not stop the pings; a wedged API does, and systemd
  // restarts the agent (forwarding continues: the pins stay).
  std::atomic<bool> done{false};
  std::thread watchdog;
  uint64_t wd_usec = 0;
  if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0) {
    watchdog = std::thread([&, period = std::chrono::microseconds(wd_usec / 3)] {
      while (!done) {
        const std::string why = agent->health(false);
        if (why.empty())
          sd_notify(0, "WATCHDOG=1");
        else
          spdlog::error("health: {} (watchdog not pinged)", why);
        for (auto t = std::chrono::steady_clock::now() + period;
             !done && std::chrono::steady_clock::now() < t;)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }

  int sig = handed_over;  // a SIGTERM/SIGINT that came as the start completed
  while (!sig) {
    sigwait(&sigs, &sig);
    if (sig == SIGHUP) {
      reload();
      sig = 0;
    }
  }
  done = true;
  if (watchdog.joinable()) watchdog.join();
  spdlog::info(
      "{}: stopping gRPC; XDP programs, links and maps stay pinned (forwarding "
      "continues; `xbngd --teardown` removes them)",
      sig == SIGTERM ? "SIGTERM" : "SIGINT");
  sd_notify(0, "STOPPING=1");
  agent->stop();
  agent.reset();
  spdlog::info("stopped");
  return 0;
}
