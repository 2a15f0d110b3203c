// Prometheus metrics: gRPC request accounting (GrpcMetrics, filled by the
// api/ room's interceptor), the text exposition format rendered from a
// snapshot, and the HTTP endpoint serving GET /metrics and /healthz.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "telemetry/stats.h"

namespace xbng::agent {

// Upper bounds of the latency histogram buckets, seconds (+Inf implied).
inline constexpr std::array<double, 16> kLatencyBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

struct GrpcMethodStats {
  std::map<std::string, uint64_t> requests_by_code;        // "OK", "INVALID_ARGUMENT", ...
  std::array<uint64_t, kLatencyBuckets.size()> buckets{};  // per bucket, not cumulative
  uint64_t count = 0;
  double sum_seconds = 0;
};

// Requests and latency per gRPC method; thread-safe.
class GrpcMetrics {
 public:
  // method: "xbng.v1.Subscribers/GetStats"; code: a status code (gRPC's and
  // absl::StatusCode's numbers are the same), counted by its name ("OK", ...).
  void record(const std::string& method, int code, double seconds);
  std::map<std::string, GrpcMethodStats> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, GrpcMethodStats> by_method_;
};

struct MetricsSnapshot {
  StatsSnapshot stats;
  std::map<std::string, GrpcMethodStats> grpc;
  std::string version;
  int abi = 0;
  double start_time_seconds = 0;
  bool last_reload_ok = true;
  struct Api {  // bounded API resources
    uint64_t watchers = 0, watchers_disconnected = 0, watchers_refused = 0;
    uint64_t connections = 0, max_connections = 0, connections_refused = 0, accept_errors = 0;
  } api;
};

// The Prometheus text exposition format (version 0.0.4).
std::string render_metrics(const MetricsSnapshot& s);

// GET /metrics (and /healthz) on HOST:PORT, served until destroyed. Bounded:
// a request head must arrive whole within 3 s (else 408), at most 64 heads
// are read at once, two threads answer and 16 complete requests wait at
// most (else 503): slow or silent clients never hold up a scrape for long.
class MetricsServer {
 public:
  struct Handlers {
    // The body of /metrics, or throws std::runtime_error (HTTP 500).
    std::function<std::string()> metrics;
    // /healthz: empty when healthy (200), else the reason (503). Unset: 404.
    std::function<std::string()> health;
  };
  // Throws std::runtime_error when the address is invalid or cannot be bound.
  MetricsServer(const std::string& listen, Handlers handlers);
  MetricsServer(const std::string& listen, std::function<std::string()> scrape);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  const std::string& listen() const { return listen_; }
  uint16_t port() const { return port_; }  // the bound port (listen may say 0)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string listen_;
  uint16_t port_ = 0;
};

}  // namespace xbng::agent
