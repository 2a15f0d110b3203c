// The UDP side of dynamic authorization (RFC 5176): one socket on
// radius.coa_listen ("[::]:3799" takes IPv4 too) and one thread that reads a
// datagram, hands it to DynAuth and sends its reply back to the source.
// Requests are handled one at a time, in order of arrival.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "radius/dynauth.h"

namespace xbng::radius {

class DynAuthServer {
 public:
  // host: an IP literal ("::" or "0.0.0.0" for any); port 0 picks one.
  static absl::StatusOr<std::unique_ptr<DynAuthServer>> start(const std::string& host,
                                                              uint16_t port, DynAuthOptions opts,
                                                              DynAuthBackend* backend);
  ~DynAuthServer();
  DynAuthServer(const DynAuthServer&) = delete;
  DynAuthServer& operator=(const DynAuthServer&) = delete;

  uint16_t port() const { return port_; }
  DynAuthCounters counters() const { return handler_.counters(); }
  // Prometheus text: xbng_radius_dynauth_requests_total{type,outcome},
  // xbng_radius_dynauth_retransmits_total{type},
  // xbng_radius_dynauth_dropped_total{reason}.
  std::string render_metrics() const;

 private:
  DynAuthServer(int fd, int stop_fd, uint16_t port, DynAuthOptions opts, DynAuthBackend* backend);
  void run();

  int fd_, stop_fd_;
  uint16_t port_;
  DynAuth handler_;
  std::thread thread_;
};

}  // namespace xbng::radius
