// `xbngctl trace`: the fast path's verdict for one frame, against the live
// maps (docs/design.md "Tracing"). xbngd loads the trace build of the fast
// path (bpf/lib/trace.h) with every shared map reusing the pinned map, and
// runs it on the frame with BPF_PROG_TEST_RUN: the same program code, no
// side effect on any map, nothing added to the live programs.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

struct XbngSkelRefs;
struct xbng_trace_log;

namespace xbng::agent {

class Dataplane;

// The frame to trace, as received on `port` (an access port or an uplink):
// either given whole in `frame`, or built from the fields (see
// xbng.v1.TraceRequest, which api/ converts to this).
struct TraceRequest {
  std::string port;               // ingress port name
  std::vector<uint8_t> frame;     // raw Ethernet frame; when set, the fields below are ignored
  uint32_t outer_vlan = 0;        // access port: S-VLAN
  uint32_t inner_vlan = 0;        // access port: C-VLAN
  std::string src, dst;           // IPv4 or IPv6 addresses, one family
  std::string proto;              // tcp | udp | icmp ("" = udp)
  uint32_t sport = 0, dport = 0;  // 0 = 40000, 80
  std::string src_mac;            // "" = the subscriber's (access) or a fixed one
  uint32_t ttl = 0;               // 0 = 64
  uint32_t payload_len = 0;       // L4 payload bytes
};

// One step of the program's path: e.g. subscriber, "found (policer slot 3)".
struct TraceStep {
  std::string name;
  std::string detail;  // for people
};

struct VlanTag {
  uint32_t tpid = 0, vid = 0, pcp = 0;
};

// A frame decoded down to L4 (an ICMP error's quoted packet in `inner`).
struct DecodedFrame {
  uint32_t length = 0;
  std::string dst_mac, src_mac;
  std::vector<VlanTag> tags;  // outer first
  std::string ethertype;      // ipv4 | ipv6 | arp | 0x....
  std::string src, dst;
  uint32_t ttl = 0;   // TTL or hop limit
  std::string proto;  // tcp | udp | icmp | icmpv6 | number
  uint32_t sport = 0, dport = 0;
  uint32_t icmp_type = 0, icmp_code = 0;
  std::string inner;  // ICMP error: the quoted packet, one line
  std::string text;   // the whole frame, one line
};

struct TraceResult {
  std::vector<TraceStep> steps;  // in the order the program took them
  std::string verdict;           // XDP_REDIRECT | XDP_TX | XDP_PASS | XDP_DROP | XDP_ABORTED
  std::string reason;            // the counter it is counted under, e.g. "drop_spoofed_ipv4"
  std::string egress_port;       // redirect target, the ingress port for XDP_TX, else empty
  std::vector<uint8_t> input_frame;
  DecodedFrame input;
  // The frame as the program left it (XDP_REDIRECT, XDP_TX, XDP_PASS only).
  std::vector<uint8_t> output_frame;
  std::optional<DecodedFrame> output;
};

class Tracer {
 public:
  explicit Tracer(const Dataplane* dp);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // One trace; INVALID_ARGUMENT for a bad request (nothing run),
  // UNAVAILABLE when the trace build cannot be loaded. Serialised: the log
  // is one buffer.
  absl::Status trace(const TraceRequest& req, TraceResult* out);

 private:
  absl::Status load_locked();
  absl::Status build_frame(const TraceRequest& req, int role, std::vector<uint8_t>* frame) const;

  const Dataplane* dp_;
  std::mutex mu_;
  std::unique_ptr<XbngSkelRefs> skel_;
  struct xbng_trace_log* log_ = nullptr;
};

// Decodes an Ethernet frame (tags, IPv4/IPv6, TCP/UDP/ICMP, an ICMP error's
// quoted packet) for the trace output. Never reads past `len`.
void decode_frame(const uint8_t* f, size_t len, DecodedFrame* out);

}  // namespace xbng::agent
