// xbng_proto_responder: serves ONE subscriber binding over plain sockets on
// an untagged interface with the pure bring-up libraries (DHCPv6 server,
// RS parser, RA builder, persistent DUID), so that real clients (dhclient,
// dhcpcd, rdisc6) can be run against exactly the bytes xbngd will send.
// A test tool (test_proto_interop.py), not part of xbngd: the daemon's punt
// path and frame layer are elsewhere. Prints one line per message:
//   dhcpv6 <request type> <outcome kind>[ <parse error>]
//   rs ok|<error>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bringup/dhcpv6/duid.h"
#include "bringup/dhcpv6/server.h"
#include "bringup/ra/ra.h"

namespace a = xbng::agent;

namespace {

volatile sig_atomic_t g_stop = 0;

void die(const std::string& what) {
  std::fprintf(stderr, "xbng_proto_responder: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

void join(int fd, unsigned ifindex, const char* group) {
  ipv6_mreq m{};
  inet_pton(AF_INET6, group, &m.ipv6mr_multiaddr);
  m.ipv6mr_interface = ifindex;
  if (setsockopt(fd, IPPROTO_IPV6, IPV6_ADD_MEMBERSHIP, &m, sizeof m) < 0 && errno != EADDRINUSE)
    die(std::string("join ") + group);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"serve one subscriber's DHCPv6 binding and RAs with xbng's bring-up libraries"};
  std::string iface, address, duid_file;
  std::vector<std::string> prefixes, dns;
  uint32_t t1 = 1800, t2 = 2880, preferred = 3600, valid = 7200;
  bool rapid = true, no_address = false;
  app.add_option("--iface", iface)->required();
  app.add_option("--address", address);
  app.add_option("--prefix", prefixes);
  app.add_option("--dns", dns);
  app.add_option("--duid-file", duid_file)->required();
  app.add_option("--t1", t1);
  app.add_option("--t2", t2);
  app.add_option("--preferred", preferred);
  app.add_option("--valid", valid);
  app.add_flag("!--no-rapid-commit", rapid);
  CLI11_PARSE(app, argc, argv);
  (void)no_address;

  a::dhcpv6::Settings s6;
  std::string err;
  auto duid = a::dhcpv6::load_or_create_server_duid(duid_file, &err);
  if (!duid) {
    std::fprintf(stderr, "xbng_proto_responder: %s\n", err.c_str());
    return 1;
  }
  s6.server_duid = *duid;
  s6.t1 = t1;
  s6.t2 = t2;
  s6.preferred_lifetime = preferred;
  s6.valid_lifetime = valid;
  s6.rapid_commit = rapid;
  for (const auto& d : dns) s6.dns_servers.push_back(*a::parse_ipv6(d));
  std::vector<a::Prefix> pfx;
  for (const auto& p : prefixes) pfx.push_back(*a::parse_prefix(p, 6));
  a::dhcpv6::Binding b{};
  if (!address.empty()) {
    b.has_address = true;
    b.address = *a::parse_ipv6(address);
  }
  b.prefixes = pfx;
  a::ra::Settings sra;
  sra.rdnss = s6.dns_servers;

  unsigned ifindex = if_nametoindex(iface.c_str());
  if (!ifindex) die("interface " + iface);
  a::Mac mac{};  // the port MAC for the RA's source link-layer option
  {
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", iface.c_str());
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) die("MAC of " + iface);
    close(fd);
    std::memcpy(mac.data(), ifr.ifr_hwaddr.sa_data, 6);
  }

  int udp = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(udp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(udp, SOL_SOCKET, SO_BINDTODEVICE, iface.c_str(), static_cast<socklen_t>(iface.size()));
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons(a::dhcpv6::kServerPort);
  if (bind(udp, reinterpret_cast<sockaddr*>(&sa), sizeof sa) < 0) die("bind [::]:547");
  join(udp, ifindex, "ff02::1:2");

  int icmp = socket(AF_INET6, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMPV6);
  if (icmp < 0) die("raw ICMPv6 socket");
  setsockopt(icmp, SOL_SOCKET, SO_BINDTODEVICE, iface.c_str(),
             static_cast<socklen_t>(iface.size()));
  icmp6_filter filt;
  ICMP6_FILTER_SETBLOCKALL(&filt);
  ICMP6_FILTER_SETPASS(ND_ROUTER_SOLICIT, &filt);
  setsockopt(icmp, IPPROTO_ICMPV6, ICMP6_FILTER, &filt, sizeof filt);
  setsockopt(icmp, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, &one, sizeof one);
  int hops = 255;
  setsockopt(icmp, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &hops, sizeof hops);
  setsockopt(icmp, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &hops, sizeof hops);
  join(icmp, ifindex, "ff02::2");

  signal(SIGTERM, [](int) { g_stop = 1; });
  signal(SIGINT, [](int) { g_stop = 1; });
  std::printf("ready duid %s\n", a::dhcpv6::format_duid_hex(s6.server_duid).c_str());
  std::fflush(stdout);

  a::dhcpv6::Outcome out;
  std::vector<uint8_t> ra;
  uint8_t buf[2048];
  while (!g_stop) {
    pollfd p[2] = {{udp, POLLIN, 0}, {icmp, POLLIN, 0}};
    if (poll(p, 2, 200) <= 0) continue;
    if (p[0].revents & POLLIN) {
      sockaddr_in6 from{};
      socklen_t fl = sizeof from;
      ssize_t n = recvfrom(udp, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &fl);
      if (n > 0) {
        a::dhcpv6::serve({buf, static_cast<size_t>(n)}, b, s6, static_cast<uint64_t>(time(nullptr)),
                         &out);
        std::printf("dhcpv6 %s %s%s%s\n",
                    out.kind == a::dhcpv6::Kind::kMalformed
                        ? "-"
                        : std::string(a::dhcpv6::msg_type_name(out.request_type)).c_str(),
                    std::string(a::dhcpv6::kind_name(out.kind)).c_str(),
                    out.kind == a::dhcpv6::Kind::kMalformed ? " " : "",
                    out.kind == a::dhcpv6::Kind::kMalformed
                        ? std::string(a::dhcpv6::parse_error_name(out.parse_error)).c_str()
                        : "");
        std::fflush(stdout);
        if (out.has_reply)
          sendto(udp, out.reply.data(), out.reply.size(), 0, reinterpret_cast<sockaddr*>(&from),
                 fl);
      }
    }
    if (p[1].revents & POLLIN) {
      sockaddr_in6 from{};
      iovec iov{buf, sizeof buf};
      alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
      msghdr m{};
      m.msg_name = &from;
      m.msg_namelen = sizeof from;
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = ctl;
      m.msg_controllen = sizeof ctl;
      ssize_t n = recvmsg(icmp, &m, 0);
      if (n > 0) {
        int hl = -1;
        for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
          if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT)
            std::memcpy(&hl, CMSG_DATA(c), sizeof hl);
        // The caller's checks (ra.h): hop limit 255; the kernel verified the checksum.
        if (hl != 255) {
          std::printf("rs hop_limit_%d\n", hl);
        } else {
          static const uint8_t kUnspec[16] = {};
          bool unspecified = std::memcmp(&from.sin6_addr, kUnspec, 16) == 0;
          a::ra::RouterSolicit rs;
          a::ra::RsError e = a::ra::parse_rs({buf, static_cast<size_t>(n)}, unspecified, &rs);
          std::printf("rs %s\n", std::string(a::ra::rs_error_name(e)).c_str());
          if (e == a::ra::RsError::kOk) {
            a::ra::build_ra(sra, mac, nullptr, &ra);
            // Unicast to the soliciting host (or all-nodes when it has no address yet).
            sockaddr_in6 to = from;
            if (unspecified) inet_pton(AF_INET6, "ff02::1", &to.sin6_addr);
            to.sin6_scope_id = ifindex;
            sendto(icmp, ra.data(), ra.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
          }
        }
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
