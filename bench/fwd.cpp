// xbng_bench_fwd: forwarding through veth, in Mpps.
//
//   sub ns            dut ns                          net ns
//   sub0 [sink] ---- acc0 [xdp_access]  upl0 [xdp_uplink] ---- net0 [sink]
//   sub1 [sink] ---- rin (GRO)   rtr ns: kernel, N /32 routes   rout ---- net1 [sink]
//
// The generator is BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES on the
// template-restoring wrapper (bpf/pktcost.bpf.c), run with ingress_ifindex =
// the generator's veth, which XDP_TX's each rewritten frame into its peer:
//   upstream    sub0 -> acc0 -> xbng -> upl0 -> net0   QinQ IPv4, subscriber i
//   downstream  net0 -> upl0 -> xbng -> acc0 -> sub0   IPv4 to subscriber i
//   kernel      sub1 -> rin -> Linux forwarding -> rout -> net1, untagged IPv4
//               to 100.64.0.16 + i, one /32 route per subscriber (ip -batch)
//   floor       as upstream/downstream with ref_redirect instead of xbng
// i is fixed (0) or uniform over N. What counts is what the sink (an XDP
// counter that drops) receives per second of wall time, sampled while the
// generator runs: the generator has no back-pressure. Everything runs in
// softirq on the generator's CPU, so a figure is the cost of the whole chain
// on one core; compare within one run, as ratios.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <linux/if_link.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "bench_util.hpp"
#include "pktcost.skel.h"
#include "xbng.skel.h"

using namespace xbench;

