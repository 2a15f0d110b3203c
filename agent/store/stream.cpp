// The stream pipeline of StreamSubscribers and the fleet's resync: a reader
// thread receives and validates batch N+1 (through the caller's source)
// while this thread plans and applies batch N; a refused batch is retried
// entry by entry.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "store/plan.h"

namespace xbng::agent {

using absl::Status;
using absl::StatusCode;

namespace {

using Batch = StreamBatch;

// The batches between the reader and the applier: at most two queued.
// Processed batches come back for reuse: their vectors keep their memory,
// so reading the next batch allocates (almost) nothing.
struct BatchQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Batch>> q;
  std::vector<std::unique_ptr<Batch>> pool;
  bool done = false, abort = false;

  std::unique_ptr<Batch> reuse() {
    std::unique_ptr<Batch> b;
    {
      std::lock_guard l(mu);
      if (!pool.empty()) {
        b = std::move(pool.back());
        pool.pop_back();
      }
    }
    if (!b) {
      b = std::make_unique<Batch>();
      b->keys.reserve(SubscriberStore::kStreamBatch);
      b->specs.reserve(SubscriberStore::kStreamBatch);
      b->idx.reserve(SubscriberStore::kStreamBatch);
    }
    b->got = 0;
    b->keys.clear();
    b->specs.clear();
    b->idx.clear();
    b->invalid.clear();
    return b;
  }
  // False when the applier gave up.
  bool push(std::unique_ptr<Batch> b) {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return q.size() < 2 || abort; });
    if (abort) return false;
    q.push_back(std::move(b));
    cv.notify_all();
    return true;
  }
  // Null at the end of the stream.
  std::unique_ptr<Batch> pop() {
    std::unique_lock l(mu);
    cv.wait(l, [&] { return !q.empty() || done; });
    if (q.empty()) return nullptr;
    auto b = std::move(q.front());
    q.pop_front();
    cv.notify_all();
    return b;
  }
  void give_back(std::unique_ptr<Batch> b) {
    std::lock_guard l(mu);
    pool.push_back(std::move(b));
  }
  void finish(bool* flag) {
    std::lock_guard l(mu);
    *flag = true;
    cv.notify_all();
  }
};

// The reader stage: batches read and validated by `source`.
void read_batches(BatchQueue& bq, const StreamSource& source) {
  size_t base = 0;
  bool more = true;
  while (more) {
    std::unique_ptr<Batch> b = bq.reuse();
    b->base = base;
    more = source(b.get(), SubscriberStore::kStreamBatch);
    if (!b->got) break;
    base += b->got;
    if (!bq.push(std::move(b))) break;
  }
  bq.finish(&bq.done);
}

// Counts a failed entry of `b` and reports the first kMaxReportedFailures.
void report_failure(const Batch& b, size_t index, const Status& st, StreamResult* out) {
  ++out->failed;
  const bool listed = out->failures.size() < SubscriberStore::kMaxReportedFailures;
  if (!out->on_failure && !listed) return;
  StreamFailure f{index, b.keys[index - b.base], st};
  if (out->on_failure) out->on_failure(f);
  if (listed) out->failures.push_back(std::move(f));
}

}  // namespace

void SubscriberStore::apply_specs(std::vector<SubscriberSpec>& specs, std::vector<size_t>& idx,
                                  bool resync,
                                  const std::function<void(size_t, const Status&)>& fail,
                                  uint64_t* applied) {
  std::vector<std::pair<size_t, Status>> failures;
  size_t pos = 0;
  while (pos < specs.size()) {
    std::vector<SubscriberSpec> sub;
    std::vector<size_t> sidx;
    sub.swap(specs);
    sidx.swap(idx);
    Plan p;
    p.resync = resync;
    failures.clear();
    size_t stop = plan(sub, sidx, Mode::kSequential, &p, nullptr, &failures);
    for (auto& [i, st] : failures) fail(i, st);
    Status st = apply(p);
    if (st.ok()) {
      *applied += p.accepted.size();
    } else {
      // The batch was rolled back: retry its entries one by one so that
      // each is applied whole or reported with its own error.
      spdlog::warn("stream batch of {} rolled back ({}); retrying entry by entry", p.entries.size(),
                   status_message(st));
      *applied += p.unchanged;
      for (const auto& e : p.entries) {
        Plan one;
        one.resync = resync;
        std::vector<std::pair<size_t, Status>> f1;
        plan({e.spec}, {e.input}, Mode::kSequential, &one, nullptr, &f1);
        Status s1 = f1.empty() ? apply(one) : f1[0].second;
        if (s1.ok())
          ++*applied;
        else
          fail(e.input, s1);
      }
    }
    if (stop < sub.size()) {
      // Put the unplanned tail back for the next round.
      specs.assign(std::make_move_iterator(sub.begin() + stop), std::make_move_iterator(sub.end()));
      idx.assign(sidx.begin() + stop, sidx.end());
      continue;
    }
    // Keep the larger buffers with the batch for its next use.
    specs.swap(sub);
    idx.swap(sidx);
    specs.clear();
    idx.clear();
    break;
  }
}

void SubscriberStore::stream(const StreamSource& source, StreamResult* out, bool resync) {
  BatchQueue bq;
  std::thread reader([&] { read_batches(bq, source); });
  while (std::unique_ptr<Batch> b = bq.pop()) {
    auto fail = [&](size_t index, const Status& st) { report_failure(*b, index, st, out); };
    for (auto& [i, st] : b->invalid) fail(i, st);
    const auto t0 = std::chrono::steady_clock::now();
    {
      std::unique_lock l(mu_);
      apply_specs(b->specs, b->idx, resync, fail, &out->applied);
    }
    out->apply_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bq.give_back(std::move(b));
  }
  bq.finish(&bq.abort);
  reader.join();
  std::sort(out->failures.begin(), out->failures.end(),
            [](const auto& a, const auto& b) { return a.index < b.index; });
}

}  // namespace xbng::agent
