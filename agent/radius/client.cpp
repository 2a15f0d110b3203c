#include "radius/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_map>
#include <algorithm>

#include "fmt/format.h"
#include "radius/codec.h"
#include "spdlog/spdlog.h"

namespace xbng::radius {

namespace {

// Concatenates anything fmt formats (std::string_view is not absl's here).
template <typename... A>
std::string cat(const A&... a) {
  std::string s;
  ((s += fmt::to_string(a)), ...);
  return s;
}

using Clock = std::chrono::steady_clock;

struct Endpoint {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = 0;
  std::string text;  // "ADDR:PORT" / "[ADDR]:PORT"
};

bool same_endpoint(const Endpoint& e, const sockaddr_storage& from) {
  if (from.ss_family != e.family) return false;
  if (e.family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&e.ss);
    auto* b = reinterpret_cast<const sockaddr_in*>(&from);
    return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  auto* a = reinterpret_cast<const sockaddr_in6*>(&e.ss);
  auto* b = reinterpret_cast<const sockaddr_in6*>(&from);
  return a->sin6_port == b->sin6_port &&
         std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0;
}

absl::StatusOr<Endpoint> endpoint(const std::string& addr, uint16_t port) {
  Endpoint e;
  if (auto v4 = agent::parse_ipv4(addr)) {
    auto* s = reinterpret_cast<sockaddr_in*>(&e.ss);
    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    s->sin_addr.s_addr = *v4;
    e.len = sizeof(sockaddr_in);
    e.family = AF_INET;
    e.text = cat(addr, ":", port);
    return e;
  }
  if (auto v6 = agent::parse_ipv6(addr)) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&e.ss);
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(port);
    std::memcpy(&s->sin6_addr, v6->data(), 16);
    e.len = sizeof(sockaddr_in6);
    e.family = AF_INET6;
    e.text = cat("[", addr, "]:", port);
    return e;
  }
  return absl::InvalidArgumentError(
      cat("RADIUS server address \"", addr, "\" is not an IPv4 or IPv6 address"));
}

struct ServerState {
  Endpoint auth, acct;
  std::string secret;
  Clock::time_point dead_until{};
};

struct Request;

// One UDP socket and its 256 identifiers.
struct Socket {
  int fd = -1;
  int family = 0;
  Request* slot[256] = {};
  int used = 0;
  uint8_t next = 0;
};

struct Request {
  uint64_t seq = 0;
  bool acct = false;
  std::vector<Attribute> attrs;  // User-Password in plain text (hidden per server)
  std::function<void(const AccessResult&)> auth_done;
  std::function<void(bool)> acct_done;
  // Current attempt.
  std::vector<bool> tried;  // by server index
  size_t server = 0;
  uint32_t sends = 0;  // to the current server
  Socket* sock = nullptr;
  uint8_t id = 0;
  Authenticator authenticator{};
  Bytes wire;
  Clock::time_point deadline{};
};

struct Counters {
  std::atomic<uint64_t> access_requests{0}, accepts{0}, rejects{0}, auth_timeouts{0};
  std::atomic<uint64_t> accepts_unusable{0};
  std::atomic<uint64_t> accounting_requests{0}, accounting_responses{0}, accounting_timeouts{0};
  std::atomic<uint64_t> retransmits{0}, failovers{0};
  std::atomic<uint64_t> drop_malformed{0}, drop_unknown_source{0}, drop_no_request{0};
  std::atomic<uint64_t> drop_bad_authenticator{0}, drop_bad_message_authenticator{0};
  std::atomic<uint64_t> drop_missing_message_authenticator{0}, drop_unexpected_code{0};
  std::atomic<uint64_t> queue_full{0}, send_errors{0};
  std::atomic<uint64_t> sockets{0};
};

