// The AF_XDP punt transport ([punt] transport = "af_xdp"): one AF_XDP
// socket (libxdp's xsk API) per RX queue of each access port, each with its
// own UMEM, in the XSKMAP `punt_xsks` at slot * XBNG_PUNT_XSK_QUEUES + queue.
// xdp_access redirects the punted frames there (after the same limits as
// the ring buffer), with struct xbng_punt_meta in the XDP metadata just
// before the frame; the frame reaches the handler in place in the UMEM (no
// copy in the program, one copy by the kernel in XDP_COPY mode) and its
// buffer goes back to the fill ring once handled. One thread polls every
// socket; the replies of one pass go out in a PuntTx batch.
//
// xbng attaches its own XDP program: the sockets are created with
// XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD. A queue left without a socket (past
// XBNG_PUNT_XSK_QUEUES) still punts, through the ring buffer.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "bringup/punt/io.h"

struct xsk_socket;
struct xsk_umem;

namespace xbng::agent::punt {

struct XskPort {
  std::string name;
  uint32_t ifindex = 0;
  uint32_t slot = 0;  // xbng_port.slot
};

class PuntXskRx {
 public:
  using Handler = PuntRx::Handler;
  // Creates the sockets of every RX queue of `ports` (at most
  // XBNG_PUNT_XSK_QUEUES each), puts them in the XSKMAP `xskmap_fd` and
  // starts the RX thread. Throws std::runtime_error (nothing left behind).
  PuntXskRx(int xskmap_fd, const std::vector<XskPort>& ports, Handler handler,
            PuntTx* batch_tx = nullptr);
  // Stops the thread, takes the sockets out of the map and closes them.
  ~PuntXskRx();
  PuntXskRx(const PuntXskRx&) = delete;
  PuntXskRx& operator=(const PuntXskRx&) = delete;

  size_t sockets() const { return socks_.size(); }
  uint64_t received() const { return received_.load(); }
  // Frames the kernel dropped for a full RX ring or no fill buffer, summed
  // over the sockets (XDP_STATISTICS).
  uint64_t kernel_dropped() const;
  // Runs the RX thread at SCHED_FIFO `priority`: "" or the kernel's refusal.
  std::string set_fifo_priority(int priority);

 private:
  struct Sock;
  void open_socket(const XskPort& port, uint32_t queue);
  void run();
  void drain(Sock& s);

  int map_fd_;
  Handler handler_;
  PuntTx* batch_tx_;
  std::vector<Sock*> socks_;
  std::atomic<uint64_t> received_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// RX queues of a netdev (its /sys/class/net/NAME/queues/rx-*); 1 when unknown.
uint32_t rx_queue_count(const std::string& ifname);

}  // namespace xbng::agent::punt
