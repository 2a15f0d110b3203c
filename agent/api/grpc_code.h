// A gRPC status code's name, for metrics labels and messages.
#pragma once

namespace xbng::agent {

// "OK", "CANCELLED", ... for a grpc::StatusCode value; "UNKNOWN" out of range.
const char* grpc_code_name(int code);

}  // namespace xbng::agent
