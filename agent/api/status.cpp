#include "api/status.h"

#include <string>

#include "common/status.h"

namespace xbng::agent {

// absl::StatusCode and grpc::StatusCode number the same codes alike (both
// are the canonical codes of google.rpc.Code).
static_assert(static_cast<int>(absl::StatusCode::kInvalidArgument) ==
              static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
static_assert(static_cast<int>(absl::StatusCode::kNotFound) ==
              static_cast<int>(grpc::StatusCode::NOT_FOUND));
static_assert(static_cast<int>(absl::StatusCode::kFailedPrecondition) ==
              static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
static_assert(static_cast<int>(absl::StatusCode::kResourceExhausted) ==
              static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
static_assert(static_cast<int>(absl::StatusCode::kInternal) ==
              static_cast<int>(grpc::StatusCode::INTERNAL));
static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) ==
              static_cast<int>(grpc::StatusCode::UNAUTHENTICATED));

grpc::Status to_grpc(const absl::Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(status_message(st)));
}

absl::Status from_grpc(const grpc::Status& st) {
  if (st.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
}

}  // namespace xbng::agent
