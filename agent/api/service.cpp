#include "api/service.h"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_posix.h>
#include <grpcpp/create_channel_posix.h>
#include <sys/socket.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <malloc.h>
#include <fstream>
#include <random>
#include <sstream>

#include "api/convert.h"
#include "api/health_check.h"
#include "api/lease_proto.h"
#include "api/status.h"
#include "common/thread_priority.h"
#include "bringup/lease/lease.h"
#include "api/metrics_interceptor.h"
#include "telemetry/metrics.h"
#include "telemetry/stats.h"

namespace xbng::agent {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;
namespace v1 = xbng::v1;

std::string make_boot_id() {
  std::random_device rd;
  std::uniform_int_distribution<uint32_t> d;
  uint32_t w[4] = {d(rd), d(rd), d(rd), d(rd)};
  w[1] = (w[1] & 0xffff0fff) | 0x4000;  // UUID v4
  w[2] = (w[2] & 0x3fffffff) | 0x80000000;
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:04x}{:08x}", w[0], w[1] >> 16, w[1] & 0xffff,
                     w[2] >> 16, w[2] & 0xffff, w[3]);
}

SubscribersService::SubscribersService(SubscriberStore* store, EventHub* hub, const StoreMaps& maps,
                                       std::vector<PortInfo> ports, std::string boot_id)
    : store_(store),
      hub_(hub),
      maps_(maps),
      ports_(std::move(ports)),
      boot_id_(std::move(boot_id)),
      started_ns_(unix_now_ns()),
      watch_(
          hub, [this](const AgentEvent& e, v1::Event* out) { to_proto(e, out); }, started_ns_) {
  maint_ = std::thread([this] { maintenance(); });
  set_thread_name(maint_, "xbng-maint");
}

// Large requests: above this many entries, memory is trimmed afterwards.
constexpr int kLargeRequest = 1000;

void SubscribersService::maintenance() {
  std::unique_lock l(maint_mu_);
  while (!stopping_) {
    maint_cv_.wait_for(l, std::chrono::milliseconds(500));
    if (stopping_) break;
    if (trim_due_.exchange(false)) malloc_trim(0);
  }
}

void SubscribersService::shutdown() {
  {
    std::lock_guard l(maint_mu_);
    stopping_ = true;
  }
  maint_cv_.notify_all();
  watch_.shutdown();
}

SubscribersService::~SubscribersService() {
  shutdown();
  if (maint_.joinable()) maint_.join();
}

#define XBNG_BOOT_ID(ctx) (ctx)->AddInitialMetadata("xbng-boot-id", boot_id_)
void SubscribersService::set_fleet_read_only(std::string node, std::string etcd_prefix) {
  read_only_ = fmt::format(
      "xbngd runs in fleet mode: etcd is the source of truth; write subscribers under {} in "
      "etcd (xbngctl sub import --etcd ... --node {})",
      etcd_prefix, node);
  fleet_node_ = std::move(node);
  fleet_prefix_ = std::move(etcd_prefix);
}

#define XBNG_WRITABLE()                                                 \
  if (!read_only_.empty()) {                                            \
    (ctx)->AddTrailingMetadata("xbng-error-reason", "fleet-read-only"); \
    (ctx)->AddTrailingMetadata("xbng-fleet-node", fleet_node_);         \
    (ctx)->AddTrailingMetadata("xbng-fleet-prefix", fleet_prefix_);     \
    return Status(StatusCode::FAILED_PRECONDITION, read_only_);         \
  }

Status SubscribersService::UpsertSubscribers(ServerContext* ctx,
                                             const v1::UpsertSubscribersRequest* req,
                                             v1::UpsertSubscribersResponse* resp) {
  XBNG_BOOT_ID(ctx);
  XBNG_WRITABLE();
  std::vector<const v1::Subscriber*> in;
  in.reserve(req->subscribers_size());
  for (const auto& s : req->subscribers()) in.push_back(&s);
  if (req->subscribers_size() > kLargeRequest) large_request();
  std::vector<SubscriberSpec> specs;
  if (absl::Status st = validate_request(in, store_->ports(), &specs); !st.ok()) return to_grpc(st);
  UpsertResult r;
  if (absl::Status st = store_->upsert(std::move(specs), &r); !st.ok()) return to_grpc(st);
  resp->set_created(r.created);
  resp->set_updated(r.updated);
  resp->set_unchanged(r.unchanged);
  resp->set_boot_id(boot_id_);
  return Status::OK;
}

