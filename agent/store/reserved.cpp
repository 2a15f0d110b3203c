#include "store/reserved.h"

#include <fmt/format.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace xbng::agent {

namespace {

using u128 = unsigned __int128;

u128 load(const Prefix& p) {
  u128 v = 0;
  const int n = p.family == 4 ? 4 : 16;
  for (int i = 0; i < n; ++i) v = (v << 8) | p.addr[i];
  return v;
}

void span_of(const Prefix& p, u128* lo, u128* hi) {
  const int width = p.family == 4 ? 32 : 128;
  const u128 a = load(p);
  const u128 host = p.len >= width ? 0 : ((u128{1} << (width - p.len)) - 1);
  *lo = a & ~host;
  *hi = *lo | host;
}

Prefix masked(Prefix p) {
  const int n = p.family == 4 ? 4 : 16;
  for (int i = 0; i < n; ++i) {
    const int bits = p.len - 8 * i;
    if (bits >= 8) continue;
    p.addr[i] &= bits <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - bits));
  }
  return p;
}

Prefix host(uint8_t family, const uint8_t* a) {
  Prefix p;
  p.family = family;
  p.len = family == 4 ? 32 : 128;
  std::memcpy(p.addr.data(), a, family == 4 ? 4 : 16);
  return p;
}

}  // namespace

void ReservedSet::add(const Prefix& p, std::string what) {
  for (const auto& e : entries_)
    if (e.prefix == p) return;  // first reason wins
  Span s{};
  s.family = p.family;
  span_of(p, &s.lo, &s.hi);
  entries_.push_back({p, std::move(what)});
  spans_.push_back(s);
}

const ReservedSet::Entry* ReservedSet::find(const Prefix& p) const {
  u128 lo, hi;
  span_of(p, &lo, &hi);
  for (size_t i = 0; i < spans_.size(); ++i) {
    const Span& s = spans_[i];
    if (s.family == p.family && lo <= s.hi && s.lo <= hi) return &entries_[i];
  }
  return nullptr;
}

std::vector<IfAddress> read_if_addresses() {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) throw std::runtime_error(fmt::format("netlink socket: {}", std::strerror(errno)));
  struct {
    nlmsghdr h;
    ifaddrmsg m;
  } req{};
  req.h.nlmsg_len = sizeof req;
  req.h.nlmsg_type = RTM_GETADDR;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = 1;
  req.m.ifa_family = AF_UNSPEC;
  if (send(fd, &req, sizeof req, 0) < 0) {
    int e = errno;
    close(fd);
    throw std::runtime_error(fmt::format("netlink RTM_GETADDR: {}", std::strerror(e)));
  }
  std::vector<IfAddress> out;
  std::vector<char> buf(1 << 16);
  for (bool done = false; !done;) {
    ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      throw std::runtime_error(fmt::format("netlink recv: {}", std::strerror(e)));
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, static_cast<size_t>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
        done = true;
        break;
      }
      if (h->nlmsg_type != RTM_NEWADDR) continue;
      auto* m = static_cast<ifaddrmsg*>(NLMSG_DATA(h));
      if (m->ifa_family != AF_INET && m->ifa_family != AF_INET6) continue;
      if (m->ifa_scope == RT_SCOPE_LINK || m->ifa_scope == RT_SCOPE_HOST) continue;
      const uint8_t* addr = nullptr;
      const uint8_t* local = nullptr;
      int len = static_cast<int>(IFA_PAYLOAD(h));
      for (auto* a = IFA_RTA(m); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type == IFA_ADDRESS) addr = static_cast<const uint8_t*>(RTA_DATA(a));
        if (a->rta_type == IFA_LOCAL) local = static_cast<const uint8_t*>(RTA_DATA(a));
      }
      if (local) addr = local;
      if (!addr) continue;
      IfAddress ia;
      ia.ifindex = m->ifa_index;
      ia.addr = host(m->ifa_family == AF_INET ? 4 : 6, addr);
      ia.addr.len = m->ifa_prefixlen;
      out.push_back(ia);
    }
  }
  close(fd);
  return out;
}

ReservedSet build_reserved(const std::vector<PortInfo>& ports,
                           const std::vector<std::string>& operator_ranges,
                           const std::vector<IfAddress>& addrs) {
  ReservedSet r;
  for (const auto& p : ports) {
    if (p.role != XBNG_ROLE_ACCESS) continue;
    if (p.cfg.gw_ipv4)
      r.add(host(4, reinterpret_cast<const uint8_t*>(&p.cfg.gw_ipv4)),
            fmt::format("the IPv4 gateway of access port {}", p.name));
    const auto* g6 = reinterpret_cast<const uint8_t*>(p.cfg.gw_ipv6);
    if (p.cfg.gw_ipv6[0] | p.cfg.gw_ipv6[1] | p.cfg.gw_ipv6[2] | p.cfg.gw_ipv6[3])
      r.add(host(6, g6), fmt::format("the IPv6 gateway of access port {}", p.name));
  }
  for (const auto& a : addrs) {
    const PortInfo* port = nullptr;
    for (const auto& p : ports)
      if (p.ifindex == a.ifindex) port = &p;
    if (!port) continue;
    const bool uplink = port->role == XBNG_ROLE_UPLINK;
    const char* role = uplink ? "uplink" : "access port";
    Prefix h = a.addr;
    h.len = h.family == 4 ? 32 : 128;
    r.add(h, fmt::format("an address of {} {} ({})", role, port->name, format_prefix(a.addr)));
    // An uplink's connected subnet holds its neighbours, its next hops and
    // (IPv4) its broadcast address. An access port's subnet is left alone:
    // it may be the subscribers' own (an unnumbered gateway with a mask).
    if (uplink) r.add(masked(a.addr), fmt::format("the connected subnet of uplink {}", port->name));
  }
  for (const auto& s : operator_ranges) {
    std::optional<Prefix> p = parse_prefix(s);
    if (!p)
      if (auto a4 = parse_ipv4(s)) p = host(4, reinterpret_cast<const uint8_t*>(&*a4));
    if (!p)
      if (auto a6 = parse_ipv6(s)) p = host(6, a6->data());
    if (p) r.add(masked(*p), fmt::format("reserved range {} (security.reserved)", s));
  }
  return r;
}

AddressWatcher::AddressWatcher(std::function<void()> on_change) : on_change_(std::move(on_change)) {
  fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd_ < 0) throw std::runtime_error(fmt::format("netlink socket: {}", std::strerror(errno)));
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    int e = errno;
    close(fd_);
    throw std::runtime_error(fmt::format("netlink bind (address changes): {}", std::strerror(e)));
  }
  thread_ = std::thread([this] {
    std::vector<char> buf(1 << 16);
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      bool changed = false;
      // Drain the burst (an `ip addr flush` is many messages), then act once.
      for (;;) {
        ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
        if (n < 0) {
          if (errno == ENOBUFS) changed = true;  // overrun: re-read everything anyway
          if (errno == EINTR) continue;
          if (errno != EAGAIN) changed = true;
          break;
        }
        if (n > 0) changed = true;
      }
      if (changed && !stop_.load()) {
        try {
          on_change_();
        } catch (const std::exception& e) {
          spdlog::error("address change: {}", e.what());
        }
      }
    }
  });
}

AddressWatcher::~AddressWatcher() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
}

}  // namespace xbng::agent