void bump(std::atomic<uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

std::vector<Attribute> access_attributes(const Config& cfg, const AccessRequest& r) {
  std::vector<Attribute> a;
  a.push_back(make_string(attr::kUserName, r.user_name));
  a.push_back(make_string(attr::kUserPassword, r.password));
  if (!cfg.nas_identifier.empty())
    a.push_back(make_string(attr::kNasIdentifier, cfg.nas_identifier));
  if (cfg.nas_ipv4) a.push_back(make_ipv4(attr::kNasIpAddress, *cfg.nas_ipv4));
  if (cfg.nas_ipv6) a.push_back(make_ipv6(attr::kNasIpv6Address, *cfg.nas_ipv6));
  a.push_back(make_u32(attr::kNasPortType, kNasPortTypeEthernet));
  if (!r.nas_port_id.empty()) a.push_back(make_string(attr::kNasPortId, r.nas_port_id));
  if (!r.calling_station_id.empty())
    a.push_back(make_string(attr::kCallingStationId, r.calling_station_id));
  if (!r.circuit_id.empty())
    a.push_back(make_vendor(kVendorAdslForum, kAdslAgentCircuitId, r.circuit_id));
  if (!r.remote_id.empty())
    a.push_back(make_vendor(kVendorAdslForum, kAdslAgentRemoteId, r.remote_id));
  return a;
}

}  // namespace

std::vector<Attribute> access_request_attributes(const Config& cfg, const AccessRequest& r) {
  return access_attributes(cfg, r);
}

std::vector<Attribute> accounting_attributes(const Config& cfg, const AccountingRequest& r) {
  std::vector<Attribute> a;
  a.push_back(make_u32(attr::kAcctStatusType, static_cast<uint32_t>(r.status)));
  a.push_back(make_string(attr::kAcctSessionId, r.session_id));
  if (!cfg.nas_identifier.empty())
    a.push_back(make_string(attr::kNasIdentifier, cfg.nas_identifier));
  if (cfg.nas_ipv4) a.push_back(make_ipv4(attr::kNasIpAddress, *cfg.nas_ipv4));
  if (cfg.nas_ipv6) a.push_back(make_ipv6(attr::kNasIpv6Address, *cfg.nas_ipv6));
  bool on_off = r.status == AcctStatus::kAccountingOn || r.status == AcctStatus::kAccountingOff;
  if (!on_off) {
    if (!r.user_name.empty()) a.push_back(make_string(attr::kUserName, r.user_name));
    a.push_back(make_u32(attr::kNasPortType, kNasPortTypeEthernet));
    if (!r.nas_port_id.empty()) a.push_back(make_string(attr::kNasPortId, r.nas_port_id));
    if (!r.calling_station_id.empty())
      a.push_back(make_string(attr::kCallingStationId, r.calling_station_id));
    if (r.framed_ip) a.push_back(make_ipv4(attr::kFramedIpAddress, *r.framed_ip));
    if (r.framed_ipv6) a.push_back(make_ipv6(attr::kFramedIpv6Address, *r.framed_ipv6));
    for (const auto& p : r.delegated_v6)
      a.push_back(make_ipv6_prefix(attr::kDelegatedIpv6Prefix, p));
    for (const auto& c : r.classes) a.push_back(make_string(attr::kClass, c));
    if (r.status != AcctStatus::kStart) {
      a.push_back(make_u32(attr::kAcctInputOctets, static_cast<uint32_t>(r.input_octets)));
      a.push_back(make_u32(attr::kAcctInputGigawords, static_cast<uint32_t>(r.input_octets >> 32)));
      a.push_back(make_u32(attr::kAcctOutputOctets, static_cast<uint32_t>(r.output_octets)));
      a.push_back(
          make_u32(attr::kAcctOutputGigawords, static_cast<uint32_t>(r.output_octets >> 32)));
      a.push_back(make_u32(attr::kAcctInputPackets, static_cast<uint32_t>(r.input_packets)));
      a.push_back(make_u32(attr::kAcctOutputPackets, static_cast<uint32_t>(r.output_packets)));
      a.push_back(make_u32(attr::kAcctSessionTime, r.session_time));
    }
    if (r.status == AcctStatus::kStop && r.terminate_cause)
      a.push_back(make_u32(attr::kAcctTerminateCause, *r.terminate_cause));
  }
  a.push_back(make_u32(attr::kAcctDelayTime, r.delay_time));
  if (r.event_timestamp) a.push_back(make_u32(attr::kEventTimestamp, *r.event_timestamp));
  return a;
}

