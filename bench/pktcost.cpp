// xbng_bench_pktcost: per-packet cost of the fast path with BPF_PROG_TEST_RUN
// next to three references over the same keys.
//
// Runs in a private network namespace (unshare(CLONE_NEWNET): it vanishes
// with the process). For each N: xbng is loaded with its maps sized to N and
// N subscribers written straight into them; the template-restoring wrapper
// (bpf/pktcost.bpf.c) tail-calls xdp_access / xdp_uplink or a reference
// program with a repeat count in the millions; the kernel reports ns per
// repetition. Every timed run is checked: the action of the last repetition,
// and (xbng) the verdict counter moved by exactly `repeat`, or (references)
// no lookup missed. A benchmark: it prints figures, it never passes or fails
// on them.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <linux/if_link.h>
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>

#include "bench_util.hpp"
#include "pktcost.skel.h"
#include "xbng.skel.h"
#include "xbng/benchstop.h"
#include "xbng_bench.skel.h"

using namespace xbench;

namespace {

enum class Tmpl { kUpV4, kUpV6, kArp, kDownV4, kDownV6, kDownV6_64, kUpSyn4, kDownSyn4 };

struct Case {
  std::string id;
  std::string label;
  std::string kind;  // harness | reference | xbng
  uint32_t slot;
  uint32_t mode;
  Tmpl tmpl;
  bool uplink_ingress;  // ingress_ifindex = uplink (else access)
  uint32_t action;
  int reason;           // xbng verdict counted on success, -1 for the references
  int len_delta;        // output length - input length
  bool police = false;  // timed with every subscriber on a rate plan
  bool steps = false;   // the benchmark build ending at a stop point (--steps)
  bool direct = false;  // host routes looked up in the direct arrays
  bool dsub = false;    // subscribers looked up in the direct subscriber array
};

constexpr uint32_t stop_slot(uint32_t stop) { return PC_SLOT_UP_STOP0 + stop; }

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"harness", "harness (wrapper + tail call)", "harness", PC_SLOT_REF_NOP, PC_MODE_DOWN_V4,
       Tmpl::kDownV4, true, XDP_DROP, -1, 0},
      {"ref_redirect", "ref: redirect only (floor)", "reference", PC_SLOT_REF_REDIRECT,
       PC_MODE_DOWN_V4, Tmpl::kDownV4, true, XDP_REDIRECT, -1, 0},
      {"ref_hash", "ref: hash lookup IPv4 /32", "reference", PC_SLOT_REF_HASH, PC_MODE_DOWN_V4,
       Tmpl::kDownV4, true, XDP_REDIRECT, -1, 0},
      {"ref_lpm", "ref: LPM-trie lookup /32", "reference", PC_SLOT_REF_LPM, PC_MODE_DOWN_V4,
       Tmpl::kDownV4, true, XDP_REDIRECT, -1, 0},
      {"ref_fib", "ref: bpf_fib_lookup IPv4", "reference", PC_SLOT_REF_FIB, PC_MODE_DOWN_V4,
       Tmpl::kDownV4, true, XDP_REDIRECT, -1, 0},
      {"ref_fib6", "ref: bpf_fib_lookup IPv6 (upstream)", "reference", PC_SLOT_REF_FIB6,
       PC_MODE_UP_V6, Tmpl::kUpV6, false, XDP_REDIRECT, -1, 0},
      {"up_v4", "xbng upstream IPv4", "xbng", PC_SLOT_XDP_ACCESS, PC_MODE_UP_V4, Tmpl::kUpV4, false,
       XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8},
      {"up_v6", "xbng upstream IPv6", "xbng", PC_SLOT_XDP_ACCESS, PC_MODE_UP_V6, Tmpl::kUpV6, false,
       XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8},
      {"down_v4", "xbng downstream IPv4", "xbng", PC_SLOT_XDP_UPLINK, PC_MODE_DOWN_V4,
       Tmpl::kDownV4, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8},
      {"down_v6", "xbng downstream IPv6 /128", "xbng", PC_SLOT_XDP_UPLINK, PC_MODE_DOWN_V6,
       Tmpl::kDownV6, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8},
      {"down_v6_64", "xbng downstream IPv6 /64", "xbng", PC_SLOT_XDP_UPLINK, PC_MODE_DOWN_V6_64,
       Tmpl::kDownV6_64, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8},
      // The same /32 routes in the direct array (one pool, slot = offset).
      {"down_v4_direct", "xbng downstream IPv4 direct", "xbng", PC_SLOT_XDP_UPLINK, PC_MODE_DOWN_V4,
       Tmpl::kDownV4, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8, false, false, true},
      // The same /128 and /64 routes in direct_v6 (a pool of each, slot = offset).
      {"down_v6_direct", "xbng downstream /128 direct", "xbng", PC_SLOT_XDP_UPLINK, PC_MODE_DOWN_V6,
       Tmpl::kDownV6, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8, false, false, true},
      {"down_v6_64_direct", "xbng downstream /64 direct", "xbng", PC_SLOT_XDP_UPLINK,
       PC_MODE_DOWN_V6_64, Tmpl::kDownV6_64, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8, false,
       false, true},
      // The same subscribers in the direct subscriber array (one S-VLAN range).
      {"up_v4_dsub", "xbng upstream IPv4 direct sub", "xbng", PC_SLOT_XDP_ACCESS, PC_MODE_UP_V4,
       Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8, false, false, false, true},
      {"up_v6_dsub", "xbng upstream IPv6 direct sub", "xbng", PC_SLOT_XDP_ACCESS, PC_MODE_UP_V6,
       Tmpl::kUpV6, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8, false, false, false, true},
      {"arp", "xbng ARP reply", "xbng", PC_SLOT_XDP_ACCESS, PC_MODE_ARP, Tmpl::kArp, false, XDP_TX,
       XBNG_TX_ARP_REPLY, 0},
      // TCP SYNs whose MSS option is clamped on every pass.
      {"up_syn4", "xbng up IPv4 SYN, MSS clamped", "xbng", PC_SLOT_XDP_ACCESS, PC_MODE_UP_V4,
       Tmpl::kUpSyn4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8},
      {"down_syn4", "xbng down IPv4 SYN, MSS clamped", "xbng", PC_SLOT_XDP_UPLINK, PC_MODE_DOWN_V4,
       Tmpl::kDownSyn4, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8},
      // Rate plans: where a shared downstream bucket can live (ref_hash + bucket).
      {"ref_pol_route", "ref: hash + bucket in route value", "reference", PC_SLOT_REF_POL_ROUTE,
       PC_MODE_DOWN_V4, Tmpl::kDownV4, true, XDP_REDIRECT, -1, 0},
      {"ref_pol_array", "ref: hash + slot -> array bucket", "reference", PC_SLOT_REF_POL_ARRAY,
       PC_MODE_DOWN_V4, Tmpl::kDownV4, true, XDP_REDIRECT, -1, 0},
      {"ref_pol_subhash", "ref: hash + subscriber hash bucket", "reference",
       PC_SLOT_REF_POL_SUBHASH, PC_MODE_DOWN_V4, Tmpl::kDownV4, true, XDP_REDIRECT, -1, 0},
      // Rate plans: the fast path with every subscriber on a rate plan.
      {"up_v4_pol", "xbng upstream IPv4 +police", "xbng", PC_SLOT_XDP_ACCESS, PC_MODE_UP_V4,
       Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8, true},
      {"up_v6_pol", "xbng upstream IPv6 +police", "xbng", PC_SLOT_XDP_ACCESS, PC_MODE_UP_V6,
       Tmpl::kUpV6, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8, true},
      {"up_v4_dsub_pol", "xbng up IPv4 direct sub +police", "xbng", PC_SLOT_XDP_ACCESS,
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8, true, false, false,
       true},
      {"down_v4_pol", "xbng downstream IPv4 +police", "xbng", PC_SLOT_XDP_UPLINK, PC_MODE_DOWN_V4,
       Tmpl::kDownV4, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8, true},
      {"down_v4_direct_pol", "xbng down IPv4 direct +police", "xbng", PC_SLOT_XDP_UPLINK,
       PC_MODE_DOWN_V4, Tmpl::kDownV4, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8, true, false,
       true},
      {"down_v6_pol", "xbng downstream /128 +police", "xbng", PC_SLOT_XDP_UPLINK, PC_MODE_DOWN_V6,
       Tmpl::kDownV6, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8, true},
      {"down_v6_64_pol", "xbng downstream /64 +police", "xbng", PC_SLOT_XDP_UPLINK,
       PC_MODE_DOWN_V6_64, Tmpl::kDownV6_64, true, XDP_REDIRECT, XBNG_FWD_DOWNSTREAM, 8, true},
      // One subscriber-keyed lookup at three kernel element sizes (--steps):
      // what the layout of the subscriber value costs the lookup.
      {"ref_sub96", "ref: sub-key hash, 96 B element", "reference", PC_SLOT_REF_SUB40,
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, -1, 0, false, true},
      {"ref_sub120", "ref: sub-key hash, 120 B (xbng)", "reference", PC_SLOT_REF_SUB64,
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, -1, 0, false, true},
      {"ref_sub128", "ref: sub-key hash, 128 B element", "reference", PC_SLOT_REF_SUB72,
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, -1, 0, false, true},
      // Upstream IPv4 step by step (--steps): the benchmark build of the same
      // code ending at each stop point; the stops before the tags are popped
      // redirect the frame unchanged.
      {"up4_s1", "up4 stop: QinQ parsed", "xbng", stop_slot(XBNG_BSTOP_PARSED), PC_MODE_UP_V4,
       Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true},
      {"up4_s2", "up4 stop: + subscriber lookup", "xbng", stop_slot(XBNG_BSTOP_LOOKUP),
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true},
      {"up4_s3", "up4 stop: + MAC policy", "xbng", stop_slot(XBNG_BSTOP_MAC), PC_MODE_UP_V4,
       Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true},
      {"up4_s4", "up4 stop: + checks, anti-spoof", "xbng", stop_slot(XBNG_BSTOP_CHECKS),
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true},
      {"up4_s5", "up4 stop: + TTL, MSS, policer", "xbng", stop_slot(XBNG_BSTOP_POLICE),
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true},
      {"up4_s6", "up4 stop: + bpf_fib_lookup", "xbng", stop_slot(XBNG_BSTOP_FIB), PC_MODE_UP_V4,
       Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true},
      {"up4_s7", "up4 stop: + redirect, pop", "xbng", stop_slot(XBNG_BSTOP_POP), PC_MODE_UP_V4,
       Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8, false, true},
      {"up4_s0", "up4 stop: none (+ counters)", "xbng", stop_slot(XBNG_BSTOP_NONE), PC_MODE_UP_V4,
       Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, -8, false, true},
      // The same stops with the subscriber in the direct array.
      {"up4d_s2", "up4 direct sub stop: + lookup", "xbng", stop_slot(XBNG_BSTOP_LOOKUP),
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true, false,
       true},
      {"up4d_s5", "up4 direct sub stop: + policer", "xbng", stop_slot(XBNG_BSTOP_POLICE),
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true, false,
       true},
      {"up4d_s6", "up4 direct sub stop: + FIB", "xbng", stop_slot(XBNG_BSTOP_FIB), PC_MODE_UP_V4,
       Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true, false, true},
      {"up4d_s4", "up4 direct sub stop: + checks", "xbng", stop_slot(XBNG_BSTOP_CHECKS),
       PC_MODE_UP_V4, Tmpl::kUpV4, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true, false,
       true},
      // Upstream IPv6 with the subscriber in the direct array, step by step:
      // what IPv6 costs beyond IPv4 at each stop.
      {"up6d_s1", "up6 direct sub stop: parsed", "xbng", stop_slot(XBNG_BSTOP_PARSED),
       PC_MODE_UP_V6, Tmpl::kUpV6, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true, false,
       true},
      {"up6d_s2", "up6 direct sub stop: + lookup", "xbng", stop_slot(XBNG_BSTOP_LOOKUP),
       PC_MODE_UP_V6, Tmpl::kUpV6, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true, false,
       true},
      {"up6d_s4", "up6 direct sub stop: + checks", "xbng", stop_slot(XBNG_BSTOP_CHECKS),
       PC_MODE_UP_V6, Tmpl::kUpV6, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true, false,
       true},
      {"up6d_s5", "up6 direct sub stop: + policer", "xbng", stop_slot(XBNG_BSTOP_POLICE),
       PC_MODE_UP_V6, Tmpl::kUpV6, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true, false,
       true},
      {"up6d_s6", "up6 direct sub stop: + FIB", "xbng", stop_slot(XBNG_BSTOP_FIB), PC_MODE_UP_V6,
       Tmpl::kUpV6, false, XDP_REDIRECT, XBNG_FWD_UPSTREAM, 0, false, true, false, true},
  };
  return c;
}

