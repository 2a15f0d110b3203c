// An etcd in memory for the unit tests of etcd's users (fleet/kv.h): keys
// with their create revision and lease, leases that expire, transactions
// (every operation applied), range requests answered with limit, count and
// a pinned revision that can fall behind compaction, and a watch that sends
// the queued events once and then stays up until cancelled. A connection
// can be cut off (every call UNAVAILABLE), as a member cut off from etcd is.
#pragma once

#include <absl/status/status.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fleet/kv.h"

namespace xbng::test {

struct EtcdDouble {
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string value;
    int64_t lease = 0, create = 0;
  };

  std::mutex mu;
  std::condition_variable cv;  // notified after each transaction
  std::map<std::string, Entry> kv;
  int64_t rev = 1;                              // the revision ranges and the watch answer at
  std::map<int64_t, Clock::time_point> leases;  // id -> expiry
  std::map<int64_t, int64_t> ttl;
  int64_t next_lease = 100;

  std::vector<agent::fleet::RangeRequest> seen;  // every range request, in order
  std::vector<std::vector<agent::fleet::TxnOp>> txns;
  std::vector<agent::fleet::WatchEvent> events;  // the next watch sends them once
  int compact_at = 0;  // the compact_at-th request at a pinned revision fails as compacted
  int pinned = 0;
  // How long each range takes (requests then overlap when readers run at
  // once), and how many were in flight together at most.
  std::chrono::milliseconds range_time{0};
  int in_flight = 0, max_in_flight = 0;

  // A key put outside any lease; its create revision is its rank in the
  // keys put this way.
  void set(const std::string& key, std::string value) {
    auto& e = kv[key];
    if (!e.create) e.create = static_cast<int64_t>(kv.size());
    e.value = std::move(value);
  }
  bool has(const std::string& key) {
    std::lock_guard l(mu);
    return kv.count(key) > 0;
  }
  std::string value(const std::string& key) {
    std::lock_guard l(mu);
    auto it = kv.find(key);
    return it == kv.end() ? std::string() : it->second.value;
  }

  // Drops the leases that have expired, with their keys (under mu).
  void expire() {
    const auto now = Clock::now();
    for (auto it = leases.begin(); it != leases.end();) {
      if (it->second <= now) {
        for (auto k = kv.begin(); k != kv.end();)
          k = k->second.lease == it->first ? kv.erase(k) : std::next(k);
        it = leases.erase(it);
      } else {
        ++it;
      }
    }
  }
};

