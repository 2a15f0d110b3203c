// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Upstream (xdp_access): tags, subscriber lookup, anti-spoofing, TTL, FIB.
#include "harness.h"

namespace bpftest {

using testpkt::ip4;
using testpkt::ip6;
using testpkt::Ipv4Opts;
using testpkt::Ipv6Opts;
using testpkt::mac;

namespace {

// What the uplink router receives: untagged, our uplink MAC -> the router.
Packet to_router() { return plain(kRouterMac, kUp0.mac); }

// Frame handed to the kernel: tags removed, MACs as received.
Packet untagged_from(const SubDef& s) { return plain(s.port->mac, s.mac); }

// Forwarded upstream: the output is the same datagram, untagged, with new
// MACs and TTL - 1 (checksum recomputed by the builder).
Row fwd4(std::string desc, const SubDef& s, const Ip4& src, const Ip4& dst, Ipv4Opts o = {}) {
  Bytes in = udp4(from_sub(s), src, dst, o);
  Ipv4Opts w = o;
  w.ttl = (uint8_t)(o.ttl - 1);
  return row(std::move(desc), access(*s.port, in, XDP_REDIRECT, XBNG_FWD_UPSTREAM)
                                  .expect_out(udp4(to_router(), src, dst, w))
                                  .via(kUp0)
                                  .up(s.name));
}

Row fwd6(std::string desc, const SubDef& s, const Ip6& src, const Ip6& dst, Ipv6Opts o = {}) {
  Bytes in = udp6(from_sub(s), src, dst, o);
  Ipv6Opts w = o;
  w.hop_limit = (uint8_t)(o.hop_limit - 1);
  return row(std::move(desc), access(*s.port, in, XDP_REDIRECT, XBNG_FWD_UPSTREAM)
                                  .expect_out(udp6(to_router(), src, dst, w))
                                  .via(kUp0)
                                  .up(s.name));
}

Row drop_row(std::string desc, const PortDef& port, Bytes in, int reason) {
  return row(std::move(desc), access(port, std::move(in), XDP_DROP, reason));
}

// Subscribers in the direct array (acc2 S-VLANs 520-521): forwarded and
// counted in their slot, anti-spoofing on the slot's addresses, an empty
// slot and a hash entry the range hides unknown, a MAC learned in the slot
// and read by the downstream route.
std::vector<Row> direct_sub_rows() {
  std::vector<Row> rows;
  const SubDef& s8 = kS8Direct;
  rows.push_back(
      fwd4("direct subscriber: IPv4 forwarded, counted in its slot", s8, s8.v4, kRemote4));
  rows.push_back(fwd6("direct subscriber: IPv6 forwarded", s8, s8.v6, kRemote6));
  rows.push_back(drop_row("direct subscriber: IPv4 from another's address (anti-spoofing)", kAcc2,
                          udp4(from_sub(s8), kS4.v4, kRemote4), XBNG_DROP_SPOOFED_V4));
  rows.push_back(drop_row("direct subscriber: IPv6 from another's address (anti-spoofing)", kAcc2,
                          udp6(from_sub(s8), kS4.v6, kRemote6), XBNG_DROP_SPOOFED_V6));
  rows.push_back(row(
      "direct range: an empty slot is an unknown subscriber",
      access(kAcc2, udp4(Packet().eth(kAcc2.mac, s8.mac).qinq(kAcc2.tpid, 520, 8), s8.v4, kRemote4),
             XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
          .count(XBNG_EVENT_SENT)
          .event({XBNG_EVENT_UNKNOWN_SUBSCRIBER, &kAcc2, 520, 8, s8.mac})));
  rows.push_back(row("direct range: a hash entry inside it is not looked up",
                     access(kAcc2, udp4(from_sub(kS9Hidden), kS9Hidden.v4, kRemote4), XDP_DROP,
                            XBNG_DROP_UNKNOWN_SUBSCRIBER)
                         .count(XBNG_EVENT_SENT)
                         .event({XBNG_EVENT_UNKNOWN_SUBSCRIBER, &kAcc2, 521, 9, kS9Hidden.mac})));
  rows.push_back(row(
      "direct range: the same S-VLAN on another port is on the hash path",
      access(kAcc0, udp4(Packet().eth(kAcc0.mac, s8.mac).qinq(kAcc0.tpid, 520, 7), s8.v4, kRemote4),
             XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
          .count(XBNG_EVENT_SENT)
          .event({XBNG_EVENT_UNKNOWN_SUBSCRIBER, &kAcc0, 520, 7, s8.mac})));
  const SubDef& s10 = kS10DirectLearn;
  auto down4 = udp4(plain(kUp0.mac, kRouterMac), kRemote4, s10.v4);
  Step unknown_mac = uplink(down4, XDP_DROP, XBNG_DROP_MAC_UNKNOWN);
  Step learn = access(kAcc2, udp4(from_sub(s10), s10.v4, kRemote4), XDP_REDIRECT, XBNG_FWD_UPSTREAM)
                   .expect_out(udp4(to_router(), s10.v4, kRemote4, ttl4(63)))
                   .via(kUp0)
                   .up("s10")
                   .count(XBNG_EVENT_SENT)
                   .event({XBNG_EVENT_MAC_LEARNED, &kAcc2, 521, 4000, s10.mac})
                   .post([](Harness& h) {
                     struct xbng_subscriber v = h.subscriber(kS10DirectLearn);
                     EXPECT_TRUE(v.flags & XBNG_SUB_F_MAC_VALID);
                     EXPECT_TRUE(v.flags & XBNG_SUB_F_PRESENT);
                     EXPECT_EQ(0, memcmp(v.mac, kS10DirectLearn.mac.b.data(), 6));
                   });
  Step down = uplink(down4, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                  .expect_out(udp4(to_sub(s10), kRemote4, s10.v4, ttl4(63)))
                  .via(kAcc2)
                  .down("r4-s10");
  rows.push_back(row("direct subscriber: MAC learned in its slot, the route takes it from there",
                     {unknown_mac, learn, down}));
  return rows;
}

}  // namespace

std::vector<Row> upstream_rows() {
  std::vector<Row> rows;
  const SubDef& s1 = kS1;
  auto add = [&rows](Row r) { rows.push_back(std::move(r)); };

  // ---- forwarded ---------------------------------------------------------
  add(fwd4("IPv4 from the subscriber address", s1, s1.v4, kRemote4));
  add(fwd4("IPv4 from the subscriber routed prefix", s1, ip4("198.51.100.9"), kRemote4));
  add(fwd6("IPv6 from the subscriber delegated /64 in a direct pool (its slot)", s1,
           ip6("2001:db8:65:109::5"), kRemote6));
  add(fwd4("IPv4 TTL 2 leaves with TTL 1", s1, s1.v4, kRemote4, ttl4(2)));
  add(fwd4("IPv4 TTL 255 checksum carry", s1, s1.v4, kRemote4, ttl4(255)));
  {
    Ipv4Opts o;
    o.options = {0x07, 0x0b, 0x04, 0, 0, 0, 0, 0, 0, 0, 0};  // record route, 2 slots
    add(fwd4("IPv4 with options", s1, s1.v4, kRemote4, o));
  }
  {
    Ipv4Opts o;
    o.tos = 0xb8;
    o.id = 0xffff;
    o.frag = 0;
    add(fwd4("IPv4 DSCP EF without DF", s1, s1.v4, kRemote4, o));
  }
  add(fwd6("IPv6 from the subscriber /128", s1, s1.v6, kRemote6));
  add(fwd6("IPv6 from the delegated /64", s1, ip6("2001:db8:6401:1::99"), kRemote6));
  add(fwd6("IPv6 from the delegated /56", s1, ip6("2001:db8:5600:ab::1"), kRemote6));
  add(fwd6("IPv6 hop limit 2 leaves with 1", s1, s1.v6, kRemote6, hlim6(2)));
  {
    Ipv6Opts o;
    o.traffic_class = 0xb8;
    o.flow_label = 0x12345;
    add(fwd6("IPv6 with traffic class and flow label", s1, s1.v6, kRemote6, o));
  }
  add(fwd4("outer TPID 0x8100 port", kS3, kS3.v4, kRemote4));
  add(fwd4("outer TPID 0x9100 port", kS4, kS4.v4, kRemote4));
  add(fwd6("outer TPID 0x8100 port IPv6", kS3, kS3.v6, kRemote6));
  add(fwd6("outer TPID 0x9100 port IPv6", kS4, kS4.v6, kRemote6));
  add(row("ICMPv4 echo is forwarded",
          access(kAcc0, from_sub(s1).ipv4(s1.v4, kRemote4).icmp_echo(7, 1).payload(8).build(),
                 XDP_REDIRECT, XBNG_FWD_UPSTREAM)
              .expect_out(
                  to_router().ipv4(s1.v4, kRemote4, ttl4(63)).icmp_echo(7, 1).payload(8).build())
              .via(kUp0)
              .up("s1")));
  add(row("ICMPv6 echo is forwarded not ND",
          access(kAcc0, from_sub(s1).ipv6(s1.v6, kRemote6).icmp6_echo(7, 1).payload(8).build(),
                 XDP_REDIRECT, XBNG_FWD_UPSTREAM)
              .expect_out(
                  to_router().ipv6(s1.v6, kRemote6, hlim6(63)).icmp6_echo(7, 1).payload(8).build())
              .via(kUp0)
              .up("s1")));
  add(row("TCP SYN is forwarded",
          access(kAcc0, from_sub(s1).ipv4(s1.v4, kRemote4).tcp_syn(50000, 80).build(), XDP_REDIRECT,
                 XBNG_FWD_UPSTREAM)
              .expect_out(to_router().ipv4(s1.v4, kRemote4, ttl4(63)).tcp_syn(50000, 80).build())
              .via(kUp0)
              .up("s1")));

  // ---- tags ---------------------------------------------------------------
  auto l3 = [&](Packet p) { return udp4(std::move(p), s1.v4, kRemote4); };
  const Mac& m = s1.mac;
  add(drop_row("untagged", kAcc0, l3(plain(kAcc0.mac, m)), XBNG_DROP_UNTAGGED));
  add(drop_row("untagged ARP", kAcc0,
               plain(mac("ff:ff:ff:ff:ff:ff"), m).arp(1, m, s1.v4, Mac{}, kAcc0.gw4).build(),
               XBNG_DROP_UNTAGGED));
  add(drop_row("single tag 0x88a8", kAcc0, l3(plain(kAcc0.mac, m).vlan(0x88a8, 100)),
               XBNG_DROP_SINGLE_TAG));
  add(drop_row("single tag 0x8100", kAcc0, l3(plain(kAcc0.mac, m).vlan(0x8100, 100)),
               XBNG_DROP_SINGLE_TAG));
  add(drop_row("single tag on a 0x8100 port", kAcc1, l3(plain(kAcc1.mac, m).vlan(0x8100, 300)),
               XBNG_DROP_SINGLE_TAG));
  add(drop_row("three tags", kAcc0, l3(plain(kAcc0.mac, m).qinq(0x88a8, 100, 200).vlan(0x8100, 5)),
               XBNG_DROP_TOO_MANY_TAGS));
  add(drop_row("three tags all 0x88a8", kAcc0,
               l3(plain(kAcc0.mac, m).vlan(0x88a8, 100).vlan(0x88a8, 200).vlan(0x88a8, 5)),
               XBNG_DROP_TOO_MANY_TAGS));
  add(drop_row("outer 0x8100 on a 0x88a8 port", kAcc0,
               l3(plain(kAcc0.mac, m).qinq(0x8100, 100, 200)), XBNG_DROP_WRONG_OUTER_TPID));
  add(drop_row("outer 0x9100 on a 0x88a8 port", kAcc0,
               l3(plain(kAcc0.mac, m).qinq(0x9100, 100, 200)), XBNG_DROP_WRONG_OUTER_TPID));
  add(drop_row("outer 0x88a8 on a 0x8100 port", kAcc1,
               l3(plain(kAcc1.mac, m).qinq(0x88a8, 300, 400)), XBNG_DROP_WRONG_OUTER_TPID));
  add(drop_row("outer 0x88a8 on a 0x9100 port", kAcc2,
               l3(plain(kAcc2.mac, m).qinq(0x88a8, 500, 600)), XBNG_DROP_WRONG_OUTER_TPID));
  add(drop_row("inner 0x88a8", kAcc0, l3(plain(kAcc0.mac, m).vlan(0x88a8, 100).vlan(0x88a8, 200)),
               XBNG_DROP_WRONG_INNER_TPID));
  add(drop_row("inner 0x9100", kAcc0, l3(plain(kAcc0.mac, m).vlan(0x88a8, 100).vlan(0x9100, 200)),
               XBNG_DROP_WRONG_INNER_TPID));
  add(drop_row("inner 0x88a8 on a 0x8100 port", kAcc1,
               l3(plain(kAcc1.mac, m).vlan(0x8100, 300).vlan(0x88a8, 400)),
               XBNG_DROP_WRONG_INNER_TPID));
  add(row("PCP bits are not part of the key",
          access(kAcc0, l3(plain(kAcc0.mac, m).vlan(0x88a8, 100, 5).vlan(0x8100, 200, 3)),
                 XDP_REDIRECT, XBNG_FWD_UPSTREAM)
              .expect_out(udp4(to_router(), s1.v4, kRemote4, ttl4(63)))
              .via(kUp0)
              .up("s1")));

  // ---- truncation at every header boundary --------------------------------
  {
    Bytes v4 = udp4(from_sub(s1), s1.v4, kRemote4);
    Ipv4Opts o;
    o.options = {0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01};  // 8 NOPs
    Bytes v4opt = udp4(from_sub(s1), s1.v4, kRemote4, o);
    Bytes v6 = udp6(from_sub(s1), s1.v6, kRemote6);
    struct Cut {
      const char* desc;
      const Bytes* f;
      size_t len;
    } cuts[] = {
        {"Ethernet header only", &v4, 14},
        {"inside the outer tag", &v4, 16},
        {"after the outer tag", &v4, 18},
        {"inside the inner tag", &v4, 20},
        {"after the inner tag TCI", &v4, 21},
        {"after the inner ethertype", &v4, 22},
        {"inside the IPv4 header", &v4, 22 + 19},
        {"after the IPv4 header", &v4, 22 + 20},
        {"inside the IPv4 payload", &v4, 22 + 20 + 7},
        {"inside IPv4 options", &v4opt, 22 + 20 + 4},
        {"after IPv4 options", &v4opt, 22 + 28},
        {"inside the IPv6 header", &v6, 22 + 39},
        {"after the IPv6 header", &v6, 22 + 40},
        {"inside the IPv6 payload", &v6, 22 + 40 + 8},
    };
    for (auto& c : cuts)
      add(drop_row(std::string("truncated ") + c.desc, kAcc0, truncate(*c.f, c.len),
                   XBNG_DROP_TRUNCATED));
    // Headers that fit, lengths that say so, L4 too short for its check.
    Bytes v4udp = from_sub(s1)
                      .ipv4(s1.v4, kRemote4,
                            [] {
                              Ipv4Opts x;
                              x.protocol = testpkt::kProtoUdp;
                              return x;
                            }())
                      .payload(4)
                      .build();
    add(drop_row("truncated UDP header IPv4", kAcc0, v4udp, XBNG_DROP_TRUNCATED));
    Bytes v6udp = from_sub(s1)
                      .ipv6(s1.v6, kRemote6,
                            [] {
                              Ipv6Opts x;
                              x.next_header = testpkt::kProtoUdp;
                              return x;
                            }())
                      .payload(4)
                      .build();
    add(drop_row("truncated UDP header IPv6", kAcc0, v6udp, XBNG_DROP_TRUNCATED));
  }

  // ---- malformed IP ---------------------------------------------------------
  {
    Bytes f = udp4(from_sub(s1), s1.v4, kRemote4);
    f[22] = 0x55;  // version 5
    add(drop_row("IPv4 ethertype with version 5", kAcc0, f, XBNG_DROP_BAD_IP_HEADER));
    f = udp4(from_sub(s1), s1.v4, kRemote4);
    f[22] = 0x44;  // IHL 4
    add(drop_row("IPv4 IHL 4", kAcc0, f, XBNG_DROP_BAD_IP_HEADER));
    f = udp4(from_sub(s1), s1.v4, kRemote4);
    f[24] = 0;
    f[25] = 19;  // total length < header
    testpkt::set_ipv4_header_checksum(f, 22);
    add(drop_row("IPv4 total length below IHL", kAcc0, f, XBNG_DROP_BAD_IP_HEADER));
    f = udp6(from_sub(s1), s1.v6, kRemote6);
    f[22] = 0x40;  // version 4 in an IPv6 frame
    add(drop_row("IPv6 ethertype with version 4", kAcc0, f, XBNG_DROP_BAD_IP_HEADER));
    add(drop_row("unsupported ethertype inside QinQ", kAcc0,
                 from_sub(s1).ethertype(0x88cc).payload(46).build(), XBNG_DROP_UNSUPPORTED_L3));
  }

  // ---- addresses ------------------------------------------------------------
  add(drop_row("spoofed IPv4 another subscriber address", kAcc0,
               udp4(from_sub(s1), kS2.v4, kRemote4), XBNG_DROP_SPOOFED_V4));
  add(drop_row("spoofed IPv4 inside another subscriber routed prefix", kAcc0,
               udp4(from_sub(s1), ip4("198.51.100.100"), kRemote4), XBNG_DROP_SPOOFED_V4));
  add(drop_row("spoofed IPv4 random source", kAcc0, udp4(from_sub(s1), ip4("192.0.2.77"), kRemote4),
               XBNG_DROP_SPOOFED_V4));
  add(drop_row("spoofed IPv4 from a subscriber without prefixes", kAcc1,
               udp4(from_sub(kS3), ip4("198.51.100.9"), kRemote4), XBNG_DROP_SPOOFED_V4));
  add(drop_row("IPv4 from a subscriber without IPv4", kAcc0,
               udp4(from_sub(kS7V6Only), ip4("0.0.0.0"), kRemote4), XBNG_DROP_SPOOFED_V4));
  add(drop_row("spoofed IPv6 another subscriber /128", kAcc0, udp6(from_sub(s1), kS2.v6, kRemote6),
               XBNG_DROP_SPOOFED_V6));
  add(drop_row("spoofed IPv6 random source", kAcc0,
               udp6(from_sub(s1), ip6("2001:db8:77::1"), kRemote6), XBNG_DROP_SPOOFED_V6));
  add(drop_row("spoofed IPv6 another subscriber /64 inside own /56", kAcc0,
               udp6(from_sub(s1), ip6("2001:db8:5600:1::5"), kRemote6), XBNG_DROP_SPOOFED_V6));
  add(drop_row("spoofed IPv6 another subscriber /64 in a direct pool", kAcc0,
               udp6(from_sub(s1), ip6("2001:db8:65:107::5"), kRemote6), XBNG_DROP_SPOOFED_V6));
  add(drop_row("spoofed IPv6 an empty /64 slot of a direct pool", kAcc0,
               udp6(from_sub(s1), ip6("2001:db8:65:10a::5"), kRemote6), XBNG_DROP_SPOOFED_V6));
  add(drop_row("spoofed IPv6 another subscriber /48", kAcc0,
               udp6(from_sub(s1), ip6("2001:db8:4800::1"), kRemote6), XBNG_DROP_SPOOFED_V6));
  add(drop_row("spoofed IPv6 from a subscriber without prefixes", kAcc1,
               udp6(from_sub(kS3), ip6("2001:db8:6401:1::99"), kRemote6), XBNG_DROP_SPOOFED_V6));
  add(drop_row("IPv6 link-local source", kAcc0,
               udp6(from_sub(s1), ip6("fe80::200:ff:fe01:1"), kRemote6), XBNG_DROP_LINK_LOCAL_SRC));
  add(drop_row("IPv4 multicast destination", kAcc0, udp4(from_sub(s1), s1.v4, ip4("224.0.0.5")),
               XBNG_DROP_MULTICAST_DST));
  add(drop_row("IPv4 limited broadcast destination", kAcc0,
               udp4(from_sub(s1), s1.v4, ip4("255.255.255.255")), XBNG_DROP_MULTICAST_DST));
  add(drop_row("IPv6 multicast destination", kAcc0, udp6(from_sub(s1), s1.v6, ip6("ff0e::1")),
               XBNG_DROP_MULTICAST_DST));
  add(drop_row(
      "IPv4 not to our MAC", kAcc0,
      udp4(plain(mac("02:00:00:00:99:99"), s1.mac).qinq(0x88a8, 100, 200), s1.v4, kRemote4),
      XBNG_DROP_NOT_OUR_MAC));
  add(drop_row(
      "IPv4 to the broadcast MAC", kAcc0,
      udp4(plain(mac("ff:ff:ff:ff:ff:ff"), s1.mac).qinq(0x88a8, 100, 200), s1.v4, kRemote4),
      XBNG_DROP_NOT_OUR_MAC));
  add(drop_row("IPv6 not to our MAC", kAcc0,
               udp6(plain(kAcc1.mac, s1.mac).qinq(0x88a8, 100, 200), s1.v6, kRemote6),
               XBNG_DROP_NOT_OUR_MAC));

  // TTL 1 and 0 get time exceeded: rows_router.cpp.

  // ---- FIB results -------------------------------------------------------------
  // Handed to the kernel: tags popped, MACs and TTL as received.
  add(row("IPv4 NO_NEIGH passed untagged",
          access(kAcc0, udp4(from_sub(s1), s1.v4, kNoNeigh4), XDP_PASS, XBNG_PASS_NO_NEIGH)
              .expect_out(udp4(untagged_from(s1), s1.v4, kNoNeigh4))
              .up("s1")));
  add(row("IPv6 NO_NEIGH passed untagged",
          access(kAcc0, udp6(from_sub(s1), s1.v6, kNoNeigh6), XDP_PASS, XBNG_PASS_NO_NEIGH)
              .expect_out(udp6(untagged_from(s1), s1.v6, kNoNeigh6))
              .up("s1")));
  add(row("NO_NEIGH on a 0x9100 port passed untagged",
          access(kAcc2, udp4(from_sub(kS4), kS4.v4, kNoNeigh4), XDP_PASS, XBNG_PASS_NO_NEIGH)
              .expect_out(udp4(untagged_from(kS4), kS4.v4, kNoNeigh4))
              .up("s4")));
  // For the host itself: dropped unless allowed (rows_hardening.cpp).
  add(drop_row("to the host own address dropped", kAcc0, udp4(from_sub(s1), s1.v4, kUplinkAddr4),
               XBNG_DROP_TO_HOST));
  {
    // Without DF (with DF: frag needed from XDP, rows_router.cpp).
    Ipv4Opts nodf;
    nodf.frag = 0;
    Bytes big = from_sub(s1).ipv4(s1.v4, kRemote4, nodf).udp(40000, 443).payload(1501 - 28).build();
    Bytes big_out =
        untagged_from(s1).ipv4(s1.v4, kRemote4, nodf).udp(40000, 443).payload(1501 - 28).build();
    add(row("larger than the uplink MTU without DF passed untagged (FRAG_NEEDED)",
            access(kAcc0, big, XDP_PASS, XBNG_PASS_FRAG_NEEDED).expect_out(big_out)));
    Bytes fits = from_sub(s1).ipv4(s1.v4, kRemote4).udp(40000, 443).payload(1500 - 28).build();
    Bytes fits_out =
        to_router().ipv4(s1.v4, kRemote4, ttl4(63)).udp(40000, 443).payload(1500 - 28).build();
    add(row("exactly the uplink MTU is forwarded",
            access(kAcc0, fits, XDP_REDIRECT, XBNG_FWD_UPSTREAM)
                .expect_out(fits_out)
                .via(kUp0)
                .up("s1")));
  }
  add(row("forwarding disabled on the access port passed untagged",
          access(kAcc0, udp4(from_sub(s1), s1.v4, kRemote4), XDP_PASS, XBNG_PASS_FWD_DISABLED)
              .expect_out(udp4(untagged_from(s1), s1.v4, kRemote4))
              .pre([](Harness&) { Harness::set_forwarding("acc0", false); })
              .post([](Harness&) { Harness::set_forwarding("acc0", true); })));
  add(drop_row("unreachable route", kAcc0, udp4(from_sub(s1), s1.v4, kUnreachable4),
               XBNG_DROP_FIB_UNREACHABLE));
  add(drop_row("blackhole route", kAcc0, udp4(from_sub(s1), s1.v4, kBlackhole4),
               XBNG_DROP_FIB_UNREACHABLE));
  add(row("uplink missing from tx_ports",
          access(kAcc0, udp4(from_sub(s1), s1.v4, kRemote4), XDP_DROP, XBNG_DROP_NO_EGRESS_PORT)
              .pre([](Harness& h) { ASSERT_TRUE(h.remove_port_entry("tx_ports", "up0")); })));

  // ---- ports -------------------------------------------------------------------
  {
    Step s = access(kUp0, udp4(from_sub(s1), s1.v4, kRemote4), XDP_DROP, XBNG_DROP_NO_PORT);
    add(row("xdp_access on an uplink port", s));
    Step t = access(kAcc0, udp4(from_sub(s1), s1.v4, kRemote4), XDP_DROP, XBNG_DROP_NO_PORT);
    t.ingress = nullptr;
    t.ingress_name = "acc0p";
    add(row("xdp_access on an unconfigured interface", t));
  }

  // ---- subscriber counters ---------------------------------------------------------
  add(row("subscriber up counters accumulate per subscriber",
          {fwd4("", s1, s1.v4, kRemote4).steps[0], fwd6("", s1, s1.v6, kRemote6).steps[0],
           fwd4("", kS2, kS2.v4, kRemote4).steps[0],
           access(kAcc0, udp4(from_sub(s1), kS2.v4, kRemote4), XDP_DROP, XBNG_DROP_SPOOFED_V4)}));
  rows.back().steps.push_back(Step(rows.back().steps[0]).post([](Harness& h) {
    struct xbng_subscriber v = h.subscriber(kS1);
    EXPECT_EQ(v.up_packets, 3u);
    EXPECT_EQ(v.up_bytes, 2 * udp4(from_sub(kS1), kS1.v4, kRemote4).size() +
                              udp6(from_sub(kS1), kS1.v6, kRemote6).size());
    EXPECT_EQ(h.subscriber(kS2).up_packets, 1u);
  }));
  for (Row& r : direct_sub_rows()) rows.push_back(std::move(r));
  return rows;
}

}  // namespace bpftest
