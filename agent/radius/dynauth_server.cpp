#include "radius/dynauth_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace xbng::radius {

namespace {

uint64_t unix_seconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

absl::StatusOr<std::unique_ptr<DynAuthServer>> DynAuthServer::start(const std::string& host,
                                                                    uint16_t port,
                                                                    DynAuthOptions opts,
                                                                    DynAuthBackend* backend) {
  sockaddr_storage ss{};
  socklen_t len;
  int family;
  if (in_addr a4; inet_pton(AF_INET, host.c_str(), &a4) == 1) {
    auto* s = reinterpret_cast<sockaddr_in*>(&ss);
    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    s->sin_addr = a4;
    len = sizeof(sockaddr_in);
    family = AF_INET;
  } else if (in6_addr a6; inet_pton(AF_INET6, host.c_str(), &a6) == 1) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(port);
    s->sin6_addr = a6;
    len = sizeof(sockaddr_in6);
    family = AF_INET6;
  } else {
    return absl::InvalidArgumentError(fmt::format("coa_listen: {} is not an IP address", host));
  }
  const int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(fmt::format("coa_listen socket: {}", strerror(errno)));
  if (family == AF_INET6) {
    int off = 0;  // "[::]" takes IPv4 clients too
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(
        fmt::format("coa_listen {}:{}: bind: {}", host, port, strerror(e)));
  }
  sockaddr_storage bound{};
  socklen_t bl = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bl);
  const uint16_t p = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                             : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  const int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) {
    close(fd);
    return absl::InternalError(fmt::format("eventfd: {}", strerror(errno)));
  }
  return std::unique_ptr<DynAuthServer>(new DynAuthServer(fd, efd, p, std::move(opts), backend));
}

DynAuthServer::DynAuthServer(int fd, int stop_fd, uint16_t port, DynAuthOptions opts,
                             DynAuthBackend* backend)
    : fd_(fd), stop_fd_(stop_fd), port_(port), handler_(std::move(opts), backend) {
  thread_ = std::thread([this] { run(); });
}

DynAuthServer::~DynAuthServer() {
  uint64_t one = 1;
  if (write(stop_fd_, &one, sizeof(one)) < 0) {
    // The eventfd counter cannot overflow from one write; nothing to do.
  }
  if (thread_.joinable()) thread_.join();
  close(fd_);
  close(stop_fd_);
}

void DynAuthServer::run() {
  // One octet more than the largest packet: a longer datagram shows as
  // truncated and is dropped (too_long).
  std::vector<uint8_t> buf(kMaxPacketLen + 1);
  pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("radius: CoA listener poll: {}", strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    sockaddr_storage from{};
    socklen_t fl = sizeof(from);
    const ssize_t n = recvfrom(fd_, buf.data(), buf.size(), MSG_TRUNC | MSG_DONTWAIT,
                               reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 0) continue;
    char addr[INET6_ADDRSTRLEN] = {};
    if (from.ss_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&from)->sin_addr, addr, sizeof(addr));
    else if (from.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&from)->sin6_addr, addr, sizeof(addr));
    std::span<const uint8_t> d(
        buf.data(), static_cast<size_t>(n) > buf.size() ? buf.size() : static_cast<size_t>(n));
    std::optional<Bytes> reply;
    try {
      reply = handler_.handle(d, addr, unix_seconds());
    } catch (const std::exception& e) {
      // Nothing in the handler throws on input; a failure of the store or
      // of memory must not end the listener.
      spdlog::error("radius: CoA request from {}: {}", addr, e.what());
      continue;
    }
    if (!reply) continue;
    if (sendto(fd_, reply->data(), reply->size(), 0, reinterpret_cast<sockaddr*>(&from), fl) < 0)
      handler_.count_drop(static_cast<int>(DynAuthDrop::kSendError));
  }
}

std::string DynAuthServer::render_metrics() const {
  const DynAuthCounters c = handler_.counters();
  std::string out;
  static const char* kType[2] = {"coa", "disconnect"};
  out +=
      "# HELP xbng_radius_dynauth_requests_total CoA- and Disconnect-Requests answered, by "
      "outcome (ack, or the NAK's Error-Cause)\n"
      "# TYPE xbng_radius_dynauth_requests_total counter\n";
  for (int t = 0; t < 2; ++t)
    for (const auto& [o, n] : c.requests[t])
      out += fmt::format("xbng_radius_dynauth_requests_total{{type=\"{}\",outcome=\"{}\"}} {}\n",
                         kType[t], o, n);
  out +=
      "# HELP xbng_radius_dynauth_retransmits_total requests seen again, answered with the "
      "cached reply\n"
      "# TYPE xbng_radius_dynauth_retransmits_total counter\n";
  for (int t = 0; t < 2; ++t)
    out += fmt::format("xbng_radius_dynauth_retransmits_total{{type=\"{}\"}} {}\n", kType[t],
                       c.retransmits[t]);
  out +=
      "# HELP xbng_radius_dynauth_dropped_total datagrams on the CoA port dropped unanswered, by "
      "reason\n"
      "# TYPE xbng_radius_dynauth_dropped_total counter\n";
  for (int d = 1; d < kDynAuthDropCount; ++d) {
    auto it = c.drops.find(drop_name(d));
    out += fmt::format("xbng_radius_dynauth_dropped_total{{reason=\"{}\"}} {}\n", drop_name(d),
                       it == c.drops.end() ? 0 : it->second);
  }
  return out;
}

}  // namespace xbng::radius
