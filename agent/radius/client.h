// RADIUS client (RFC 2865 authentication, RFC 2866 accounting): non-blocking,
// one I/O thread for every outstanding request. Requests are queued from any
// thread; the completion callbacks run on the I/O thread and must not block
// (except a request refused because max_outstanding are already queued: its
// callback runs at once on the caller's thread). Destroying the client
// answers whatever is still outstanding as timeout / not delivered.
// Acct-Delay-Time is sent as given and not raised on retransmission (the
// packet, identifier and authenticator stay the same for one server).
//
// Servers are tried in priority order. A request is retransmitted after
// timeout_ms, `retries` times, then moves to the next server; a server that
// let a request time out entirely is skipped for dead_time_s (unless every
// server is dead, then the first is tried again). Replies that fail the
// Response Authenticator or Message-Authenticator check are dropped and
// counted, and the request keeps waiting for a valid reply.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/net.h"

namespace xbng::radius {

using Ipv6 = agent::Ipv6;
using Prefix = agent::Prefix;

struct Server {
  std::string address;  // IPv4 or IPv6 literal
  uint16_t auth_port = 1812;
  uint16_t acct_port = 1813;
  std::string secret;  // the shared secret itself (never logged)
};

struct Config {
  std::vector<Server> servers;  // priority order; at least one
  std::string nas_identifier = "xbng";
  std::optional<uint32_t> nas_ipv4;  // NAS-IP-Address, network order
  std::optional<Ipv6> nas_ipv6;      // NAS-IPv6-Address
  uint32_t timeout_ms = 1000;
  uint32_t retries = 3;  // retransmissions to one server before the next
  uint32_t dead_time_s = 30;
  bool require_message_authenticator = true;
  // Source addresses of the client sockets ("" = any of the server's family).
  std::string source_ipv4, source_ipv6;
  // Upper bound of requests waiting or in flight; more are answered at once
  // (kTimeout / not delivered) and counted as queue_full.
  size_t max_outstanding = 65536;
};

// Decoded attributes the session flow needs (Access-Accept), plus the raw list.
struct Authorization {
  std::optional<uint32_t> framed_ip;                     // network order (attr 8)
  std::optional<Ipv6> framed_ipv6;                       // 168
  std::vector<Prefix> delegated_v6;                      // 123
  std::vector<Prefix> framed_v6_prefix;                  // 97
  std::vector<std::string> framed_routes;                // 22 (raw text)
  std::vector<std::string> framed_v6_routes;             // 99 (raw text)
  std::optional<uint32_t> session_timeout;               // 27
  std::optional<uint32_t> idle_timeout;                  // 28
  std::optional<uint32_t> interim_interval;              // 85
  std::vector<std::string> classes;                      // 25 (binary strings)
  std::optional<std::string> filter_id;                  // 11
  std::optional<uint64_t> wispr_up_bps, wispr_down_bps;  // vendor 14122 attrs 7/8
  // Every attribute of the reply as received: (type, value); Vendor-Specific
  // kept whole (type 26, value starting with the vendor id).
  std::vector<std::pair<uint8_t, std::string>> raw;
};

struct AccessRequest {
  std::string user_name, password;
  std::string nas_port_id;            // "{port}:{svlan}.{cvlan}"
  std::string calling_station_id;     // the MAC
  std::string circuit_id, remote_id;  // ADSL-Forum attributes when non-empty
};

enum class Outcome { kAccept, kReject, kTimeout };

struct AccessResult {
  Outcome outcome = Outcome::kTimeout;
  Authorization auth;         // filled on kAccept
  std::string server;         // "ADDR:PORT" of the server that answered
  std::string reply_message;  // Reply-Message (18), joined
};

// Acct-Status-Type (40).
enum class AcctStatus : uint32_t {
  kStart = 1,
  kStop = 2,
  kInterimUpdate = 3,
  kAccountingOn = 7,
  kAccountingOff = 8
};

struct AccountingRequest {
  AcctStatus status = AcctStatus::kStart;
  std::string session_id;  // Acct-Session-Id (44)
  std::string user_name;
  std::string nas_port_id, calling_station_id;
  std::optional<uint32_t> framed_ip;  // network order
  std::optional<Ipv6> framed_ipv6;
  std::vector<Prefix> delegated_v6;
  std::vector<std::string> classes;              // echoed Class attributes
  uint64_t input_octets = 0, output_octets = 0;  // split into -Octets/-Gigawords
  uint64_t input_packets = 0, output_packets = 0;
  uint32_t session_time = 0;                // Acct-Session-Time, seconds
  std::optional<uint32_t> terminate_cause;  // Acct-Terminate-Cause (49), Stop only
  uint32_t delay_time = 0;                  // Acct-Delay-Time (41) when first sent
  std::optional<uint32_t> event_timestamp;  // Event-Timestamp (55), Unix seconds
};

struct CounterSnapshot {
  uint64_t access_requests = 0;  // Access-Requests first sent
  uint64_t accepts = 0, rejects = 0, auth_timeouts = 0;
  uint64_t accepts_unusable = 0;  // authentic Access-Accept the dictionary refused (a reject)
  uint64_t accounting_requests = 0, accounting_responses = 0, accounting_timeouts = 0;
  uint64_t retransmits = 0;
  uint64_t failovers = 0;  // a request moved to the next server
  // Replies dropped, by reason.
  uint64_t drop_malformed = 0;                      // the codec refused the packet
  uint64_t drop_unknown_source = 0;                 // not from the server the request went to
  uint64_t drop_no_request = 0;                     // no outstanding request with that identifier
  uint64_t drop_bad_authenticator = 0;              // wrong Response Authenticator
  uint64_t drop_bad_message_authenticator = 0;      // Message-Authenticator wrong
  uint64_t drop_missing_message_authenticator = 0;  // absent while required
  uint64_t drop_unexpected_code = 0;  // e.g. an Access-Accept to an Accounting-Request
  uint64_t queue_full = 0;
  uint64_t send_errors = 0;
  uint64_t sockets = 0;  // source sockets open (one per 256 outstanding, per family)
};

struct Attribute;
// The attributes of the requests as sent (User-Password still in plain text;
// the codec hides it and adds Message-Authenticator). Exposed for the tests.
std::vector<Attribute> access_request_attributes(const Config& cfg, const AccessRequest& r);
std::vector<Attribute> accounting_attributes(const Config& cfg, const AccountingRequest& r);

class Client {
 public:
  // Opens no socket yet for servers of a family never used; fails on a bad
  // server address or an empty server list. Starts the I/O thread.
  static absl::StatusOr<std::unique_ptr<Client>> create(const Config& cfg);
  virtual ~Client() = default;

  // Queues one Access-Request (with Message-Authenticator). `done` runs once,
  // on the I/O thread.
  virtual void authorize(const AccessRequest& r, std::function<void(const AccessResult&)> done) = 0;
  // Queues one Accounting-Request; `done(true)` once a valid
  // Accounting-Response arrived, `done(false)` when no server answered.
  virtual void account(const AccountingRequest& r, std::function<void(bool delivered)> done) = 0;

  virtual CounterSnapshot counters() const = 0;

  // Calls `f` after each run of `done` callbacks, on the thread that ran
  // them (the I/O thread at the end of a pass over new requests, timers and
  // replies; the caller when a request is refused at once), so that a
  // consumer may gather the completions of a pass and hand them on in one
  // go. Set once, before the first request. False when this client makes
  // no such call (the consumer then hands each completion on by itself).
  virtual bool set_after_completions(std::function<void()> f) {
    (void)f;
    return false;
  }
};

}  // namespace xbng::radius
