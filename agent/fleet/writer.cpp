// EtcdWriter: bulk puts into a node's prefix, in transactions of bounded size
// (etcd's --max-txn-ops, 128 by default), several in flight. Puts are
// idempotent: a transaction that fails on a connection error is retried (on
// the next endpoint).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <thread>

#include "etcd/etcd_client.h"
#include "fleet/fleet.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

using Clock = std::chrono::steady_clock;
namespace pb = etcdserverpb;

struct EtcdWriter::Impl {
  fleet::EtcdClient client;
  std::string node;
  uint32_t txn_ops, inflight;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<pb::TxnRequest> q;
  pb::TxnRequest cur;
  bool done = false;
  std::string error;
  uint64_t written = 0, txns = 0;
  std::vector<std::thread> workers;
  Clock::time_point t0 = Clock::now();

  Impl(const EtcdOptions& o, std::string n, uint32_t ops, uint32_t in)
      : client(o), node(std::move(n)), txn_ops(ops), inflight(in) {
    if (auto e = check_node_name(node)) throw std::runtime_error(*e);
    for (uint32_t i = 0; i < inflight; ++i) workers.emplace_back([this] { work(); });
  }

  void work() {
    for (;;) {
      pb::TxnRequest rq;
      {
        std::unique_lock l(mu);
        cv.wait(l, [&] { return !q.empty() || done || !error.empty(); });
        if (!error.empty() || q.empty()) return;
        rq = std::move(q.front());
        q.pop_front();
        cv.notify_all();
      }
      const uint64_t n = rq.success_size();
      grpc::Status s;
      for (int attempt = 0; attempt < 8; ++attempt) {
        auto c = client.conn();
        grpc::ClientContext ctx;
        s = client.prepare(c, &ctx, std::chrono::milliseconds(30000));
        pb::TxnResponse rs;
        if (s.ok()) s = c->kv->Txn(&ctx, rq, &rs);
        if (s.ok()) break;
        client.failed(c, s);
        const auto code = s.error_code();
        if (code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::DEADLINE_EXCEEDED &&
            code != grpc::StatusCode::UNAUTHENTICATED)
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(attempt, 5)));
      }
      std::lock_guard l(mu);
      if (!s.ok()) {
        if (error.empty())
          error = fmt::format("etcd transaction of {} puts failed: {}", n, fleet::status_text(s));
        cv.notify_all();
        return;
      }
      written += n;
      ++txns;
    }
  }

  void push() {
    if (cur.success_size() == 0) return;
    std::unique_lock l(mu);
    cv.wait(l, [&] { return q.size() < 2 * inflight || !error.empty(); });
    if (!error.empty()) throw std::runtime_error(error);
    q.push_back(std::move(cur));
    cur.Clear();
    cv.notify_all();
  }
};

EtcdWriter::EtcdWriter(const EtcdOptions& o, std::string node, uint32_t txn_ops, uint32_t inflight)
    : impl_(std::make_unique<Impl>(o, std::move(node), std::max(1u, txn_ops),
                                   std::max(1u, inflight))) {}

EtcdWriter::~EtcdWriter() {
  {
    std::lock_guard l(impl_->mu);
    impl_->done = true;
    if (impl_->error.empty()) impl_->error = "cancelled";
    impl_->cv.notify_all();
  }
  for (auto& t : impl_->workers)
    if (t.joinable()) t.join();
}

void EtcdWriter::put(const xbng::v1::Subscriber& s) {
  auto* op = impl_->cur.add_success()->mutable_request_put();
  op->set_key(subscriber_etcd_key(impl_->node, s.port(), s.outer_vlan(), s.inner_vlan()));
  op->set_value(encode_subscriber_value(s));
  if (static_cast<uint32_t>(impl_->cur.success_size()) >= impl_->txn_ops) impl_->push();
}

void EtcdWriter::del(std::string_view port, uint32_t outer, uint32_t inner) {
  auto* op = impl_->cur.add_success()->mutable_request_delete_range();
  op->set_key(subscriber_etcd_key(impl_->node, port, outer, inner));
  if (static_cast<uint32_t>(impl_->cur.success_size()) >= impl_->txn_ops) impl_->push();
}

EtcdImportResult EtcdWriter::finish() {
  impl_->push();
  {
    std::unique_lock l(impl_->mu);
    impl_->done = true;
    impl_->cv.notify_all();
  }
  for (auto& t : impl_->workers)
    if (t.joinable()) t.join();
  std::lock_guard l(impl_->mu);
  if (!impl_->error.empty()) throw std::runtime_error(impl_->error);
  EtcdImportResult r;
  r.written = impl_->written;
  r.txns = impl_->txns;
  r.seconds = std::chrono::duration<double>(Clock::now() - impl_->t0).count();
  return r;
}

}  // namespace xbng::agent
