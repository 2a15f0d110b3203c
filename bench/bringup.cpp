// xbng_bench_bringup: the subscriber bring-up storm (DHCPv4/DHCPv6/RS). Emulates N
// QinQ CPEs on one veth with AF_PACKET: each sends DHCPv4 DISCOVER, DHCPv6
// SOLICIT (Rapid Commit, IA_NA + IA_PD) and an RS at once, then REQUEST on
// the OFFER (or on an ADVERTISE); a CPE is bound when it holds its ACK,
// its REPLY and an RA, each checked against the provisioned addressing of
// bench/README.md (subscriber i). Prints sessions/s, p50/p99/max time to
// bound, retransmissions and failures, and the CPU and RSS of a process
// (xbngd) sampled from /proc while the storm runs.
//
//   --self-test      (default without --iface) builds two private namespaces
//                    joined by a veth and answers from a responder thread
//                    that uses xbng_protocols (DHCPv6 server, RA builder) and
//                    a minimal DHCPv4 answerer: the generator's own ceiling.
//   --netns NS --iface IF [--pid PID]
//                    against a real xbngd: IF (in namespace NS) is the peer
//                    of xbngd's access port; PID is xbngd's, for CPU/RSS.
//   --flood-dhcpv4 PPS
//                    meanwhile every CPE also floods DHCPv4 DISCOVERs (other
//                    xids, their answers ignored), PPS frames/s in all, round
//                    robin, from --flood-lead seconds before the sessions
//                    start: what a DHCPv4 storm does to the other protocols.
//                    IPv6 sessions (REPLY + RA) are then counted on their own.
//   --fwd-only K     no storm: K forwarding figures (ns/packet, --fwd-repeat
//                    repetitions each) of the subscribers [0, --fwd-keys),
//                    printed as one JSON line: for a caller that changes the
//                    load between calls (bench/radius_interims.py).
//   --v4-only / --v6-only / --relayed
//                    CPEs of a dhcp = "relay" port (addresses from the relay's
//                    servers, any accepted, no RS): DHCPv4 only, DHCPv6 only
//                    (IA_NA + IA_PD), or both at once (dual stack; the time to
//                    each family's binding is printed too).
// A benchmark: it prints what it measured and never passes or fails on a
// threshold (exit status 0 unless it could not run).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <queue>
#include <sstream>
#include <thread>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <linux/filter.h>

#include "bench_util.hpp"
#include "pktcost.skel.h"
#include "bringup/frames.hpp"
#include "bringup/packet_socket.hpp"
#include "bringup/responder.hpp"

using namespace bringup;

