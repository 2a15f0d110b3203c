#include "ha/ha.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <netdb.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

std::vector<uint8_t> ha_group_duid(std::string_view group) {
  // RFC 4122 name-based UUID, version 5: SHA-1 of a namespace UUID and the
  // name. The namespace is xbng's own (a fixed random UUID): no other
  // generator derives the same UUID from a group name.
  static constexpr uint8_t kNamespace[16] = {0x5b, 0x1e, 0x0c, 0x8a, 0x3f, 0x6d, 0x4e, 0x21,
                                             0x9a, 0x47, 0xc2, 0x10, 0x7e, 0x95, 0xd3, 0x08};
  std::string in(reinterpret_cast<const char*>(kNamespace), sizeof kNamespace);
  in.append(group);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(in.data(), in.size(), md, &len, EVP_sha1(), nullptr);
  std::vector<uint8_t> d(18, 0);
  d[1] = 0x04;  // DUID-UUID
  std::memcpy(d.data() + 2, md, 16);
  d[2 + 6] = static_cast<uint8_t>((d[2 + 6] & 0x0f) | 0x50);  // version 5
  d[2 + 8] = static_cast<uint8_t>((d[2 + 8] & 0x3f) | 0x80);  // RFC 4122 variant
  return d;
}

namespace {

// HOST and PORT of "HOST:PORT", "[V6]:PORT", "http(s)://HOST:PORT".
bool split_endpoint(std::string_view e, std::string* host, std::string* port) {
  for (std::string_view scheme : {"http://", "https://"})
    if (e.substr(0, scheme.size()) == scheme) e.remove_prefix(scheme.size());
  while (!e.empty() && e.back() == '/') e.remove_suffix(1);
  const size_t colon = e.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == e.size()) return false;
  std::string_view h = e.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  *host = std::string(h);
  *port = std::string(e.substr(colon + 1));
  return !host->empty();
}

// A non-blocking connect to one address: 0, or the errno that ended it
// (ETIMEDOUT when `timeout` passed).
int try_connect(const addrinfo* a, std::chrono::milliseconds timeout) {
  int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int err = 0;
  if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int n = poll(&p, 1, static_cast<int>(timeout.count()));
      if (n == 1) {
        socklen_t sl = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl);
      } else {
        err = ETIMEDOUT;
      }
    }
  }
  close(fd);
  return err;
}

}  // namespace

