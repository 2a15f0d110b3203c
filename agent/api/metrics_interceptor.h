// The gRPC server interceptor that fills GrpcMetrics (telemetry/metrics.h):
// times every RPC and records its final status.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "telemetry/metrics.h"

namespace xbng::agent {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
make_metrics_interceptor_factory(GrpcMetrics* metrics);

}  // namespace xbng::agent
