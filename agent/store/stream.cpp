// The stream pipeline of StreamSubscribers and the fleet's resync: a reader
// thread receives and validates batch N+1 while this thread plans and
// applies batch N; a refused batch is retried entry by entry.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "store/plan.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

using grpc::Status;
using grpc::StatusCode;

void SubscriberStore::stream(const std::function<bool(xbng::v1::Subscriber*)>& next,
                             StreamResult* out, bool resync) {
  // Two stages: a reader thread receives and validates batch N+1 while this
  // thread plans and applies batch N.
  struct Batch {
    size_t base = 0, got = 0;
    std::vector<xbng::v1::Subscriber> msgs;
    std::vector<SubscriberSpec> specs;
    std::vector<size_t> idx;
    std::vector<std::pair<size_t, Status>> invalid;
  };
  std::mutex qmu;
  std::condition_variable qcv;
  std::deque<std::unique_ptr<Batch>> q;
  // Processed batches come back for reuse: their messages keep the memory of
  // their strings, so receiving the next batch allocates (almost) nothing.
  std::vector<std::unique_ptr<Batch>> pool;
  bool done = false, abort = false;
  std::thread reader([&] {
    size_t base = 0;
    bool more = true;
    while (more) {
      std::unique_ptr<Batch> b;
      {
        std::lock_guard l(qmu);
        if (!pool.empty()) {
          b = std::move(pool.back());
          pool.pop_back();
        }
      }
      if (!b) {
        b = std::make_unique<Batch>();
        b->msgs.resize(kStreamBatch);
      }
      b->base = base;
      b->got = 0;
      b->specs.clear();
      b->idx.clear();
      b->invalid.clear();
      while (b->got < kStreamBatch && (more = next(&b->msgs[b->got]))) ++b->got;
      if (!b->got) break;
      b->specs.reserve(b->got);
      b->idx.reserve(b->got);
      for (size_t i = 0; i < b->got; ++i) {
        SubscriberSpec sp;
        Status st = validate_at(b->msgs[i], ports_, false, base + i, &sp);
        if (!st.ok()) {
          b->invalid.emplace_back(base + i, st);
          continue;
        }
        b->specs.push_back(std::move(sp));
        b->idx.push_back(base + i);
      }
      base += b->got;
      std::unique_lock l(qmu);
      qcv.wait(l, [&] { return q.size() < 2 || abort; });
      if (abort) break;
      q.push_back(std::move(b));
      qcv.notify_all();
    }
    std::lock_guard l(qmu);
    done = true;
    qcv.notify_all();
  });

  std::vector<std::pair<size_t, Status>> failures;
  for (;;) {
    std::unique_ptr<Batch> b;
    {
      std::unique_lock l(qmu);
      qcv.wait(l, [&] { return !q.empty() || done; });
      if (q.empty()) break;
      b = std::move(q.front());
      q.pop_front();
      qcv.notify_all();
    }
    auto msg = [&](size_t index) { return &b->msgs[index - b->base]; };
    auto fail = [&](size_t index, const Status& st) {
      ++out->failed;
      if (out->failures.size() >= kMaxReportedFailures) return;
      xbng::v1::Failure f;
      f.set_index(index);
      const auto* m = msg(index);
      f.mutable_key()->set_port(m->port());
      f.mutable_key()->set_outer_vlan(m->outer_vlan());
      f.mutable_key()->set_inner_vlan(m->inner_vlan());
      f.set_code(static_cast<int>(st.error_code()));
      f.set_message(st.error_message());
      out->failures.push_back(std::move(f));
    };
    for (auto& [i, st] : b->invalid) fail(i, st);
    std::unique_lock l(mu_);
    size_t pos = 0;
    while (pos < b->specs.size()) {
      std::vector<SubscriberSpec> sub;
      std::vector<size_t> sidx;
      if (pos == 0) {
        sub.swap(b->specs);
        sidx.swap(b->idx);
      } else {
        sub.assign(std::make_move_iterator(b->specs.begin() + pos),
                   std::make_move_iterator(b->specs.end()));
        sidx.assign(b->idx.begin() + pos, b->idx.end());
      }
      Plan p;
      p.resync = resync;
      failures.clear();
      size_t stop = plan(sub, sidx, Mode::kSequential, &p, nullptr, &failures);
      for (auto& [i, st] : failures) fail(i, st);
      Status st = apply(p);
      if (st.ok()) {
        out->applied += p.accepted.size();
      } else {
        // The batch was rolled back: retry its entries one by one so that
        // each is applied whole or reported with its own error.
        spdlog::warn("stream batch of {} rolled back ({}); retrying entry by entry",
                     p.entries.size(), st.error_message());
        out->applied += p.unchanged;
        for (const auto& e : p.entries) {
          Plan one;
          one.resync = resync;
          std::vector<std::pair<size_t, Status>> f1;
          plan({e.spec}, {e.input}, Mode::kSequential, &one, nullptr, &f1);
          Status s1 = f1.empty() ? apply(one) : f1[0].second;
          if (s1.ok())
            ++out->applied;
          else
            fail(e.input, s1);
        }
      }
      if (stop < sub.size()) {
        // Put the unplanned tail back for the next round.
        b->specs.assign(std::make_move_iterator(sub.begin() + stop),
                        std::make_move_iterator(sub.end()));
        b->idx.assign(sidx.begin() + stop, sidx.end());
        pos = 0;
        if (b->specs.empty()) break;
        continue;
      }
      // Keep the larger buffers with the batch for its next use.
      if (sub.capacity() > b->specs.capacity()) b->specs.swap(sub);
      if (sidx.capacity() > b->idx.capacity()) b->idx.swap(sidx);
      break;
    }
    l.unlock();
    std::lock_guard ql(qmu);
    pool.push_back(std::move(b));
  }
  {
    std::lock_guard l(qmu);
    abort = true;
    qcv.notify_all();
  }
  reader.join();
  std::sort(out->failures.begin(), out->failures.end(),
            [](const auto& a, const auto& b) { return a.index() < b.index(); });
}

}  // namespace xbng::agent
