#include "ha/ha.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "fleet/fleet.h"
#include "fleet/kv.h"
#include "xbng/abi.h"

namespace xbng::agent {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::optional<InterfaceAddress> parse_interface_address(std::string_view s, int family) {
  auto p = parse_prefix(s, family);
  if (!p) return std::nullopt;
  InterfaceAddress a;
  a.family = p->family;
  a.len = p->len;
  a.addr = p->addr;
  if (a.family == 4) {
    uint32_t be;
    std::memcpy(&be, a.addr.data(), 4);
    const uint32_t h = __builtin_bswap32(be);
    if (h == 0 || (h >> 24) == 127 || (h >> 28) >= 14 || a.len == 0) return std::nullopt;
  } else {
    if (a.addr[0] == 0xff || (a.addr[0] == 0xfe && (a.addr[1] & 0xc0) == 0x80) || a.len == 0)
      return std::nullopt;
    bool zero = true;
    for (uint8_t b : a.addr) zero &= b == 0;
    if (zero) return std::nullopt;
  }
  return a;
}

std::string format_interface_address(const InterfaceAddress& a) {
  if (a.family == 4) {
    uint32_t be;
    std::memcpy(&be, a.addr.data(), 4);
    return fmt::format("{}/{}", format_ipv4(be), a.len);
  }
  return fmt::format("{}/{}", format_ipv6(a.addr.data()), a.len);
}

Mac ha_default_virtual_mac(std::string_view group) {
  uint32_t h = 2166136261u;
  for (char c : group) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  return Mac{0x02,
             0x00,
             0x5e,
             static_cast<uint8_t>(h >> 24),
             static_cast<uint8_t>(h >> 16),
             static_cast<uint8_t>(h >> 8)};
}

std::string ha_group_prefix(std::string_view group) {
  return fmt::format("{}ha/{}/", kKeyRoot, group);
}
std::string ha_leader_key(std::string_view group) { return ha_group_prefix(group) + "leader"; }
std::string ha_member_key(std::string_view group, std::string_view member) {
  return fmt::format("{}members/{}", ha_group_prefix(group), member);
}
std::string ha_last_takeover_key(std::string_view group) {
  return ha_group_prefix(group) + "last_takeover";
}

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// steady_clock is CLOCK_MONOTONIC on Linux: the clock of bpf_ktime_get_ns().
uint64_t mono_ns(Clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

nlohmann::json parse_json(const std::string& s) {
  auto j = nlohmann::json::parse(s, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

}  // namespace

HaMember::HaMember(HaOptions o, std::unique_ptr<fleet::Kv> kv, HaActions* actions)
    : o_(std::move(o)), kv_(std::move(kv)), actions_(actions) {
  ttl_ = milliseconds(1000ll * o_.lease_ttl_s);
  // The data plane stops acting active this long before the lease could
  // expire (counted from the send time of the last renewal): room for the
  // clocks of etcd and of this node to disagree, and for the agent to be
  // scheduled late.
  guard_ = std::max(milliseconds(300), ttl_ / 4);
  st_.group = o_.group;
  st_.member = o_.member;
  st_.role = "standby";
  st_.role_since = unix_now();
  actions_->set_deadline(XBNG_HA_STANDBY);
  actions_->became_standby("start");
  spdlog::info(
      "ha: group {} member {} (priority {}, preempt {}, lease {} s, virtual MAC {}): standby, "
      "campaigning through etcd",
      o_.group, o_.member, o_.priority, o_.preempt ? "on" : "off", o_.lease_ttl_s,
      format_mac(o_.virtual_mac.data()));
  thread_ = std::thread([this] { run(); });
}

HaMember::~HaMember() { stop(); }

void HaMember::stop() {
  {
    std::lock_guard l(mu_);
    if (stop_) return;
  }
  if (active_) {
    std::string r = switchover("stop (SIGTERM)", ttl_ * 2);
    if (!r.empty()) spdlog::warn("ha: stop: {}", r);
  }
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (lease_) {
    auto c = kv_->conn();
    (void)c->lease_revoke(lease_, milliseconds(1000));
    lease_ = 0;
  }
}

std::string HaMember::render_member() const {
  nlohmann::json j;
  j["member"] = o_.member;
  j["node"] = o_.node;
  j["priority"] = o_.priority;
  j["preempt"] = o_.preempt;
  j["role"] = active_ ? "active" : "standby";
  j["holding"] = written_holding_ = Clock::now() < hold_until_;
  {
    std::lock_guard l(mu_);
    j["since"] = st_.role_since;
    j["note"] = last_leader_note_;
  }
  return j.dump();
}

void HaMember::put_member() {
  if (!lease_) return;
  auto c = kv_->conn();
  absl::Status s = c->put(ha_member_key(o_.group, o_.member), render_member(), lease_, ttl_ / 3);
  if (!s.ok()) {
    kv_->failed(c, s);
    std::lock_guard l(mu_);
    st_.last_error = "member key: " + fleet::status_text(s);
    return;
  }
  member_written_ = true;
}

// Keeps the lease alive: a new one when there is none, else a keepalive
// every third of the TTL. True when the lease is known alive.
bool HaMember::renew(Clock::time_point now) {
  auto c = kv_->conn();
  const auto sent = Clock::now();
  if (!lease_) {
    int64_t id = 0;
    absl::Status s = c->lease_grant(o_.lease_ttl_s, ttl_ / 3, &id);
    if (!s.ok()) {
      kv_->failed(c, s);
      std::lock_guard l(mu_);
      st_.etcd_ok = false;
      st_.last_error = "lease grant: " + fleet::status_text(s);
      return false;
    }
    lease_ = id;
    renewed_sent_ = sent;
    member_written_ = false;
    return true;
  }
  if (now - renewed_sent_ < ttl_ / 3) return true;
  int64_t left = 0;
  absl::Status s = c->lease_keepalive(lease_, ttl_ / 4, &left);
  if (!s.ok()) {
    kv_->failed(c, s);
    std::lock_guard l(mu_);
    st_.etcd_ok = false;
    st_.last_error = "lease keepalive: " + fleet::status_text(s);
    return false;
  }
  if (left <= 0) {
    spdlog::warn("ha: lease {:x} expired", lease_);
    lease_ = 0;
    member_written_ = false;
    return false;
  }
  renewed_sent_ = sent;
  return true;
}

void HaMember::become_active(const std::string& cause) {
  // The deadline first: the old active's data plane has stopped (its lease,
  // which outlives its deadline, is gone since our transaction succeeded).
  actions_->set_deadline(mono_ns(renewed_sent_ + ttl_ - guard_));
  active_ = true;
  const double now = unix_now();
  {
    std::lock_guard l(mu_);
    st_.role = "active";
    st_.role_since = now;
    st_.active_member = o_.member;
    st_.active_since = now;
    st_.last_takeover_member = o_.member;
    st_.last_takeover_cause = cause;
    st_.last_takeover_at = now;
    ++st_.takeovers;
  }
  spdlog::warn("ha: group {}: member {} is now ACTIVE ({})", o_.group, o_.member, cause);
  nlohmann::json j;
  j["member"] = o_.member;
  j["node"] = o_.node;
  j["at"] = now;
  j["cause"] = cause;
  auto c = kv_->conn();
  if (absl::Status s = c->put(ha_last_takeover_key(o_.group), j.dump(), 0, ttl_ / 3); !s.ok())
    kv_->failed(c, s);
  put_member();
  actions_->became_active(cause);
}

void HaMember::step_down(const std::string& cause, bool hold) {
  actions_->set_deadline(XBNG_HA_STANDBY);
  const bool was = active_.exchange(false);
  if (hold) hold_until_ = Clock::now() + ttl_ * 3;
  {
    std::lock_guard l(mu_);
    st_.role = "standby";
    st_.role_since = unix_now();
    if (was) ++st_.step_downs;
    last_leader_note_ = cause;
  }
  if (was) spdlog::warn("ha: group {}: member {} steps down: {}", o_.group, o_.member, cause);
  // Revoking the lease deletes the leader key at once: the others need not
  // wait for it to expire. The member key moves to a new lease first, with
  // the note saying why (the next active names it as the cause).
  if (lease_) {
    const int64_t old = lease_;
    auto c = kv_->conn();
    int64_t fresh = 0;
    const auto sent = Clock::now();
    if (c->lease_grant(o_.lease_ttl_s, ttl_ / 3, &fresh).ok()) {
      lease_ = fresh;
      renewed_sent_ = sent;
      put_member();
    } else {
      lease_ = 0;
      member_written_ = false;
    }
    if (absl::Status s = c->lease_revoke(old, ttl_ / 3); !s.ok()) kv_->failed(c, s);
  }
  actions_->became_standby(cause);
}

void HaMember::run() {
  while (true) {
    {
      std::unique_lock l(mu_);
      if (stop_) return;
    }
    try {
      tick();
    } catch (const std::exception& e) {
      spdlog::error("ha: {}", e.what());
    }
    std::unique_lock l(mu_);
    cv_.wait_for(l, o_.poll, [this] { return stop_ || switchover_requested_; });
    if (stop_) return;
  }
}

// The group's keys as read in one tick.
struct HaMember::GroupView {
  std::optional<fleet::KeyValue> leader;
  nlohmann::json last_takeover;
  std::vector<HaMemberView> members;
  std::map<std::string, std::string> notes;  // member -> the note in its key
  std::string leader_member;
  double leader_since = 0;
};

void HaMember::tick() {
  const auto now = Clock::now();
  const bool alive = renew(now);
  if (active_) {
    if (now >= renewed_sent_ + ttl_ - guard_) {
      step_down(fmt::format("could not renew the lease in time ({})", st_.last_error), false);
      return;
    }
    actions_->set_deadline(mono_ns(renewed_sent_ + ttl_ - guard_));
  }
  if (!alive) return;
  // Written again when the hold-off after a hand-over ends: the others
  // read `holding` from it.
  if (!member_written_ || written_holding_ != (Clock::now() < hold_until_)) put_member();

  auto c = kv_->conn();
  GroupView g;
  if (!read_group(c, &g)) return;

  std::string request_cause;
  bool requested = false;
  publish_group(g, &requested, &request_cause);

  if (active_) {
    tick_active(g, requested, request_cause);
    return;
  }
  tick_standby(c, g, requested);
}

bool HaMember::read_group(const std::shared_ptr<fleet::KvConn>& c, GroupView* g) {
  fleet::RangeRequest rq;
  rq.key = ha_group_prefix(o_.group);
  rq.range_end = prefix_range_end(rq.key);
  fleet::RangeResponse rs;
  if (absl::Status s = c->range(rq, ttl_ / 4, &rs); !s.ok()) {
    kv_->failed(c, s);
    std::lock_guard l(mu_);
    st_.etcd_ok = false;
    st_.last_error = "read group: " + fleet::status_text(s);
    return false;
  }
  const std::string leader_key = ha_leader_key(o_.group);
  const std::string members_prefix = ha_group_prefix(o_.group) + "members/";
  for (auto& kv : rs.kvs) {
    if (kv.key == leader_key) {
      g->leader = kv;
    } else if (kv.key == ha_last_takeover_key(o_.group)) {
      g->last_takeover = parse_json(kv.value);
    } else if (kv.key.rfind(members_prefix, 0) == 0) {
      auto j = parse_json(kv.value);
      HaMemberView m;
      m.member = kv.key.substr(members_prefix.size());
      m.node = j.value("node", "");
      m.role = j.value("role", "");
      m.priority = j.value("priority", 0u);
      m.preempt = j.value("preempt", false);
      m.holding = j.value("holding", false);
      g->notes[m.member] = j.value("note", "");
      g->members.push_back(std::move(m));
    }
  }
  if (g->leader) {
    auto j = parse_json(g->leader->value);
    g->leader_member = j.value("member", "");
    g->leader_since = j.value("since", 0.0);
  }
  return true;
}

void HaMember::publish_group(const GroupView& g, bool* requested, std::string* request_cause) {
  std::lock_guard l(mu_);
  st_.etcd_ok = true;
  st_.members = g.members;
  st_.active_member = g.leader_member;
  st_.active_since = g.leader_since;
  if (g.last_takeover.contains("member")) {
    st_.last_takeover_member = g.last_takeover.value("member", "");
    st_.last_takeover_cause = g.last_takeover.value("cause", "");
    st_.last_takeover_at = g.last_takeover.value("at", 0.0);
  }
  *requested = switchover_requested_;
  *request_cause = switchover_cause_;
}

void HaMember::tick_active(const GroupView& g, bool requested, const std::string& request_cause) {
  if (!g.leader || g.leader->lease != lease_) {
    step_down("the leader key is no longer ours", false);
    return;
  }
  std::string handover;
  if (requested) {
    handover = request_cause;
  } else {
    for (const auto& m : g.members)
      if (m.member != o_.member && m.preempt && m.priority > o_.priority && m.role == "standby" &&
          !m.holding)
        handover =
            fmt::format("preempted by {} (priority {} > {})", m.member, m.priority, o_.priority);
  }
  if (!handover.empty()) {
    bool other = false;
    for (const auto& m : g.members)
      other |= m.member != o_.member && m.role == "standby" && !m.holding;
    std::lock_guard l(mu_);
    if (!other && requested) {
      switchover_result_ = "no other member is ready to take over";
      switchover_requested_ = false;
      switchover_done_ = true;
      cv_.notify_all();
      return;
    }
  }
  if (!handover.empty()) {
    step_down(handover, true);
    std::lock_guard l(mu_);
    if (requested) {
      switchover_requested_ = false;
      switchover_done_ = true;
      switchover_result_ = "";
      cv_.notify_all();
    }
  }
}

void HaMember::tick_standby(const std::shared_ptr<fleet::KvConn>& c, const GroupView& g,
                            bool requested) {
  if (requested) {
    std::lock_guard l(mu_);
    switchover_requested_ = false;
    switchover_done_ = true;
    switchover_result_ = "this member is not active";
    cv_.notify_all();
  }
  if (g.leader) {
    last_leader_ = g.leader_member;
    return;
  }
  if (Clock::now() < hold_until_) return;
  // Campaign only when no ready member ranks higher (equal: the first
  // transaction wins).
  for (const auto& m : g.members)
    if (m.member != o_.member && !m.holding && m.role == "standby" && m.priority > o_.priority)
      return;
  campaign(c, g);
}

void HaMember::campaign(const std::shared_ptr<fleet::KvConn>& c, const GroupView& g) {
  nlohmann::json j;
  j["member"] = o_.member;
  j["node"] = o_.node;
  j["priority"] = o_.priority;
  j["since"] = unix_now();
  bool won = false;
  if (absl::Status s =
          c->create_if_absent(ha_leader_key(o_.group), j.dump(), lease_, ttl_ / 4, &won);
      !s.ok()) {
    kv_->failed(c, s);
    std::lock_guard l(mu_);
    st_.last_error = "campaign: " + fleet::status_text(s);
    return;
  }
  if (!won) return;
  std::string cause;
  if (last_leader_.empty())
    cause = "no active member";
  else if (!g.notes.count(last_leader_))
    cause = fmt::format("active member {} lost (its lease expired)", last_leader_);
  else
    cause = fmt::format(
        "active member {} stepped down: {}", last_leader_,
        g.notes.at(last_leader_).empty() ? "no reason given" : g.notes.at(last_leader_));
  last_leader_.clear();
  become_active(cause);
}

std::string HaMember::switchover(const std::string& cause, milliseconds wait) {
  if (!active_) return "this member is not active";
  std::unique_lock l(mu_);
  switchover_requested_ = true;
  switchover_done_ = false;
  switchover_cause_ = cause;
  cv_.notify_all();
  if (!cv_.wait_for(l, wait, [this] { return switchover_done_ || stop_; }))
    return "the switchover did not complete in time";
  if (!switchover_result_.empty()) return switchover_result_;
  // Wait for another member to take the leader key (status refreshed by the loop).
  const auto until = Clock::now() + wait;
  while (Clock::now() < until) {
    if (!st_.active_member.empty() && st_.active_member != o_.member) return "";
    l.unlock();
    std::this_thread::sleep_for(milliseconds(20));
    l.lock();
  }
  return "";
}

HaStatus HaMember::status() const {
  std::lock_guard l(mu_);
  return st_;
}

}  // namespace xbng::agent
