#include "relay/relay4.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <cstring>

#include "bringup/punt/counters.h"
#include "common/bytes.h"

namespace xbng::agent::relay {

namespace {

constexpr Mac kBroadcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The info lines of a server's state change (up again) are made
// under mu_ and written after it: a log write that blocks (a loaded disk)
// must not hold the lock the punt thread and the socket's thread take for
// every message.
thread_local std::vector<std::string> t_later;

void write_later() {
  for (const auto& line : t_later) spdlog::info("{}", line);
  t_later.clear();
}

AgentReason request_reason(RequestError e) {
  switch (e) {
    case RequestError::kHopLimit:
      return AgentReason::kRELAY4_HOP_LIMIT;
    case RequestError::kGiaddrSet:
      return AgentReason::kRELAY4_GIADDR_SET;
    case RequestError::kAgentInfoDropped:
      return AgentReason::kRELAY4_OPTION82_DROPPED;
    case RequestError::kTooLong:
      return AgentReason::kRELAY4_TOO_LONG;
    default:
      return AgentReason::kDHCPV4_MALFORMED_TRUNCATED;  // replaced by the parse error's
  }
}

AgentReason malformed_reason(dhcpv4::ParseError e) {
  return static_cast<AgentReason>(static_cast<int>(AgentReason::kDHCPV4_MALFORMED_TRUNCATED) +
                                  static_cast<int>(e) -
                                  static_cast<int>(dhcpv4::ParseError::kTruncated));
}

}  // namespace

Relay4::Relay4(Relay4Options opts, std::vector<RelayPort> ports, Sessions* sessions,
               punt::Sender to_client, ToServer to_server, Clock clock)
    : opts_(std::move(opts)),
      sessions_(sessions),
      to_client_(std::move(to_client)),
      to_server_(std::move(to_server)),
      clock_(clock ? std::move(clock) : Clock(monotonic_ns)) {
  if (opts_.servers.size() > kMaxServers) opts_.servers.resize(kMaxServers);
  for (auto& p : ports) {
    port_by_name_[p.name] = p.ifindex;
    ports_[p.ifindex] = std::move(p);
  }
  for (uint32_t s : opts_.servers) {
    ServerState st;
    st.address = s;
    servers_.push_back(st);
  }
  // Sized up front: a rehash under mu_ would stall the punt thread.
  exchanges_.reserve(opts_.max_exchanges);
}

uint64_t Relay4::exchange_id(uint32_t xid, const uint8_t* chaddr) {
  uint64_t h = xid;
  for (int i = 0; i < 6; ++i) h = (h << 8 | h >> 56) ^ chaddr[i];
  return h ^ (uint64_t{xid} << 32);
}

int Relay4::server_index(uint32_t addr) const {
  for (size_t i = 0; i < opts_.servers.size(); ++i)
    if (opts_.servers[i] == addr) return static_cast<int>(i);
  return -1;
}

uint32_t Relay4::all_mask() const {
  return opts_.servers.size() >= 32 ? ~0u : (1u << opts_.servers.size()) - 1;
}

uint32_t Relay4::up_mask_locked() const {
  uint32_t m = 0;
  for (size_t i = 0; i < servers_.size(); ++i)
    if (servers_[i].up) m |= 1u << i;
  return m;
}

const RelayPort* Relay4::port(uint32_t ifindex) const {
  auto it = ports_.find(ifindex);
  return it == ports_.end() ? nullptr : &it->second;
}

std::vector<ServerState> Relay4::servers() const {
  std::lock_guard g(mu_);
  return servers_;
}

size_t Relay4::exchanges() const {
  std::lock_guard g(mu_);
  return exchanges_.size();
}

void Relay4::on_client(const SubKey& key, const punt::FrameView& v) {
  const RelayPort* p = port(key.ifindex);
  if (!p) {
    count(AgentReason::kPUNT_MALFORMED_FRAME);
    return;
  }
  if (v.ip_version != 4 || v.proto != 17 || v.dport != 67 || v.sport != 68) {
    count(AgentReason::kDHCPV4_MALFORMED_PORTS);
    return;
  }
  if (v.payload.size() >= 34 && std::memcmp(&v.payload[28], v.l2.src.data(), 6) != 0) {
    // chaddr is not the frame's source: nobody asks on another's behalf.
    count(AgentReason::kDHCPV4_CHADDR_REFUSED);
    return;
  }
  RequestParams rp = request_params(*p, key, v);

  // A REQUEST selecting an offer names the gateway (the alias the client
  // saw): restore the server that made the offer, so that the others learn
  // their offers were declined.
  const uint32_t xid = v.payload.size() >= 8 ? be::get32(&v.payload[4]) : 0;
  const uint64_t id = exchange_id(xid, v.l2.src.data());
  std::optional<uint32_t> lease_server;
  if (sessions_) lease_server = sessions_->lease_server(key);
  restore_offer_server(*p, key, v, id, &rp);
  dhcpv4::Message m;
  RequestError err;
  dhcpv4::ParseError perr;
  auto out = relay_request(v.payload, rp, &m, &err, &perr);
  if (!out) {
    count(err == RequestError::kMalformed ? malformed_reason(perr) : request_reason(err));
    spdlog::debug("relay4 {}/{}/{}: not relayed: {}{}", p->name, key.outer_vid, key.inner_vid,
                  request_error_name(err),
                  err == RequestError::kMalformed
                      ? std::string(" (") + dhcpv4::parse_error_name(perr) + ")"
                      : std::string());
    return;
  }

  uint32_t targets = 0;
  if (!route_request(key, v, m, rp, id, lease_server, &targets)) return;
  send_request(targets, *out);
  spdlog::debug("relay4 {}/{}/{}: {} xid {:08x} relayed to {} server(s)", p->name, key.outer_vid,
                key.inner_vid, dhcpv4::message_type_name(m.type), xid, __builtin_popcount(targets));
  if (m.type == dhcpv4::kRelease || m.type == dhcpv4::kDecline) {
    // The client does not wait for an answer: its lease ends now.
    if (sessions_) sessions_->ended(key, m.type == dhcpv4::kRelease ? "released" : "declined");
    count(AgentReason::kRELAY4_ENDED);
  }
}

RequestParams Relay4::request_params(const RelayPort& p, const SubKey& key,
                                     const punt::FrameView& v) const {
  TemplateVars tv;
  tv.port = p.name;
  tv.svlan = key.outer_vid;
  tv.cvlan = key.inner_vid;
  tv.mac = v.l2.src;
  RequestParams rp;
  rp.giaddr = opts_.relay_address;
  rp.max_hops = opts_.max_hops;
  rp.policy = opts_.policy;
  rp.ours.circuit_id = expand(opts_.circuit_id, tv);
  rp.ours.remote_id = expand(opts_.remote_id, tv);
  rp.ours.link_selection = p.gateway;
  rp.ours.server_id_override = p.gateway;
  return rp;
}

void Relay4::restore_offer_server(const RelayPort& p, const SubKey& key, const punt::FrameView& v,
                                  uint64_t id, RequestParams* rp) {
  std::lock_guard g(mu_);
  auto it = exchanges_.find(id);
  if (it != exchanges_.end() && key_rank(it->second.key) == key_rank(key)) {
    // the requested address picks the offer
    dhcpv4::ParseError pe;
    std::vector<uint8_t> copy(v.payload.begin(), v.payload.end());
    if (copy.size() > 3) copy[3] = 0;
    if (auto m = dhcpv4::parse(copy, &pe); m && m->type == dhcpv4::kRequest && m->server_id &&
                                           *m->server_id == p.gateway && m->requested_ip)
      for (const auto& o : it->second.offers)
        if (o.yiaddr == *m->requested_ip) rp->server_id = o.server_id;
  }
}

// Who gets it, and whose answer is expected.
bool Relay4::route_request(const SubKey& key, const punt::FrameView& v, const dhcpv4::Message& m,
                           const RequestParams& rp, uint64_t id,
                           const std::optional<uint32_t>& lease_server, uint32_t* targets_out) {
  const bool renewing = m.type == dhcpv4::kRequest && !m.server_id && !m.requested_ip;
  const bool directed = renewing || m.type == dhcpv4::kRelease || m.type == dhcpv4::kDecline;
  uint32_t targets, expect = 0;
  std::lock_guard g(mu_);
  const int li = lease_server ? server_index(*lease_server) : -1;
  if (directed && li >= 0 && servers_[static_cast<size_t>(li)].up) {
    targets = 1u << li;
    if (renewing) expect = targets;
  } else {
    targets = all_mask();
    if (m.type == dhcpv4::kDiscover) expect = up_mask_locked();
    if (m.type == dhcpv4::kRequest && rp.server_id) {
      const int si = server_index(*rp.server_id);
      if (si >= 0) expect = 1u << si;
    }
  }
  const bool answered =
      m.type == dhcpv4::kDiscover || m.type == dhcpv4::kRequest || m.type == dhcpv4::kInform;
  if (answered && !record_exchange_locked(key, v, m, id, targets, expect)) return false;
  for (size_t i = 0; i < servers_.size(); ++i)
    if (targets & (1u << i)) ++servers_[i].sent;
  *targets_out = targets;
  return true;
}

bool Relay4::record_exchange_locked(const SubKey& key, const punt::FrameView& v,
                                    const dhcpv4::Message& m, uint64_t id, uint32_t targets,
                                    uint32_t expect) {
  const uint64_t now = clock_();
  auto it = exchanges_.find(id);
  if (it == exchanges_.end() && exchanges_.size() >= opts_.max_exchanges) {
    while (expire_locked(now, 256)) {
    }
    if (exchanges_.size() >= opts_.max_exchanges) {
      count(AgentReason::kRELAY4_TABLE_FULL);
      return false;
    }
  }
  Exchange& e = exchanges_[id];
  if (key_rank(e.key) != key_rank(key) || m.type == dhcpv4::kDiscover) e = Exchange{};
  e.key = key;
  e.client = v.l2.src;
  e.type = m.type;
  e.sent_ns = now;
  to_judge_.emplace_back(now, id);
  to_expire_.emplace_back(now, id);
  e.sent_to = targets;
  e.expect = expect;
  e.answered = 0;
  e.judged = false;
  e.done = false;
  e.theirs = m.has_relay_agent_info && opts_.policy == Policy::kKeep;
  return true;
}

void Relay4::send_request(uint32_t targets, const std::vector<uint8_t>& out) {
  for (size_t i = 0; i < opts_.servers.size(); ++i) {
    if (!(targets & (1u << i))) continue;
    if (to_server_(opts_.servers[i], out))
      count(AgentReason::kRELAY4_FORWARDED);
    else
      count(AgentReason::kRELAY4_SEND_ERROR);
  }
}

void Relay4::on_server(uint32_t src, uint16_t sport, std::span<const uint8_t> payload) {
  const int si = server_index(src);
  if (si < 0 || sport != 67) {
    count(AgentReason::kRELAY4_REPLY_UNKNOWN_SERVER);
    return;
  }
  ReplyError rerr;
  auto r = parse_reply(payload, &rerr);
  if (!r) {
    count(rerr == ReplyError::kBadAgentInfo ? AgentReason::kRELAY4_REPLY_BAD_OPTION82
                                            : AgentReason::kRELAY4_REPLY_MALFORMED);
    spdlog::debug("relay4: reply from {} dropped: {}", format_ipv4(src), reply_error_name(rerr));
    return;
  }
  if (r->giaddr != opts_.relay_address) {
    count(AgentReason::kRELAY4_REPLY_UNKNOWN_CLIENT);
    return;
  }
  const std::optional<SubKey> named = named_subscriber(*r);
  const uint64_t id = exchange_id(r->xid, r->chaddr.data());
  Exchange e;
  const bool taken = take_reply(src, si, *r, named, id, &e);
  write_later();
  if (!taken) return;
  const RelayPort* p = port(e.key.ifindex);
  if (!p) return;
  if (!update_session(*p, src, *r, e)) return;
  if (r->type != dhcpv4::kOffer) {
    std::lock_guard g(mu_);
    auto it = exchanges_.find(id);
    if (it != exchanges_.end()) it->second.done = true;
  }
  deliver(*p, e.key, e.client, *r, payload);
}

// The circuit-id (when the server echoed ours) names the subscriber.
std::optional<SubKey> Relay4::named_subscriber(const ServerReply& r) const {
  std::optional<SubKey> named;
  if (r.agent_info && !r.agent_info->circuit_id.empty()) {
    TemplateVars tv;
    if (match_template(opts_.circuit_id, r.agent_info->circuit_id, &tv)) {
      auto it = port_by_name_.find(tv.port);
      if (it != port_by_name_.end()) {
        SubKey k{};
        k.ifindex = it->second;
        k.outer_vid = tv.svlan;
        k.inner_vid = tv.cvlan;
        named = k;
      }
    }
  }
  return named;
}

// Matches a reply to its exchange and records the answer; false (counted)
// when the reply is not forwarded. *e gets a copy of the exchange.
bool Relay4::take_reply(uint32_t src, int si, const ServerReply& r,
                        const std::optional<SubKey>& named, uint64_t id, Exchange* e) {
  std::lock_guard g(mu_);
  auto it = exchanges_.find(id);
  if (it == exchanges_.end() || !(it->second.sent_to & (1u << si)) ||
      std::memcmp(it->second.client.data(), r.chaddr.data(), 6) != 0) {
    count(AgentReason::kRELAY4_REPLY_UNKNOWN_CLIENT);
    return false;
  }
  Exchange& x = it->second;
  if (!x.theirs && r.agent_info && (!named || key_rank(*named) != key_rank(x.key))) {
    count(AgentReason::kRELAY4_REPLY_BAD_OPTION82);
    return false;
  }
  ServerState& s = servers_[static_cast<size_t>(si)];
  if (!s.up)
    t_later.push_back(fmt::format("relay4: server {} answers again: up", format_ipv4(src)));
  s.up = true;
  s.misses = 0;
  ++s.answered;
  x.answered |= 1u << si;
  if (r.type != dhcpv4::kOffer) {
    if (x.done) {
      count(AgentReason::kRELAY4_REPLY_DUPLICATE);
      return false;
    }
  } else if (r.server_id) {
    x.offers.push_back({src, r.yiaddr, *r.server_id});
  }
  *e = x;  // a copy: the sessions are called without the lock
  return true;
}

// Tells the sessions what a NAK or ACK means; false (counted) when the reply
// is not forwarded.
bool Relay4::update_session(const RelayPort& p, uint32_t src, const ServerReply& r,
                            const Exchange& e) {
  const std::string who = fmt::format("{}/{}/{}", p.name, e.key.outer_vid, e.key.inner_vid);
  if (r.type == dhcpv4::kNak && sessions_) {
    const auto holder = sessions_->lease_server(e.key);
    if (holder && *holder != src) {
      // Another server's lease: this one does not know it (several servers).
      count(AgentReason::kRELAY4_NAK_IGNORED);
      return false;
    }
    sessions_->ended(e.key, "naked");
    count(AgentReason::kRELAY4_ENDED);
  }
  if (r.type == dhcpv4::kAck && r.yiaddr != 0 && sessions_) {
    const uint32_t lifetime = r.lease_time.value_or(0);
    absl::Status st = sessions_->bound(e.key, e.client, r.yiaddr, lifetime, src);
    if (!st.ok()) {
      count(AgentReason::kRELAY4_ACK_REFUSED);
      spdlog::warn("relay4 {}: DHCPACK of {} from {} refused, not forwarded: {}", who,
                   format_ipv4(r.yiaddr), format_ipv4(src), std::string(st.message()));
      return false;
    }
    count(AgentReason::kRELAY4_BOUND);
    spdlog::debug("relay4 {}: {} bound for {} s by {}", who, format_ipv4(r.yiaddr), lifetime,
                  format_ipv4(src));
  }
  return true;
}

void Relay4::deliver(const RelayPort& p, const SubKey& k, const Mac& client, const ServerReply& r,
                     std::span<const uint8_t> payload) {
  const std::vector<uint8_t> out = client_reply(payload, p.gateway);
  // RFC 2131 4.1, as a relay: NAKs broadcast; to ciaddr when the client has
  // one; broadcast when asked; else unicast to the offered address.
  bool bcast = false;
  uint32_t dst = 0;
  if (r.type == dhcpv4::kNak)
    bcast = true;
  else if (r.ciaddr != 0)
    dst = r.ciaddr;
  else if (r.broadcast())
    bcast = true;
  else
    dst = r.yiaddr;
  punt::L2 l2;
  l2.src = p.mac;
  l2.dst = bcast ? kBroadcast : client;
  l2.outer_tpid = p.outer_tpid;
  l2.outer_vid = k.outer_vid;
  l2.inner_vid = k.inner_vid;
  if (to_client_(k.ifindex,
                 punt::build_udp4(l2, p.gateway, bcast ? 0xffffffffu : dst, 67, 68, out)))
    count(AgentReason::kRELAY4_REPLIED);
  else
    count(AgentReason::kPUNT_TX_ERROR);
}

bool Relay4::judge_due_locked(uint64_t now, size_t budget, std::vector<uint32_t>* went_down) {
  const uint64_t timeout = uint64_t{opts_.answer_timeout_ms} * 1000000ull;
  for (; budget && !to_judge_.empty() && now - to_judge_.front().first >= timeout; --budget) {
    const auto [sent, id] = to_judge_.front();
    to_judge_.pop_front();
    auto it = exchanges_.find(id);
    if (it == exchanges_.end() || it->second.sent_ns != sent || it->second.judged) continue;
    Exchange& e = it->second;
    e.judged = true;
    const uint32_t missed = e.expect & ~e.answered;
    for (size_t i = 0; i < servers_.size(); ++i) {
      if (!(missed & (1u << i))) continue;
      ServerState& s = servers_[i];
      count(AgentReason::kRELAY4_SERVER_MISS);
      if (++s.misses >= opts_.misses_down && s.up) {
        s.up = false;
        ++s.downs;
        count(AgentReason::kRELAY4_SERVER_DOWN);
        went_down->push_back(s.address);
      }
    }
  }
  return !to_judge_.empty() && now - to_judge_.front().first >= timeout;
}

bool Relay4::expire_locked(uint64_t now, size_t budget) {
  const uint64_t ttl = uint64_t{opts_.exchange_ttl_s} * 1000000000ull;
  for (; budget && !to_expire_.empty() && now - to_expire_.front().first >= ttl; --budget) {
    const auto [sent, id] = to_expire_.front();
    to_expire_.pop_front();
    auto it = exchanges_.find(id);
    if (it != exchanges_.end() && it->second.sent_ns == sent) exchanges_.erase(it);
  }
  return !to_expire_.empty() && now - to_expire_.front().first >= ttl;
}

// What came due since the last tick, 256 entries per hold of mu_: the punt
// thread's messages get the lock in between.
void Relay4::tick() {
  const uint64_t now = clock_();
  std::vector<uint32_t> went_down;
  for (bool more = true; more;) {
    std::lock_guard g(mu_);
    more = judge_due_locked(now, 256, &went_down);
    more = expire_locked(now, 256) || more;
  }
  for (uint32_t a : went_down)
    spdlog::warn("relay4: server {} left {} messages in a row unanswered: marked down",
                 format_ipv4(a), opts_.misses_down);
}

}  // namespace xbng::agent::relay