Status SubscribersService::StreamSubscribers(ServerContext* ctx,
                                             grpc::ServerReader<v1::Subscriber>* reader,
                                             v1::StreamSubscribersResponse* resp) {
  XBNG_BOOT_ID(ctx);
  XBNG_WRITABLE();
  StreamResult r;
  store_->stream(stream_source([&](v1::Subscriber* m) { return reader->Read(m); }, store_->ports(),
                               kOriginApi),
                 &r);
  if (r.applied + r.failed > kLargeRequest) large_request();
  resp->set_applied(r.applied);
  resp->set_failed(r.failed);
  for (const auto& f : r.failures) failure_to_proto(f, resp->add_failures());
  resp->set_boot_id(boot_id_);
  return Status::OK;
}

Status SubscribersService::DeleteSubscribers(ServerContext* ctx,
                                             const v1::DeleteSubscribersRequest* req,
                                             v1::DeleteSubscribersResponse* resp) {
  XBNG_BOOT_ID(ctx);
  XBNG_WRITABLE();
  std::vector<const v1::SubscriberKey*> keys;
  keys.reserve(req->keys_size());
  if (req->keys_size() > kLargeRequest) large_request();
  for (const auto& k : req->keys()) keys.push_back(&k);
  std::vector<SubKey> ks;
  if (absl::Status st = validate_keys(keys, store_->ports(), &ks); !st.ok()) return to_grpc(st);
  uint64_t deleted = 0, not_found = 0;
  if (absl::Status st = store_->remove(ks, &deleted, &not_found); !st.ok()) return to_grpc(st);
  resp->set_deleted(deleted);
  resp->set_not_found(not_found);
  resp->set_boot_id(boot_id_);
  return Status::OK;
}

Status SubscribersService::GetSubscriber(ServerContext* ctx, const v1::GetSubscriberRequest* req,
                                         v1::GetSubscriberResponse* resp) {
  XBNG_BOOT_ID(ctx);
  SubKey k;
  if (absl::Status st = validate_key(req->key(), store_->ports(), "key", &k); !st.ok())
    return to_grpc(st);
  SubscriberView v;
  if (absl::Status st = store_->get(k, &v); !st.ok()) return to_grpc(st);
  view_to_proto(v, store_->ports(), resp->mutable_subscriber());
  if (leases_) fill_leases(*leases_, resp->mutable_subscriber());
  resp->set_boot_id(boot_id_);
  return Status::OK;
}

Status SubscribersService::ListSubscribers(ServerContext* ctx,
                                           const v1::ListSubscribersRequest* req,
                                           v1::ListSubscribersResponse* resp) {
  XBNG_BOOT_ID(ctx);
  ListQuery q;
  q.page_size = req->page_size();
  q.page_token = req->page_token();
  q.port = req->port();
  q.outer = req->outer_vlan();
  q.with_counters = req->with_counters();
  std::vector<SubscriberView> subs;
  std::string next;
  uint64_t total = 0;
  if (req->page_size() > kLargeRequest) large_request();
  if (absl::Status st = store_->list(q, &subs, &next, &total); !st.ok()) return to_grpc(st);
  resp->mutable_subscribers()->Reserve(static_cast<int>(subs.size()));
  for (const auto& v : subs) {
    v1::Subscriber* s = resp->add_subscribers();
    view_to_proto(v, store_->ports(), s);
    if (leases_) fill_leases(*leases_, s);
  }
  resp->set_next_page_token(next);
  resp->set_total_count(total);
  resp->set_boot_id(boot_id_);
  return Status::OK;
}

Status SubscribersService::GetStats(ServerContext* ctx, const v1::GetStatsRequest*,
                                    v1::GetStatsResponse* resp) {
  XBNG_BOOT_ID(ctx);
  StatsSnapshot snap;
  if (auto st = read_stats(maps_, ports_, *store_, &snap); !st.ok()) return to_grpc(st);
  for (const auto& c : snap.reasons) {
    auto* r = resp->add_reasons();
    r->set_reason(c.reason);
    r->set_kind(c.kind);
    r->set_packets(c.packets);
    r->set_bytes(c.bytes);
  }
  for (const auto& p : snap.ports) {
    auto* o = resp->add_ports();
    o->set_name(p.name);
    o->set_ifindex(p.ifindex);
    o->set_role(p.role);
    if (!p.valid) continue;
    o->set_rx_packets(p.rx_packets);
    o->set_rx_bytes(p.rx_bytes);
    o->set_tx_packets(p.tx_packets);
    o->set_tx_bytes(p.tx_bytes);
  }
  resp->set_subscribers(snap.subscribers);
  uint64_t nconf = 0;
  for (const auto& c : store_->reserved_conflicts(&nconf)) {
    auto* o = resp->add_reserved_conflicts();
    o->mutable_key()->set_port(store_->ports().name(c.key.ifindex));
    o->mutable_key()->set_outer_vlan(c.key.outer_vid);
    o->mutable_key()->set_inner_vlan(c.key.inner_vid);
    o->set_field(c.field);
    o->set_value(c.value);
    o->set_reserved(c.reserved);
  }
  resp->set_reserved_conflict_count(nconf);
  for (const auto& m : snap.maps) {
    auto* f = resp->add_maps();
    f->set_name(m.map);
    f->set_entries(m.entries);
    f->set_max_entries(m.max_entries);
  }
  resp->set_watchers(hub_->watchers());
  resp->set_watchers_disconnected(hub_->overflowed_total());
  resp->set_watchers_refused(hub_->refused_total());
  if (connection_stats_) {
    const ListenerStats c = connection_stats_();
    resp->set_grpc_connections(c.open);
    resp->set_grpc_max_connections(c.max);
    resp->set_grpc_connections_refused(c.refused + c.accept_errors);
  }
  resp->set_boot_id(boot_id_);
  return Status::OK;
}

