#include "telemetry/metrics.h"

#include <fmt/format.h>
#include <absl/status/status.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>
#include <sys/socket.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "config/config.h"

namespace xbng::agent {

// ---- gRPC accounting ---------------------------------------------------------

void GrpcMetrics::record(const std::string& method, int code, double seconds) {
  std::lock_guard lk(mu_);
  GrpcMethodStats& m = by_method_[method];
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  ++m.requests_by_code[name.empty() ? "UNKNOWN" : name];
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

// ---- text format ---------------------------------------------------------------

std::string label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
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
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
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

namespace {

// The fast path: verdicts, ports, maps.
void render_fast_path(const MetricsSnapshot& s, Writer& w) {
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
        w.sample(m.name, fmt::format("port=\"{}\",role=\"{}\"", label_value(p.name), p.role),
                 p.*m.field);
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
    w.sample(
        "xbng_map_fill_ratio", fmt::format("map=\"{}\"", m.map),
        m.max_entries ? static_cast<double>(m.entries) / static_cast<double>(m.max_entries) : 0.0);
}

// gRPC requests by method: counts by code and the latency histogram.
void render_grpc_requests(const MetricsSnapshot& s, Writer& w) {
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
    w.sample("xbng_grpc_request_duration_seconds_count", fmt::format("method=\"{}\"", lm), m.count);
  }
}

// The process: build, start, reload, and the API's connections and watchers.
void render_process(const MetricsSnapshot& s, Writer& w) {
  w.family("xbng_build_info", "gauge", "Version and BPF ABI version of the running xbngd.");
  w.sample("xbng_build_info",
           fmt::format("version=\"{}\",abi=\"{}\"", label_value(s.version), s.abi), uint64_t{1});
  w.family("xbng_start_time_seconds", "gauge", "Start time of xbngd, seconds since the epoch.");
  w.sample("xbng_start_time_seconds", "", s.start_time_seconds);
  w.family("xbng_config_last_reload_successful", "gauge",
           "1 when the last SIGHUP reload was valid and fully applied (or none happened), 0 when "
           "it failed or settings were refused.");
  w.sample("xbng_config_last_reload_successful", "", uint64_t{s.last_reload_ok ? 1u : 0u});

  w.family("xbng_grpc_connections", "gauge", "gRPC connections open now.");
  w.sample("xbng_grpc_connections", "", s.api.connections);
  w.family("xbng_grpc_max_connections", "gauge",
           "Most gRPC connections accepted at once (api.max_connections within RLIMIT_NOFILE).");
  w.sample("xbng_grpc_max_connections", "", s.api.max_connections);
  w.family("xbng_grpc_connections_refused_total", "counter",
           "gRPC connections closed at once: the maximum was reached (reason=limit) or "
           "accept failed, e.g. out of descriptors (reason=accept_error).");
  w.sample("xbng_grpc_connections_refused_total", "reason=\"limit\"", s.api.connections_refused);
  w.sample("xbng_grpc_connections_refused_total", "reason=\"accept_error\"", s.api.accept_errors);
  w.family("xbng_watchers", "gauge", "WatchEvents streams open now.");
  w.sample("xbng_watchers", "", s.api.watchers);
  w.family("xbng_watchers_disconnected_total", "counter",
           "WatchEvents streams ended because their client fell behind (queue overflow).");
  w.sample("xbng_watchers_disconnected_total", "", s.api.watchers_disconnected);
  w.family("xbng_watchers_refused_total", "counter",
           "WatchEvents streams refused: api.max_watchers were open.");
  w.sample("xbng_watchers_refused_total", "", s.api.watchers_refused);
}

}  // namespace

std::string render_metrics(const MetricsSnapshot& s) {
  Writer w;
  render_fast_path(s, w);
  render_grpc_requests(s, w);
  render_process(s, w);
  return w.out;
}

// ---- HTTP endpoint -------------------------------------------------------------
//
// A small server of its own rather than cpp-httplib: httplib 0.11 bounds
// each read, never a request, so two clients that trickle a byte now and
// then hold its threads for ever and every scrape waits. Here one thread
// reads request heads of every pending connection at once (poll), each
// with a deadline for the whole head, and a bounded pool answers complete
// ones; a connection over a bound is answered 503 and closed. Each
// response closes its connection (Prometheus reconnects per scrape).

namespace {

constexpr size_t kMaxPending = 64;      // connections whose head is being read
constexpr size_t kMaxHead = 8192;       // bytes of request line + headers
constexpr size_t kWorkers = 2;          // answering threads
constexpr size_t kMaxQueued = 16;       // complete requests waiting for a worker
constexpr int kHeadDeadlineMs = 3000;   // whole request head
constexpr int kWriteDeadlineMs = 5000;  // whole response

int64_t mono_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Writes all of `data` before the deadline; false otherwise.
bool write_all(int fd, std::string_view data, int64_t deadline) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    const int64_t left = deadline - mono_ms();
    if (left <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) return false;
  }
  return true;
}

