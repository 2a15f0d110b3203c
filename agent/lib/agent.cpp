#include "xbng/agent/agent.h"

#include <spdlog/spdlog.h>

namespace xbng::agent {

Agent::Agent(const AgentOptions& o) : boot_id_(make_boot_id()) {
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
  server_ = std::make_unique<GrpcServer>(o.server, service_.get());
  spdlog::info("gRPC serving on {} (boot id {})", server_->address(), boot_id_);
}

void Agent::stop() {
  if (server_) server_->shutdown();
  rb_.reset();
}

Agent::~Agent() { stop(); }

}  // namespace xbng::agent
