// Real-time scheduling of the threads that carry control frames (the punt
// RX thread, the relays' socket threads): on a loaded host a thread of the
// default policy that wakes for a frame may wait milliseconds for a CPU;
// at SCHED_FIFO it preempts every thread of the default policy at once.
#pragma once

#include <string>
#include <thread>

namespace xbng::agent {

// Runs `t` at SCHED_FIFO priority `priority` (1..99). Returns "" or the
// kernel's refusal (strerror: no CAP_SYS_NICE and too low an RLIMIT_RTPRIO).
std::string set_fifo_priority(std::thread& t, int priority);

// Names `t` for ps -L, top -H, perf and taskset: "xbng-" and at most 10
// more characters ("xbng-punt", "xbng-relay4").
void set_thread_name(std::thread& t, const char* name);

}  // namespace xbng::agent