// The private namespace: access veth acc0 (peer accp), uplink veth upl0
// (peer uplp) with an address, a permanent neighbour and default routes, so
// that bpf_fib_lookup succeeds upstream.
struct Env {
  unsigned acc = 0, upl = 0;
  Mac port_mac{0x02, 0xaa, 0, 0, 0, 0x01};  // access port MAC (gateway)
  Mac upl_mac{}, peer_mac{0x02, 0xbb, 0, 0, 0, 0x02};
  std::map<Tmpl, std::vector<uint8_t>> frames;
};

Env setup_namespace() {
  if (unshare(CLONE_NEWNET) != 0)
    throw BenchError(fmt::format("unshare(CLONE_NEWNET): {} (run as root)", std::strerror(errno)));
  sh("ip link set lo up");
  sh("ip link add acc0 type veth peer name accp");
  sh("ip link add upl0 type veth peer name uplp");
  for (const char* d : {"acc0", "accp", "upl0", "uplp"}) sh(fmt::format("ip link set {} up", d));
  sysctl_net("net.ipv4.ip_forward", "1");
  sysctl_net("net.ipv4.conf.all.forwarding", "1");
  sysctl_net("net.ipv6.conf.all.forwarding", "1");
  Env e;
  sh("ip addr add 198.51.100.1/24 dev upl0");
  sh("ip -6 addr add 2001:db8:ffff::1/64 dev upl0 nodad");
  sh(fmt::format("ip neigh replace 198.51.100.2 lladdr {} dev upl0 nud permanent",
                 mac_str(e.peer_mac)));
  sh(fmt::format("ip -6 neigh replace 2001:db8:ffff::2 lladdr {} dev upl0 nud permanent",
                 mac_str(e.peer_mac)));
  sh("ip route add default via 198.51.100.2 dev upl0");
  sh("ip -6 route add default via 2001:db8:ffff::2 dev upl0");
  e.acc = ifindex_of("acc0");
  e.upl = ifindex_of("upl0");
  e.upl_mac = mac_of("upl0");

  FrameAddrs up;  // to the gateway MAC, from the subscriber
  up.dst = e.port_mac;
  FrameAddrs down;  // from the network to the uplink
  down.dst = e.upl_mac;
  down.src = e.peer_mac;
  e.frames[Tmpl::kUpV4] = frame_up_v4(up);
  e.frames[Tmpl::kUpV6] = frame_up_v6(up);
  e.frames[Tmpl::kArp] = frame_arp(up, 0x64400001);  // who-has the gateway 100.64.0.1
  e.frames[Tmpl::kDownV4] = frame_down_v4(down, 0xcb007101);
  e.frames[Tmpl::kDownV6] = frame_down_v6(down, false);
  e.frames[Tmpl::kDownV6_64] = frame_down_v6(down, true);
  e.frames[Tmpl::kUpSyn4] = frame_up_syn4(up);
  e.frames[Tmpl::kDownSyn4] = frame_down_syn4(down, 0xcb007101);
  return e;
}

