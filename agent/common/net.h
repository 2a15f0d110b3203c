// Address, MAC and CIDR parsing/formatting. Addresses are kept in network
// byte order, exactly as the BPF maps hold them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xbng::agent {

using Mac = std::array<uint8_t, 6>;
using Ipv6 = std::array<uint8_t, 16>;

// A CIDR prefix: family 4 or 6; addr holds 4 or 16 meaningful bytes.
struct Prefix {
  uint8_t family = 0;
  uint8_t len = 0;
  std::array<uint8_t, 16> addr{};

  friend bool operator==(const Prefix&, const Prefix&) = default;
  friend auto operator<=>(const Prefix&, const Prefix&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const Prefix& p) {
    return H::combine(std::move(h), p.family, p.len, p.addr);
  }
};

std::optional<Mac> parse_mac(std::string_view s);        // aa:bb:cc:dd:ee:ff or aa-bb-..
std::optional<uint32_t> parse_ipv4(std::string_view s);  // network order
std::optional<Ipv6> parse_ipv6(std::string_view s);
// "A.B.C.D/N" or "X::/N"; family is checked against `family` when non-zero.
std::optional<Prefix> parse_prefix(std::string_view s, int family = 0);

std::string format_mac(const uint8_t* mac);
std::string format_ipv4(uint32_t be);
std::string format_ipv6(const uint8_t* addr);
std::string format_prefix(const Prefix& p);

bool mac_is_zero(const uint8_t* mac);
bool mac_is_multicast(const uint8_t* mac);  // group bit (includes broadcast)
// True when every bit of addr past `len` is zero.
bool host_bits_zero(const uint8_t* addr, int bytes, int len);

// Same family and one contains the other.
bool prefixes_overlap(const Prefix& a, const Prefix& b);

// Parses "0x88a8", "34984" etc. (base auto-detected) into a 16-bit value.
std::optional<uint16_t> parse_u16(std::string_view s);

}  // namespace xbng::agent
