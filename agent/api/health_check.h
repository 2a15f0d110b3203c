// A gRPC health check (grpc.health.v1.Health/Check) without the generated
// health stubs: xbngctl health, and xbngd probing its own server.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>

namespace xbng::agent {

// The message of the UNAVAILABLE status check_health() returns when the
// server answered with another status than SERVING.
inline constexpr const char* kNotServing = "health check: not SERVING";

// grpc.health.v1.Health/Check (the server's overall health) within
// `timeout`: OK when SERVING.
grpc::Status check_health(const std::shared_ptr<grpc::Channel>& ch,
                          std::chrono::milliseconds timeout);

}  // namespace xbng::agent
