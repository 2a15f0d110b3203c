// RADIUS accounting (RFC 2866) of the subscribers RADIUS created, and the
// enforcement of their Session-Timeout and Idle-Timeout.
//
// Per session (a subscriber of origin radius, with its SessionData):
//   - Start when its first family is bound: the first DHCPv4 or DHCPv6
//     lease the bring-up servers bind for it (LeaseTable observer). That
//     the Start went out is kept in the session's record (acct_started),
//     so a restart never sends a second one. A session no lease binds for
//     within `start_grace_s` of its creation (its CPE only sent an RS, its
//     Accept routes prefixes that need no DHCP, or its CPE never finished
//     DHCP) exists in the maps all the same: its Start goes out then, and
//     from then on its interims and its Session-Timeout and Idle-Timeout
//     run as for any session (so a subscriber created by a DISCOVER that
//     never came back still ends on its timers).
//   - Interim-Update every Acct-Interim-Interval (the Accept's, floored at
//     `interim_min_s`; else `interim_interval_s`). Each session's interims
//     lie on a grid of its own, phase = hash(Acct-Session-Id) mod interval
//     (in ticks of `tick_ms`): 1M sessions brought up at once still send
//     evenly spread over the interval (the unsolicited RAs are spread the
//     same way), and the grid is the same after a restart (interims go on
//     where they were). The first interim comes ½..1½ intervals after the
//     Start.
//   - Stop with Acct-Terminate-Cause when the subscriber goes, whoever
//     deletes it: the cause noted in the SessionTable (end_session(),
//     SessionTable::set_end_cause) or Admin-Reset (an admin delete over
//     gRPC/etcd, or a re-provisioning by another source).
//   - Counters from the XDP per-subscriber counters, as `xbngctl sub get`
//     shows them: up (from the CPE) = Acct-Input-*, down = Acct-Output-*,
//     64-bit octets split into -Octets/-Gigawords. What is reported never
//     goes backwards (a reading below the last reported one, e.g. a route
//     that carried downstream bytes removed, is reported as the last).
//     The Stop's counters are read by the store just before it deletes the
//     subscriber (on_removing).
// Timers, read from the SessionTable at every check (a CoA may change them;
// timers_changed() makes the change count at once):
//   - Session-Timeout: the session ends start_unix + Session-Timeout
//     (Acct-Terminate-Cause Session-Timeout);
//   - Idle-Timeout: no packet in either direction for Idle-Timeout seconds
//     (the counters are read every max(1 s, Idle-Timeout/4)): it ends
//     between Idle-Timeout and 1¼ Idle-Timeout after the last packet
//     (Idle-Timeout);
//   - every DHCP lease of a started session gone: released by the CPE
//     (User-Request) or expired (Lost-Service: the CPE stopped renewing).
// Requests no server acknowledged (Client retransmits per the server
// settings first) wait in a bounded queue, kept in `state_file` across
// restarts and retried every `queue_retry_s` (Acct-Delay-Time says how
// late); a newer Interim of a session replaces its queued one, a Stop its
// queued Interim; beyond `queue_max` the oldest is dropped and counted.
//
// Threads: one worker owns the session schedule; every input (store hooks,
// lease observer, end_session, timers_changed) is a small event queued for
// it, so the hooks never block or call back into the store.
#pragma once

#include <absl/container/btree_map.h>
#include <absl/container/btree_set.h>
#include <absl/container/flat_hash_map.h>
#include <absl/container/node_hash_map.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "radius/client.h"
#include "radius/session_table.h"
#include "store/store.h"