namespace {

class ClientImpl final : public Client {
 public:
  ClientImpl(const Config& cfg, std::vector<ServerState> servers, int wake)
      : cfg_(cfg), servers_(std::move(servers)), wake_(wake) {
    thread_ = std::thread([this] { run(); });
  }

  ~ClientImpl() override {
    stop_.store(true);
    uint64_t one = 1;
    ssize_t n = write(wake_, &one, sizeof one);
    (void)n;
    thread_.join();
    for (auto& s : sockets_) close(s->fd);
    close(wake_);
  }

  void authorize(const AccessRequest& r, std::function<void(const AccessResult&)> done) override {
    auto q = std::make_unique<Request>();
    q->attrs = access_attributes(cfg_, r);
    q->auth_done = std::move(done);
    enqueue(std::move(q));
  }

  void account(const AccountingRequest& r, std::function<void(bool)> done) override {
    auto q = std::make_unique<Request>();
    q->acct = true;
    q->attrs = accounting_attributes(cfg_, r);
    q->acct_done = std::move(done);
    enqueue(std::move(q));
  }

  CounterSnapshot counters() const override {
    auto g = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    CounterSnapshot s;
    s.access_requests = g(c_.access_requests);
    s.accepts = g(c_.accepts);
    s.rejects = g(c_.rejects);
    s.auth_timeouts = g(c_.auth_timeouts);
    s.accepts_unusable = g(c_.accepts_unusable);
    s.accounting_requests = g(c_.accounting_requests);
    s.accounting_responses = g(c_.accounting_responses);
    s.accounting_timeouts = g(c_.accounting_timeouts);
    s.retransmits = g(c_.retransmits);
    s.failovers = g(c_.failovers);
    s.drop_malformed = g(c_.drop_malformed);
    s.drop_unknown_source = g(c_.drop_unknown_source);
    s.drop_no_request = g(c_.drop_no_request);
    s.drop_bad_authenticator = g(c_.drop_bad_authenticator);
    s.drop_bad_message_authenticator = g(c_.drop_bad_message_authenticator);
    s.drop_missing_message_authenticator = g(c_.drop_missing_message_authenticator);
    s.drop_unexpected_code = g(c_.drop_unexpected_code);
    s.queue_full = g(c_.queue_full);
    s.send_errors = g(c_.send_errors);
    s.sockets = g(c_.sockets);
    return s;
  }

  bool set_after_completions(std::function<void()> f) override {
    std::lock_guard<std::mutex> l(mu_);
    after_ = std::make_shared<const std::function<void()>>(std::move(f));
    return true;
  }

 private:
  void enqueue(std::unique_ptr<Request> q) {
    q->tried.assign(servers_.size(), false);
    bool first = false;  // pending_ was empty: the I/O thread needs a wake-up
    {
      std::lock_guard<std::mutex> l(mu_);
      if (pending_.size() + outstanding_.load(std::memory_order_relaxed) < cfg_.max_outstanding) {
        first = pending_.empty();
        pending_.push_back(std::move(q));
        q = nullptr;
      }
    }
    if (q) {  // refused: answered at once, on the caller's thread
      bump(c_.queue_full);
      finish_timeout(*q);
      if (auto after = after_completions()) (*after)();
      return;
    }
    // A request queued behind others rides on their wake-up: the I/O thread
    // takes the whole queue after it has read the eventfd (one write(2) per
    // burst, not per request).
    if (!first) return;
    uint64_t one = 1;
    ssize_t n = write(wake_, &one, sizeof one);
    (void)n;
  }