namespace {
v1::Event::Type event_type(EventType t) {
  switch (t) {
    case EventType::kUnspecified:
      return v1::Event::TYPE_UNSPECIFIED;
    case EventType::kAgentStarted:
      return v1::Event::AGENT_STARTED;
    case EventType::kUnknownSubscriber:
      return v1::Event::UNKNOWN_SUBSCRIBER;
    case EventType::kSubscriberAdded:
      return v1::Event::SUBSCRIBER_ADDED;
    case EventType::kSubscriberRemoved:
      return v1::Event::SUBSCRIBER_REMOVED;
    case EventType::kSubscriberUpdated:
      return v1::Event::SUBSCRIBER_UPDATED;
    case EventType::kMacLearned:
      return v1::Event::MAC_LEARNED;
    case EventType::kMacChanged:
      return v1::Event::MAC_CHANGED;
    case EventType::kMacConflict:
      return v1::Event::MAC_CONFLICT;
    case EventType::kLeaseBound:
      return v1::Event::LEASE_BOUND;
    case EventType::kLeaseRenewed:
      return v1::Event::LEASE_RENEWED;
    case EventType::kLeaseReleased:
      return v1::Event::LEASE_RELEASED;
    case EventType::kLeaseExpired:
      return v1::Event::LEASE_EXPIRED;
  }
  return v1::Event::TYPE_UNSPECIFIED;
}
}  // namespace

void SubscribersService::to_proto(const AgentEvent& e, v1::Event* out) const {
  out->set_type(event_type(e.type));
  if (e.key.ifindex) {
    auto* k = out->mutable_key();
    k->set_port(store_->ports().name(e.key.ifindex));
    k->set_outer_vlan(e.key.outer_vid);
    k->set_inner_vlan(e.key.inner_vid);
  }
  if (e.has_mac) out->set_mac(format_mac(e.mac.data()));
  out->set_timestamp_unix_ns(e.timestamp_unix_ns);
  if (e.lease_family) {
    out->set_lease_family(e.lease_family == 4 ? "ipv4" : "ipv6");
    auto* l = out->mutable_lease();
    l->set_bound(e.lease_bound);
    l->set_expires_unix(e.lease_expires_unix);
    l->set_address(e.lease_address);
    for (const auto& p : e.lease_prefixes) l->add_prefixes(p);
  }
  out->set_boot_id(boot_id_);
}

grpc::ServerWriteReactor<v1::Event>* SubscribersService::WatchEvents(
    grpc::CallbackServerContext* ctx, const v1::WatchEventsRequest*) {
  XBNG_BOOT_ID(ctx);
  return watch_.open(ctx);
}

// ---- server -------------------------------------------------------------------