void respond(int fd, int status, const char* reason, std::string_view type, std::string_view body,
             bool head_only = false) {
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
      status, reason, type, body.size());
  if (!head_only) out.append(body);
  write_all(fd, out, mono_ms() + kWriteDeadlineMs);
}

}  // namespace

struct MetricsServer::Impl {
  Handlers handlers;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::atomic<bool> stop{false};
  std::thread reader;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv;
  struct Job {
    int fd;
    std::string method, target;
  };
  std::deque<Job> jobs;
  std::atomic<uint64_t> timeouts{0}, rejected{0};
  // A connection whose request head is being read.
  struct Pending {
    int fd;
    int64_t deadline;
    std::string head;
  };

  void read_loop();
  void read_head(std::vector<Pending>& pending, size_t i);
  void hand_over(Job j);
  void expire(std::vector<Pending>& pending);
  void accept_new(std::vector<Pending>& pending);
  static void drop(std::vector<Pending>& pending, size_t i);
  void work();
  void answer(const Job& j);
};

void MetricsServer::Impl::drop(std::vector<Pending>& pending, size_t i) {
  close(pending[i].fd);
  pending[i] = std::move(pending.back());
  pending.pop_back();
}

// Reads what arrived on pending[i]; a complete head is handed over (queued
// for a worker, or answered 503), a broken or oversized one dropped.
void MetricsServer::Impl::read_head(std::vector<Pending>& pending, size_t i) {
  char buf[2048];
  const ssize_t r = recv(pending[i].fd, buf, sizeof buf, 0);
  if (r <= 0) {
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    drop(pending, i);
    return;
  }
  pending[i].head.append(buf, static_cast<size_t>(r));
  const size_t end = pending[i].head.find("\r\n\r\n");
  if (end == std::string::npos) {
    if (pending[i].head.size() > kMaxHead) {
      respond(pending[i].fd, 431, "Request Header Fields Too Large", "text/plain",
              "xbngd: request head too large\n");
      drop(pending, i);
    }
    return;
  }
  // "GET /metrics HTTP/1.1"
  const std::string& h = pending[i].head;
  const size_t sp1 = h.find(' '), sp2 = sp1 == std::string::npos ? sp1 : h.find(' ', sp1 + 1);
  Job j{pending[i].fd, {}, {}};
  if (sp2 != std::string::npos && sp2 < end) {
    j.method = h.substr(0, sp1);
    j.target = h.substr(sp1 + 1, sp2 - sp1 - 1);
  }
  pending[i].fd = -1;
  pending[i] = std::move(pending.back());
  pending.pop_back();
  hand_over(std::move(j));
}

// A complete request to the workers, or 503 when their queue is full.
void MetricsServer::Impl::hand_over(Job j) {
  bool queued = false;
  {
    std::lock_guard l(mu);
    if (jobs.size() < kMaxQueued) {
      jobs.push_back(std::move(j));
      queued = true;
    }
  }
  if (queued) {
    cv.notify_one();
  } else {
    ++rejected;
    respond(j.fd, 503, "Service Unavailable", "text/plain", "xbngd: busy, retry\n");
    close(j.fd);
  }
}

// Heads past their deadline are answered 408 and closed.
void MetricsServer::Impl::expire(std::vector<Pending>& pending) {
  const int64_t now = mono_ms();
  for (size_t i = pending.size(); i-- > 0;)
    if (pending[i].deadline <= now) {
      ++timeouts;
      respond(pending[i].fd, 408, "Request Timeout", "text/plain", "xbngd: request timeout\n");
      drop(pending, i);
    }
}

// New connections, within the bound: the oldest pending one makes room.
void MetricsServer::Impl::accept_new(std::vector<Pending>& pending) {
  for (int burst = 0; burst < 64; ++burst) {
    int c = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      break;
    }
    if (pending.size() >= kMaxPending) {
      size_t oldest = 0;
      for (size_t i = 1; i < pending.size(); ++i)
        if (pending[i].deadline < pending[oldest].deadline) oldest = i;
      ++timeouts;
      drop(pending, oldest);
    }
    pending.push_back({c, mono_ms() + kHeadDeadlineMs, {}});
  }
}

