// The core's errors (absl::Status, common/status.h) as gRPC statuses and
// back: same code, same message.
#pragma once

#include <absl/status/status.h>
#include <grpcpp/support/status.h>

namespace xbng::agent {

grpc::Status to_grpc(const absl::Status& st);
absl::Status from_grpc(const grpc::Status& st);

}  // namespace xbng::agent
