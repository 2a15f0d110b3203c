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
#include "daemon/flags.h"

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
  CommandLine cli(&app);
  CLI11_PARSE(app, argc, argv);
  const Invocation& run = cli.invocation();
  const std::string& config_file = run.config_file;

  if (run.version) {
    std::printf("xbngd %s (ABI %d)\n", XBNG_VERSION, XBNG_ABI_VERSION);
    return 0;
  }
  // Flags override the file: start from the file, then apply what was given.
  // A reload (SIGHUP) does the same, so flags keep winning.
  auto read_config = [&](const std::string& file) {
    Config cfg;
    if (!file.empty()) load_config_file(file, &cfg);
    cli.apply(&cfg);
    return cfg;
  };

  if (!run.check_file.empty()) {
    try {
      return check_config_file(run.check_file, read_config(run.check_file));
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

  if (run.teardown) {
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
