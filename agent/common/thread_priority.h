// Real-time scheduling of the threads that carry control frames (the punt
// RX thread, the relays' socket threads): on a loaded host a thread of the
// default policy that wakes for a frame may wait milliseconds for a CPU;
// at SCHED_FIFO it preempts every thread of the default policy at once.
// Thread names, and a mutex with priority inheritance for the locks those
// threads share with others.
#pragma once

#include <pthread.h>

#include <string>
#include <thread>

namespace xbng::agent {

// Runs `t` at SCHED_FIFO priority `priority` (1..99). Returns "" or the
// kernel's refusal (strerror: no CAP_SYS_NICE and too low an RLIMIT_RTPRIO).
std::string set_fifo_priority(std::thread& t, int priority);

// Names `t` for ps -L, top -H, perf and taskset: "xbng-" and at most 10
// more characters ("xbng-punt", "xbng-relay4").
void set_thread_name(std::thread& t, const char* name);

// A mutex with priority inheritance (PTHREAD_PRIO_INHERIT): a thread of the
// default policy holding it runs at the priority of the highest real-time
// thread waiting for it, until it unlocks. For the locks a real-time thread
// (punt.realtime_priority) shares with threads of the default policy: the
// holder, preempted by the host's other work, would otherwise keep the
// real-time thread waiting as long as its own wait for a CPU lasts.
// Satisfies Lockable (std::lock_guard, std::unique_lock).
class PiMutex {
 public:
  PiMutex();
  ~PiMutex();
  PiMutex(const PiMutex&) = delete;
  PiMutex& operator=(const PiMutex&) = delete;
  void lock();
  bool try_lock();
  void unlock();

 private:
  pthread_mutex_t m_;
};

}  // namespace xbng::agent
