// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// High availability, fast-path side: the role kept in every port entry
// (xbng_port.ha_deadline_ns). An active with a deadline ahead forwards and
// answers as without a group; a standby, or an active whose deadline has
// passed (its agent died or froze), drops subscriber traffic both ways with
// drop_standby and answers nothing on the access side, while the uplink
// still hands the host's own traffic to the kernel, except ARP/ND for the
// group's VIPs.
#include <cstring>

#include "harness.h"

namespace bpftest {

using testpkt::ip4;
using testpkt::ip6;
using testpkt::Ipv6Opts;
using testpkt::mac;

namespace {

const Mac kBroadcast = mac("ff:ff:ff:ff:ff:ff");
const Ip4 kRouter4 = ip4("192.0.2.254");
const Ip6 kRouter6 = ip6("2001:db8:ffff::fe");
const Ip4 kVip4 = kUplinkAddr4;  // the uplink VIP: an address the kernel owns
const Ip6 kVip6 = kUplinkAddr6;
constexpr uint64_t kSecond = 1000000000ull;

// Every port's deadline, as the agent writes it; on up0 also the VIPs.
void set_deadline(Harness& h, uint64_t deadline_ns) {
  for (const PortDef* p : kPorts) {
    h.edit_port(p->name, [&](struct xbng_port& v) {
      v.ha_deadline_ns = deadline_ns;
      if (v.role == XBNG_ROLE_UPLINK) {
        v.gw_ipv4 = kVip4.be();
        std::memcpy(v.gw_ipv6, kVip6.b.data(), 16);
      }
    });
  }
}

void active(Harness& h) { set_deadline(h, Harness::now_ns() + 60 * kSecond); }
void standby(Harness& h) { set_deadline(h, XBNG_HA_STANDBY); }
void expired(Harness& h) { set_deadline(h, Harness::now_ns() - 1); }

Ipv6Opts hop255() {
  Ipv6Opts o;
  o.hop_limit = 255;
  return o;
}

Step up_fwd(const SubDef& s) {
  return access(*s.port, udp4(from_sub(s), s.v4, kRemote4), XDP_REDIRECT, XBNG_FWD_UPSTREAM)
      .expect_out(udp4(plain(kRouterMac, kUp0.mac), s.v4, kRemote4, ttl4(63)))
      .via(kUp0)
      .up(s.name);
}

Step down_fwd(const SubDef& s, const std::string& route) {
  return uplink(udp4(plain(kUp0.mac, kRouterMac), kRemote4, s.v4), XDP_REDIRECT,
                XBNG_FWD_DOWNSTREAM)
      .expect_out(udp4(to_sub(s), kRemote4, s.v4, ttl4(63)))
      .via(*s.port)
      .down(route);
}

Bytes arp_for_gateway(const SubDef& s) {
  return Packet()
      .eth(kBroadcast, s.mac)
      .qinq(s.port->tpid, s.svid, s.cvid)
      .arp(1, s.mac, s.v4, Mac{}, s.port->gw4)
      .build();
}

Bytes uplink_arp(const Ip4& target) {
  return plain(kBroadcast, kRouterMac).arp(1, kRouterMac, kRouter4, Mac{}, target).build();
}

Bytes uplink_ns(const Ip6& target) {
  return plain(kUp0.mac, kRouterMac)
      .ipv6(kRouter6, target, hop255())
      .icmp6_ns(target, kRouterMac)
      .build();
}

// The rows every non-active state shares: `state` puts the ports there.
void not_active_rows(std::vector<Row>& rows, const std::string& what, void (*state)(Harness&)) {
  const SubDef& s1 = kS1;
  auto r = [&](std::string desc, Step s) { rows.push_back(row(what + ": " + desc, s.pre(state))); };
  r("upstream subscriber traffic is dropped",
    access(kAcc0, udp4(from_sub(s1), s1.v4, kRemote4), XDP_DROP, XBNG_DROP_STANDBY));
  r("downstream subscriber traffic is dropped",
    uplink(udp4(plain(kUp0.mac, kRouterMac), kRemote4, s1.v4), XDP_DROP, XBNG_DROP_STANDBY));
  r("downstream IPv6 subscriber traffic is dropped",
    uplink(udp6(plain(kUp0.mac, kRouterMac), kRemote6, s1.v6), XDP_DROP, XBNG_DROP_STANDBY));
  r("ARP for the gateway is not answered",
    access(kAcc0, arp_for_gateway(s1), XDP_DROP, XBNG_DROP_STANDBY));
  r("NS for fe80::1 is not answered",
    access(kAcc0,
           from_sub(s1).ipv6(s1.v6, ip6("fe80::1"), hop255()).icmp6_ns(ip6("fe80::1")).build(),
           XDP_DROP, XBNG_DROP_STANDBY));
  r("a frame of an unknown VLAN pair is dropped as standby, no event",
    access(kAcc0,
           udp4(Packet().eth(kAcc0.mac, s1.mac).qinq(kAcc0.tpid, 3000, 3000), s1.v4, kRemote4),
           XDP_DROP, XBNG_DROP_STANDBY));
  r("an unassigned pool address gets no ICMP",
    uplink(udp4(plain(kUp0.mac, kRouterMac), kRemote4, ip4("100.64.9.9")), XDP_DROP,
           XBNG_DROP_STANDBY));
  r("uplink ARP for the VIP is dropped", uplink(uplink_arp(kVip4), XDP_DROP, XBNG_DROP_STANDBY));
  r("uplink NS for the IPv6 VIP is dropped", uplink(uplink_ns(kVip6), XDP_DROP, XBNG_DROP_STANDBY));
  r("uplink ARP for another address still goes to the kernel",
    uplink(uplink_arp(ip4("192.0.2.7")), XDP_PASS, XBNG_PASS_UPLINK_NON_IP));
  r("the host's own traffic on the uplink still goes to the kernel",
    uplink(udp4(plain(kUp0.mac, kRouterMac), kRemote4, ip4("192.0.2.7")), XDP_PASS,
           XBNG_PASS_NOT_SUBSCRIBER));
}

}  // namespace

std::vector<Row> ha_rows() {
  std::vector<Row> rows;
  const SubDef& s1 = kS1;

  // ---- active: a deadline ahead changes nothing -------------------------------------
  rows.push_back(row("active: upstream forwarded", up_fwd(s1).pre(active)));
  rows.push_back(row("active: downstream forwarded", down_fwd(s1, "r4-s1").pre(active)));
  rows.push_back(row("active: ARP for the gateway answered",
                     access(kAcc0, arp_for_gateway(s1), XDP_TX, XBNG_TX_ARP_REPLY)
                         .expect_out(to_sub(s1).arp(2, kAcc0.mac, kAcc0.gw4, s1.mac, s1.v4).build())
                         .pre(active)));
  rows.push_back(row("active: uplink ARP for the VIP goes to the kernel",
                     uplink(uplink_arp(kVip4), XDP_PASS, XBNG_PASS_UPLINK_NON_IP).pre(active)));
  rows.push_back(row("active: uplink NS for the IPv6 VIP goes to the kernel",
                     uplink(uplink_ns(kVip6), XDP_PASS, XBNG_PASS_NOT_SUBSCRIBER).pre(active)));

  not_active_rows(rows, "standby", standby);
  not_active_rows(rows, "deadline passed", expired);

  // ---- the same data plane, its role changed between two frames ----------------------
  rows.push_back(row(
      "standby, then active: the second frame is forwarded",
      {access(kAcc0, udp4(from_sub(s1), s1.v4, kRemote4), XDP_DROP, XBNG_DROP_STANDBY).pre(standby),
       up_fwd(s1).pre(active)}));
  rows.push_back(
      row("active, then its deadline passes: the second frame is dropped",
          {down_fwd(s1, "r4-s1").pre(active),
           uplink(udp4(plain(kUp0.mac, kRouterMac), kRemote4, s1.v4), XDP_DROP, XBNG_DROP_STANDBY)
               .pre(expired)}));
  return rows;
}

INSTANTIATE_TEST_SUITE_P(Ha, Table, testing::ValuesIn(ha_rows()), row_name);

}  // namespace bpftest
