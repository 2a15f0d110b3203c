// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Router correctness: ICMP errors built in XDP (time exceeded,
// fragmentation needed / packet too big, unreachable for unassigned pool
// addresses), the rate limit, echo replies for the gateway addresses, TCP
// MSS clamping.
//
// Every expected answer is built here with the packet builder, which fills
// lengths and checksums with its own RFC 1071 code (tests/common/packet.cpp),
// from addresses and quoted bytes taken from the row's own input: the
// runner compares the output byte for byte and checks every checksum again.
#include "harness.h"

#include <bpf/bpf.h>

#include <cstring>

namespace bpftest {

using testpkt::ip4;
using testpkt::ip6;
using testpkt::Ipv4Opts;
using testpkt::Ipv6Opts;
using testpkt::mac;

namespace {

constexpr uint8_t kIcmpUnreach = 3, kIcmpTimeExceeded = 11, kIcmpEchoReply = 0;
constexpr uint8_t kIcmpFragNeeded = 4, kIcmpHostUnreach = 1;
constexpr uint8_t kIcmp6Unreach = 1, kIcmp6TooBig = 2, kIcmp6TimeExceeded = 3,
                  kIcmp6EchoReply = 129;
constexpr uint8_t kSyn = 0x02, kSynAck = 0x12, kAck = 0x10;

const Ip6 kFe80_1 = ip6("fe80::1");
const Ip6 kLinkLocal = ip6("fe80::200:ff:fe01:1");

Packet to_router() { return plain(kRouterMac, kUp0.mac); }
Packet from_router() { return plain(kUp0.mac, kRouterMac); }

// The IPv4 header of an error we send: TOS 0xc0, ID 0, DF, TTL 64.
Ipv4Opts err4() {
  Ipv4Opts o;
  o.ttl = 64;
  o.tos = 0xc0;
  o.id = 0;
  o.frag = 0x4000;
  return o;
}

// 4 bytes after type/code/checksum: unused, or the next-hop MTU.
Bytes rest(uint32_t v) {
  return {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The offending packet from its IP header on, as many bytes as `max`, cut
// at its IP length (Ethernet padding is not quoted).
Bytes quote(const Bytes& frame, size_t max) {
  size_t l3 = testpkt::l3_offset(frame);
  Bytes q(frame.begin() + (long)l3, frame.end());
  size_t iplen = (q[0] >> 4) == 4 ? (size_t)(q[2] << 8 | q[3]) : 40 + (size_t)(q[4] << 8 | q[5]);
  q.resize(std::min({iplen, max, q.size()}));
  return q;
}

// Errors as xbng must send them. Upstream: to subscriber s on its tags, from
// its port's gateway; downstream: back to the router, from up0's address.
Bytes up_err4(const SubDef& s, const Bytes& in, uint8_t type, uint8_t code, uint32_t r) {
  return to_sub(s)
      .ipv4(s.port->gw4, s.v4, err4())
      .icmp4(type, code, cat(rest(r), quote(in, 576 - 28)))
      .build();
}
Bytes up_err6(const SubDef& s, const Ip6& src, const Bytes& in, uint8_t type, uint8_t code,
              uint32_t r) {
  return to_sub(s)
      .ipv6(src, s.v6, hlim6(64))
      .icmp6(type, code, cat(rest(r), quote(in, 1280 - 48)))
      .build();
}
Bytes down_err4(const Ip4& to, const Bytes& in, uint8_t type, uint8_t code, uint32_t r) {
  return to_router()
      .ipv4(kUplinkAddr4, to, err4())
      .icmp4(type, code, cat(rest(r), quote(in, 576 - 28)))
      .build();
}
Bytes down_err6(const Ip6& to, const Bytes& in, uint8_t type, uint8_t code, uint32_t r) {
  return to_router()
      .ipv6(kUplinkAddr6, to, hlim6(64))
      .icmp6(type, code, cat(rest(r), quote(in, 1280 - 48)))
      .build();
}

Step tx_access(const PortDef& port, Bytes in, int reason, Bytes out) {
  return access(port, std::move(in), XDP_TX, reason).expect_out(std::move(out));
}
Step tx_uplink(Bytes in, int reason, Bytes out) {
  return uplink(std::move(in), XDP_TX, reason).expect_out(std::move(out));
}

Ipv4Opts v4opts(uint8_t ttl, uint16_t frag) {
  Ipv4Opts o;
  o.ttl = ttl;
  o.frag = frag;
  return o;
}

Bytes sized4(Packet l2, const Ip4& src, const Ip4& dst, uint16_t tot, Ipv4Opts o) {
  return l2.ipv4(src, dst, o).udp(40000, 443).payload(tot - 28u).build();
}
Bytes sized6(Packet l2, const Ip6& src, const Ip6& dst, uint16_t tot, uint8_t hl = 64) {
  return l2.ipv6(src, dst, hlim6(hl)).udp(40000, 443).payload(tot - 48u).build();
}

// TCP options: MSS, then whatever follows.
Bytes mss_opt(uint16_t mss) { return {2, 4, (uint8_t)(mss >> 8), (uint8_t)mss}; }
// Linux's SYN options: MSS, SACK permitted, timestamps, NOP, window scale.
Bytes linux_opts(uint16_t mss) {
  return cat(mss_opt(mss), {4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7});
}
// A NOP first: the MSS value sits at an odd offset of the TCP header.
Bytes odd_opts(uint16_t mss) { return cat(cat({1}, mss_opt(mss)), {1, 1, 1}); }

Row up_tcp(std::string desc, const SubDef& s, uint8_t flags, const Bytes& opts,
           const Bytes& want_opts, bool clamped, Ipv4Opts o = {}) {
  Ipv4Opts w = o;
  w.ttl = (uint8_t)(o.ttl - 1);
  Step st =
      access(*s.port, from_sub(s).ipv4(s.v4, kRemote4, o).tcp(50000, 443, flags, opts).build(),
             XDP_REDIRECT, XBNG_FWD_UPSTREAM)
          .expect_out(to_router().ipv4(s.v4, kRemote4, w).tcp(50000, 443, flags, want_opts).build())
          .via(kUp0)
          .up(s.name);
  if (clamped) st.count(XBNG_MSS_CLAMPED);
  return row(std::move(desc), st);
}

// All CPUs' buckets empty, just refilled: the next error finds no token.
void empty_bucket(Harness& h) { h.set_icmp_budget(Harness::now_ns(), 0); }

}  // namespace

std::vector<Row> router_rows() {
  std::vector<Row> rows;
  const SubDef& s1 = kS1;
  auto add = [&rows](Row r) { rows.push_back(std::move(r)); };

  // ---- time exceeded, upstream: from the gateway, on the subscriber's tags --------
  for (uint8_t ttl : {1, 0}) {
    Bytes in = udp4(from_sub(s1), s1.v4, kRemote4, ttl4(ttl));
    add(row("up IPv4 TTL " + std::to_string(ttl) + " gets time exceeded from the gateway",
            tx_access(kAcc0, in, XBNG_TX_ICMP_TIME_EXCEEDED,
                      up_err4(s1, in, kIcmpTimeExceeded, 0, 0))));
    Bytes in6 = udp6(from_sub(s1), s1.v6, kRemote6, hlim6(ttl));
    add(row(
        "up IPv6 hop limit " + std::to_string(ttl) + " gets time exceeded from the global gateway",
        tx_access(kAcc0, in6, XBNG_TX_ICMP_TIME_EXCEEDED,
                  up_err6(s1, kAcc0.gw6, in6, kIcmp6TimeExceeded, 0, 0))));
  }
  {
    Bytes in6 = udp6(from_sub(s1), s1.v6, kRemote6, hlim6(1));
    add(row("up IPv6 time exceeded from fe80::1 when the port has no global gateway",
            tx_access(kAcc0, in6, XBNG_TX_ICMP_TIME_EXCEEDED,
                      up_err6(s1, kFe80_1, in6, kIcmp6TimeExceeded, 0, 0))
                .pre([](Harness& h) {
                  h.edit_port("acc0", [](struct xbng_port& p) { std::memset(p.gw_ipv6, 0, 16); });
                })));
    Bytes in = udp4(from_sub(kS3), kS3.v4, kRemote4, ttl4(1));
    add(row("up IPv4 time exceeded on a 0x8100 port keeps its tags",
            tx_access(kAcc1, in, XBNG_TX_ICMP_TIME_EXCEEDED,
                      up_err4(kS3, in, kIcmpTimeExceeded, 0, 0))));
    Bytes echo = from_sub(s1).ipv4(s1.v4, kRemote4, ttl4(1)).icmp_echo(9, 3).payload(24).build();
    add(row("up ICMP echo request with TTL 1 is answered with time exceeded",
            tx_access(kAcc0, echo, XBNG_TX_ICMP_TIME_EXCEEDED,
                      up_err4(s1, echo, kIcmpTimeExceeded, 0, 0))));
    Ipv4Opts o = ttl4(1);
    o.options = {0x44, 0x0c, 0x05, 0x00, 0, 0, 0, 0, 0, 0, 0, 0};  // timestamp option
    Bytes opt = udp4(from_sub(s1), s1.v4, kRemote4, o);
    add(row("up IPv4 with options and TTL 1: the quote keeps the options",
            tx_access(kAcc0, opt, XBNG_TX_ICMP_TIME_EXCEEDED,
                      up_err4(s1, opt, kIcmpTimeExceeded, 0, 0))));
  }

  // ---- too big, upstream (the FIB's MTU of the uplink: 1500) ---------------------------
  {
    Bytes df = sized4(from_sub(s1), s1.v4, kRemote4, 1501, v4opts(64, 0x4000));
    add(row("up IPv4 DF larger than the uplink MTU gets frag needed with MTU 1500 (576 bytes)",
            tx_access(kAcc0, df, XBNG_TX_ICMP_TOO_BIG,
                      up_err4(s1, df, kIcmpUnreach, kIcmpFragNeeded, 1500))));
    rows.back().steps[0].post([](Harness&) {
      // Independent of the builder: the answer is exactly 576 bytes of IP.
      Bytes want = up_err4(kS1, sized4(from_sub(kS1), kS1.v4, kRemote4, 1501, v4opts(64, 0x4000)),
                           kIcmpUnreach, kIcmpFragNeeded, 1500);
      EXPECT_EQ(want.size(), 22u + 576u);
    });
    Bytes v6 = sized6(from_sub(s1), s1.v6, kRemote6, 1501);
    add(row("up IPv6 larger than the uplink MTU gets packet too big 1500 (1280 bytes)",
            tx_access(kAcc0, v6, XBNG_TX_ICMP_TOO_BIG,
                      up_err6(s1, kAcc0.gw6, v6, kIcmp6TooBig, 0, 1500))));
    rows.back().steps[0].post([](Harness&) {
      Bytes want = up_err6(kS1, kAcc0.gw6, sized6(from_sub(kS1), kS1.v6, kRemote6, 1501),
                           kIcmp6TooBig, 0, 1500);
      EXPECT_EQ(want.size(), 22u + 1280u);
    });
    Bytes nodf = sized4(from_sub(s1), s1.v4, kRemote4, 1501, v4opts(64, 0));
    Bytes nodf_out = plain(s1.port->mac, s1.mac)
                         .ipv4(s1.v4, kRemote4, v4opts(64, 0))
                         .udp(40000, 443)
                         .payload(1501 - 28)
                         .build();
    add(row("up IPv4 without DF larger than the uplink MTU goes to the kernel to be fragmented",
            access(kAcc0, nodf, XDP_PASS, XBNG_PASS_FRAG_NEEDED).expect_out(nodf_out)));
  }

  // ---- never an error about an error, a fragment, a multicast or a stranger ------------
  {
    Bytes unreach = from_sub(s1)
                        .ipv4(s1.v4, kRemote4, ttl4(1))
                        .icmp4(3, 3, cat(rest(0), quote(udp4(from_sub(s1), kRemote4, s1.v4), 64)))
                        .build();
    add(row("up ICMP error with TTL 1: no error about an error",
            access(kAcc0, unreach, XDP_DROP, XBNG_DROP_TTL_EXCEEDED)));
    Bytes unreach6 = from_sub(s1)
                         .ipv6(s1.v6, kRemote6, hlim6(1))
                         .icmp6(1, 4, cat(rest(0), quote(udp6(from_sub(s1), kRemote6, s1.v6), 64)))
                         .build();
    add(row("up ICMPv6 error with hop limit 1: no error about an error",
            access(kAcc0, unreach6, XDP_DROP, XBNG_DROP_TTL_EXCEEDED)));
    Bytes frag = udp4(from_sub(s1), s1.v4, kRemote4, v4opts(1, 0x0010));  // offset 128 bytes
    add(row("up IPv4 later fragment with TTL 1: no error",
            access(kAcc0, frag, XDP_DROP, XBNG_DROP_TTL_EXCEEDED)));
    Bytes big_err =
        from_sub(s1).ipv4(s1.v4, kRemote4).icmp4(11, 0, cat(rest(0), Bytes(1473, 0x45))).build();
    add(row("up ICMP error larger than the uplink MTU: no error about an error",
            access(kAcc0, big_err, XDP_DROP, XBNG_DROP_TOO_BIG)));
    Bytes spoofed = udp4(from_sub(s1), ip4("100.64.77.77"), kRemote4, ttl4(1));
    add(row("up TTL 1 from a source the subscriber does not hold: dropped as spoofed, no error",
            access(kAcc0, spoofed, XDP_DROP, XBNG_DROP_SPOOFED_V4)));
    Bytes mc = udp4(from_router(), ip4("224.1.2.3"), s1.v4, ttl4(1));
    add(row("down TTL 1 from a multicast source: no error",
            uplink(mc, XDP_DROP, XBNG_DROP_TTL_EXCEEDED)));
  }

  // ---- rate limit -------------------------------------------------------------------------
  {
    Bytes in = udp4(from_sub(s1), s1.v4, kRemote4, ttl4(1));
    add(row("rate limit reached: dropped, counted as suppressed",
            access(kAcc0, in, XDP_DROP, XBNG_DROP_TTL_EXCEEDED)
                .count(XBNG_ICMP_RATE_LIMITED)
                .pre(empty_bucket)));
    Bytes down = udp6(from_router(), kRemote6, s1.v6, hlim6(1));
    add(row("rate limit reached downstream IPv6", uplink(down, XDP_DROP, XBNG_DROP_TTL_EXCEEDED)
                                                      .count(XBNG_ICMP_RATE_LIMITED)
                                                      .pre(empty_bucket)));
    // One token left: the first error goes, the second is suppressed.
    Step first =
        tx_access(kAcc0, in, XBNG_TX_ICMP_TIME_EXCEEDED, up_err4(s1, in, kIcmpTimeExceeded, 0, 0));
    first.pre([](Harness& h) {
      h.set_icmp_budget(Harness::now_ns(), 1000000000);
    });  // one token (1 s, see harness.cpp)
    Step second = access(kAcc0, in, XDP_DROP, XBNG_DROP_TTL_EXCEEDED).count(XBNG_ICMP_RATE_LIMITED);
    add(row("one token left: one error sent, the next suppressed", {first, second}));
  }

  // ---- echo to the gateway addresses ---------------------------------------------------------
  {
    Bytes req = from_sub(s1).ipv4(s1.v4, kAcc0.gw4, ttl4(63)).icmp_echo(7, 1).payload(16).build();
    Bytes rep = to_sub(s1)
                    .ipv4(kAcc0.gw4, s1.v4, ttl4(64))
                    .icmp4(kIcmpEchoReply, 0, cat({0, 7, 0, 1}, Packet().payload(16).build()))
                    .build();
    add(row("echo to the IPv4 gateway is answered on the subscriber's tags",
            tx_access(kAcc0, req, XBNG_TX_ECHO_REPLY, rep)));
    Bytes req1 = from_sub(s1).ipv4(s1.v4, kAcc0.gw4, ttl4(1)).icmp_echo(7, 2).payload(16).build();
    Bytes rep1 = to_sub(s1)
                     .ipv4(kAcc0.gw4, s1.v4, ttl4(64))
                     .icmp4(kIcmpEchoReply, 0, cat({0, 7, 0, 2}, Packet().payload(16).build()))
                     .build();
    add(row("echo to the IPv4 gateway with TTL 1 is answered, not expired",
            tx_access(kAcc0, req1, XBNG_TX_ECHO_REPLY, rep1)));
    Bytes spoof =
        from_sub(s1).ipv4(ip4("100.64.77.77"), kAcc0.gw4).icmp_echo(7, 1).payload(16).build();
    add(row("echo to the IPv4 gateway from a foreign source is dropped",
            access(kAcc0, spoof, XDP_DROP, XBNG_DROP_SPOOFED_V4)));

    auto echo6 = [&](const std::string& desc, const Ip6& src, const Ip6& gw) {
      Bytes r = from_sub(s1).ipv6(src, gw, hlim6(64)).icmp6_echo(7, 1).payload(16).build();
      Bytes a = to_sub(s1)
                    .ipv6(gw, src, hlim6(64))
                    .icmp6(kIcmp6EchoReply, 0, cat({0, 7, 0, 1}, Packet().payload(16).build()))
                    .build();
      add(row(desc, tx_access(kAcc0, r, XBNG_TX_ECHO_REPLY, a)));
    };
    echo6("echo to fe80::1 from a link-local address is answered", kLinkLocal, kFe80_1);
    echo6("echo to fe80::1 from the subscriber's address is answered", s1.v6, kFe80_1);
    echo6("echo to the IPv6 gateway is answered", s1.v6, kAcc0.gw6);
    Bytes spoof6 =
        from_sub(s1).ipv6(ip6("2001:db8:99::1"), kAcc0.gw6).icmp6_echo(7, 1).payload(16).build();
    add(row("echo to the IPv6 gateway from a foreign source is dropped",
            access(kAcc0, spoof6, XDP_DROP, XBNG_DROP_SPOOFED_V6)));
    Bytes wrong_mac = Packet()
                          .eth(mac("02:00:00:00:99:99"), s1.mac)
                          .qinq(0x88a8, s1.svid, s1.cvid)
                          .ipv6(s1.v6, kFe80_1)
                          .icmp6_echo(7, 1)
                          .payload(16)
                          .build();
    add(row("echo to fe80::1 sent to another MAC is dropped",
            access(kAcc0, wrong_mac, XDP_DROP, XBNG_DROP_NOT_OUR_MAC)));
  }

  // ---- subscriber pools: unassigned addresses from the uplink --------------------------------
  {
    Bytes in = udp4(from_router(), kRemote4, ip4("100.64.9.9"));
    add(row("down to an unassigned pool address: host unreachable from the uplink address",
            tx_uplink(in, XBNG_TX_ICMP_UNREACHABLE,
                      down_err4(kRemote4, in, kIcmpUnreach, kIcmpHostUnreach, 0))));
    Bytes gw = udp4(from_router(), kRemote4, kAcc0.gw4);
    add(row("down to the gateway address (in the pool, held by nobody): unreachable",
            tx_uplink(gw, XBNG_TX_ICMP_UNREACHABLE,
                      down_err4(kRemote4, gw, kIcmpUnreach, kIcmpHostUnreach, 0))));
    Bytes in6 = udp6(from_router(), kRemote6, ip6("2001:db8:1::9999"));
    add(row(
        "down IPv6 to an unassigned pool address: address unreachable",
        tx_uplink(in6, XBNG_TX_ICMP_UNREACHABLE, down_err6(kRemote6, in6, kIcmp6Unreach, 3, 0))));
    for (auto [what, dst] :
         {std::pair<const char*, const char*>{"an empty /64 slot of a direct pool",
                                              "2001:db8:65:10a::1"},
          {"an empty /128 slot of a direct pool", "2001:db8:66::8"},
          {"a direct pool address held only in the /128 hash (not looked up there)",
           "2001:db8:66::9"}}) {
      Bytes d6 = udp6(from_router(), kRemote6, ip6(dst));
      add(row(
          std::string("down IPv6 to ") + what + ": address unreachable",
          tx_uplink(d6, XBNG_TX_ICMP_UNREACHABLE, down_err6(kRemote6, d6, kIcmp6Unreach, 3, 0))));
    }
    Bytes err = from_router()
                    .ipv4(kRemote4, ip4("100.64.9.9"))
                    .icmp4(3, 1, cat(rest(0), Bytes(28, 0x45)))
                    .build();
    add(row("down ICMP error to an unassigned pool address: dropped, no answer",
            uplink(err, XDP_DROP, XBNG_DROP_POOL_UNASSIGNED)));
    add(row("down to an unassigned pool address, rate limit reached",
            uplink(in, XDP_DROP, XBNG_DROP_POOL_UNASSIGNED)
                .count(XBNG_ICMP_RATE_LIMITED)
                .pre(empty_bucket)));
    Bytes dir = udp4(from_router(), kRemote4, ip4("100.70.0.8"));
    add(row("down to an empty slot of a direct pool: unreachable",
            tx_uplink(dir, XBNG_TX_ICMP_UNREACHABLE,
                      down_err4(kRemote4, dir, kIcmpUnreach, kIcmpHostUnreach, 0))));
    Bytes hid = udp4(from_router(), kRemote4, ip4("100.70.0.9"));
    add(row("down to a direct pool address held only in the hash: not looked up there",
            tx_uplink(hid, XBNG_TX_ICMP_UNREACHABLE,
                      down_err4(kRemote4, hid, kIcmpUnreach, kIcmpHostUnreach, 0))));
    add(row("down outside every pool still goes to the kernel",
            uplink(udp4(from_router(), kRemote4, ip4("100.65.9.9")), XDP_PASS,
                   XBNG_PASS_NOT_SUBSCRIBER)));
  }

  // ---- time exceeded and too big, downstream: back to the router ------------------------------
  for (uint8_t ttl : {1, 0}) {
    Bytes in = udp4(from_router(), kRemote4, s1.v4, ttl4(ttl));
    add(row("down IPv4 TTL " + std::to_string(ttl) + " gets time exceeded from the uplink address",
            tx_uplink(in, XBNG_TX_ICMP_TIME_EXCEEDED,
                      down_err4(kRemote4, in, kIcmpTimeExceeded, 0, 0))));
    Bytes in6 = udp6(from_router(), kRemote6, s1.v6, hlim6(ttl));
    add(row("down IPv6 hop limit " + std::to_string(ttl) +
                " gets time exceeded from the uplink address",
            tx_uplink(in6, XBNG_TX_ICMP_TIME_EXCEEDED,
                      down_err6(kRemote6, in6, kIcmp6TimeExceeded, 0, 0))));
  }
  {
    Bytes df = sized4(from_router(), kRemote4, s1.v4, kSubMtu + 1, v4opts(64, 0x4000));
    add(row("down IPv4 DF above the subscriber MTU gets frag needed with that MTU",
            tx_uplink(df, XBNG_TX_ICMP_TOO_BIG,
                      down_err4(kRemote4, df, kIcmpUnreach, kIcmpFragNeeded, kSubMtu))));
    Bytes nodf = sized4(from_router(), kRemote4, s1.v4, kSubMtu + 1, v4opts(64, 0));
    add(row("down IPv4 without DF above the subscriber MTU is dropped (no fragmenting in XDP)",
            uplink(nodf, XDP_DROP, XBNG_DROP_TOO_BIG_NO_DF)));
    Bytes v6 = sized6(from_router(), kRemote6, s1.v6, kSubMtu + 1);
    add(row(
        "down IPv6 above the subscriber MTU gets packet too big with that MTU",
        tx_uplink(v6, XBNG_TX_ICMP_TOO_BIG, down_err6(kRemote6, v6, kIcmp6TooBig, 0, kSubMtu))));
    for (uint16_t size : {600, 700, 1000, 1100, 1300}) {
      Bytes mid = sized6(from_router(), kRemote6, s1.v6, size);
      add(row("down IPv6 of " + std::to_string(size) +
                  " above a subscriber MTU of 580: whole packet quoted",
              tx_uplink(mid, XBNG_TX_ICMP_TOO_BIG, down_err6(kRemote6, mid, kIcmp6TooBig, 0, 580))
                  .pre([](Harness& h) {
                    h.edit_port("acc0", [](struct xbng_port& p) { p.sub_mtu = 580; });
                  })));
    }
    Bytes fits = sized4(from_router(), kRemote4, s1.v4, 1400, v4opts(64, 0x4000));
    add(row("down IPv4 at a subscriber MTU of 1400: 1400 fits",
            uplink(fits, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                .expect_out(sized4(to_sub(s1), kRemote4, s1.v4, 1400, v4opts(63, 0x4000)))
                .via(kAcc0)
                .down("r4-s1")
                .pre([](Harness& h) {
                  h.edit_port("acc0", [](struct xbng_port& p) { p.sub_mtu = 1400; });
                })));
    Bytes over = sized4(from_router(), kRemote4, s1.v4, 1401, v4opts(64, 0x4000));
    add(row("down IPv4 at a subscriber MTU of 1400: 1401 gets frag needed 1400",
            tx_uplink(over, XBNG_TX_ICMP_TOO_BIG,
                      down_err4(kRemote4, over, kIcmpUnreach, kIcmpFragNeeded, 1400))
                .pre([](Harness& h) {
                  h.edit_port("acc0", [](struct xbng_port& p) { p.sub_mtu = 1400; });
                })));
    Bytes ttl1 = udp4(from_router(), kRemote4, s1.v4, ttl4(1));
    add(row("down error with no IPv4 source configured on the uplink: dropped",
            uplink(ttl1, XDP_DROP, XBNG_DROP_TTL_EXCEEDED).pre([](Harness& h) {
              h.edit_port("up0", [](struct xbng_port& p) { p.icmp_src4 = 0; });
            })));
    Bytes small = from_router().ipv4(kRemote4, s1.v4, ttl4(1)).udp(1, 2).build();
    small.resize(60, 0);  // Ethernet padding: not quoted
    add(row("down TTL 1 on a padded frame quotes the IP packet only",
            tx_uplink(small, XBNG_TX_ICMP_TIME_EXCEEDED,
                      down_err4(kRemote4, small, kIcmpTimeExceeded, 0, 0))));
  }

  // ---- MSS clamping
  // --------------------------------------------------------------------------------
  const uint16_t mss4 = kSubMtu - 40, mss6 = kSubMtu - 60;
  add(up_tcp("up SYN MSS 1460 clamped to the subscriber MTU - 40", s1, kSyn, linux_opts(1460),
             linux_opts(mss4), true));
  add(up_tcp("up SYN without MSS option untouched", s1, kSyn, {1, 1, 4, 2}, {1, 1, 4, 2}, false));
  add(up_tcp("up SYN MSS already smaller untouched", s1, kSyn, linux_opts(1200), linux_opts(1200),
             false));
  add(up_tcp("up SYN MSS equal untouched", s1, kSyn, linux_opts(mss4), linux_opts(mss4), false));
  add(up_tcp("up SYN-ACK MSS clamped", s1, kSynAck, mss_opt(8960), mss_opt(mss4), true));
  add(up_tcp("up SYN MSS at an odd offset clamped (checksum across words)", s1, kSyn,
             odd_opts(1460), odd_opts(mss4), true));
  add(up_tcp("up ACK carrying an MSS option untouched", s1, kAck, mss_opt(1460), mss_opt(1460),
             false));
  {
    Ipv4Opts o;
    o.options = {0x94, 0x04, 0x00, 0x00, 0x44, 0x0c, 0x05, 0x00,
                 0,    0,    0,    0,    0,    0,    0,    0};  // router alert, timestamp
    add(up_tcp("up SYN behind IPv4 options clamped", s1, kSyn, linux_opts(1460), linux_opts(mss4),
               true, o));
  }
  add(up_tcp("up SYN MSS 1460 with clamping off on the port untouched", s1, kSyn, linux_opts(1460),
             linux_opts(1460), false));
  rows.back().steps[0].pre(
      [](Harness& h) { h.edit_port("acc0", [](struct xbng_port& p) { p.flags = 0; }); });
  {
    Bytes in = from_sub(s1).ipv6(s1.v6, kRemote6).tcp(50000, 443, kSyn, linux_opts(1440)).build();
    Bytes out = to_router()
                    .ipv6(s1.v6, kRemote6, hlim6(63))
                    .tcp(50000, 443, kSyn, linux_opts(mss6))
                    .build();
    add(row("up IPv6 SYN MSS clamped to the subscriber MTU - 60",
            access(kAcc0, in, XDP_REDIRECT, XBNG_FWD_UPSTREAM)
                .expect_out(out)
                .via(kUp0)
                .up("s1")
                .count(XBNG_MSS_CLAMPED)));
    Bytes din =
        from_router().ipv4(kRemote4, s1.v4).tcp(443, 50000, kSynAck, linux_opts(1460)).build();
    Bytes dout = to_sub(s1)
                     .ipv4(kRemote4, s1.v4, ttl4(63))
                     .tcp(443, 50000, kSynAck, linux_opts(mss4))
                     .build();
    add(row("down SYN-ACK MSS clamped", uplink(din, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                                            .expect_out(dout)
                                            .via(kAcc0)
                                            .down("r4-s1")
                                            .count(XBNG_MSS_CLAMPED)));
    Bytes din6 = from_router().ipv6(kRemote6, s1.v6).tcp(443, 50000, kSyn, odd_opts(9000)).build();
    Bytes dout6 =
        to_sub(s1).ipv6(kRemote6, s1.v6, hlim6(63)).tcp(443, 50000, kSyn, odd_opts(mss6)).build();
    add(row("down IPv6 SYN MSS clamped", uplink(din6, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                                             .expect_out(dout6)
                                             .via(kAcc0)
                                             .down("r6-s1")
                                             .count(XBNG_MSS_CLAMPED)));
    Bytes dsmall =
        from_router().ipv4(kRemote4, s1.v4).tcp(443, 50000, kSyn, linux_opts(536)).build();
    Bytes dsmall_out =
        to_sub(s1).ipv4(kRemote4, s1.v4, ttl4(63)).tcp(443, 50000, kSyn, linux_opts(536)).build();
    add(row("down SYN MSS 536 untouched", uplink(dsmall, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
                                              .expect_out(dsmall_out)
                                              .via(kAcc0)
                                              .down("r4-s1")));
  }
  return rows;
}

}  // namespace bpftest
