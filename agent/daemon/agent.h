// Agent: everything xbngd runs, in start order: dataplane (load/adopt,
// attach, ports), subscriber store (rebuilt from the maps), event hub and
// ring-buffer reader, gRPC server (with request metrics), metrics endpoint.
// Destroying it stops serving and leaves the data plane pinned and
// forwarding.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <mutex>
#include <vector>
#include <string>

#include "dataplane/dataplane.h"
#include "telemetry/events.h"
#include "fleet/fleet.h"
#include "ha/ha.h"
#include "ha/node.h"
#include "ha/replica.h"
#include "ha/session_state.h"
#include "bringup/lease/lease.h"
#include "telemetry/metrics.h"
#include "bringup/punt/dispatcher.h"
#include "bringup/punt/io.h"
#include "bringup/punt/xsk.h"
#include "api/service.h"
#include "store/store.h"
#include "dataplane/trace.h"
#include "radius/accounting.h"
#include "api/radius_store.h"
#include "radius/client.h"
#include "radius/dynauth_server.h"
#include "radius/session.h"
#include "radius/session_table.h"
#include "relay/relay4.h"
#include "relay/relay6.h"
#include "relay/socket4.h"
#include "relay/socket6.h"
#include "api/relay_store.h"

namespace xbng::agent {

struct AgentOptions {
  DataplaneOptions dataplane;
  ServerOptions server;        // server.metrics is set by the agent
  std::string metrics_listen;  // HOST:PORT; empty: no metrics endpoint
  // Fleet mode (docs/fleet.md): subscribers come from etcd; gRPC writes are refused.
  std::optional<FleetOptions> fleet;
  std::vector<std::string> reserved;  // security.reserved: never a subscriber's address
  punt::BringupOptions
      bringup;  // DHCP/RA servers on the punt path (docs/design.md, "Subscriber bring-up")
  std::string journal_file;  // the store's write-ahead journal; "" = none
  // Subscribers created by RADIUS on the access ports in bringup.auth_ports
  // (the client's servers and the session flow's settings).
  struct Radius {
    radius::Config client;
    radius::AccessOptions access;
    radius::AcctOptions acct;
    // Dynamic authorization (RFC 5176) on coa_listen, when coa_clients are set.
    struct DynAuth {
      std::string host;  // an IP literal
      uint16_t port = 3799;
      radius::DynAuthOptions options;
    };
    std::optional<DynAuth> dynauth;
  };
  std::optional<Radius> radius;
  // The DHCPv4 relay of the access ports in bringup.relay4_ports
  // (relay_address 0 = the uplink's first global IPv4 address).
  std::optional<relay::Relay4Options> relay4;
  // The DHCPv6 relay of the access ports in bringup.relay6_ports.
  std::optional<relay::Relay6Options> relay6;
  // High availability ([ha], fleet mode only): this node is a member of an
  // active/standby group elected through etcd.
  std::optional<HaOptions> ha;
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

  // The Prometheus exposition of the current counters. Throws
  // std::runtime_error when a map cannot be read.
  std::string render_metrics() const;
  // Moves the metrics endpoint (empty: none). On failure the previous
  // endpoint is kept and std::runtime_error thrown.
  void set_metrics_listen(const std::string& listen);
  std::string metrics_listen() const { return metrics_ ? metrics_->listen() : ""; }
  void set_last_reload_ok(bool ok) { last_reload_ok_ = ok; }
  Fleet* fleet() { return fleet_.get(); }  // null unless in fleet mode
  HaMember* ha() { return ha_.get(); }     // null unless [ha]

  // Can the API take a client now? The accept loop runs, a connection would
  // be accepted (below api.max_connections) unless `capacity` is false, and
  // the gRPC server answers a health check on a private connection. Empty
  // when healthy, else what is wrong. Used by /healthz and the systemd
  // watchdog (without capacity: a flood is refused by design, not a fault).
  std::string health(bool capacity = true);
  // New operator reserved ranges; every subscriber is checked again.
  void set_reserved_ranges(const std::vector<std::string>& ranges);