  std::shared_ptr<const std::function<void()>> after_completions() {
    std::lock_guard<std::mutex> l(mu_);
    return after_;
  }

  // Runs q's callback with the outcome "no answer".
  void finish_timeout(Request& q) {
    if (q.acct) {
      bump(c_.accounting_timeouts);
      if (q.acct_done) q.acct_done(false);
    } else {
      bump(c_.auth_timeouts);
      AccessResult r;
      r.outcome = Outcome::kTimeout;
      if (q.auth_done) q.auth_done(r);
    }
  }

  Socket* socket_for(int family) {
    for (auto& s : sockets_)
      if (s->family == family && s->used < 256) return s.get();
    int fd = ::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      spdlog::error("radius: socket: {}", std::strerror(errno));
      return nullptr;
    }
    int buf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    const std::string& src = family == AF_INET ? cfg_.source_ipv4 : cfg_.source_ipv6;
    if (!src.empty()) {
      auto e = endpoint(src, 0);
      if (!e.ok() || e->family != family ||
          bind(fd, reinterpret_cast<const sockaddr*>(&e->ss), e->len) != 0) {
        spdlog::error(
            "radius: cannot bind the source address {}: {}", src,
            e.ok() ? std::string(std::strerror(errno)) : std::string(e.status().message()));
        close(fd);
        return nullptr;
      }
    }
    auto s = std::make_unique<Socket>();
    s->fd = fd;
    s->family = family;
    sockets_.push_back(std::move(s));
    bump(c_.sockets);
    return sockets_.back().get();
  }

  void release_id(Request& q) {
    if (!q.sock) return;
    q.sock->slot[q.id] = nullptr;
    q.sock->used--;
    q.sock = nullptr;
  }