void MetricsServer::Impl::read_loop() {
  std::vector<Pending> pending;
  std::vector<pollfd> p;
  while (!stop) {
    p.assign({{listen_fd, POLLIN, 0}, {wake[0], POLLIN, 0}});
    int64_t next = mono_ms() + 1000;
    for (const auto& c : pending) {
      p.push_back({c.fd, POLLIN, 0});
      next = std::min(next, c.deadline);
    }
    const int n =
        poll(p.data(), p.size(), static_cast<int>(std::max<int64_t>(0, next - mono_ms())));
    if (stop) break;
    if (n < 0 && errno != EINTR) break;
    // Heads: read what arrived (from the last, so that removing one moves
    // only an entry already read).
    for (size_t k = p.size(); k-- > 2;)
      if (p[k].revents) read_head(pending, k - 2);
    expire(pending);
    if (p[0].revents & POLLIN) accept_new(pending);
  }
  for (auto& c : pending) close(c.fd);
}

void MetricsServer::Impl::answer(const Job& j) {
  const bool head = j.method == "HEAD";
  if (j.method != "GET" && !head) {
    respond(j.fd, 405, "Method Not Allowed", "text/plain", "xbngd: GET only\n");
    return;
  }
  const std::string path = j.target.substr(0, j.target.find('?'));
  if (path == "/metrics") {
    try {
      respond(j.fd, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", handlers.metrics(),
              head);
    } catch (const std::exception& e) {
      respond(j.fd, 500, "Internal Server Error", "text/plain",
              fmt::format("xbngd: {}\n", e.what()), head);
    }
  } else if (path == "/healthz" && handlers.health) {
    std::string why;
    try {
      why = handlers.health();
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty())
      respond(j.fd, 200, "OK", "text/plain", "ok\n", head);
    else
      respond(j.fd, 503, "Service Unavailable", "text/plain", fmt::format("xbngd: {}\n", why),
              head);
  } else if (path == "/") {
    respond(j.fd, 200, "OK", "text/plain",
            "xbngd: Prometheus metrics at /metrics, health at /healthz\n", head);
  } else {
    respond(j.fd, 404, "Not Found", "text/plain", "xbngd: not found\n", head);
  }
}

void MetricsServer::Impl::work() {
  for (;;) {
    Job j;
    {
      std::unique_lock l(mu);
      cv.wait(l, [&] { return stop || !jobs.empty(); });
      if (stop) return;
      j = std::move(jobs.front());
      jobs.pop_front();
    }
    answer(j);
    close(j.fd);
  }
}

MetricsServer::MetricsServer(const std::string& listen, std::function<std::string()> scrape)
    : MetricsServer(listen, Handlers{std::move(scrape), {}}) {}

MetricsServer::MetricsServer(const std::string& listen, Handlers handlers)
    : impl_(std::make_unique<Impl>()), listen_(listen) {
  std::string host;
  if (auto e = parse_listen(listen, &host, &port_))
    throw std::runtime_error(fmt::format("metrics listen {}: {}", listen, *e));
  impl_->handlers = std::move(handlers);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port_).c_str(), &hints, &res); rc != 0)
    throw std::runtime_error(fmt::format("metrics listen {}: {}", listen, gai_strerror(rc)));
  int err = 0;
  for (addrinfo* ai = res; ai && impl_->listen_fd < 0; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // SO_REUSEADDR only, never SO_REUSEPORT (which would let a second xbngd
    // or anyone with our uid take half the scrapes): a restart may rebind
    // while old connections linger.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      impl_->listen_fd = fd;
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
        port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      break;
    }
    err = errno;
    close(fd);
  }
  freeaddrinfo(res);
  if (impl_->listen_fd < 0)
    throw std::runtime_error(fmt::format("metrics listen {}: cannot bind{}", listen,
                                         err ? std::string(": ") + std::strerror(err) : ""));
  if (pipe2(impl_->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(impl_->listen_fd);
    throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  }
  impl_->reader = std::thread([this] { impl_->read_loop(); });
  for (size_t i = 0; i < kWorkers; ++i) impl_->workers.emplace_back([this] { impl_->work(); });
  spdlog::info("metrics on http://{}/metrics", listen);
}

MetricsServer::~MetricsServer() {
  impl_->stop = true;
  char b = 1;
  (void)!write(impl_->wake[1], &b, 1);
  impl_->cv.notify_all();
  if (impl_->reader.joinable()) impl_->reader.join();
  for (auto& w : impl_->workers) w.join();
  for (auto& j : impl_->jobs) close(j.fd);
  close(impl_->listen_fd);
  close(impl_->wake[0]);
  close(impl_->wake[1]);
}

}  // namespace xbng::agent