 private:
  std::string boot_id_;
  double start_time_seconds_;
  std::atomic<bool> last_reload_ok_{true};
  std::unique_ptr<Dataplane> dp_;
  // HA: what a role change does to this node (used by ha_ and the bring-up's sender).
  std::unique_ptr<HaNode> ha_node_;
  EventHub hub_;
  std::unique_ptr<SubscriberStore> store_;
  std::unique_ptr<RingbufReader> rb_;
  // The punt path and what hangs off it: leases, DHCP/RA servers, RADIUS
  // sessions, the relays (o.bringup, o.radius, o.relay4, o.relay6, o.ha).
  void start_bringup(const AgentOptions& o);
  void start_ha(const HaOptions& o, const FleetOptions& fo);
  void start_accounting(const AgentOptions::Radius& r, const std::string& lease_file);
  void start_radius_access(const AgentOptions::Radius& r, const punt::BringupOptions& o);
  void start_relays(const punt::BringupOptions& o,
                    const std::optional<relay::Relay4Options>& relay4,
                    const std::optional<relay::Relay6Options>& relay6);
  void start_relay4(const punt::BringupOptions& o, relay::Relay4Options ro);
  void start_relay6(const punt::BringupOptions& o, relay::Relay6Options ro);
  // punt.realtime_priority; throws std::runtime_error when `required` and
  // the kernel refuses, warns otherwise.
  void set_realtime(int priority, bool required);
  // A DHCPv6 message of the relay to the client, on k's tags.
  bool send_relay6_reply(const SubKey& k, const Mac& mac, const Ipv6& client,
                         std::span<const uint8_t> message);
  std::unique_ptr<LeaseTable> leases_;
  std::unique_ptr<punt::PuntTx> punt_tx_;
  std::unique_ptr<punt::Dispatcher> dispatcher_;
  // Its completions reach the dispatcher: declared after it, before the RX
  // thread (gone first, then the client's thread, then the sessions).
  std::unique_ptr<radius::SessionTable> radius_sessions_;
  // HA: the access side's sessions as replicated values (null without [ha]).
  std::unique_ptr<SessionReplication> session_repl_;
  // The client's completions reach it: outlives the client.
  std::unique_ptr<radius::Accounting> radius_accounting_;
  std::unique_ptr<radius::AccessSessions> access_sessions_;
  std::unique_ptr<radius::Client> radius_client_;
  // CoA and Disconnect on the session table and the store (gone before both).
  std::unique_ptr<radius::StoreDynAuthBackend> dynauth_backend_;
  std::unique_ptr<radius::DynAuthServer> dynauth_;
  // The DHCP relays: their sockets' threads go before them, they before the sessions.
  std::unique_ptr<RelaySessions> relay_sessions_;
  std::unique_ptr<relay::Relay4> relay4_;
  std::unique_ptr<relay::Socket4> relay_socket_;
  std::unique_ptr<relay::Relay6> relay6_;
  std::unique_ptr<relay::Socket6> relay_socket6_;
  std::unique_ptr<punt::PuntRx> punt_rx_;
  // [punt] transport = "af_xdp": the AF_XDP sockets' RX (the ring's stays,
  // for the queues without a socket).
  std::unique_ptr<punt::PuntXskRx> punt_xsk_rx_;
  std::unique_ptr<Tracer> tracer_;  // used by service_: declared before it
  std::unique_ptr<SubscribersService> service_;
  GrpcMetrics grpc_metrics_;  // outlives the server's interceptors
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<Fleet> fleet_;  // writes the store: stopped before the server goes
  std::unique_ptr<HaMember> ha_;  // first to stop: an active hands over
  // HA state replication (its hooks, set before it exists, read replica_raw_).
  std::unique_ptr<HaReplica> replica_;
  std::atomic<HaReplica*> replica_raw_{nullptr};
  std::unique_ptr<MetricsServer> metrics_;  // first to go: it reads everything above
  // Reserved addresses (the host's own and the operator's), re-read on address changes.
  void refresh_reserved();
  std::mutex reserved_mu_;
  std::vector<std::string> reserved_ranges_;
  std::unique_ptr<AddressWatcher> addr_watcher_;
};

}  // namespace xbng::agent
