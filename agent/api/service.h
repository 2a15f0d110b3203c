// The xbng.v1.Subscribers gRPC service and the server around it (unix socket
// by default, TCP only with TLS, health and reflection services).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <chrono>
#include <memory>
#include <string>

#include "dataplane/dataplane.h"
#include "telemetry/events.h"
#include "api/listener.h"
#include "store/store.h"
#include "api/watch.h"
#include "xbng/v1/xbng.grpc.pb.h"

namespace xbng::agent {

class LeaseTable;
class Tracer;
class HaMember;

std::string make_boot_id();

// WatchEvents runs on gRPC's callback API (watch.h), the rest synchronously.
class SubscribersService final
    : public xbng::v1::Subscribers::WithCallbackMethod_WatchEvents<xbng::v1::Subscribers::Service> {
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
  grpc::ServerWriteReactor<xbng::v1::Event>* WatchEvents(
      grpc::CallbackServerContext*, const xbng::v1::WatchEventsRequest*) override;
  // trace_service.cpp
  grpc::Status Trace(grpc::ServerContext*, const xbng::v1::TraceRequest*,
                     xbng::v1::TraceReply*) override;

  grpc::Status GetHaStatus(grpc::ServerContext*, const xbng::v1::GetHaStatusRequest*,
                           xbng::v1::GetHaStatusResponse*) override;
  grpc::Status HaSwitchover(grpc::ServerContext*, const xbng::v1::HaSwitchoverRequest*,
                            xbng::v1::HaSwitchoverResponse*) override;

  const std::string& boot_id() const { return boot_id_; }
  void shutdown();
  ~SubscribersService() override;

  // WatchEvents bounds: concurrent streams and events queued per stream.
  void set_watch_limits(size_t max_watchers, size_t queue) {
    watch_.set_limits(max_watchers, queue);
  }
  // Connection counters for GetStats (set once the server listens).
  void set_connection_stats(std::function<ListenerStats()> f) { connection_stats_ = std::move(f); }
  // Fleet mode: writes get FAILED_PRECONDITION naming the node's etcd
  // prefix, with trailing metadata for clients to key on (the message is for
  // people): xbng-error-reason = fleet-read-only, xbng-fleet-node,
  // xbng-fleet-prefix. Set before serving.
  void set_fleet_read_only(std::string node, std::string etcd_prefix);
  // Bring-up: lease state shown by Get/ListSubscribers (may stay null).
  void set_leases(const LeaseTable* leases) { leases_ = leases; }
  // `xbngctl trace` (may stay null: Trace answers UNIMPLEMENTED).
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  // High availability (may stay null: the HA calls answer FAILED_PRECONDITION).
  void set_ha(HaMember* ha) { ha_ = ha; }

 private:
  void to_proto(const AgentEvent& e, xbng::v1::Event* out) const;
  // After a large request, give freed memory back to the system (glibc
  // keeps it otherwise): malloc_trim a moment later, on the maintenance
  // thread.
  void large_request() { trim_due_ = true; }
  void maintenance();
  std::function<ListenerStats()> connection_stats_;
  std::atomic<bool> trim_due_{false};
  std::mutex maint_mu_;
  std::condition_variable maint_cv_;
  std::thread maint_;
  SubscriberStore* store_;
  EventHub* hub_;
  StoreMaps maps_;
  std::vector<PortInfo> ports_;
  std::string boot_id_;
  uint64_t started_ns_;
  std::atomic<bool> stopping_{false};
  WatchStreams watch_;
  std::string read_only_;  // non-empty: fleet mode, the refusal's message
  std::string fleet_node_, fleet_prefix_;
  const LeaseTable* leases_ = nullptr;
  Tracer* tracer_ = nullptr;
  HaMember* ha_ = nullptr;
};

class GrpcMetrics;

struct ServerOptions {
  std::string listen = "unix:///run/xbng/xbngd.sock";
  std::string tls_cert, tls_key, tls_client_ca;
  bool insecure_tcp = false;
  // TLS without client certificates (no tls_client_ca) only when set.
  bool tls_no_client_auth = false;
  size_t max_connections = 1024;          // clamped to what RLIMIT_NOFILE allows
  size_t max_request_bytes = 512u << 10;  // largest request message (docs/benchmarks.md)
  size_t max_watchers = 16;               // concurrent WatchEvents streams
  size_t watcher_queue = 65536;           // events queued per watcher
  GrpcMetrics* metrics = nullptr;         // counts requests and latency per method when set
};

// Starts a gRPC server for `service`. Throws std::runtime_error with an
// actionable message (bad address, TCP without TLS, unreadable files).
class GrpcServer {
 public:
  GrpcServer(const ServerOptions& opts, SubscribersService* service);
  ~GrpcServer();
  void shutdown();
  const std::string& address() const { return address_; }
  // A health check through a private connection (a socketpair handed to the
  // server): proves that the server answers, whatever the listener's state.
  grpc::Status probe(std::chrono::milliseconds timeout);
  Listener& listener() { return *listener_; }
  size_t max_connections() const { return max_connections_; }

 private:
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<UnixRelay> relay_;
  std::string relay_dir_;
  size_t max_connections_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  SubscribersService* service_;
};

}  // namespace xbng::agent