// A native pass-through on both ports registers their XDP rx queues, which
// BPF_PROG_TEST_RUN needs to accept ingress_ifindex.
void attach_pass(::pktcost* p, unsigned ifindex) {
  int fd = bpf_program__fd(p->progs.xdp_pass);
  if (int err = bpf_xdp_attach(static_cast<int>(ifindex), fd, XDP_FLAGS_DRV_MODE, nullptr))
    throw BenchError(
        fmt::format("attaching xdp_pass to ifindex {}: {}", ifindex, std::strerror(-err)));
}

struct RunOut {
  uint32_t retval = 0;
  uint32_t duration = 0;
  uint32_t out_len = 0;
};

RunOut test_run(int prog_fd, const std::vector<uint8_t>& frame, unsigned ingress, int repeat,
                bool want_out) {
  std::vector<uint8_t> out(frame.size() + 512);
  xdp_md ctx{};
  ctx.data_end = static_cast<uint32_t>(frame.size());
  ctx.ingress_ifindex = ingress;
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame.data(),
              .data_size_in = static_cast<uint32_t>(frame.size()), .ctx_in = &ctx,
              .ctx_size_in = sizeof ctx, .repeat = repeat);
  if (want_out) {
    o.data_out = out.data();
    o.data_size_out = static_cast<uint32_t>(out.size());
  }
  if (bpf_prog_test_run_opts(prog_fd, &o) != 0)
    throw BenchError(fmt::format("BPF_PROG_TEST_RUN: {}", std::strerror(errno)));
  return {o.retval, o.duration, o.data_size_out};
}

