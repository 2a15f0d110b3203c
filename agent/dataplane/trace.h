// `xbngctl trace`: the fast path's verdict for one frame, against the live
// maps (docs/design.md "Tracing"). xbngd loads the trace build of the fast
// path (bpf/lib/trace.h) with every shared map reusing the pinned map, and
// runs it on the frame with BPF_PROG_TEST_RUN: the same program code, no
// side effect on any map, nothing added to the live programs.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xbng/v1/xbng.grpc.pb.h"

struct XbngSkelRefs;
struct xbng_trace_log;

namespace xbng::agent {

class Dataplane;

class Tracer {
 public:
  explicit Tracer(const Dataplane* dp);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // One trace; INVALID_ARGUMENT for a bad request (nothing run),
  // UNAVAILABLE when the trace build cannot be loaded. Serialised: the log
  // is one buffer.
  grpc::Status trace(const xbng::v1::TraceRequest& req, xbng::v1::TraceReply* out);

 private:
  grpc::Status load_locked();
  grpc::Status build_frame(const xbng::v1::TraceRequest& req, int role,
                           std::vector<uint8_t>* frame) const;

  const Dataplane* dp_;
  std::mutex mu_;
  std::unique_ptr<XbngSkelRefs> skel_;
  struct xbng_trace_log* log_ = nullptr;
};

// Decodes an Ethernet frame (tags, IPv4/IPv6, TCP/UDP/ICMP, an ICMP error's
// quoted packet) for the trace output. Never reads past `len`.
void decode_frame(const uint8_t* f, size_t len, xbng::v1::DecodedFrame* out);

}  // namespace xbng::agent