namespace xbng::radius {

// Acct-Terminate-Cause (RFC 2866 5.10).
namespace cause {
inline constexpr uint32_t kUserRequest = 1;
inline constexpr uint32_t kLostCarrier = 2;
inline constexpr uint32_t kLostService = 3;
inline constexpr uint32_t kIdleTimeout = 4;
inline constexpr uint32_t kSessionTimeout = 5;
inline constexpr uint32_t kAdminReset = 6;
inline constexpr uint32_t kAdminReboot = 7;
inline constexpr uint32_t kNasRequest = 10;
inline constexpr uint32_t kNasReboot = 11;
}  // namespace cause

// What the store shows of a subscriber when accounting reads it.
struct AcctView {
  std::string nas_port_id;         // "{port}:{svlan}.{cvlan}"
  std::string calling_station_id;  // the MAC, "" when unknown
  std::optional<uint32_t> framed_ip;
  std::optional<Ipv6> framed_ipv6;
  std::vector<Prefix> delegated_v6;
  uint64_t up_bytes = 0, up_packets = 0, down_bytes = 0, down_packets = 0;
};

struct AcctOptions {
  uint32_t interim_interval_s = 300;  // when the Accept has no Acct-Interim-Interval
  uint32_t interim_min_s = 60;        // floor of the Accept's value
  size_t queue_max = 65536;           // undelivered requests kept
  uint32_t queue_retry_s = 10;        // retry period of the queue while a server is down
  size_t queue_in_flight = 64;        // queued requests resent at once
  uint32_t tick_ms = 100;             // the schedule's slot
  uint32_t start_grace_s = 10;        // no lease bound this long after creation: Start anyway
  std::string state_file;             // the queue across restarts; "" = memory only
};

struct AcctCounters {
  uint64_t starts = 0, interims = 0, stops = 0, on_off = 0;  // first sent, by type
  uint64_t acked = 0;        // acknowledged by a server (first try or from the queue)
  uint64_t undelivered = 0;  // no server answered: queued
  uint64_t resent = 0;       // sent again from the queue
  uint64_t dropped = 0;      // queue full: the oldest dropped
  uint64_t replaced = 0;     // a queued Interim replaced by a newer Interim or the Stop
  uint64_t ended_session_timeout = 0, ended_idle_timeout = 0, ended_lease = 0;
  uint64_t queued = 0;    // gauge: waiting in the queue
  uint64_t sessions = 0;  // gauge: sessions scheduled (Start sent)
};

// Acct-Interim-Interval as applied: the Accept's value floored at min_s, else
// the default.
uint32_t effective_interim_s(const SessionData& d, const AcctOptions& o);
// The first interim time (unix ms) on a session's grid at or after not_before_ms.
uint64_t next_on_grid(const std::string& session_id, uint64_t interval_ms, uint64_t tick_ms,
                      uint64_t not_before_ms);
// A subscriber as the store shows it (with counters), on port `port`.
AcctView acct_view_of(const agent::SubscriberView& v, const std::string& port);
// The request for a session (Interim or Stop carry counters and session time).
AccountingRequest make_request(AcctStatus status, const SessionData& d, const AcctView& v,
                               uint64_t now_unix);
// The same, taking the view's strings.
AccountingRequest make_request(AcctStatus status, const SessionData& d, AcctView&& v,
                               uint64_t now_unix);

// The accounting metrics (Prometheus text), with the client's retransmits.
std::string render_acct_metrics(const AcctCounters& c, const CounterSnapshot& client);

class Accounting {
 public:
  struct Hooks {
    // Client::account.
    std::function<void(const AccountingRequest&, std::function<void(bool)>)> send;
    // The subscriber as the store has it, with counters; false: not provisioned.
    std::function<bool(const SubKey&, AcctView*)> view;
    // `view` of many keys at once (found[i] 0: keys[i] is not provisioned),
    // the counters read with a chunk of keys per map and system call; null:
    // `view` each.
    std::function<void(std::span<const SubKey>, std::vector<AcctView>*, std::vector<uint8_t>*)>
        views;
    // The same without reading the counters (a Start carries none: a storm
    // of Starts reads no per-CPU counter map); null: `view`.
    std::function<bool(const SubKey&, AcctView*)> identity;
    // `identity` of many keys at once (found[i] 0: keys[i] is not
    // provisioned), with one map read per chunk of keys: the Starts of a
    // pass. Null: `identity` (or `view`) each.
    std::function<void(std::span<const SubKey>, std::vector<AcctView>*, std::vector<uint8_t>*)>
        identities;
    // Deletes the subscriber through the store (its hooks then run).
    std::function<absl::Status(const SubKey&)> remove;
    // Whether a DHCP lease of either family is bound for k.
    std::function<bool(const SubKey&)> lease_bound;
    std::function<uint64_t()> now_ms;  // unix ms (null: the system clock)
    // HA: whether this member is the group's active (null: always). A
    // standby sends nothing and schedules no session (its sessions are the
    // active's, replicated: no Start, Stop or timer of its own); when it
    // becomes active it takes every session of the table over as a restart
    // adopts them: no second Start, the counters from the session's
    // acct_base on.
    std::function<bool()> active;
    // Told of the counts a Start or an Interim-Update of k reported (HA
    // session replication keeps them as the session's acct_base). Null: none.
    std::function<void(const SubKey&, const AcctCounts&)> reported;
  };
  // `sessions` outlives this.
  Accounting(SessionTable* sessions, AcctOptions opts, Hooks hooks);
  ~Accounting();
  Accounting(const Accounting&) = delete;
  Accounting& operator=(const Accounting&) = delete;