std::string reason_deltas(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  std::string s;
  for (size_t r = 0; r < a.size(); r++)
    if (b[r] != a[r])
      s += fmt::format(" {}=+{}", reason_name(static_cast<uint32_t>(r)), b[r] - a[r]);
  return s.empty() ? " (no xbng counter moved)" : s;
}

struct Bench {
  Env& env;
  ::xbng* x;
  ::pktcost* p;
  uint32_t n;

  void configure(const Case& c, bool random) {
    WrapperConfig w;
    w.tmpl = env.frames.at(c.tmpl);
    w.mode = c.mode;
    w.nkeys = n;
    w.random = random;
    w.fixed_index = 0;
    w.use_tail = true;
    w.target = c.slot;
    pktcost_configure(p, w);
    xbng_set_direct(x, n, c.direct);
    xbng_set_direct_subs(x, env.acc, n, c.dsub);
  }

  unsigned ingress(const Case& c) const { return c.uplink_ingress ? env.upl : env.acc; }

  // repeat=1 runs (1 fixed, 16 random): action, output length and verdict
  // counter must be the expected ones. Returns an error message or "".
  std::string verify(const Case& c, bool random) {
    configure(c, random);
    const auto& f = env.frames.at(c.tmpl);
    int runs = random ? 16 : 1;
    auto before = xbng_all_reasons(x);
    uint64_t miss0 = pktcost_counter(p, kCntRefMiss);
    for (int k = 0; k < runs; k++) {
      RunOut r = test_run(bpf_program__fd(p->progs.wrapper), f, ingress(c), 1, true);
      uint32_t want_len = static_cast<uint32_t>(static_cast<int>(f.size()) + c.len_delta);
      if (r.retval != c.action || r.out_len != want_len)
        return fmt::format(
            "{} (N={}, {} keys): expected {} with a {}-byte frame, got {} with {} "
            "bytes; xbng counters:{}",
            c.label, size_label(n), random ? "random" : "fixed", action_name(c.action), want_len,
            action_name(r.retval), r.out_len, reason_deltas(before, xbng_all_reasons(x)));
    }
    if (c.reason >= 0) {
      auto after = xbng_all_reasons(x);
      uint64_t d = after[c.reason] - before[c.reason];
      if (d != static_cast<uint64_t>(runs))
        return fmt::format("{} (N={}): {} of {} runs counted as {}; counters:{}", c.label,
                           size_label(n), d, runs, reason_name(c.reason),
                           reason_deltas(before, after));
    } else if (pktcost_counter(p, kCntRefMiss) != miss0) {
      return fmt::format("{} (N={}): reference lookup missed", c.label, size_label(n));
    }
    return "";
  }

  // One timed run; checks that every repetition took the expected path.
  double time(const Case& c, bool random, int repeat) {
    configure(c, random);
    uint64_t r0 = c.reason >= 0 ? xbng_reason_packets(x, c.reason) : 0;
    uint64_t miss0 = pktcost_counter(p, kCntRefMiss);
    RunOut r = test_run(bpf_program__fd(p->progs.wrapper), env.frames.at(c.tmpl), ingress(c),
                        repeat, false);
    if (r.retval != c.action)
      throw BenchError(fmt::format("{} (N={}): timed run ended with {}, expected {}", c.label,
                                   size_label(n), action_name(r.retval), action_name(c.action)));
    if (c.reason >= 0) {
      uint64_t d = xbng_reason_packets(x, c.reason) - r0;
      if (d != static_cast<uint64_t>(repeat))
        throw BenchError(
            fmt::format("{} (N={}): only {} of {} repetitions counted as {}: the "
                        "timing mixes paths",
                        c.label, size_label(n), d, repeat, reason_name(c.reason)));
    } else if (pktcost_counter(p, kCntRefMiss) != miss0) {
      throw BenchError(fmt::format("{} (N={}): reference lookups missed during the timed run",
                                   c.label, size_label(n)));
    }
    return r.duration;
  }
};

// The benchmark build ending at `stop`, over the maps of the loaded live
// build `x` (its own only for the read-only configuration, at the defaults
// the live build was loaded with).
struct StopDeleter {
  void operator()(::xbng_bench* s) const { xbng_bench__destroy(s); }
};
using StopSkel = std::unique_ptr<::xbng_bench, StopDeleter>;