  // Next server for q in priority order: live and untried first, then dead
  // and untried (every server dead: try them anyway). SIZE_MAX = none left.
  size_t pick_server(const Request& q, Clock::time_point now) {
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < servers_.size(); ++i)
        if (!q.tried[i] && (pass == 1 || servers_[i].dead_until <= now)) return i;
    return SIZE_MAX;
  }

  // Starts q on its next server; false when none is left (q finished).
  bool start_attempt(Request& q, Clock::time_point now) {
    release_id(q);
    for (;;) {
      size_t si = pick_server(q, now);
      if (si == SIZE_MAX) return false;
      q.tried[si] = true;
      const ServerState& s = servers_[si];
      const Endpoint& ep = q.acct ? s.acct : s.auth;
      Socket* sock = socket_for(ep.family);
      if (!sock) continue;
      uint8_t id = sock->next;
      while (sock->slot[id]) ++id;
      sock->next = static_cast<uint8_t>(id + 1);
      absl::StatusOr<Bytes> wire;
      if (q.acct) {
        wire = build_signed_request(kAccountingRequest, id, q.attrs, s.secret);
      } else {
        q.authenticator = random_authenticator();
        wire = build_access_request(id, q.authenticator, q.attrs, s.secret);
      }
      if (!wire.ok()) {
        spdlog::warn("radius: cannot build the request: {}", std::string(wire.status().message()));
        return false;
      }
      if (q.acct) std::memcpy(q.authenticator.data(), wire->data() + 4, 16);
      q.wire = std::move(*wire);
      q.server = si;
      q.sock = sock;
      q.id = id;
      sock->slot[id] = &q;
      sock->used++;
      q.sends = 0;
      send(q, now);
      return true;
    }
  }

  // Queues q's datagram for the next flush() (one sendmmsg per run of
  // datagrams on one socket) and arms its timer.
  void send(Request& q, Clock::time_point now) {
    outbox_.push_back(&q);
    q.sends++;
    q.deadline = now + std::chrono::milliseconds(cfg_.timeout_ms);
    timers_.push({q.deadline, q.seq});
  }

  // Sends what send() queued, in order: up to kSendBatch datagrams of one
  // socket per system call. The requests are live until then: nothing
  // between a send() and the flush() of its pass finishes one.
  void flush() {
    size_t i = 0;
    while (i < outbox_.size()) {
      const int fd = outbox_[i]->sock->fd;
      size_t n = 0;
      while (i + n < outbox_.size() && n < kSendBatch && outbox_[i + n]->sock->fd == fd) {
        Request& q = *outbox_[i + n];
        const ServerState& s = servers_[q.server];
        const Endpoint& ep = q.acct ? s.acct : s.auth;
        tx_iov_[n] = {q.wire.data(), q.wire.size()};
        tx_msg_[n] = {};
        tx_msg_[n].msg_hdr.msg_iov = &tx_iov_[n];
        tx_msg_[n].msg_hdr.msg_iovlen = 1;
        tx_msg_[n].msg_hdr.msg_name = const_cast<sockaddr_storage*>(&ep.ss);
        tx_msg_[n].msg_hdr.msg_namelen = ep.len;
        ++n;
      }
      size_t done = 0;
      while (done < n) {
        int sent = sendmmsg(fd, tx_msg_.data() + done, static_cast<unsigned>(n - done), 0);
        if (sent <= 0) {  // this datagram failed (the next ones are tried): a send error
          bump(c_.send_errors);
          ++done;
          continue;
        }
        done += static_cast<size_t>(sent);
      }
      i += n;
    }
    outbox_.clear();
  }

  // Removes a request from the live set (its identifier freed) and hands it over.
  std::unique_ptr<Request> take(uint64_t seq) {
    auto it = live_.find(seq);
    if (it == live_.end()) return nullptr;
    std::unique_ptr<Request> q = std::move(it->second);
    live_.erase(it);
    release_id(*q);
    outstanding_.fetch_sub(1, std::memory_order_relaxed);
    return q;
  }

  void on_timer(Request& q, Clock::time_point now) {
    if (q.sends <= cfg_.retries) {
      bump(c_.retransmits);
      send(q, now);
      return;
    }
    ServerState& s = servers_[q.server];
    if (s.dead_until <= now) {
      spdlog::warn("radius: server {} did not answer {} sends; skipped for {} s",
                   (q.acct ? s.acct : s.auth).text, q.sends, cfg_.dead_time_s);
    }
    s.dead_until = now + std::chrono::seconds(cfg_.dead_time_s);
    if (start_attempt(q, now)) {
      bump(c_.failovers);
      return;
    }
    auto owned = take(q.seq);
    finish_timeout(*owned);
    ++completed_;
  }

  void on_datagram(Socket& sock, const uint8_t* buf, size_t n, const sockaddr_storage& from) {
    auto structure = decode({buf, n});
    if (!structure.ok()) {
      bump(c_.drop_malformed);
      return;
    }
    Request* q = sock.slot[buf[1]];
    if (!q) {
      bump(c_.drop_no_request);
      return;
    }
    const ServerState& s = servers_[q->server];
    if (!same_endpoint(q->acct ? s.acct : s.auth, from)) {
      bump(c_.drop_unknown_source);
      return;
    }
    uint8_t code = structure->code;
    bool fits = q->acct
                    ? code == kAccountingResponse
                    : (code == kAccessAccept || code == kAccessReject || code == kAccessChallenge);
    if (!fits) {
      bump(c_.drop_unexpected_code);
      return;
    }
    auto p =
        verify_response({buf, n}, q->authenticator, s.secret, cfg_.require_message_authenticator);
    if (!p.ok()) {
      switch (fault_of(p.status())) {
        case Fault::kBadAuthenticator:
          bump(c_.drop_bad_authenticator);
          break;
        case Fault::kBadMessageAuthenticator:
          bump(c_.drop_bad_message_authenticator);
          break;
        case Fault::kMissingMessageAuthenticator:
          bump(c_.drop_missing_message_authenticator);
          break;
        default:
          bump(c_.drop_malformed);
          break;
      }
      spdlog::debug("radius: reply from {} dropped: {}", (q->acct ? s.acct : s.auth).text,
                    std::string(p.status().message()));
      return;
    }
    auto owned = take(q->seq);
    ++completed_;
    if (owned->acct) {
      bump(c_.accounting_responses);
      if (owned->acct_done) owned->acct_done(true);
      return;
    }
    AccessResult r;
    r.server = s.auth.text;
    for (const auto& a : p->attrs)
      if (a.type == attr::kReplyMessage) r.reply_message += a.value;
    if (code == kAccessAccept) {
      auto au = decode_authorization(*p);
      if (au.ok()) {
        bump(c_.accepts);
        r.outcome = Outcome::kAccept;
        r.auth = std::move(*au);
      } else {
        // Authentic but unusable (e.g. two Filter-Ids): no subscriber from it.
        bump(c_.accepts_unusable);
        r.outcome = Outcome::kReject;
        r.reply_message = cat("unusable Access-Accept: ", std::string(au.status().message()));
        spdlog::warn("radius: Access-Accept from {} refused: {}", s.auth.text,
                     std::string(au.status().message()));
      }
    } else {
      bump(c_.rejects);  // Access-Challenge: xbng has no way to answer one
      r.outcome = Outcome::kReject;
    }
    if (owned->auth_done) owned->auth_done(r);
  }

  // The callbacks run since the last call handed on together
  // (set_after_completions).
  void after_pass(const std::shared_ptr<const std::function<void()>>& after) {
    if (!completed_) return;
    completed_ = 0;
    if (after) (*after)();
  }

  // The replies waiting on s: up to kRecvBatch per system call, 256 per
  // socket and wake-up.
  void read_replies(Socket& s) {
    for (int burst = 0; burst < 256; burst += kRecvBatch) {
      for (int m = 0; m < kRecvBatch; ++m) {
        rx_.iov[m] = {rx_.buf[m].data(), rx_.buf[m].size()};
        rx_.msg[m] = {};
        rx_.msg[m].msg_hdr.msg_iov = &rx_.iov[m];
        rx_.msg[m].msg_hdr.msg_iovlen = 1;
        rx_.msg[m].msg_hdr.msg_name = &rx_.from[m];
        rx_.msg[m].msg_hdr.msg_namelen = sizeof rx_.from[m];
      }
      int got = recvmmsg(s.fd, rx_.msg.data(), kRecvBatch, MSG_DONTWAIT, nullptr);
      if (got <= 0) break;
      for (int m = 0; m < got; ++m)
        on_datagram(s, rx_.buf[m].data(), rx_.msg[m].msg_len, rx_.from[m]);
      if (got < kRecvBatch) break;
    }
  }

  void run() {
    std::vector<pollfd> pfds;
    while (!stop_.load()) {
      auto now = Clock::now();
      // Take new requests.
      std::vector<std::unique_ptr<Request>> fresh;
      std::shared_ptr<const std::function<void()>> after;
      {
        std::lock_guard<std::mutex> l(mu_);
        fresh.swap(pending_);
        outstanding_.fetch_add(fresh.size(), std::memory_order_relaxed);
        after = after_;
      }
      for (auto& q : fresh) {
        q->seq = ++seq_;
        if (q->acct)
          bump(c_.accounting_requests);
        else
          bump(c_.access_requests);
        Request& ref = *q;
        live_.emplace(ref.seq, std::move(q));
        if (!start_attempt(ref, now)) {
          finish_timeout(*take(ref.seq));
          ++completed_;
        }
      }
      // Expired timers (stale entries of requests answered or re-sent are skipped).
      while (!timers_.empty() && timers_.top().first <= now) {
        auto [when, seq] = timers_.top();
        timers_.pop();
        auto it = live_.find(seq);
        if (it == live_.end() || it->second->deadline != when) continue;
        on_timer(*it->second, now);
      }
      flush();
      after_pass(after);
      int timeout = -1;
      if (!timers_.empty()) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timers_.top().first -
                                                                        Clock::now())
                      .count();
        timeout = static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 60000));
      }
      pfds.clear();
      pfds.push_back({wake_, POLLIN, 0});
      for (auto& s : sockets_) pfds.push_back({s->fd, POLLIN, 0});
      int n = poll(pfds.data(), pfds.size(), timeout);
      if (n <= 0) continue;
      if (pfds[0].revents & POLLIN) {
        uint64_t v;
        ssize_t r = read(wake_, &v, sizeof v);
        (void)r;
      }
      for (size_t i = 1; i < pfds.size(); ++i)
        if (pfds[i].revents & POLLIN) read_replies(*sockets_[i - 1]);
      after_pass(after);
    }
    // Shutting down: whatever is outstanding is not delivered.
    std::vector<std::unique_ptr<Request>> left;
    {
      std::lock_guard<std::mutex> l(mu_);
      left.swap(pending_);
    }
    for (auto& [seq, q] : live_) left.push_back(std::move(q));
    live_.clear();
    for (auto& q : left) finish_timeout(*q);
    completed_ += left.size();
    after_pass(after_completions());
  }

  const Config cfg_;
  std::vector<ServerState> servers_;  // I/O thread only (dead_until)
  int wake_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Request>> pending_;       // under mu_
  std::shared_ptr<const std::function<void()>> after_;  // under mu_
  // I/O thread only: callbacks run since the last after_pass().
  size_t completed_ = 0;
  std::atomic<size_t> outstanding_{0};
  Counters c_;
  // I/O thread only.
  static constexpr int kRecvBatch = 32;
  struct RxBatch {
    // One byte beyond the largest packet: a longer datagram is seen as such.
    std::array<std::array<uint8_t, kMaxPacketLen + 1>, kRecvBatch> buf;
    std::array<iovec, kRecvBatch> iov;
    std::array<mmsghdr, kRecvBatch> msg;
    std::array<sockaddr_storage, kRecvBatch> from;
  };
  std::unique_ptr<RxBatch> rx_batch_ = std::make_unique<RxBatch>();
  RxBatch& rx_ = *rx_batch_;
  static constexpr size_t kSendBatch = 64;
  std::vector<Request*> outbox_;  // send() to flush() within one pass
  std::array<iovec, kSendBatch> tx_iov_;
  std::array<mmsghdr, kSendBatch> tx_msg_;
  uint64_t seq_ = 0;
  std::vector<std::unique_ptr<Socket>> sockets_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> live_;
  using Timer = std::pair<Clock::time_point, uint64_t>;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::create(const Config& cfg) {
  if (cfg.servers.empty()) return absl::InvalidArgumentError("no RADIUS server configured");
  if (cfg.timeout_ms == 0) return absl::InvalidArgumentError("RADIUS timeout_ms must be > 0");
  std::vector<ServerState> servers;
  for (const auto& s : cfg.servers) {
    if (s.secret.empty())
      return absl::InvalidArgumentError(
          cat("RADIUS server ", s.address, ": the shared secret is empty"));
    auto a = endpoint(s.address, s.auth_port);
    if (!a.ok()) return a.status();
    auto b = endpoint(s.address, s.acct_port);
    if (!b.ok()) return b.status();
    servers.push_back({*a, *b, s.secret, {}});
  }
  int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) return absl::InternalError(cat("eventfd: ", std::strerror(errno)));
  if (!cfg.require_message_authenticator)
    spdlog::warn(
        "radius: require_message_authenticator = false: Access-Accept/Reject without "
        "Message-Authenticator are accepted (open to the BlastRADIUS forgery, CVE-2024-3596)");
  std::string list;
  for (const auto& s : servers) list += cat(list.empty() ? "" : ", ", s.auth.text);
  spdlog::info("radius: {} server(s) in priority order: {}", servers.size(), list);
  return std::unique_ptr<Client>(new ClientImpl(cfg, std::move(servers), wake));
}

}  // namespace xbng::radius
