// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Rate plans: the token buckets of bpf/lib/police.h, upstream in
// the subscriber entry, downstream in the `police` entry every route of the
// subscriber shares. The policers read the test clock (Harness::set_clock),
// so every row is exact to the nanosecond.
//
// Plan used throughout: 8 Mbit/s = 1000 ns per byte (byte_ns_fp exact), so
// the 60-byte IPv4 datagram of udp4() costs 60 us and the 80-byte IPv6 one
// of udp6() 80 us; a burst of B bytes is B us of credit.
#include "harness.h"

namespace bpftest {

using testpkt::ip4;
using testpkt::ip6;

namespace {

constexpr uint64_t kRate = 8000000;  // bits/s
constexpr uint32_t kFp =
    (uint32_t)((8000000000ull << XBNG_POLICE_FP_SHIFT) / kRate);  // 1000 ns/byte
constexpr uint64_t kV4Cost = 60 * 1000;                           // ns
constexpr uint64_t kV6Cost = 80 * 1000;
constexpr uint64_t kT0 = 5000000000000ull;  // an arbitrary "now" (83 minutes after boot)

struct xbng_bucket bucket(uint64_t tat, uint32_t burst, uint32_t fp = kFp) {
  struct xbng_bucket b {};
  b.tat_ns = tat;
  b.byte_ns_fp = fp;
  b.burst_bytes = burst;
  return b;
}

// ---- upstream: s1, IPv4 from its /32 to the remote host --------------------
Bytes up_in() { return udp4(from_sub(kS1), kS1.v4, kRemote4); }

Step up_fwd(uint64_t now) {
  testpkt::Ipv4Opts w;
  w.ttl = 63;
  return access(*kS1.port, up_in(), XDP_REDIRECT, XBNG_FWD_UPSTREAM)
      .expect_out(udp4(plain(kRouterMac, kUp0.mac), kS1.v4, kRemote4, w))
      .via(kUp0)
      .up(kS1.name)
      .pre([now](Harness& h) { h.set_clock(now); });
}

Step up_drop(uint64_t now) {
  return access(*kS1.port, up_in(), XDP_DROP, XBNG_DROP_POLICED_UP)
      .policed(kS1.name, true)
      .pre([now](Harness& h) { h.set_clock(now); });
}

// The subscriber's upstream tat after the step.
std::function<void(Harness&)> up_tat_is(uint64_t want) {
  return [want](Harness& h) { EXPECT_EQ(h.subscriber(kS1).up.tat_ns, want) << "up.tat_ns"; };
}

// ---- downstream: to s1's /32, /128 and /64, and to s2 -----------------------
Step down_fwd4(const SubDef& s, const std::string& route, const Ip4& dst, uint64_t now) {
  testpkt::Ipv4Opts w;
  w.ttl = 63;
  return uplink(udp4(plain(kUp0.mac, kRouterMac), kRemote4, dst), XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
      .expect_out(udp4(to_sub(s), kRemote4, dst, w))
      .via(*s.port)
      .down(route)
      .pre([now](Harness& h) { h.set_clock(now); });
}

Step down_fwd6(const SubDef& s, const std::string& route, const Ip6& dst, uint64_t now) {
  testpkt::Ipv6Opts w;
  w.hop_limit = 63;
  return uplink(udp6(plain(kUp0.mac, kRouterMac), kRemote6, dst), XDP_REDIRECT, XBNG_FWD_DOWNSTREAM)
      .expect_out(udp6(to_sub(s), kRemote6, dst, w))
      .via(*s.port)
      .down(route)
      .pre([now](Harness& h) { h.set_clock(now); });
}

Step down_drop6(const SubDef& s, const Ip6& dst, uint64_t now) {
  return uplink(udp6(plain(kUp0.mac, kRouterMac), kRemote6, dst), XDP_DROP, XBNG_DROP_POLICED_DOWN)
      .policed(s.name, false)
      .pre([now](Harness& h) { h.set_clock(now); });
}

std::function<void(Harness&)> down_tat_is(const SubDef& s, uint64_t want) {
  return [&s, want](Harness& h) {
    EXPECT_EQ(h.police(s).down.tat_ns, want) << "down.tat_ns of " << s.name;
  };
}

const Ip6 kS1In64 = ip6("2001:db8:6401:1::99");  // inside r64-s1

// Prepaid credit: a burst of 262144 bytes draws chunks of 2048 bytes (burst
// / 128), a route holds at most a chunk and XBNG_CREDIT_SLACK (4096), and
// the shared bucket is 3 x 4096 shallower.
constexpr uint32_t kCreditBurst = 262144;
constexpr uint32_t kChunk = 2048;
constexpr uint32_t kDepth = kCreditBurst - 3 * (kChunk + XBNG_CREDIT_SLACK);  // 249856

// s1's plan with credit on its /32, /128 and /64 (as xbngd flags its first
// three routes), each route's credit set to `credit`.
void credit_plan(Harness& h, uint64_t tat, uint32_t credit) {
  h.set_down_bucket(kS1, bucket(tat, kCreditBurst));
  for (const char* name : {"r4-s1", "r6-s1", "r64-s1"}) {
    struct xbng_route r = h.route(name);
    r.flags |= XBNG_ROUTE_F_CREDIT;
    r.credit = credit;
    h.set_route(name, r);
  }
}

std::function<void(Harness&)> credit_is(const std::string& route, uint32_t want) {
  return [route, want](Harness& h) { EXPECT_EQ(h.route(route).credit, want) << route; };
}

// The shared bucket is exhausted (at its depth): only credit admits.
void exhaust(Harness& h, uint64_t now) {
  struct xbng_police p = h.police(kS1);
  p.down.tat_ns = now + uint64_t{kDepth} * 1000;
  h.set_police(kS1, p);
}

}  // namespace

std::vector<Row> police_rows() {
  std::vector<Row> rows;
  auto add = [&rows](Row r) { rows.push_back(std::move(r)); };

  // ---- upstream --------------------------------------------------------------
  {
    // Rate 0 = unlimited: forwarded, the bucket untouched (no charge).
    Step s = up_fwd(kT0);
    s.before = [](Harness& h) {
      h.set_clock(kT0);
      h.set_up_bucket(kS1, bucket(kT0 + 99999999, 1500, 0));
    };
    s.post(up_tat_is(kT0 + 99999999));
    add(row("upstream zero rate is unlimited", {s}));
  }
  {
    // Idle for 83 minutes (tat far in the past): the bucket is full, and
    // the charge starts from now, not from the old tat.
    Step s = up_fwd(kT0);
    s.before = [](Harness& h) {
      h.set_clock(kT0);
      h.set_up_bucket(kS1, bucket(1000, 1500));
    };
    s.post(up_tat_is(kT0 + kV4Cost));
    add(row("upstream refill across a long idle period", {s}));
  }
  {
    // Burst edge: 1500 bytes of depth; with 60 bytes of credit left the
    // packet conforms exactly, the next one at the same instant does not,
    // nor one 1 ns too early; at cost(60 bytes) later it does.
    const uint64_t tau = 1500 * 1000;
    Step a = up_fwd(kT0);
    a.before = [tau](Harness& h) {
      h.set_clock(kT0);
      h.set_up_bucket(kS1, bucket(kT0 + tau - kV4Cost, 1500));
    };
    a.post(up_tat_is(kT0 + tau));
    Step b = up_drop(kT0);
    b.post(up_tat_is(kT0 + tau));  // a dropped packet charges nothing
    Step c = up_drop(kT0 + kV4Cost - 1);
    Step d = up_fwd(kT0 + kV4Cost);
    d.post(up_tat_is(kT0 + tau + kV4Cost));
    add(row("upstream burst edge", {a, b, c, d}));
  }
  {
    // Over the plan, then the plan is raised as the agent does it: new
    // cost and depth, bucket full (tat 0), counters kept. Then lowered
    // to unlimited.
    Step a = up_drop(kT0);
    a.before = [](Harness& h) {
      h.set_clock(kT0);
      h.set_up_bucket(kS1, bucket(kT0 + 1500 * 1000, 1500));
    };
    Step b = up_fwd(kT0 + 1);
    b.before = [](Harness& h) {
      h.set_clock(kT0 + 1);
      h.set_up_bucket(kS1, bucket(0, 3000, kFp / 10));  // 80 Mbit/s
    };
    b.post([](Harness& h) {
      EXPECT_EQ(h.subscriber(kS1).up.tat_ns, kT0 + 1 + kV4Cost / 10);
      EXPECT_EQ(h.police(kS1).up_policed_packets, 1u) << "policed counter kept";
    });
    Step c = up_fwd(kT0 + 1);
    Step d = up_drop(kT0 + 1);
    Step e = up_fwd(kT0 + 1);
    e.before = [](Harness& h) {
      h.set_clock(kT0 + 1);
      struct xbng_bucket b = h.subscriber(kS1).up;
      b.byte_ns_fp = 0;  // unlimited now
      h.set_up_bucket(kS1, b);
    };
    c.before = [](Harness& h) {  // the last conforming packet at 80 Mbit/s
      h.set_clock(kT0 + 1);
      h.set_up_bucket(kS1, bucket(kT0 + 1 + 3000 * 100 - kV4Cost / 10, 3000, kFp / 10));
    };
    add(row("upstream policy change mid-stream", {a, b, c, d, e}));
  }
  {
    // The clock wraps past 2^64 between two packets: times compare as
    // signed differences. Depth 100 bytes (100 us) holds one 60-byte packet.
    const uint64_t t = ~0ull - 29999;  // 30 us before the wrap
    Step a = up_fwd(t);
    a.before = [t](Harness& h) {
      h.set_clock(t);
      h.set_up_bucket(kS1, bucket(t - 5, 100));
    };
    a.post(up_tat_is(t + kV4Cost));  // = 30000 after the wrap
    Step b = up_drop(t);
    Step c = up_fwd(t + kV4Cost);  // now = 30000: refilled across the wrap
    c.post(up_tat_is(t + 2 * kV4Cost));
    add(row("upstream clock wrap", {a, b, c}));
  }
  {
    // IPv6 upstream goes through the same bucket (80-byte datagram).
    testpkt::Ipv6Opts w;
    w.hop_limit = 63;
    Bytes in = udp6(from_sub(kS1), kS1.v6, kRemote6);
    Step a = access(*kS1.port, in, XDP_DROP, XBNG_DROP_POLICED_UP).policed(kS1.name, true);
    a.before = [](Harness& h) {
      h.set_clock(kT0);
      h.set_up_bucket(kS1, bucket(kT0 + 1500 * 1000 - kV6Cost + 1, 1500));
    };
    Step b = access(*kS1.port, in, XDP_REDIRECT, XBNG_FWD_UPSTREAM)
                 .expect_out(udp6(plain(kRouterMac, kUp0.mac), kS1.v6, kRemote6, w))
                 .via(kUp0)
                 .up(kS1.name)
                 .pre([](Harness& h) { h.set_clock(kT0 + 1); });
    add(row("upstream IPv6 charges its 80 bytes", {a, b}));
  }

  // ---- downstream: one bucket for every route of the subscriber --------------
  {
    // 140 bytes of depth: the /32 (60) and the /128 (80) fit exactly, the
    // /64 is over; s2, on its own bucket, is not affected.
    Step a = down_fwd4(kS1, "r4-s1", kS1.v4, kT0);
    a.before = [](Harness& h) {
      h.set_clock(kT0);
      h.set_down_bucket(kS1, bucket(0, 140));
      h.set_down_bucket(kS2, bucket(0, 140));
    };
    Step b = down_fwd6(kS1, "r6-s1", kS1.v6, kT0);
    b.post(down_tat_is(kS1, kT0 + kV4Cost + kV6Cost));
    Step c = down_drop6(kS1, kS1In64, kT0);
    Step d = down_fwd4(kS2, "r4-s2", kS2.v4, kT0);
    Step e = down_fwd6(kS1, "r64-s1", kS1In64, kT0 + kV6Cost);
    add(row("downstream bucket shared by the /32, /128 and /64", {a, b, c, d, e}));
  }
  {
    // Framed IPv4 prefix (LPM) shares it too.
    Step a = down_fwd4(kS1, "p4-s1", ip4("198.51.100.9"), kT0);
    a.before = [](Harness& h) {
      h.set_clock(kT0);
      h.set_down_bucket(kS1, bucket(kT0 + 140 * 1000 - kV4Cost, 140));
    };
    Step b = uplink(udp4(plain(kUp0.mac, kRouterMac), kRemote4, kS1.v4), XDP_DROP,
                    XBNG_DROP_POLICED_DOWN)
                 .policed(kS1.name, false);
    add(row("downstream framed prefix shares the bucket", {a, b}));
  }
  {
    // Long idle, then a full bucket; zero rate with the route flag set is
    // unlimited; a bucket without the route flag is not consulted.
    Step a = down_fwd4(kS1, "r4-s1", kS1.v4, kT0);
    a.before = [](Harness& h) {
      h.set_clock(kT0);
      h.set_down_bucket(kS1, bucket(7, 140));
    };
    a.post(down_tat_is(kS1, kT0 + kV4Cost));
    Step b = down_fwd4(kS1, "r4-s1", kS1.v4, kT0);
    b.before = [](Harness& h) {
      h.set_clock(kT0);
      h.set_down_bucket(kS1, bucket(kT0 + 140 * 1000, 140));  // exhausted
      struct xbng_police p = h.police(kS1);
      p.down.byte_ns_fp = 0;  // flag still on the routes, rate 0
      h.set_police(kS1, p);
    };
    b.post(down_tat_is(kS1, kT0 + 140 * 1000));
    Step c = down_fwd4(kS1, "r4-s1", kS1.v4, kT0);
    c.before = [](Harness& h) {
      h.set_clock(kT0);
      h.set_down_bucket(kS1, bucket(0, 0, 0));  // clears the route flags
      struct xbng_police p = h.police(kS1);
      p.down = bucket(kT0 + 140 * 1000, 140);  // exhausted, but not consulted
      h.set_police(kS1, p);
    };
    add(row("downstream idle refill, zero rate, no route flag", {a, b, c}));
  }

  // ---- downstream: prepaid credit on the routes -------------------------------
  {
    // The first packet draws itself and a chunk from the full bucket; the
    // next ones spend the route's credit without the bucket (exhausted
    // here, so it would refuse them); another route has its own credit
    // (none yet) and meets the exhausted bucket.
    Step a = down_fwd4(kS1, "r4-s1", kS1.v4, kT0);
    a.before = [](Harness& h) {
      h.set_clock(kT0);
      credit_plan(h, 0, 0);
    };
    a.post(down_tat_is(kS1, kT0 + (60 + kChunk) * 1000));
    a.post(credit_is("r4-s1", kChunk));
    Step b = down_fwd4(kS1, "r4-s1", kS1.v4, kT0);
    b.before = [](Harness& h) {
      h.set_clock(kT0);
      exhaust(h, kT0);
    };
    b.post(credit_is("r4-s1", kChunk - 60));
    b.post(down_tat_is(kS1, kT0 + uint64_t{kDepth} * 1000));
    Step c = down_drop6(kS1, kS1In64, kT0);
    c.post(credit_is("r64-s1", 0));
    add(row("downstream credit: one draw, then the route's own", {a, b, c}));
  }
  {
    // Credit short of the packet, bucket exhausted: dropped, nothing
    // charged, the credit kept. When the bucket has refilled the packet
    // but not a chunk too, the packet alone is charged (a plain bucket).
    Step a = down_fwd4(kS1, "r4-s1", kS1.v4, kT0);
    a.before = [](Harness& h) {
      h.set_clock(kT0);
      credit_plan(h, 0, 100);
      exhaust(h, kT0);
    };
    a.post(credit_is("r4-s1", 40));
    Step b = uplink(udp4(plain(kUp0.mac, kRouterMac), kRemote4, kS1.v4), XDP_DROP,
                    XBNG_DROP_POLICED_DOWN)
                 .policed(kS1.name, false)
                 .pre([](Harness& h) { h.set_clock(kT0 + kV4Cost - 1); });
    b.post(credit_is("r4-s1", 40));
    b.post(down_tat_is(kS1, kT0 + uint64_t{kDepth} * 1000));
    Step c = down_fwd4(kS1, "r4-s1", kS1.v4, kT0 + kV4Cost);
    c.post(credit_is("r4-s1", 40));
    c.post(down_tat_is(kS1, kT0 + uint64_t{kDepth} * 1000 + kV4Cost));
    add(row("downstream credit short: the bucket alone decides", {a, b, c}));
  }
  {
    // The shared bucket is the burst less what the credit routes may hold:
    // a route without credit (the framed prefix) fits exactly one more
    // 60-byte packet below the depth, not below the burst.
    Step a = down_fwd4(kS1, "p4-s1", ip4("198.51.100.9"), kT0);
    a.before = [](Harness& h) {
      h.set_clock(kT0);
      credit_plan(h, kT0 + (uint64_t{kDepth} - 60) * 1000, 0);
    };
    a.post(down_tat_is(kS1, kT0 + uint64_t{kDepth} * 1000));
    Step b = uplink(udp4(plain(kUp0.mac, kRouterMac), kRemote4, ip4("198.51.100.9")), XDP_DROP,
                    XBNG_DROP_POLICED_DOWN)
                 .policed(kS1.name, false)
                 .pre([](Harness& h) { h.set_clock(kT0); });
    add(row("downstream bucket depth leaves room for the credit", {a, b}));
  }
  {
    // Credit short of the packet with a full bucket: the leftover stays
    // and a chunk joins it (the /128's 80-byte packet, 79 bytes left).
    Step a = down_fwd6(kS1, "r6-s1", kS1.v6, kT0);
    a.before = [](Harness& h) {
      h.set_clock(kT0);
      credit_plan(h, 0, 79);
    };
    a.post(credit_is("r6-s1", 79 + kChunk));
    a.post(down_tat_is(kS1, kT0 + (80 + kChunk) * 1000));
    add(row("downstream credit: leftover kept, chunk added", {a}));
  }
  return rows;
}

}  // namespace bpftest
