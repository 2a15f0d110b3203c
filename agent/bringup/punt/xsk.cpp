#include "bringup/punt/xsk.h"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <linux/if_xdp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "xbng/abi.h"
#include "bringup/punt/counters.h"
#include "common/thread_priority.h"

namespace xbng::agent::punt {

namespace {
// A UMEM frame holds the kernel's headroom (XDP_PACKET_HEADROOM, where the
// metadata goes too) and the largest punted frame: 2 KB, 8 MB per socket.
constexpr uint32_t kFrameSize = 2048;
// Frames per socket; all of them start in the fill ring. More than the
// ring buffer's records (XBNG_PUNT_RINGBUF_BYTES / ~1.5 KB: ~2,700).
constexpr uint32_t kFrames = 4096;
constexpr uint32_t kRing = 4096;  // RX and fill ring sizes
constexpr uint32_t kRxBatch = 64;
constexpr int kPollMs = 200;  // how long a stop request may wait
static_assert(XBNG_PUNT_MAX_FRAME + 256 + sizeof(struct xbng_punt_meta) <= kFrameSize);
}  // namespace

struct PuntXskRx::Sock {
  XskPort port;
  uint32_t queue = 0;
  uint32_t key = 0;  // in `punt_xsks`
  void* area = nullptr;
  struct xsk_umem* umem = nullptr;
  struct xsk_socket* xsk = nullptr;
  struct xsk_ring_prod fill {};
  struct xsk_ring_cons comp {};
  struct xsk_ring_cons rx {};
  bool in_map = false;

  ~Sock() {
    if (xsk) xsk_socket__delete(xsk);
    if (umem) xsk_umem__delete(umem);
    if (area) munmap(area, size_t{kFrames} * kFrameSize);
  }
};

uint32_t rx_queue_count(const std::string& ifname) {
  std::error_code ec;
  uint32_t n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator("/sys/class/net/" + ifname + "/queues", ec))
    if (e.path().filename().string().rfind("rx-", 0) == 0) ++n;
  return n ? n : 1;
}

PuntXskRx::PuntXskRx(int xskmap_fd, const std::vector<XskPort>& ports, Handler handler,
                     PuntTx* batch_tx)
    : map_fd_(xskmap_fd), handler_(std::move(handler)), batch_tx_(batch_tx) {
  try {
    for (const auto& p : ports) {
      const uint32_t n = std::min<uint32_t>(rx_queue_count(p.name), XBNG_PUNT_XSK_QUEUES);
      for (uint32_t q = 0; q < n; ++q) open_socket(p, q);
    }
  } catch (...) {
    for (Sock* s : socks_) {
      if (s->in_map) bpf_map_delete_elem(map_fd_, &s->key);
      delete s;
    }
    socks_.clear();
    throw;
  }
  thread_ = std::thread([this] { run(); });
  set_thread_name(thread_, "xbng-punt-xsk");
}

PuntXskRx::~PuntXskRx() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (Sock* s : socks_) {
    // Out of the map first: the program falls back to the ring buffer
    // rather than redirect into a closing socket.
    if (s->in_map) bpf_map_delete_elem(map_fd_, &s->key);
    delete s;
  }
}

void PuntXskRx::open_socket(const XskPort& port, uint32_t queue) {
  auto fail = [&](const char* what, int err) {
    throw std::runtime_error(fmt::format("punt AF_XDP: port {} queue {}: {}: {}", port.name, queue,
                                         what, std::strerror(err)));
  };
  auto* s = new Sock;
  socks_.push_back(s);
  s->port = port;
  s->queue = queue;
  s->key = port.slot * XBNG_PUNT_XSK_QUEUES + queue;
  const size_t bytes = size_t{kFrames} * kFrameSize;
  void* area = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) fail("UMEM mmap", errno);
  s->area = area;
  struct xsk_umem_config ucfg {};
  ucfg.fill_size = kRing;
  ucfg.comp_size = 64;  // RX only: nothing is ever transmitted from this UMEM
  ucfg.frame_size = kFrameSize;
  ucfg.frame_headroom = 0;
  if (int rc = xsk_umem__create(&s->umem, s->area, bytes, &s->fill, &s->comp, &ucfg); rc)
    fail("xsk_umem__create", -rc);
  struct xsk_socket_config cfg {};
  cfg.rx_size = kRing;
  cfg.tx_size = 0;
  // xbngd's own program is attached already: libxdp must load none.
  cfg.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  if (int rc =
          xsk_socket__create(&s->xsk, port.name.c_str(), queue, s->umem, &s->rx, nullptr, &cfg);
      rc)
    fail("xsk_socket__create", -rc);
  // Every frame into the fill ring: the kernel copies punted frames into them.
  uint32_t idx = 0;
  if (xsk_ring_prod__reserve(&s->fill, kFrames, &idx) != kFrames) fail("fill ring", ENOSPC);
  for (uint32_t i = 0; i < kFrames; ++i)
    *xsk_ring_prod__fill_addr(&s->fill, idx + i) = uint64_t{i} * kFrameSize;
  xsk_ring_prod__submit(&s->fill, kFrames);
  int fd = xsk_socket__fd(s->xsk);
  if (bpf_map_update_elem(map_fd_, &s->key, &fd, BPF_ANY) != 0) fail("punt_xsks update", errno);
  s->in_map = true;
  spdlog::info("punt: AF_XDP socket on {} queue {}", port.name, queue);
}

