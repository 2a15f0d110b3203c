#include "xbng/agent/metrics.h"

#include <fmt/format.h>
#include <grpcpp/support/server_interceptor.h>
#include <httplib.h>
#include <sys/socket.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "xbng/agent/config.h"

namespace xbng::agent {

// ---- gRPC accounting ---------------------------------------------------------

const char* grpc_code_name(int code) {
  static constexpr const char* kNames[] = {
      "OK",        "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",   "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",      "UNAVAILABLE",      "DATA_LOSS",
      "UNAUTHENTICATED"};
  return code >= 0 && code < static_cast<int>(std::size(kNames)) ? kNames[code] : "UNKNOWN";
}

void GrpcMetrics::record(const std::string& method, int code, double seconds) {
  std::lock_guard lk(mu_);
  GrpcMethodStats& m = by_method_[method];
  ++m.requests_by_code[grpc_code_name(code)];
  ++m.count;
  m.sum_seconds += seconds;
  for (size_t i = 0; i < kLatencyBuckets.size(); ++i)
    if (seconds <= kLatencyBuckets[i]) {
      ++m.buckets[i];
      break;
    }
}

std::map<std::string, GrpcMethodStats> GrpcMetrics::snapshot() const {
  std::lock_guard lk(mu_);
  return by_method_;
}

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

// ---- text format ---------------------------------------------------------------

std::string label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && v < 1e15 && v > -1e15)
    return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

struct Writer {
  std::string out;
  void family(const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                   type);
  }
  void sample(std::string_view name, std::string_view labels, uint64_t v) {
    fmt::format_to(std::back_inserter(out), "{}{}{}{} {}\n", name, labels.empty() ? "" : "{",
                   labels, labels.empty() ? "" : "}", v);
  }
  void sample(std::string_view name, std::string_view labels, double v) {
    fmt::format_to(std::back_inserter(out), "{}{}{}{} {}\n", name, labels.empty() ? "" : "{",
                   labels, labels.empty() ? "" : "}", number(v));
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
make_metrics_interceptor_factory(GrpcMetrics* metrics) {
  return std::make_unique<MetricsInterceptorFactory>(metrics);
}

std::string render_metrics(const MetricsSnapshot& s) {
  Writer w;
  w.family("xbng_packets_total", "counter",
           "Packets seen by the XDP fast path, by verdict reason and kind "
           "(forward, tx, pass, drop; info: not a verdict).");
  for (const auto& r : s.stats.reasons)
    w.sample("xbng_packets_total", fmt::format("reason=\"{}\",kind=\"{}\"", r.reason, r.kind),
             r.packets);
  w.family("xbng_bytes_total", "counter",
           "Bytes (frame length as received) by verdict reason and kind.");
  for (const auto& r : s.stats.reasons)
    w.sample("xbng_bytes_total", fmt::format("reason=\"{}\",kind=\"{}\"", r.reason, r.kind),
             r.bytes);

  struct PortMetric {
    const char* name;
    const char* help;
    uint64_t PortCounters::*field;
  };
  static constexpr PortMetric kPort[] = {
      {"xbng_port_rx_packets_total", "Packets received by the XDP program on the port.",
       &PortCounters::rx_packets},
      {"xbng_port_rx_bytes_total", "Bytes received by the XDP program on the port.",
       &PortCounters::rx_bytes},
      {"xbng_port_tx_packets_total", "Packets the fast path redirected out of the port.",
       &PortCounters::tx_packets},
      {"xbng_port_tx_bytes_total", "Bytes the fast path redirected out of the port.",
       &PortCounters::tx_bytes},
  };
  for (const auto& m : kPort) {
    w.family(m.name, "counter", m.help);
    for (const auto& p : s.stats.ports)
      if (p.valid)
        w.sample(m.name,
                 fmt::format("port=\"{}\",role=\"{}\"", label_value(p.name), p.role), p.*m.field);
  }

  w.family("xbng_subscribers", "gauge", "Provisioned subscribers.");
  w.sample("xbng_subscribers", "", s.stats.subscribers);
  w.family("xbng_map_entries", "gauge", "Entries in a BPF map.");
  for (const auto& m : s.stats.maps)
    w.sample("xbng_map_entries", fmt::format("map=\"{}\"", m.map), m.entries);
  w.family("xbng_map_max_entries", "gauge", "Capacity of a BPF map.");
  for (const auto& m : s.stats.maps)
    w.sample("xbng_map_max_entries", fmt::format("map=\"{}\"", m.map), m.max_entries);
  w.family("xbng_map_fill_ratio", "gauge", "Entries / capacity of a BPF map (0..1).");
  for (const auto& m : s.stats.maps)
    w.sample("xbng_map_fill_ratio", fmt::format("map=\"{}\"", m.map),
             m.max_entries ? static_cast<double>(m.entries) / static_cast<double>(m.max_entries)
                           : 0.0);

  w.family("xbng_grpc_requests_total", "counter",
           "Completed gRPC requests by method and status code.");
  for (const auto& [method, m] : s.grpc)
    for (const auto& [code, n] : m.requests_by_code)
      w.sample("xbng_grpc_requests_total",
               fmt::format("method=\"{}\",code=\"{}\"", label_value(method), code), n);
  w.family("xbng_grpc_request_duration_seconds", "histogram",
           "gRPC request latency by method, from the call's start to its status.");
  for (const auto& [method, m] : s.grpc) {
    const std::string lm = label_value(method);
    uint64_t cum = 0;
    for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
      cum += m.buckets[i];
      w.sample("xbng_grpc_request_duration_seconds_bucket",
               fmt::format("method=\"{}\",le=\"{}\"", lm, number(kLatencyBuckets[i])), cum);
    }
    w.sample("xbng_grpc_request_duration_seconds_bucket",
             fmt::format("method=\"{}\",le=\"+Inf\"", lm), m.count);
    w.sample("xbng_grpc_request_duration_seconds_sum", fmt::format("method=\"{}\"", lm),
             m.sum_seconds);
    w.sample("xbng_grpc_request_duration_seconds_count", fmt::format("method=\"{}\"", lm),
             m.count);
  }

  w.family("xbng_build_info", "gauge", "Version and BPF ABI version of the running xbngd.");
  w.sample("xbng_build_info",
           fmt::format("version=\"{}\",abi=\"{}\"", label_value(s.version), s.abi), uint64_t{1});
  w.family("xbng_start_time_seconds", "gauge", "Start time of xbngd, seconds since the epoch.");
  w.sample("xbng_start_time_seconds", "", s.start_time_seconds);
  w.family("xbng_config_last_reload_successful", "gauge",
           "1 when the last SIGHUP reload was valid and fully applied (or none happened), 0 when "
           "it failed or settings were refused.");
  w.sample("xbng_config_last_reload_successful", "", uint64_t{s.last_reload_ok ? 1u : 0u});
  return w.out;
}

