#include "relay/socket6.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace xbng::agent::relay {

namespace {

sockaddr_in6 sockaddr_of(const Ipv6& address, uint16_t port) {
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  std::memcpy(&sa.sin6_addr, address.data(), 16);
  sa.sin6_port = htons(port);
  return sa;
}

}  // namespace

Socket6::Socket6(const Ipv6& address, uint16_t port, OnDatagram on_datagram, OnTick on_tick) {
  const sockaddr_in6 sa = sockaddr_of(address, port);
  // A Relay-Reply may carry a large message: datagrams up to 64 KiB.
  socket_ = std::make_unique<UdpSocket>(
      reinterpret_cast<const sockaddr*>(&sa), sizeof(sa),
      fmt::format("[{}]:{}", format_ipv6(address.data()), port), "xbng-relay6", 65536,
      [f = std::move(on_datagram)](const sockaddr_storage& from, uint32_t ifindex,
                                   std::span<const uint8_t> b) {
        const auto& in6 = reinterpret_cast<const sockaddr_in6&>(from);
        Ipv6 src;
        std::memcpy(src.data(), &in6.sin6_addr, 16);
        f(src, ntohs(in6.sin6_port), ifindex, b);
      },
      std::move(on_tick));
}

Socket6::~Socket6() = default;

void Socket6::multicast_via(uint32_t ifindex, int hops) {
  if (!socket_->set_multicast6(ifindex, hops))
    throw std::runtime_error(
        fmt::format("relay socket: multicast via interface {}: {}", ifindex, std::strerror(errno)));
  multicast_ifindex_ = ifindex;
}

bool Socket6::send(const Ipv6& dst, uint16_t port, std::span<const uint8_t> payload) {
  sockaddr_in6 sa = sockaddr_of(dst, port);
  // A link-scoped group (ff02::1:2) names its link.
  if (dst[0] == 0xff) sa.sin6_scope_id = multicast_ifindex_;
  return socket_->send_to(reinterpret_cast<const sockaddr*>(&sa), sizeof(sa), payload);
}

uint16_t Socket6::port() const { return socket_->port(); }

}  // namespace xbng::agent::relay
