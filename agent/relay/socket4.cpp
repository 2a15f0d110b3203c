#include "relay/socket4.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include "common/net.h"

namespace xbng::agent::relay {

namespace {

sockaddr_in sockaddr_of(uint32_t address, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = address;
  sa.sin_port = htons(port);
  return sa;
}

}  // namespace

Socket4::Socket4(uint32_t address, uint16_t port, OnDatagram on_datagram, OnTick on_tick) {
  const sockaddr_in sa = sockaddr_of(address, port);
  socket_ = std::make_unique<UdpSocket>(
      reinterpret_cast<const sockaddr*>(&sa), sizeof(sa),
      fmt::format("{}:{}", format_ipv4(address), port), "xbng-relay4", 2048,
      [f = std::move(on_datagram)](const sockaddr_storage& from, uint32_t,
                                   std::span<const uint8_t> b) {
        const auto& in = reinterpret_cast<const sockaddr_in&>(from);
        f(in.sin_addr.s_addr, ntohs(in.sin_port), b);
      },
      std::move(on_tick));
}

Socket4::~Socket4() = default;

bool Socket4::send(uint32_t dst, uint16_t port, std::span<const uint8_t> payload) {
  const sockaddr_in sa = sockaddr_of(dst, port);
  return socket_->send_to(reinterpret_cast<const sockaddr*>(&sa), sizeof(sa), payload);
}

uint16_t Socket4::port() const { return socket_->port(); }

}  // namespace xbng::agent::relay
