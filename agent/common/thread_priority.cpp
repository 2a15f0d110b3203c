#include "common/thread_priority.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>
#include <system_error>

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

namespace xbng::agent {

PiMutex::PiMutex() {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
  if (int e = pthread_mutex_init(&m_, &a); e != 0)
    throw std::system_error(e, std::generic_category(), "pthread_mutex_init");
  pthread_mutexattr_destroy(&a);
}

PiMutex::~PiMutex() { pthread_mutex_destroy(&m_); }

void PiMutex::lock() {
  if (int e = pthread_mutex_lock(&m_); e != 0)
    throw std::system_error(e, std::generic_category(), "pthread_mutex_lock");
}

bool PiMutex::try_lock() { return pthread_mutex_trylock(&m_) == 0; }

void PiMutex::unlock() { pthread_mutex_unlock(&m_); }

}  // namespace xbng::agent
