// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Hardening, fast-path side: frames for the host itself
// (drop_to_host unless allowed in local_allow) and the MAC policies (learn
// once, follow, enforce; MAC_CHANGED / MAC_CONFLICT events, rate-limited).
#include <bpf/bpf.h>

#include <cstring>

#include "harness.h"

namespace bpftest {

using testpkt::ip4;
using testpkt::ip6;
using testpkt::Ipv4Opts;
using testpkt::mac;

namespace {

const Mac kOtherMac = mac("02:00:00:0e:0e:01");  // a second device on s1's VLAN pair

Packet from_sub_mac(const SubDef& s, const Mac& src) {
  return Packet().eth(s.port->mac, src).qinq(s.port->tpid, s.svid, s.cvid);
}

// Handed to the kernel: tags removed, MACs as received.
Packet untagged(const SubDef& s, const Mac& src) { return plain(s.port->mac, src); }

void allow(Harness& h, uint8_t proto, uint16_t port) {
  struct xbng_local_svc k {};
  k.proto = proto;
  k.port = port;
  uint8_t one = 1;
  ASSERT_EQ(bpf_map_update_elem(h.map_fd("local_allow"), &k, &one, BPF_ANY), 0);
}

void set_sub_policy(Harness& h, const SubDef& s, uint16_t policy) {
  struct xbng_subscriber v = h.subscriber(s);
  struct xbng_sub_key k = s.key();
  v.flags =
      (uint16_t)((v.flags & ~XBNG_SUB_F_MAC_POLICY_MASK) | (policy << XBNG_SUB_F_MAC_POLICY_SHIFT));
  ASSERT_EQ(bpf_map_update_elem(h.map_fd("subscribers"), &k, &v, BPF_EXIST), 0);
}

void set_port_policy(Harness& h, const PortDef& p, uint8_t policy) {
  uint32_t idx = (uint32_t)h.ifindex(p.name);
  struct xbng_port v {};
  ASSERT_EQ(bpf_map_lookup_elem(h.map_fd("ports"), &idx, &v), 0);
  v.mac_policy = policy;
  ASSERT_EQ(bpf_map_update_elem(h.map_fd("ports"), &idx, &v, BPF_EXIST), 0);
}

Mac sub_mac(Harness& h, const SubDef& s) {
  struct xbng_subscriber v = h.subscriber(s);
  Mac m;
  std::memcpy(m.b.data(), v.mac, 6);
  return m;
}

// Upstream UDP from s1's address, from source MAC `src`, forwarded.
Step fwd_from(const SubDef& s, const Mac& src) {
  Bytes in = udp4(from_sub_mac(s, src), s.v4, kRemote4);
  return access(*s.port, in, XDP_REDIRECT, XBNG_FWD_UPSTREAM)
      .expect_out(udp4(plain(kRouterMac, kUp0.mac), s.v4, kRemote4, ttl4(63)))
      .via(kUp0)
      .up(s.name);
}

ExpectedEvent ev(uint32_t type, const SubDef& s, const Mac& m) {
  return {type, s.port, s.svid, s.cvid, m};
}

}  // namespace

std::vector<Row> hardening_rows() {
  std::vector<Row> rows;
  auto add = [&rows](Row r) { rows.push_back(std::move(r)); };
  const SubDef& s1 = kS1;

  // ---- frames for the host itself -------------------------------------------------
  add(row("to host UDP not allowed is dropped",
          access(kAcc0, udp4(from_sub(s1), s1.v4, kUplinkAddr4), XDP_DROP, XBNG_DROP_TO_HOST)));
  add(row("to host TCP SYN port 22 not allowed is dropped",
          access(kAcc0, from_sub(s1).ipv4(s1.v4, kUplinkAddr4).tcp_syn(50000, 22).build(), XDP_DROP,
                 XBNG_DROP_TO_HOST)
              .pre([](Harness& h) { allow(h, 6, 179); })));
  add(row(
      "to host TCP 179 allowed is passed untagged",
      access(kAcc0, from_sub(s1).ipv4(s1.v4, kUplinkAddr4).tcp_syn(50000, 179).build(), XDP_PASS,
             XBNG_PASS_FIB_LOCAL)
          .expect_out(untagged(s1, s1.mac).ipv4(s1.v4, kUplinkAddr4).tcp_syn(50000, 179).build())
          .pre([](Harness& h) { allow(h, 6, 179); })));
  add(row("to host UDP allowed by protocol is passed",
          access(kAcc0, udp4(from_sub(s1), s1.v4, kUplinkAddr4), XDP_PASS, XBNG_PASS_FIB_LOCAL)
              .expect_out(udp4(untagged(s1, s1.mac), s1.v4, kUplinkAddr4))
              .pre([](Harness& h) { allow(h, 17, 0); })));
  add(row("to host ICMP echo allowed is passed",
          access(kAcc0, from_sub(s1).ipv4(s1.v4, kUplinkAddr4).icmp_echo(7, 1).payload(8).build(),
                 XDP_PASS, XBNG_PASS_FIB_LOCAL)
              .expect_out(
                  untagged(s1, s1.mac).ipv4(s1.v4, kUplinkAddr4).icmp_echo(7, 1).payload(8).build())
              .pre([](Harness& h) { allow(h, 1, 0); })));
  add(row("to host ICMP echo with only TCP allowed is dropped",
          access(kAcc0, from_sub(s1).ipv4(s1.v4, kUplinkAddr4).icmp_echo(7, 1).payload(8).build(),
                 XDP_DROP, XBNG_DROP_TO_HOST)
              .pre([](Harness& h) { allow(h, 6, 0); })));
  add(row(
      "to the uplink subnet broadcast is dropped",
      access(kAcc0, udp4(from_sub(s1), s1.v4, ip4("192.0.2.255")), XDP_DROP, XBNG_DROP_TO_HOST)));
  add(row("to host IPv6 UDP not allowed is dropped",
          access(kAcc0, udp6(from_sub(s1), s1.v6, kUplinkAddr6), XDP_DROP, XBNG_DROP_TO_HOST)
              .pre([](Harness& h) { allow(h, 17, 53); })));
  add(row("to host IPv6 TCP 22 allowed is passed",
          access(kAcc0, from_sub(s1).ipv6(s1.v6, kUplinkAddr6).tcp_syn(50000, 22).build(), XDP_PASS,
                 XBNG_PASS_FIB_LOCAL)
              .expect_out(untagged(s1, s1.mac).ipv6(s1.v6, kUplinkAddr6).tcp_syn(50000, 22).build())
              .pre([](Harness& h) { allow(h, 6, 22); })));
  {
    Ipv4Opts later;
    later.frag = 0x0010;  // offset 128 bytes, no L4 header
    add(row(
        "to host later fragment matches only a protocol-wide entry",
        {access(kAcc0, udp4(from_sub(s1), s1.v4, kUplinkAddr4, later), XDP_DROP, XBNG_DROP_TO_HOST)
             .pre([](Harness& h) { allow(h, 17, 443); }),
         access(kAcc0, udp4(from_sub(s1), s1.v4, kUplinkAddr4, later), XDP_PASS,
                XBNG_PASS_FIB_LOCAL)
             .expect_out(udp4(untagged(s1, s1.mac), s1.v4, kUplinkAddr4, later))
             .pre([](Harness& h) { allow(h, 17, 0); })}));
  }
  add(row("to a remote host is still forwarded with nothing allowed", fwd_from(s1, s1.mac)));

  // ---- MAC policies ---------------------------------------------------------------
  add(row("learn-once: another MAC is forwarded and reported once",
          {fwd_from(s1, kOtherMac)
               .event(ev(XBNG_EVENT_MAC_CONFLICT, s1, kOtherMac))
               .count(XBNG_EVENT_SENT),
           fwd_from(s1, kOtherMac).count(XBNG_EVENT_SUPPRESSED).post([](Harness& h) {
             EXPECT_TRUE(sub_mac(h, kS1) == kS1.mac) << "learn-once must keep the MAC";
           })}));
  add(row("learn-once: the subscriber's own MAC costs no event", fwd_from(s1, s1.mac)));
  add(row("enforce (subscriber): another MAC is dropped and reported",
          {access(kAcc0, udp4(from_sub_mac(s1, kOtherMac), s1.v4, kRemote4), XDP_DROP,
                  XBNG_DROP_MAC_MISMATCH)
               .count(XBNG_EVENT_SENT)
               .event(ev(XBNG_EVENT_MAC_CONFLICT, s1, kOtherMac))
               .pre([](Harness& h) { set_sub_policy(h, kS1, XBNG_MAC_POLICY_ENFORCE); }),
           access(kAcc0, udp4(from_sub_mac(s1, kOtherMac), s1.v4, kRemote4), XDP_DROP,
                  XBNG_DROP_MAC_MISMATCH)
               .count(XBNG_EVENT_SUPPRESSED),
           fwd_from(s1, s1.mac)}));
  add(row(
      "enforce (port default): another MAC is dropped, ARP included",
      access(kAcc0, from_sub_mac(s1, kOtherMac).arp(1, kOtherMac, s1.v4, Mac{}, kAcc0.gw4).build(),
             XDP_DROP, XBNG_DROP_MAC_MISMATCH)
          .count(XBNG_EVENT_SENT)
          .event(ev(XBNG_EVENT_MAC_CONFLICT, s1, kOtherMac))
          .pre([](Harness& h) { set_port_policy(h, kAcc0, XBNG_MAC_POLICY_ENFORCE); })));
  add(row("subscriber learn-once overrides a port enforce",
          fwd_from(s1, kOtherMac)
              .count(XBNG_EVENT_SENT)
              .event(ev(XBNG_EVENT_MAC_CONFLICT, s1, kOtherMac))
              .pre([](Harness& h) {
                set_port_policy(h, kAcc0, XBNG_MAC_POLICY_ENFORCE);
                set_sub_policy(h, kS1, XBNG_MAC_POLICY_LEARN_ONCE);
              })));
  {
    const SubDef& s5 = kS5Learn;
    Step learn =
        fwd_from(s5, s5.mac).count(XBNG_EVENT_SENT).event(ev(XBNG_EVENT_MAC_LEARNED, s5, s5.mac));
    add(row(
        "enforce on a learning subscriber: first MAC learned, then only it",
        {Step(learn).pre([](Harness& h) { set_sub_policy(h, kS5Learn, XBNG_MAC_POLICY_ENFORCE); }),
         access(kAcc0, udp4(from_sub_mac(s5, kOtherMac), s5.v4, kRemote4), XDP_DROP,
                XBNG_DROP_MAC_MISMATCH)
             .count(XBNG_EVENT_SENT)
             .event(ev(XBNG_EVENT_MAC_CONFLICT, s5, kOtherMac))}));
    add(row(
        "follow: a new MAC is taken and reported, once per interval",
        {Step(learn).pre([](Harness& h) { set_sub_policy(h, kS5Learn, XBNG_MAC_POLICY_FOLLOW); }),
         fwd_from(s5, kOtherMac)
             .count(XBNG_EVENT_SENT)
             .event(ev(XBNG_EVENT_MAC_CHANGED, s5, kOtherMac))
             .post([](Harness& h) { EXPECT_TRUE(sub_mac(h, kS5Learn) == kOtherMac); }),
         fwd_from(s5, s5.mac).count(XBNG_EVENT_SUPPRESSED).post([](Harness& h) {
           EXPECT_TRUE(sub_mac(h, kS5Learn) == kOtherMac) << "a move within the interval";
         })}));
    add(row(
        "follow: a spoofed frame from a new MAC moves nothing",
        {Step(learn).pre([](Harness& h) { set_sub_policy(h, kS5Learn, XBNG_MAC_POLICY_FOLLOW); }),
         access(kAcc0, udp4(from_sub_mac(s5, kOtherMac), kS1.v4, kRemote4), XDP_DROP,
                XBNG_DROP_SPOOFED_V4)
             .post([](Harness& h) { EXPECT_TRUE(sub_mac(h, kS5Learn) == kS5Learn.mac); })}));
    add(row("follow on the port: a provisioned MAC follows too",
            fwd_from(s1, kOtherMac)
                .count(XBNG_EVENT_SENT)
                .event(ev(XBNG_EVENT_MAC_CHANGED, s1, kOtherMac))
                .pre([](Harness& h) { set_port_policy(h, kAcc0, XBNG_MAC_POLICY_FOLLOW); })
                .post([](Harness& h) { EXPECT_TRUE(sub_mac(h, kS1) == kOtherMac); })));
    add(row("follow with the event budget spent: no move without its event",
            fwd_from(s1, kOtherMac)
                .count(XBNG_EVENT_SUPPRESSED)
                .pre([](Harness& h) {
                  set_port_policy(h, kAcc0, XBNG_MAC_POLICY_FOLLOW);
                  h.set_event_budget(Harness::now_ns(), 1u << 30);
                })
                .post([](Harness& h) { EXPECT_TRUE(sub_mac(h, kS1) == kS1.mac); })));
  }
  return rows;
}

INSTANTIATE_TEST_SUITE_P(Hardening, Table, testing::ValuesIn(hardening_rows()), row_name);

}  // namespace bpftest
