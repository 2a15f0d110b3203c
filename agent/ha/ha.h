// High availability: an active/standby group of xbngd nodes serving the
// same subscribers, elected through etcd (docs/fleet.md, "High
// availability").
//
//   /xbng/v1/ha/<group>/leader          the active member, under its lease:
//                                       created only by a transaction that
//                                       requires the key to be absent
//   /xbng/v1/ha/<group>/members/<member> each member's status, under its lease
//   /xbng/v1/ha/<group>/last_takeover   who took over, when and why (no lease)
//
// Never two actives: a member acts active only after its transaction
// created the leader key; the active keeps its lease alive and refreshes the
// data plane's deadline (xbng_port.ha_deadline_ns) to a point before the
// lease could expire, measured from the moment its last successful
// keepalive was sent; when it cannot renew in time it steps down (and its
// data plane, even with the agent dead or frozen, stops at the deadline by
// itself). The lease, hence the leader key, outlives that deadline, so the
// next active is elected only once the old one has stopped.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/net.h"

namespace xbng::agent {

namespace fleet {
class Kv;
class KvConn;
}  // namespace fleet

// An address with its prefix length, as given to an interface ("192.0.2.1/24").
struct InterfaceAddress {
  int family = 0;  // 4 or 6
  uint8_t len = 0;
  std::array<uint8_t, 16> addr{};  // network order; IPv4 in the first 4 bytes
  friend bool operator==(const InterfaceAddress&, const InterfaceAddress&) = default;
};
// A unicast host address and its prefix length of `family` (4 or 6).
std::optional<InterfaceAddress> parse_interface_address(std::string_view s, int family);
std::string format_interface_address(const InterfaceAddress& a);

// The group's virtual MAC when the config gives none: 02:00:5e followed by
// the first three bytes of the FNV-1a hash of the group name (locally
// administered, unicast; the same on every member).
Mac ha_default_virtual_mac(std::string_view group);

struct HaOptions {
  std::string group, member;
  uint32_t priority = 100;
  bool preempt = false;
  uint32_t lease_ttl_s = 2;
  Mac virtual_mac{};
  std::optional<InterfaceAddress> vip4, vip6;
  std::string node;  // this member's fleet node name (shown in status)
  // etcd's client endpoints (HOST:PORT, http(s)://HOST:PORT): probed to
  // tell etcd down entirely from this member cut off (docs/fleet.md).
  std::vector<std::string> etcd_endpoints;
  // How often a member reads the group's keys (standby: how soon it sees
  // the leader key go).
  std::chrono::milliseconds poll{100};
  // Whether this member's maps hold the group's state: the desired
  // subscribers (the fleet's first full read) and the replicated dynamic
  // state. Until then it is not a member to hand over to, and it campaigns
  // only when no synced member can (a member just booted with empty maps
  // would otherwise win a preemption and drop every subscriber's traffic).
  // Null: always synced.
  std::function<bool()> synced;
};

// The group's DHCPv6 server DUID: a DUID-UUID (type 4, RFC 6355) whose
// UUID is the name-based (SHA-1, version 5) UUID of the group name, the
// same on every member, so that a client's Renew names the new active too.
std::vector<uint8_t> ha_group_duid(std::string_view group);

// What an etcd endpoint said to a TCP connection attempt.
enum class EndpointProbe { kRefused, kAccepted, kUnknown };
// Connects to `endpoint` (HOST:PORT, http(s)://HOST:PORT; a numeric host or
// a name) within `timeout`: kRefused when every address of it refused the
// connection (the host answered, nothing listens: etcd is down there).
EndpointProbe probe_endpoint(const std::string& endpoint, std::chrono::milliseconds timeout);

// Keys of a group (docs/fleet.md).
std::string ha_group_prefix(std::string_view group);  // /xbng/v1/ha/<group>/
std::string ha_leader_key(std::string_view group);
std::string ha_member_key(std::string_view group, std::string_view member);
std::string ha_last_takeover_key(std::string_view group);

// What a role change does to the node (the agent implements it).
class HaActions {
 public:
  virtual ~HaActions() = default;
  // Writes the data plane's deadline (CLOCK_MONOTONIC ns; XBNG_HA_STANDBY
  // for a standby) into every port entry.
  virtual void set_deadline(uint64_t ns) = 0;
  // After winning: take the VIPs and announce the gateways (may take a
  // while: paced; must not block the caller).
  virtual void became_active(const std::string& cause) = 0;
  // After stepping down (or at start): no VIP.
  virtual void became_standby(const std::string& cause) = 0;
  // Why this node cannot serve now: "" when every port it forwards through
  // is up, else which is not ("access eth1 has no carrier"). Read on every
  // tick: a few ioctls, no etcd.
  virtual std::string ports_down() { return {}; }
};

struct HaMemberView {
  std::string member, node, role;  // role: "active" or "standby"
  uint32_t priority = 0;
  bool preempt = false;
  bool holding = false;    // stays out of elections for now (it just handed over)
  std::string ports_down;  // "" = every port up; else why it cannot serve
  bool synced = true;      // its maps hold the group's state (absent in the key: true)
};

struct HaStatus {
  std::string group, member, role;  // role of this member: "active" or "standby"
  double role_since = 0;            // unix seconds
  std::string active_member;        // "" = none seen
  double active_since = 0;
  std::string last_takeover_member, last_takeover_cause;
  double last_takeover_at = 0;
  std::vector<HaMemberView> members;
  bool etcd_ok = false;
  std::string last_error;
  uint64_t takeovers = 0, step_downs = 0;  // by this member since its start
  // Takeovers by this member by cause class: "no_active" (none was),
  // "lease_expired" (the active was lost), "stepped_down" (it handed over or
  // could not renew).
  std::map<std::string, uint64_t> takeovers_by_cause;
  // The active kept its role while etcd was down entirely (count of the
  // outages, and whether one is going on).
  uint64_t etcd_down_kept = 0;
  bool etcd_down = false;
  // This member's ports, as last read ("" = every port up).
  std::string ports_down;
  uint64_t port_step_downs = 0;  // times it handed over for a port down
  bool synced = false;           // this member's maps hold the group's state
};

class HaMember {
 public:
  // Starts standby (the data plane's deadline set to XBNG_HA_STANDBY) and
  // campaigns from its own thread.
  HaMember(HaOptions o, std::unique_ptr<fleet::Kv> kv, HaActions* actions);
  ~HaMember();
  HaMember(const HaMember&) = delete;
  HaMember& operator=(const HaMember&) = delete;

