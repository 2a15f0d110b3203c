#include "dataplane/router.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace xbng::agent {

namespace {

int mask_len(const uint8_t* m, int bytes) {
  int n = 0;
  for (int i = 0; i < bytes; ++i)
    for (int b = 7; b >= 0; --b) {
      if (!(m[i] >> b & 1)) return n;
      ++n;
    }
  return n;
}

}  // namespace

std::vector<Prefix> interface_addresses(const std::string& ifname) {
  std::vector<Prefix> out;
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (struct ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || !a->ifa_name || ifname != a->ifa_name) continue;
    Prefix p;
    if (a->ifa_addr->sa_family == AF_INET) {
      p.family = 4;
      std::memcpy(p.addr.data(), &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
      p.len = a->ifa_netmask ? static_cast<uint8_t>(mask_len(
                                   reinterpret_cast<const uint8_t*>(
                                       &reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr),
                                   4))
                             : 32;
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      p.family = 6;
      std::memcpy(p.addr.data(), &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
      p.len = a->ifa_netmask
                  ? static_cast<uint8_t>(mask_len(
                        reinterpret_cast<sockaddr_in6*>(a->ifa_netmask)->sin6_addr.s6_addr, 16))
                  : 128;
    } else {
      continue;
    }
    out.push_back(p);
  }
  freeifaddrs(list);
  return out;
}

std::optional<Prefix> first_global(const std::vector<Prefix>& addrs, int family) {
  for (const auto& p : addrs) {
    if (p.family != family) continue;
    const uint8_t* a = p.addr.data();
    if (family == 4) {
      if (a[0] == 127 || a[0] == 0 || a[0] >= 224 || (a[0] == 169 && a[1] == 254)) continue;
    } else {
      if (a[0] == 0xff || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)) continue;
      static const uint8_t lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      static const uint8_t any[16] = {};
      if (!std::memcmp(a, lo, 16) || !std::memcmp(a, any, 16)) continue;
    }
    return p;
  }
  return std::nullopt;
}

std::optional<std::string> pool_overlap(const Prefix& pool, const std::string& uplink,
                                        const std::vector<Prefix>& uplink_addrs) {
  for (const auto& a : uplink_addrs) {
    if (a.family != pool.family) continue;
    Prefix subnet = a;
    // Zero the host bits: the uplink's subnet, not its address.
    const int bytes = a.family == 4 ? 4 : 16;
    for (int i = 0; i < bytes; ++i) {
      const int keep = a.len - i * 8;
      if (keep >= 8) continue;
      subnet.addr[i] &= keep <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - keep));
    }
    if (prefixes_overlap(pool, subnet))
      return fmt::format(
          "pool {} overlaps uplink {}'s subnet {} (address {}): traffic to the "
          "uplink's own network would be taken for subscribers'",
          format_prefix(pool), uplink, format_prefix(subnet), format_prefix(a));
  }
  return std::nullopt;
}

int ensure_mtu(const std::string& ifname, int need, const std::string& why) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  struct ifreq ifr {};
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname.c_str());
  if (ioctl(s, SIOCGIFMTU, &ifr) != 0) {
    int e = errno;
    close(s);
    throw std::runtime_error(fmt::format("port {}: reading the MTU: {}", ifname, std::strerror(e)));
  }
  const int before = ifr.ifr_mtu;
  if (before >= need) {
    close(s);
    return before;
  }
  ifr.ifr_mtu = need;
  if (ioctl(s, SIOCSIFMTU, &ifr) != 0) {
    int e = errno;
    close(s);
    throw std::runtime_error(fmt::format(
        "port {}: needs MTU {} ({}) but the driver refused to raise it from {}: {}; lower "
        "subscriber_mtu or use a NIC that carries {}-byte frames",
        ifname, need, why, before, std::strerror(e), need + 14));
  }
  close(s);
  spdlog::info("port {}: MTU raised from {} to {} ({})", ifname, before, need, why);
  return before;
}

}  // namespace xbng::agent
