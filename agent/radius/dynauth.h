// Dynamic authorization (RFC 5176): CoA-Request and Disconnect-Request from
// the ISP's RADIUS servers, answered with ACK or NAK.
//
// Split in three:
//   - parse_dynauth(): pure, a verified packet in, what it asks for out (the
//     session identification, the changes, or the Error-Cause of a NAK);
//   - DynAuth: the request handler, no sockets and no clock of its own:
//     source check, authenticators, replay window, the retransmission cache,
//     session matching and the changes through a DynAuthBackend, counters.
//     Called from one thread (the server's); counters read from any;
//   - DynAuthServer (dynauth_server.h): the UDP socket and its thread.
//
// Sessions are matched by Acct-Session-Id, User-Name, NAS-Port-Id and
// Framed-IP-Address; every one present must name the same session, and only
// sessions RADIUS created are found. A request that names more than one
// session is refused (508): a change applies to exactly one subscriber.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/sub_key.h"
#include "radius/codec.h"

namespace xbng::radius {

using agent::SubKey;

// Error-Cause values (RFC 5176 3.5) xbng sends.
namespace error_cause {
inline constexpr uint32_t kUnsupportedAttribute = 401;
inline constexpr uint32_t kMissingAttribute = 402;
inline constexpr uint32_t kNasIdentificationMismatch = 403;
inline constexpr uint32_t kInvalidRequest = 404;
inline constexpr uint32_t kUnsupportedService = 405;
inline constexpr uint32_t kInvalidAttributeValue = 407;
inline constexpr uint32_t kSessionContextNotFound = 503;
inline constexpr uint32_t kResourcesUnavailable = 506;
inline constexpr uint32_t kMultipleSessionSelectionUnsupported = 508;
}  // namespace error_cause
// "session_context_not_found" for 503, ...; "error_cause_N" for others.
std::string error_cause_name(uint32_t cause);

// Acct-Terminate-Cause (RFC 2866 5.10) noted for a Disconnect-Request.
inline constexpr uint32_t kTerminateAdminReset = 6;

// What a CoA-Request changes (absent: unchanged).
struct DynAuthChange {
  std::optional<std::string> filter_id;          // a [plans] entry
  std::optional<uint32_t> wispr_up, wispr_down;  // bits/s (vendor 14122, 7/8)
  std::optional<uint32_t> session_timeout;       // seconds from now; 0 = none
  std::optional<uint32_t> idle_timeout;          // seconds; 0 = none
  bool empty() const {
    return !filter_id && !wispr_up && !wispr_down && !session_timeout && !idle_timeout;
  }
};

struct DynAuthRequest {
  uint8_t code = 0;  // kCoaRequest or kDisconnectRequest
  // Session identification.
  std::optional<std::string> session_id, user_name, nas_port_id;
  std::optional<uint32_t> framed_ip;  // network order
  // NAS identification, checked against our own.
  std::optional<std::string> nas_identifier;
  std::optional<uint32_t> nas_ipv4;
  std::optional<agent::Ipv6> nas_ipv6;
  DynAuthChange change;
  std::vector<std::string> proxy_states;  // echoed in the reply, in order
  // Non-zero: the request is refused with this Error-Cause (and `why`).
  uint32_t error_cause = 0;
  std::string why;
};

// A verified CoA- or Disconnect-Request (decode() has checked sizes and
// once-only attributes) -> what it asks. Error status (Fault
// kIllegalRepeat): a Filter-Id or WISPr rate repeated, which makes the
// request ambiguous; it is dropped like any illegal repetition. Attributes
// xbng does not act on give Error-Cause 401, none identifying a session
// 402, a CoA changing nothing 402, Filter-Id with the WISPr pair 404,
// Service-Type Authorize-Only 405.
absl::StatusOr<DynAuthRequest> parse_dynauth(const Packet& p);

// The subscriber side, for DynAuth (api/radius_store.h implements it on the
// store and the session table). Lookups return RADIUS-created sessions only.
class DynAuthBackend {
 public:
  virtual ~DynAuthBackend() = default;
  virtual std::vector<SubKey> by_session_id(std::string_view id) = 0;
  virtual std::vector<SubKey> by_user_name(std::string_view name) = 0;
  virtual std::optional<SubKey> by_nas_port_id(std::string_view id) = 0;
  virtual std::optional<SubKey> by_framed_ip(uint32_t be) = 0;
  // Applies `c` to the session of `k`, whole or not at all. 0, or the
  // Error-Cause of the refusal with `why`.
  virtual uint32_t change(const SubKey& k, const DynAuthChange& c, std::string* why) = 0;
  // Ends the session of `k` (Acct-Terminate-Cause Admin-Reset noted, the
  // subscriber deleted: routes and leases go, accounting sends the Stop).
  virtual uint32_t disconnect(const SubKey& k, std::string* why) = 0;
};

struct DynAuthClient {
  std::string address;  // an IP literal (IPv4, or IPv6)
  std::string secret;   // never logged
};

struct DynAuthOptions {
  std::vector<DynAuthClient> clients;
  // Our NAS identification: a request carrying NAS-Identifier,
  // NAS-IP-Address or NAS-IPv6-Address must name these (403 otherwise). An
  // unset address is not checked.
  std::string nas_identifier = "xbng";
  std::optional<uint32_t> nas_ipv4;
  std::optional<agent::Ipv6> nas_ipv6;
  // Event-Timestamp, when present, must be within this many seconds of our
  // clock (either way), else the request is dropped (RFC 5176 section 5:
  // replay protection).
  uint32_t replay_window_s = 300;
  // Replies kept for retransmissions (and replays) of the same request:
  // at most this many, each for replay_window_s.
  size_t cache_entries = 16384;
};

// Why a datagram got no answer. Codec faults come first, by their Fault
// number (codec.h); then these.
enum class DynAuthDrop {
  kUnknownSource = kFaultCount,  // not a coa_clients address
  kStaleTimestamp,               // Event-Timestamp outside the replay window
  kSendError,                    // the reply could not be sent (server)
  kCount
};
inline constexpr int kDynAuthDropCount = static_cast<int>(DynAuthDrop::kCount);
const char* drop_name(int reason);  // a fault_name() or "unknown_source", ...

struct DynAuthCounters {
  // [0] CoA, [1] Disconnect.
  std::map<std::string, uint64_t> requests[2];  // by outcome: "ack" or error_cause_name
  uint64_t retransmits[2] = {};                 // answered from the cache
  std::map<std::string, uint64_t> drops;        // by drop_name
};

class DynAuth {
 public:
  DynAuth(DynAuthOptions opts, DynAuthBackend* backend);