namespace {

double now_s() { return xbench::now_s(); }

// ---- /proc sampling ----------------------------------------------------------------

struct ProcSample {
  double cpu_s = 0;  // utime + stime
  uint64_t rss_kb = 0;
};
std::optional<ProcSample> sample_proc(int pid) {
  std::ifstream st(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(st, line)) return std::nullopt;
  auto rp = line.rfind(')');
  if (rp == std::string::npos) return std::nullopt;
  std::istringstream is(line.substr(rp + 2));
  std::string f;
  std::vector<std::string> fields;
  while (is >> f) fields.push_back(f);
  if (fields.size() < 13) return std::nullopt;
  ProcSample s;
  double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  s.cpu_s = (std::stod(fields[11]) + std::stod(fields[12])) / hz;  // fields 14, 15 of stat
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kb = std::stoull(line.substr(6));
  return s;
}

// ---- forwarding cost of the other subscribers --------------------------------------
// The ns/packet of xbngd's own xdp_access (taken from its pinned XDP link)
// on upstream IPv4 frames of random subscribers among the first `keys`,
// through bench/'s template-restoring wrapper (BPF_PROG_TEST_RUN,
// ingress = xbngd's access port): measured before and during the storm.
class FwdProbe {
 public:
  FwdProbe(const std::string& netns, const std::string& link_pin, const std::string& iface,
           uint32_t keys)
      : netns_(netns), iface_(iface) {
    xbench::NetnsGuard in(netns);
    int lfd = bpf_obj_get(link_pin.c_str());
    if (lfd < 0) throw xbench::BenchError(fmt::format("{}: {}", link_pin, strerror(errno)));
    bpf_link_info info{};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(lfd, &info, &len) < 0)
      throw xbench::BenchError(fmt::format("link info {}: {}", link_pin, strerror(errno)));
    close(lfd);
    xbng_prog_ = bpf_prog_get_fd_by_id(info.prog_id);
    if (xbng_prog_ < 0)
      throw xbench::BenchError(fmt::format("prog {}: {}", info.prog_id, strerror(errno)));
    ingress_ = xbench::ifindex_of(iface);
    p_ = xbench::load_pktcost(std::max<uint32_t>(keys, 1));
    xbench::pktcost_set_slot(p_.get(), PC_SLOT_XDP_ACCESS, xbng_prog_);
    xbench::FrameAddrs fa;
    fa.dst = xbench::mac_of(iface);
    xbench::WrapperConfig w;
    w.tmpl = frame_ = xbench::frame_up_v4(fa);
    w.mode = PC_MODE_UP_V4;
    w.nkeys = keys;
    w.random = true;
    w.target = PC_SLOT_XDP_ACCESS;
    xbench::pktcost_configure(p_.get(), w);
  }
  ~FwdProbe() {
    if (xbng_prog_ >= 0) close(xbng_prog_);
  }
  // One BPF_PROG_TEST_RUN; call from a thread inside the namespace.
  std::pair<uint32_t, uint32_t> run(int repeat) {
    xdp_md ctx{};
    ctx.data_end = static_cast<uint32_t>(frame_.size());
    ctx.ingress_ifindex = ingress_;
    LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame_.data(),
                .data_size_in = static_cast<uint32_t>(frame_.size()), .ctx_in = &ctx,
                .ctx_size_in = sizeof ctx, .repeat = repeat);
    if (bpf_prog_test_run_opts(bpf_program__fd(p_->progs.wrapper), &o) != 0)
      throw xbench::BenchError(fmt::format("BPF_PROG_TEST_RUN: {}", strerror(errno)));
    return {o.retval, o.duration};
  }
  const std::string& netns() const { return netns_; }

 private:
  std::string netns_, iface_;
  int xbng_prog_ = -1;
  unsigned ingress_ = 0;
  xbench::PktcostSkel p_;
  std::vector<uint8_t> frame_;
};

std::string fmt_v4(uint32_t be) {
  char b[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &be, b, sizeof b);
  return b;
}
std::string fmt_v6(const V6& a) {
  char b[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, a.data(), b, sizeof b);
  return b;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---- the generator -------------------------------------------------------------------

enum : uint8_t { kV4Offered = 1, kV4Bound = 2, kV6Bound = 4, kRaSeen = 8, kV6Requested = 16 };
constexpr uint8_t kAllDone = kV4Bound | kV6Bound | kRaSeen;

struct Session {
  double t_start = -1, t_done = -1, next_retx = 0;
  double t_v4 = -1, t_v6 = -1;  // when each family was bound
  uint32_t offered_be = 0, server_be = 0;
  uint8_t flags = 0, tries = 0;
};

struct Options {
  uint32_t n = 10000, first = 0, window = 4096, rate = 0;
  // DHCPv4 only, any address accepted: CPEs of a dhcp = "relay" port, whose
  // addresses come from the relay's servers (a CPE is bound on its ACK).
  bool v4_only = false;
  bool v6_only = false;
  // DHCPv4 and DHCPv6 (IA_NA + IA_PD) at once, any addresses, no RS: the
  // dual-stack CPEs of a dhcp = "relay" port with both servers_v4 and
  // servers_v6 (a CPE is bound on its ACK and its REPLY).
  bool relayed = false;
  // The addresses come from the relay's servers: any is accepted.
  bool any_address() const { return v4_only || v6_only || relayed; }
  // The CPEs send RS and wait for an RA (xbngd's own servers).
  bool router_solicit() const { return !v4_only && !v6_only && !relayed; }
  double timeout = 60, retransmit = 1.0;
  bool rapid_commit = true;
  int pid = 0;
  std::string netns, iface, json;
  std::string fwd_netns, fwd_link, fwd_iface = "acc0";
  uint32_t fwd_keys = 0, fwd_repeat = 200000;
  uint32_t fwd_only = 0;  // > 0: no storm, this many forwarding figures
  uint32_t flood_v4 = 0;  // DISCOVERs/s of the DHCPv4 flood over all CPEs (0: none)
  double flood_lead = 1.0;
  std::string iface_for_flood;  // set by main: the CPE side interface
};

struct Results {
  uint32_t bound = 0, failed = 0;
  uint32_t bound_v6 = 0;    // CPEs holding their DHCPv6 REPLY and an RA (IPv4 or not)
  size_t flood_sent = 0;    // DISCOVERs of the DHCPv4 flood
  std::string first_wrong;  // what the first wrong binding was
  uint64_t retransmits = 0, wrong_binding = 0, naks = 0, advertises = 0, stray = 0;
  double wall = 0;
  std::vector<double> ttb;             // seconds
  std::vector<double> ttb_v4, ttb_v6;  // seconds to each family's binding (both families run)
  size_t sent = 0, received = 0;
  double cpu_pct = 0, cpu_pct_peak = 0;
  uint64_t rss_kb_start = 0, rss_kb_peak = 0;
  bool sampled = false;
  double fwd_idle_ns = NAN, fwd_storm_ns = NAN;
  size_t fwd_storm_runs = 0;
  std::string fwd_error;
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::ceil(q * double(v.size()))) - 1;
  return v[std::min(k, v.size() - 1)];
}

