#include "relay/relay6.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <ctime>
#include <utility>

#include "bringup/punt/counters.h"

namespace xbng::agent::relay {

namespace {

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The engine's own counter (tests read it) and the agent reason it is
// exported as (GetStats, Prometheus).
void bump(std::atomic<uint64_t>& c, AgentReason r) {
  ++c;
  count(r);
}

constexpr uint8_t kSolicit = 1, kConfirm = 4, kRebind = 6, kReply = 7, kRelease = 8, kDecline = 9,
                  kInformationRequest = 11;
constexpr uint16_t kOptServerId = 2;

// Whether a client message (already checked by relay_forward) carries a
// top-level option `code`.
bool has_option(std::span<const uint8_t> m, uint16_t code) {
  for (size_t off = 4; off + 4 <= m.size();) {
    const uint16_t c = static_cast<uint16_t>(m[off] << 8 | m[off + 1]);
    const size_t len = static_cast<size_t>(m[off + 2] << 8 | m[off + 3]);
    if (c == code) return true;
    off += 4 + len;
  }
  return false;
}

uint32_t xid_of(std::span<const uint8_t> m) {
  return (uint32_t{m[1]} << 16) | (uint32_t{m[2]} << 8) | m[3];
}

// The info lines of a server's state change (learned, up again) are made
// under mu_ and written after it: a log write that blocks (a loaded disk)
// must not hold the lock the punt thread and the socket's thread take for
// every message.
thread_local std::vector<std::string> t_later;

void write_later() {
  for (const auto& line : t_later) spdlog::info("{}", line);
  t_later.clear();
}

}  // namespace

Relay6::Relay6(Relay6Options opts, std::vector<RelayPort6> ports, Sessions6* sessions,
               ToClient6 to_client, ToServer6 to_server, Clock clock)
    : opts_(std::move(opts)),
      sessions_(sessions),
      to_client_(std::move(to_client)),
      to_server_(std::move(to_server)),
      clock_(clock ? std::move(clock) : Clock(monotonic_ns)) {
  if (opts_.servers.size() > kMaxServers6) opts_.servers.resize(kMaxServers6);
  multicast_ = opts_.servers.size() == 1 && is_dhcp_group(opts_.servers[0]);
  for (auto& p : ports) {
    port_by_name_[p.name] = p.ifindex;
    ports_[p.ifindex] = std::move(p);
  }
  if (!multicast_)
    for (const auto& a : opts_.servers) {
      ServerState6 st;
      st.address = a;
      servers_.push_back(st);
    }
}

int Relay6::server_index_locked(const Ipv6& a) const {
  for (size_t i = 0; i < servers_.size(); ++i)
    if (servers_[i].address == a) return static_cast<int>(i);
  return -1;
}

int Relay6::learn_locked(const Ipv6& a) {
  const int i = server_index_locked(a);
  if (i >= 0 || !multicast_ || servers_.size() >= kMaxServers6) return i;
  ServerState6 st;
  st.address = a;
  st.sent = 1;  // the message it answers
  servers_.push_back(st);
  t_later.push_back(fmt::format("relay6: server {} answers the Relay-Forwards to {}",
                                format_ipv6(a.data()), format_ipv6(opts_.servers[0].data())));
  return static_cast<int>(servers_.size() - 1);
}

// The servers expected to answer this client message: every server that
// is up when any of them may answer, none when it names one.
uint32_t Relay6::expected_locked(std::span<const uint8_t> payload) const {
  const uint8_t type = payload[0];
  const bool open = type == kSolicit || type == kRebind || type == kConfirm ||
                    (type == kInformationRequest && !has_option(payload, kOptServerId));
  if (!open) return 0;
  uint32_t m = 0;
  for (size_t i = 0; i < servers_.size(); ++i)
    if (servers_[i].up) m |= 1u << i;
  return m;
}

// Remembers the exchange of k; a retransmission (same transaction id and
// type) keeps its first send's time and answers.
void Relay6::record_locked(const SubKey& k, const Mac& mac, const Ipv6& src,
                           std::span<const uint8_t> payload, uint64_t now,
                           std::vector<Ipv6>* went_down) {
  const uint64_t r = key_rank(k);
  auto it = exchanges_.find(r);
  if (it == exchanges_.end() && exchanges_.size() >= opts_.max_exchanges) return;
  Exchange& e = exchanges_[r];
  const uint8_t type = payload[0];
  const uint32_t xid = type == 12 ? 0 : xid_of(payload);  // a nested Relay-Forward has none
  const bool known = it != exchanges_.end();
  e.mac = mac;
  e.client = src;
  if (known && e.cur.xid == xid && e.type == type) return;  // a retransmission
  if (known && !e.cur.judged) {
    if (!e.prev.judged) judge_locked(e.prev, went_down);
    e.prev = e.cur;
  }
  e.type = type;
  e.cur = Wait{xid, now, expected_locked(payload), 0, false};
  to_judge_.emplace_back(now, r);
  to_expire_.emplace_back(now, r);
}

const RelayPort6* Relay6::port(uint32_t ifindex) const {
  auto it = ports_.find(ifindex);
  return it == ports_.end() ? nullptr : &it->second;
}

void Relay6::on_client(const SubKey& k, const Mac& mac, const Ipv6& src,
                       std::span<const uint8_t> payload) {
  const RelayPort6* p = port(k.ifindex);
  if (!p) {
    bump(counters_.client_not_relay_port, AgentReason::kRELAY6_NOT_RELAY_PORT);
    return;
  }
  TemplateVars tv;
  tv.port = p->name;
  tv.svlan = k.outer_vid;
  tv.cvlan = k.inner_vid;
  tv.mac = mac;
  Forward6Params fp;
  fp.link_address = p->gateway;
  fp.peer_address = src;
  fp.interface_id = expand(opts_.circuit_id, tv);
  fp.enterprise = opts_.enterprise;
  fp.remote_id = opts_.remote_id.empty() ? std::string() : expand(opts_.remote_id, tv);
  Relay6Error err;
  auto fw = relay_forward(payload, fp, &err);
  if (!fw) {
    if (err == Relay6Error::kHopLimit)
      bump(counters_.client_hop_limit, AgentReason::kRELAY6_HOP_LIMIT);
    else
      bump(counters_.client_malformed, AgentReason::kRELAY6_CLIENT_MALFORMED);
    return;
  }
  const uint8_t type = payload[0];
  if (type == kRelease || type == kDecline) {
    bump(counters_.ended, AgentReason::kRELAY6_ENDED);
    sessions_->ended6(k, type == kRelease ? "release" : "decline");
  }
  // A server marked down is logged after the lock: a log write that blocks
  // (a loaded disk) must not hold the relay socket's thread, which takes mu_
  // for every answer.
  std::vector<Ipv6> went_down;
  {
    std::lock_guard<std::mutex> lk(mu_);
    record_locked(k, mac, src, payload, clock_(), &went_down);
  }
  for (const auto& a : went_down)
    spdlog::warn("relay6: server {} left {} messages in a row unanswered: marked down",
                 format_ipv6(a.data()), opts_.misses_down);
  // Unicast: a bit per server sent to. Multicast: one send to the group
  // reaches every server that listens there.
  uint32_t sent = 0;
  for (size_t i = 0; i < opts_.servers.size(); ++i) {
    if (to_server_(opts_.servers[i], *fw)) {
      sent |= multicast_ ? ~0u : 1u << i;
      bump(counters_.forwarded, AgentReason::kRELAY6_FORWARDED);
    } else {
      bump(counters_.send_failed, AgentReason::kRELAY6_SEND_ERROR);
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < servers_.size(); ++i)
    if (sent & (1u << i)) ++servers_[i].sent;
}

// An answer of server `si` to a transaction: the server is up.
void Relay6::answered_locked(int si, Wait& w) {
  ServerState6& s = servers_[static_cast<size_t>(si)];
  if (!s.up)
    t_later.push_back(
        fmt::format("relay6: server {} answers again: up", format_ipv6(s.address.data())));
  s.up = true;
  s.misses = 0;
  ++s.answered;
  w.answered |= 1u << si;
}

// Matches a Relay-Reply of server `src` to k's exchange and records the
// answer (multicast: a server answering for the first time is learned);
// false when it answers no current transaction (a late answer to the
// previous one still counts for the server).
bool Relay6::match_locked(const SubKey& k, const Ipv6& src, const RelayReply6& r, Exchange* out) {
  auto it = exchanges_.find(key_rank(k));
  if (it == exchanges_.end() || it->second.client != r.peer_address) return false;
  Exchange& e = it->second;
  const uint32_t xid = xid_of(r.message);
  if (e.cur.xid != xid) {
    if (e.prev.sent_ns && e.prev.xid == xid)
      if (const int si = learn_locked(src); si >= 0) answered_locked(si, e.prev);
    return false;
  }
  if (const int si = learn_locked(src); si >= 0) answered_locked(si, e.cur);
  *out = e;
  return true;
}

void Relay6::on_server(const Ipv6& src, uint16_t sport, std::span<const uint8_t> payload,
                       uint32_t ifindex) {
  // Unicast: from a configured server. Multicast: from any address, by
  // the uplink.
  bool known = sport == 547;
  if (known && multicast_) {
    known = !opts_.uplink_ifindex || ifindex == opts_.uplink_ifindex;
  } else if (known) {
    known = false;
    for (const auto& a : opts_.servers) known = known || a == src;
  }
  if (!known) {
    bump(counters_.reply_unknown_server, AgentReason::kRELAY6_REPLY_UNKNOWN_SERVER);
    return;
  }
  Relay6Error err;
  auto r = parse_relay_reply(payload, &err);
  if (!r || r->message.size() < 4) {
    bump(counters_.reply_malformed, AgentReason::kRELAY6_REPLY_MALFORMED);
    return;
  }
  TemplateVars tv;
  if (!match_template(opts_.circuit_id, r->interface_id, &tv)) {
    bump(counters_.reply_bad_interface_id, AgentReason::kRELAY6_REPLY_BAD_INTERFACE_ID);
    return;
  }
  auto pit = port_by_name_.find(tv.port);
  if (pit == port_by_name_.end()) {
    bump(counters_.reply_bad_interface_id, AgentReason::kRELAY6_REPLY_BAD_INTERFACE_ID);
    return;
  }
  SubKey k{};
  k.ifindex = pit->second;
  k.outer_vid = tv.svlan;
  k.inner_vid = tv.cvlan;
  Exchange e;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!match_locked(k, src, *r, &e)) {
      bump(counters_.reply_unknown_client, AgentReason::kRELAY6_REPLY_UNKNOWN_CLIENT);
      write_later();
      return;
    }
  }
  write_later();
  if (r->message_type == kReply) {
    auto l = parse_reply_leases(r->message);
    if (!l) {
      bump(counters_.reply_malformed, AgentReason::kRELAY6_REPLY_MALFORMED);
      return;
    }
    Reply6Leases live;
    bool any = false;
    for (const auto& a : l->addresses) {
      any = true;
      if (a.valid) live.addresses.push_back(a);
    }
    for (const auto& p : l->prefixes) {
      any = true;
      if (p.valid) live.prefixes.push_back(p);
    }
    if (!live.addresses.empty() || !live.prefixes.empty()) {
      if (absl::Status st = sessions_->bound6(k, e.mac, live, src); !st.ok()) {
        bump(counters_.reply_refused, AgentReason::kRELAY6_REPLY_REFUSED);
        spdlog::warn("relay6: {}/{}/{}: REPLY of server {} not forwarded: {}", k.ifindex,
                     k.outer_vid, k.inner_vid, format_ipv6(src.data()), std::string(st.message()));
        return;
      }
      bump(counters_.bound, AgentReason::kRELAY6_BOUND);
    } else if (any && e.type != kRelease && e.type != kDecline) {
      bump(counters_.ended, AgentReason::kRELAY6_ENDED);
      sessions_->ended6(k, "lifetime 0");
    }
  }
  bump(counters_.replies, AgentReason::kRELAY6_REPLIED);
  if (!to_client_(ports_.at(k.ifindex), k, e.mac, e.client, r->message))
    bump(counters_.send_failed, AgentReason::kRELAY6_SEND_ERROR);
}

