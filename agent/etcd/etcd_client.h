// A small etcd v3 client over the generated gRPC stubs: endpoint rotation on
// connection failures, TLS, username/password (token in the metadata). The
// fleet reaches it through fleet/kv.h (etcd/etcd_kv.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "fleet/fleet.h"

namespace xbng::agent::fleet {

struct EtcdConn {
  uint64_t gen = 0;
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<etcdserverpb::Auth::Stub> auth;
};

class EtcdClient {
 public:
  // Throws std::runtime_error: no endpoint, unreadable TLS file.
  explicit EtcdClient(const EtcdOptions& o);

  // The current connection (thread-safe snapshot).
  std::shared_ptr<EtcdConn> conn();
  // Sets the deadline (zero: none), the auth token and, for watches,
  // require-leader (a member cut off from the quorum cancels the watch).
  // Authenticates first when needed; returns that error if it fails.
  grpc::Status prepare(const std::shared_ptr<EtcdConn>& c, grpc::ClientContext* ctx,
                       std::chrono::milliseconds timeout, bool require_leader = false);
  // After a failed call on `c`: a connection failure moves to the next
  // endpoint, an auth failure drops the token.
  void failed(const std::shared_ptr<EtcdConn>& c, const grpc::Status& st);
  const EtcdOptions& options() const { return o_; }

 private:
  std::shared_ptr<EtcdConn> connect(size_t index, uint64_t gen);
  EtcdOptions o_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;
  std::mutex mu_;
  std::shared_ptr<EtcdConn> conn_;
  size_t index_ = 0;
  std::string token_;
};

}  // namespace xbng::agent::fleet
