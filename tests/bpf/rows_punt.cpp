// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Bring-up punt path: DHCPv4/DHCPv6 client -> server frames and
// Router Solicitations of provisioned subscribers are copied whole (both
// tags) into the `punt` ring buffer and dropped; rate limits per subscriber
// and per port; what is not for the server keeps its old drop reasons;
// unknown VLANs produce only their event. The af_xdp transport's program
// without a socket takes the same ring.
#include "harness.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>

#include "xbng.skel.h"

namespace bpftest {

using testpkt::ip4;
using testpkt::ip6;
using testpkt::Ipv4Opts;
using testpkt::Ipv6Opts;
using testpkt::mac;

namespace {

const Mac kBroadcast = mac("ff:ff:ff:ff:ff:ff");

Ip6 link_local_of(const SubDef& s) {
  Ip6 a = ip6("fe80::");
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

Ipv6Opts hop255() {
  Ipv6Opts o;
  o.hop_limit = 255;
  return o;
}

// DISCOVER as a client sends it: broadcast MAC and address, from 0.0.0.0.
Bytes discover(const SubDef& s, size_t payload = 300) {
  return Packet()
      .eth(kBroadcast, s.mac)
      .qinq(s.port->tpid, s.svid, s.cvid)
      .ipv4(ip4("0.0.0.0"), ip4("255.255.255.255"))
      .udp(68, 67)
      .payload(payload)
      .build();
}

Bytes renew(const SubDef& s) {
  return from_sub(s).ipv4(s.v4, s.port->gw4).udp(68, 67).payload(300).build();
}

Bytes solicit(const SubDef& s) {
  return Packet()
      .eth(mac("33:33:00:01:00:02"), s.mac)
      .qinq(s.port->tpid, s.svid, s.cvid)
      .ipv6(link_local_of(s), ip6("ff02::1:2"))
      .udp(546, 547)
      .payload(60)
      .build();
}

Bytes router_solicit(const SubDef& s) {
  return Packet()
      .eth(mac("33:33:00:00:00:02"), s.mac)
      .qinq(s.port->tpid, s.svid, s.cvid)
      .ipv6(link_local_of(s), ip6("ff02::2"), hop255())
      .icmp6_rs(s.mac)
      .build();
}

Step punt_step(const SubDef& s, Bytes in, uint32_t kind, int reason) {
  return access(*s.port, std::move(in), XDP_DROP, reason).punted({kind, s.port, s.svid, s.cvid});
}

}  // namespace

std::vector<Row> punt_rows() {
  std::vector<Row> rows;
  auto add = [&](Row r) { rows.push_back(std::move(r)); };
  const SubDef& s1 = kS1;

  // ---- punted -------------------------------------------------------------------------
  add(row("DHCPv4 DISCOVER broadcast is punted with its tags",
          punt_step(s1, discover(s1), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4)));
  add(row("DHCPv4 unicast renewal to the gateway is punted",
          punt_step(s1, renew(s1), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4)));
  add(row("DHCPv4 on an 802.1Q-outer port is punted",
          punt_step(kS3, discover(kS3), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4)));
  add(row("DHCPv4 from a subscriber whose MAC is still to learn is punted (not learned)",
          punt_step(kS5Learn, discover(kS5Learn), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4)
              .post([](Harness& h) {
                EXPECT_FALSE(h.subscriber(kS5Learn).flags & XBNG_SUB_F_MAC_VALID);
              })));
  {
    Ipv4Opts o;
    o.options = {0x94, 0x04, 0x00, 0x00};  // router alert
    add(row("DHCPv4 renewal with IP options is punted",
            punt_step(s1, from_sub(s1).ipv4(s1.v4, kAcc0.gw4, o).udp(68, 67).payload(300).build(),
                      XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4)));
  }
  add(row("DHCPv6 SOLICIT to ff02::1:2 is punted",
          punt_step(s1, solicit(s1), XBNG_PUNT_KIND_DHCPV6, XBNG_PUNT_DHCPV6)));
  add(row("DHCPv6 RENEW unicast to the port's gateway is punted",
          punt_step(
              s1, from_sub(s1).ipv6(link_local_of(s1), kAcc0.gw6).udp(546, 547).payload(80).build(),
              XBNG_PUNT_KIND_DHCPV6, XBNG_PUNT_DHCPV6)));
  add(row("DHCPv6 from an IPv6-only subscriber is punted",
          punt_step(kS7V6Only, solicit(kS7V6Only), XBNG_PUNT_KIND_DHCPV6, XBNG_PUNT_DHCPV6)));
  add(row("Router Solicitation is punted",
          punt_step(s1, router_solicit(s1), XBNG_PUNT_KIND_RS, XBNG_PUNT_ROUTER_SOLICIT)));
  add(row("Router Solicitation from :: is punted",
          punt_step(s1,
                    Packet()
                        .eth(mac("33:33:00:00:00:02"), s1.mac)
                        .qinq(0x88a8, 100, 200)
                        .ipv6(ip6("::"), ip6("ff02::2"), hop255())
                        .icmp6_rs()
                        .build(),
                    XBNG_PUNT_KIND_RS, XBNG_PUNT_ROUTER_SOLICIT)));

  // ---- not for the server: dropped as before --------------------------------------------
  add(row("DHCPv4 to the client port (server on the subscriber side)",
          access(kAcc0, from_sub(s1).ipv4(s1.v4, kRemote4).udp(67, 68).payload(240).build(),
                 XDP_DROP, XBNG_DROP_DHCPV4)));
  add(row("DHCPv4 unicast to another server",
          access(kAcc0, from_sub(s1).ipv4(s1.v4, kRemote4).udp(68, 67).payload(240).build(),
                 XDP_DROP, XBNG_DROP_DHCPV4)));
  add(row("DHCPv4 from a subscriber without IPv4 is not punted",
          access(kAcc0, discover(kS7V6Only), XDP_DROP, XBNG_DROP_DHCPV4_NO_IPV4)));
  add(
      row("DHCPv4 relay port: DHCPv4 from a subscriber without IPv4 is punted (the lease "
          "gives it one)",
          punt_step(kS7V6Only, discover(kS7V6Only), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4)
              .pre([](Harness& h) {
                h.edit_port("acc0", [](struct xbng_port& v) { v.flags |= XBNG_PORT_F_RELAY4; });
              })));
  add(row("DHCPv6 to the client port",
          access(kAcc0, from_sub(s1).ipv6(s1.v6, kAcc0.gw6).udp(547, 546).payload(40).build(),
                 XDP_DROP, XBNG_DROP_DHCPV6)));
  add(row("DHCPv6 to a unicast address that is not the gateway",
          access(kAcc0,
                 from_sub(s1).ipv6(link_local_of(s1), kRemote6).udp(546, 547).payload(40).build(),
                 XDP_DROP, XBNG_DROP_DHCPV6)));
  add(row("oversized DHCPv4 frame",
          access(kAcc0, discover(s1, XBNG_PUNT_MAX_FRAME), XDP_DROP, XBNG_DROP_PUNT_TOO_BIG)));
  add(row("DHCPv4 from an unknown VLAN: only the unknown-subscriber event",
          access(kAcc0,
                 Packet()
                     .eth(kBroadcast, mac("02:00:00:09:09:09"))
                     .qinq(0x88a8, 999, 998)
                     .ipv4(ip4("0.0.0.0"), ip4("255.255.255.255"))
                     .udp(68, 67)
                     .payload(300)
                     .build(),
                 XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
              .count(XBNG_EVENT_SENT)
              .event({XBNG_EVENT_UNKNOWN_SUBSCRIBER, &kAcc0, 999, 998, mac("02:00:00:09:09:09")})));

  // ---- rate limits ------------------------------------------------------------------------
  add(row("subscriber over its punt rate is dropped and counted",
          access(kAcc0, discover(s1), XDP_DROP, XBNG_DROP_PUNT_RATE_SUBSCRIBER)
              .count(XBNG_PUNT_RATE_SUB_DHCPV4)
              .pre([](Harness& h) {
                // GCRA: the next allowed time is a minute ahead.
                h.set_punt_tat(kS1.key(), Harness::now_ns() + 60ull * 1000000000ull);
              })));
  add(row("port over its punt rate is dropped and counted",
          access(kAcc0, solicit(s1), XDP_DROP, XBNG_DROP_PUNT_RATE_PORT).pre([](Harness& h) {
            h.set_punt_port_used(kAcc0.slot, Harness::now_ns(), XBNG_DEFAULT_PUNT_PORT_RATE);
          })));
  add(row(
      "a full port budget does not touch another port",
      punt_step(kS3, discover(kS3), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4).pre([](Harness& h) {
        h.set_punt_port_used(kAcc0.slot, Harness::now_ns(), XBNG_DEFAULT_PUNT_PORT_RATE);
      })));
  add(row("an old port window is renewed",
          punt_step(s1, discover(s1), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4).pre([](Harness& h) {
            h.set_punt_port_used(kAcc0.slot, Harness::now_ns() - 2000000000ull,
                                 XBNG_DEFAULT_PUNT_PORT_RATE);
          })));
  {
    // The burst: XBNG_DEFAULT_PUNT_SUB_BURST frames at once pass, the next is
    // limited; another subscriber is not affected.
    std::vector<Step> steps;
    for (int i = 0; i < XBNG_DEFAULT_PUNT_SUB_BURST; i++)
      steps.push_back(punt_step(s1, discover(s1), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4));
    steps.push_back(access(kAcc0, discover(s1), XDP_DROP, XBNG_DROP_PUNT_RATE_SUBSCRIBER)
                        .count(XBNG_PUNT_RATE_SUB_DHCPV4));
    steps.push_back(punt_step(kS2, discover(kS2), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4));
    add(row("a burst of DISCOVERs: the burst passes, the rest is limited", std::move(steps)));
  }
  {
    // The budget is per protocol: a DHCPv4 storm spends the subscriber's
    // DHCPv4 budget only (here: its next DHCPv4 frame is a minute ahead);
    // its DHCPv6 and Router Solicitations still pass, each counted apart.
    auto flooded = [](Harness& h) {
      h.set_punt_tat(kS1.key(), Harness::now_ns() + 60ull * 1000000000ull, XBNG_PUNT_KIND_DHCPV4);
    };
    std::vector<Step> steps;
    steps.push_back(access(kAcc0, discover(s1), XDP_DROP, XBNG_DROP_PUNT_RATE_SUBSCRIBER)
                        .count(XBNG_PUNT_RATE_SUB_DHCPV4)
                        .pre(flooded));
    steps.push_back(access(kAcc0, renew(s1), XDP_DROP, XBNG_DROP_PUNT_RATE_SUBSCRIBER)
                        .count(XBNG_PUNT_RATE_SUB_DHCPV4));
    steps.push_back(punt_step(s1, solicit(s1), XBNG_PUNT_KIND_DHCPV6, XBNG_PUNT_DHCPV6));
    steps.push_back(punt_step(s1, router_solicit(s1), XBNG_PUNT_KIND_RS, XBNG_PUNT_ROUTER_SOLICIT));
    steps.push_back(access(kAcc0, discover(s1), XDP_DROP, XBNG_DROP_PUNT_RATE_SUBSCRIBER)
                        .count(XBNG_PUNT_RATE_SUB_DHCPV4));
    add(row("a DHCPv4 flood leaves the subscriber's DHCPv6 and RS budgets alone",
            std::move(steps)));
  }
  {
    // ... and each of the others is limited on its own, counted as its own.
    auto flooded = [](Harness& h) {
      const uint64_t later = Harness::now_ns() + 60ull * 1000000000ull;
      h.set_punt_tat(kS1.key(), later, XBNG_PUNT_KIND_DHCPV6);
      h.set_punt_tat(kS1.key(), later, XBNG_PUNT_KIND_RS);
    };
    add(row("DHCPv6 and RS over their budgets are limited, DHCPv4 still punted",
            {access(kAcc0, solicit(s1), XDP_DROP, XBNG_DROP_PUNT_RATE_SUBSCRIBER)
                 .count(XBNG_PUNT_RATE_SUB_DHCPV6)
                 .pre(flooded),
             access(kAcc0, router_solicit(s1), XDP_DROP, XBNG_DROP_PUNT_RATE_SUBSCRIBER)
                 .count(XBNG_PUNT_RATE_SUB_RS),
             punt_step(s1, discover(s1), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4)}));
  }
  // ---- unknown keys on a port that authorizes on demand (XBNG_PORT_F_PUNT_UNKNOWN) ----------
  {
    const Mac cpe = mac("02:00:00:09:09:09");
    const SubDef unknown{"unknown", &kAcc0, 999, 998, cpe, 0, ip4("0.0.0.0"), ip6("::")};
    auto auth_port = [](Harness& h) {
      h.edit_port("acc0", [](struct xbng_port& v) { v.flags |= XBNG_PORT_F_PUNT_UNKNOWN; });
    };
    auto unknown_punt = [&](Bytes in, uint32_t kind, int reason) {
      return access(kAcc0, std::move(in), XDP_DROP, reason).punted({kind, &kAcc0, 999, 998});
    };
    add(row("auth port: DHCPv4 DISCOVER of an unknown key is punted (no event)",
            unknown_punt(discover(unknown), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_UNKNOWN_DHCPV4)
                .pre(auth_port)));
    add(row("auth port: DHCPv4 REQUEST to the gateway of an unknown key is punted",
            unknown_punt(Packet()
                             .eth(kAcc0.mac, cpe)
                             .qinq(0x88a8, 999, 998)
                             .ipv4(ip4("0.0.0.0"), kAcc0.gw4)
                             .udp(68, 67)
                             .payload(300)
                             .build(),
                         XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_UNKNOWN_DHCPV4)
                .pre(auth_port)));
    add(row("auth port: DHCPv6 SOLICIT of an unknown key is punted",
            unknown_punt(solicit(unknown), XBNG_PUNT_KIND_DHCPV6, XBNG_PUNT_UNKNOWN_DHCPV6)
                .pre(auth_port)));
    add(row("auth port: Router Solicitation of an unknown key is punted",
            unknown_punt(router_solicit(unknown), XBNG_PUNT_KIND_RS, XBNG_PUNT_UNKNOWN_RS)
                .pre(auth_port)));
    const ExpectedEvent ev{XBNG_EVENT_UNKNOWN_SUBSCRIBER, &kAcc0, 999, 998, cpe};
    add(row("auth port: a data frame of an unknown key is dropped and reported, not punted",
            access(kAcc0, udp4(from_sub(unknown), ip4("100.64.9.9"), kRemote4), XDP_DROP,
                   XBNG_DROP_UNKNOWN_SUBSCRIBER)
                .count(XBNG_EVENT_SENT)
                .event(ev)
                .pre(auth_port)));
    add(row("auth port: DHCPv4 server -> client frame of an unknown key is not punted",
            access(kAcc0,
                   Packet()
                       .eth(kBroadcast, cpe)
                       .qinq(0x88a8, 999, 998)
                       .ipv4(ip4("0.0.0.0"), ip4("255.255.255.255"))
                       .udp(67, 68)
                       .payload(300)
                       .build(),
                   XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
                .count(XBNG_EVENT_SENT)
                .event(ev)
                .pre(auth_port)));
    add(row("auth port: DHCPv4 unicast to another server from an unknown key is not punted",
            access(kAcc0,
                   Packet()
                       .eth(kAcc0.mac, cpe)
                       .qinq(0x88a8, 999, 998)
                       .ipv4(ip4("100.64.9.9"), kRemote4)
                       .udp(68, 67)
                       .payload(300)
                       .build(),
                   XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
                .count(XBNG_EVENT_SENT)
                .event(ev)
                .pre(auth_port)));
    add(row("auth port: an ARP request of an unknown key is not punted",
            access(kAcc0,
                   Packet()
                       .eth(kBroadcast, cpe)
                       .qinq(0x88a8, 999, 998)
                       .arp(1, cpe, ip4("100.64.9.9"), mac("00:00:00:00:00:00"), kAcc0.gw4)
                       .build(),
                   XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
                .count(XBNG_EVENT_SENT)
                .event(ev)
                .pre(auth_port)));
    add(row("another port without the flag: unknown DHCPv4 is only reported",
            access(kAcc1,
                   Packet()
                       .eth(kBroadcast, cpe)
                       .qinq(kAcc1.tpid, 999, 998)
                       .ipv4(ip4("0.0.0.0"), ip4("255.255.255.255"))
                       .udp(68, 67)
                       .payload(300)
                       .build(),
                   XDP_DROP, XBNG_DROP_UNKNOWN_SUBSCRIBER)
                .count(XBNG_EVENT_SENT)
                .event({XBNG_EVENT_UNKNOWN_SUBSCRIBER, &kAcc1, 999, 998, cpe})
                .pre(auth_port)));
    add(row("auth port: an unknown key over its punt rate is dropped and counted",
            access(kAcc0, discover(unknown), XDP_DROP, XBNG_DROP_PUNT_RATE_SUBSCRIBER)
                .count(XBNG_PUNT_RATE_SUB_DHCPV4)
                .pre([=](Harness& h) {
                  auth_port(h);
                  h.set_punt_tat(unknown.key(), Harness::now_ns() + 60ull * 1000000000ull);
                })));
    add(row(
        "auth port: unknown keys over the port's punt rate are dropped and counted",
        access(kAcc0, solicit(unknown), XDP_DROP, XBNG_DROP_PUNT_RATE_PORT).pre([=](Harness& h) {
          auth_port(h);
          h.set_punt_port_used(kAcc0.slot, Harness::now_ns(), XBNG_DEFAULT_PUNT_PORT_RATE);
        })));
    {
      // A DISCOVER storm from one unknown key: its burst is punted, then it
      // is limited; another unknown key still gets through.
      const SubDef other{"other", &kAcc0, 999, 997, cpe, 0, ip4("0.0.0.0"), ip6("::")};
      std::vector<Step> steps;
      for (int i = 0; i < XBNG_DEFAULT_PUNT_SUB_BURST; i++) {
        steps.push_back(
            unknown_punt(discover(unknown), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_UNKNOWN_DHCPV4));
        if (i == 0) steps.back().pre(auth_port);
      }
      steps.push_back(access(kAcc0, discover(unknown), XDP_DROP, XBNG_DROP_PUNT_RATE_SUBSCRIBER)
                          .count(XBNG_PUNT_RATE_SUB_DHCPV4));
      steps.push_back(access(kAcc0, discover(other), XDP_DROP, XBNG_PUNT_UNKNOWN_DHCPV4)
                          .punted({XBNG_PUNT_KIND_DHCPV4, &kAcc0, 999, 997}));
      add(row("auth port: a DISCOVER storm of an unknown key is limited per key",
              std::move(steps)));
    }
    add(row("auth port: a provisioned subscriber's DISCOVER is punted as before",
            punt_step(s1, discover(s1), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4).pre(auth_port)));
  }

  // ---- the data path is untouched --------------------------------------------------------
  add(row("data frame after punts is forwarded without a punt record",
          {punt_step(s1, discover(s1), XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4),
           access(kAcc0, udp4(from_sub(s1), s1.v4, kRemote4), XDP_REDIRECT, XBNG_FWD_UPSTREAM)
               .via(kUp0)
               .up("s1")
               .expect_out(udp4(plain(kRouterMac, kUp0.mac), s1.v4, kRemote4, ttl4(63)))}));
  return rows;
}

// The program of [punt] transport = "af_xdp" (rodata punt_xsk = 1), loaded on
// the harness's own maps: the verifier accepts its redirect branch, and with
// no socket in punt_xsks (a queue xbngd has none for) a punted frame still
// goes to the ring buffer whole, dropped and counted as on the default.
TEST(PuntAfXdp, NoSocketForTheQueueFallsBackToTheRing) {
  Harness& h = Harness::get();
  h.reset();
  struct xbng* x = xbng__open();
  ASSERT_NE(x, nullptr);
  struct bpf_map* m;
  bpf_object__for_each_map(m, x->obj) {
    if (bpf_map__is_internal(m)) continue;  // .rodata and the like: this object's own
    ASSERT_EQ(bpf_map__reuse_fd(m, h.map_fd(bpf_map__name(m))), 0) << bpf_map__name(m);
  }
  *x->rodata = *h.skel()->rodata;
  x->rodata->punt_xsk = 1;
  ASSERT_EQ(xbng__load(x), 0) << "the af_xdp variant does not load (verifier?)";

  const Bytes in = discover(kS1);
  struct xdp_md ctx {};
  ctx.data_end = (uint32_t)in.size();
  ctx.ingress_ifindex = (uint32_t)h.ifindex(kAcc0.name);
  struct bpf_test_run_opts opts {};
  opts.sz = sizeof(opts);
  opts.data_in = in.data();
  opts.data_size_in = (uint32_t)in.size();
  opts.ctx_in = &ctx;
  opts.ctx_size_in = sizeof(ctx);
  opts.repeat = 1;
  const int err = bpf_prog_test_run_opts(bpf_program__fd(x->progs.xdp_access), &opts);
  const int saved = errno;
  xbng__destroy(x);
  ASSERT_EQ(err, 0) << "BPF_PROG_TEST_RUN: " << std::strerror(saved);
  EXPECT_EQ(opts.retval, (uint32_t)XDP_DROP);
  const auto punts = h.drain_punts();
  ASSERT_EQ(punts.size(), 1u);
  const auto* r = reinterpret_cast<const struct xbng_punt_record*>(punts[0].data());
  EXPECT_EQ(r->kind, (uint32_t)XBNG_PUNT_KIND_DHCPV4);
  EXPECT_EQ(r->outer_vid, kS1.svid);
  EXPECT_EQ(r->inner_vid, kS1.cvid);
  ASSERT_EQ(r->len, in.size());
  EXPECT_TRUE(Bytes(r->frame, r->frame + r->len) == in);
  h.reset();
}

}  // namespace bpftest
