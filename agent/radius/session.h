// Sessions from the access side: subscribers created by RADIUS when their
// CPE first asks.
//
// On an access port with `auth = "radius"` the fast path punts the first
// DHCPv4 / DHCPv6 client message or Router Solicitation of an unprovisioned
// (S-VID, C-VID) (XBNG_PORT_F_PUNT_UNKNOWN); the punt dispatcher hands those
// frames here (on_unknown, RX thread). Per key:
//   - no state: one Access-Request is sent and the frame is kept;
//   - asking (a request is outstanding): the frame joins the key's small
//     bounded queue (coalesced: never a second request);
//   - Access-Accept: the attributes become a SubscriberSpec, created through
//     the store's validated path (CreateFn). Then the kept frames are
//     dispatched again, so the DHCP/RA servers answer them as for any
//     provisioned subscriber. A spec the store refuses (overlap, reserved
//     address, capacity, a Filter-Id naming no plan) is a reject;
//   - Access-Reject or no answer: nothing is created; the key is held back
//     for reject_hold_s, and its frames are dropped (counted) until then.
// Every outcome is counted (bringup/punt/counters.h, auth_*). The table is
// bounded (max_keys): keys beyond it are refused and counted, and expired
// holds are swept when it fills.
#pragma once

#include <thread>

#include <condition_variable>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bringup/punt/io.h"
#include "radius/client.h"
#include "store/subscriber.h"

namespace xbng::radius {

using agent::Mac;
using agent::PolicySpec;
using agent::SubKey;
using agent::SubscriberSpec;

// The placeholders of the User-Name template and their values for one key.
struct TemplateVars {
  std::string port;
  uint16_t svlan = 0, cvlan = 0;
  Mac mac{};
  std::string circuit_id, remote_id;  // DHCPv4 option 82 sub-options 1 and 2 (raw)
};
inline constexpr const char* kDefaultUserNameTemplate = "{port}:{svlan}:{cvlan}";
// {port} {svlan} {cvlan} {mac} (aa:bb:cc:dd:ee:ff) {circuit_id} {remote_id};
// the template must have passed check_username_template (config/radius_config.h).
std::string expand_template(std::string_view tmpl, const TemplateVars& v);
// NAS-Port-Id: "{port}:{svlan}.{cvlan}".
std::string nas_port_id(const TemplateVars& v);

// Circuit-ID and Remote-ID of a DHCPv4 frame's option 82, when it has one
// (frame: the punted QinQ frame).
void relay_ids_of(std::span<const uint8_t> frame, std::string* circuit_id, std::string* remote_id);

// Accounting counts of a session (Acct-Input = up, from the CPE;
// Acct-Output = down).
struct AcctCounts {
  uint64_t up_bytes = 0, up_packets = 0, down_bytes = 0, down_packets = 0;
  friend bool operator==(const AcctCounts&, const AcctCounts&) = default;
};

// What RADIUS said about a session beyond the subscriber itself: kept with
// the subscriber (accounting, restarts).
struct SessionData {
  std::string session_id;  // Acct-Session-Id: unique per session
  std::string user_name;
  std::vector<std::string> classes;  // echoed in accounting
  uint64_t start_unix = 0;
  std::optional<uint32_t> session_timeout, idle_timeout, interim_interval;
  std::optional<std::string> filter_id;
  // Accounting: the Start was sent (never a second one, restarts included).
  bool acct_started = false;
  // Accounting in an HA group: what the session's last Start or
  // Interim-Update reported, replicated from the active that sent it; a
  // member that takes the session over reports these plus what its own
  // subscriber counts from then on, so a takeover never makes them go
  // backwards. Zero until another member reported for the session.
  AcctCounts acct_base;
  friend bool operator==(const SessionData&, const SessionData&) = default;
};

// Access-Accept -> subscriber spec: Framed-IP-Address -> ipv4,
// Framed-IPv6-Address -> ipv6, Delegated-IPv6-Prefix and Framed-IPv6-Prefix
// -> prefixes, Filter-Id naming a plan or the WISPr pair -> policy. Error
// text when the Accept cannot be a subscriber (a Filter-Id naming no plan, a
// prefix or address the store would not take, nothing to give out). On a
// port whose DHCP is relayed (`addressed_by_relay`) an Accept may give no
// address at all: it authorizes the key and gives its plan, and the lease
// the ISP's DHCP server hands out through the relay gives the addresses.
std::optional<std::string> spec_from_accept(const SubKey& key, const Authorization& a,
                                            const std::map<std::string, PolicySpec>& plans,
                                            uint32_t max_packet, SubscriberSpec* out,
                                            bool addressed_by_relay = false);

// The burst of a rate given without one (WISPr): the bytes of 100 ms at that
// rate, at least ten maximum-size packets.
uint64_t burst_for(uint64_t rate_bps, uint32_t max_packet);

struct AccessOptions {
  std::string username = kDefaultUserNameTemplate;
  std::string password;  // User-Password (may be empty)
  uint32_t reject_hold_s = 10;
  size_t frames_per_key = 8;  // frames kept while a request is outstanding
  size_t max_keys = 65536;    // keys asking or held back at once
  std::map<std::string, PolicySpec> plans;
  // Access ports whose DHCP is relayed (dhcp = "relay"): their Accepts need
  // not carry an address (spec_from_accept).
  std::set<std::string> relay_ports;
};

class AccessSessions {
 public:
  // Creates the subscriber (validated as a gRPC upsert would be; it must
  // not replace a subscriber provisioned meanwhile) and records its session
  // data. Error status: refused, nothing created.
  using CreateFn = std::function<absl::Status(const SubscriberSpec&, const SessionData&)>;
  // The same for several Accepts at once (one status each, in order): lets
  // the store side make their session records durable with one write.
  using CreateManyFn = std::function<std::vector<absl::Status>(
      const std::vector<std::pair<SubscriberSpec, SessionData>>&)>;
  // Hands a frame to the punt dispatcher again.
  using RedispatchFn = std::function<void(const agent::punt::PuntedFrame&)>;
  // Opens (true) and closes (false) a batch of redispatches on the calling
  // thread: what they send goes out at the close (punt::PuntTx::Batch).
  using BatchFn = std::function<void(bool open)>;
  using PortName = std::function<std::string(uint32_t ifindex)>;
  using MaxPacket = std::function<uint32_t(uint32_t ifindex)>;
  using Clock = std::function<uint64_t()>;      // CLOCK_MONOTONIC ns
  using WallClock = std::function<uint64_t()>;  // unix seconds