// Sends a created response at `rev`, then `events` once (when given), then
// waits until cancelled.
class EtcdDoubleWatch final : public agent::fleet::WatchStream {
 public:
  EtcdDoubleWatch(int64_t rev, std::vector<agent::fleet::WatchEvent> events)
      : rev_(rev), events_(std::move(events)) {}
  void create(const std::string&, const std::string&, int64_t) override {}
  bool read(agent::fleet::WatchResponse* out) override {
    std::unique_lock l(mu_);
    if (!created_) {
      created_ = true;
      *out = agent::fleet::WatchResponse{};
      out->created = true;
      out->header.revision = rev_;
      return true;
    }
    if (!events_.empty()) {
      *out = agent::fleet::WatchResponse{};
      out->header.revision = rev_ + 1;
      out->events.swap(events_);
      return true;
    }
    cv_.wait(l, [&] { return cancelled_; });
    return false;
  }
  bool request_progress() override { return false; }
  void cancel() override {
    std::lock_guard l(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  absl::Status finish() override { return absl::CancelledError("cancelled"); }

 private:
  int64_t rev_;
  std::vector<agent::fleet::WatchEvent> events_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool created_ = false, cancelled_ = false;
};

class EtcdDoubleConn final : public agent::fleet::KvConn {
 public:
  // `up` (optional): while false, every call fails UNAVAILABLE.
  explicit EtcdDoubleConn(EtcdDouble* e, const std::atomic<bool>* up = nullptr) : e_(e), up_(up) {}
  const std::string& endpoint() const override { return ep_; }

  absl::Status range(const agent::fleet::RangeRequest& rq, std::chrono::milliseconds,
                     agent::fleet::RangeResponse* out) override {
    if (cut_off()) return down();
    {
      std::lock_guard l(e_->mu);
      e_->seen.push_back(rq);
      e_->max_in_flight = std::max(e_->max_in_flight, ++e_->in_flight);
    }
    if (e_->range_time.count()) std::this_thread::sleep_for(e_->range_time);
    std::lock_guard l(e_->mu);
    --e_->in_flight;
    if (rq.revision && ++e_->pinned == e_->compact_at)
      return absl::OutOfRangeError("etcdserver: mvcc: required revision has been compacted");
    e_->expire();
    *out = agent::fleet::RangeResponse{};
    out->header.cluster_id = 7;
    out->header.revision = e_->rev;
    for (auto it = e_->kv.lower_bound(rq.key); it != e_->kv.end(); ++it) {
      if (rq.range_end.empty() ? it->first != rq.key : it->first >= rq.range_end) break;
      if (!rq.count_only && (!rq.limit || out->count < rq.limit)) {
        agent::fleet::KeyValue o;
        o.key = it->first;
        o.value = it->second.value;
        o.lease = it->second.lease;
        o.create_revision = o.mod_revision = it->second.create;
        o.version = 1;
        out->kvs.push_back(std::move(o));
      }
      ++out->count;
    }
    out->more = rq.limit && out->count > rq.limit;
    return absl::OkStatus();
  }

  absl::Status put(const std::string& key, const std::string& value, int64_t lease,
                   std::chrono::milliseconds) override {
    if (cut_off()) return down();
    std::lock_guard l(e_->mu);
    e_->expire();
    if (lease && !e_->leases.count(lease)) return absl::NotFoundError("lease not found");
    auto& en = e_->kv[key];
    if (!en.create) en.create = ++e_->rev;
    en.value = value;
    en.lease = lease;
    return absl::OkStatus();
  }

  absl::Status txn(const std::vector<agent::fleet::TxnOp>& ops,
                   std::chrono::milliseconds) override {
    if (cut_off()) return down();
    std::lock_guard l(e_->mu);
    for (const auto& op : ops) {
      if (op.type == agent::fleet::TxnOp::Type::kPut) {
        auto& en = e_->kv[op.key];
        if (!en.create) en.create = e_->rev + 1;
        en.value = op.value;
      } else {
        e_->kv.erase(op.key);
      }
    }
    ++e_->rev;
    e_->txns.push_back(ops);
    e_->cv.notify_all();
    return absl::OkStatus();
  }

  absl::Status create_if_absent(const std::string& key, const std::string& value, int64_t lease,
                                std::chrono::milliseconds, bool* created) override {
    if (cut_off()) return down();
    std::lock_guard l(e_->mu);
    e_->expire();
    *created = !e_->kv.count(key) && e_->leases.count(lease);
    if (*created) e_->kv[key] = {value, lease, ++e_->rev};
    return absl::OkStatus();
  }

  absl::Status lease_grant(int64_t ttl, std::chrono::milliseconds, int64_t* id) override {
    if (cut_off()) return down();
    std::lock_guard l(e_->mu);
    *id = ++e_->next_lease;
    e_->ttl[*id] = ttl;
    e_->leases[*id] = EtcdDouble::Clock::now() + std::chrono::seconds(ttl);
    return absl::OkStatus();
  }

  absl::Status lease_keepalive(int64_t id, std::chrono::milliseconds, int64_t* left) override {
    if (cut_off()) return down();
    std::lock_guard l(e_->mu);
    e_->expire();
    auto it = e_->leases.find(id);
    if (it == e_->leases.end()) {
      *left = 0;
      return absl::OkStatus();
    }
    it->second = EtcdDouble::Clock::now() + std::chrono::seconds(e_->ttl[id]);
    *left = e_->ttl[id];
    return absl::OkStatus();
  }

  absl::Status lease_revoke(int64_t id, std::chrono::milliseconds) override {
    if (cut_off()) return down();
    std::lock_guard l(e_->mu);
    if (e_->leases.count(id)) e_->leases[id] = EtcdDouble::Clock::now();
    e_->expire();
    return absl::OkStatus();
  }

  absl::Status watch(std::unique_ptr<agent::fleet::WatchStream>* out) override {
    if (cut_off()) return down();
    std::lock_guard l(e_->mu);
    *out = std::make_unique<EtcdDoubleWatch>(e_->rev, std::exchange(e_->events, {}));
    return absl::OkStatus();
  }

 private:
  bool cut_off() const { return up_ && !*up_; }
  static absl::Status down() { return absl::UnavailableError("cut off"); }

  EtcdDouble* e_;
  const std::atomic<bool>* up_;
  std::string ep_ = "double";
};

// One member, always the same connection.
class EtcdDoubleKv final : public agent::fleet::Kv {
 public:
  explicit EtcdDoubleKv(EtcdDouble* e, const std::atomic<bool>* up = nullptr)
      : c_(std::make_shared<EtcdDoubleConn>(e, up)) {}
  std::shared_ptr<agent::fleet::KvConn> conn() override { return c_; }
  void failed(const std::shared_ptr<agent::fleet::KvConn>&, const absl::Status&) override {}

 private:
  std::shared_ptr<EtcdDoubleConn> c_;
};

}  // namespace xbng::test
