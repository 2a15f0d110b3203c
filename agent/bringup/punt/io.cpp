#include "bringup/punt/io.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "xbng/abi.h"
#include "bringup/punt/counters.h"

namespace xbng::agent::punt {

PuntTx::PuntTx(const std::vector<uint32_t>& ifindexes) {
  for (uint32_t ifx : ifindexes) {
    // Protocol 0: the socket sends only, nothing is ever queued to it.
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      for (auto& [i, f] : fds_) close(f);
      throw std::runtime_error(
          fmt::format("punt TX: AF_PACKET socket: {} (needs CAP_NET_RAW)", std::strerror(errno)));
    }
    int one = 1;
    // Straight to the driver: control replies need no queueing discipline.
    setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_ifindex = static_cast<int>(ifx);
    sll.sll_protocol = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
      const int err = errno;
      close(fd);
      for (auto& [i, f] : fds_) close(f);
      throw std::runtime_error(
          fmt::format("punt TX: binding to ifindex {}: {}", ifx, std::strerror(err)));
    }
    fds_[ifx] = fd;
  }
}

PuntTx::~PuntTx() {
  for (auto& [i, f] : fds_) close(f);
}

bool PuntTx::send(uint32_t ifindex, std::span<const uint8_t> frame) {
  auto it = fds_.find(ifindex);
  if (it == fds_.end() || ::send(it->second, frame.data(), frame.size(), 0) < 0) {
    count(AgentReason::kPUNT_TX_ERROR);
    return false;
  }
  count(AgentReason::kPUNT_TX);
  return true;
}

PuntRx::PuntRx(int fd, Handler handler)
    : handler_(std::move(handler)),
      poller_(fd, "punt ring buffer", "xbng-punt",
              [this](std::span<const uint8_t> r) { on_record(r); }) {}

PuntRx::~PuntRx() = default;

void PuntRx::on_record(std::span<const uint8_t> record) {
  received_.fetch_add(1, std::memory_order_relaxed);
  count(AgentReason::kPUNT_RECEIVED);
  const auto* r = reinterpret_cast<const struct xbng_punt_record*>(record.data());
  if (record.size() < sizeof(*r) || r->len == 0 || r->len > XBNG_PUNT_MAX_FRAME) {
    count(AgentReason::kPUNT_BAD_RECORD);
    return;
  }
  PuntedFrame f;
  f.kind = r->kind;
  f.ifindex = r->ifindex;
  f.outer_vid = r->outer_vid;
  f.inner_vid = r->inner_vid;
  f.timestamp_ns = r->timestamp_ns;
  f.frame = std::span<const uint8_t>(r->frame, r->len);
  try {
    handler_(f);
  } catch (const std::exception& e) {
    spdlog::error("punt handler: {}", e.what());
  }
}

}  // namespace xbng::agent::punt
