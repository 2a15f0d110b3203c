#include "xbng/agent/agent.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <stdexcept>

#include "xbng/abi.h"

namespace xbng::agent {

Agent::Agent(const AgentOptions& o)
    : boot_id_(make_boot_id()),
      start_time_seconds_(std::chrono::duration<double>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count()) {
  dp_ = Dataplane::start(o.dataplane);
  const StoreMaps maps = StoreMaps::from(*dp_);
  store_ = std::make_unique<SubscriberStore>(maps, dp_->resolver(), &hub_);
  if (dp_->adopted()) {
    std::string summary;
    store_->rebuild(&summary);
    spdlog::info("{}", summary);
  }
  rb_ = std::make_unique<RingbufReader>(dp_->fd(MapId::kEvents), &hub_);
  service_ = std::make_unique<SubscribersService>(store_.get(), &hub_, maps, dp_->ports(), boot_id_);
  if (o.fleet)
    service_->set_read_only(fmt::format(
        "xbngd runs in fleet mode: etcd is the source of truth; write subscribers under {} in "
        "etcd (xbngctl sub import --etcd ... --node {})",
        node_subscribers_prefix(o.fleet->node), o.fleet->node));
  ServerOptions so = o.server;
  so.metrics = &grpc_metrics_;
  server_ = std::make_unique<GrpcServer>(so, service_.get());
  spdlog::info("gRPC serving on {} (boot id {})", server_->address(), boot_id_);
  if (o.fleet) {
    FleetOptions fo = *o.fleet;
    for (const auto& p : dp_->ports())
      if (p.role == XBNG_ROLE_ACCESS) fo.access_ports.push_back(p.name);
    fleet_ = std::make_unique<Fleet>(fo, store_.get(), boot_id_);
  }
  set_metrics_listen(o.metrics_listen);
}

std::string Agent::render_metrics() const {
  MetricsSnapshot s;
  if (auto err = read_stats(StoreMaps::from(*dp_), dp_->ports(), *store_, &s.stats))
    throw std::runtime_error(*err);
  s.grpc = grpc_metrics_.snapshot();
  s.version = XBNG_VERSION;
  s.abi = XBNG_ABI_VERSION;
  s.start_time_seconds = start_time_seconds_;
  s.last_reload_ok = last_reload_ok_;
  std::string out = xbng::agent::render_metrics(s);
  if (fleet_) out += fleet_->render_metrics();
  return out;
}

void Agent::set_metrics_listen(const std::string& listen) {
  if (metrics_ && metrics_->listen() == listen) return;
  const std::string old = metrics_listen();
  // The new address may be the old port on another host: free it first.
  metrics_.reset();
  if (listen.empty()) {
    if (!old.empty()) spdlog::info("metrics endpoint {} closed", old);
    return;
  }
  auto scrape = [this] { return render_metrics(); };
  try {
    metrics_ = std::make_unique<MetricsServer>(listen, scrape);
  } catch (const std::exception& e) {
    if (!old.empty()) {
      try {
        metrics_ = std::make_unique<MetricsServer>(old, scrape);
      } catch (const std::exception& e2) {
        spdlog::error("metrics endpoint {} could not be restored: {}", old, e2.what());
      }
    }
    throw;
  }
}

void Agent::stop() {
  metrics_.reset();
  if (fleet_) fleet_->stop();
  if (server_) server_->shutdown();
  rb_.reset();
}

Agent::~Agent() { stop(); }

}  // namespace xbng::agent
