#include "telemetry/events.h"

#include <absl/container/inlined_vector.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace xbng::agent {

uint64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

bool Watcher::push(const AgentEvent& e) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (q_.size() >= capacity_ || overflowed_) {
      // Fell behind: the stream ends with RESOURCE_EXHAUSTED; what it
      // queued is of no use any more, free it now.
      ++dropped_;
      if (overflowed_) return false;
      overflowed_ = true;
      std::deque<AgentEvent>().swap(q_);
      return true;
    }
    was_empty = q_.empty();
    q_.push_back(e);
  }
  cv_.notify_one();
  return was_empty;
}

bool Watcher::pop(std::vector<AgentEvent>* out, int timeout_ms) {
  std::unique_lock<std::mutex> l(mu_);
  if (q_.empty())
    cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return !q_.empty(); });
  if (q_.empty()) return false;
  out->assign(q_.begin(), q_.end());
  q_.clear();
  return true;
}

void Watcher::take(std::vector<AgentEvent>* out, size_t max) {
  std::lock_guard<std::mutex> l(mu_);
  const auto end = q_.begin() + static_cast<std::ptrdiff_t>(std::min(max, q_.size()));
  out->insert(out->end(), std::make_move_iterator(q_.begin()), std::make_move_iterator(end));
  q_.erase(q_.begin(), end);
}

void Watcher::set_ready(std::function<void()> ready) {
  std::lock_guard<std::mutex> l(ready_mu_);
  ready_ = std::move(ready);
}

void Watcher::notify() {
  std::lock_guard<std::mutex> l(ready_mu_);
  if (ready_) ready_();
}

std::shared_ptr<Watcher> EventHub::subscribe(size_t capacity, size_t max_watchers) {
  auto w = std::make_shared<Watcher>(capacity);
  std::lock_guard<std::mutex> l(mu_);
  if (watchers_.size() >= max_watchers) {
    ++refused_total_;
    return nullptr;
  }
  watchers_.push_back(w);
  nwatchers_ = static_cast<int>(watchers_.size());
  return w;
}

void EventHub::unsubscribe(const std::shared_ptr<Watcher>& w) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = std::find(watchers_.begin(), watchers_.end(), w);
  if (it == watchers_.end()) return;
  if (w->overflowed_) ++overflowed_total_;
  watchers_.erase(it);
  nwatchers_ = static_cast<int>(watchers_.size());
}

void EventHub::publish(const AgentEvent& e) {
  if (!has_watchers()) return;
  // Ready callbacks run outside the lock: they start gRPC writes, and a
  // stream that ends unsubscribes.
  absl::InlinedVector<std::shared_ptr<Watcher>, 8> ready;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& w : watchers_)
      if (w->push(e)) ready.push_back(w);
  }
  for (auto& w : ready) w->notify();
}

void EventHub::wake_all() {
  std::vector<std::shared_ptr<Watcher>> all;
  {
    std::lock_guard<std::mutex> l(mu_);
    all = watchers_;
  }
  for (auto& w : all) w->notify();
}

RingbufReader::RingbufReader(int ringbuf_fd, EventHub* hub,
                             std::function<void(const AgentEvent&)> on_event)
    : hub_(hub), on_event_(std::move(on_event)) {
  timespec mono{}, real{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  mono_to_unix_ns_ = (int64_t(real.tv_sec) - int64_t(mono.tv_sec)) * 1000000000ll +
                     (int64_t(real.tv_nsec) - int64_t(mono.tv_nsec));
  poller_.emplace(ringbuf_fd, "events ring buffer", "xbng-events",
                  [this](std::span<const uint8_t> r) { on_record(r); });
}

RingbufReader::~RingbufReader() = default;

void RingbufReader::on_record(std::span<const uint8_t> record) {
  if (record.size() < sizeof(struct xbng_event)) return;
  struct xbng_event ev;
  std::memcpy(&ev, record.data(), sizeof ev);
  AgentEvent e;
  switch (ev.type) {
    case XBNG_EVENT_UNKNOWN_SUBSCRIBER:
      e.type = EventType::kUnknownSubscriber;
      break;
    case XBNG_EVENT_MAC_LEARNED:
      e.type = EventType::kMacLearned;
      break;
    case XBNG_EVENT_MAC_CHANGED:
      e.type = EventType::kMacChanged;
      break;
    case XBNG_EVENT_MAC_CONFLICT:
      e.type = EventType::kMacConflict;
      break;
    default:
      return;
  }
  e.key.ifindex = ev.ifindex;
  e.key.outer_vid = ev.outer_vid;
  e.key.inner_vid = ev.inner_vid;
  e.has_mac = true;
  std::memcpy(e.mac.data(), ev.mac, 6);
  e.timestamp_unix_ns = ev.timestamp_ns ? ev.timestamp_ns + mono_to_unix_ns_ : unix_now_ns();
  received_++;
  if (on_event_) on_event_(e);
  hub_->publish(e);
}

}  // namespace xbng::agent
