#include "etcd/etcd_kv.h"

#include <google/protobuf/arena.h>

#include <utility>

#include "api/status.h"
#include "etcd/etcd_client.h"

namespace xbng::agent::fleet {

namespace pb = etcdserverpb;

namespace {

KvHeader header_of(const pb::ResponseHeader& h) {
  KvHeader out;
  out.cluster_id = h.cluster_id();
  out.member_id = h.member_id();
  out.revision = h.revision();
  return out;
}

// Moves the strings out: range pages and catch-up watch responses are large.
KeyValue kv_of(mvccpb::KeyValue* kv) {
  KeyValue out;
  out.key = std::move(*kv->mutable_key());
  out.value = std::move(*kv->mutable_value());
  out.create_revision = kv->create_revision();
  out.mod_revision = kv->mod_revision();
  out.version = kv->version();
  out.lease = kv->lease();
  return out;
}

class GrpcWatchStream final : public WatchStream {
 public:
  explicit GrpcWatchStream(std::shared_ptr<EtcdConn> c) : c_(std::move(c)) {}
  grpc::ClientContext* context() { return &ctx_; }

  void create(const std::string& key, const std::string& range_end,
              int64_t start_revision) override {
    stream_ = c_->watch->Watch(&ctx_);
    pb::WatchRequest rq;
    auto* cr = rq.mutable_create_request();
    cr->set_key(key);
    cr->set_range_end(range_end);
    cr->set_start_revision(start_revision);
    stream_->Write(rq);
  }
  bool read(WatchResponse* out) override {
    if (!stream_ || !stream_->Read(&r_)) return false;
    out->header = header_of(r_.header());
    out->watch_id = r_.watch_id();
    out->created = r_.created();
    out->canceled = r_.canceled();
    out->compact_revision = r_.compact_revision();
    out->cancel_reason = r_.cancel_reason();
    out->events.clear();
    out->events.reserve(static_cast<size_t>(r_.events_size()));
    for (auto& e : *r_.mutable_events()) {
      WatchEvent& ev = out->events.emplace_back();
      ev.type = e.type() == mvccpb::Event::PUT ? WatchEvent::Type::kPut : WatchEvent::Type::kDelete;
      ev.kv = kv_of(e.mutable_kv());
    }
    r_.Clear();
    return true;
  }
  bool request_progress() override {
    pb::WatchRequest pr;
    pr.mutable_progress_request();
    return stream_ && stream_->Write(pr);
  }
  void cancel() override { ctx_.TryCancel(); }
  absl::Status finish() override {
    return stream_ ? from_grpc(stream_->Finish()) : absl::OkStatus();
  }

 private:
  std::shared_ptr<EtcdConn> c_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> stream_;
  pb::WatchResponse r_;  // read()'s buffer (one reader)
};

class GrpcKvConn final : public KvConn {
 public:
  GrpcKvConn(EtcdClient* client, std::shared_ptr<EtcdConn> c) : client_(client), c_(std::move(c)) {}
  const std::shared_ptr<EtcdConn>& etcd_conn() const { return c_; }
  const std::string& endpoint() const override { return c_->endpoint; }

  static pb::RangeRequest request_of(const RangeRequest& rq) {
    pb::RangeRequest q;
    q.set_key(rq.key);
    q.set_range_end(rq.range_end);
    if (rq.limit) q.set_limit(rq.limit);
    if (rq.revision) q.set_revision(rq.revision);
    if (rq.count_only) q.set_count_only(true);
    if (rq.serializable) q.set_serializable(true);
    return q;
  }

  absl::Status range(const RangeRequest& rq, std::chrono::milliseconds timeout,
                     RangeResponse* out) override {
    pb::RangeResponse rs;
    grpc::ClientContext ctx;
    grpc::Status s = client_->prepare(c_, &ctx, timeout);
    if (s.ok()) s = c_->kv->Range(&ctx, request_of(rq), &rs);
    if (!s.ok()) return from_grpc(s);
    out->header = header_of(rs.header());
    out->more = rs.more();
    out->count = rs.count();
    out->kvs.clear();
    out->kvs.reserve(static_cast<size_t>(rs.kvs_size()));
    for (auto& kv : *rs.mutable_kvs()) out->kvs.push_back(kv_of(&kv));
    return absl::OkStatus();
  }

  // The page parsed into an arena: its kvs and their strings are carved
  // out of a few large blocks instead of one allocation each, and handed
  // over as views, never copied.
  absl::Status range_view(const RangeRequest& rq, std::chrono::milliseconds timeout,
                          const std::function<void(const RangeView&)>& page) override {
    google::protobuf::ArenaOptions ao;
    ao.start_block_size = 64 << 10;
    ao.max_block_size = 1 << 20;
    google::protobuf::Arena arena(ao);
    auto* rs = google::protobuf::Arena::CreateMessage<pb::RangeResponse>(&arena);
    grpc::ClientContext ctx;
    grpc::Status s = client_->prepare(c_, &ctx, timeout);
    if (s.ok()) s = c_->kv->Range(&ctx, request_of(rq), rs);
    if (!s.ok()) return from_grpc(s);
    std::vector<KeyValueView> kvs;
    kvs.reserve(static_cast<size_t>(rs->kvs_size()));
    for (const auto& kv : rs->kvs())
      kvs.push_back({kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.version()});
    page(RangeView{header_of(rs->header()), kvs, rs->more(), rs->count()});
    return absl::OkStatus();
  }

