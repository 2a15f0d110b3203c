// Agent: everything xbngd runs, in start order: dataplane (load/adopt,
// attach, ports), subscriber store (rebuilt from the maps), event hub and
// ring-buffer reader, gRPC server. Destroying it stops serving and leaves
// the data plane pinned and forwarding.
#pragma once

#include <memory>
#include <string>

#include "xbng/agent/dataplane.h"
#include "xbng/agent/events.h"
#include "xbng/agent/service.h"
#include "xbng/agent/store.h"

namespace xbng::agent {

struct AgentOptions {
  DataplaneOptions dataplane;
  ServerOptions server;
};

class Agent {
 public:
  explicit Agent(const AgentOptions& opts);  // throws DataplaneError / std::runtime_error
  ~Agent();
  void stop();  // stop serving (idempotent); pins stay

  const std::string& boot_id() const { return boot_id_; }
  Dataplane& dataplane() { return *dp_; }
  SubscriberStore& store() { return *store_; }
  const std::string& address() const { return server_->address(); }
  bool adopted() const { return dp_->adopted(); }

 private:
  std::string boot_id_;
  std::unique_ptr<Dataplane> dp_;
  EventHub hub_;
  std::unique_ptr<SubscriberStore> store_;
  std::unique_ptr<RingbufReader> rb_;
  std::unique_ptr<SubscribersService> service_;
  std::unique_ptr<GrpcServer> server_;
};

}  // namespace xbng::agent
