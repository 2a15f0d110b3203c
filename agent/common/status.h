// The core's error type: absl::Status and absl::StatusOr. Their codes are
// gRPC's, value for value (absl::StatusCode::kInvalidArgument is
// grpc::StatusCode::INVALID_ARGUMENT), so that api/status.h hands a core
// error to a client with the same code and the same message; the core itself
// includes nothing of gRPC. Helpers below build an error from a format
// string (fmt).
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

namespace xbng::agent {

template <typename... Args>
absl::Status status_of(absl::StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return absl::Status(code, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
absl::Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return status_of(absl::StatusCode::kInvalidArgument, f, std::forward<Args>(args)...);
}
template <typename... Args>
absl::Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return status_of(absl::StatusCode::kNotFound, f, std::forward<Args>(args)...);
}
template <typename... Args>
absl::Status failed_precondition(fmt::format_string<Args...> f, Args&&... args) {
  return status_of(absl::StatusCode::kFailedPrecondition, f, std::forward<Args>(args)...);
}
template <typename... Args>
absl::Status resource_exhausted(fmt::format_string<Args...> f, Args&&... args) {
  return status_of(absl::StatusCode::kResourceExhausted, f, std::forward<Args>(args)...);
}
template <typename... Args>
absl::Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
  return status_of(absl::StatusCode::kInternal, f, std::forward<Args>(args)...);
}

// The message of `st` as a std::string_view (absl's string_view is a type of
// its own in Debian's build: fmt and std::string take this one).
inline std::string_view status_message(const absl::Status& st) {
  return {st.message().data(), st.message().size()};
}

// The same error with `prefix` in front of its message ("subscribers[3]" +
// ": field ..."); OK stays OK.
inline absl::Status prefixed(const absl::Status& st, std::string_view prefix) {
  if (st.ok()) return st;
  std::string m(prefix);
  m.append(status_message(st));
  return absl::Status(st.code(), std::move(m));
}

}  // namespace xbng::agent
