#include "radius/session.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <chrono>

#include "bringup/dhcpv4/message.h"
#include "bringup/punt/counters.h"
#include "bringup/punt/frame.h"

namespace xbng::radius {

using agent::AgentReason;
using agent::count;

namespace {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t unix_seconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

uint64_t unix_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// The prefix a Framed-Route / Framed-IPv6-Route starts with (RFC 2865 5.22:
// "prefix [gateway [metric...]]"; the prefix may lack its length for a host).
std::optional<agent::Prefix> route_prefix(const std::string& route, int family) {
  const size_t end = route.find_first_of(" \t");
  std::string first = route.substr(0, end);
  if (first.find('/') == std::string::npos) first += family == 4 ? "/32" : "/128";
  return agent::parse_prefix(first, family);
}

}  // namespace

uint64_t burst_for(uint64_t rate_bps, uint32_t max_packet) {
  if (rate_bps == 0) return 0;
  return std::min<uint64_t>(std::max<uint64_t>(rate_bps / 80, uint64_t{max_packet} * 10),
                            agent::kMaxBurstBytes);
}

std::string expand_template(std::string_view t, const TemplateVars& v) {
  std::string out;
  out.reserve(t.size() + 16);
  for (size_t i = 0; i < t.size(); i++) {
    if (t[i] != '{') {
      out += t[i];
      continue;
    }
    const size_t close = t.find('}', i);
    if (close == std::string_view::npos) {  // refused by check_template; kept literally
      out += t.substr(i);
      break;
    }
    const std::string_view name = t.substr(i + 1, close - i - 1);
    if (name == "port")
      out += v.port;
    else if (name == "svlan")
      out += std::to_string(v.svlan);
    else if (name == "cvlan")
      out += std::to_string(v.cvlan);
    else if (name == "mac")
      out += agent::format_mac(v.mac.data());
    else if (name == "circuit_id")
      out += v.circuit_id;
    else if (name == "remote_id")
      out += v.remote_id;
    else
      out += t.substr(i, close - i + 1);
    i = close;
  }
  return out;
}

std::string nas_port_id(const TemplateVars& v) {
  return fmt::format("{}:{}.{}", v.port, v.svlan, v.cvlan);
}

void relay_ids_of(std::span<const uint8_t> frame, std::string* circuit_id, std::string* remote_id) {
  agent::punt::FrameError fe;
  auto view = agent::punt::parse_frame(frame, &fe);
  if (!view || view->ip_version != 4 || view->proto != 17 || view->dport != 67) return;
  agent::dhcpv4::ParseError pe;
  auto m = agent::dhcpv4::parse(view->payload, &pe);
  if (!m || !m->has_relay_agent_info) return;
  // RFC 3046: sub-options (code, length, value); 1 Agent Circuit ID, 2 Agent Remote ID.
  const auto& o = m->relay_agent_info;
  for (size_t i = 0; i + 2 <= o.size();) {
    const uint8_t code = o[i], len = o[i + 1];
    if (i + 2 + len > o.size()) break;
    const std::string value(reinterpret_cast<const char*>(&o[i + 2]), len);
    if (code == 1) *circuit_id = value;
    if (code == 2) *remote_id = value;
    i += 2 + len;
  }
}

std::optional<std::string> spec_from_accept(const SubKey& key, const Authorization& a,
                                            const std::map<std::string, PolicySpec>& plans,
                                            uint32_t max_packet, SubscriberSpec* out,
                                            bool addressed_by_relay) {
  SubscriberSpec s;
  s.key = key;
  if (a.framed_ip && *a.framed_ip != 0 && *a.framed_ip != 0xffffffffu &&
      *a.framed_ip != 0xfffffffeu) {
    // 255.255.255.254 / 255.255.255.255 mean "NAS assigns / user chooses"
    // (RFC 2865 5.8): xbng has no pool of its own, so they give nothing.
    s.ipv4 = *a.framed_ip;
    s.has_ipv4 = true;
  }
  if (a.framed_ipv6) {
    s.ipv6 = *a.framed_ipv6;
    s.has_ipv6 = true;
  }
  for (const auto& p : a.delegated_v6) s.prefixes.push_back(p);
  for (const auto& p : a.framed_v6_prefix) s.prefixes.push_back(p);
  for (const auto& r : a.framed_routes) {
    auto p = route_prefix(r, 4);
    if (!p) return fmt::format("Framed-Route {}: not a route", agent::quote_value(r));
    s.prefixes.push_back(*p);
  }
  for (const auto& r : a.framed_v6_routes) {
    auto p = route_prefix(r, 6);
    if (!p) return fmt::format("Framed-IPv6-Route {}: not a route", agent::quote_value(r));
    s.prefixes.push_back(*p);
  }
  if (!s.has_ipv4 && !s.has_ipv6 && s.prefixes.empty() && !addressed_by_relay)
    return std::string(
        "no Framed-IP-Address, Framed-IPv6-Address, Delegated-IPv6-Prefix, "
        "Framed-IPv6-Prefix or Framed-Route: nothing to give out");
  if (a.filter_id) {
    auto it = plans.find(*a.filter_id);
    if (it == plans.end())
      return fmt::format("Filter-Id {} names no plan in [plans]", agent::quote_value(*a.filter_id));
    s.policy = it->second;
    s.has_policy = true;
  } else if (a.wispr_up_bps || a.wispr_down_bps) {
    s.policy.up_rate = a.wispr_up_bps.value_or(0);
    s.policy.down_rate = a.wispr_down_bps.value_or(0);
    s.policy.up_burst = burst_for(s.policy.up_rate, max_packet);
    s.policy.down_burst = burst_for(s.policy.down_rate, max_packet);
    s.has_policy = true;
  }
  if (s.has_policy)
    if (auto st = agent::check_policy(s.policy, max_packet); !st.ok())
      return "rate plan: " + std::string(agent::status_message(st));
  std::sort(s.prefixes.begin(), s.prefixes.end(),
            [](const agent::Prefix& x, const agent::Prefix& y) {
              return std::tie(x.family, x.addr, x.len) < std::tie(y.family, y.addr, y.len);
            });
  *out = std::move(s);
  return std::nullopt;
}

AccessSessions::AccessSessions(Client* client, AccessOptions opts, PortName port_name,
                               MaxPacket max_packet, CreateFn create, RedispatchFn redispatch,
                               Clock clock, WallClock wall)
    : client_(client),
      opts_(std::move(opts)),
      port_name_(std::move(port_name)),
      max_packet_(std::move(max_packet)),
      create_(std::move(create)),
      redispatch_(std::move(redispatch)),
      clock_(clock ? std::move(clock) : Clock(monotonic_ns)),
      wall_(wall ? std::move(wall) : WallClock(unix_seconds)),
      alive_(std::make_shared<Alive>()) {
  alive_->self = this;
}

AccessSessions::~AccessSessions() {
  // A completion still to come finds nobody; one running now finishes first.
  {
    std::lock_guard g(alive_->mu);
    alive_->self = nullptr;
  }
  {
    std::lock_guard g(work_mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void AccessSessions::set_workers(unsigned n, CreateManyFn create_many) {
  create_many_ = std::move(create_many);
  // The completions of one pass of the client's I/O thread wake one worker
  // together, at the pass's end, rather than one each as they come.
  if (n)
    notify_after_pass_ = client_->set_after_completions([alive = std::weak_ptr<Alive>(alive_)] {
      auto a = alive.lock();
      if (!a) return;
      std::lock_guard g(a->mu);
      AccessSessions* self = a->self;
      if (!self) return;
      bool any;
      {
        std::lock_guard w(self->work_mu_);
        any = !self->work_.empty();
      }
      if (any) self->work_cv_.notify_one();
    });
  for (unsigned i = 0; i < n; ++i)
    workers_.emplace_back([this] {
      for (;;) {
        std::vector<Job> jobs;
        bool more = false;
        {
          std::unique_lock g(work_mu_);
          work_cv_.wait(g, [&] { return stopping_ || !work_.empty(); });
          if (stopping_) return;
          while (!work_.empty() && jobs.size() < kMaxBatch) {
            jobs.push_back(std::move(work_.front()));
            work_.pop_front();
          }
          more = !work_.empty();
        }
        // Completions beyond this batch: another worker takes them (the
        // I/O thread wakes one only when the queue was empty).
        if (more) work_cv_.notify_one();
        complete(jobs);
      }
    });
}

size_t AccessSessions::pending() const {
  std::lock_guard g(mu_);
  return keys_.size();
}

bool AccessSessions::held(const SubKey& k) const {
  std::lock_guard g(mu_);
  auto it = keys_.find(agent::key_rank(k));
  return it != keys_.end() && !it->second.asking && it->second.hold_until_ns > clock_();
}

AccessRequest AccessSessions::last_request() const {
  std::lock_guard g(mu_);
  return last_request_;
}

void AccessSessions::sweep_locked(uint64_t now) {
  for (auto it = keys_.begin(); it != keys_.end();)
    if (!it->second.asking && it->second.hold_until_ns <= now)
      it = keys_.erase(it);
    else
      ++it;
}

// The Access-Request of key k, whose first punted frame is `frame`
// (the source MAC and any DHCPv4 option 82 fill the template).
static AccessRequest request_of(const AccessOptions& opts, std::string port, const SubKey& k,
                                std::span<const uint8_t> frame) {
  TemplateVars v;
  v.port = std::move(port);
  v.svlan = k.outer_vid;
  v.cvlan = k.inner_vid;
  if (frame.size() >= 12) std::copy(frame.begin() + 6, frame.begin() + 12, v.mac.begin());
  relay_ids_of(frame, &v.circuit_id, &v.remote_id);
  AccessRequest req;
  req.user_name = expand_template(opts.username, v);
  req.password = opts.password;
  req.nas_port_id = nas_port_id(v);
  req.calling_station_id = agent::format_mac(v.mac.data());
  req.circuit_id = v.circuit_id;
  req.remote_id = v.remote_id;
  return req;
}

void AccessSessions::on_unknown(const agent::punt::PuntedFrame& f) {
  SubKey k{};
  k.ifindex = f.ifindex;
  k.outer_vid = f.outer_vid;
  k.inner_vid = f.inner_vid;
  const uint64_t now = clock_();
  auto keep = [&](Entry& e) {
    if (e.frames.size() >= opts_.frames_per_key) {
      count(AgentReason::kAUTH_FRAME_QUEUE_FULL);
      return;
    }
    Frame fr;
    fr.bytes.assign(f.frame.begin(), f.frame.end());
    fr.meta = f;
    e.frames.push_back(std::move(fr));
    Frame& b = e.frames.back();
    b.meta.frame = std::span<const uint8_t>(b.bytes.data(), b.bytes.size());
  };

  AccessRequest req;
  uint64_t generation;
  {
    std::lock_guard g(mu_);
    auto it = keys_.find(agent::key_rank(k));
    if (it != keys_.end()) {
      Entry& e = it->second;
      if (e.asking) {
        count(AgentReason::kAUTH_COALESCED);
        keep(e);
        return;
      }
      if (e.hold_until_ns > now) {
        count(AgentReason::kAUTH_HELD_DROPPED);
        return;
      }
      keys_.erase(it);  // the hold is over: ask again
    }
    if (keys_.size() >= opts_.max_keys) sweep_locked(now);
    if (keys_.size() >= opts_.max_keys) {
      count(AgentReason::kAUTH_TABLE_FULL);
      return;
    }
    Entry& e = keys_[agent::key_rank(k)];
    e.asking = true;
    e.generation = generation = next_generation_++;
    keep(e);

    req = request_of(opts_, port_name_ ? port_name_(k.ifindex) : std::to_string(k.ifindex), k,
                     f.frame);
    last_request_ = req;
  }
  count(AgentReason::kAUTH_REQUESTED);
  spdlog::debug("radius: Access-Request for {}/{}/{} as {}", k.ifindex, k.outer_vid, k.inner_vid,
                agent::quote_value(req.user_name));
  std::weak_ptr<Alive> alive = alive_;
  client_->authorize(req, [alive, k, generation, req](const AccessResult& r) {
    auto a = alive.lock();
    if (!a) return;
    std::lock_guard g(a->mu);
    if (AccessSessions* self = a->self) self->answered(Job{k, generation, req, r});
  });
}

void AccessSessions::answered(Job j) {
  if (workers_.empty()) {
    std::vector<Job> one;
    one.push_back(std::move(j));
    complete(one);
    return;
  }
  // A worker is woken at the end of the client's pass (notify_after_pass_)
  // or, without that, when the queue was empty: completions that arrive
  // while it runs join the queue and leave with its next batch, rather
  // than waking a worker (and a system call) each.
  bool first;
  {
    std::lock_guard w(work_mu_);
    first = work_.empty();
    work_.push_back(std::move(j));
  }
  if (first && !notify_after_pass_) work_cv_.notify_one();
}

void AccessSessions::hold(const SubKey& k, uint64_t generation) {
  std::lock_guard g(mu_);
  auto it = keys_.find(agent::key_rank(k));
  if (it == keys_.end() || it->second.generation != generation) return;
  Entry& e = it->second;
  if (!e.frames.empty()) count(AgentReason::kAUTH_HELD_DROPPED, e.frames.size());
  e.frames.clear();
  e.asking = false;
  e.hold_until_ns = clock_() + uint64_t{opts_.reject_hold_s} * 1000000000ull;
  if (opts_.reject_hold_s == 0) keys_.erase(it);
}

std::string AccessSessions::who(const Job& j) const {
  return fmt::format("{}/{}/{} ({})", port_name_ ? port_name_(j.key.ifindex) : "", j.key.outer_vid,
                     j.key.inner_vid, agent::quote_value(j.req.user_name));
}

bool AccessSessions::prepare(const Job& j, SubscriberSpec* spec, SessionData* d,
                             absl::Status* refused) {
  const AccessResult& r = j.result;
  if (r.outcome != Outcome::kAccept) {
    count(r.outcome == Outcome::kReject ? AgentReason::kAUTH_REJECTED : AgentReason::kAUTH_TIMEOUT);
    spdlog::info("radius: {} {}{}; held back {} s", who(j),
                 r.outcome == Outcome::kReject ? "rejected" : "not answered by any server",
                 r.reply_message.empty() ? "" : ": " + agent::quote_value(r.reply_message),
                 opts_.reject_hold_s);
    hold(j.key, j.generation);
    return false;
  }
  const uint32_t max_packet = max_packet_ ? max_packet_(j.key.ifindex) : agent::kDefaultMaxPacket;
  const bool relayed = port_name_ && opts_.relay_ports.count(port_name_(j.key.ifindex)) > 0;
  if (auto e = spec_from_accept(j.key, r.auth, opts_.plans, max_packet, spec, relayed)) {
    *refused = absl::InvalidArgumentError(*e);
    finish(j, *refused);
    return false;
  }
  d->user_name = j.req.user_name;
  d->classes = r.auth.classes;
  d->start_unix = wall_();
  d->session_id = fmt::format("{:016x}-{:012x}", unix_ns(), agent::key_rank(j.key));
  d->session_timeout = r.auth.session_timeout;
  d->idle_timeout = r.auth.idle_timeout;
  d->interim_interval = r.auth.interim_interval;
  d->filter_id = r.auth.filter_id;
  return true;
}

// The answered requests of a batch: their Accepts are created together
// (create_many: one durable write), then each key's kept frames go back to
// the dispatcher.
void AccessSessions::complete(std::vector<Job>& jobs) {
  std::vector<std::pair<SubscriberSpec, SessionData>> creates;
  std::vector<const Job*> of;
  for (const Job& j : jobs) {
    SubscriberSpec spec;
    SessionData d;
    absl::Status refused;
    if (!prepare(j, &spec, &d, &refused)) continue;
    creates.emplace_back(std::move(spec), std::move(d));
    of.push_back(&j);
  }
  if (creates.empty()) return;
  std::vector<absl::Status> st;
  if (create_many_) {
    st = create_many_(creates);
  } else {
    for (const auto& [spec, d] : creates) st.push_back(create_(spec, d));
  }
  std::vector<Frame> frames;
  for (size_t i = 0; i < of.size(); ++i)
    finish(*of[i], i < st.size() ? st[i] : absl::InternalError("no status"), &frames);
  redispatch(frames);
}

void AccessSessions::finish(const Job& j, const absl::Status& st) {
  std::vector<Frame> frames;
  finish(j, st, &frames);
  redispatch(frames);
}

void AccessSessions::redispatch(const std::vector<Frame>& frames) {
  if (frames.empty()) return;
  // The replies of the whole batch leave together (one sendmmsg per port,
  // punt::PuntTx::Batch), after the lock.
  if (batch_) batch_(true);
  {
    // One batch at a time, as from the single I/O thread (the workers run
    // in parallel).
    std::lock_guard rg(redispatch_mu_);
    for (const auto& fr : frames) redispatch_(fr.meta);
  }
  if (batch_) batch_(false);
}

void AccessSessions::finish(const Job& j, const absl::Status& st, std::vector<Frame>* out) {
  if (absl::IsAlreadyExists(st)) {
    // Provisioned by another source while RADIUS answered: served as it is.
    spdlog::info("radius: {} was provisioned meanwhile; the Access-Accept is not applied", who(j));
  } else if (!st.ok()) {
    // No address is given out twice: a conflicting Accept is a reject.
    count(AgentReason::kAUTH_ACCEPT_REFUSED);
    spdlog::warn("radius: Access-Accept for {} from {} refused, treated as a reject: {}", who(j),
                 j.result.server, std::string(st.message()));
    hold(j.key, j.generation);
    return;
  }
  if (st.ok()) {
    count(AgentReason::kAUTH_ACCEPTED);
    // Debug only: a storm of Accepts would write thousands of lines a
    // second (auth_accepted counts them; the event stream shows each).
    spdlog::debug("radius: {} accepted by {}: subscriber created", who(j), j.result.server);
  }
  std::lock_guard g(mu_);
  auto it = keys_.find(agent::key_rank(j.key));
  if (it != keys_.end() && it->second.generation == j.generation) {
    // Handed to the dispatcher by redispatch(), outside the lock: the
    // dispatcher may hand a frame back here (the key deleted again in
    // between) and must find the table free.
    for (auto& fr : it->second.frames) out->push_back(std::move(fr));
    keys_.erase(it);
  }
}

}  // namespace xbng::radius
