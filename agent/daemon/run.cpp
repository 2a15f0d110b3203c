#include "daemon/run.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <stdexcept>

#include "xbng/abi.h"
#include "common/status.h"
#include "config/radius_config.h"

namespace xbng::agent {

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
  if (auto h = to_ha_options(cfg))
    std::printf(
        "config %s: ha group %s, member %s, priority %u, preempt %s, lease %u s, virtual MAC %s, "
        "uplink VIPs %s %s\n",
        path.c_str(), h->group.c_str(), h->member.c_str(), h->priority, h->preempt ? "on" : "off",
        h->lease_ttl_s, format_mac(h->virtual_mac.data()).c_str(),
        h->vip4 ? format_interface_address(*h->vip4).c_str() : "-",
        h->vip6 ? format_interface_address(*h->vip6).c_str() : "-");
  return 0;
}

// RADIUS accounting: the teardown ends every session of this NAS
// (Accounting-Off, RFC 2866), waiting for an answer as long as the client
// retries every server.
void accounting_off(const Config& cfg) {
  if (!cfg.radius.present) return;
  if (!cfg.ha_group.empty()) {  // the group's sessions go on on another member
    spdlog::info("teardown: no Accounting-Off (HA group member)");
    return;
  }
  auto rc = to_radius_client_config(cfg.radius);
  if (!rc.ok()) {
    spdlog::warn("teardown: no Accounting-Off: {}", std::string(rc.status().message()));
    return;
  }
  auto client = radius::Client::create(*rc);
  if (!client.ok()) {
    spdlog::warn("teardown: no Accounting-Off: {}", std::string(client.status().message()));
    return;
  }
  radius::AccountingRequest r;
  r.status = radius::AcctStatus::kAccountingOff;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  r.session_id = fmt::format("{:016x}-off",
                             std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
  r.event_timestamp =
      static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(now).count());
  std::promise<bool> done;
  auto answered = done.get_future();
  (*client)->account(r, [&done](bool delivered) { done.set_value(delivered); });
  if (answered.get())
    spdlog::info("teardown: Accounting-Off acknowledged");
  else
    spdlog::warn("teardown: Accounting-Off not acknowledged by any RADIUS server");
}

int teardown(const Config& cfg) {
  const std::string& bpffs = cfg.bpffs;
  accounting_off(cfg);
  // Exit 0 only when everything is gone (or nothing was there); 1 on any
  // failure, with each one named.
  const auto r = Dataplane::teardown(bpffs);
  for (const auto& l : r.removed) spdlog::info("teardown: {}", l);
  for (const auto& e : r.errors) spdlog::error("teardown: {}", e);
  if (!r.ok()) {
    spdlog::error("teardown of {} FAILED: {} problem(s), {} object(s) removed", bpffs,
                  r.errors.size(), r.removed.size());
    return 1;
  }
  if (r.nothing_to_remove)
    spdlog::info("teardown of {}: nothing to remove", bpffs);
  else
    spdlog::info("teardown of {} done: XDP detached, {} pin(s) removed", bpffs, r.removed.size());
  return 0;
}

AgentOptions agent_options(const Config& cfg) {
  AgentOptions o;
  ConfigCheck chk = check_config(cfg);
  for (const auto& w : chk.warnings) spdlog::warn("config: {}", w);
  o.dataplane = to_dataplane_options(cfg);
  o.server = to_server_options(cfg);
  o.metrics_listen = cfg.metrics_listen;
  o.fleet = to_fleet_options(cfg);
  o.ha = to_ha_options(cfg);
  o.reserved = cfg.reserved;
  o.bringup = to_bringup_options(cfg);
  o.journal_file = store_journal_path(cfg);
  if (!relay_ports_of(cfg).empty()) {
    if (!cfg.relay.servers_v4.empty()) o.relay4 = to_relay4_options(cfg.relay);
    if (!cfg.relay.servers_v6.empty()) o.relay6 = to_relay6_options(cfg.relay);
  }
  if (cfg.radius.present) {
    auto client = to_radius_client_config(cfg.radius);
    if (!client.ok()) throw std::runtime_error(std::string(client.status().message()));
    AgentOptions::Radius r;
    r.client = *client;
    r.access.username = cfg.radius.username;
    r.access.password = cfg.radius.password;
    r.access.reject_hold_s = static_cast<uint32_t>(cfg.radius.reject_hold_s);
    r.access.plans = cfg.plans;
    r.access.relay_ports = o.bringup.relay4_ports;
    r.access.relay_ports.insert(o.bringup.relay6_ports.begin(), o.bringup.relay6_ports.end());
    r.acct.interim_interval_s = static_cast<uint32_t>(cfg.radius.interim_interval_s);
    r.acct.interim_min_s = static_cast<uint32_t>(cfg.radius.interim_min_s);
    if (!cfg.radius.coa_listen.empty() && !cfg.radius.coa_clients.empty()) {
      AgentOptions::Radius::DynAuth d;
      if (auto e = parse_listen(cfg.radius.coa_listen, &d.host, &d.port))
        throw std::runtime_error("radius.coa_listen " + cfg.radius.coa_listen + ": " + *e);
      for (const auto& c : cfg.radius.coa_clients) {
        auto secret = read_secret(c.secret, c.secret_file);
        if (!secret.ok())
          throw std::runtime_error("radius.coa_clients " + c.address + ": " +
                                   std::string(secret.status().message()));
        d.options.clients.push_back({c.address, *secret});
      }
      d.options.nas_identifier = r.client.nas_identifier;
      d.options.nas_ipv4 = r.client.nas_ipv4;
      d.options.nas_ipv6 = r.client.nas_ipv6;
      r.dynauth = std::move(d);
    }
    o.radius = std::move(r);
  }
  return o;
}