namespace {

struct Topo {
  std::string sub, dut, net, rtr;
  unsigned acc0 = 0, upl0 = 0;  // in dut
  Mac acc0_mac{}, upl0_mac{}, net0_mac{}, net1_mac{}, rin_mac{}, sub1_mac{};
  double route_add_s = 0;
};

void attach(const std::string& ns, const std::string& ifname, int prog_fd) {
  NetnsGuard g(ns);
  if (int err = bpf_xdp_attach(static_cast<int>(ifindex_of(ifname)), prog_fd, XDP_FLAGS_DRV_MODE,
                               nullptr))
    throw BenchError(fmt::format("attaching XDP to {} in {}: {}", ifname, ns, std::strerror(-err)));
}

Mac mac_in(const std::string& ns, const std::string& ifname) {
  NetnsGuard g(ns);
  return mac_of(ifname);
}

void sysctls(const std::string& ns, const std::vector<std::pair<std::string, std::string>>& kv) {
  NetnsGuard g(ns);
  for (const auto& [k, v] : kv) sysctl_net(k, v);
}

Topo build_topology(uint32_t n_routes) {
  Topo t;
  t.sub = NetnsRegistry::create("sub");
  t.dut = NetnsRegistry::create("dut");
  t.net = NetnsRegistry::create("net");
  t.rtr = NetnsRegistry::create("rtr");
  // IPv4 only: no IPv6 router/neighbour chatter reaching the sinks.
  for (const auto& ns : {t.sub, t.dut, t.net, t.rtr})
    sysctls(ns,
            {{"net.ipv6.conf.all.disable_ipv6", "1"}, {"net.ipv6.conf.default.disable_ipv6", "1"}});
  sh(fmt::format("ip -n {} link add sub0 type veth peer name acc0 netns {}", t.sub, t.dut));
  sh(fmt::format("ip -n {} link add upl0 type veth peer name net0 netns {}", t.dut, t.net));
  sh(fmt::format("ip -n {} link add sub1 type veth peer name rin netns {}", t.sub, t.rtr));
  sh(fmt::format("ip -n {} link add rout type veth peer name net1 netns {}", t.rtr, t.net));
  for (auto [ns, ifs] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{{t.sub, {"sub0", "sub1"}},
                                                                     {t.dut, {"acc0", "upl0"}},
                                                                     {t.net, {"net0", "net1"}},
                                                                     {t.rtr, {"rin", "rout"}}})
    for (const auto& i : ifs) sh(fmt::format("ip -n {} link set {} up", ns, i));
  t.acc0_mac = mac_in(t.dut, "acc0");
  t.upl0_mac = mac_in(t.dut, "upl0");
  t.net0_mac = mac_in(t.net, "net0");
  t.net1_mac = mac_in(t.net, "net1");
  t.rin_mac = mac_in(t.rtr, "rin");
  t.sub1_mac = mac_in(t.sub, "sub1");
  {
    NetnsGuard g(t.dut);
    t.acc0 = ifindex_of("acc0");
    t.upl0 = ifindex_of("upl0");
  }

  // dut: the uplink's next hop, so that bpf_fib_lookup succeeds upstream.
  sysctls(t.dut, {{"net.ipv4.ip_forward", "1"}, {"net.ipv4.conf.all.forwarding", "1"}});
  sh(fmt::format("ip -n {} addr add 198.51.100.1/24 dev upl0", t.dut));
  sh(fmt::format("ip -n {} neigh replace 198.51.100.2 lladdr {} dev upl0 nud permanent", t.dut,
                 mac_str(t.net0_mac)));
  sh(fmt::format("ip -n {} route add default via 198.51.100.2 dev upl0", t.dut));

  // rtr: the Linux kernel forwarding the same addresses, one /32 each.
  sysctls(t.rtr, {{"net.ipv4.ip_forward", "1"},
                  {"net.ipv4.conf.all.rp_filter", "0"},
                  {"net.ipv4.conf.default.rp_filter", "0"},
                  {"net.ipv4.conf.rin.rp_filter", "0"}});
  sh(fmt::format("ip -n {} addr add 10.10.0.1/24 dev rin", t.rtr));
  sh(fmt::format("ip -n {} addr add 10.20.0.1/24 dev rout", t.rtr));
  sh(fmt::format("ip -n {} neigh replace 10.20.0.2 lladdr {} dev rout nud permanent", t.rtr,
                 mac_str(t.net1_mac)));
  // rin receives XDP_TX'ed frames: it needs NAPI, here GRO (no XDP on the router).
  sh(fmt::format("nsenter --net=/run/netns/{} ethtool -K rin gro on", t.rtr));
  std::vector<std::string> lines;
  lines.reserve(n_routes);
  for (uint32_t i = 0; i < n_routes; i++) {
    uint32_t a = sub_v4(i);
    lines.push_back(fmt::format("route add {}.{}.{}.{}/32 via 10.20.0.2 dev rout", a >> 24,
                                (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff));
  }
  double t0 = now_s();
  ip_batch(t.rtr, lines);
  t.route_add_s = now_s() - t0;
  return t;
}

struct Flow {
  std::string id, label;
  std::string gen_ns, gen_if;
  std::vector<uint8_t> frame;
  uint32_t mode;
  std::string dut_prog;  // "xbng", "floor_up", "floor_down", "kernel"
};

struct Measure {
  double mpps = 0;       // sink, steady state while the generator runs
  double wall_mpps = 0;  // sink over the whole generator call
  uint64_t sent = 0, received = 0;
  double seconds = 0;
};

uint64_t sink(::pktcost* p) { return pktcost_counter(p, kCntSink); }

// One generator call of `frames` live frames; the sink is sampled from
// another thread every 20 ms.
Measure generate(::pktcost* p, const std::string& ns, const std::string& ifname,
                 const std::vector<uint8_t>& frame, uint64_t frames) {
  NetnsGuard g(ns);
  xdp_md ctx{};
  ctx.data_end = static_cast<uint32_t>(frame.size());
  ctx.ingress_ifindex = ifindex_of(ifname);
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame.data(),
              .data_size_in = static_cast<uint32_t>(frame.size()), .ctx_in = &ctx,
              .ctx_size_in = sizeof ctx, .repeat = static_cast<int>(frames),
              .flags = BPF_F_TEST_XDP_LIVE_FRAMES, .batch_size = 64);

  std::vector<std::pair<double, uint64_t>> samples;
  std::mutex mu;
  std::atomic<bool> running{true};
  uint64_t c0 = sink(p);
  double t0 = now_s();
  std::thread mon([&] {
    while (running.load()) {
      double t = now_s();
      uint64_t c = sink(p);
      {
        std::lock_guard<std::mutex> l(mu);
        samples.emplace_back(t, c);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  int rc = bpf_prog_test_run_opts(bpf_program__fd(p->progs.wrapper), &o);
  int err = errno;
  double t1 = now_s();
  running = false;
  mon.join();
  if (rc != 0)
    throw BenchError(fmt::format("live-frames BPF_PROG_TEST_RUN: {}", std::strerror(err)));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // frames still in flight
  Measure m;
  m.sent = frames;
  m.received = sink(p) - c0;
  m.seconds = t1 - t0;
  m.wall_mpps = m.received / m.seconds / 1e6;
  // Steady state: the samples taken after the first 15% of the call.
  std::vector<std::pair<double, uint64_t>> w;
  for (const auto& s : samples)
    if (s.first >= t0 + 0.15 * (t1 - t0) && s.first <= t1) w.push_back(s);
  if (w.size() >= 3 && w.back().first > w.front().first)
    m.mpps = (w.back().second - w.front().second) / (w.back().first - w.front().first) / 1e6;
  else
    m.mpps = m.wall_mpps;
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
}

std::string reason_deltas(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  std::string s;
  for (size_t r = 0; r < a.size(); r++)
    if (b[r] != a[r])
      s += fmt::format(" {}=+{}", reason_name(static_cast<uint32_t>(r)), b[r] - a[r]);
  return s.empty() ? " none" : s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xbng forwarding through veth, Mpps"};
  std::string sizes_arg = "1K,60K,1M";
  bool quick = false;
  double seconds = 0;
  int trials = 0;
  std::string json_path;
  app.add_option("--sizes", sizes_arg, "comma-separated subscriber / route counts (K/M)");
  app.add_flag("--quick", quick, "60K only, short runs, one trial");
  app.add_option("--seconds", seconds, "generator time per figure (default 1.5, quick 0.4)");
  app.add_option("--trials", trials, "runs per figure, median reported (default 3, quick 1)");
  app.add_option("--json", json_path, "write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (quick && !app.count("--sizes")) sizes_arg = "60K";
  if (seconds <= 0) seconds = quick ? 0.4 : 1.5;
  if (trials <= 0) trials = quick ? 1 : 3;

  if (geteuid() != 0) {
    std::fprintf(stderr, "xbng_bench_fwd: needs root (network namespaces, XDP)\n");
    return 2;
  }
  NetnsRegistry::install_handlers();
  NetnsRegistry::sweep_stale();

  try {
    std::vector<uint32_t> sizes = parse_sizes(sizes_arg);

    nlohmann::json out;
    out["benchmark"] = "fwd";
    out["machine"] = machine_info();
    out["config"] = {{"sizes", sizes},
                     {"seconds", seconds},
                     {"trials", trials},
                     {"quick", quick},
                     {"frame_bytes", {{"upstream", 72}, {"downstream", 64}, {"kernel", 64}}}};
    nlohmann::json results = nlohmann::json::array();
    nlohmann::json setup = nlohmann::json::array();
    std::map<std::tuple<std::string, uint32_t, bool>, double> res;
    std::vector<std::string> flow_ids, flow_labels;

    for (uint32_t n : sizes) {
      std::fprintf(stderr, "[N=%s] building namespaces, %u kernel routes (ip -batch)...\n",
                   size_label(n).c_str(), n);
      Topo t = build_topology(n);
      XbngSkel x = load_xbng(n);
      PktcostSkel p = load_pktcost(1);
      int sinkfd = bpf_program__fd(p->progs.xdp_sink);
      for (auto [ns, i] : std::vector<std::pair<std::string, std::string>>{
               {t.sub, "sub0"}, {t.sub, "sub1"}, {t.net, "net0"}, {t.net, "net1"}})
        attach(ns, i, sinkfd);
      {
        NetnsGuard g(t.dut);
        xbng_add_port(x.get(), {t.acc0, XBNG_ROLE_ACCESS, t.acc0_mac, 0});
        xbng_add_port(x.get(), {t.upl0, XBNG_ROLE_UPLINK, t.upl0_mac, 1});
      }
      double fill_s = xbng_fill_subscribers(x.get(), t.acc0, n);
      std::fprintf(stderr, "[N=%s] kernel routes %.2f s, xbng maps %.2f s\n", size_label(n).c_str(),
                   t.route_add_s, fill_s);
      setup.push_back({{"n", n}, {"kernel_routes_s", t.route_add_s}, {"xbng_maps_s", fill_s}});

      FrameAddrs up;
      up.dst = t.acc0_mac;
      FrameAddrs down;
      down.dst = t.upl0_mac;
      down.src = t.net0_mac;
      FrameAddrs kern;
      kern.dst = t.rin_mac;
      kern.src = t.sub1_mac;
      std::vector<Flow> flows = {
          {"xbng_up", "xbng upstream (QinQ in)", t.sub, "sub0", frame_up_v4(up), PC_MODE_UP_V4,
           "xbng"},
          {"xbng_down", "xbng downstream (QinQ out)", t.net, "net0",
           frame_down_v4(down, 0xcb007101), PC_MODE_DOWN_V4, "xbng"},
          {"floor_up", "floor: redirect only, up", t.sub, "sub0", frame_up_v4(up), PC_MODE_UP_V4,
           "floor_up"},
          {"floor_down", "floor: redirect only, down", t.net, "net0",
           frame_down_v4(down, 0xcb007101), PC_MODE_DOWN_V4, "floor_down"},
          {"kernel", "Linux kernel forwarding", t.sub, "sub1", frame_down_v4(kern, 0x0a0a0002),
           PC_MODE_DOWN_V4, "kernel"},
      };
      if (flow_ids.empty())
        for (const auto& f : flows) {
          flow_ids.push_back(f.id);
          flow_labels.push_back(f.label);
        }

      std::string current;
      auto program_dut = [&](const std::string& what) {
        if (what == current || what == "kernel") return;
        NetnsGuard g(t.dut);
        int acc_fd = xbng_prog_access(x.get()), upl_fd = xbng_prog_uplink(x.get());
        int ref = bpf_program__fd(p->progs.ref_redirect);
        if (what == "floor_up") {
          pktcost_set_ref_tx(p.get(), t.upl0);
          acc_fd = ref;
        } else if (what == "floor_down") {
          pktcost_set_ref_tx(p.get(), t.acc0);
          upl_fd = ref;
        }
        for (auto [ifi, fd] : {std::pair{t.acc0, acc_fd}, std::pair{t.upl0, upl_fd}})
          if (int err = bpf_xdp_attach(static_cast<int>(ifi), fd, XDP_FLAGS_DRV_MODE, nullptr))
            throw BenchError(
                fmt::format("attaching to ifindex {} in dut: {}", ifi, std::strerror(-err)));
        current = what;
      };

      std::map<std::pair<std::string, bool>, std::vector<Measure>> ms;
      for (int tr = 0; tr < trials; tr++)
        for (bool random : {false, true})
          for (const Flow& f : flows) {
            program_dut(f.dut_prog);
            WrapperConfig w;
            w.tmpl = f.frame;
            w.mode = f.mode;
            w.nkeys = n;
            w.random = random;
            w.use_tail = false;
            w.out_action = XDP_TX;
            pktcost_configure(p.get(), w);
            // Warm-up, and a check that frames reach the sink at all.
            auto r0 = xbng_all_reasons(x.get());
            Measure warm = generate(p.get(), f.gen_ns, f.gen_if, f.frame, 200000);
            if (warm.received < warm.sent / 2)
              throw BenchError(
                  fmt::format("{} (N={}, {}): the sink received {} of {} frames; xbng verdicts:{}",
                              f.label, size_label(n), random ? "random" : "fixed", warm.received,
                              warm.sent, reason_deltas(r0, xbng_all_reasons(x.get()))));
            uint64_t frames =
                static_cast<uint64_t>(std::clamp(warm.wall_mpps * 1e6 * seconds, 200000.0, 2.0e9));
            auto r1 = xbng_all_reasons(x.get());
            Measure m = generate(p.get(), f.gen_ns, f.gen_if, f.frame, frames);
            if (m.seconds < 0.6 * seconds && m.mpps > 0) {  // warm-up misjudged the rate
              frames = static_cast<uint64_t>(std::clamp(m.mpps * 1e6 * seconds, 200000.0, 2.0e9));
              r1 = xbng_all_reasons(x.get());
              m = generate(p.get(), f.gen_ns, f.gen_if, f.frame, frames);
            }
            if (f.dut_prog == "xbng") {
              // Every frame must have been forwarded by xbng itself (an
              // XDP_PASS would let the kernel forward it to the same sink).
              uint32_t want = f.id == "xbng_up" ? XBNG_FWD_UPSTREAM : XBNG_FWD_DOWNSTREAM;
              auto r2 = xbng_all_reasons(x.get());
              if (r2[want] - r1[want] != m.sent)
                throw BenchError(fmt::format(
                    "{} (N={}, {}): {} of {} frames counted as {}; xbng verdicts:{}", f.label,
                    size_label(n), random ? "random" : "fixed", r2[want] - r1[want], m.sent,
                    reason_name(want), reason_deltas(r1, r2)));
            }
            ms[{f.id, random}].push_back(m);
            std::fprintf(stderr,
                         "[N=%s trial %d/%d %s] %-28s %6.3f Mpps (sink %llu of %llu sent, "
                         "%.2f s)\n",
                         size_label(n).c_str(), tr + 1, trials, random ? "random" : "fixed ",
                         f.label.c_str(), m.mpps, static_cast<unsigned long long>(m.received),
                         static_cast<unsigned long long>(m.sent), m.seconds);
          }
      for (const Flow& f : flows)
        for (bool random : {false, true}) {
          auto& v = ms[{f.id, random}];
          std::vector<double> mpps, wall;
          uint64_t sent = 0, recv = 0;
          for (const auto& m : v) {
            mpps.push_back(m.mpps);
            wall.push_back(m.wall_mpps);
            sent += m.sent;
            recv += m.received;
          }
          double med = median(mpps);
          res[{f.id, n, random}] = med;
          results.push_back({{"path", f.id},
                             {"label", f.label},
                             {"n", n},
                             {"keys", random ? "random" : "fixed"},
                             {"mpps", med},
                             {"mpps_trials", mpps},
                             {"wall_mpps_trials", wall},
                             {"sent", sent},
                             {"received", recv},
                             {"loss", sent ? 1.0 - static_cast<double>(recv) / sent : 0.0}});
        }
      // Skeletons go first (programs stay attached until their devices go),
      // then the namespaces, which takes the veths and routes with them.
      x.reset();
      p.reset();
      NetnsRegistry::remove_all();
    }

    auto get = [&](const std::string& id, uint32_t n, bool r) -> std::optional<double> {
      auto it = res.find({id, n, r});
      if (it == res.end()) return std::nullopt;
      return it->second;
    };
    const auto div = ratio;
    auto fr = [](std::optional<double> v, const char* f) {
      return v ? fmt::format(fmt::runtime(f), *v) : std::string("-");
    };

    std::printf(
        "\nForwarding through veth, Mpps at the sink (one core, live frames; median of "
        "%d x %.1f s)\n",
        trials, seconds);
    std::string hdr = fmt::format("{:<29}", "path");
    for (uint32_t n : sizes)
      hdr += fmt::format(" | {:>7} {:>7}", size_label(n) + " fix", size_label(n) + " rnd");
    std::printf("%s\n%s\n", hdr.c_str(), std::string(hdr.size(), '-').c_str());
    for (size_t k = 0; k < flow_ids.size(); k++) {
      std::string row = fmt::format("{:<29}", flow_labels[k]);
      for (uint32_t n : sizes)
        row += fmt::format(" | {:>7} {:>7}", fr(get(flow_ids[k], n, false), "{:.3f}"),
                           fr(get(flow_ids[k], n, true), "{:.3f}"));
      std::printf("%s\n", row.c_str());
    }

    std::printf("\nRatios\n");
    std::string rh =
        fmt::format("{:<29} {:>5} | {:>8} | {:>10} {:>10} | {:>10} {:>10}", "path", "N", "rnd/fix",
                    "/kern fix", "/kern rnd", "/floor fix", "/floor rnd");
    std::printf("%s\n%s\n", rh.c_str(), std::string(rh.size(), '-').c_str());
    nlohmann::json ratios = nlohmann::json::array();
    auto jv = [](std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
    for (size_t k = 0; k < flow_ids.size(); k++) {
      const std::string& id = flow_ids[k];
      for (uint32_t n : sizes) {
        auto f = get(id, n, false), r = get(id, n, true);
        std::optional<double> kf, kr, ff, frr;
        if (id.rfind("xbng", 0) == 0) {
          kf = div(f, get("kernel", n, false));
          kr = div(r, get("kernel", n, true));
          std::string floor = id == "xbng_up" ? "floor_up" : "floor_down";
          ff = div(f, get(floor, n, false));
          frr = div(r, get(floor, n, true));
        }
        std::printf("%s\n", fmt::format("{:<29} {:>5} | {:>8} | {:>10} {:>10} | {:>10} {:>10}",
                                        flow_labels[k], size_label(n), fr(div(r, f), "{:.2f}"),
                                        fr(kf, "{:.2f}"), fr(kr, "{:.2f}"), fr(ff, "{:.2f}"),
                                        fr(frr, "{:.2f}"))
                                .c_str());
        ratios.push_back({{"path", id},
                          {"n", n},
                          {"random_over_fixed", jv(div(r, f))},
                          {"over_kernel_fixed", jv(kf)},
                          {"over_kernel_random", jv(kr)},
                          {"over_floor_fixed", jv(ff)},
                          {"over_floor_random", jv(frr)}});
      }
    }
    std::printf(
        "\n'/kern': xbng Mpps / Linux kernel forwarding Mpps (N /32 routes, same "
        "destinations, untagged);\n'/floor': xbng / the same chain with a bare "
        "redirect instead of xbng. Compare within this run only:\nthe floor's rnd/fix "
        "(keys do not matter to it) shows this run's noise.\n");

    if (!json_path.empty()) {
      out["results"] = results;
      out["ratios"] = ratios;
      out["setup"] = setup;
      std::ofstream f(json_path);
      f << out.dump(2) << '\n';
      if (!f) throw BenchError("cannot write " + json_path);
      std::fprintf(stderr, "wrote %s\n", json_path.c_str());
    }
    NetnsRegistry::remove_all();
    return 0;
  } catch (const std::exception& e) {
    NetnsRegistry::remove_all();
    std::fprintf(stderr, "xbng_bench_fwd: %s\n", e.what());
    return 2;
  }
}