  // One datagram from `src` (its IP address; IPv4-mapped IPv6 is taken as
  // IPv4) at `now_unix` seconds. The reply to send back to the same source,
  // or nullopt when the datagram is dropped (counted).
  std::optional<Bytes> handle(std::span<const uint8_t> dgram, std::string_view src,
                              uint64_t now_unix);
  void count_drop(int reason);

  DynAuthCounters counters() const;
  size_t cached() const { return cache_.size(); }

 private:
  struct CacheKey {
    size_t client;
    uint8_t id;
    Authenticator auth;
    bool operator==(const CacheKey&) const = default;
  };
  struct CacheKeyHash {
    size_t operator()(const CacheKey& k) const;
  };
  struct Cached {
    Bytes reply;
    uint64_t expires;
  };
  std::optional<size_t> client_of(std::string_view src) const;
  Bytes answer(const Packet& p, const DynAuthRequest& r, const std::string& secret, bool ma,
               int type);
  void expire(uint64_t now);

  DynAuthOptions opts_;
  DynAuthBackend* backend_;
  std::vector<std::array<uint8_t, 16>> client_addrs_;  // IPv4 as ::ffff:a.b.c.d
  std::unordered_map<CacheKey, Cached, CacheKeyHash> cache_;
  std::deque<std::pair<uint64_t, CacheKey>> cache_order_;  // (expires, key), oldest first

  // requests: [type][outcome]; outcomes 0 = ack, else index in kOutcomeCauses + 1.
  static constexpr int kOutcomes = 12;
  std::atomic<uint64_t> requests_[2][kOutcomes] = {};
  std::atomic<uint64_t> retransmits_[2] = {};
  std::atomic<uint64_t> drops_[kDynAuthDropCount] = {};
};

}  // namespace xbng::radius
