#include "common/thread_priority.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>

namespace xbng::agent {

std::string set_fifo_priority(std::thread& t, int priority) {
  if (!t.joinable()) return "no thread";
  sched_param p{};
  p.sched_priority = priority;
  if (int e = pthread_setschedparam(t.native_handle(), SCHED_FIFO, &p); e != 0)
    return std::strerror(e);
  return "";
}

void set_thread_name(std::thread& t, const char* name) {
  if (t.joinable()) pthread_setname_np(t.native_handle(), name);
}

}  // namespace xbng::agent
