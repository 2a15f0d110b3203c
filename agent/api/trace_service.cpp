// SubscribersService::Trace: `xbngctl trace` (dataplane/trace.h does the
// work; this translates the request, the result and the status).
#include "api/service.h"
#include "api/status.h"
#include "dataplane/trace.h"

namespace xbng::agent {

namespace v1 = xbng::v1;

namespace {

TraceRequest trace_request(const v1::TraceRequest& in) {
  TraceRequest r;
  r.port = in.port();
  r.frame.assign(in.frame().begin(), in.frame().end());
  r.outer_vlan = in.outer_vlan();
  r.inner_vlan = in.inner_vlan();
  r.src = in.src();
  r.dst = in.dst();
  r.proto = in.proto();
  r.sport = in.sport();
  r.dport = in.dport();
  r.src_mac = in.src_mac();
  r.ttl = in.ttl();
  r.payload_len = in.payload_len();
  return r;
}

void frame_to_proto(const DecodedFrame& d, v1::DecodedFrame* out) {
  out->set_length(d.length);
  out->set_dst_mac(d.dst_mac);
  out->set_src_mac(d.src_mac);
  for (const VlanTag& t : d.tags) {
    auto* o = out->add_tags();
    o->set_tpid(t.tpid);
    o->set_vid(t.vid);
    o->set_pcp(t.pcp);
  }
  out->set_ethertype(d.ethertype);
  out->set_src(d.src);
  out->set_dst(d.dst);
  out->set_ttl(d.ttl);
  out->set_proto(d.proto);
  out->set_sport(d.sport);
  out->set_dport(d.dport);
  out->set_icmp_type(d.icmp_type);
  out->set_icmp_code(d.icmp_code);
  out->set_inner(d.inner);
  out->set_text(d.text);
}

void result_to_proto(const TraceResult& r, v1::TraceReply* out) {
  for (const TraceStep& s : r.steps) {
    auto* o = out->add_steps();
    o->set_name(s.name);
    o->set_detail(s.detail);
  }
  out->set_verdict(r.verdict);
  out->set_reason(r.reason);
  out->set_egress_port(r.egress_port);
  out->set_input_frame(r.input_frame.data(), r.input_frame.size());
  frame_to_proto(r.input, out->mutable_input());
  if (r.output) {
    out->set_output_frame(r.output_frame.data(), r.output_frame.size());
    frame_to_proto(*r.output, out->mutable_output());
  }
}

}  // namespace

grpc::Status SubscribersService::Trace(grpc::ServerContext* ctx, const v1::TraceRequest* req,
                                       v1::TraceReply* resp) {
  ctx->AddInitialMetadata("xbng-boot-id", boot_id_);
  if (!tracer_)
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this xbngd has no data plane to trace");
  TraceResult result;
  const absl::Status st = tracer_->trace(trace_request(*req), &result);
  if (st.ok()) result_to_proto(result, resp);
  resp->set_boot_id(boot_id_);
  // absl::StatusCode and grpc::StatusCode number the codes alike.
  return st.ok()
             ? grpc::Status::OK
             : grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

}  // namespace xbng::agent