Results run_storm(const Options& o, PacketSocket& sock, FwdProbe* fwd) {
  Results r;
  // Forwarding cost before the storm (idle), then in a loop during it.
  std::atomic<bool> storming{true};
  std::vector<double> fwd_storm;
  std::thread fwd_thread;
  if (fwd) {
    try {
      xbench::NetnsGuard in(fwd->netns());
      auto [action, d] = fwd->run(1);
      if (action != 4 /* XDP_REDIRECT */) {
        r.fwd_error =
            fmt::format("xdp_access answered {} (not XDP_REDIRECT) for a provisioned subscriber",
                        xbench::action_name(action));
      } else {
        std::vector<double> idle;
        for (int k = 0; k < 3; ++k) idle.push_back(fwd->run(int(o.fwd_repeat)).second);
        r.fwd_idle_ns = median(idle);
      }
    } catch (const std::exception& e) {
      r.fwd_error = e.what();
    }
    if (r.fwd_error.empty())
      fwd_thread = std::thread([&] {
        xbench::NetnsGuard in(fwd->netns());
        while (storming.load()) fwd_storm.push_back(fwd->run(int(o.fwd_repeat) / 4).second);
      });
  }
  std::vector<Session> ss(o.n);
  using Timer = std::pair<double, uint32_t>;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers;
  std::array<uint8_t, 130> duid{};
  uint8_t duid_len = 0;
  uint32_t launched = 0, inflight = 0;

  std::atomic<bool> sampling{o.pid > 0};
  std::vector<std::pair<double, ProcSample>> samples;
  std::thread sampler;
  if (o.pid > 0) {
    if (auto s = sample_proc(o.pid)) samples.push_back({now_s(), *s});
    sampler = std::thread([&] {
      while (sampling.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (auto s = sample_proc(o.pid)) samples.push_back({now_s(), *s});
      }
    });
  }

  auto wrong = [&](int64_t i, const char* what, const std::string& got) {
    if (r.wrong_binding++ == 0) r.first_wrong = fmt::format("CPE #{}: {} {}", i, what, got);
  };
  auto send_missing = [&](uint32_t k) {
    Session& s = ss[k];
    uint32_t i = o.first + k;
    Cpe c = cpe_of(i);
    if (!o.v6_only && !(s.flags & kV4Bound)) {
      if (s.flags & kV4Offered)
        sock.queue(dhcp4_request(c, 0x10000000u + i, s.offered_be, s.server_be));
      else
        sock.queue(dhcp4_discover(c, 0x10000000u + i));
    }
    if (o.v4_only) return;
    if (!(s.flags & kV6Bound)) {
      if ((s.flags & kV6Requested) && duid_len)
        sock.queue(dhcp6_request(c, i & 0xffffff, {duid.data(), duid_len}));
      else
        sock.queue(dhcp6_solicit(c, i & 0xffffff, o.rapid_commit));
    }
    if (!o.router_solicit()) return;
    if (!(s.flags & kRaSeen)) sock.queue(router_solicit(c));
  };
  auto arm = [&](uint32_t k, double now) {
    Session& s = ss[k];
    double backoff = o.retransmit * double(1u << std::min<uint8_t>(s.tries, 3));
    s.next_retx = now + backoff;
    timers.push({s.next_retx, k});
  };
  auto done = [&](uint32_t k, double now) {
    Session& s = ss[k];
    const uint8_t need = o.v4_only   ? uint8_t{kV4Bound}
                         : o.v6_only ? uint8_t{kV6Bound}
                         : o.relayed ? uint8_t{kV4Bound | kV6Bound}
                                     : kAllDone;
    if ((s.flags & need) == need && s.t_done < 0) {
      s.t_done = now;
      r.ttb.push_back(now - s.t_start);
      ++r.bound;
      --inflight;
    }
  };

  // The DHCPv4 flood: its own socket (a filter that accepts nothing: it
  // only sends), paced in 1 ms slices.
  std::atomic<bool> flooding{o.flood_v4 > 0};
  std::thread flooder;
  if (o.flood_v4) {
    auto fs = std::make_shared<PacketSocket>(o.iface_for_flood);
    sock_filter none[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
    sock_fprog prog{1, none};
    setsockopt(fs->fd(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
    flooder = std::thread([&r, &o, &flooding, fs] {
      const double start = now_s();
      uint64_t sent = 0;
      uint32_t next = 0;
      while (flooding.load()) {
        const double due = double(o.flood_v4) * (now_s() - start);
        while (double(sent + fs->pending()) < due && fs->pending() < 4096) {
          const uint32_t i = o.first + next;
          fs->queue(dhcp4_discover(cpe_of(i), 0x20000000u + i));
          next = next + 1 == o.n ? 0 : next + 1;
        }
        sent += fs->flush();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      r.flood_sent = sent;
    });
    std::this_thread::sleep_for(std::chrono::duration<double>(o.flood_lead));
  }

  const double t0 = now_s();
  double last_progress = t0;
  while (r.bound + r.failed < o.n) {
    double now = now_s();
    // Launch new CPEs (window, optional rate).
    for (int burst = 0; burst < 256 && launched < o.n && inflight < o.window; ++burst) {
      if (o.rate && double(launched) >= o.rate * (now - t0)) break;
      uint32_t k = launched++;
      ++inflight;
      ss[k].t_start = now;
      send_missing(k);
      arm(k, now);
    }
    // Retransmissions.
    while (!timers.empty() && timers.top().first <= now) {
      auto [when, k] = timers.top();
      timers.pop();
      Session& s = ss[k];
      if (s.t_done >= 0 || when != s.next_retx) continue;
      if (now - s.t_start > o.timeout) {
        ++r.failed;
        --inflight;
        s.t_done = now;
        s.flags |= 0x80;
        continue;
      }
      ++s.tries;
      ++r.retransmits;
      send_missing(k);
      arm(k, now);
    }
    sock.flush();
    int got = 0;
    for (int rounds = 0; rounds < 16; ++rounds) {
      int n = sock.receive([&](std::span<const uint8_t> f, int outer) {
        Parsed p;
        if (!parse_frame(f, outer, &p)) return;
        int64_t i = index_of(p.svid, p.cvid);
        if (i < o.first || i >= int64_t(o.first) + o.n) {
          ++r.stray;
          return;
        }
        uint32_t k = static_cast<uint32_t>(i - o.first);
        Session& s = ss[k];
        if (s.t_start < 0 || s.t_done >= 0) return;
        if (p.kind == Parsed::kDhcp4 && p.xid == 0x10000000u + uint32_t(i)) {
          if (p.dhcp4_type == 2 && !(s.flags & kV4Offered)) {
            if (!o.any_address() && p.yiaddr_be != sub_addr4_be(uint32_t(i)))
              wrong(i, "OFFER yiaddr", fmt_v4(p.yiaddr_be));
            s.flags |= kV4Offered;
            s.offered_be = p.yiaddr_be;
            s.server_be = p.server_id_be;
            sock.queue(dhcp4_request(cpe_of(uint32_t(i)), p.xid, s.offered_be, s.server_be));
          } else if (p.dhcp4_type == 5 && (s.flags & kV4Offered) && !(s.flags & kV4Bound)) {
            if (!o.any_address() && p.yiaddr_be != sub_addr4_be(uint32_t(i)))
              wrong(i, "ACK yiaddr", fmt_v4(p.yiaddr_be));
            s.flags |= kV4Bound;
            s.t_v4 = now_s();
          } else if (p.dhcp4_type == 6) {
            ++r.naks;
            s.flags &= static_cast<uint8_t>(~kV4Offered);
          }
        } else if (p.kind == Parsed::kDhcp6 && p.xid == (uint32_t(i) & 0xffffff)) {
          if (p.dhcp6_type == 2 && !(s.flags & kV6Requested)) {  // ADVERTISE
            ++r.advertises;
            duid_len = p.server_duid_len;
            std::memcpy(duid.data(), p.server_duid.data(), duid_len);
            s.flags |= kV6Requested;
            sock.queue(dhcp6_request(cpe_of(uint32_t(i)), p.xid, {duid.data(), duid_len}));
          } else if (p.dhcp6_type == 7 && !(s.flags & kV6Bound)) {  // REPLY
            if (o.any_address()) {  // any address and prefix (the relay's servers chose them)
              if (!p.has_na || !p.has_pd)
                wrong(i, "IA_NA + IA_PD", p.has_na ? "no prefix" : "no address");
            } else if (!p.has_na || p.na != sub_addr6(uint32_t(i)))
              wrong(i, "IA_NA", p.has_na ? fmt_v6(p.na) : std::string("none"));
            else if (!p.has_pd || p.pd != sub_pfx64(uint32_t(i)) || p.pd_len != 64)
              wrong(i, "IA_PD",
                    p.has_pd ? fmt_v6(p.pd) + "/" + std::to_string(p.pd_len) : std::string("none"));
            s.flags |= kV6Bound;
            s.t_v6 = now_s();
          }
        } else if (p.kind == Parsed::kRa && p.router_lifetime > 0) {
          s.flags |= kRaSeen;
        }
        done(k, now_s());
      });
      if (n <= 0) break;
      got += n;
    }
    if (got) last_progress = now;
    if (now - last_progress > o.timeout + 2) break;  // nothing is answering at all
    if (!got && sock.pending() == 0 && (launched == o.n || inflight >= o.window)) {
      pollfd pfd{sock.fd(), POLLIN, 0};
      poll(&pfd, 1, 1);
    }
  }
  r.wall = now_s() - t0;
  r.failed = o.n - r.bound;
  for (const Session& s : ss) {
    if ((s.flags & (kV6Bound | kRaSeen)) == (kV6Bound | kRaSeen)) ++r.bound_v6;
    if (!o.v4_only && !o.v6_only) {
      if (s.t_v4 >= 0) r.ttb_v4.push_back(s.t_v4 - s.t_start);
      if (s.t_v6 >= 0) r.ttb_v6.push_back(s.t_v6 - s.t_start);
    }
  }
  flooding = false;
  if (flooder.joinable()) flooder.join();
  storming = false;
  if (fwd_thread.joinable()) {
    fwd_thread.join();
    r.fwd_storm_runs = fwd_storm.size();
    r.fwd_storm_ns = median(fwd_storm);
  }
  r.sent = sock.frames_sent;
  r.received = sock.frames_received;
  if (sampler.joinable()) {
    sampling = false;
    sampler.join();
    if (auto s = sample_proc(o.pid)) samples.push_back({now_s(), *s});
    if (samples.size() >= 2) {
      r.sampled = true;
      r.rss_kb_start = samples.front().second.rss_kb;
      for (size_t k = 1; k < samples.size(); ++k) {
        double dt = samples[k].first - samples[k - 1].first;
        if (dt > 0)
          r.cpu_pct_peak = std::max(
              r.cpu_pct_peak, 100 * (samples[k].second.cpu_s - samples[k - 1].second.cpu_s) / dt);
        r.rss_kb_peak = std::max(r.rss_kb_peak, samples[k].second.rss_kb);
      }
      double dt = samples.back().first - samples.front().first;
      r.cpu_pct =
          dt > 0 ? 100 * (samples.back().second.cpu_s - samples.front().second.cpu_s) / dt : 0;
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "xbng bring-up storm: N QinQ CPEs doing DORA + SOLICIT/REPLY (rapid commit) + RS/RA"};
  Options o;
  bool self_test = false;
  app.add_option("-n,--subscribers", o.n, "CPEs to bring up")->capture_default_str();
  app.add_option("--first", o.first, "index of the first CPE (bench/README.md addressing)")
      ->capture_default_str();
  app.add_option("--window", o.window, "CPEs in progress at once")->capture_default_str();
  app.add_option("--rate", o.rate, "CPEs started per second (0: as fast as the window allows)")
      ->capture_default_str();
  app.add_option("--retransmit", o.retransmit,
                 "first retransmission after S seconds (doubles, ≤ 8x)")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout, "a CPE not bound after S seconds has failed")
      ->capture_default_str();
  app.add_flag("!--no-rapid-commit", o.rapid_commit, "SOLICIT without Rapid Commit (4-message v6)");
  app.add_flag("--v4-only", o.v4_only,
               "DHCPv4 only, any offered address (CPEs of a dhcp = \"relay\" port)");
  app.add_flag("--v6-only", o.v6_only,
               "DHCPv6 only (IA_NA + IA_PD), any address and prefix, no RS (CPEs of a "
               "dhcp = \"relay\" port with relay.servers_v6)");
  app.add_flag("--relayed", o.relayed,
               "DHCPv4 + DHCPv6 (IA_NA + IA_PD) at once, any addresses, no RS (dual-stack CPEs "
               "of a dhcp = \"relay\" port with relay.servers_v4 and relay.servers_v6)");
  app.add_flag("--self-test", self_test, "answer from an in-process responder (xbng_protocols)");
  app.add_option("--netns", o.netns, "namespace holding --iface");
  app.add_option("--iface", o.iface, "the veth facing xbngd's access port");
  app.add_option("--pid", o.pid, "process to sample CPU and RSS of (xbngd)");
  app.add_option("--json", o.json, "write the figures as JSON");
  app.add_option("--fwd-netns", o.fwd_netns,
                 "xbngd's namespace: measure its forwarding during the storm");
  app.add_option("--fwd-link", o.fwd_link,
                 "xbngd's pinned XDP link of the access port (<bpffs>/v3/links/acc0)");
  app.add_option("--fwd-iface", o.fwd_iface, "xbngd's access port")->capture_default_str();
  app.add_option("--fwd-keys", o.fwd_keys,
                 "other (already provisioned) subscribers: indices [0, K)");
  app.add_option("--fwd-repeat", o.fwd_repeat, "BPF_PROG_TEST_RUN repeat of an idle figure")
      ->capture_default_str();
  app.add_option("--fwd-only", o.fwd_only,
                 "no storm: print K forwarding figures of --fwd-keys as one JSON line")
      ->capture_default_str();
  app.add_option("--flood-dhcpv4", o.flood_v4,
                 "meanwhile flood DHCPv4 DISCOVERs from every CPE, PPS frames/s in all (0: none)")
      ->capture_default_str();
  app.add_option("--flood-lead", o.flood_lead, "seconds of flood before the sessions start")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.fwd_only) {
    if (o.fwd_link.empty() || o.fwd_keys == 0) {
      std::fprintf(stderr, "bringup: --fwd-only needs --fwd-link and --fwd-keys\n");
      return 2;
    }
    try {
      FwdProbe fwd(o.fwd_netns, o.fwd_link, o.fwd_iface, o.fwd_keys);
      xbench::NetnsGuard in(fwd.netns());
      auto [action, d] = fwd.run(1);
      if (action != 4 /* XDP_REDIRECT */) {
        std::fprintf(stderr, "bringup: xdp_access answered %s (not XDP_REDIRECT)\n",
                     xbench::action_name(action).c_str());
        return 1;
      }
      nlohmann::json ns = nlohmann::json::array();
      for (uint32_t k = 0; k < o.fwd_only; ++k) ns.push_back(fwd.run(int(o.fwd_repeat)).second);
      std::printf("%s\n", nlohmann::json{{"keys", o.fwd_keys}, {"repeat", o.fwd_repeat}, {"ns", ns}}
                              .dump()
                              .c_str());
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bringup: %s\n", e.what());
      return 1;
    }
  }
  if (int(o.v4_only) + int(o.v6_only) + int(o.relayed) > 1) {
    std::fprintf(stderr, "bringup: --v4-only, --v6-only and --relayed exclude each other\n");
    return 2;
  }
  if (o.iface.empty()) self_test = true;
  if (o.n == 0 || o.first + uint64_t(o.n) > 4000ull * 4094) {
    std::fprintf(stderr, "bringup: --subscribers must be in 1..%u\n", 4000u * 4094);
    return 2;
  }

  try {
    std::unique_ptr<std::thread> resp;
    std::atomic<bool> stop{false}, ready{false};
    ResponderStats rst;
    std::string cpe_ns = o.netns, cpe_if = o.iface;
    if (self_test) {
      xbench::NetnsRegistry::sweep_stale();
      xbench::NetnsRegistry::install_handlers();
      cpe_ns = xbench::NetnsRegistry::create("cpe");
      std::string bng_ns = xbench::NetnsRegistry::create("bng");
      cpe_if = "cpe0";
      xbench::sh(
          fmt::format("ip -n {} link add cpe0 type veth peer name bng0 netns {}", cpe_ns, bng_ns));
      xbench::sh(
          fmt::format("ip -n {} link set cpe0 up && ip -n {} link set bng0 up", cpe_ns, bng_ns));
      resp = std::make_unique<std::thread>(run_responder, bng_ns, "bng0", o.first, o.n, &stop,
                                           &ready, &rst);
      while (!ready.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (o.pid == 0) o.pid = getpid();  // generator + responder: both in this process
    }
    std::unique_ptr<FwdProbe> fwd;
    if (!o.fwd_link.empty()) {
      if (o.fwd_keys == 0 || o.fwd_keys > o.first) {
        std::fprintf(stderr,
                     "bringup: --fwd-keys must be in 1..--first (the storm's CPEs come after)\n");
        return 2;
      }
      fwd = std::make_unique<FwdProbe>(o.fwd_netns, o.fwd_link, o.fwd_iface, o.fwd_keys);
    }
    std::optional<xbench::NetnsGuard> in;
    if (!cpe_ns.empty()) in.emplace(cpe_ns);
    PacketSocket sock(cpe_if);
    o.iface_for_flood = cpe_if;  // the flood's socket is opened in the same namespace
    std::fprintf(stderr, "bringup: %u CPEs from #%u on %s%s, window %u, rate %s, %s\n", o.n,
                 o.first, cpe_if.c_str(), cpe_ns.empty() ? "" : (" in " + cpe_ns).c_str(), o.window,
                 o.rate ? std::to_string(o.rate).c_str() : "unlimited",
                 self_test ? "self-test responder" : "real BNG");
    Results r = run_storm(o, sock, fwd.get());
    if (resp) {
      stop = true;
      resp->join();
      xbench::NetnsRegistry::remove_all();
    }

    double p50 = percentile(r.ttb, 0.50) * 1e3, p99 = percentile(r.ttb, 0.99) * 1e3,
           pmax = percentile(r.ttb, 1.0) * 1e3;
    double rate = r.wall > 0 ? r.bound / r.wall : 0;
    std::printf(
        "bring-up storm: %u CPEs (%s%s%s each), %s\n", o.n,
        o.v4_only   ? "DORA"
        : o.v6_only ? "SOLICIT/REPLY"
                    : "DORA + SOLICIT/REPLY",
        o.v4_only        ? ""
        : o.rapid_commit ? " rapid commit"
                         : "/ADVERTISE/REQUEST",
        o.router_solicit() ? " + RS/RA" : "",
        self_test ? "self-test responder (xbng_protocols in-process, AF_PACKET)" : "against xbngd");
    std::printf("  bound %u, failed %u in %.2f s: %.0f sessions/s\n", r.bound, r.failed, r.wall,
                rate);
    if (o.flood_v4)
      std::printf(
          "  with a DHCPv4 flood of %u frames/s (%zu DISCOVERs sent): IPv6 bound (REPLY + RA) "
          "%u of %u\n",
          o.flood_v4, r.flood_sent, r.bound_v6, o.n);
    std::printf("  time to bound: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", p50, p99, pmax);
    for (const auto& [fam, v] :
         {std::pair{"DHCPv4 (ACK)", &r.ttb_v4}, std::pair{"DHCPv6 (REPLY)", &r.ttb_v6}})
      if (!o.v4_only && !o.v6_only)
        std::printf("  time to %s: %zu CPEs, p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", fam,
                    v->size(), percentile(*v, 0.5) * 1e3, percentile(*v, 0.99) * 1e3,
                    percentile(*v, 1.0) * 1e3);
    std::printf(
        "  frames sent %zu, received %zu; retransmissions %llu, NAKs %llu, ADVERTISEs %llu, "
        "wrong bindings %llu, stray %llu\n",
        r.sent, r.received, (unsigned long long)r.retransmits, (unsigned long long)r.naks,
        (unsigned long long)r.advertises, (unsigned long long)r.wrong_binding,
        (unsigned long long)r.stray);
    if (!r.first_wrong.empty()) std::printf("  first wrong binding: %s\n", r.first_wrong.c_str());
    if (r.sampled)
      std::printf(
          "  pid %d%s: CPU %.0f%% average, %.0f%% peak (100 ms samples); RSS %.1f MB -> peak %.1f "
          "MB\n",
          o.pid, self_test ? " (generator+responder)" : " (xbngd)", r.cpu_pct, r.cpu_pct_peak,
          r.rss_kb_start / 1024.0, r.rss_kb_peak / 1024.0);
    if (fwd) {
      if (!r.fwd_error.empty())
        std::printf("  forwarding of other subscribers: not measured: %s\n", r.fwd_error.c_str());
      else
        std::printf(
            "  forwarding of %u other subscribers (xdp_access, random keys, BPF_PROG_TEST_RUN): "
            "%.0f ns/packet idle, %.0f ns/packet during the storm (median of %zu runs): x%.2f\n",
            o.fwd_keys, r.fwd_idle_ns, r.fwd_storm_ns, r.fwd_storm_runs,
            r.fwd_storm_ns / r.fwd_idle_ns);
    }
    if (!o.json.empty()) {
      nlohmann::json j;
      j["machine"] = xbench::machine_info();
      j["config"] = {{"subscribers", o.n},
                     {"first", o.first},
                     {"window", o.window},
                     {"rate", o.rate},
                     {"rapid_commit", o.rapid_commit},
                     {"self_test", self_test}};
      j["results"] = {{"bound", r.bound},
                      {"failed", r.failed},
                      {"wall_s", r.wall},
                      {"sessions_per_s", rate},
                      {"ttb_p50_ms", p50},
                      {"ttb_p99_ms", p99},
                      {"ttb_max_ms", pmax},
                      {"retransmits", r.retransmits},
                      {"naks", r.naks},
                      {"advertises", r.advertises},
                      {"wrong_bindings", r.wrong_binding},
                      {"frames_sent", r.sent},
                      {"frames_received", r.received},
                      {"bound_v6", r.bound_v6},
                      {"bound_dhcp4", r.ttb_v4.size()},
                      {"bound_dhcp6", r.ttb_v6.size()},
                      {"ttb_dhcp4_p50_ms", percentile(r.ttb_v4, 0.5) * 1e3},
                      {"ttb_dhcp4_p99_ms", percentile(r.ttb_v4, 0.99) * 1e3},
                      {"ttb_dhcp6_p50_ms", percentile(r.ttb_v6, 0.5) * 1e3},
                      {"ttb_dhcp6_p99_ms", percentile(r.ttb_v6, 0.99) * 1e3},
                      {"flood_dhcpv4_pps", o.flood_v4},
                      {"flood_sent", r.flood_sent}};
      if (r.sampled)
        j["process"] = {{"pid", o.pid},
                        {"cpu_pct_avg", r.cpu_pct},
                        {"cpu_pct_peak", r.cpu_pct_peak},
                        {"rss_mb_start", r.rss_kb_start / 1024.0},
                        {"rss_mb_peak", r.rss_kb_peak / 1024.0}};
      if (fwd)
        j["forwarding"] = {{"keys", o.fwd_keys},
                           {"idle_ns", r.fwd_idle_ns},
                           {"storm_ns", r.fwd_storm_ns},
                           {"storm_runs", r.fwd_storm_runs},
                           {"error", r.fwd_error}};
      if (self_test)
        j["responder"] = {
            {"dhcp4", rst.dhcp4.load()}, {"dhcp6", rst.dhcp6.load()}, {"rs", rst.rs.load()}};
      std::ofstream(o.json) << j.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bringup: %s\n", e.what());
    xbench::NetnsRegistry::remove_all();
    return 1;
  }
  return 0;
}
