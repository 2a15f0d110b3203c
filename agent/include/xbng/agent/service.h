// The xbng.v1.Subscribers gRPC service and the server around it (unix socket
// by default, TCP only with TLS, health and reflection services).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "xbng/agent/dataplane.h"
#include "xbng/agent/events.h"
#include "xbng/agent/store.h"
#include "xbng/v1/xbng.grpc.pb.h"

namespace xbng::agent {

class LeaseTable;

std::string make_boot_id();

class SubscribersService final : public xbng::v1::Subscribers::Service {
 public:
  // `maps` gives the stats/ports maps; dp may be null in tests that build
  // their own maps (then ports come from the resolver only).
  SubscribersService(SubscriberStore* store, EventHub* hub, const StoreMaps& maps,
                     std::vector<PortInfo> ports, std::string boot_id);

  grpc::Status UpsertSubscribers(grpc::ServerContext*, const xbng::v1::UpsertSubscribersRequest*,
                                 xbng::v1::UpsertSubscribersResponse*) override;
  grpc::Status StreamSubscribers(grpc::ServerContext*, grpc::ServerReader<xbng::v1::Subscriber>*,
                                 xbng::v1::StreamSubscribersResponse*) override;
  grpc::Status DeleteSubscribers(grpc::ServerContext*, const xbng::v1::DeleteSubscribersRequest*,
                                 xbng::v1::DeleteSubscribersResponse*) override;
  grpc::Status GetSubscriber(grpc::ServerContext*, const xbng::v1::GetSubscriberRequest*,
                             xbng::v1::GetSubscriberResponse*) override;
  grpc::Status ListSubscribers(grpc::ServerContext*, const xbng::v1::ListSubscribersRequest*,
                               xbng::v1::ListSubscribersResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const xbng::v1::GetStatsRequest*,
                        xbng::v1::GetStatsResponse*) override;
  grpc::Status WatchEvents(grpc::ServerContext*, const xbng::v1::WatchEventsRequest*,
                           grpc::ServerWriter<xbng::v1::Event>*) override;

  const std::string& boot_id() const { return boot_id_; }
  void shutdown() { stopping_ = true; }
  // Bring-up: lease state shown by Get/ListSubscribers (may stay null).
  void set_leases(const LeaseTable* leases) { leases_ = leases; }

 private:
  void to_proto(const AgentEvent& e, xbng::v1::Event* out) const;
  SubscriberStore* store_;
  EventHub* hub_;
  StoreMaps maps_;
  std::vector<PortInfo> ports_;
  std::string boot_id_;
  uint64_t started_ns_;
  std::atomic<bool> stopping_{false};
  const LeaseTable* leases_ = nullptr;
};

class GrpcMetrics;

struct ServerOptions {
  std::string listen = "unix:///run/xbng/xbngd.sock";
  std::string tls_cert, tls_key, tls_client_ca;
  bool insecure_tcp = false;
  GrpcMetrics* metrics = nullptr;  // counts requests and latency per method when set
};

// Starts a gRPC server for `service`. Throws std::runtime_error with an
// actionable message (bad address, TCP without TLS, unreadable files).
class GrpcServer {
 public:
  GrpcServer(const ServerOptions& opts, SubscribersService* service);
  ~GrpcServer();
  void shutdown();
  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  SubscribersService* service_;
};

}  // namespace xbng::agent
