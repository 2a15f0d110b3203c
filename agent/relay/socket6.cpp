#include "relay/socket6.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/net.h"

namespace xbng::agent::relay {

namespace {

uint64_t monotonic_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

}  // namespace

Socket6::Socket6(const Ipv6& address, uint16_t port, OnDatagram on_datagram, OnTick on_tick)
    : on_datagram_(std::move(on_datagram)), on_tick_(std::move(on_tick)) {
  fd_ = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error(fmt::format("relay socket: {}", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  std::memcpy(&sa.sin6_addr, address.data(), 16);
  sa.sin6_port = htons(port);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    const int e = errno;
    close(fd_);
    throw std::runtime_error(fmt::format("relay socket: bind [{}]:{}: {}",
                                         format_ipv6(address.data()), port, std::strerror(e)));
  }
  socklen_t len = sizeof(sa);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin6_port);
  wake_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_ < 0) {
    close(fd_);
    throw std::runtime_error(fmt::format("relay socket: eventfd: {}", std::strerror(errno)));
  }
  thread_ = std::thread([this] { run(); });
}

Socket6::~Socket6() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_, &one, sizeof(one));
    thread_.join();
  }
  if (fd_ >= 0) close(fd_);
  if (wake_ >= 0) close(wake_);
}

bool Socket6::send(const Ipv6& dst, uint16_t port, std::span<const uint8_t> payload) {
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  std::memcpy(&sa.sin6_addr, dst.data(), 16);
  sa.sin6_port = htons(port);
  return sendto(fd_, payload.data(), payload.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&sa),
                sizeof(sa)) == static_cast<ssize_t>(payload.size());
}

void Socket6::run() {
  std::vector<uint8_t> buf(65536);  // a Relay-Reply may carry a large message
  uint64_t next_tick = monotonic_ms() + 1000;
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_, POLLIN, 0}};
    const uint64_t now = monotonic_ms();
    const int wait = now >= next_tick ? 0 : static_cast<int>(next_tick - now);
    const int n = poll(p, 2, wait);
    if (n < 0 && errno != EINTR) break;
    if (p[1].revents) break;
    if (n > 0 && (p[0].revents & POLLIN)) {
      // Drain what is there (bounded per wake-up, so the tick keeps its pace).
      for (int i = 0; i < 256; ++i) {
        sockaddr_in6 from{};
        socklen_t fl = sizeof(from);
        const ssize_t r =
            recvfrom(fd_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &fl);
        if (r < 0) break;
        Ipv6 src;
        std::memcpy(src.data(), &from.sin6_addr, 16);
        on_datagram_(src, ntohs(from.sin6_port),
                     std::span<const uint8_t>(buf.data(), static_cast<size_t>(r)));
      }
    }
    if (monotonic_ms() >= next_tick) {
      if (on_tick_) on_tick_();
      next_tick = monotonic_ms() + 1000;
    }
  }
}

}  // namespace xbng::agent::relay
