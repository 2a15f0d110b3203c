#include "dataplane/trace.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <linux/bpf.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "common/bytes.h"
#include "common/checksum.h"
#include "dataplane/trace_skeleton.h"
#include "xbng/abi.h"
#include "dataplane/dataplane.h"
#include "dataplane/mac_policy.h"
#include "common/net.h"
#include "telemetry/stats.h"
#include "xbng/trace.h"

namespace xbng::agent {

using absl::Status;
using absl::StatusCode;

namespace {

// XDP test runs take one page less head- and tailroom; frames beyond this
// are refused with a clear error rather than the kernel's EINVAL.
constexpr size_t kMaxFrame = 3000;
// Room for what the program may add: both tags, an ICMP error's headers.
constexpr size_t kOutSlack = 512;

constexpr const char* kStepNames[] = {
#define XBNG_TRACE_NAME_(name, str) str,
    XBNG_TRACE_STEPS(XBNG_TRACE_NAME_)
#undef XBNG_TRACE_NAME_
};
constexpr const char* kCheckNames[] = {
#define XBNG_TRACE_NAME_(name, str) str,
    XBNG_TRACE_CHECKS(XBNG_TRACE_NAME_)
#undef XBNG_TRACE_NAME_
};

using be::get16;

const char* xdp_action_name(int a) {
  switch (a) {
    case XDP_ABORTED:
      return "XDP_ABORTED";
    case XDP_DROP:
      return "XDP_DROP";
    case XDP_PASS:
      return "XDP_PASS";
    case XDP_TX:
      return "XDP_TX";
    case XDP_REDIRECT:
      return "XDP_REDIRECT";
  }
  return "XDP_?";
}

const char* fib_rc_name(uint64_t rc) {
  switch (rc) {
    case BPF_FIB_LKUP_RET_SUCCESS:
      return "success";
    case BPF_FIB_LKUP_RET_BLACKHOLE:
      return "blackhole";
    case BPF_FIB_LKUP_RET_UNREACHABLE:
      return "unreachable";
    case BPF_FIB_LKUP_RET_PROHIBIT:
      return "prohibit";
    case BPF_FIB_LKUP_RET_NOT_FWDED:
      return "not forwarded (for the host)";
    case BPF_FIB_LKUP_RET_FWD_DISABLED:
      return "forwarding disabled";
    case BPF_FIB_LKUP_RET_UNSUPP_LWT:
      return "unsupported lwt";
    case BPF_FIB_LKUP_RET_NO_NEIGH:
      return "no neighbour entry";
    case BPF_FIB_LKUP_RET_FRAG_NEEDED:
      return "fragmentation needed";
  }
  return "?";
}

const char* event_name(uint64_t t) {
  switch (t) {
    case XBNG_EVENT_UNKNOWN_SUBSCRIBER:
      return "unknown_subscriber";
    case XBNG_EVENT_MAC_LEARNED:
      return "mac_learned";
    case XBNG_EVENT_MAC_CHANGED:
      return "mac_changed";
    case XBNG_EVENT_MAC_CONFLICT:
      return "mac_conflict";
  }
  return "?";
}

const char* punt_kind_name(uint64_t k) {
  switch (k) {
    case XBNG_PUNT_KIND_DHCPV4:
      return "dhcpv4";
    case XBNG_PUNT_KIND_DHCPV6:
      return "dhcpv6";
    case XBNG_PUNT_KIND_RS:
      return "router solicitation";
  }
  return "?";
}

const char* icmp_kind_name(uint64_t k) {
  switch (k) {
    case 0:
      return "time exceeded";
    case 1:
      return "packet too big / fragmentation needed";
    case 2:
      return "destination unreachable";
  }
  return "?";
}

// The bucket's configuration: byte_ns_fp = (8e9 / rate) << SHIFT.
std::string bucket_text(uint64_t fp, uint64_t burst) {
  if (!fp) return "no rate plan";
  const double rate = 8e9 * (1 << XBNG_POLICE_FP_SHIFT) / static_cast<double>(fp);
  return fmt::format("rate {:.0f} bit/s, burst {} bytes", rate, burst);
}

std::string police_text(uint64_t taken, uint64_t ahead_raw) {
  if (taken == 2) return "no rate plan: not policed";
  const int64_t ahead = static_cast<int64_t>(ahead_raw);
  const std::string state = ahead <= 0
                                ? "bucket full (idle)"
                                : fmt::format("bucket {} ns ahead of now (credit spent)", ahead);
  return fmt::format("{} ({})", taken ? "admit" : "refuse: over the rate", state);
}

}  // namespace

Tracer::Tracer(const Dataplane* dp) : dp_(dp) {}

Tracer::~Tracer() {
  if (skel_) xbng_trace_skel_destroy(skel_.get());
}

// Loaded on the first trace: an agent nobody asks for a trace pays nothing.
Status Tracer::load_locked() {
  if (skel_ && log_) return absl::OkStatus();
  auto s = std::make_unique<XbngSkelRefs>();
  if (!xbng_trace_skel_open(s.get()))
    return Status(StatusCode::kUnavailable,
                  fmt::format("opening the trace build: {}", std::strerror(errno)));
  dp_->apply_load_config(s.get());
  for (int i = 0; i < kMapCount; ++i) {
    const MapId id = static_cast<MapId>(i);
    if (!map_shared_with_trace(id)) continue;  // scratch, not state: private
    struct bpf_map* m = bpf_object__find_map_by_name(s->obj, map_name(id));
    int err = m ? bpf_map__reuse_fd(m, dp_->fd(id)) : -ENOENT;
    if (err) {
      xbng_trace_skel_destroy(s.get());
      return Status(StatusCode::kUnavailable, fmt::format("trace build: reusing map {}: {}",
                                                          map_name(id), std::strerror(-err)));
    }
  }
  if (int err = xbng_trace_skel_load(s.get()); err) {
    xbng_trace_skel_destroy(s.get());
    return Status(StatusCode::kUnavailable,
                  fmt::format("loading the trace build: {} (xbngd --log-level debug shows the "
                              "verifier log)",
                              std::strerror(-err)));
  }
  spdlog::info("trace build of the fast path loaded over the pinned maps");
  log_ = xbng_trace_skel_log(s.get());
  skel_ = std::move(s);
  return absl::OkStatus();
}

namespace {

// What a built frame carries above layer 2, from the request, checked.
struct FrameSpec {
  bool v4 = false;
  uint8_t src[16] = {}, dst[16] = {};
  uint8_t l4proto = 0;
  uint16_t sport = 0, dport = 0;
  uint8_t ttl = 0;
  uint32_t payload_len = 0;
};

Status bad_request(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }

// Addresses, protocol, ports, TTL and payload length of the request.
Status parse_frame_spec(const TraceRequest& req, FrameSpec* s) {
  if (auto a = parse_ipv4(req.src), b = parse_ipv4(req.dst); a && b) {
    s->v4 = true;
    std::memcpy(s->src, &*a, 4);
    std::memcpy(s->dst, &*b, 4);
  } else if (auto c = parse_ipv6(req.src), d = parse_ipv6(req.dst); c && d) {
    std::memcpy(s->src, c->data(), 16);
    std::memcpy(s->dst, d->data(), 16);
  } else {
    return bad_request(fmt::format("src {:?} and dst {:?}: give two IPv4 or two IPv6 addresses",
                                   req.src, req.dst));
  }
  const std::string proto = req.proto.empty() ? "udp" : req.proto;
  if (proto == "tcp")
    s->l4proto = 6;
  else if (proto == "udp")
    s->l4proto = 17;
  else if (proto == "icmp")
    s->l4proto = s->v4 ? 1 : 58;
  else
    return bad_request(fmt::format("proto {:?}: tcp, udp or icmp", proto));
  if (req.sport > 65535 || req.dport > 65535) return bad_request("sport/dport: 0..65535");
  if (req.ttl > 255) return bad_request(fmt::format("ttl {}: 1..255", req.ttl));
  if (req.payload_len > kMaxFrame)
    return bad_request(fmt::format("payload {} bytes: at most {}", req.payload_len, kMaxFrame));
  s->sport = static_cast<uint16_t>(req.sport ? req.sport : 40000);
  s->dport = static_cast<uint16_t>(req.dport ? req.dport : 80);
  s->ttl = static_cast<uint8_t>(req.ttl ? req.ttl : 64);
  s->payload_len = req.payload_len;
  return absl::OkStatus();
}

// The source MAC: the subscriber's learned one on an access port (if the
// map has it), a fixed one on the uplink, or the request's.
Status source_mac(const TraceRequest& req, int role, const PortInfo& port, const Dataplane& dp,
                  uint8_t smac[6]) {
  if (role == XBNG_ROLE_ACCESS) {
    if (req.outer_vlan < 1 || req.outer_vlan > 4094 || req.inner_vlan < 1 || req.inner_vlan > 4094)
      return bad_request(
          fmt::format("outer {} inner {}: VLANs 1..4094", req.outer_vlan, req.inner_vlan));
    struct xbng_sub_key key {};
    key.ifindex = port.ifindex;
    key.outer_vid = static_cast<uint16_t>(req.outer_vlan);
    key.inner_vid = static_cast<uint16_t>(req.inner_vlan);
    struct xbng_subscriber sub {};
    if (direct_sub_lookup(dp.fd(MapId::kSubscribers), dp.fd(MapId::kDirectSubs), dp.direct_subs(),
                          key, &sub) == 0 &&
        (sub.flags & XBNG_SUB_F_MAC_VALID))
      std::memcpy(smac, sub.mac, 6);
  } else {
    smac[5] = 0xfe;
  }
  if (!req.src_mac.empty()) {
    auto m = parse_mac(req.src_mac);
    if (!m) return bad_request(fmt::format("src_mac {:?}: not a MAC address", req.src_mac));
    std::memcpy(smac, m->data(), 6);
  }
  return absl::OkStatus();
}

void push16(std::vector<uint8_t>* f, uint16_t v) {
  f->push_back(static_cast<uint8_t>(v >> 8));
  f->push_back(static_cast<uint8_t>(v));
}

// Ethernet header, with both tags on an access port.
void append_l2(const TraceRequest& req, int role, const PortInfo& port, const uint8_t smac[6],
               bool v4, std::vector<uint8_t>* f) {
  f->insert(f->end(), port.cfg.mac, port.cfg.mac + 6);
  f->insert(f->end(), smac, smac + 6);
  if (role == XBNG_ROLE_ACCESS) {
    push16(f, port.cfg.outer_tpid);
    push16(f, static_cast<uint16_t>(req.outer_vlan));
    push16(f, XBNG_ETH_P_8021Q);
    push16(f, static_cast<uint16_t>(req.inner_vlan));
  }
  push16(f, v4 ? 0x0800 : 0x86dd);
}

// Sum of the pseudo-header for TCP, UDP and ICMPv6; none for ICMPv4.
uint32_t pseudo_header_sum(const FrameSpec& s, size_t l4len) {
  if (s.v4 && s.l4proto == 1) return 0;
  uint8_t ph[40] = {};
  size_t n;
  if (s.v4) {
    std::memcpy(ph, s.src, 4);
    std::memcpy(ph + 4, s.dst, 4);
    ph[9] = s.l4proto;
    be::put16(ph + 10, static_cast<uint16_t>(l4len));
    n = 12;
  } else {
    std::memcpy(ph, s.src, 16);
    std::memcpy(ph + 16, s.dst, 16);
    be::put16(ph + 34, static_cast<uint16_t>(l4len));
    ph[39] = s.l4proto;
    n = 40;
  }
  return csum_partial({ph, n}, 0);
}

// L4 header (a TCP SYN, a UDP datagram or an echo request) and a zeroed
// payload, checksummed.
std::vector<uint8_t> build_l4(const FrameSpec& s) {
  std::vector<uint8_t> l4;
  if (s.l4proto == 6) {
    l4.assign(20, 0);
    be::put16(&l4[0], s.sport);
    be::put16(&l4[2], s.dport);
    l4[12] = 5 << 4;
    l4[13] = 0x02;  // SYN
    be::put16(&l4[14], 64240);
  } else if (s.l4proto == 17) {
    l4.assign(8, 0);
    be::put16(&l4[0], s.sport);
    be::put16(&l4[2], s.dport);
  } else {
    l4.assign(8, 0);
    l4[0] = s.v4 ? 8 : 128;  // echo request
    be::put16(&l4[4], 1);
    be::put16(&l4[6], 1);
  }
  l4.resize(l4.size() + s.payload_len, 0);
  if (s.l4proto == 17) be::put16(&l4[4], static_cast<uint16_t>(l4.size()));
  uint16_t c = csum_fold(csum_partial(l4, pseudo_header_sum(s, l4.size())));
  if (s.l4proto == 17 && c == 0) c = 0xffff;
  const size_t coff = s.l4proto == 6 ? 16 : s.l4proto == 17 ? 6 : 2;
  be::put16(&l4[coff], c);
  return l4;
}

// IPv4 (DF, checksummed) or IPv6 header for `l4len` bytes of L4.
void append_ip(const FrameSpec& s, size_t l4len, std::vector<uint8_t>* f) {
  if (s.v4) {
    uint8_t ip[20] = {0x45, 0};
    be::put16(ip + 2, static_cast<uint16_t>(20 + l4len));
    be::put16(ip + 6, 0x4000);  // DF
    ip[8] = s.ttl;
    ip[9] = s.l4proto;
    std::memcpy(ip + 12, s.src, 4);
    std::memcpy(ip + 16, s.dst, 4);
    be::put16(ip + 10, csum_fold(csum_partial({ip, 20}, 0)));
    f->insert(f->end(), ip, ip + 20);
  } else {
    uint8_t ip[40] = {0x60, 0};
    be::put16(ip + 4, static_cast<uint16_t>(l4len));
    ip[6] = s.l4proto;
    ip[7] = s.ttl;
    std::memcpy(ip + 8, s.src, 16);
    std::memcpy(ip + 24, s.dst, 16);
    f->insert(f->end(), ip, ip + 40);
  }
}

std::string port_name(const std::vector<PortInfo>& ports, uint64_t ifx) {
  for (const auto& p : ports)
    if (p.ifindex == ifx) return p.name;
  return fmt::format("ifindex {}", ifx);
}

// One BPF_PROG_TEST_RUN of `prog` over `frame`, arriving on `port`.
struct TestRun {
  std::vector<uint8_t> out;  // the frame as the program left it
  uint32_t out_len = 0;
  int action = 0;
};

Status run_program(struct bpf_program* prog, const PortInfo& port,
                   const std::vector<uint8_t>& frame, TestRun* run) {
  run->out.assign(frame.size() + kOutSlack, 0);
  struct xdp_md ctx {};
  ctx.data = 0;
  ctx.data_end = static_cast<uint32_t>(frame.size());
  ctx.ingress_ifindex = port.ifindex;
  ctx.rx_queue_index = 0;
  struct bpf_test_run_opts opts {};
  opts.sz = sizeof opts;
  opts.data_in = frame.data();
  opts.data_size_in = static_cast<uint32_t>(frame.size());
  opts.data_out = run->out.data();
  opts.data_size_out = static_cast<uint32_t>(run->out.size());
  opts.ctx_in = &ctx;
  opts.ctx_size_in = sizeof ctx;
  opts.repeat = 1;
  if (int err = bpf_prog_test_run_opts(bpf_program__fd(prog), &opts); err)
    return Status(StatusCode::kInternal,
                  fmt::format("BPF_PROG_TEST_RUN on {}: {}", port.name, std::strerror(-err)));
  run->out_len = opts.data_size_out;
  run->action = static_cast<int>(opts.retval);
  return absl::OkStatus();
}

// The text of one recorded step (a check is written by the caller: its
// text depends on the step after it); none for a step not described.
std::optional<std::string> step_detail(const struct xbng_trace_step& s,
                                       const std::vector<PortInfo>& ports) {
  switch (s.id) {
    case XBNG_TS_PORT:
      return s.b ? fmt::format("{} port {} (ifindex {})",
                               s.b == XBNG_ROLE_ACCESS ? "access" : "uplink", port_name(ports, s.a),
                               s.a)
                 : fmt::format("ifindex {} is not a port of this role", s.a);
    case XBNG_TS_QINQ:
      return fmt::format("S-VID {} C-VID {}", s.a, s.b);
    case XBNG_TS_SUBSCRIBER:
      return s.a ? fmt::format("found (policer slot {})", s.b)
                 : std::string("not found: no subscriber on (port, S-VID, C-VID)");
    case XBNG_TS_MAC_POLICY:
      return fmt::format("{}: {}", mac_policy_name(static_cast<uint8_t>(s.a)),
                         s.b == 2   ? "no MAC known yet"
                         : s.b == 1 ? "source MAC is the subscriber's"
                                    : "source MAC differs from the subscriber's");
    case XBNG_TS_MAC_LEARN:
      return "would learn the source MAC (not written: trace)";
    case XBNG_TS_EVENT:
      return fmt::format("would send {} (not sent: trace)", event_name(s.a));
    case XBNG_TS_EVENT_SUPPRESSED:
      return "event rate limit: no event";
    case XBNG_TS_PUNT:
      return fmt::format("punt {} ({} bytes) to xbngd (not punted: trace)", punt_kind_name(s.a),
                         s.b);
    case XBNG_TS_POLICE_BUCKET:
      return bucket_text(s.a, s.b);
    case XBNG_TS_POLICE_CREDIT:
      return s.a >= s.b
                 ? fmt::format("{} prepaid bytes on the route cover the {}-byte packet", s.a, s.b)
                 : fmt::format(
                       "{} prepaid bytes on the route, {} needed: to the "
                       "subscriber's bucket",
                       s.a, s.b);
    case XBNG_TS_POLICE_UP:
    case XBNG_TS_POLICE_DOWN:
      return police_text(s.a, s.b);
    case XBNG_TS_FIB:
      return s.a == BPF_FIB_LKUP_RET_SUCCESS
                 ? fmt::format("success: egress {} (ifindex {})", port_name(ports, s.b), s.b)
                 : fmt::format("{} (rc {})", fib_rc_name(s.a), s.a);
    case XBNG_TS_ROUTE:
      return s.a ? fmt::format("found: subscriber on {}", port_name(ports, s.b))
                 : std::string("no subscriber route for the destination");
    case XBNG_TS_REDIRECT:
      return fmt::format("tx_ports key {} ({})", s.a, port_name(ports, s.a));
    case XBNG_TS_ICMP:
      return fmt::format("generate ICMP {}{}", icmp_kind_name(s.a),
                         s.a == 1 ? fmt::format(" (MTU {})", s.b) : std::string());
    case XBNG_TS_ICMP_RATE:
      return s.a ? "token taken" : "rate limited: no ICMP sent";
    case XBNG_TS_VERDICT:
      return fmt::format("{} ({})", reason_name(static_cast<uint32_t>(s.a)),
                         xdp_action_name(static_cast<int>(s.b)));
  }
  return std::nullopt;
}

// The recorded steps in people's words; `reason` and `redirect` are those
// of the verdict and redirect steps (XBNG_REASON_MAX and 0 without).
void describe_steps(const struct xbng_trace_log& log, const std::vector<PortInfo>& ports,
                    TraceResult* out, uint32_t* reason, uint64_t* redirect) {
  *reason = XBNG_REASON_MAX;
  *redirect = 0;
  const uint32_t n = std::min<uint32_t>(log.n, XBNG_TRACE_MAX_STEPS);
  std::vector<struct xbng_trace_step> steps(log.steps, log.steps + n);
  // A check that ends the path records itself after the verdict it
  // returned (the verdict is counted inside it): put the check first.
  for (uint32_t i = 0; i + 1 < n; ++i)
    if (steps[i].id == XBNG_TS_VERDICT && steps[i + 1].id == XBNG_TS_CHECK && !steps[i + 1].b)
      std::swap(steps[i], steps[i + 1]);
  for (uint32_t i = 0; i < n; ++i) {
    const auto& s = steps[i];
    if (s.id >= XBNG_TS_MAX) continue;
    if (s.id == XBNG_TS_CHECK) {
      const char* check = s.a < XBNG_TC_MAX ? kCheckNames[s.a] : "check";
      if (s.b || i + 1 >= n || steps[i + 1].id != XBNG_TS_VERDICT)
        out->steps.push_back({check, s.b ? "pass" : "stopped here"});
      else
        out->steps.push_back(
            {check,
             fmt::format("stopped here: {}", reason_name(static_cast<uint32_t>(steps[i + 1].a)))});
      continue;
    }
    if (s.id == XBNG_TS_REDIRECT) *redirect = s.a;
    if (s.id == XBNG_TS_VERDICT) *reason = static_cast<uint32_t>(s.a);
    if (auto detail = step_detail(s, ports)) out->steps.push_back({kStepNames[s.id], *detail});
  }
  if (log.n > XBNG_TRACE_MAX_STEPS)
    out->steps.push_back(
        {"truncated", fmt::format("{} more steps not recorded", log.n - XBNG_TRACE_MAX_STEPS)});
}

}  // namespace

Status Tracer::build_frame(const TraceRequest& req, int role, std::vector<uint8_t>* frame) const {
  const PortInfo* port = nullptr;
  for (const auto& p : dp_->ports())
    if (p.name == req.port) port = &p;
  FrameSpec spec;
  if (Status st = parse_frame_spec(req, &spec); !st.ok()) return st;
  uint8_t smac[6] = {0x02, 0, 0, 0, 0, 0x01};
  if (Status st = source_mac(req, role, *port, *dp_, smac); !st.ok()) return st;
  std::vector<uint8_t> f;
  append_l2(req, role, *port, smac, spec.v4, &f);
  // L4 first: the IP header needs its length.
  const std::vector<uint8_t> l4 = build_l4(spec);
  append_ip(spec, l4.size(), &f);
  f.insert(f.end(), l4.begin(), l4.end());
  if (f.size() > kMaxFrame)
    return bad_request(fmt::format("frame of {} bytes: at most {}", f.size(), kMaxFrame));
  *frame = std::move(f);
  return absl::OkStatus();
}

Status Tracer::trace(const TraceRequest& req, TraceResult* out) {
  const PortInfo* port = nullptr;
  for (const auto& p : dp_->ports())
    if (p.name == req.port) port = &p;
  if (!port) {
    std::string names;
    for (const auto& p : dp_->ports()) names += (names.empty() ? "" : ", ") + p.name;
    return bad_request(fmt::format("port {:?}: not a port of this xbngd ({})", req.port, names));
  }
  std::vector<uint8_t> frame;
  if (!req.frame.empty()) {
    if (req.frame.size() < 14 || req.frame.size() > kMaxFrame)
      return bad_request(fmt::format("frame of {} bytes: 14..{}", req.frame.size(), kMaxFrame));
    frame = req.frame;
  } else if (Status st = build_frame(req, port->role, &frame); !st.ok()) {
    return st;
  }

  std::lock_guard l(mu_);
  if (Status st = load_locked(); !st.ok()) return st;
  struct bpf_program* prog = port->role == XBNG_ROLE_ACCESS ? skel_->xdp_access : skel_->xdp_uplink;
  std::memset(log_, 0, sizeof *log_);
  TestRun run;
  if (Status st = run_program(prog, *port, frame, &run); !st.ok()) return st;
  const struct xbng_trace_log log = *log_;

  uint32_t reason;
  uint64_t redirect;
  describe_steps(log, dp_->ports(), out, &reason, &redirect);
  out->verdict = xdp_action_name(run.action);
  out->reason = reason < XBNG_REASON_MAX ? reason_name(reason) : "";
  if (run.action == XDP_REDIRECT)
    out->egress_port = port_name(dp_->ports(), redirect);
  else if (run.action == XDP_TX)
    out->egress_port = port->name;
  out->input_frame = frame;
  decode_frame(frame.data(), frame.size(), &out->input);
  if (run.action == XDP_REDIRECT || run.action == XDP_TX || run.action == XDP_PASS) {
    const size_t len = std::min<size_t>(run.out_len, run.out.size());
    out->output_frame.assign(run.out.begin(), run.out.begin() + static_cast<std::ptrdiff_t>(len));
    decode_frame(run.out.data(), len, &out->output.emplace());
  }
  return absl::OkStatus();
}

namespace {

std::string l3_summary(const uint8_t* p, size_t len, uint16_t ethertype, DecodedFrame* d,
                       bool quoted);

// L4 from `p` (len bytes left), protocol `proto`.
std::string l4_summary(const uint8_t* p, size_t len, uint8_t proto, bool v4, DecodedFrame* d,
                       bool quoted) {
  if ((proto == 6 || proto == 17) && len >= 4) {
    d->proto = proto == 6 ? "tcp" : "udp";
    d->sport = get16(p);
    d->dport = get16(p + 2);
    std::string t = fmt::format("{} {} > {}", d->proto, d->sport, d->dport);
    if (proto == 6 && len >= 14) t += fmt::format(" flags {:#04x}", p[13]);
    return t;
  }
  if ((proto == 1 || proto == 58) && len >= 2) {
    d->proto = proto == 1 ? "icmp" : "icmpv6";
    d->icmp_type = p[0];
    d->icmp_code = p[1];
    std::string t = fmt::format("{} type {} code {}", d->proto, p[0], p[1]);
    const bool error =
        proto == 1 ? (p[0] == 3 || p[0] == 11 || p[0] == 12) : (p[0] >= 1 && p[0] <= 4);
    if (proto == 1 && p[0] == 3 && p[1] == 4 && len >= 8) t += fmt::format(" mtu {}", get16(p + 6));
    if (proto == 58 && p[0] == 2 && len >= 8)
      t += fmt::format(" mtu {}", (uint32_t(get16(p + 4)) << 16) | get16(p + 6));
    if (error && !quoted && len > 8) {
      DecodedFrame inner;
      d->inner = l3_summary(p + 8, len - 8, v4 ? 0x0800 : 0x86dd, &inner, true);
      t += " quoting [" + d->inner + "]";
    }
    return t;
  }
  d->proto = std::to_string(proto);
  return fmt::format("protocol {}", proto);
}

std::string l3_summary(const uint8_t* p, size_t len, uint16_t ethertype, DecodedFrame* d,
                       bool quoted) {
  if (ethertype == 0x0800 && len >= 20) {
    const size_t ihl = (p[0] & 0xf) * 4u;
    uint32_t s, t;
    std::memcpy(&s, p + 12, 4);
    std::memcpy(&t, p + 16, 4);
    d->src = format_ipv4(s);
    d->dst = format_ipv4(t);
    d->ttl = p[8];
    std::string r = fmt::format("ipv4 {} > {} ttl {} len {}", d->src, d->dst, p[8], get16(p + 2));
    if (ihl >= 20 && len >= ihl && !(get16(p + 6) & 0x1fff))
      r += ", " + l4_summary(p + ihl, len - ihl, p[9], true, d, quoted);
    return r;
  }
  if (ethertype == 0x86dd && len >= 40) {
    d->src = format_ipv6(p + 8);
    d->dst = format_ipv6(p + 24);
    d->ttl = p[7];
    return fmt::format("ipv6 {} > {} hlim {} plen {}, ", d->src, d->dst, p[7], get16(p + 4)) +
           l4_summary(p + 40, len - 40, p[6], false, d, quoted);
  }
  if (ethertype == 0x0806) return "arp";
  return fmt::format("ethertype {:#06x}", ethertype);
}

}  // namespace

void decode_frame(const uint8_t* f, size_t len, DecodedFrame* d) {
  d->length = static_cast<uint32_t>(len);
  if (len < 14) {
    d->text = fmt::format("{} bytes: shorter than an Ethernet header", len);
    return;
  }
  d->dst_mac = format_mac(f);
  d->src_mac = format_mac(f + 6);
  size_t off = 12;
  uint16_t type = get16(f + off);
  std::string text = fmt::format("{} > {}", d->src_mac, d->dst_mac);
  while ((type == XBNG_ETH_P_8021AD || type == XBNG_ETH_P_8021Q || type == XBNG_ETH_P_QINQ_9100) &&
         off + 6 <= len && d->tags.size() < 4) {
    VlanTag& t = d->tags.emplace_back();
    t.tpid = type;
    t.vid = get16(f + off + 2) & 0x0fff;
    t.pcp = static_cast<uint32_t>(f[off + 2] >> 5);
    text += fmt::format(" vlan {:#06x} {}", type, t.vid);
    off += 4;
    type = get16(f + off);
  }
  off += 2;
  d->ethertype = (type == 0x0800   ? "ipv4"
                  : type == 0x86dd ? "ipv6"
                  : type == 0x0806 ? "arp"
                                   : fmt::format("{:#06x}", type));
  text += ", " + l3_summary(f + off, off <= len ? len - off : 0, type, d, false);
  d->text = fmt::format("{} bytes: {}", len, text);
}

}  // namespace xbng::agent
