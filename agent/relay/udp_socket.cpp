#include "relay/udp_socket.h"

#include "common/thread_priority.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace xbng::agent::relay {

namespace {

uint64_t monotonic_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

uint16_t port_of(const sockaddr_storage& sa) {
  return sa.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6&>(sa).sin6_port)
                                  : ntohs(reinterpret_cast<const sockaddr_in&>(sa).sin_port);
}

// The interface a datagram arrived on, from its IP_PKTINFO / IPV6_PKTINFO.
uint32_t arrival_ifindex(msghdr& mh) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
      in6_pktinfo pi;
      std::memcpy(&pi, CMSG_DATA(c), sizeof(pi));
      return pi.ipi6_ifindex;
    }
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
      in_pktinfo pi;
      std::memcpy(&pi, CMSG_DATA(c), sizeof(pi));
      return static_cast<uint32_t>(pi.ipi_ifindex);
    }
  }
  return 0;
}

}  // namespace

UdpSocket::UdpSocket(const sockaddr* sa, socklen_t len, const std::string& what,
                     const char* thread_name, size_t max_datagram, OnDatagram on_datagram,
                     OnTick on_tick)
    : buf_(max_datagram), on_datagram_(std::move(on_datagram)), on_tick_(std::move(on_tick)) {
  fd_ = socket(sa->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error(fmt::format("relay socket: {}", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (sa->sa_family == AF_INET6) {
    setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    setsockopt(fd_, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
  } else {
    setsockopt(fd_, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
  }
  if (bind(fd_, sa, len) != 0) {
    const int e = errno;
    close(fd_);
    throw std::runtime_error(fmt::format("relay socket: bind {}: {}", what, std::strerror(e)));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &blen);
  port_ = port_of(bound);
  wake_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_ < 0) {
    close(fd_);
    throw std::runtime_error(fmt::format("relay socket: eventfd: {}", std::strerror(errno)));
  }
  thread_ = std::thread([this] { run(); });
  set_thread_name(thread_, thread_name);
}

UdpSocket::~UdpSocket() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_, &one, sizeof(one));
    thread_.join();
  }
  if (fd_ >= 0) close(fd_);
  if (wake_ >= 0) close(wake_);
}

bool UdpSocket::send_to(const sockaddr* sa, socklen_t len, std::span<const uint8_t> payload) {
  return sendto(fd_, payload.data(), payload.size(), MSG_DONTWAIT, sa, len) ==
         static_cast<ssize_t>(payload.size());
}

bool UdpSocket::set_multicast6(uint32_t ifindex, int hops) {
  const int ifx = static_cast<int>(ifindex), zero = 0;
  return setsockopt(fd_, IPPROTO_IPV6, IPV6_MULTICAST_IF, &ifx, sizeof(ifx)) == 0 &&
         setsockopt(fd_, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &hops, sizeof(hops)) == 0 &&
         setsockopt(fd_, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &zero, sizeof(zero)) == 0;
}

std::string UdpSocket::set_fifo_priority(int priority) {
  return agent::set_fifo_priority(thread_, priority);
}

void UdpSocket::run() {
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
        sockaddr_storage from{};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(in6_pktinfo))];
        iovec iov{buf_.data(), buf_.size()};
        msghdr mh{};
        mh.msg_name = &from;
        mh.msg_namelen = sizeof(from);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = control;
        mh.msg_controllen = sizeof(control);
        const ssize_t r = recvmsg(fd_, &mh, 0);
        if (r < 0) break;
        on_datagram_(from, arrival_ifindex(mh),
                     std::span<const uint8_t>(buf_.data(), static_cast<size_t>(r)));
      }
    }
    if (monotonic_ms() >= next_tick) {
      if (on_tick_) on_tick_();
      next_tick = monotonic_ms() + 1000;
    }
  }
}

}  // namespace xbng::agent::relay