  // Hands over on purpose: steps down (if active and another member can
  // take over), then stays out of elections for a while. Waits up to
  // `wait` for another member to become active. Returns "" or why not.
  std::string switchover(const std::string& cause, std::chrono::milliseconds wait);
  // Stops; an active hands over first (SIGTERM).
  void stop();
  HaStatus status() const;
  bool active() const { return active_.load(); }
  // Prometheus exposition lines (xbng_ha_*).
  std::string render_metrics() const;

 private:
  void run();
  struct GroupView;
  void tick();
  bool read_group(const std::shared_ptr<fleet::KvConn>& c, GroupView* g);
  void publish_group(const GroupView& g, bool* requested, std::string* request_cause);
  void tick_active(const GroupView& g, bool requested, const std::string& request_cause);
  void tick_standby(const std::shared_ptr<fleet::KvConn>& c, const GroupView& g, bool requested);
  void campaign(const std::shared_ptr<fleet::KvConn>& c, const GroupView& g);
  // Another live member is standby, synced, not holding, with every port up.
  bool ready_standby(const GroupView& g) const;
  void check_ports();
  void check_synced();
  bool renew(std::chrono::steady_clock::time_point now);
  bool etcd_down_entirely();
  void etcd_failed();
  void step_down(const std::string& cause, bool hold);
  void become_active(const std::string& cause);
  void put_member();
  std::string render_member() const;

  HaOptions o_;
  std::unique_ptr<fleet::Kv> kv_;
  HaActions* actions_;
  std::chrono::milliseconds ttl_, guard_;

  // Loop state (its thread only, status under mu_).
  int64_t lease_ = 0;
  std::chrono::steady_clock::time_point renewed_sent_{};  // send time of the last renewal
  std::chrono::steady_clock::time_point hold_until_{};
  // A standby campaigns only once etcd has answered it for a whole TTL
  // since its last failure (docs/fleet.md, "etcd down entirely").
  std::chrono::steady_clock::time_point etcd_ok_since_{};
  bool etcd_failed_ = true;
  bool member_written_ = false;
  mutable bool written_holding_ = false;  // `holding` in the member key last written
  bool maps_synced_ = false;              // as last read (o_.synced)
  // Ready to take over at once: its maps synced, and etcd has answered it
  // for a whole TTL (until then it would not campaign). `synced` in the
  // member key and the status.
  bool synced_ = false;
  mutable bool written_synced_ = false;     // `synced` in the member key last written
  std::string last_leader_;                 // the leader seen at the last read
  std::string last_leader_note_;            // and its member key's note
  std::string last_takeover_class_;         // the cause class of the last campaign won
  std::string ports_down_;                  // this tick's HaActions::ports_down()
  mutable std::string written_ports_down_;  // `ports_down` in the member key last written
  std::atomic<bool> active_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  HaStatus st_;
  bool stop_ = false;
  bool switchover_requested_ = false;
  std::string switchover_cause_, switchover_result_;
  bool switchover_done_ = false;
  std::thread thread_;
};

}  // namespace xbng::agent