  AccessSessions(Client* client, AccessOptions opts, PortName port_name, MaxPacket max_packet,
                 CreateFn create, RedispatchFn redispatch, Clock clock = nullptr,
                 WallClock wall = nullptr);
  ~AccessSessions();
  AccessSessions(const AccessSessions&) = delete;
  AccessSessions& operator=(const AccessSessions&) = delete;

  // Set before set_workers(): the redispatches of a worker's batch of
  // completions send their replies together.
  void set_redispatch_batch(BatchFn batch) { batch_ = std::move(batch); }

  // A punted frame of a key that is not provisioned, on an auth port.
  void on_unknown(const agent::punt::PuntedFrame& f);

  // Runs the completions of Access-Requests (the durable session record,
  // then the subscriber) on `n` threads of their own instead of the RADIUS
  // client's I/O thread, so that the I/O thread never waits for an fsync.
  // Each worker takes every completion queued (up to kMaxBatch) at once and
  // hands their Accepts to `create_many` (when given; else `create` one by
  // one): a storm of Accepts costs one durable write per batch, not one per
  // session. 0 (the default): inline. Call once, before the first request.
  void set_workers(unsigned n, CreateManyFn create_many = nullptr);
  static constexpr size_t kMaxBatch = 512;

  // Keys asking or held back (tests, metrics).
  size_t pending() const;
  bool held(const SubKey& k) const;
  // The request the last new key produced (tests).
  AccessRequest last_request() const;

 private:
  struct Frame {
    agent::punt::PuntedFrame meta;  // meta.frame points into bytes
    std::vector<uint8_t> bytes;
  };
  struct Entry {
    bool asking = false;
    uint64_t hold_until_ns = 0;
    uint64_t generation = 0;
    std::deque<Frame> frames;
  };
  // One answered Access-Request.
  struct Job {
    SubKey key{};
    uint64_t generation = 0;
    AccessRequest req;
    AccessResult result;
  };
  // An answered request (on the client's thread): completed inline, or
  // queued for the workers.
  void answered(Job j);
  void complete(std::vector<Job>& jobs);
  // An Accept's subscriber and session data; false (and *refused set) when
  // it cannot be one, or when the answer was not an Accept (then handled).
  bool prepare(const Job& j, SubscriberSpec* spec, SessionData* d, absl::Status* refused);
  void finish(const Job& j, const absl::Status& st);
  // The same, the kept frames of j added to *out instead of handed back.
  void finish(const Job& j, const absl::Status& st, std::vector<Frame>* out);
  // Hands kept frames back to the dispatcher (redispatch_), within batch_.
  void redispatch(const std::vector<Frame>& frames);
  std::string who(const Job& j) const;
  void hold(const SubKey& k, uint64_t generation);
  void sweep_locked(uint64_t now);

  // The completion callbacks reach the manager through this: null once it
  // is destroyed (its mutex held while one runs).
  struct Alive {
    std::mutex mu;
    AccessSessions* self = nullptr;
  };

  Client* client_;
  AccessOptions opts_;
  PortName port_name_;
  MaxPacket max_packet_;
  CreateFn create_;
  CreateManyFn create_many_;
  RedispatchFn redispatch_;
  BatchFn batch_;
  Clock clock_;
  WallClock wall_;

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> keys_;  // by agent::key_rank
  uint64_t next_generation_ = 1;
  AccessRequest last_request_;
  std::shared_ptr<Alive> alive_;
  // The completion workers (set_workers): one completion per key at a time
  // (a key has one request in flight), in arrival order.
  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::deque<Job> work_;
  bool stopping_ = false;
  // The client wakes a worker after each pass (set_after_completions).
  bool notify_after_pass_ = false;
  std::mutex redispatch_mu_;
  std::vector<std::thread> workers_;
};

}  // namespace xbng::radius
