// The part Socket4 and Socket6 share: one non-blocking UDP socket bound to
// an address, the thread that reads it (a bounded drain per wake-up) and a
// tick about once a second on that thread. An eventfd stops the reader.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace xbng::agent::relay {

class UdpSocket {
 public:
  // `ifindex`: the interface the datagram arrived on (IP_PKTINFO /
  // IPV6_PKTINFO), 0 when the kernel did not say.
  using OnDatagram =
      std::function<void(const sockaddr_storage& from, uint32_t ifindex, std::span<const uint8_t>)>;
  using OnTick = std::function<void()>;
  // Binds `sa` (AF_INET, or AF_INET6 with IPV6_V6ONLY) and starts the
  // reader (named `thread_name`); a datagram longer than max_datagram is
  // cut to it. Throws std::runtime_error naming `what` (the address, as the
  // caller writes it).
  UdpSocket(const sockaddr* sa, socklen_t len, const std::string& what, const char* thread_name,
            size_t max_datagram, OnDatagram on_datagram, OnTick on_tick);
  ~UdpSocket();
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;
  // Thread-safe, never blocks.
  bool send_to(const sockaddr* sa, socklen_t len, std::span<const uint8_t> payload);
  // Multicast sends (IPv6) leave by interface `ifindex` with hop limit
  // `hops`, and are not looped back to the host. Returns false (errno set)
  // when the kernel refuses.
  bool set_multicast6(uint32_t ifindex, int hops);
  uint16_t port() const { return port_; }
  // Runs the reader at SCHED_FIFO `priority`: "" or the kernel's refusal.
  std::string set_fifo_priority(int priority);

 private:
  void run();
  int fd_ = -1;
  int wake_ = -1;
  uint16_t port_ = 0;
  std::vector<uint8_t> buf_;
  OnDatagram on_datagram_;
  OnTick on_tick_;
  std::thread thread_;
};

}  // namespace xbng::agent::relay
