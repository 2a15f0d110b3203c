// The relay's uplink side for DHCPv6: one UDP socket bound to port 547
// (servers answer a Relay-Forward to its source address on port 547), and
// the thread that reads it. Replies reach it through the kernel: xdp_uplink passes
// every packet that is not for a subscriber or a pool (XDP_PASS).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "common/net.h"
#include "relay/udp_socket.h"

namespace xbng::agent::relay {

class Socket6 {
 public:
  // `ifindex`: the interface the datagram arrived on (0: unknown).
  using OnDatagram = std::function<void(const Ipv6& src, uint16_t sport, uint32_t ifindex,
                                        std::span<const uint8_t>)>;
  using OnTick = std::function<void()>;
  // Binds address:port (an all-zero address: any; host order port) and starts
  // the reader; on_tick runs on it about once a second. Throws
  // std::runtime_error naming the address.
  Socket6(const Ipv6& address, uint16_t port, OnDatagram on_datagram, OnTick on_tick);
  ~Socket6();
  Socket6(const Socket6&) = delete;
  Socket6& operator=(const Socket6&) = delete;
  // To dst:port (host order port). Thread-safe.
  bool send(const Ipv6& dst, uint16_t port, std::span<const uint8_t> payload);
  // Sends to a multicast group leave by interface `ifindex` (the uplink)
  // with hop limit `hops`. Throws std::runtime_error when refused.
  void multicast_via(uint32_t ifindex, int hops);
  uint16_t port() const;
  // Runs the reader at SCHED_FIFO `priority`: "" or the kernel's refusal.
  std::string set_fifo_priority(int priority) { return socket_->set_fifo_priority(priority); }

 private:
  std::unique_ptr<UdpSocket> socket_;
  uint32_t multicast_ifindex_ = 0;
};

}  // namespace xbng::agent::relay