std::string PuntXskRx::set_fifo_priority(int priority) {
  return agent::set_fifo_priority(thread_, priority);
}

uint64_t PuntXskRx::kernel_dropped() const {
  uint64_t n = 0;
  for (const Sock* s : socks_) {
    struct xdp_statistics st {};
    socklen_t len = sizeof st;
    if (getsockopt(xsk_socket__fd(s->xsk), SOL_XDP, XDP_STATISTICS, &st, &len) == 0)
      n += st.rx_dropped + st.rx_ring_full;  // no fill buffer counts in rx_dropped
  }
  return n;
}

void PuntXskRx::run() {
  std::vector<pollfd> pfds;
  for (const Sock* s : socks_) pfds.push_back({xsk_socket__fd(s->xsk), POLLIN, 0});
  // The kernel's drops (full RX ring, empty fill ring) become
  // punt_af_xdp_dropped, read at most once per poll interval.
  uint64_t dropped = 0;
  auto next_stats = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    if (auto now = std::chrono::steady_clock::now(); now >= next_stats) {
      const uint64_t d = kernel_dropped();
      if (d > dropped) count(AgentReason::kPUNT_AF_XDP_DROPPED, d - dropped);
      dropped = d;
      next_stats = now + std::chrono::milliseconds(kPollMs);
    }
    int rc = poll(pfds.data(), pfds.size(), kPollMs);
    if (rc < 0 && errno != EINTR) {
      spdlog::error("punt AF_XDP: poll failed: {}", std::strerror(errno));
      break;
    }
    if (rc <= 0) continue;
    PuntTx::Batch batch(batch_tx_);
    for (size_t i = 0; i < pfds.size(); ++i)
      if (pfds[i].revents & POLLIN) drain(*socks_[i]);
  }
}

// Hands what the RX ring holds (kRxBatch at a time) to the handler, then
// gives the buffers back to the fill ring.
void PuntXskRx::drain(Sock& s) {
  for (;;) {
    uint32_t rx_idx = 0;
    const uint32_t n = xsk_ring_cons__peek(&s.rx, kRxBatch, &rx_idx);
    if (n == 0) return;
    uint64_t addrs[kRxBatch];
    for (uint32_t i = 0; i < n; ++i) {
      const struct xdp_desc* d = xsk_ring_cons__rx_desc(&s.rx, rx_idx + i);
      addrs[i] = d->addr & ~uint64_t{kFrameSize - 1};
      received_.fetch_add(1, std::memory_order_relaxed);
      count(AgentReason::kPUNT_RECEIVED);
      count(AgentReason::kPUNT_RECEIVED_AF_XDP);
      // The metadata sits right before the frame (the program wrote it).
      if (d->len == 0 || d->len > XBNG_PUNT_MAX_FRAME ||
          d->addr - addrs[i] < sizeof(struct xbng_punt_meta)) {
        count(AgentReason::kPUNT_BAD_RECORD);
        continue;
      }
      const auto* data = static_cast<const uint8_t*>(xsk_umem__get_data(s.area, d->addr));
      struct xbng_punt_meta m;
      std::memcpy(&m, data - sizeof m, sizeof m);
      PuntedFrame f;
      f.kind = m.kind;
      f.ifindex = s.port.ifindex;
      f.outer_vid = m.outer_vid;
      f.inner_vid = m.inner_vid;
      f.timestamp_ns = m.timestamp_ns;
      f.frame = std::span<const uint8_t>(data, d->len);
      try {
        handler_(f);
      } catch (const std::exception& e) {
        spdlog::error("punt handler: {}", e.what());
      }
    }
    xsk_ring_cons__release(&s.rx, n);
    // The fill ring has room for every frame of the UMEM, so for these.
    uint32_t fill_idx = 0;
    if (xsk_ring_prod__reserve(&s.fill, n, &fill_idx) != n) {
      spdlog::error("punt AF_XDP: {} queue {}: fill ring full", s.port.name, s.queue);
      return;
    }
    for (uint32_t i = 0; i < n; ++i) *xsk_ring_prod__fill_addr(&s.fill, fill_idx + i) = addrs[i];
    xsk_ring_prod__submit(&s.fill, n);
  }
}

}  // namespace xbng::agent::punt
