// The stages of one xbngd run, in the order main() goes through them:
// --check-config, --teardown, the agent's options from the config, signals
// during the start, the systemd watchdog, SIGHUP reloads, and the wait for
// SIGTERM/SIGINT.
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "config/config.h"
#include "daemon/agent.h"

namespace xbng::agent {

// Reads the config file ("" = none) and merges the command line over it.
// Throws std::runtime_error naming the problem.
using ConfigReader = std::function<Config(const std::string& file)>;

// --check-config: prints the warnings and either the problems (stderr,
// returns 1) or a one-line summary (returns 0).
int check_config_file(const std::string& path, const Config& cfg);

// --teardown: detaches the XDP links and removes every pin under `bpffs`,
// logging each; 0 only when everything is gone (or nothing was there).
int teardown(const Config& cfg);  // Accounting-Off when [radius] is set, then the pins

// The agent's options of a checked config (warnings logged). Throws
// std::runtime_error with the config's problems.
AgentOptions agent_options(const Config& cfg);

// While the agent starts (maps, adoption, state files, etcd), SIGTERM and
// SIGINT must still stop it: a thread takes them and ends the process at
// once. That is safe at any point of the start, as a kill is: every change
// is journaled, every state file replaced atomically, the pins stay.
// Construct it with those signals blocked in every thread.
class StartSignals {
 public:
  StartSignals();
  ~StartSignals() { finish(); }
  StartSignals(const StartSignals&) = delete;
  StartSignals& operator=(const StartSignals&) = delete;
  // The start is over: stops the thread. Returns a SIGTERM/SIGINT that came
  // as the start completed (for the main loop to take), or 0.
  int finish();

 private:
  std::atomic<bool> started_{false};
  std::atomic<int> handed_over_{0};
  std::thread thread_;
};

// systemd's watchdog (WatchdogSec=): pinged only while the API works
// (accept loop alive, gRPC answering a health check). A refused flood is
// not a fault and does not stop the pings; a wedged API does, and systemd
// restarts the agent (forwarding continues: the pins stay). Does nothing
// when the watchdog is not enabled.
class Watchdog {
 public:
  explicit Watchdog(Agent* agent);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// SIGHUP: re-reads `config_file`, applies what can change live to `agent`
// and `running`, refuses the rest by name. A file that does not parse or
// check changes nothing.
void reload(Agent* agent, Config* running, const std::string& config_file,
            const ConfigReader& read_config);

// Sets spdlog's level (log.level) and line format; false (said on stderr)
// when the level is not one spdlog knows.
bool set_up_logging(const Config& cfg);

// Starts the agent with StartSignals guarding the start; null (the error
// logged) when it fails. *pending: a stop signal taken as the start
// completed, or 0.
std::unique_ptr<Agent> start_agent(const AgentOptions& o, const Config& cfg, int* pending);

// Blocks SIGTERM, SIGINT and SIGHUP in this thread and every thread started
// after it (they are then taken synchronously: no work in a handler).
sigset_t block_signals();

// Takes the signals of `sigs` until SIGTERM or SIGINT (returned), calling
// on_hup for each SIGHUP. `pending` is a stop signal already taken (or 0).
int wait_for_stop(const sigset_t& sigs, int pending, const std::function<void()>& on_hup);

}  // namespace xbng::agent