// Counts the misses of an exchange whose answers are due.
void Relay6::judge_locked(Wait& w, std::vector<Ipv6>* went_down) {
  w.judged = true;
  const uint32_t missed = w.expect & ~w.answered;
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (!(missed & (1u << i))) continue;
    ServerState6& s = servers_[i];
    ++s.misses_total;
    bump(counters_.server_misses, AgentReason::kRELAY6_SERVER_MISS);
    if (++s.misses >= opts_.misses_down && s.up) {
      s.up = false;
      ++s.downs;
      bump(counters_.server_down, AgentReason::kRELAY6_SERVER_DOWN);
      went_down->push_back(s.address);
    }
  }
}

bool Relay6::judge_due_locked(uint64_t now, size_t budget, std::vector<Ipv6>* went_down) {
  const uint64_t timeout = uint64_t{opts_.answer_timeout_ms} * 1000000ull;
  for (; budget && !to_judge_.empty() && now - to_judge_.front().first >= timeout; --budget) {
    const auto [sent, rank] = to_judge_.front();
    to_judge_.pop_front();
    auto it = exchanges_.find(rank);
    if (it == exchanges_.end()) continue;
    for (Wait* w : {&it->second.prev, &it->second.cur})
      if (!w->judged && w->sent_ns == sent) judge_locked(*w, went_down);
  }
  return !to_judge_.empty() && now - to_judge_.front().first >= timeout;
}

