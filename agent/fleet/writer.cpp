// EtcdWriter: bulk puts into a node's prefix, in transactions of bounded size
// (etcd's --max-txn-ops, 128 by default), several in flight. Puts are
// idempotent: a transaction that fails on a connection error is retried (on
// the next endpoint).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fleet/fleet.h"
#include "fleet/kv.h"

namespace xbng::agent {

using Clock = std::chrono::steady_clock;
using fleet::TxnOp;

struct EtcdWriter::Impl {
  std::unique_ptr<fleet::Kv> kv;
  std::string node;
  uint32_t txn_ops, inflight;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<TxnOp>> q;
  std::vector<TxnOp> cur;
  bool done = false;
  std::string error;
  uint64_t written = 0, txns = 0;
  std::vector<std::thread> workers;
  Clock::time_point t0 = Clock::now();

  Impl(std::unique_ptr<fleet::Kv> k, std::string n, uint32_t ops, uint32_t in)
      : kv(std::move(k)), node(std::move(n)), txn_ops(ops), inflight(in) {
    if (auto e = check_node_name(node)) throw std::runtime_error(*e);
    for (uint32_t i = 0; i < inflight; ++i) workers.emplace_back([this] { work(); });
  }

  void work() {
    for (;;) {
      std::vector<TxnOp> rq;
      {
        std::unique_lock l(mu);
        cv.wait(l, [&] { return !q.empty() || done || !error.empty(); });
        if (!error.empty() || q.empty()) return;
        rq = std::move(q.front());
        q.pop_front();
        cv.notify_all();
      }
      const uint64_t n = rq.size();
      absl::Status s;
      for (int attempt = 0; attempt < 8; ++attempt) {
        auto c = kv->conn();
        s = c->txn(rq, std::chrono::milliseconds(30000));
        if (s.ok()) break;
        kv->failed(c, s);
        const auto code = s.code();
        if (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded &&
            code != absl::StatusCode::kUnauthenticated)
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
    if (cur.empty()) return;
    std::unique_lock l(mu);
    cv.wait(l, [&] { return q.size() < 2 * inflight || !error.empty(); });
    if (!error.empty()) throw std::runtime_error(error);
    q.push_back(std::move(cur));
    cur.clear();
    cv.notify_all();
  }
};

EtcdWriter::EtcdWriter(std::unique_ptr<fleet::Kv> kv, std::string node, uint32_t txn_ops,
                       uint32_t inflight)
    : impl_(std::make_unique<Impl>(std::move(kv), std::move(node), std::max(1u, txn_ops),
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

void EtcdWriter::put(std::string_view port, uint32_t outer, uint32_t inner, std::string value) {
  impl_->cur.push_back(
      {TxnOp::Type::kPut, subscriber_etcd_key(impl_->node, port, outer, inner), std::move(value)});
  if (impl_->cur.size() >= impl_->txn_ops) impl_->push();
}

void EtcdWriter::del(std::string_view port, uint32_t outer, uint32_t inner) {
  impl_->cur.push_back(
      {TxnOp::Type::kDelete, subscriber_etcd_key(impl_->node, port, outer, inner), {}});
  if (impl_->cur.size() >= impl_->txn_ops) impl_->push();
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