StopSkel load_stop(::xbng* x, uint32_t stop) {
  StopSkel s(xbng_bench__open());
  if (!s) throw BenchError(fmt::format("opening the benchmark build: {}", std::strerror(errno)));
  s->rodata->bench_stop = stop;
  bpf_map* m;
  bpf_object__for_each_map(m, s->obj) {
    if (bpf_map__is_internal(m)) continue;
    bpf_map* live = bpf_object__find_map_by_name(x->obj, bpf_map__name(m));
    int err = live ? bpf_map__reuse_fd(m, bpf_map__fd(live)) : -ENOENT;
    if (err)
      throw BenchError(
          fmt::format("benchmark build: map {}: {}", bpf_map__name(m), std::strerror(-err)));
  }
  if (int err = xbng_bench__load(s.get()))
    throw BenchError(
        fmt::format("loading the benchmark build (stop {}): {}", stop, std::strerror(-err)));
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Key {
  std::string id;
  uint32_t n;
  bool random;
  bool operator<(const Key& o) const {
    return std::tie(id, n, random) < std::tie(o.id, o.n, o.random);
  }
};

std::string fmt_ns(std::optional<double> v) { return v ? fmt::format("{:.0f}", *v) : "-"; }
std::string fmt_ratio(std::optional<double> v) { return v ? fmt::format("{:.2f}", *v) : "-"; }

// Upstream IPv4 step by step: each stop's ns/packet, what the step added to
// the previous stop, and the stop over the bare hash of the same run.
template <typename Get>
void print_steps(const Get& get, const std::vector<uint32_t>& sizes) {
  std::printf(
      "\nUpstream IPv4 step by step (benchmark build ending at each stop; 'step' = this stop - "
      "the previous one)\n");
  std::string h = fmt::format("{:<31} {:>5} | {:>6} {:>6} | {:>6} {:>6} | {:>9}", "stop", "N",
                              "fix", "rnd", "step f", "step r", "/hash rnd");
  std::printf("%s\n%s\n", h.c_str(), std::string(h.size(), '-').c_str());
  for (uint32_t n : sizes) {
    std::optional<double> pf = get("harness", n, false), pr = get("harness", n, true);
    bool dsub = false;  // the direct-subscriber stops follow the hash ones: start over
    for (const Case& c : cases()) {
      if (!c.steps || c.kind != "xbng") continue;
      if (c.dsub != dsub) {
        dsub = c.dsub;
        pf = get("up4_s1", n, false);
        pr = get("up4_s1", n, true);
      }
      auto f = get(c.id, n, false), r = get(c.id, n, true);
      auto d = [](std::optional<double> a, std::optional<double> b) -> std::optional<double> {
        if (!a || !b) return std::nullopt;
        return *a - *b;
      };
      std::printf("%s\n",
                  fmt::format("{:<31} {:>5} | {:>6} {:>6} | {:>6} {:>6} | {:>9}", c.label,
                              size_label(n), fmt_ns(f), fmt_ns(r), fmt_ns(d(f, pf)),
                              fmt_ns(d(r, pr)), fmt_ratio(ratio(r, get("ref_hash", n, true))))
                      .c_str());
      pf = f;
      pr = r;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xbng per-packet cost with BPF_PROG_TEST_RUN"};
  std::string sizes_arg = "1K,60K,1M";
  bool quick = false, skip_failed = false, steps = false;
  int repeat = 0, trials = 0;
  std::string json_path;
  app.add_option("--sizes", sizes_arg, "comma-separated subscriber counts (K/M suffixes)");
  app.add_flag("--quick", quick, "1K and 60K, 500K repetitions, 3 trials");
  app.add_option("--repeat", repeat, "repetitions per timed run (default 2M, quick 500K)");
  app.add_option("--trials", trials, "timed runs per figure, median reported (default 5, quick 3)");
  app.add_option("--json", json_path, "write the results as JSON to this file");
  double warm = 3;
  app.add_option("--warm", warm,
                 "untimed random packets per policed downstream case after each refill, "
                 "as a multiple of N (0: none)");
  std::string only;
  app.add_option("--cases", only,
                 "time only the cases whose id matches this regular expression (the harness and "
                 "the bare hash, which the ratios need, always)");
  app.add_flag("--steps", steps,
               "also time upstream IPv4 step by step (the benchmark build of xdp_access "
               "ending at each stop point)");
  app.add_flag("--skip-failed", skip_failed,
               "report a case whose verification fails and go on (default: abort)");
  CLI11_PARSE(app, argc, argv);

  if (quick && !app.count("--sizes")) sizes_arg = "1K,60K";
  if (repeat <= 0) repeat = quick ? 500000 : 2000000;
  if (trials <= 0) trials = quick ? 3 : 5;

  try {
    std::vector<uint32_t> sizes = parse_sizes(sizes_arg);

    nlohmann::json out;
    out["benchmark"] = "pktcost";
    out["machine"] = machine_info();
    out["config"] = {
        {"sizes", sizes}, {"repeat", repeat}, {"trials", trials}, {"quick", quick}, {"warm", warm}};

    const std::regex only_re(only.empty() ? ".*" : only);
    auto wanted = [&](const Case& c) {
      return c.id == "harness" || c.id == "ref_hash" || std::regex_search(c.id, only_re);
    };
    Env env = setup_namespace();
    std::map<Key, double> res;
    std::map<Key, std::vector<double>> raw;
    std::vector<std::string> failures;
    nlohmann::json fills = nlohmann::json::array();

    for (uint32_t n : sizes) {
      XbngSkel x = load_xbng(n);
      PktcostSkel p = load_pktcost(n, steps);
      attach_pass(p.get(), env.acc);
      attach_pass(p.get(), env.upl);
      xbng_add_port(x.get(), {env.acc, XBNG_ROLE_ACCESS, env.port_mac, 0});
      xbng_add_port(x.get(), {env.upl, XBNG_ROLE_UPLINK, env.upl_mac, 1});
      double t_x = xbng_fill_subscribers(x.get(), env.acc, n, false);
      bool policed = false;  // the state the maps are in
      auto set_police = [&](bool on) {
        if (on == policed) return;
        double t = xbng_fill_subscribers(x.get(), env.acc, n, on);
        policed = on;
        std::fprintf(stderr, "[N=%s] maps refilled with policing %s: %.2f s\n",
                     size_label(n).c_str(), on ? "on" : "off", t);
      };
      double t_r = pktcost_fill_refs(p.get(), env.acc, n);
      if (steps) t_r += pktcost_fill_sub_refs(p.get(), env.acc, n);
      fills.push_back({{"n", n}, {"xbng_maps_s", t_x}, {"reference_maps_s", t_r}});
      pktcost_set_ref_tx(p.get(), env.upl);
      pktcost_set_slot(p.get(), PC_SLOT_XDP_ACCESS, xbng_prog_access(x.get()));
      pktcost_set_slot(p.get(), PC_SLOT_XDP_UPLINK, xbng_prog_uplink(x.get()));
      pktcost_set_slot(p.get(), PC_SLOT_REF_NOP, bpf_program__fd(p->progs.ref_nop));
      pktcost_set_slot(p.get(), PC_SLOT_REF_REDIRECT, bpf_program__fd(p->progs.ref_redirect));
      pktcost_set_slot(p.get(), PC_SLOT_REF_HASH, bpf_program__fd(p->progs.ref_hash));
      pktcost_set_slot(p.get(), PC_SLOT_REF_LPM, bpf_program__fd(p->progs.ref_lpm));
      pktcost_set_slot(p.get(), PC_SLOT_REF_FIB, bpf_program__fd(p->progs.ref_fib));
      pktcost_set_slot(p.get(), PC_SLOT_REF_FIB6, bpf_program__fd(p->progs.ref_fib6));
      pktcost_set_slot(p.get(), PC_SLOT_REF_POL_ROUTE, bpf_program__fd(p->progs.ref_pol_route));
      pktcost_set_slot(p.get(), PC_SLOT_REF_POL_ARRAY, bpf_program__fd(p->progs.ref_pol_array));
      pktcost_set_slot(p.get(), PC_SLOT_REF_POL_SUBHASH, bpf_program__fd(p->progs.ref_pol_subhash));
      std::vector<StopSkel> stops;
      pktcost_set_slot(p.get(), PC_SLOT_REF_SUB40, bpf_program__fd(p->progs.ref_sub40));
      pktcost_set_slot(p.get(), PC_SLOT_REF_SUB64, bpf_program__fd(p->progs.ref_sub64));
      pktcost_set_slot(p.get(), PC_SLOT_REF_SUB72, bpf_program__fd(p->progs.ref_sub72));
      if (steps)
        for (uint32_t k = 0; k < XBNG_BSTOP_COUNT; k++) {
          stops.push_back(load_stop(x.get(), k));
          pktcost_set_slot(p.get(), stop_slot(k), bpf_program__fd(stops.back()->progs.xdp_access));
        }
      std::fprintf(stderr, "[N=%s] maps filled: xbng %.2f s, references %.2f s\n",
                   size_label(n).c_str(), t_x, t_r);

      Bench b{env, x.get(), p.get(), n};
      std::vector<const Case*> ok;
      // Unpoliced cases and references with the plain maps, then the policed
      // ones (the maps refilled with plans).
      std::vector<const Case*> order;
      for (const Case& c : cases())
        if (!c.police && (steps || !c.steps) && wanted(c)) order.push_back(&c);
      for (const Case& c : cases())
        if (c.police && wanted(c)) order.push_back(&c);
      for (const Case* cp : order) {
        const Case& c = *cp;
        set_police(c.police);
        std::string err = b.verify(c, false);
        if (err.empty()) err = b.verify(c, true);
        if (!err.empty()) {
          if (!skip_failed) throw BenchError("verification failed, nothing timed: " + err);
          std::fprintf(stderr, "SKIPPED %s\n", err.c_str());
          failures.push_back(err);
          continue;
        }
        ok.push_back(&c);
      }
      // Trials outermost: every case sees the same spread of machine noise;
      // within a trial, policing off then on (one refill each way).
      for (int t = 0; t < trials; t++)
        for (bool pol : {false, true}) {
          if (std::none_of(ok.begin(), ok.end(), [&](const Case* c) { return c->police == pol; }))
            continue;  // no refill for nothing (--cases)
          set_police(pol);
          // A refill leaves every route without prepaid credit: with
          // fewer repetitions than routes, random keys would time nothing
          // but first packets. Untimed, random keys, `warm` x N packets per
          // policed downstream case first (the same in every build).
          if (pol && warm > 0)
            for (const Case* c : ok)
              if (c->police && c->uplink_ingress)
                b.time(*c, true, static_cast<int>(std::min<double>(warm * n, 2e9)));
          for (bool random : {false, true})
            // Each trial starts one case further on: drift of the
            // machine over a trial falls on every case in turn.
            for (size_t j = 0; j < ok.size(); j++) {
              const Case* c = ok[(j + static_cast<size_t>(t)) % ok.size()];
              if (c->police != pol) continue;
              double ns = b.time(*c, random, repeat);
              raw[{c->id, n, random}].push_back(ns);
              std::fprintf(stderr, "[N=%s trial %d/%d %s] %-30s %6.0f ns\n", size_label(n).c_str(),
                           t + 1, trials, random ? "random" : "fixed ", c->label.c_str(), ns);
            }
        }
      for (const Case* c : ok)
        for (bool random : {false, true}) res[{c->id, n, random}] = median(raw[{c->id, n, random}]);
      // Unpin from the devices before the programs go (next N reattaches).
      bpf_xdp_detach(static_cast<int>(env.acc), XDP_FLAGS_DRV_MODE, nullptr);
      bpf_xdp_detach(static_cast<int>(env.upl), XDP_FLAGS_DRV_MODE, nullptr);
    }

    auto get = [&](const std::string& id, uint32_t n, bool r) -> std::optional<double> {
      auto it = res.find({id, n, r});
      if (it == res.end()) return std::nullopt;
      return it->second;
    };
    const auto div = ratio;
    auto sub = [](std::optional<double> a, std::optional<double> b) -> std::optional<double> {
      if (!a || !b) return std::nullopt;
      return *a - *b;
    };

    // ---- table: ns/packet ---------------------------------------------------------
    std::printf(
        "\nPer-packet cost, ns/packet (BPF_PROG_TEST_RUN, repeat %d, median of %d; "
        "includes the harness)\n",
        repeat, trials);
    std::string hdr = fmt::format("{:<31}", "case");
    for (uint32_t n : sizes)
      hdr += fmt::format(" | {:>7} {:>7}", size_label(n) + " fix", size_label(n) + " rnd");
    std::printf("%s\n%s\n", hdr.c_str(), std::string(hdr.size(), '-').c_str());
    for (const Case& c : cases()) {
      std::string row = fmt::format("{:<31}", c.label);
      for (uint32_t n : sizes)
        row +=
            fmt::format(" | {:>7} {:>7}", fmt_ns(get(c.id, n, false)), fmt_ns(get(c.id, n, true)));
      std::printf("%s\n", row.c_str());
    }

    // ---- table: ratios ----------------------------------------------------------------
    std::printf("\nRatios (raw figures; 'net' subtracts the harness row first)\n");
    std::string rh = fmt::format("{:<31} {:>5} | {:>8} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9}",
                                 "case", "N", "rnd/fix", "/hash fix", "/hash rnd", "net rnd",
                                 "lpm/ fix", "lpm/ rnd", "net rnd");
    std::printf("%s\n%s\n", rh.c_str(), std::string(rh.size(), '-').c_str());
    nlohmann::json ratios = nlohmann::json::array();
    for (const Case& c : cases()) {
      if (c.kind == "harness") continue;
      for (uint32_t n : sizes) {
        auto f = get(c.id, n, false), r = get(c.id, n, true);
        auto hf = get("ref_hash", n, false), hr = get("ref_hash", n, true);
        auto lf = get("ref_lpm", n, false), lr = get("ref_lpm", n, true);
        auto h0 = get("harness", n, true);
        auto rf = div(r, f);
        std::optional<double> xhf, xhr, xhr_net, lxf, lxr, lxr_net;
        if (c.kind == "xbng") {
          xhf = div(f, hf);
          xhr = div(r, hr);
          xhr_net = div(sub(r, h0), sub(hr, h0));
          lxf = div(lf, f);
          lxr = div(lr, r);
          lxr_net = div(sub(lr, h0), sub(r, h0));
        }
        std::printf(
            "%s\n",
            fmt::format("{:<31} {:>5} | {:>8} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9}", c.label,
                        size_label(n), fmt_ratio(rf), fmt_ratio(xhf), fmt_ratio(xhr),
                        fmt_ratio(xhr_net), fmt_ratio(lxf), fmt_ratio(lxr), fmt_ratio(lxr_net))
                .c_str());
        auto jv = [](std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
        ratios.push_back({{"case", c.id},
                          {"n", n},
                          {"random_over_fixed", jv(rf)},
                          {"over_hash_fixed", jv(xhf)},
                          {"over_hash_random", jv(xhr)},
                          {"over_hash_random_net", jv(xhr_net)},
                          {"lpm_over_case_fixed", jv(lxf)},
                          {"lpm_over_case_random", jv(lxr)},
                          {"lpm_over_case_random_net", jv(lxr_net)}});
      }
    }
    if (steps) print_steps(get, sizes);
    // ---- rate plans: policing on / off, and where the downstream bucket lives ------------
    std::printf(
        "\nRate plans: cost of policing, same run. on/off = policed case / "
        "same case unpoliced;\n'net' subtracts the harness row from both first. Layout "
        "references: / ref hash lookup.\n");
    std::string ph = fmt::format("{:<31} {:>5} | {:>9} {:>9} {:>9} {:>9}", "case", "N",
                                 "on/off fix", "on/off rnd", "net fix", "net rnd");
    std::printf("%s\n%s\n", ph.c_str(), std::string(ph.size(), '-').c_str());
    nlohmann::json pol_ratios = nlohmann::json::array();
    for (const Case& c : cases()) {
      const bool layout = c.id.rfind("ref_pol_", 0) == 0;
      if (!c.police && !layout) continue;
      const std::string base = layout ? "ref_hash" : c.id.substr(0, c.id.size() - 4);
      for (uint32_t n : sizes) {
        auto f = get(c.id, n, false), r = get(c.id, n, true);
        auto bf = get(base, n, false), br = get(base, n, true);
        auto hf = get("harness", n, false), hr = get("harness", n, true);
        auto of = div(f, bf), orr = div(r, br);
        auto nf = div(sub(f, hf), sub(bf, hf)), nr = div(sub(r, hr), sub(br, hr));
        std::printf("%s\n",
                    fmt::format("{:<31} {:>5} | {:>9} {:>9} {:>9} {:>9}", c.label, size_label(n),
                                fmt_ratio(of), fmt_ratio(orr), fmt_ratio(nf), fmt_ratio(nr))
                        .c_str());
        auto jv = [](std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
        pol_ratios.push_back({{"case", c.id},
                              {"base", base},
                              {"n", n},
                              {"fixed", jv(of)},
                              {"random", jv(orr)},
                              {"net_fixed", jv(nf)},
                              {"net_random", jv(nr)}});
      }
    }
    // Memory per subscriber: the kernel's accounting (memlock) of the
    // subscriber-sized maps a subscriber with a /32, a /128 and a /64 uses,
    // with the layouts before rate plans (values 48 and 32 bytes, no police
    // array) and now.
    nlohmann::json memj = nlohmann::json::array();
    std::printf(
        "\nMemory per subscriber (fdinfo memlock of subscribers + routes_v4/v6/v6_64 "
        "[+ police], prealloc):\n");
    for (uint32_t n : sizes) {
      auto maps_mem = [&](uint32_t sub_v, uint32_t route_v, bool police) {
        uint64_t m = map_memlock(BPF_MAP_TYPE_HASH, 8, sub_v, n) +
                     map_memlock(BPF_MAP_TYPE_HASH, 4, route_v, n) +
                     map_memlock(BPF_MAP_TYPE_HASH, 16, route_v, n) +
                     map_memlock(BPF_MAP_TYPE_HASH, 8, route_v, n);
        if (police) m += map_memlock(BPF_MAP_TYPE_ARRAY, 4, sizeof(xbng_police), n, BPF_F_MMAPABLE);
        return m;
      };
      const uint64_t before = maps_mem(48, 32, false);
      const uint64_t after = maps_mem(sizeof(xbng_subscriber), sizeof(xbng_route), true);
      std::printf("  N=%-5s before %.0f B, after %.0f B per subscriber (+%.0f%%)\n",
                  size_label(n).c_str(), double(before) / n, double(after) / n,
                  100.0 * (double(after) / double(before) - 1));
      // The IPv4 /32s: the hash, or the direct array over the bench's pool
      // (the smallest prefix holding the N addresses: slots / N lines each).
      const uint64_t v4_hash = map_memlock(BPF_MAP_TYPE_HASH, 4, sizeof(xbng_route), n);
      const uint32_t slots = bench_direct_slots(n);
      const uint64_t v4_direct =
          map_memlock(BPF_MAP_TYPE_ARRAY, 4, sizeof(xbng_direct_route), slots, BPF_F_MMAPABLE);
      std::printf(
          "         IPv4 /32: routes_v4 hash %.0f B, direct array %.0f B per subscriber "
          "(/%u pool, %u slots of %zu B, %.0f%% used)\n",
          double(v4_hash) / n, double(v4_direct) / n, bench_direct_len(n), slots,
          sizeof(xbng_direct_route), 100.0 * n / slots);
      // The IPv6 /128s and /64s: their hashes, or their pools in direct_v6.
      const uint64_t v6_hash = map_memlock(BPF_MAP_TYPE_HASH, 16, sizeof(xbng_route), n);
      const uint64_t v64_hash = map_memlock(BPF_MAP_TYPE_HASH, 8, sizeof(xbng_route), n);
      const uint32_t s128 = bench_direct_128_slots(n), s64 = bench_direct_64_slots(n);
      const uint64_t v6_direct =
          map_memlock(BPF_MAP_TYPE_ARRAY, 4, sizeof(xbng_direct_route), s128, BPF_F_MMAPABLE);
      const uint64_t v64_direct =
          map_memlock(BPF_MAP_TYPE_ARRAY, 4, sizeof(xbng_direct_route), s64, BPF_F_MMAPABLE);
      std::printf(
          "         IPv6 /128: routes_v6 hash %.0f B, direct array %.0f B per subscriber (%u "
          "slots, %.0f%% used)\n"
          "         IPv6 /64: routes_v6_64 hash %.0f B, direct array %.0f B per subscriber (%u "
          "slots, %.0f%% used)\n",
          double(v6_hash) / n, double(v6_direct) / n, s128, 100.0 * n / s128, double(v64_hash) / n,
          double(v64_direct) / n, s64, 100.0 * n / s64);
      memj.push_back({{"n", n},
                      {"before_bytes", before},
                      {"after_bytes", after},
                      {"v4_hash_bytes", v4_hash},
                      {"v4_direct_bytes", v4_direct},
                      {"direct_slots", slots},
                      {"v6_hash_bytes", v6_hash},
                      {"v6_direct_bytes", v6_direct},
                      {"v6_direct_slots", s128},
                      {"v6_64_hash_bytes", v64_hash},
                      {"v6_64_direct_bytes", v64_direct},
                      {"v6_64_direct_slots", s64}});
    }
    out["police_ratios"] = pol_ratios;
    out["memory_per_subscriber"] = memj;

    std::printf(
        "\n'/hash': xbng case / ref hash lookup at the same N and keys (same keys exactly "
        "for downstream IPv4);\n'lpm/': ref LPM-trie lookup / xbng case. Compare within "
        "this run only.\n");
    for (const auto& f : failures) std::printf("FAILED (not timed): %s\n", f.c_str());

    if (!json_path.empty()) {
      nlohmann::json results = nlohmann::json::array();
      for (const Case& c : cases())
        for (uint32_t n : sizes)
          for (bool r : {false, true}) {
            auto v = get(c.id, n, r);
            if (!v) continue;
            results.push_back({{"case", c.id},
                               {"label", c.label},
                               {"kind", c.kind},
                               {"n", n},
                               {"keys", r ? "random" : "fixed"},
                               {"ns", *v},
                               {"ns_trials", raw[{c.id, n, r}]},
                               {"action", action_name(c.action)}});
          }
      out["results"] = results;
      out["ratios"] = ratios;
      out["map_fill"] = fills;
      out["failures"] = failures;
      std::ofstream f(json_path);
      f << out.dump(2) << '\n';
      if (!f) throw BenchError("cannot write " + json_path);
      std::fprintf(stderr, "wrote %s\n", json_path.c_str());
    }
    return failures.empty() ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xbng_bench_pktcost: %s\n", e.what());
    return 2;
  }
}
