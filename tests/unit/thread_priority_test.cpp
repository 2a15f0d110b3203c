// agent/common/thread_priority: SCHED_FIFO for a thread, thread names, and
// the mutex with priority inheritance (a holder of the default policy runs
// at the priority of a real-time waiter).
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "common/thread_priority.h"

namespace xbng::agent {
namespace {

pid_t gettid_() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// Field 18 of /proc/<tid>/stat: 20 + nice for the default policy, -1 - the
// real-time priority otherwise (the effective one: boosts included).
int kernel_priority(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(f, line);
  std::istringstream is(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 18 && is >> field; ++i) {
  }
  return std::stoi(field);
}

std::string comm_of(std::thread& t) {
  char name[16] = {};
  pthread_getname_np(t.native_handle(), name, sizeof name);
  return name;
}

TEST(ThreadPriority, NamesAThread) {
  std::atomic<bool> stop{false};
  std::thread t([&] {
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  set_thread_name(t, "xbng-test");
  EXPECT_EQ(comm_of(t), "xbng-test");
  stop = true;
  t.join();
}

TEST(ThreadPriority, PiMutexIsAMutex) {
  PiMutex m;
  {
    std::lock_guard g(m);
    bool got = true;
    std::thread([&] { got = m.try_lock(); }).join();
    EXPECT_FALSE(got);
  }
  bool got = false;
  std::thread([&] {
    got = m.try_lock();
    if (got) m.unlock();
  }).join();
  EXPECT_TRUE(got);
}

TEST(ThreadPriority, PiMutexBoostsTheHolder) {
  PiMutex m;
  const pid_t self = gettid_();
  const int normal = kernel_priority(self);
  ASSERT_GE(normal, 0) << "this test runs at the default policy";
  std::unique_lock hold(m);
  std::atomic<bool> started{false};
  std::thread waiter([&] {
    started = true;
    std::lock_guard g(m);  // blocks until the holder unlocks
  });
  while (!started) std::this_thread::yield();
  if (std::string e = set_fifo_priority(waiter, 10); !e.empty()) {
    hold.unlock();
    waiter.join();
    GTEST_SKIP() << "SCHED_FIFO refused here: " << e;
  }
  // The holder runs at the waiter's priority while it waits (-1 - 10).
  int boosted = normal;
  for (int i = 0; i < 2000 && boosted != -11; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    boosted = kernel_priority(self);
  }
  EXPECT_EQ(boosted, -11);
  hold.unlock();
  waiter.join();
  EXPECT_EQ(kernel_priority(self), normal);  // the boost ends with the lock
}

}  // namespace
}  // namespace xbng::agent
