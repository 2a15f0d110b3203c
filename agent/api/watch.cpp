#include "api/watch.h"

#include <fmt/format.h>
#include <grpcpp/alarm.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace xbng::agent {

using grpc::Status;
using grpc::StatusCode;
namespace v1 = xbng::v1;

namespace {
// Events taken from the watcher's queue at a time (bounds the batch's memory).
constexpr size_t kBatch = 256;

// What the cancel alarms may reach: ctx is cleared in OnDone, so an alarm
// that fires while the stream ends touches nothing that is gone.
struct CancelTarget {
  std::mutex mu;
  grpc::CallbackServerContext* ctx = nullptr;
  // The connection's socket when gRPC got it as a descriptor (peer "fd:N",
  // plaintext connections handed over by the Listener), with its inode: a
  // descriptor number is only trusted while it names the same socket.
  int fd = -1;
  ino_t ino = 0;
};

void find_socket(const std::string& peer, CancelTarget* t) {
  int fd = -1;
  if (std::sscanf(peer.c_str(), "fd:%d", &fd) != 1 || fd < 0) return;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return;
  t->fd = fd;
  t->ino = st.st_ino;
}
}  // namespace

// One WatchEvents call. Writes run one at a time (the callback API's rule):
// the next starts from OnWriteDone, or from the watcher's ready callback on
// the publisher's thread when the stream was idle. Finish is called once, when
// no write is outstanding; OnDone deletes the reactor.
class WatchStream final : public grpc::ServerWriteReactor<v1::Event> {
 public:
  WatchStream(WatchStreams* owner, grpc::CallbackServerContext* ctx)
      : owner_(owner), peer_(ctx->peer()), target_(std::make_shared<CancelTarget>()) {
    target_->ctx = ctx;
    find_socket(peer_, target_.get());
  }

