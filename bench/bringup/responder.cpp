// The self-test responder: a BNG stand-in on the far end of the veth. It
// answers DHCPv6 with xbng_protocols' server, RS with its RA builder, and
// DHCPv4 with a minimal OFFER/ACK (the real DHCPv4 server is xbngd's).
#include "responder.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>

#include "packet_socket.hpp"
#include "bringup/dhcpv6/duid.h"
#include "bringup/dhcpv6/server.h"
#include "bringup/ra/ra.h"

namespace a = xbng::agent;

namespace bringup {

namespace {

// Moves the calling thread into /run/netns/<name> for its lifetime.
struct NetnsEnter {
  explicit NetnsEnter(const std::string& name) {
    orig = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int fd = open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
      throw std::runtime_error(fmt::format("setns {}: {}", name, strerror(errno)));
    close(fd);
  }
  ~NetnsEnter() {
    setns(orig, CLONE_NEWNET);
    close(orig);
  }
  int orig = -1;
};

Mac mac_of(const std::string& ifname) {
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname.c_str());
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int rc = ioctl(fd, SIOCGIFHWADDR, &ifr);
  close(fd);
  if (rc < 0) throw std::runtime_error(fmt::format("MAC of {}: {}", ifname, strerror(errno)));
  Mac m;
  std::memcpy(m.data(), ifr.ifr_hwaddr.sa_data, 6);
  return m;
}

}  // namespace

void run_responder(const std::string& ns, const std::string& ifname, uint32_t first, uint32_t n,
                   std::atomic<bool>* stop, std::atomic<bool>* ready, ResponderStats* st) {
  NetnsEnter in(ns);
  PacketSocket sock(ifname);
  const Mac port_mac = mac_of(ifname);
  a::dhcpv6::Settings s6;
  s6.server_duid = a::dhcpv6::make_duid_uuid();
  s6.dns_servers = {*a::parse_ipv6("2001:db8::53")};
  a::ra::Settings sra;
  sra.rdnss = s6.dns_servers;
  std::vector<uint8_t> ra_body;
  a::dhcpv6::Outcome out;
  const uint32_t gw = htonl(0x64400001);  // 100.64.0.1
  ready->store(true);
  while (!stop->load(std::memory_order_relaxed)) {
    int got = sock.receive([&](std::span<const uint8_t> f, int outer) {
      Parsed p;
      if (!parse_frame(f, outer, &p)) return;
      int64_t i = index_of(p.svid, p.cvid);
      if (i < first || i >= int64_t(first) + n) {
        ++st->other;
        return;
      }
      Cpe c = cpe_of(static_cast<uint32_t>(i));
      if (p.kind == Parsed::kDhcp4 && (p.dhcp4_type == 1 || p.dhcp4_type == 3)) {
        ++st->dhcp4;
        uint32_t want = sub_addr4_be(static_cast<uint32_t>(i));
        uint8_t type = p.dhcp4_type == 1 ? 2 : (p.requested_be == want ? 5 : 6);
        sock.queue(dhcp4_reply(c, port_mac, type, p.xid, type == 6 ? 0 : want, gw));
      } else if (p.kind == Parsed::kDhcp6) {
        ++st->dhcp6;
        a::Prefix pfx;
        pfx.family = 6;
        pfx.len = 64;
        V6 pa = sub_pfx64(static_cast<uint32_t>(i));
        std::copy(pa.begin(), pa.end(), pfx.addr.begin());
        a::dhcpv6::Binding b{true, sub_addr6(static_cast<uint32_t>(i)),
                             std::span<const a::Prefix>(&pfx, 1)};
        a::dhcpv6::serve(p.l4, b, s6, 0, &out);
        if (out.has_reply) sock.queue(wrap_v6_udp(c, port_mac, p.ip6_src, out.reply));
      } else if (p.kind == Parsed::kRs) {
        ++st->rs;
        a::ra::RouterSolicit rs;
        if (a::ra::parse_rs(p.l4, false, &rs) != a::ra::RsError::kOk) return;
        a::ra::build_ra(sra, port_mac, nullptr, &ra_body);
        sock.queue(wrap_v6_icmp(c, port_mac, p.ip6_src, ra_body));
      }
    });
    sock.flush();
    if (got <= 0 && sock.pending() == 0) {
      pollfd pfd{sock.fd(), POLLIN, 0};
      poll(&pfd, 1, 2);
    } else if (sock.pending()) {
      pollfd pfd{sock.fd(), POLLOUT | POLLIN, 0};
      poll(&pfd, 1, 1);
    }
  }
}

}  // namespace bringup
