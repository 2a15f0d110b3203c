// The relay's uplink side for DHCPv4: one UDP socket bound to the relay
// address, port 67 (servers answer the giaddr on port 67), and the thread
// that reads it. Replies reach it through the kernel: xdp_uplink passes
// every packet that is not for a subscriber or a pool (XDP_PASS).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "relay/udp_socket.h"

namespace xbng::agent::relay {

class Socket4 {
 public:
  using OnDatagram = std::function<void(uint32_t src, uint16_t sport, std::span<const uint8_t>)>;
  using OnTick = std::function<void()>;
  // Binds address:port (network order address, host order port) and starts
  // the reader; on_tick runs on it about once a second. Throws
  // std::runtime_error naming the address.
  Socket4(uint32_t address, uint16_t port, OnDatagram on_datagram, OnTick on_tick);
  ~Socket4();
  Socket4(const Socket4&) = delete;
  Socket4& operator=(const Socket4&) = delete;
  // To dst:port (network order address, host order port). Thread-safe.
  bool send(uint32_t dst, uint16_t port, std::span<const uint8_t> payload);
  uint16_t port() const;
  // Runs the reader at SCHED_FIFO `priority`: "" or the kernel's refusal.
  std::string set_fifo_priority(int priority) { return socket_->set_fifo_priority(priority); }

 private:
  std::unique_ptr<UdpSocket> socket_;
};

}  // namespace xbng::agent::relay
