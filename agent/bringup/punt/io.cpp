#include "bringup/punt/io.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/uio.h>
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

namespace {

// The replies queued by this thread's open batch (PuntTx::Batch). The
// buffers keep their capacity from one batch to the next.
struct Pending {
  const PuntTx* owner = nullptr;  // the PuntTx whose batch is open, if any
  size_t n = 0;
  uint32_t ifindex[PuntTx::kBatchMax];
  std::vector<uint8_t> frame[PuntTx::kBatchMax];
};
thread_local Pending t_pending;

}  // namespace

void PuntTx::begin_batch() {
  t_pending.owner = this;
  t_pending.n = 0;
}

void PuntTx::end_batch() {
  if (t_pending.owner != this) return;
  flush();
  t_pending.owner = nullptr;
}

// One sendmmsg per port for what this thread queued; a frame the kernel
// refused counts as punt_tx_error, as an immediate send would.
void PuntTx::flush() {
  Pending& p = t_pending;
  mmsghdr msgs[kBatchMax];
  iovec iov[kBatchMax];
  bool done[kBatchMax] = {};
  for (size_t i = 0; i < p.n; ++i) {
    if (done[i]) continue;
    const uint32_t ifx = p.ifindex[i];
    unsigned m = 0;
    for (size_t j = i; j < p.n; ++j) {
      if (done[j] || p.ifindex[j] != ifx) continue;
      done[j] = true;
      iov[m] = {p.frame[j].data(), p.frame[j].size()};
      msgs[m] = {};
      msgs[m].msg_hdr.msg_iov = &iov[m];
      msgs[m].msg_hdr.msg_iovlen = 1;
      ++m;
    }
    auto it = fds_.find(ifx);
    unsigned sent = 0, failed = 0;
    if (it == fds_.end()) failed = m;
    // sendmmsg stops at the first frame the kernel refuses (an error when it
    // is the first): that one is skipped, the rest go on.
    while (sent + failed < m) {
      int r = sendmmsg(it->second, msgs + sent + failed, m - sent - failed, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ++failed;
        continue;
      }
      sent += static_cast<unsigned>(r);
    }
    if (sent) count(AgentReason::kPUNT_TX, sent);
    if (failed) count(AgentReason::kPUNT_TX_ERROR, failed);
  }
  p.n = 0;
}

bool PuntTx::send(uint32_t ifindex, std::span<const uint8_t> frame) {
  auto it = fds_.find(ifindex);
  if (it == fds_.end()) {
    count(AgentReason::kPUNT_TX_ERROR);
    return false;
  }
  Pending& p = t_pending;
  if (p.owner == this) {
    if (p.n == kBatchMax) flush();
    p.ifindex[p.n] = ifindex;
    p.frame[p.n].assign(frame.begin(), frame.end());
    ++p.n;
    return true;
  }
  if (::send(it->second, frame.data(), frame.size(), 0) < 0) {
    count(AgentReason::kPUNT_TX_ERROR);
    return false;
  }
  count(AgentReason::kPUNT_TX);
  return true;
}

PuntRx::PuntRx(int fd, Handler handler, PuntTx* batch_tx)
    : handler_(std::move(handler)),
      batch_tx_(batch_tx),
      poller_(
          fd, "punt ring buffer", "xbng-punt", [this](std::span<const uint8_t> r) { on_record(r); },
          [this] {
            if (in_batch_) batch_tx_->end_batch();
            in_batch_ = false;
          }) {}

PuntRx::~PuntRx() = default;

void PuntRx::on_record(std::span<const uint8_t> record) {
  if (batch_tx_ && !in_batch_) {
    batch_tx_->begin_batch();
    in_batch_ = true;
  }
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
