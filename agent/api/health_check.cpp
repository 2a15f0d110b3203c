#include "api/health_check.h"

#include <grpcpp/generic/generic_stub.h>

#include <string>
#include <vector>

namespace xbng::agent {

grpc::Status check_health(const std::shared_ptr<grpc::Channel>& ch,
                          std::chrono::milliseconds timeout) {
  // grpc.health.v1.Health/Check without the generated health stubs: the
  // request (service "") is empty; the response is field 1, the status enum
  // (SERVING = 1): bytes 08 01.
  grpc::GenericStub stub(ch);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::Slice empty("");
  grpc::ByteBuffer req(&empty, 1), resp;
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", req, &cq);
  call->StartCall();
  grpc::Status st;
  call->Finish(&resp, &st, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!st.ok()) return st;
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (resp.Dump(&slices).ok())
    for (const auto& sl : slices)
      bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  if (bytes != std::string("\x08\x01", 2))
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, kNotServing);
  return grpc::Status::OK;
}

}  // namespace xbng::agent
