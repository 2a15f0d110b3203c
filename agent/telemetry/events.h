// EventHub: fan-out of agent events to WatchEvents streams, with a bounded
// queue per watcher; RingbufReader: turns the XDP `events` ring buffer into
// hub events on a thread of its own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/ringbuf_poller.h"
#include "store/subscriber.h"

namespace xbng::agent {

// What an event reports (the api/ room names each as an xbng.v1.Event.Type).
enum class EventType {
  kUnspecified,
  kAgentStarted,       // first event of every WatchEvents stream
  kUnknownSubscriber,  // the fast path saw a VLAN pair no subscriber has
  kSubscriberAdded,
  kSubscriberRemoved,
  kSubscriberUpdated,
  kMacLearned,
  kMacChanged,     // MAC policy "follow" moved the subscriber to `mac`
  kMacConflict,    // frames from `mac`, not the subscriber's (rate-limited)
  kLeaseBound,     // a DHCP(v6) client bound its address/prefixes
  kLeaseRenewed,   // ... extended them
  kLeaseReleased,  // ... gave them back (RELEASE, DECLINE)
  kLeaseExpired,   // ... let them run out
};

struct AgentEvent {
  EventType type = EventType::kUnspecified;
  SubKey key{};
  bool has_mac = false;
  Mac mac{};
  uint64_t timestamp_unix_ns = 0;
  // LEASE_* events (DHCP/DHCPv6 leases served by xbngd).
  int lease_family = 0;  // 4 or 6
  bool lease_bound = false;
  uint64_t lease_expires_unix = 0;
  std::string lease_address;
  std::vector<std::string> lease_prefixes;
};

uint64_t unix_now_ns();

// One subscriber of the hub: a bounded queue. A watcher that falls
// `capacity` events behind is marked overflowed and its queue freed: what it
// missed cannot be replayed, its stream ends.
class Watcher {
 public:
  explicit Watcher(size_t capacity) : capacity_(capacity) {}
  // Waits up to timeout_ms for events; returns false when none arrived.
  bool pop(std::vector<AgentEvent>* out, int timeout_ms);
  // Moves up to `max` queued events to the end of *out; never waits.
  void take(std::vector<AgentEvent>* out, size_t max);
  bool overflowed() const { return overflowed_.load(); }
  uint64_t dropped() const { return dropped_.load(); }
  // Called, on the publisher's thread and outside the hub's lock, when the
  // queue stops being empty, when it overflows and on EventHub::wake_all.
  // Must not block. set_ready(nullptr) returns once no call is under way.
  void set_ready(std::function<void()> ready);

 private:
  friend class EventHub;
  // True when the ready callback is due (empty -> not empty, overflow).
  bool push(const AgentEvent& e);
  void notify();
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<AgentEvent> q_;
  std::atomic<bool> overflowed_{false};
  std::atomic<uint64_t> dropped_{0};
  std::mutex ready_mu_;
  std::function<void()> ready_;  // under ready_mu_
};

class EventHub {
 public:
  static constexpr size_t kDefaultQueue = 65536;
  // Null when `max_watchers` are subscribed already (counted as refused).
  std::shared_ptr<Watcher> subscribe(size_t capacity = kDefaultQueue,
                                     size_t max_watchers = SIZE_MAX);
  // Frees the watcher's slot; one that overflowed is counted as disconnected.
  void unsubscribe(const std::shared_ptr<Watcher>& w);
  bool has_watchers() const { return nwatchers_.load(std::memory_order_relaxed) > 0; }
  void publish(const AgentEvent& e);
  // Calls every watcher's ready callback (shutdown: streams see it and end).
  void wake_all();

  size_t watchers() const { return static_cast<size_t>(nwatchers_.load()); }
  uint64_t overflowed_total() const { return overflowed_total_.load(); }
  uint64_t refused_total() const { return refused_total_.load(); }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<Watcher>> watchers_;
  std::atomic<int> nwatchers_{0};
  std::atomic<uint64_t> overflowed_total_{0}, refused_total_{0};
};

class RingbufReader {
 public:
  // on_event (optional) sees every event before the hub (e.g. a MAC
  // moved under policy "follow" must reach the routes).
  RingbufReader(int ringbuf_fd, EventHub* hub,
                std::function<void(const AgentEvent&)> on_event = nullptr);  // throws
  ~RingbufReader();
  uint64_t received() const { return received_.load(); }

 private:
  void on_record(std::span<const uint8_t> record);
  EventHub* hub_;
  std::function<void(const AgentEvent&)> on_event_;
  std::atomic<uint64_t> received_{0};
  int64_t mono_to_unix_ns_ = 0;
  std::optional<RingbufPoller> poller_;  // last: stopped before the rest goes
};

}  // namespace xbng::agent