  void start() {
    if (owner_->stopping_) return end(Status(StatusCode::UNAVAILABLE, "xbngd is shutting down"));
    w_ = owner_->hub_->subscribe(owner_->queue_, owner_->max_watchers_);
    if (!w_)
      return end(Status(StatusCode::RESOURCE_EXHAUSTED,
                        fmt::format("{} WatchEvents streams are open, the maximum "
                                    "(api.max_watchers): retry later",
                                    owner_->max_watchers_.load())));
    AgentEvent started;
    started.type = EventType::kAgentStarted;
    started.timestamp_unix_ns = owner_->started_ns_;
    owner_->to_proto_(started, &out_);
    writing_ = true;  // before the first wake can look
    w_->set_ready([this] { wake(); });
    StartWrite(&out_);
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard l(mu_);
      writing_ = false;
      if (!ok) broken_ = true;
    }
    pump();
  }

  void OnCancel() override {
    {
      std::lock_guard l(mu_);
      broken_ = true;
    }
    release();
    pump();
  }

  void OnDone() override {
    {
      std::lock_guard l(target_->mu);
      target_->ctx = nullptr;
    }
    if (w_) w_->set_ready(nullptr);  // waits out a wake under way
    release();
    if (overflow_seen_)  // no wake runs any more: safe to read without mu_
      spdlog::info(
          "WatchEvents stream of {} closed {:.1f} s after its queue overflowed", peer_,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - overflow_at_).count());
    delete this;
  }

 private:
  // The watcher's ready callback (publisher's thread, outside the hub's lock).
  void wake() {
    Overflow o;
    {
      std::lock_guard l(mu_);
      o = see_overflow();
    }
    o.act(this);
    pump();
  }

  // What the first sight of an overflow (or of the shutdown) calls for, once
  // out of mu_: the warning, the slot back, the cancel alarms.
  struct Overflow {
    bool first = false, arm = false;
    void act(WatchStream* s) const {
      if (first) {
        spdlog::warn(
            "WatchEvents stream of {} ended: its event queue overflowed "
            "(api.watcher_queue {}): the client reads too slowly or stopped reading",
            s->peer_, s->owner_->queue_.load());
        s->release();  // its slot and its count, now: the stream is over
      }
      if (arm) s->arm_cancel();
    }
  };
  // Under mu_ (wake and pump may each see the overflow first).
  Overflow see_overflow() {
    Overflow o;
    const bool overflowed = w_->overflowed();
    if (overflowed && !overflow_seen_) {
      overflow_seen_ = o.first = true;
      overflow_at_ = std::chrono::steady_clock::now();
      next_ = 0;
      std::vector<AgentEvent>().swap(batch_);  // not to be written any more
    }
    // Shutting down: a stream whose client reads nothing must not hold the
    // server's shutdown up either.
    if ((overflowed || owner_->stopping_) && !armed_) armed_ = o.arm = true;
    return o;
  }

  // Starts the next write, or ends the stream; nothing while a write is out.
  void pump() {
    std::unique_lock l(mu_);
    if (writing_ || ended_) return;
    const Overflow o = see_overflow();
    std::optional<Status> st;
    if (broken_) {
      st = Status::OK;  // the client went or cancelled: nobody reads the status
    } else if (w_->overflowed()) {
      st = Status(StatusCode::RESOURCE_EXHAUSTED,
                  fmt::format("event queue overflow: this watcher fell behind and {} events "
                              "were dropped; list the subscribers again and re-watch",
                              w_->dropped()));
    } else if (owner_->stopping_) {
      st = Status(StatusCode::UNAVAILABLE, "xbngd is shutting down");
    } else {
      if (next_ == batch_.size()) {
        batch_.clear();
        next_ = 0;
        w_->take(&batch_, kBatch);
        if (batch_.empty()) return;  // idle: the next event wakes the stream
      }
      out_.Clear();
      owner_->to_proto_(batch_[next_++], &out_);
      writing_ = true;
      l.unlock();
      StartWrite(&out_);
      return;
    }
    l.unlock();
    o.act(this);
    end(std::move(*st));
  }

  void end(Status st) {
    {
      std::lock_guard l(mu_);
      if (ended_) return;
      ended_ = true;
      next_ = 0;
      std::vector<AgentEvent>().swap(batch_);
    }
    release();
    Finish(std::move(st));
  }

  // Gives the watcher's slot back (once).
  void release() {
    if (w_ && !released_.exchange(true)) owner_->hub_->unsubscribe(w_);
  }

  // The queue overflowed, or xbngd stops. If the stream has not ended
  // kWatchCancelAfter later (a write, or the status, waits on a client that
  // reads nothing), cancel the call: that fails what waits in gRPC's stream
  // buffers. If it still has
  // not ended twice as late, the client does not read its socket at all and
  // the write is stuck in the connection itself, which no cancel undoes:
  // shut the connection down (gRPC then closes it and ends its calls).
  void arm_cancel() {
    const auto now = std::chrono::system_clock::now();
    cancel_alarm_ = std::make_unique<grpc::Alarm>();
    cancel_alarm_->Set(now + kWatchCancelAfter, [t = target_, peer = peer_](bool fired) {
      std::lock_guard l(t->mu);
      if (!fired || !t->ctx) return;
      spdlog::warn("WatchEvents stream of {} cancelled: its client stopped reading", peer);
      t->ctx->TryCancel();
    });
    close_alarm_ = std::make_unique<grpc::Alarm>();
    close_alarm_->Set(now + 2 * kWatchCancelAfter, [t = target_, peer = peer_](bool fired) {
      std::lock_guard l(t->mu);
      if (!fired || !t->ctx || t->fd < 0) return;
      // The call is not done, so its connection is still open: the number
      // still names it, unless gRPC closed it a moment ago (then the inode
      // differs).
      struct stat st {};
      if (fstat(t->fd, &st) != 0 || st.st_ino != t->ino) return;
      spdlog::warn(
          "WatchEvents stream of {}: the client reads nothing from its connection; "
          "closing the connection",
          peer);
      shutdown(t->fd, SHUT_RDWR);
    });
  }

  WatchStreams* const owner_;
  const std::string peer_;
  const std::shared_ptr<CancelTarget> target_;
  std::shared_ptr<Watcher> w_;
  std::atomic<bool> released_{false};
  std::unique_ptr<grpc::Alarm> cancel_alarm_, close_alarm_;  // set once, by wake
  std::mutex mu_;
  bool writing_ = false;                               // under mu_: a StartWrite awaits OnWriteDone
  bool broken_ = false;                                // under mu_: cancelled, or a write failed
  bool ended_ = false;                                 // under mu_: Finish called
  bool overflow_seen_ = false;                         // under mu_
  bool armed_ = false;                                 // under mu_: the cancel alarms are set
  std::chrono::steady_clock::time_point overflow_at_;  // under mu_
  std::vector<AgentEvent> batch_;                      // under mu_: taken, not yet written
  size_t next_ = 0;                                    // under mu_
  v1::Event out_;                                      // the message being written
};

WatchStreams::WatchStreams(EventHub* hub, ToProto to_proto, uint64_t started_ns)
    : hub_(hub), to_proto_(std::move(to_proto)), started_ns_(started_ns) {}

grpc::ServerWriteReactor<v1::Event>* WatchStreams::open(grpc::CallbackServerContext* ctx) {
  auto* s = new WatchStream(this, ctx);
  s->start();
  return s;
}

void WatchStreams::shutdown() {
  stopping_ = true;
  hub_->wake_all();
}

}  // namespace xbng::agent
