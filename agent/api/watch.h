// WatchEvents streams on gRPC's callback API: each stream is a reactor fed
// by its EventHub watcher, with no thread of its own, so a client that never
// reads holds no thread. A stream whose queue overflows gives its slot back
// at once and ends with RESOURCE_EXHAUSTED; if a write to its client is still
// stuck kWatchCancelAfter later (the client reads nothing), the call is
// cancelled.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "telemetry/events.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

inline constexpr std::chrono::seconds kWatchCancelAfter{2};

class WatchStreams {
 public:
  using ToProto = std::function<void(const AgentEvent&, xbng::v1::Event*)>;
  WatchStreams(EventHub* hub, ToProto to_proto, uint64_t started_ns);

  // Concurrent streams (refused with RESOURCE_EXHAUSTED above) and events
  // queued per stream.
  void set_limits(size_t max_watchers, size_t queue) {
    max_watchers_ = max_watchers;
    queue_ = queue;
  }
  // The reactor of one WatchEvents call; it deletes itself when done.
  grpc::ServerWriteReactor<xbng::v1::Event>* open(grpc::CallbackServerContext* ctx);
  // Open streams end with UNAVAILABLE, new ones are refused with it.
  void shutdown();

 private:
  friend class WatchStream;
  EventHub* hub_;
  ToProto to_proto_;
  uint64_t started_ns_;
  std::atomic<size_t> max_watchers_{16}, queue_{EventHub::kDefaultQueue};
  std::atomic<bool> stopping_{false};
};

}  // namespace xbng::agent