StartSignals::StartSignals() {
  // SIGHUP stays blocked (pending) until the main loop takes it.
  thread_ = std::thread([this] {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    const timespec tick{0, 100 * 1000 * 1000};
    while (!started_) {
      const int s = sigtimedwait(&stop, nullptr, &tick);
      if (s <= 0) continue;
      if (started_) {  // the start completed meanwhile: the main loop takes it
        handed_over_ = s;
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
}

int StartSignals::finish() {
  started_ = true;
  if (thread_.joinable()) thread_.join();
  return handed_over_;
}

Watchdog::Watchdog(Agent* agent) {
  uint64_t wd_usec = 0;
  if (sd_watchdog_enabled(0, &wd_usec) <= 0 || wd_usec == 0) return;
  thread_ = std::thread([this, agent, period = std::chrono::microseconds(wd_usec / 3)] {
    while (!done_) {
      const std::string why = agent->health(false);
      if (why.empty())
        sd_notify(0, "WATCHDOG=1");
      else
        spdlog::error("health: {} (watchdog not pinged)", why);
      for (auto t = std::chrono::steady_clock::now() + period;
           !done_ && std::chrono::steady_clock::now() < t;)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

Watchdog::~Watchdog() {
  done_ = true;
  if (thread_.joinable()) thread_.join();
}

namespace {

// A reload that changes nothing: says so to the agent and to systemd.
void reload_failed(Agent* agent) {
  agent->set_last_reload_ok(false);
  sd_notify(0, "READY=1");
}

// Drops from `applied` the lines about `setting` (it failed to apply).
void unapplied(ReloadPlan* plan, const char* setting) {
  std::erase_if(plan->applied, [&](const std::string& s) { return s.rfind(setting, 0) == 0; });
}

}  // namespace

void reload(Agent* agent, Config* running, const std::string& config_file,
            const ConfigReader& read_config) {
  Config& cfg = *running;
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
    return reload_failed(agent);
  }
  ConfigCheck chk = check_config(next);
  if (!chk.ok()) {
    spdlog::error("reload: config {} rejected, nothing changed: {}", config_file,
                  fmt::join(chk.errors, "; "));
    return reload_failed(agent);
  }
  for (const auto& w : chk.warnings) spdlog::warn("reload: config: {}", w);
  ReloadPlan plan = plan_reload(cfg, next);
  bool ok = plan.refused.empty();
  // The access netdevs must still carry subscriber_mtu + tags (someone
  // may have lowered an MTU by hand).
  if (auto st = agent->dataplane().ensure_access_mtu(); !st.ok()) {
    spdlog::error("reload: {}", status_message(st));
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
      unapplied(&plan, "metrics.listen");
    }
  }
  if (plan.allow_to_host) {
    try {
      agent->dataplane().set_allow_to_host(allow_to_host_of(next));
      cfg.allow_to_host = next.allow_to_host;
    } catch (const std::exception& e) {
      spdlog::error("reload: {}; security.allow_to_host unchanged", e.what());
      ok = false;
      unapplied(&plan, "security.allow_to_host");
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
}

bool set_up_logging(const Config& cfg) {
  auto lvl = spdlog::level::from_str(cfg.log_level);
  if (lvl == spdlog::level::off && cfg.log_level != "off") {
    std::fprintf(stderr, "xbngd: --log-level %s: expected trace|debug|info|warn|error\n",
                 cfg.log_level.c_str());
    return false;
  }
  spdlog::set_level(lvl);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ xbngd: %v");
  return true;
}

std::unique_ptr<Agent> start_agent(const AgentOptions& o, const Config& cfg, int* pending) {
  StartSignals start_signals;
  std::unique_ptr<Agent> agent;
  try {
    spdlog::info("xbngd {} starting (ABI {}): access [{}], uplink [{}], bpffs {}", XBNG_VERSION,
                 XBNG_ABI_VERSION, fmt::join(cfg.access, ","), fmt::join(cfg.uplink, ","),
                 cfg.bpffs);
    agent = std::make_unique<Agent>(o);
  } catch (const std::exception& e) {
    start_signals.finish();
    spdlog::error("{}", e.what());
    return nullptr;
  }
  *pending = start_signals.finish();
  return agent;
}

sigset_t block_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  return sigs;
}

int wait_for_stop(const sigset_t& sigs, int pending, const std::function<void()>& on_hup) {
  int sig = pending;
  while (!sig) {
    sigwait(&sigs, &sig);
    if (sig == SIGHUP) {
      on_hup();
      sig = 0;
    }
  }
  return sig;
}

}  // namespace xbng::agent