namespace {
std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path);
  if (!f)
    throw std::runtime_error(
        fmt::format("cannot read {} {}: {}", what, path, std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

namespace {

// The credentials of a TCP listener: TLS ones, or null for plaintext
// (--insecure-tcp); throws on settings that do not make a safe listener.
std::shared_ptr<grpc::ServerCredentials> tcp_credentials(const ServerOptions& o) {
  std::shared_ptr<grpc::ServerCredentials> tls;
  if (o.listen.find(':') == std::string::npos)
    throw std::runtime_error(
        fmt::format("--grpc {}: expected unix:///path or HOST:PORT", o.listen));
  if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    if (o.tls_cert.empty() || o.tls_key.empty())
      throw std::runtime_error("TLS needs both --tls-cert and --tls-key");
    if (o.tls_client_ca.empty() && !o.tls_no_client_auth)
      throw std::runtime_error(fmt::format(
          "--grpc {}: TLS without a client CA lets anyone who reaches the port provision "
          "subscribers: give grpc.tls_client_ca (--tls-client-ca), or tls_no_client_auth = "
          "true (--tls-no-client-auth) to accept clients without certificates explicitly",
          o.listen));
    if (o.tls_client_ca.empty())
      spdlog::warn(
          "gRPC on TCP {} with TLS but WITHOUT client certificates "
          "(--tls-no-client-auth): anyone who reaches it can provision subscribers",
          o.listen);
    grpc::SslServerCredentialsOptions so(
        o.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    so.pem_key_cert_pairs.push_back(
        {read_file(o.tls_key, "TLS key"), read_file(o.tls_cert, "TLS certificate")});
    if (!o.tls_client_ca.empty()) so.pem_root_certs = read_file(o.tls_client_ca, "client CA");
    tls = grpc::SslServerCredentials(so);
  } else if (o.insecure_tcp) {
    spdlog::warn(
        "gRPC on TCP {} WITHOUT TLS (--insecure-tcp): anyone who reaches it can "
        "provision subscribers",
        o.listen);
  } else {
    throw std::runtime_error(fmt::format(
        "--grpc {}: TCP needs TLS (--tls-cert and --tls-key), or --insecure-tcp to accept "
        "plaintext explicitly",
        o.listen));
  }
  return tls;
}

// Every connection costs a descriptor (three when relayed); the rest of
// the agent (maps, programs, gRPC's pollers, files) keeps kFdReserve.
size_t connections_that_fit(size_t wanted, bool relayed) {
  constexpr size_t kFdReserve = 256;
  size_t max_connections = wanted;
  const size_t fit = connections_within_fd_limit(relayed ? 3 : 1, kFdReserve);
  if (max_connections > fit) {
    spdlog::warn(
        "grpc.max_connections {} does not fit in the descriptor limit (RLIMIT_NOFILE, "
        "systemd LimitNOFILE=): at most {} connections",
        max_connections, fit);
    max_connections = fit;
  }
  if (max_connections == 0)
    throw std::runtime_error(
        "the descriptor limit (RLIMIT_NOFILE) leaves no room for gRPC "
        "connections: raise it (LimitNOFILE=65536)");
  return max_connections;
}

}  // namespace

GrpcServer::GrpcServer(const ServerOptions& o, SubscribersService* service) : service_(service) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder b;
  // xbngd owns the listening socket (Listener): connections are bounded and
  // accepted even when descriptors run short. Plaintext connections (unix
  // socket, --insecure-tcp) are handed to gRPC as descriptors; TLS ones are
  // relayed to gRPC's TLS listener on a private unix socket, since gRPC only
  // takes descriptors of plaintext connections.
  const bool is_unix = o.listen.rfind("unix:", 0) == 0;
  std::shared_ptr<grpc::ServerCredentials> tls;
  if (!is_unix) tls = tcp_credentials(o);
  max_connections_ = connections_that_fit(o.max_connections, tls != nullptr);
  listener_ = std::make_unique<Listener>(o.listen, max_connections_);
  address_ = is_unix ? "unix://" + listener_->socket_path() : o.listen;
  if (tls) {
    char tmpl[] = "/tmp/xbngd-tls-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error(fmt::format("mkdtemp: {}", std::strerror(errno)));
    relay_dir_ = tmpl;
    b.AddListeningPort("unix://" + relay_dir_ + "/grpc.sock", tls);
  }
  b.RegisterService(service);
  if (o.metrics) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> ic;
    ic.push_back(make_metrics_interceptor_factory(o.metrics));
    b.experimental().SetInterceptorCreators(std::move(ic));
  }
  b.SetMaxReceiveMessageSize(static_cast<int>(o.max_request_bytes));
  b.SetMaxSendMessageSize(256 << 20);
  server_ = b.BuildAndStart();
  if (!server_) throw std::runtime_error(fmt::format("gRPC cannot listen on {}", address_));
  if (tls) {
    relay_ = std::make_unique<UnixRelay>(relay_dir_ + "/grpc.sock");
    listener_->start([this](int fd) { relay_->add(fd); });
  } else {
    listener_->start([this](int fd) { grpc::AddInsecureChannelFromFd(server_.get(), fd); });
  }
}

grpc::Status GrpcServer::probe(std::chrono::milliseconds timeout) {
  if (!server_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "gRPC server stopped");
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        fmt::format("socketpair: {}", std::strerror(errno)));
  grpc::AddInsecureChannelFromFd(server_.get(), sv[0]);
  auto ch = grpc::CreateInsecureChannelFromFd("xbngd-probe", sv[1]);
  return check_health(ch, timeout);
}

void GrpcServer::shutdown() {
  if (!server_) return;
  listener_->stop();
  service_->shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  relay_.reset();
  server_.reset();
  listener_.reset();
  if (!relay_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(relay_dir_, ec);
  }
}

GrpcServer::~GrpcServer() { shutdown(); }

}  // namespace xbng::agent
