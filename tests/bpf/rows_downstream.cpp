// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Downstream (xdp_uplink): route lookups, tags pushed, MTU, TTL, pass-through.
#include "harness.h"

namespace bpftest {

using testpkt::ip4;
using testpkt::ip6;
using testpkt::Ipv4Opts;
using testpkt::Ipv6Opts;
using testpkt::mac;

namespace {

// From the uplink router to our uplink MAC.
Packet from_router() { return plain(kUp0.mac, kRouterMac); }

// Forwarded downstream to `s`: tags pushed (its port's TPID), MACs
// rewritten, TTL - 1 (checksum recomputed by the builder).
Row fwd4(std::string desc, const SubDef& s, const std::string& route, const Ip4& dst,
         Ipv4Opts o = {}) {
  Ipv4Opts w = o;
  w.ttl = (uint8_t)(o.ttl - 1);
  return row(std::move(desc),
             uplink(udp4(from_router(), kRemote4, dst, o), XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                 .expect_out(udp4(to_sub(s), kRemote4, dst, w))
                 .via(*s.port)
                 .down(route));
}

Row fwd6(std::string desc, const SubDef& s, const std::string& route, const Ip6& dst,
         Ipv6Opts o = {}) {
  Ipv6Opts w = o;
  w.hop_limit = (uint8_t)(o.hop_limit - 1);
  return row(std::move(desc),
             uplink(udp6(from_router(), kRemote6, dst, o), XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                 .expect_out(udp6(to_sub(s), kRemote6, dst, w))
                 .via(*s.port)
                 .down(route));
}

Row drop_row(std::string desc, Bytes in, int reason) {
  return row(std::move(desc), uplink(std::move(in), XDP_DROP, reason));
}

Row pass_row(std::string desc, Bytes in, int reason) {
  return row(std::move(desc), uplink(std::move(in), XDP_PASS, reason));
}

}  // namespace

std::vector<Row> downstream_rows() {
  std::vector<Row> rows;
  const SubDef& s1 = kS1;
  auto add = [&rows](Row r) { rows.push_back(std::move(r)); };

  // ---- forwarded ------------------------------------------------------------------
  add(fwd4("IPv4 host /32", s1, "r4-s1", s1.v4));
  add(fwd4("IPv4 host /32 on a 0x8100 port", kS3, "r4-s3", kS3.v4));
  add(fwd4("IPv4 host /32 on a 0x9100 port", kS4, "r4-s4", kS4.v4));
  add(fwd4("IPv4 routed /28 prefix", s1, "p4-s1", ip4("198.51.100.5")));
  add(fwd4("IPv4 routed /25 prefix outside the covered /28", kS2, "p4-s2", ip4("198.51.100.100")));
  add(fwd4("IPv4 TTL 2 leaves with TTL 1", s1, "r4-s1", s1.v4, ttl4(2)));
  add(fwd4("IPv4 TTL 255 checksum carry", s1, "r4-s1", s1.v4, ttl4(255)));
  {
    Ipv4Opts o;
    o.options = {0x44, 0x0c, 0x05, 0x00, 0, 0, 0, 0, 0, 0, 0, 0};  // timestamp
    add(fwd4("IPv4 with options", s1, "r4-s1", s1.v4, o));
  }
  add(fwd4("IPv4 host /32 in a direct pool (the array's slot)", kS3, "d4-s3", ip4("100.70.0.7")));
  add(fwd4("IPv4 routed /28 inside a direct pool, its slot empty: the trie", kS2, "p4d-s2",
           ip4("100.70.0.20")));
  add(fwd6("IPv6 host /128", s1, "r6-s1", s1.v6));
  // The IPv6 direct pools (harness.h): every other IPv6 row runs with their
  // table filled, on the hash path.
  add(fwd6("IPv6 delegated /64 in a direct pool of /64s (the array's slot)", kS3, "d64-s3",
           ip6("2001:db8:65:107::abcd")));
  add(fwd6("IPv6 /128 in a direct pool of /128s (the array's slot)", kS4, "d6-s4",
           ip6("2001:db8:66::7")));
  add(fwd6("IPv6 a /128 of the hash wins over the /64 slot", s1, "h6d-s1",
           ip6("2001:db8:65:108::1")));
  add(fwd6("IPv6 the /64 slot under a /128 of the hash, another address", kS2, "d64-s2",
           ip6("2001:db8:65:108::2")));
  add(fwd6("IPv6 a /128 of the hash in a /64 of the pool nobody delegated (its line counts it)",
           kS4, "h6e-s4", ip6("2001:db8:65:10a::5")));
  // u6d-s2 is in the hash inside d64-s1's /64, whose line counts no /128:
  // the line alone answers (xbngd never leaves a /128 uncounted).
  add(fwd6("IPv6 a /64 slot counting no /128 is not looked up in the /128 hash", s1, "d64-s1",
           ip6("2001:db8:65:109::1")));
  add(fwd6("IPv6 delegated /60 inside a direct pool of /64s, its slot empty: the trie", kS2,
           "p6d-s2", ip6("2001:db8:65:1f3::1")));
  add(fwd6("IPv6 host /128 outside the direct pools: the hash", kS7V6Only, "r6-s7", kS7V6Only.v6));
  add(fwd6("IPv6 host /128 on a 0x8100 port", kS3, "r6-s3", kS3.v6));
  add(fwd6("IPv6 host /128 on a 0x9100 port", kS4, "r6-s4", kS4.v6));
  add(fwd6("IPv6 delegated /64", s1, "r64-s1", ip6("2001:db8:6401:1::abcd")));
  add(fwd6("IPv6 delegated /56", s1, "p6-s1", ip6("2001:db8:5600:ff::1")));
  add(fwd6("IPv6 a /64 wins over the covering /56", kS2, "r64-s2", ip6("2001:db8:5600:1::1")));
  add(fwd6("IPv6 delegated /48", kS2, "p6-s2", ip6("2001:db8:4800:5::1")));
  add(fwd6("IPv6 hop limit 2 leaves with 1", s1, "r6-s1", s1.v6, hlim6(2)));
  add(row("ICMPv4 echo reply to a subscriber",
          uplink(from_router().ipv4(kRemote4, s1.v4).icmp_echo(1, 2).payload(16).build(),
                 XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
              .expect_out(
                  to_sub(s1).ipv4(kRemote4, s1.v4, ttl4(63)).icmp_echo(1, 2).payload(16).build())
              .via(kAcc0)
              .down("r4-s1")));
  add(row("uplink frame with Ethernet padding keeps it",
          uplink(from_router().ipv4(kRemote4, s1.v4).udp(1, 2).build(), XDP_REDIRECT,
                 XBNG_FWD_DOWNSTREAM)
              .expect_out(to_sub(s1).ipv4(kRemote4, s1.v4, ttl4(63)).udp(1, 2).build())
              .via(kAcc0)
              .down("r4-s1")));
  {
    // 14 + 28 = 42 bytes padded to 60: the padding travels along.
    Bytes in = from_router().ipv4(kRemote4, s1.v4).udp(1, 2).build();
    in.resize(60, 0);
    Bytes out = to_sub(s1).ipv4(kRemote4, s1.v4, ttl4(63)).udp(1, 2).build();
    out.resize(68, 0);
    rows.back().steps[0].in = in;
    rows.back().steps[0].out = out;
  }

  // ---- MTU ------------------------------------------------------------------------------
  {
    auto sized4 = [&](Packet l2, uint16_t tot, uint8_t ttl) {
      return l2.ipv4(kRemote4, s1.v4, ttl4(ttl)).udp(1, 2).payload(tot - 28u).build();
    };
    add(row("IPv4 of exactly MTU - 8 fits",
            uplink(sized4(from_router(), 1492, 64), XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                .expect_out(sized4(to_sub(s1), 1492, 63))
                .via(kAcc0)
                .down("r4-s1")));
    // Larger: frag needed / packet too big from XDP (rows_router.cpp).
    auto sized6 = [&](Packet l2, uint16_t tot, uint8_t hl) {
      return l2.ipv6(kRemote6, s1.v6, hlim6(hl)).udp(1, 2).payload(tot - 48u).build();
    };
    add(row("IPv6 of exactly MTU - 8 fits",
            uplink(sized6(from_router(), 1492, 64), XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                .expect_out(sized6(to_sub(s1), 1492, 63))
                .via(kAcc0)
                .down("r6-s1")));
  }

  // ---- dropped -----------------------------------------------------------------------------
  // TTL 1 and 0 get time exceeded: rows_router.cpp.
  add(drop_row("unknown MAC IPv4", udp4(from_router(), kRemote4, kS5Learn.v4),
               XBNG_DROP_MAC_UNKNOWN));
  add(drop_row("unknown MAC IPv6", udp6(from_router(), kRemote6, kS5Learn.v6),
               XBNG_DROP_MAC_UNKNOWN));
  add(drop_row("access port missing from tx_ports", udp4(from_router(), kRemote4, kS6Acc3.v4),
               XBNG_DROP_NO_EGRESS_PORT));
  add(row("access port configuration missing",
          uplink(udp4(from_router(), kRemote4, s1.v4), XDP_DROP, XBNG_DROP_NO_EGRESS_PORT)
              .pre([](Harness& h) { ASSERT_TRUE(h.remove_port_entry("ports", "acc0")); })));
  add(drop_row("truncated IPv4 header", truncate(udp4(from_router(), kRemote4, s1.v4), 14 + 19),
               XBNG_DROP_TRUNCATED));
  add(drop_row("truncated IPv6 header", truncate(udp6(from_router(), kRemote6, s1.v6), 14 + 39),
               XBNG_DROP_TRUNCATED));
  add(drop_row("IPv4 to a subscriber cut inside the payload",
               truncate(udp4(from_router(), kRemote4, s1.v4), 14 + 30), XBNG_DROP_TRUNCATED));
  add(drop_row("IPv6 to a subscriber cut inside the payload",
               truncate(udp6(from_router(), kRemote6, s1.v6), 14 + 50), XBNG_DROP_TRUNCATED));
  {
    Bytes f = udp4(from_router(), kRemote4, s1.v4);
    f[14] = 0x46;  // IHL 6 with no options present: total length still fits
    f[14 + 2] = 0;
    f[14 + 3] = 23;  // total length below IHL
    testpkt::set_ipv4_header_checksum(f, 14);
    add(drop_row("IPv4 to a subscriber with total length below IHL", f, XBNG_DROP_BAD_IP_HEADER));
  }

  // ---- passed untouched
  // --------------------------------------------------------------------------
  add(pass_row("not a subscriber IPv4", udp4(from_router(), kRemote4, ip4("198.51.100.201")),
               XBNG_PASS_NOT_SUBSCRIBER));
  add(pass_row("the host own IPv4 address", udp4(from_router(), kRemote4, kUplinkAddr4),
               XBNG_PASS_NOT_SUBSCRIBER));
  add(pass_row("not a subscriber IPv6", udp6(from_router(), kRemote6, ip6("2001:db8:ffff::1")),
               XBNG_PASS_NOT_SUBSCRIBER));
  add(pass_row("IPv6 just outside a delegated /56",
               udp6(from_router(), kRemote6, ip6("2001:db8:5601::1")), XBNG_PASS_NOT_SUBSCRIBER));
  add(pass_row("IPv4 just outside a routed /25",
               udp4(from_router(), kRemote4, ip4("198.51.100.128")), XBNG_PASS_NOT_SUBSCRIBER));
  add(pass_row("ND on the uplink",
               Packet()
                   .eth(mac("33:33:ff:00:00:01"), kRouterMac)
                   .ipv6(ip6("fe80::fe"), ip6("ff02::1:ff00:1"),
                         [] {
                           Ipv6Opts o;
                           o.hop_limit = 255;
                           return o;
                         }())
                   .icmp6_ns(ip6("2001:db8:ffff::1"), kRouterMac)
                   .build(),
               XBNG_PASS_NOT_SUBSCRIBER));
  add(pass_row("ARP on the uplink",
               plain(mac("ff:ff:ff:ff:ff:ff"), kRouterMac)
                   .arp(1, kRouterMac, ip4("192.0.2.254"), Mac{}, kUplinkAddr4)
                   .build(),
               XBNG_PASS_UPLINK_NON_IP));
  add(pass_row("VLAN-tagged frame on the uplink",
               udp4(from_router().vlan(0x8100, 10), kRemote4, s1.v4), XBNG_PASS_UPLINK_NON_IP));
  add(pass_row("LLDP on the uplink",
               plain(mac("01:80:c2:00:00:0e"), kRouterMac).ethertype(0x88cc).payload(40).build(),
               XBNG_PASS_UPLINK_NON_IP));

  // ---- ports
  // ---------------------------------------------------------------------------------------
  {
    Step s = uplink(udp4(from_router(), kRemote4, s1.v4), XDP_DROP, XBNG_DROP_NO_PORT);
    s.ingress = &kAcc0;
    add(row("xdp_uplink on an access port", s));
    Step t = uplink(udp4(from_router(), kRemote4, s1.v4), XDP_DROP, XBNG_DROP_NO_PORT);
    t.ingress = nullptr;
    t.ingress_name = "up0p";
    add(row("xdp_uplink on an unconfigured interface", t));
  }

  // ---- counters
  // --------------------------------------------------------------------------------------
  add(row("route down counters accumulate per route",
          {fwd4("", s1, "r4-s1", s1.v4).steps[0], fwd4("", s1, "r4-s1", s1.v4).steps[0],
           fwd6("", s1, "r64-s1", ip6("2001:db8:6401:1::1")).steps[0],
           fwd4("", kS3, "r4-s3", kS3.v4).steps[0]}));
  rows.back().steps.back().post([](Harness& h) {
    size_t len4 = udp4(to_sub(kS1), kRemote4, kS1.v4).size();
    EXPECT_EQ(h.route("r4-s1").down_packets, 2u);
    EXPECT_EQ(h.route("r4-s1").down_bytes, 2 * len4);
    EXPECT_EQ(h.route("r64-s1").down_packets, 1u);
    EXPECT_EQ(h.route("r4-s3").down_packets, 1u);
    EXPECT_EQ(h.route("r6-s1").down_packets, 0u);
  });
  return rows;
}

}  // namespace bpftest