  // Loads the queue (error text when the file cannot be read: it is left
  // for inspection and the queue starts empty) and schedules the sessions
  // whose Start was sent before (a restart that adopted them).
  std::optional<std::string> load_and_adopt();
  void start();  // the worker (tick every tick_ms)
  // Stops the worker after a last pass (events already queued are sent);
  // then flush() once the client is gone (its undelivered requests queued).
  void stop();
  // Writes the queue if it changed (the worker does it at most once a second).
  void flush();

  // Accounting-On (a cold start: no session survives) and Accounting-Off.
  void accounting_on();
  void accounting_off();

  // ---- inputs (any thread, never block) ----
  // LeaseTable observer: a lease of k was bound, released by its CPE or expired.
  enum class LeaseChange { kBound, kReleased, kExpired };
  void on_lease(const SubKey& k, LeaseChange c);
  // The store is about to delete k (its counters read just before).
  void on_removing(const SubKey& k, const AcctView& last);
  // The store's change hook: call before SessionTable::on_subscriber_change
  // (the session's record is read here).
  void on_subscriber_change(const SubKey& k, const SubscriberSpec* now);
  // A CoA changed k's timers: re-read at once.
  void timers_changed(const SubKey& k);
  // The store created RADIUS subscriber k (its change hook): its Start
  // follows its first lease, or start_grace_s from now without one.
  void on_created(const SubKey& k);

  // Ends a RADIUS session with `acct_terminate_cause` (cause::*): notes the
  // cause, then deletes the subscriber through the store; the Stop follows
  // from the deletion. NOT_FOUND when k is not a RADIUS session.
  absl::Status end_session(const SubKey& k, uint32_t acct_terminate_cause);

  // One pass of the worker at hooks.now_ms() (tests drive it directly).
  void tick();
  AcctCounters counters() const;
  // The queue, oldest first (tests).
  std::vector<AccountingRequest> queued() const;

 private:
  // Small: 1M sessions bound at once queue 1M of them.
  struct Event {
    enum Kind { kLeaseBound, kLeaseGone, kEnded, kTimers, kCreated } kind;
    SubKey key{};
    uint32_t cause = 0;  // kLeaseGone: the cause; kEnded: Acct-Terminate-Cause
    struct Ended {
      SessionData data;              // the record as it was
      std::optional<AcctView> last;  // counters read before the delete
    };
    std::unique_ptr<Ended> ended;  // kEnded
  };
  struct Sess {
    uint64_t due_ms = 0;  // its place in wheel_
    uint64_t next_interim_ms = 0;
    uint64_t interval_ms = 0;
    uint64_t last_activity_ms = 0;
    uint64_t last_packets = 0;  // up + down at the last read
    uint64_t up_bytes = 0, up_packets = 0, down_bytes = 0, down_packets = 0;  // last reported
    // HA: the subscriber's counters when this member took the session over
    // (what it forwarded in an earlier active period is in acct_base).
    AcctCounts own0;
  };
  // HA, a standby: the counters of each session it accounted when it
  // stepped down (its data plane counts nothing while standby): they are
  // in the acct_base of the next active's reports, so this member counts
  // only above them when it takes the session over again. A session that
  // ends (or is created again) meanwhile drops its entry.
  absl::flat_hash_map<uint64_t, AcctCounts> frozen_;
  struct Queued {
    AccountingRequest req;
    uint64_t event_unix = 0;  // when it was first due (Acct-Delay-Time)
  };

