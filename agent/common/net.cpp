#include "common/net.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace xbng::agent {

namespace {
int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::optional<Mac> parse_mac(std::string_view s) {
  if (s.size() != 17) return std::nullopt;
  Mac m{};
  const char sep = s[2];
  if (sep != ':' && sep != '-') return std::nullopt;
  for (int i = 0; i < 6; ++i) {
    int hi = hexval(s[i * 3]), lo = hexval(s[i * 3 + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    if (i < 5 && s[i * 3 + 2] != sep) return std::nullopt;
    m[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return m;
}

std::optional<uint32_t> parse_ipv4(std::string_view s) {
  if (s.empty() || s.size() > 15) return std::nullopt;
  char buf[16];
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = 0;
  in_addr a{};
  if (inet_pton(AF_INET, buf, &a) != 1) return std::nullopt;
  return a.s_addr;
}

std::optional<Ipv6> parse_ipv6(std::string_view s) {
  if (s.empty() || s.size() > 45) return std::nullopt;
  char buf[46];
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = 0;
  Ipv6 a{};
  if (inet_pton(AF_INET6, buf, a.data()) != 1) return std::nullopt;
  return a;
}

std::optional<Prefix> parse_prefix(std::string_view s, int family) {
  auto slash = s.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto addr = s.substr(0, slash);
  auto lens = s.substr(slash + 1);
  if (lens.empty() || lens.size() > 3) return std::nullopt;
  int len = 0;
  for (char c : lens) {
    if (c < '0' || c > '9') return std::nullopt;
    len = len * 10 + (c - '0');
  }
  Prefix p;
  if (addr.find(':') != std::string_view::npos) {
    if (family == 4) return std::nullopt;
    auto a = parse_ipv6(addr);
    if (!a || len > 128) return std::nullopt;
    p.family = 6;
    p.addr = *a;
  } else {
    if (family == 6) return std::nullopt;
    auto a = parse_ipv4(addr);
    if (!a || len > 32) return std::nullopt;
    p.family = 4;
    std::memcpy(p.addr.data(), &*a, 4);
  }
  p.len = static_cast<uint8_t>(len);
  return p;
}

std::string format_mac(const uint8_t* m) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return buf;
}

std::string format_ipv4(uint32_t be) {
  char buf[INET_ADDRSTRLEN];
  in_addr a{};
  a.s_addr = be;
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

std::string format_ipv6(const uint8_t* addr) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, addr, buf, sizeof buf);
  return buf;
}

std::string format_prefix(const Prefix& p) {
  if (p.family == 4) {
    uint32_t a;
    std::memcpy(&a, p.addr.data(), 4);
    return format_ipv4(a) + "/" + std::to_string(p.len);
  }
  return format_ipv6(p.addr.data()) + "/" + std::to_string(p.len);
}

bool mac_is_zero(const uint8_t* m) {
  for (int i = 0; i < 6; ++i)
    if (m[i]) return false;
  return true;
}

bool mac_is_multicast(const uint8_t* m) { return m[0] & 1; }

bool host_bits_zero(const uint8_t* addr, int bytes, int len) {
  if (len < 0) len = 0;
  if (len >= bytes * 8) return true;
  int i = len / 8;
  if (len % 8) {
    if (addr[i] & (0xff >> (len % 8))) return false;
    ++i;
  }
  for (; i < bytes; ++i)
    if (addr[i]) return false;
  return true;
}

bool prefixes_overlap(const Prefix& a, const Prefix& b) {
  if (a.family != b.family) return false;
  const int len = a.len < b.len ? a.len : b.len;
  const int full = len / 8, rest = len % 8;
  if (std::memcmp(a.addr.data(), b.addr.data(), full) != 0) return false;
  if (!rest) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a.addr[full] & mask) == (b.addr[full] & mask);
}

std::optional<uint16_t> parse_u16(std::string_view s) {
  if (s.empty() || s.size() > 8) return std::nullopt;
  std::string str(s);
  char* end = nullptr;
  errno = 0;
  unsigned long v = std::strtoul(str.c_str(), &end, 0);
  if (errno || *end || v > 0xffff) return std::nullopt;
  return static_cast<uint16_t>(v);
}

}  // namespace xbng::agent