// ---- HTTP endpoint -------------------------------------------------------------

struct MetricsServer::Impl {
  httplib::Server http;
  std::thread thread;
  std::atomic<bool> ended{false};
};

MetricsServer::MetricsServer(const std::string& listen, std::function<std::string()> scrape)
    : impl_(std::make_unique<Impl>()), listen_(listen) {
  std::string host;
  if (auto e = parse_listen(listen, &host, &port_))
    throw std::runtime_error(fmt::format("metrics listen {}: {}", listen, *e));
  auto& http = impl_->http;
  // Scrapes are rare and cheap: two threads, not one per core.
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // httplib's default is SO_REUSEPORT, which lets a second xbngd (or anyone
  // with our uid) bind the same address and take half the scrapes. Only
  // SO_REUSEADDR: a restart may rebind while old connections linger.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.Get("/metrics", [scrape](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(scrape(), "text/plain; version=0.0.4; charset=utf-8");
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(fmt::format("xbngd: {}\n", e.what()), "text/plain");
    }
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("xbngd: Prometheus metrics at /metrics\n", "text/plain");
  });
  errno = 0;
  if (!http.bind_to_port(host, port_)) {
    const int e = errno;
    throw std::runtime_error(fmt::format("metrics listen {}: cannot bind{}", listen,
                                         e ? std::string(": ") + std::strerror(e) : ""));
  }
  impl_->thread = std::thread([this] {
    impl_->http.listen_after_bind();
    impl_->ended = true;
  });
  // stop() only acts on a running server: wait for the loop to start so that
  // the destructor can always end it.
  while (!http.is_running() && !impl_->ended) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  spdlog::info("metrics on http://{}/metrics", listen);
}

MetricsServer::~MetricsServer() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace xbng::agent