  uint64_t now_ms() const;
  void process(Event& e, uint64_t now);
  void prepare_starts(const std::vector<Event>& events);
  void start_session(const SubKey& k, uint64_t now);
  void adopt_session(const SubKey& k, const SessionData& d, uint64_t now);
  // Every session of the table: started ones go on, the others start after
  // the grace. Returns how many go on.
  size_t adopt_all(uint64_t now);
  // This member is a standby now: no session of its own any more (their
  // counters kept in frozen_).
  void drop_sessions();
  // A standby's inputs: only sessions ending or created again matter (frozen_).
  void standby_events(const std::vector<Event>& events);
  // Tells hooks.reported what s reported last.
  void tell_reported(const SubKey& k, const Sess& s) const;
  // Checks timers and sends a due interim; schedules the next wake-up.
  void wake(uint64_t rank, uint64_t now);
  // wake() of the sessions due at once, their views read together (hooks.views).
  void wake_many(const std::vector<uint64_t>& due, uint64_t now);
  // wake() with the view read already (its strings taken), the record read
  // in place; false when the session is to end or is gone (wake() then
  // does it, reading again).
  bool wake_in_place(uint64_t rank, uint64_t now, AcctView* v);
  // What schedule() needs of a record.
  struct Timers {
    uint64_t start_unix = 0;
    std::optional<uint32_t> session_timeout, idle_timeout;
  };
  static Timers timers_of(const SessionData& d);
  void schedule(uint64_t rank, Sess& s, const SessionData& d, uint64_t now);
  void schedule(uint64_t rank, Sess& s, const Timers& t, uint64_t now);
  void unschedule(uint64_t rank);
  // Raises what is reported to the view's counters (never down).
  void report(Sess& s, AcctView* v);
  void send(AccountingRequest r, uint64_t event_unix, bool from_queue);
  void enqueue_locked(Queued q);
  void retry_queue(uint64_t now);
  bool write_queue();

  SessionTable* sessions_;
  AcctOptions opts_;
  Hooks hooks_;

  // Inputs for the worker.
  std::mutex in_mu_;
  std::vector<Event> inbox_;
  absl::flat_hash_map<uint64_t, AcctView> last_views_;  // on_removing → on_subscriber_change

  // The worker's own state (the worker, or tick() in tests).
  // Nodes: a flat table of 80-byte slots would hold 2M of them at 1M sessions.
  absl::node_hash_map<uint64_t, Sess> sess_;              // by key_rank
  absl::btree_set<std::pair<uint64_t, uint64_t>> wheel_;  // (due_ms, rank)
  // Sessions created and not started yet: (when they start without a
  // lease, rank) -> key.
  absl::btree_map<std::pair<uint64_t, uint64_t>, SubKey> start_due_;
  // This pass's Starts, noted durably by prepare_starts: the record and the view.
  absl::flat_hash_map<uint64_t, std::pair<SessionData, AcctView>> starting_;
  uint64_t next_flush_ms_ = 0;
  bool was_active_ = true;  // hooks.active at the last pass

  // The queue (also touched by the client's completions).
  mutable std::mutex q_mu_;
  std::list<Queued> queue_;
  std::unordered_map<std::string, std::list<Queued>::iterator> queued_interims_;
  size_t in_flight_ = 0;  // queued requests being resent
  uint64_t next_retry_ms_ = 0;
  bool q_dirty_ = false;

  mutable std::mutex c_mu_;
  AcctCounters c_;

  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace xbng::radius
