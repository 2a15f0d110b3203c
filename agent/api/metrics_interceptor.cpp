#include "api/metrics_interceptor.h"

#include <chrono>
#include <string>

namespace xbng::agent {

namespace {

namespace gx = grpc::experimental;

// One per RPC: created when the call starts, records at PRE_SEND_STATUS (or,
// for a call that ends without a status, e.g. a vanished client, on
// destruction as CANCELLED).
class MetricsInterceptor final : public gx::Interceptor {
 public:
  MetricsInterceptor(gx::ServerRpcInfo* info, GrpcMetrics* m)
      : metrics_(m), start_(std::chrono::steady_clock::now()) {
    const char* name = info->method();
    method_ = name && *name ? (name[0] == '/' ? name + 1 : name) : "unknown";
  }
  ~MetricsInterceptor() override {
    if (!recorded_) metrics_->record(method_, grpc::StatusCode::CANCELLED, elapsed());
  }
  void Intercept(gx::InterceptorBatchMethods* methods) override {
    if (!recorded_ &&
        methods->QueryInterceptionHookPoint(gx::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->record(method_, methods->GetSendStatus().error_code(), elapsed());
      recorded_ = true;
    }
    methods->Proceed();
  }

 private:
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  GrpcMetrics* metrics_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
  bool recorded_ = false;
};

class MetricsInterceptorFactory final : public gx::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(GrpcMetrics* m) : metrics_(m) {}
  gx::Interceptor* CreateServerInterceptor(gx::ServerRpcInfo* info) override {
    return new MetricsInterceptor(info, metrics_);
  }

 private:
  GrpcMetrics* metrics_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
make_metrics_interceptor_factory(GrpcMetrics* metrics) {
  return std::make_unique<MetricsInterceptorFactory>(metrics);
}

}  // namespace xbng::agent
