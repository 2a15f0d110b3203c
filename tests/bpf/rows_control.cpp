// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Access-side control: proxy ARP, ND, RS/DHCP drops, unknown subscribers and
// their events, MAC learning.
#include "harness.h"

namespace bpftest {

using testpkt::ip4;
using testpkt::ip6;
using testpkt::Ipv4Opts;
using testpkt::Ipv6Opts;
using testpkt::kNaOverride;
using testpkt::kNaRouter;
using testpkt::kNaSolicited;
using testpkt::mac;

namespace {

const Mac kBroadcast = mac("ff:ff:ff:ff:ff:ff");
constexpr uint16_t kArpRequest = 1, kArpReply = 2;

// ARP request from `s` (broadcast), and the proxy reply the port sends back.
Packet arp_l2(const SubDef& s, const Mac& dst) {
  return Packet().eth(dst, s.mac).qinq(s.port->tpid, s.svid, s.cvid);
}

Bytes arp_request(const SubDef& s, const Ip4& sender, const Ip4& target) {
  return arp_l2(s, kBroadcast).arp(kArpRequest, s.mac, sender, Mac{}, target).build();
}

Bytes arp_reply(const SubDef& s, const Ip4& target) {
  return to_sub(s).arp(kArpReply, s.port->mac, target, s.mac, s.v4).build();
}

Ipv6Opts hop255() {
  Ipv6Opts o;
  o.hop_limit = 255;
  return o;
}

Ip6 link_local(const SubDef& s) {
  Ip6 a = ip6("fe80::");
  // modified EUI-64 of the subscriber MAC
  a.b[8] = s.mac.b[0] ^ 2;
  a.b[9] = s.mac.b[1];
  a.b[10] = s.mac.b[2];
  a.b[11] = 0xff;
  a.b[12] = 0xfe;
  a.b[13] = s.mac.b[3];
  a.b[14] = s.mac.b[4];
  a.b[15] = s.mac.b[5];
  return a;
}

Mac solicited_node_mac(const Ip6& target) {
  return Mac{{0x33, 0x33, 0xff, target.b[13], target.b[14], target.b[15]}};
}

Ip6 solicited_node(const Ip6& target) {
  Ip6 a = ip6("ff02::1:ff00:0");
  a.b[13] = target.b[13];
  a.b[14] = target.b[14];
  a.b[15] = target.b[15];
  return a;
}

// NS from `s` (multicast to the solicited-node group) and the NA answer.
Bytes ns_multicast(const SubDef& s, const Ip6& src, const Ip6& target, Ipv6Opts o = hop255()) {
  return Packet()
      .eth(solicited_node_mac(target), s.mac)
      .qinq(s.port->tpid, s.svid, s.cvid)
      .ipv6(src, solicited_node(target), o)
      .icmp6_ns(target, s.mac)
      .build();
}

Bytes na_answer(const SubDef& s, const Ip6& to, const Ip6& target) {
  return to_sub(s)
      .ipv6(target, to, hop255())
      .icmp6_na(target, kNaRouter | kNaSolicited | kNaOverride, s.port->mac)
      .build();
}

Step tx_na(const SubDef& s, Bytes in, const Ip6& to, const Ip6& target) {
  return access(*s.port, std::move(in), XDP_TX, XBNG_TX_NEIGH_ADVERT)
      .expect_out(na_answer(s, to, target));
}

Row drop_row(std::string desc, const PortDef& port, Bytes in, int reason) {
  return row(std::move(desc), access(port, std::move(in), XDP_DROP, reason));
}

ExpectedEvent unknown_event(const PortDef& p, uint16_t svid, uint16_t cvid, const Mac& m) {
  return {XBNG_EVENT_UNKNOWN_SUBSCRIBER, &p, svid, cvid, m};
}

struct xbng_sub_key unknown_key(const PortDef& p, uint16_t svid, uint16_t cvid) {
  struct xbng_sub_key k {};
  k.ifindex = (uint32_t)Harness::get().ifindex(p.name);
  k.outer_vid = svid;
  k.inner_vid = cvid;
  return k;
}

}  // namespace

std::vector<Row> control_rows() {
  std::vector<Row> rows;
  const SubDef& s1 = kS1;
  auto add = [&rows](Row r) { rows.push_back(std::move(r)); };

  // ---- proxy ARP ------------------------------------------------------------------
  add(row("ARP for the gateway answered with the port MAC",
          access(kAcc0, arp_request(s1, s1.v4, kAcc0.gw4), XDP_TX, XBNG_TX_ARP_REPLY)
              .expect_out(arp_reply(s1, kAcc0.gw4))));
  add(row("ARP for an arbitrary address answered (proxy ARP)",
          access(kAcc0, arp_request(s1, s1.v4, ip4("198.51.100.200")), XDP_TX, XBNG_TX_ARP_REPLY)
              .expect_out(arp_reply(s1, ip4("198.51.100.200")))));
  add(row("ARP for another subscriber answered (no direct path between subscribers)",
          access(kAcc0, arp_request(s1, s1.v4, kS2.v4), XDP_TX, XBNG_TX_ARP_REPLY)
              .expect_out(arp_reply(s1, kS2.v4))));
  add(row(
      "ARP unicast to the port MAC answered",
      access(kAcc0,
             arp_l2(s1, kAcc0.mac).arp(kArpRequest, s1.mac, s1.v4, kAcc0.mac, kAcc0.gw4).build(),
             XDP_TX, XBNG_TX_ARP_REPLY)
          .expect_out(arp_reply(s1, kAcc0.gw4))));
  add(row("ARP with Ethernet padding answered padding kept",
          access(kAcc0,
                 arp_l2(s1, kBroadcast)
                     .arp(kArpRequest, s1.mac, s1.v4, Mac{}, kAcc0.gw4)
                     .payload(18, 0)
                     .build(),
                 XDP_TX, XBNG_TX_ARP_REPLY)
              .expect_out(to_sub(s1)
                              .arp(kArpReply, kAcc0.mac, kAcc0.gw4, s1.mac, s1.v4)
                              .payload(18, 0)
                              .build())));
  add(row("ARP on a 0x8100 port answered with its tags and MAC",
          access(kAcc1, arp_request(kS3, kS3.v4, kAcc1.gw4), XDP_TX, XBNG_TX_ARP_REPLY)
              .expect_out(arp_reply(kS3, kAcc1.gw4))));
  add(row("ARP on a 0x9100 port answered with its tags and MAC",
          access(kAcc2, arp_request(kS4, kS4.v4, kAcc2.gw4), XDP_TX, XBNG_TX_ARP_REPLY)
              .expect_out(arp_reply(kS4, kAcc2.gw4))));
  add(drop_row("ARP for the subscriber own address (gratuitous)", kAcc0,
               arp_request(s1, s1.v4, s1.v4), XBNG_DROP_ARP_OWN_ADDRESS));
  add(drop_row("ARP with a wrong sender address", kAcc0, arp_request(s1, kS2.v4, kAcc0.gw4),
               XBNG_DROP_ARP_SPOOFED));
  add(drop_row("ARP probe from 0.0.0.0", kAcc0, arp_request(s1, ip4("0.0.0.0"), s1.v4),
               XBNG_DROP_ARP_SPOOFED));
  add(drop_row("ARP from a subscriber without IPv4", kAcc0,
               arp_request(kS7V6Only, ip4("0.0.0.0"), kAcc0.gw4), XBNG_DROP_ARP_SPOOFED));
  add(drop_row("ARP reply from a subscriber", kAcc0,
               arp_l2(s1, kAcc0.mac).arp(kArpReply, s1.mac, s1.v4, kAcc0.mac, kAcc0.gw4).build(),
               XBNG_DROP_ARP_OTHER));
  {
    Bytes f = arp_request(s1, s1.v4, kAcc0.gw4);
    f[22 + 2] = 0x86;  // ptype IPv6
    f[22 + 3] = 0xdd;
    add(drop_row("ARP with a non-IPv4 protocol type", kAcc0, f, XBNG_DROP_ARP_OTHER));
    f = arp_request(s1, s1.v4, kAcc0.gw4);
    f[22 + 4] = 8;  // hlen
    add(drop_row("ARP with hardware length 8", kAcc0, f, XBNG_DROP_ARP_OTHER));
    Bytes full = arp_request(s1, s1.v4, kAcc0.gw4);
    add(drop_row("truncated ARP", kAcc0, truncate(full, 22 + 27), XBNG_DROP_TRUNCATED));
    add(drop_row("truncated ARP fixed part", kAcc0, truncate(full, 22 + 7), XBNG_DROP_TRUNCATED));
  }

  // ---- ND -------------------------------------------------------------------------
  const Ip6 fe80_1 = ip6("fe80::1");
  const Ip6 ll1 = link_local(s1);
  add(row("NS for fe80::1 answered with NA",
          tx_na(s1, ns_multicast(s1, ll1, fe80_1), ll1, fe80_1)));
  add(row("NS for the global gateway answered with NA",
          tx_na(s1, ns_multicast(s1, ll1, kAcc0.gw6), ll1, kAcc0.gw6)));
  add(row("NS for the global gateway from the global address unicast without option (frame grows)",
          tx_na(s1, from_sub(s1).ipv6(s1.v6, kAcc0.gw6, hop255()).icmp6_ns(kAcc0.gw6).build(),
                s1.v6, kAcc0.gw6)));
  {
    // Source link-layer option plus a nonce option: the NA is shorter.
    testpkt::Bytes body(4, 0);
    body.insert(body.end(), fe80_1.b.begin(), fe80_1.b.end());
    body.insert(body.end(), {1, 1});
    body.insert(body.end(), s1.mac.b.begin(), s1.mac.b.end());
    body.insert(body.end(), {14, 1, 1, 2, 3, 4, 5, 6});
    add(row("NS with two options answered (frame shrinks)",
            tx_na(s1,
                  Packet()
                      .eth(solicited_node_mac(fe80_1), s1.mac)
                      .qinq(0x88a8, 100, 200)
                      .ipv6(ll1, solicited_node(fe80_1), hop255())
                      .icmp6(135, 0, body)
                      .build(),
                  ll1, fe80_1)));
  }
  add(row("NS on a 0x8100 port answered with its tags and MAC",
          tx_na(kS3, ns_multicast(kS3, link_local(kS3), kAcc1.gw6), link_local(kS3), kAcc1.gw6)));
  add(row("NS on a 0x9100 port for fe80::1 answered",
          tx_na(kS4, ns_multicast(kS4, link_local(kS4), fe80_1), link_local(kS4), fe80_1)));
  add(drop_row("NS for another target", kAcc0, ns_multicast(s1, ll1, kS2.v6), XBNG_DROP_ND_OTHER));
  add(drop_row("NS for the subscriber own address", kAcc0, ns_multicast(s1, ll1, s1.v6),
               XBNG_DROP_ND_OTHER));
  add(drop_row("NS for another port gateway", kAcc0, ns_multicast(s1, ll1, kAcc1.gw6),
               XBNG_DROP_ND_OTHER));
  add(drop_row("NS for :: on a port without a global gateway", kAcc3,
               ns_multicast(kS6Acc3, link_local(kS6Acc3), ip6("::")), XBNG_DROP_ND_OTHER));
  add(drop_row("NS with hop limit 64", kAcc0, ns_multicast(s1, ll1, fe80_1, hlim6(64)),
               XBNG_DROP_ND_OTHER));
  add(drop_row("NS from the unspecified address (DAD)", kAcc0, ns_multicast(s1, ip6("::"), fe80_1),
               XBNG_DROP_ND_OTHER));
  {
    testpkt::Bytes body(4, 0);
    body.insert(body.end(), fe80_1.b.begin(), fe80_1.b.end());
    add(drop_row("NS with code 1", kAcc0,
                 Packet()
                     .eth(solicited_node_mac(fe80_1), s1.mac)
                     .qinq(0x88a8, 100, 200)
                     .ipv6(ll1, solicited_node(fe80_1), hop255())
                     .icmp6(135, 1, body)
                     .build(),
                 XBNG_DROP_ND_OTHER));
  }
  add(drop_row("NA from a subscriber", kAcc0,
               Packet()
                   .eth(mac("33:33:00:00:00:01"), s1.mac)
                   .qinq(0x88a8, 100, 200)
                   .ipv6(ll1, ip6("ff02::1"), hop255())
                   .icmp6_na(s1.v6, kNaOverride, s1.mac)
                   .build(),
               XBNG_DROP_ND_OTHER));
  add(drop_row("RA from a subscriber", kAcc0,
               Packet()
                   .eth(mac("33:33:00:00:00:01"), s1.mac)
                   .qinq(0x88a8, 100, 200)
                   .ipv6(ll1, ip6("ff02::1"), hop255())
                   .icmp6(134, 0, testpkt::Bytes(12, 0))
                   .build(),
               XBNG_DROP_ND_OTHER));
  // Router Solicitations: rows_punt.cpp (punted to xbngd).
  {
    Bytes ns = ns_multicast(s1, ll1, fe80_1);
    add(drop_row("truncated NS inside the target", kAcc0,
                 Packet()
                     .eth(solicited_node_mac(fe80_1), s1.mac)
                     .qinq(0x88a8, 100, 200)
                     .ipv6(ll1, solicited_node(fe80_1), hop255())
                     .icmp6(135, 0, testpkt::Bytes(10, 0))
                     .build(),
                 XBNG_DROP_TRUNCATED));
    Ipv6Opts o = hop255();
    o.next_header = testpkt::kProtoIcmpv6;
    add(drop_row("truncated ICMPv6 header", kAcc0,
                 from_sub(s1).ipv6(ll1, fe80_1, o).payload(2).build(), XBNG_DROP_TRUNCATED));
    add(drop_row("truncated NS frame cut after the IPv6 header", kAcc0, truncate(ns, 22 + 40),
                 XBNG_DROP_TRUNCATED));
    add(drop_row("truncated NS frame cut inside the ICMPv6 header", kAcc0,
                 truncate(ns, 22 + 40 + 3), XBNG_DROP_TRUNCATED));
  }

  // DHCP: rows_punt.cpp (punted to xbngd).

  // ---- unknown subscribers and their events -----------------------------------------------
  {
    const Mac um = mac("02:00:00:09:09:09");
    Bytes f = udp4(Packet().eth(kAcc0.mac, um).qinq(0x88a8, 999, 998), ip4("100.64.9.9"), kRemote4);
    Step first =
        access(kAcc0, f, XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
            .count(XBNG_EVENT_SENT)
            .event(unknown_event(kAcc0, 999, 998, um))
            .post([](Harness& h) { EXPECT_TRUE(h.unknown_seen(unknown_key(kAcc0, 999, 998))); });
    Step again =
        access(kAcc0, f, XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER).count(XBNG_EVENT_SUPPRESSED);
    Step later = Step(first).pre([](Harness& h) {
      h.set_unknown_seen(unknown_key(kAcc0, 999, 998), Harness::now_ns() - 2000000000ull);
    });
    add(row("unknown subscriber reported then rate limited per key then reported again",
            {first, again, again, later, again}));

    Bytes g = udp4(Packet().eth(kAcc0.mac, um).qinq(0x88a8, 999, 997), ip4("100.64.9.9"), kRemote4);
    add(row("two unknown keys each reported",
            {first, access(kAcc0, g, XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
                        .count(XBNG_EVENT_SENT)
                        .event(unknown_event(kAcc0, 999, 997, um))}));

    Step exhausted = access(kAcc0, f, XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
                         .count(XBNG_EVENT_SUPPRESSED)
                         .pre([](Harness& h) {
                           h.set_event_budget(Harness::now_ns(), XBNG_DEFAULT_EVENTS_PER_SEC);
                         })
                         .post([](Harness& h) {
                           // not marked: reported once the budget allows
                           EXPECT_FALSE(h.unknown_seen(unknown_key(kAcc0, 999, 998)));
                         });
    Step next_window = Step(first).pre([](Harness& h) {
      h.set_event_budget(Harness::now_ns() - 2000000000ull, XBNG_DEFAULT_EVENTS_PER_SEC);
    });
    add(row("unknown subscriber with the CPU event budget spent then a new window",
            {exhausted, next_window}));

    Bytes arp = Packet()
                    .eth(kBroadcast, um)
                    .qinq(0x8100, 4094, 1)
                    .arp(1, um, ip4("100.65.9.9"), Mac{}, kAcc1.gw4)
                    .build();
    add(row("unknown subscriber ARP on a 0x8100 port",
            access(kAcc1, arp, XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
                .count(XBNG_EVENT_SENT)
                .event(unknown_event(kAcc1, 4094, 1, um))));
    add(row(
        "known VLANs on another port are unknown",
        access(kAcc1, udp4(Packet().eth(kAcc1.mac, s1.mac).qinq(0x8100, 100, 200), s1.v4, kRemote4),
               XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
            .count(XBNG_EVENT_SENT)
            .event(unknown_event(kAcc1, 100, 200, s1.mac))));
  }

  // ---- MAC learning -------------------------------------------------------------------------
  {
    const SubDef& s5 = kS5Learn;
    auto down4 = udp4(plain(kUp0.mac, kRouterMac), kRemote4, s5.v4);
    auto down6 = udp6(plain(kUp0.mac, kRouterMac), kRemote6, s5.v6);
    Step unknown_mac = uplink(down4, XDP_DROP, XBNG_DROP_MAC_UNKNOWN);
    Step learn = access(kAcc0, udp4(from_sub(s5), s5.v4, kRemote4), XDP_REDIRECT, XBNG_FWD_UPSTREAM)
                     .expect_out(udp4(plain(kRouterMac, kUp0.mac), s5.v4, kRemote4, ttl4(63)))
                     .via(kUp0)
                     .up("s5")
                     .count(XBNG_EVENT_SENT)
                     .event({XBNG_EVENT_MAC_LEARNED, &kAcc0, 100, 210, s5.mac})
                     .post([](Harness& h) {
                       struct xbng_subscriber v = h.subscriber(kS5Learn);
                       EXPECT_TRUE(v.flags & XBNG_SUB_F_MAC_VALID);
                       EXPECT_TRUE(v.flags & XBNG_SUB_F_LEARN_MAC);
                       EXPECT_EQ(0, memcmp(v.mac, kS5Learn.mac.b.data(), 6));
                       // the route learns lazily, on its first downstream use
                       EXPECT_FALSE(h.route("r4-s5").flags & XBNG_ROUTE_F_MAC_VALID);
                     });
    Step down = uplink(down4, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                    .expect_out(udp4(to_sub(s5), kRemote4, s5.v4, ttl4(63)))
                    .via(kAcc0)
                    .down("r4-s5")
                    .post([](Harness& h) {
                      struct xbng_route r = h.route("r4-s5");
                      EXPECT_TRUE(r.flags & XBNG_ROUTE_F_MAC_VALID);
                      EXPECT_EQ(0, memcmp(r.mac, kS5Learn.mac.b.data(), 6));
                    });
    Step down_v6 = uplink(down6, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                       .expect_out(udp6(to_sub(s5), kRemote6, s5.v6, hlim6(63)))
                       .via(kAcc0)
                       .down("r6-s5");
    Step again = access(kAcc0, udp6(from_sub(s5), s5.v6, kRemote6), XDP_REDIRECT, XBNG_FWD_UPSTREAM)
                     .expect_out(udp6(plain(kRouterMac, kUp0.mac), s5.v6, kRemote6, hlim6(63)))
                     .via(kUp0)
                     .up("s5");
    add(row("learned MAC: unknown downstream then learned upstream then forwarded downstream",
            {unknown_mac, learn, down, down_v6, again, down}));

    Step spoofed =
        access(kAcc0, udp4(from_sub(s5), kS1.v4, kRemote4), XDP_DROP, XBNG_DROP_SPOOFED_V4)
            .post([](Harness& h) {
              EXPECT_FALSE(h.subscriber(kS5Learn).flags & XBNG_SUB_F_MAC_VALID);
            });
    Step not_ours =
        access(kAcc0,
               udp4(Packet().eth(kBroadcast, s5.mac).qinq(0x88a8, 100, 210), s5.v4, kRemote4),
               XDP_DROP, XBNG_DROP_NOT_OUR_MAC)
            .post([](Harness& h) {
              EXPECT_FALSE(h.subscriber(kS5Learn).flags & XBNG_SUB_F_MAC_VALID);
            });
    add(row("learned MAC: invalid frames teach nothing", {spoofed, not_ours, unknown_mac}));

    add(row("learned MAC from an ARP request",
            {access(kAcc0, arp_request(s5, s5.v4, kAcc0.gw4), XDP_TX, XBNG_TX_ARP_REPLY)
                 .expect_out(to_sub(s5).arp(kArpReply, kAcc0.mac, kAcc0.gw4, s5.mac, s5.v4).build())
                 .count(XBNG_EVENT_SENT)
                 .event({XBNG_EVENT_MAC_LEARNED, &kAcc0, 100, 210, s5.mac}),
             down}));
    add(row("learned MAC: ARP with a wrong sender teaches nothing",
            {access(kAcc0, arp_request(s5, kS1.v4, kAcc0.gw4), XDP_DROP, XBNG_DROP_ARP_SPOOFED),
             unknown_mac}));
  }
  return rows;
}

}  // namespace bpftest
