// SubscribersService::Trace: `xbngctl trace` (trace.h does the work).
#include "api/service.h"
#include "dataplane/trace.h"

namespace xbng::agent {

grpc::Status SubscribersService::Trace(grpc::ServerContext* ctx, const xbng::v1::TraceRequest* req,
                                       xbng::v1::TraceReply* resp) {
  ctx->AddInitialMetadata("xbng-boot-id", boot_id_);
  if (!tracer_)
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this xbngd has no data plane to trace");
  grpc::Status st = tracer_->trace(*req, resp);
  resp->set_boot_id(boot_id_);
  return st;
}

}  // namespace xbng::agent