  absl::Status put(const std::string& key, const std::string& value, int64_t lease,
                   std::chrono::milliseconds timeout) override {
    pb::PutRequest rq;
    rq.set_key(key);
    rq.set_value(value);
    rq.set_lease(lease);
    pb::PutResponse rs;
    grpc::ClientContext ctx;
    grpc::Status s = client_->prepare(c_, &ctx, timeout);
    if (s.ok()) s = c_->kv->Put(&ctx, rq, &rs);
    return from_grpc(s);
  }

  absl::Status txn(const std::vector<TxnOp>& ops, std::chrono::milliseconds timeout) override {
    pb::TxnRequest rq;
    for (const TxnOp& op : ops) {
      if (op.type == TxnOp::Type::kPut) {
        auto* p = rq.add_success()->mutable_request_put();
        p->set_key(op.key);
        p->set_value(op.value);
      } else {
        rq.add_success()->mutable_request_delete_range()->set_key(op.key);
      }
    }
    pb::TxnResponse rs;
    grpc::ClientContext ctx;
    grpc::Status s = client_->prepare(c_, &ctx, timeout);
    if (s.ok()) s = c_->kv->Txn(&ctx, rq, &rs);
    return from_grpc(s);
  }

  absl::Status create_if_absent(const std::string& key, const std::string& value, int64_t lease,
                                std::chrono::milliseconds timeout, bool* created) override {
    pb::TxnRequest rq;
    auto* c = rq.add_compare();
    c->set_key(key);
    c->set_target(pb::Compare::CREATE);
    c->set_result(pb::Compare::EQUAL);
    c->set_create_revision(0);
    auto* p = rq.add_success()->mutable_request_put();
    p->set_key(key);
    p->set_value(value);
    p->set_lease(lease);
    pb::TxnResponse rs;
    grpc::ClientContext ctx;
    grpc::Status s = client_->prepare(c_, &ctx, timeout);
    if (s.ok()) s = c_->kv->Txn(&ctx, rq, &rs);
    if (!s.ok()) return from_grpc(s);
    *created = rs.succeeded();
    return absl::OkStatus();
  }

  absl::Status lease_grant(int64_t ttl_seconds, std::chrono::milliseconds timeout,
                           int64_t* id) override {
    pb::LeaseGrantRequest rq;
    rq.set_ttl(ttl_seconds);
    pb::LeaseGrantResponse rs;
    grpc::ClientContext ctx;
    grpc::Status s = client_->prepare(c_, &ctx, timeout);
    if (s.ok()) s = c_->lease->LeaseGrant(&ctx, rq, &rs);
    if (!s.ok()) return from_grpc(s);
    if (!rs.error().empty()) return absl::UnavailableError(rs.error());
    *id = rs.id();
    return absl::OkStatus();
  }

  absl::Status lease_keepalive(int64_t id, std::chrono::milliseconds timeout,
                               int64_t* ttl) override {
    grpc::ClientContext ctx;
    grpc::Status s = client_->prepare(c_, &ctx, timeout);
    if (!s.ok()) return from_grpc(s);
    auto ka = c_->lease->LeaseKeepAlive(&ctx);
    pb::LeaseKeepAliveRequest rq;
    rq.set_id(id);
    pb::LeaseKeepAliveResponse rs;
    const bool got = ka->Write(rq) && ka->Read(&rs);
    ka->WritesDone();
    ctx.TryCancel();
    s = ka->Finish();
    if (!got) return s.ok() ? absl::UnavailableError("keepalive stream closed") : from_grpc(s);
    *ttl = rs.ttl();
    return absl::OkStatus();
  }

  absl::Status lease_revoke(int64_t id, std::chrono::milliseconds timeout) override {
    pb::LeaseRevokeRequest rq;
    rq.set_id(id);
    pb::LeaseRevokeResponse rs;
    grpc::ClientContext ctx;
    grpc::Status s = client_->prepare(c_, &ctx, timeout);
    if (s.ok()) s = c_->lease->LeaseRevoke(&ctx, rq, &rs);
    return from_grpc(s);
  }

  absl::Status watch(std::unique_ptr<WatchStream>* out) override {
    auto w = std::make_unique<GrpcWatchStream>(c_);
    grpc::Status s = client_->prepare(c_, w->context(), std::chrono::milliseconds(0), true);
    if (!s.ok()) return from_grpc(s);
    *out = std::move(w);
    return absl::OkStatus();
  }

 private:
  EtcdClient* client_;
  std::shared_ptr<EtcdConn> c_;
};

class GrpcKv final : public Kv {
 public:
  explicit GrpcKv(const EtcdOptions& o) : client_(o) {}
  std::shared_ptr<KvConn> conn() override {
    return std::make_shared<GrpcKvConn>(&client_, client_.conn());
  }
  void failed(const std::shared_ptr<KvConn>& c, const absl::Status& st) override {
    client_.failed(static_cast<const GrpcKvConn&>(*c).etcd_conn(), to_grpc(st));
  }

 private:
  EtcdClient client_;
};

}  // namespace

std::unique_ptr<Kv> connect_etcd(const EtcdOptions& o) { return std::make_unique<GrpcKv>(o); }

}  // namespace xbng::agent::fleet
