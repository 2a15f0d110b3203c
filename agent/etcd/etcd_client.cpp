#include "etcd/etcd_client.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace xbng::agent::fleet {

namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(fmt::format("etcd {} {}: cannot read", what, path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string strip_scheme(const std::string& e, bool* tls) {
  if (e.rfind("https://", 0) == 0) {
    *tls = true;
    return e.substr(8);
  }
  if (e.rfind("http://", 0) == 0) return e.substr(7);
  return e;
}

}  // namespace

EtcdClient::EtcdClient(const EtcdOptions& o) : o_(o) {
  if (o_.endpoints.empty()) throw std::runtime_error("etcd: no endpoint given");
  bool tls = !o_.ca.empty() || !o_.cert.empty();
  for (auto& e : o_.endpoints) {
    e = strip_scheme(e, &tls);
    if (e.empty() || e.find('/') != std::string::npos)
      throw std::runtime_error(fmt::format("etcd endpoint \"{}\": expected HOST:PORT", e));
  }
  if (o_.cert.empty() != o_.key.empty())
    throw std::runtime_error("etcd TLS: a client certificate needs its key and vice versa");
  if (!o_.password.empty() && o_.username.empty())
    throw std::runtime_error("etcd: a password needs a username");
  if (tls) {
    grpc::SslCredentialsOptions so;
    if (!o_.ca.empty()) so.pem_root_certs = read_file(o_.ca, "CA");
    if (!o_.cert.empty()) {
      so.pem_cert_chain = read_file(o_.cert, "client certificate");
      so.pem_private_key = read_file(o_.key, "client key");
    }
    creds_ = grpc::SslCredentials(so);
  } else {
    creds_ = grpc::InsecureChannelCredentials();
  }
  conn_ = connect(0, 1);
}

std::shared_ptr<EtcdConn> EtcdClient::connect(size_t index, uint64_t gen) {
  auto c = std::make_shared<EtcdConn>();
  c->gen = gen;
  c->endpoint = o_.endpoints[index];
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // range pages and catch-up watch responses are large
  args.SetMaxSendMessageSize(-1);
  // A dead peer behind a silent network is found by keepalive; etcd accepts
  // pings every 5 s or slower (--grpc-keepalive-min-time).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Each channel its own connection (gRPC would share subchannels).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  c->channel = grpc::CreateCustomChannel(c->endpoint, creds_, args);
  c->kv = etcdserverpb::KV::NewStub(c->channel);
  c->watch = etcdserverpb::Watch::NewStub(c->channel);
  c->lease = etcdserverpb::Lease::NewStub(c->channel);
  c->auth = etcdserverpb::Auth::NewStub(c->channel);
  return c;
}

std::shared_ptr<EtcdConn> EtcdClient::conn() {
  std::lock_guard l(mu_);
  return conn_;
}

grpc::Status EtcdClient::prepare(const std::shared_ptr<EtcdConn>& c, grpc::ClientContext* ctx,
                                 std::chrono::milliseconds timeout, bool require_leader) {
  if (timeout.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  if (require_leader) ctx->AddMetadata("hasleader", "true");
  if (o_.username.empty()) return grpc::Status::OK;
  std::string token;
  {
    std::lock_guard l(mu_);
    token = token_;
  }
  if (token.empty()) {
    etcdserverpb::AuthenticateRequest rq;
    rq.set_name(o_.username);
    rq.set_password(o_.password);
    etcdserverpb::AuthenticateResponse rs;
    grpc::ClientContext actx;
    actx.set_deadline(std::chrono::system_clock::now() + o_.timeout);
    grpc::Status st = c->auth->Authenticate(&actx, rq, &rs);
    if (!st.ok()) {
      failed(c, st);
      return grpc::Status(st.error_code(),
                          "authenticate as " + o_.username + ": " + st.error_message());
    }
    token = rs.token();
    std::lock_guard l(mu_);
    token_ = token;
  }
  ctx->AddMetadata("token", token);
  return grpc::Status::OK;
}

void EtcdClient::failed(const std::shared_ptr<EtcdConn>& c, const grpc::Status& st) {
  std::lock_guard l(mu_);
  const auto code = st.error_code();
  if (code == grpc::StatusCode::UNAUTHENTICATED ||
      st.error_message().find("auth token") != std::string::npos) {
    token_.clear();
    return;
  }
  const bool conn_failure = code == grpc::StatusCode::UNAVAILABLE ||
                            code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                            st.error_message().find("no leader") != std::string::npos;
  if (!conn_failure || c->gen != conn_->gen || o_.endpoints.size() < 2) return;
  index_ = (index_ + 1) % o_.endpoints.size();
  conn_ = connect(index_, conn_->gen + 1);
  token_.clear();  // tokens of simple auth are per member
}

}  // namespace xbng::agent::fleet
