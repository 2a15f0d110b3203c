#include "dataplane/ringbuf_poller.h"

#include "common/thread_priority.h"

#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace xbng::agent {

namespace {
constexpr int kPollMs = 200;  // how long a stop request may wait
}  // namespace

RingbufPoller::RingbufPoller(int fd, std::string what, const char* thread_name, OnRecord on_record,
                             OnDrained on_drained)
    : what_(std::move(what)), on_record_(std::move(on_record)), on_drained_(std::move(on_drained)) {
  rb_ = ring_buffer__new(fd, &RingbufPoller::on_sample, this, nullptr);
  if (!rb_)
    throw std::runtime_error(fmt::format("{}: cannot open: {}", what_, std::strerror(errno)));
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      int rc = ring_buffer__poll(rb_, kPollMs);
      if (on_drained_) on_drained_();  // after every poll: even a failed one may have handed some
      if (rc < 0 && rc != -EINTR) {
        spdlog::error("{}: poll failed: {}", what_, std::strerror(-rc));
        break;
      }
    }
  });
  set_thread_name(thread_, thread_name);
}

RingbufPoller::~RingbufPoller() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  ring_buffer__free(rb_);
}

std::string RingbufPoller::set_fifo_priority(int priority) {
  return agent::set_fifo_priority(thread_, priority);
}

int RingbufPoller::on_sample(void* ctx, void* data, size_t size) {
  auto* self = static_cast<RingbufPoller*>(ctx);
  self->on_record_(std::span<const uint8_t>(static_cast<const uint8_t*>(data), size));
  return 0;
}

}  // namespace xbng::agent
