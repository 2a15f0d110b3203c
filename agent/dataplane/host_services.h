// The host's own services as subscribers may reach them.
// Frames from access ports for the host itself are dropped by the fast path
// (drop_to_host) unless their protocol and destination port are in the
// `local_allow` map, written from `[security] allow_to_host`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xbng::agent {

struct LocalService {
  uint8_t proto = 0;  // IPPROTO_*
  uint16_t port = 0;  // 0: every port (and packets without one)
  friend bool operator==(const LocalService&, const LocalService&) = default;
};

// "tcp/22", "udp/53", "sctp/3868", "tcp" (every port), "icmp", "icmpv6",
// or an IP protocol number ("47"). Returns the error text, or nullopt and
// fills *out.
std::optional<std::string> parse_local_service(std::string_view s, LocalService* out);
std::string format_local_service(const LocalService& s);

// Makes `local_allow` hold exactly `services`. Throws std::runtime_error
// naming the entry the kernel refused.
void write_local_services(int map_fd, const std::vector<LocalService>& services);

}  // namespace xbng::agent