bool Relay6::expire_locked(uint64_t now, size_t budget) {
  const uint64_t ttl = uint64_t{opts_.exchange_ttl_s} * 1000000000ull;
  for (; budget && !to_expire_.empty() && now - to_expire_.front().first > ttl; --budget) {
    const auto [sent, rank] = to_expire_.front();
    to_expire_.pop_front();
    auto it = exchanges_.find(rank);
    if (it != exchanges_.end() && it->second.cur.sent_ns == sent) exchanges_.erase(it);
  }
  return !to_expire_.empty() && now - to_expire_.front().first > ttl;
}

// What came due since the last tick, 256 entries per hold of mu_ (the punt
// thread's messages get the lock in between).
void Relay6::tick() {
  const uint64_t now = clock_();
  std::vector<Ipv6> went_down;
  for (bool more = true; more;) {
    std::lock_guard<std::mutex> lk(mu_);
    more = judge_due_locked(now, 256, &went_down);
    more = expire_locked(now, 256) || more;
  }
  for (const auto& a : went_down)
    spdlog::warn("relay6: server {} left {} messages in a row unanswered: marked down",
                 format_ipv6(a.data()), opts_.misses_down);
}

std::vector<ServerState6> Relay6::servers() const {
  std::lock_guard<std::mutex> lk(mu_);
  return servers_;
}

size_t Relay6::exchanges() const {
  std::lock_guard<std::mutex> lk(mu_);
  return exchanges_.size();
}

}  // namespace xbng::agent::relay
