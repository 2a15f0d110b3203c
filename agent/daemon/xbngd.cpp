// xbngd: loads/adopts the XDP data plane and serves the xbng.v1 API.
//   exit 0: stopped (forwarding continues) or --check-config passed
//   exit 1: runtime failure, or --check-config found problems
//   exit 2: invalid configuration at start (the unit does not restart on it)
#include <absl/synchronization/mutex.h>
#include <malloc.h>
#include <CLI/CLI.hpp>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <cstdio>
#include <memory>

#include "xbng/abi.h"
#include "config/config.h"
#include "daemon/agent.h"
#include "daemon/flags.h"
#include "daemon/run.h"

using namespace xbng::agent;

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

  if (run.version) {
    std::printf("xbngd %s (ABI %d)\n", XBNG_VERSION, XBNG_ABI_VERSION);
    return 0;
  }
  // Flags override the file: start from the file, then apply what was given.
  // A reload (SIGHUP) does the same, so flags keep winning.
  const ConfigReader read_config = [&](const std::string& file) {
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
    cfg = read_config(run.config_file);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xbngd: %s\n", e.what());
    return 2;
  }
  if (!set_up_logging(cfg)) return 2;

  if (run.teardown) return teardown(cfg);

  AgentOptions o;
  try {
    o = agent_options(cfg);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }

  const sigset_t sigs = block_signals();
  int pending = 0;  // a SIGTERM/SIGINT that came as the start completed
  std::unique_ptr<Agent> agent = start_agent(o, cfg, &pending);
  if (!agent) return 1;
  spdlog::info("ready: XDP attached on {} port(s), {} subscribers, serving {}",
               agent->dataplane().ports().size(), agent->store().size(), agent->address());
  sd_notifyf(0, "READY=1\nSTATUS=forwarding on %zu port(s); gRPC %s",
             agent->dataplane().ports().size(), agent->address().c_str());

  int sig;
  {
    Watchdog watchdog(agent.get());
    sig = wait_for_stop(sigs, pending,
                        [&] { reload(agent.get(), &cfg, run.config_file, read_config); });
  }
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