EndpointProbe probe_endpoint(const std::string& endpoint, std::chrono::milliseconds timeout) {
  std::string host, port;
  if (!split_endpoint(endpoint, &host, &port)) return EndpointProbe::kUnknown;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res)
    return EndpointProbe::kUnknown;
  EndpointProbe out = EndpointProbe::kRefused;
  for (const addrinfo* a = res; a; a = a->ai_next) {
    const int err = try_connect(a, timeout);
    if (err == 0) {
      out = EndpointProbe::kAccepted;
      break;
    }
    if (err != ECONNREFUSED) out = EndpointProbe::kUnknown;
  }
  freeaddrinfo(res);
  return out;
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
  j["ports_down"] = written_ports_down_ = ports_down_;
  j["synced"] = written_synced_ = synced_;
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
// every third of the TTL; while etcd is down entirely, a keepalive (and, when
// it fails, a probe) every tick, so that the last moment etcd was seen down,
// which the deadline counts from, is at most a tick before it came back, and
// the lease is renewed as soon as it serves again. True when the lease is
// known alive.
bool HaMember::renew(Clock::time_point now) {
  auto c = kv_->conn();
  const auto sent = Clock::now();
  if (!lease_) {
    int64_t id = 0;
    absl::Status s = c->lease_grant(o_.lease_ttl_s, ttl_ / 3, &id);
    if (!s.ok()) {
      kv_->failed(c, s);
      {
        std::lock_guard l(mu_);
        st_.etcd_ok = false;
        st_.last_error = "lease grant: " + fleet::status_text(s);
      }
      etcd_failed();
      return false;
    }
    lease_ = id;
    renewed_sent_ = sent;
    member_written_ = false;
    return true;
  }
  bool down = false;
  {
    std::lock_guard l(mu_);
    down = st_.etcd_down;
  }
  if (!down && now - renewed_sent_ < ttl_ / 3) return true;
  int64_t left = 0;
  absl::Status s = c->lease_keepalive(lease_, ttl_ / 4, &left);
  if (!s.ok()) {
    kv_->failed(c, s);
    {
      std::lock_guard l(mu_);
      st_.etcd_ok = false;
      st_.last_error = "lease keepalive: " + fleet::status_text(s);
    }
    etcd_failed();
    if (active_) {
      const auto probed = Clock::now();
      if (etcd_down_entirely()) renewed_sent_ = std::max(renewed_sent_, probed);
    }
    return false;
  }
  if (left > 0) {
    std::lock_guard l(mu_);
    if (st_.etcd_down)
      spdlog::warn("ha: group {}: etcd is back: member {} renewed its lease, still active",
                   o_.group, o_.member);
    st_.etcd_down = false;
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

void HaMember::etcd_failed() { etcd_failed_ = true; }

// etcd down entirely, as opposed to this member cut off from it: every
// endpoint refused a TCP connection (its host answered, no etcd listens),
// all of them after `probed` (taken by the caller before this call). Then
// no etcd member was serving at some moment after `probed`, so no leader
// that was serving before it still is: whichever member leads next
// refreshes every lease to a full TTL when it is elected (etcd's lessor
// Promote), after `probed`. The leader key, this member's, cannot expire
// before probed + TTL: the active may keep its role, with its data plane
// deadline counted from `probed` exactly as from a keepalive sent then. A
// timeout, an unreachable host or an unresolvable name is not evidence
// (this member may be the one cut off): the active steps down at its
// deadline as before.
bool HaMember::etcd_down_entirely() {
  if (o_.etcd_endpoints.empty()) return false;
  for (const auto& e : o_.etcd_endpoints)
    if (probe_endpoint(e, std::max(milliseconds(50), ttl_ / 10)) != EndpointProbe::kRefused)
      return false;
  std::lock_guard l(mu_);
  if (!st_.etcd_down) {
    ++st_.etcd_down_kept;
    spdlog::warn(
        "ha: group {}: etcd is down entirely (every endpoint refuses connections): member {} "
        "stays active and goes on forwarding; no member can take over until etcd is back",
        o_.group, o_.member);
  }
  st_.etcd_down = true;
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
    ++st_.takeovers_by_cause[last_takeover_class_];
  }
  spdlog::warn("ha: role change: group {} member {}: standby -> ACTIVE ({})", o_.group, o_.member,
               cause);
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
  if (was)
    spdlog::warn("ha: role change: group {} member {}: active -> STANDBY ({})", o_.group, o_.member,
                 cause);
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
  check_ports();
  check_synced();
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
  if (!member_written_ || written_holding_ != (Clock::now() < hold_until_) ||
      written_ports_down_ != ports_down_ || written_synced_ != synced_)
    put_member();

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
    etcd_failed();
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
      m.ports_down = j.value("ports_down", "");
      m.synced = j.value("synced", true);
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
  if (etcd_failed_) {
    etcd_failed_ = false;
    etcd_ok_since_ = Clock::now();
  }
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
  const bool other = ready_standby(g);
  std::string handover;
  if (requested) {
    handover = request_cause;
  } else if (!ports_down_.empty()) {
    // A member that lost a port hands over to one that has them all; with
    // none ready it stays: serving the ports it has beats serving none.
    if (other) {
      handover = "ports down: " + ports_down_;
      std::lock_guard l(mu_);
      ++st_.port_step_downs;
    }
  } else {
    for (const auto& m : g.members)
      if (m.member != o_.member && m.preempt && m.priority > o_.priority && m.role == "standby" &&
          !m.holding && m.ports_down.empty() && m.synced)
        handover =
            fmt::format("preempted by {} (priority {} > {})", m.member, m.priority, o_.priority);
  }
  if (!handover.empty()) {
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
  // After etcd failed this member (or at start), a whole TTL of etcd
  // answering first: an active that kept its role through an outage of
  // etcd has a data plane deadline at most a TTL after etcd went down, and
  // this member saw etcd back only after that.
  if (Clock::now() - etcd_ok_since_ < ttl_) return;
  // A member with a port down campaigns only when no member with all its
  // ports can.
  if (!ports_down_.empty() && ready_standby(g)) return;
  // So does a member whose maps are still filling.
  if (!synced_ && ready_standby(g)) return;
  // Campaign only when no ready member ranks higher (equal: the first
  // transaction wins).
  for (const auto& m : g.members)
    if (m.member != o_.member && !m.holding && m.role == "standby" && m.ports_down.empty() &&
        m.synced && m.priority > o_.priority)
      return;
  campaign(c, g);
}

bool HaMember::ready_standby(const GroupView& g) const {
  for (const auto& m : g.members)
    if (m.member != o_.member && m.role == "standby" && !m.holding && m.ports_down.empty() &&
        m.synced)
      return true;
  return false;
}

void HaMember::check_synced() {
  const bool maps = !o_.synced || o_.synced();
  if (maps != maps_synced_) {
    if (maps)
      spdlog::info("ha: group {} member {}: synced (its maps hold the group's state)", o_.group,
                   o_.member);
    else
      spdlog::warn("ha: group {} member {}: no longer synced (reading the group's state again)",
                   o_.group, o_.member);
    maps_synced_ = maps;
  }
  // A member handed the role must be able to campaign at once: a preempted
  // or port-down active steps down as soon as it sees this.
  const bool now = maps_synced_ && !etcd_failed_ && Clock::now() - etcd_ok_since_ >= ttl_;
  if (now == synced_) return;
  synced_ = now;
  std::lock_guard l(mu_);
  st_.synced = synced_;
}

void HaMember::check_ports() {
  std::string now = actions_->ports_down();
  if (now == ports_down_) return;
  if (now.empty())
    spdlog::warn("ha: group {} member {}: every port is up again", o_.group, o_.member);
  else
    spdlog::warn("ha: group {} member {}: {} ({})", o_.group, o_.member, now,
                 active_ ? "hands over to a member with every port up, if one is ready"
                         : "campaigns only if no member with every port up can");
  ports_down_ = std::move(now);
  std::lock_guard l(mu_);
  st_.ports_down = ports_down_;
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
    etcd_failed();
    std::lock_guard l(mu_);
    st_.last_error = "campaign: " + fleet::status_text(s);
    return;
  }
  if (!won) return;
  std::string cause;
  if (last_leader_.empty()) {
    cause = "no active member";
    last_takeover_class_ = "no_active";
  } else if (!g.notes.count(last_leader_)) {
    cause = fmt::format("active member {} lost (its lease expired)", last_leader_);
    last_takeover_class_ = "lease_expired";
  } else {
    cause = fmt::format(
        "active member {} stepped down: {}", last_leader_,
        g.notes.at(last_leader_).empty() ? "no reason given" : g.notes.at(last_leader_));
    last_takeover_class_ = "stepped_down";
  }
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

std::string HaMember::render_metrics() const {
  const HaStatus s = status();
  std::string out;
  const std::string labels = fmt::format("group=\"{}\",member=\"{}\"", o_.group, o_.member);
  auto head = [&](const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  head("xbng_ha_active", "gauge", "1 when this member is the group's active, 0 when standby");
  fmt::format_to(std::back_inserter(out), "xbng_ha_active{{{}}} {}\n", labels,
                 s.role == "active" ? 1 : 0);
  head("xbng_ha_role_since_seconds", "gauge", "unix time of this member's last role change");
  fmt::format_to(std::back_inserter(out), "xbng_ha_role_since_seconds{{{}}} {:.3f}\n", labels,
                 s.role_since);
  head("xbng_ha_takeovers_total", "counter",
       "takeovers by this member, by cause (no_active, lease_expired, stepped_down)");
  for (const char* c : {"no_active", "lease_expired", "stepped_down"}) {
    auto it = s.takeovers_by_cause.find(c);
    fmt::format_to(std::back_inserter(out), "xbng_ha_takeovers_total{{{},cause=\"{}\"}} {}\n",
                   labels, c, it == s.takeovers_by_cause.end() ? 0 : it->second);
  }
  head("xbng_ha_last_takeover_seconds", "gauge",
       "unix time of the group's last takeover (any member; 0: none seen)");
  fmt::format_to(std::back_inserter(out), "xbng_ha_last_takeover_seconds{{{}}} {:.3f}\n", labels,
                 s.last_takeover_at);
  head("xbng_ha_step_downs_total", "counter", "times this member stopped being active");
  fmt::format_to(std::back_inserter(out), "xbng_ha_step_downs_total{{{}}} {}\n", labels,
                 s.step_downs);
  head("xbng_ha_etcd_ok", "gauge", "1 when this member's last etcd request succeeded");
  fmt::format_to(std::back_inserter(out), "xbng_ha_etcd_ok{{{}}} {}\n", labels, s.etcd_ok ? 1 : 0);
  head("xbng_ha_ports_up", "gauge",
       "1 when every port of this member is up (0: it hands over or does not campaign)");
  fmt::format_to(std::back_inserter(out), "xbng_ha_ports_up{{{}}} {}\n", labels,
                 s.ports_down.empty() ? 1 : 0);
  head("xbng_ha_synced", "gauge",
       "1 when this member's maps hold the group's state (0: it is not handed over to)");
  fmt::format_to(std::back_inserter(out), "xbng_ha_synced{{{}}} {}\n", labels, s.synced ? 1 : 0);
  head("xbng_ha_port_step_downs_total", "counter",
       "times this member handed over because a port was down");
  fmt::format_to(std::back_inserter(out), "xbng_ha_port_step_downs_total{{{}}} {}\n", labels,
                 s.port_step_downs);
  head("xbng_ha_etcd_down_kept_total", "counter",
       "outages of etcd (down entirely) through which this member stayed active");
  fmt::format_to(std::back_inserter(out), "xbng_ha_etcd_down_kept_total{{{}}} {}\n", labels,
                 s.etcd_down_kept);
  return out;
}

}  // namespace xbng::agent
