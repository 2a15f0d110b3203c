// A thread that drains one BPF ring buffer (libbpf ring_buffer) and hands
// each record to a callback, on that thread. The XDP events and the punted
// control frames both arrive this way.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>

struct ring_buffer;

namespace xbng::agent {

class RingbufPoller {
 public:
  // Called on the poller's thread with each record as the ring holds it.
  using OnRecord = std::function<void(std::span<const uint8_t> record)>;
  // Called on the poller's thread after each poll (records handed or not).
  using OnDrained = std::function<void()>;
  // Opens the ring buffer `fd` and starts the thread. `what` names the ring
  // in errors ("punt ring buffer"), `thread_name` the thread ("xbng-punt").
  // Throws std::runtime_error.
  RingbufPoller(int fd, std::string what, const char* thread_name, OnRecord on_record,
                OnDrained on_drained = nullptr);
  // Stops the thread (within one poll interval) and closes the ring.
  ~RingbufPoller();
  // Runs the thread at SCHED_FIFO `priority`: "" or the kernel's refusal.
  std::string set_fifo_priority(int priority);
  RingbufPoller(const RingbufPoller&) = delete;
  RingbufPoller& operator=(const RingbufPoller&) = delete;

 private:
  static int on_sample(void* ctx, void* data, size_t size);
  std::string what_;
  OnRecord on_record_;
  OnDrained on_drained_;
  struct ring_buffer* rb_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace xbng::agent
