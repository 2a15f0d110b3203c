#include "radius/accounting.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <absl/container/flat_hash_set.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "bringup/punt/counters.h"
#include "common/statefile.h"
#include "common/sub_key.h"

namespace xbng::radius {

namespace {

using json = nlohmann::json;
using agent::AgentReason;
constexpr size_t kMaxStateBytes = size_t{256} << 20;

// FNV-1a, then the splitmix64 finalizer (session ids differ in a few
// digits only): a stable hash, the grid must be the same in the next process.
uint64_t stable_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

std::string hex(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += fmt::format("{:02x}", c);
  return out;
}

std::optional<std::string> unhex(const std::string& h) {
  if (h.size() % 2) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < h.size(); i += 2) {
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    const int a = nib(h[i]), b = nib(h[i + 1]);
    if (a < 0 || b < 0) return std::nullopt;
    out += static_cast<char>(a * 16 + b);
  }
  return out;
}

json to_json(const AccountingRequest& r, uint64_t event_unix) {
  json j = {{"status", static_cast<uint32_t>(r.status)},
            {"session_id", r.session_id},
            {"user_name", r.user_name},
            {"nas_port_id", r.nas_port_id},
            {"calling_station_id", r.calling_station_id},
            {"classes", json::array()},
            {"delegated_v6", json::array()},
            {"input_octets", r.input_octets},
            {"output_octets", r.output_octets},
            {"input_packets", r.input_packets},
            {"output_packets", r.output_packets},
            {"session_time", r.session_time},
            {"event_unix", event_unix}};
  for (const auto& c : r.classes) j["classes"].push_back(hex(c));
  for (const auto& p : r.delegated_v6) j["delegated_v6"].push_back(agent::format_prefix(p));
  if (r.framed_ip) j["framed_ip"] = agent::format_ipv4(*r.framed_ip);
  if (r.framed_ipv6) j["framed_ipv6"] = agent::format_ipv6(r.framed_ipv6->data());
  if (r.terminate_cause) j["terminate_cause"] = *r.terminate_cause;
  return j;
}

// Throws on a wrong type; false on a wrong value.
bool from_json(const json& j, AccountingRequest* r, uint64_t* event_unix) {
  const uint32_t st = j.at("status").get<uint32_t>();
  if (st != 1 && st != 2 && st != 3 && st != 7 && st != 8) return false;
  r->status = static_cast<AcctStatus>(st);
  r->session_id = j.at("session_id").get<std::string>();
  r->user_name = j.at("user_name").get<std::string>();
  r->nas_port_id = j.at("nas_port_id").get<std::string>();
  r->calling_station_id = j.at("calling_station_id").get<std::string>();
  for (const auto& c : j.at("classes")) {
    auto v = unhex(c.get<std::string>());
    if (!v) return false;
    r->classes.push_back(*v);
  }
  for (const auto& p : j.at("delegated_v6")) {
    auto v = agent::parse_prefix(p.get<std::string>(), 6);
    if (!v) return false;
    r->delegated_v6.push_back(*v);
  }
  r->input_octets = j.at("input_octets").get<uint64_t>();
  r->output_octets = j.at("output_octets").get<uint64_t>();
  r->input_packets = j.at("input_packets").get<uint64_t>();
  r->output_packets = j.at("output_packets").get<uint64_t>();
  r->session_time = j.at("session_time").get<uint32_t>();
  *event_unix = j.at("event_unix").get<uint64_t>();
  if (j.contains("framed_ip")) {
    auto v = agent::parse_ipv4(j["framed_ip"].get<std::string>());
    if (!v) return false;
    r->framed_ip = *v;
  }
  if (j.contains("framed_ipv6")) {
    auto v = agent::parse_ipv6(j["framed_ipv6"].get<std::string>());
    if (!v) return false;
    r->framed_ipv6 = *v;
  }
  if (j.contains("terminate_cause")) r->terminate_cause = j["terminate_cause"].get<uint32_t>();
  return true;
}

const char* status_name(AcctStatus s) {
  switch (s) {
    case AcctStatus::kStart:
      return "Start";
    case AcctStatus::kStop:
      return "Stop";
    case AcctStatus::kInterimUpdate:
      return "Interim-Update";
    case AcctStatus::kAccountingOn:
      return "Accounting-On";
    case AcctStatus::kAccountingOff:
      return "Accounting-Off";
  }
  return "?";
}

// What to report of a session's counters: the counts of earlier members
// of an HA group (acct_base) plus what this member's subscriber counted
// since it took the session over (own0: its counters then).
void add_base(const SessionData& d, const AcctCounts& own0, AcctView* v) {
  auto since = [](uint64_t now, uint64_t then) { return now > then ? now - then : 0; };
  v->up_bytes = d.acct_base.up_bytes + since(v->up_bytes, own0.up_bytes);
  v->up_packets = d.acct_base.up_packets + since(v->up_packets, own0.up_packets);
  v->down_bytes = d.acct_base.down_bytes + since(v->down_bytes, own0.down_bytes);
  v->down_packets = d.acct_base.down_packets + since(v->down_packets, own0.down_packets);
}

}  // namespace

uint32_t effective_interim_s(const SessionData& d, const AcctOptions& o) {
  if (d.interim_interval && *d.interim_interval > 0)
    return std::max(*d.interim_interval, std::max<uint32_t>(o.interim_min_s, 1));
  return std::max<uint32_t>(o.interim_interval_s, 1);
}

uint64_t next_on_grid(const std::string& session_id, uint64_t interval_ms, uint64_t tick_ms,
                      uint64_t not_before_ms) {
  if (interval_ms == 0) interval_ms = 1;
  if (tick_ms == 0 || tick_ms > interval_ms) tick_ms = interval_ms;
  const uint64_t slots = interval_ms / tick_ms;
  const uint64_t phase = (stable_hash(session_id) % slots) * tick_ms;
  // The grid: phase + n * interval.
  if (not_before_ms <= phase) return phase;
  const uint64_t n = (not_before_ms - phase + interval_ms - 1) / interval_ms;
  return phase + n * interval_ms;
}

AcctView acct_view_of(const agent::SubscriberView& v, const std::string& port) {
  AcctView a;
  const SubscriberSpec& s = v.spec;
  a.nas_port_id = fmt::format("{}:{}.{}", port, s.key.outer_vid, s.key.inner_vid);
  if (s.has_mac)
    a.calling_station_id = agent::format_mac(s.mac.data());
  else if (v.learned_mac)
    a.calling_station_id = agent::format_mac(v.learned_mac->data());
  if (s.has_ipv4) a.framed_ip = s.ipv4;
  if (s.has_ipv6) a.framed_ipv6 = s.ipv6;
  for (const auto& p : s.prefixes)
    if (p.family == 6) a.delegated_v6.push_back(p);
  a.up_bytes = v.counters.up_bytes;
  a.up_packets = v.counters.up_packets;
  a.down_bytes = v.counters.down_bytes;
  a.down_packets = v.counters.down_packets;
  return a;
}

AccountingRequest make_request(AcctStatus status, const SessionData& d, const AcctView& v,
                               uint64_t now_unix) {
  AccountingRequest r;
  r.status = status;
  r.session_id = d.session_id;
  r.user_name = d.user_name;
  r.nas_port_id = v.nas_port_id;
  r.calling_station_id = v.calling_station_id;
  r.framed_ip = v.framed_ip;
  r.framed_ipv6 = v.framed_ipv6;
  r.delegated_v6 = v.delegated_v6;
  r.classes = d.classes;
  r.event_timestamp = static_cast<uint32_t>(now_unix);
  if (status == AcctStatus::kInterimUpdate || status == AcctStatus::kStop) {
    r.input_octets = v.up_bytes;
    r.input_packets = v.up_packets;
    r.output_octets = v.down_bytes;
    r.output_packets = v.down_packets;
    r.session_time = static_cast<uint32_t>(
        now_unix > d.start_unix ? std::min<uint64_t>(now_unix - d.start_unix, UINT32_MAX) : 0);
  }
  return r;
}

AccountingRequest make_request(AcctStatus status, const SessionData& d, AcctView&& v,
                               uint64_t now_unix) {
  const AcctView none;  // the record's part; the view's strings are moved in below
  AccountingRequest r = make_request(status, d, none, now_unix);
  r.nas_port_id = std::move(v.nas_port_id);
  r.calling_station_id = std::move(v.calling_station_id);
  r.framed_ip = v.framed_ip;
  r.framed_ipv6 = v.framed_ipv6;
  r.delegated_v6 = std::move(v.delegated_v6);
  if (status == AcctStatus::kInterimUpdate || status == AcctStatus::kStop) {
    r.input_octets = v.up_bytes;
    r.input_packets = v.up_packets;
    r.output_octets = v.down_bytes;
    r.output_packets = v.down_packets;
  }
  return r;
}

Accounting::Accounting(SessionTable* sessions, AcctOptions opts, Hooks hooks)
    : sessions_(sessions), opts_(std::move(opts)), hooks_(std::move(hooks)) {
  if (opts_.tick_ms == 0) opts_.tick_ms = 100;
  if (opts_.queue_max == 0) opts_.queue_max = 1;
  if (opts_.queue_in_flight == 0) opts_.queue_in_flight = 1;
}

Accounting::~Accounting() { stop(); }

uint64_t Accounting::now_ms() const {
  if (hooks_.now_ms) return hooks_.now_ms();
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::optional<std::string> Accounting::load_and_adopt() {
  std::optional<std::string> err;
  if (!opts_.state_file.empty()) {
    std::string text, error;
    switch (agent::statefile::read(opts_.state_file, kMaxStateBytes, &text, &error)) {
      case agent::statefile::ReadStatus::kAbsent:
        break;
      case agent::statefile::ReadStatus::kError:
        err = error;
        break;
      case agent::statefile::ReadStatus::kOk:
        try {
          const json j = json::parse(text);
          std::lock_guard g(q_mu_);
          size_t bad = 0;
          for (const auto& e : j.at("queue")) {
            Queued q;
            if (!from_json(e, &q.req, &q.event_unix)) {
              ++bad;
              continue;
            }
            enqueue_locked(std::move(q));
          }
          q_dirty_ = false;
          if (bad) err = fmt::format("{}: {} malformed request(s) skipped", opts_.state_file, bad);
        } catch (const std::exception& e) {
          std::lock_guard g(q_mu_);
          queue_.clear();
          queued_interims_.clear();
          err = fmt::format("{}: {}", opts_.state_file, e.what());
        }
        break;
    }
  }
  {
    std::lock_guard g(q_mu_);
    if (!queue_.empty())
      spdlog::info("radius: {} accounting request(s) still to deliver", queue_.size());
  }
  if (size_t adopted = adopt_all(now_ms()))
    spdlog::info("radius: accounting of {} session(s) goes on", adopted);
  return err;
}

size_t Accounting::adopt_all(uint64_t now) {
  size_t adopted = 0;
  sessions_->for_each([&](const SubKey& k, const SessionData& d) {
    if (!d.acct_started) {  // created, not started yet: a lease or the grace starts it
      start_due_.emplace(
          std::make_pair(now + uint64_t{opts_.start_grace_s} * 1000, agent::key_rank(k)), k);
      return;
    }
    adopt_session(k, d, now);
    ++adopted;
  });
  return adopted;
}

void Accounting::drop_sessions() {
  auto freeze = [&](uint64_t rank) {
    AcctView v;
    if (hooks_.view && hooks_.view(agent::key_of_rank(rank), &v))
      frozen_[rank] = {v.up_bytes, v.up_packets, v.down_bytes, v.down_packets};
  };
  for (const auto& [rank, s] : sess_) freeze(rank);
  for (const auto& [due, k] : start_due_) freeze(due.second);
  sess_.clear();
  wheel_.clear();
  start_due_.clear();
  starting_.clear();
  std::lock_guard g(in_mu_);
  last_views_.clear();
}

void Accounting::standby_events(const std::vector<Event>& events) {
  for (const auto& e : events)
    if (e.kind == Event::kEnded || e.kind == Event::kCreated) frozen_.erase(agent::key_rank(e.key));
}

void Accounting::tell_reported(const SubKey& k, const Sess& s) const {
  if (!hooks_.reported) return;
  AcctCounts c;
  c.up_bytes = s.up_bytes;
  c.up_packets = s.up_packets;
  c.down_bytes = s.down_bytes;
  c.down_packets = s.down_packets;
  hooks_.reported(k, c);
}

void Accounting::start() {
  std::lock_guard g(run_mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    std::unique_lock l(run_mu_);
    while (!stop_) {
      l.unlock();
      tick();
      l.lock();
      run_cv_.wait_for(l, std::chrono::milliseconds(opts_.tick_ms), [this] { return stop_; });
    }
  });
}

void Accounting::stop() {
  {
    std::lock_guard g(run_mu_);
    stop_ = true;
  }
  run_cv_.notify_all();
  if (!thread_.joinable()) return;
  thread_.join();
  tick();
}

void Accounting::accounting_on() {
  AccountingRequest r;
  r.status = AcctStatus::kAccountingOn;
  r.session_id = fmt::format("{:016x}-on", now_ms());
  r.event_timestamp = static_cast<uint32_t>(now_ms() / 1000);
  spdlog::info("radius: Accounting-On (a cold start: no session of this NAS goes on)");
  send(std::move(r), now_ms() / 1000, false);
}

void Accounting::accounting_off() {
  AccountingRequest r;
  r.status = AcctStatus::kAccountingOff;
  r.session_id = fmt::format("{:016x}-off", now_ms());
  r.event_timestamp = static_cast<uint32_t>(now_ms() / 1000);
  send(std::move(r), now_ms() / 1000, false);
}

// ---- inputs ----

void Accounting::on_lease(const SubKey& k, LeaseChange c) {
  Event e;
  e.kind = c == LeaseChange::kBound ? Event::kLeaseBound : Event::kLeaseGone;
  e.key = k;
  e.cause = c == LeaseChange::kReleased ? cause::kUserRequest : cause::kLostService;
  std::lock_guard g(in_mu_);
  inbox_.push_back(std::move(e));
}

void Accounting::on_removing(const SubKey& k, const AcctView& last) {
  std::lock_guard g(in_mu_);
  last_views_[agent::key_rank(k)] = last;
}

void Accounting::on_subscriber_change(const SubKey& k, const SubscriberSpec* now) {
  if (now && now->origin == agent::kOriginRadius) return;  // changed, still RADIUS's
  auto d = sessions_->get(k);
  if (!d) return;  // not a RADIUS session
  Event e;
  e.kind = Event::kEnded;
  e.key = k;
  e.cause = sessions_->take_end_cause(k).value_or(cause::kAdminReset);
  e.ended = std::make_unique<Event::Ended>();
  e.ended->data = std::move(*d);
  std::lock_guard g(in_mu_);
  auto it = last_views_.find(agent::key_rank(k));
  if (it != last_views_.end()) {
    e.ended->last = std::move(it->second);
    last_views_.erase(it);
  }
  inbox_.push_back(std::move(e));
}

void Accounting::on_created(const SubKey& k) {
  Event e;
  e.kind = Event::kCreated;
  e.key = k;
  std::lock_guard g(in_mu_);
  inbox_.push_back(std::move(e));
}

void Accounting::timers_changed(const SubKey& k) {
  Event e;
  e.kind = Event::kTimers;
  e.key = k;
  std::lock_guard g(in_mu_);
  inbox_.push_back(std::move(e));
}

absl::Status Accounting::end_session(const SubKey& k, uint32_t acct_terminate_cause) {
  if (!sessions_->get(k)) return absl::NotFoundError("not a RADIUS session");
  sessions_->set_end_cause(k, acct_terminate_cause);
  absl::Status st = hooks_.remove(k);
  if (!st.ok()) sessions_->take_end_cause(k);
  return st;
}

// ---- the worker ----

void Accounting::tick() {
  const uint64_t now = now_ms();
  std::vector<Event> events;
  {
    std::lock_guard g(in_mu_);
    events.swap(inbox_);
  }
  if (hooks_.active) {
    if (!hooks_.active()) {  // a standby: the active accounts (its inputs are dropped)
      if (was_active_) drop_sessions();
      was_active_ = false;
      standby_events(events);
      retry_queue(now);
      if (now >= next_flush_ms_) {
        next_flush_ms_ = now + 1000;
        flush();
      }
      std::lock_guard g(c_mu_);
      c_.sessions = 0;
      return;
    }
    if (!was_active_) {
      was_active_ = true;
      const size_t adopted = adopt_all(now);
      spdlog::info(
          "radius: active now: accounting of {} session(s) goes on, {} to start (no second Start)",
          adopted, start_due_.size());
    }
  }
  // Sessions created start_grace_s ago without a lease: started as if bound.
  while (!start_due_.empty() && start_due_.begin()->first.first <= now) {
    Event e;
    e.kind = Event::kLeaseBound;
    e.key = start_due_.begin()->second;
    start_due_.erase(start_due_.begin());
    events.push_back(std::move(e));
  }
  prepare_starts(events);
  for (auto& e : events) process(e, now);
  starting_.clear();
  // Sessions due (each wake-up may end a session: the deletion comes back
  // as an event at the next tick).
  std::vector<uint64_t> due;
  while (!wheel_.empty() && wheel_.begin()->first <= now) {
    due.push_back(wheel_.begin()->second);
    wheel_.erase(wheel_.begin());
  }
  wake_many(due, now);
  retry_queue(now);
  if (now >= next_flush_ms_) {
    next_flush_ms_ = now + 1000;
    sessions_->flush();
    flush();
  }
  std::lock_guard g(c_mu_);
  c_.sessions = sess_.size();
}

void Accounting::process(Event& e, uint64_t now) {
  const uint64_t rank = agent::key_rank(e.key);
  switch (e.kind) {
    case Event::kLeaseBound:
      if (!sess_.contains(rank)) start_session(e.key, now);
      return;
    case Event::kLeaseGone: {
      if (!sess_.contains(rank)) return;
      if (hooks_.lease_bound && hooks_.lease_bound(e.key)) return;  // another family still is
      {
        std::lock_guard g(c_mu_);
        ++c_.ended_lease;
      }
      absl::Status st = end_session(e.key, e.cause);
      if (!st.ok() && !absl::IsNotFound(st))
        spdlog::warn("radius: ending session {}/{}/{} (no lease left): {}", e.key.ifindex,
                     e.key.outer_vid, e.key.inner_vid, std::string(st.message()));
      return;
    }
    case Event::kCreated:
      if (!sess_.contains(rank))
        start_due_.emplace(std::make_pair(now + uint64_t{opts_.start_grace_s} * 1000, rank), e.key);
      return;
    case Event::kTimers: {
      auto it = sess_.find(rank);
      if (it == sess_.end()) return;
      unschedule(rank);
      wake(rank, now);
      return;
    }
    case Event::kEnded: {
      auto it = sess_.find(rank);
      if (it == sess_.end() && !e.ended->data.acct_started) return;  // no Start, no Stop
      AcctView v;
      if (e.ended->last) v = *e.ended->last;
      AcctCounts own0;
      if (it != sess_.end()) {
        own0 = it->second.own0;
      } else if (auto f = frozen_.find(rank); f != frozen_.end()) {
        own0 = f->second;
        frozen_.erase(f);
      }
      add_base(e.ended->data, own0, &v);
      if (it != sess_.end()) {
        report(it->second, &v);
        unschedule(rank);
        sess_.erase(it);
      }
      AccountingRequest r = make_request(AcctStatus::kStop, e.ended->data, v, now / 1000);
      r.terminate_cause = e.cause;
      {
        std::lock_guard g(c_mu_);
        ++c_.stops;
      }
      count(AgentReason::kACCT_STOP);
      spdlog::info("radius: session {} ({}) ended, cause {}: Stop, {} octets in, {} out",
                   e.ended->data.session_id, agent::quote_value(e.ended->data.user_name), e.cause,
                   r.input_octets, r.output_octets);
      send(std::move(r), now / 1000, false);
      return;
    }
  }
}

// The sessions this pass starts (a first lease bound, no Start sent yet):
// their "Start sent" notes are made durable together, with one write,
// before any of their Starts goes out (starting_ keeps what was noted).
void Accounting::prepare_starts(const std::vector<Event>& events) {
  // The RADIUS sessions to start, each once (a session binds two leases).
  std::vector<SubKey> cand;
  std::vector<SessionData> data;
  absl::flat_hash_set<uint64_t> seen;
  for (const auto& e : events) {
    const uint64_t rank = agent::key_rank(e.key);
    if (e.kind != Event::kLeaseBound || sess_.contains(rank) || starting_.contains(rank) ||
        !seen.insert(rank).second)
      continue;
    auto d = sessions_->get(e.key);
    if (!d || d->acct_started) continue;  // not RADIUS's, or started by an earlier process
    cand.push_back(e.key);
    data.push_back(std::move(*d));
  }
  if (cand.empty()) return;
  // Their subscribers, read together when the hooks can.
  std::vector<AcctView> views(cand.size());
  std::vector<uint8_t> found(cand.size(), 1);
  if (hooks_.identities) {
    hooks_.identities(cand, &views, &found);
  } else if (const auto& view = hooks_.identity ? hooks_.identity : hooks_.view; view) {
    for (size_t i = 0; i < cand.size(); ++i) found[i] = view(cand[i], &views[i]);
  }
  std::vector<SubKey> keys;
  for (size_t i = 0; i < cand.size(); ++i) {
    if (!found[i]) continue;  // deleted meanwhile
    data[i].acct_started = true;
    starting_.emplace(agent::key_rank(cand[i]),
                      std::make_pair(std::move(data[i]), std::move(views[i])));
    keys.push_back(cand[i]);
  }
  if (keys.empty()) return;
  const std::vector<bool> noted = sessions_->mark_acct_started_many(keys);
  for (size_t i = 0; i < keys.size(); ++i)
    if (!noted[i]) starting_.erase(agent::key_rank(keys[i]));
}

void Accounting::start_session(const SubKey& k, uint64_t now) {
  const uint64_t rank = agent::key_rank(k);
  std::optional<SessionData> d;
  AcctView v;
  if (auto it = starting_.find(rank); it != starting_.end()) {  // noted by prepare_starts
    d = std::move(it->second.first);
    v = std::move(it->second.second);
    starting_.erase(it);
  } else if (d = sessions_->get(k); !d) {
    return;                      // not (or no longer) a RADIUS session
  } else if (d->acct_started) {  // started before (by an earlier process): go on
    adopt_session(k, *d, now);
    return;
  } else {
    if (hooks_.view && !hooks_.view(k, &v)) return;  // deleted meanwhile
    if (!sessions_->mark_acct_started(k)) return;
  }
  d->acct_started = true;
  Sess& s = sess_[rank];
  s.interval_ms = uint64_t{effective_interim_s(*d, opts_)} * 1000;
  s.next_interim_ms =
      next_on_grid(d->session_id, s.interval_ms, opts_.tick_ms, now + s.interval_ms / 2);
  s.last_activity_ms = now;
  report(s, &v);
  s.last_packets = v.up_packets + v.down_packets;
  {
    std::lock_guard g(c_mu_);
    ++c_.starts;
  }
  count(AgentReason::kACCT_START);
  send(make_request(AcctStatus::kStart, *d, v, now / 1000), now / 1000, false);
  tell_reported(k, s);
  schedule(rank, s, *d, now);
}

void Accounting::adopt_session(const SubKey& k, const SessionData& d, uint64_t now) {
  const uint64_t rank = agent::key_rank(k);
  if (sess_.contains(rank)) return;
  Sess& s = sess_[rank];
  s.interval_ms = uint64_t{effective_interim_s(d, opts_)} * 1000;
  s.next_interim_ms = next_on_grid(d.session_id, s.interval_ms, opts_.tick_ms, now + 1);
  s.last_activity_ms = now;
  // In an HA group this member reports acct_base (what was reported
  // before, by whichever member) plus what it forwards from its takeover
  // on: its subscriber may hold counts of an earlier active period of its
  // own, frozen when it stepped down (its data plane counted nothing since,
  // and everything after is this period's, however late this pass runs
  // after the takeover).
  if (auto f = frozen_.find(rank); f != frozen_.end()) {
    s.own0 = f->second;
    frozen_.erase(f);
  }
  AcctView v;
  if (hooks_.view && hooks_.view(k, &v)) {
    add_base(d, s.own0, &v);
    report(s, &v);
    s.last_packets = v.up_packets + v.down_packets;
  }
  schedule(rank, s, d, now);
}

void Accounting::report(Sess& s, AcctView* v) {
  s.up_bytes = v->up_bytes = std::max(s.up_bytes, v->up_bytes);
  s.up_packets = v->up_packets = std::max(s.up_packets, v->up_packets);
  s.down_bytes = v->down_bytes = std::max(s.down_bytes, v->down_bytes);
  s.down_packets = v->down_packets = std::max(s.down_packets, v->down_packets);
}

Accounting::Timers Accounting::timers_of(const SessionData& d) {
  return Timers{d.start_unix, d.session_timeout, d.idle_timeout};
}

void Accounting::schedule(uint64_t rank, Sess& s, const SessionData& d, uint64_t now) {
  schedule(rank, s, timers_of(d), now);
}

void Accounting::schedule(uint64_t rank, Sess& s, const Timers& d, uint64_t now) {
  uint64_t due = s.next_interim_ms;
  if (d.session_timeout && *d.session_timeout)
    due = std::min(due, (d.start_unix + *d.session_timeout) * 1000);
  if (d.idle_timeout && *d.idle_timeout) {
    const uint64_t idle_ms = uint64_t{*d.idle_timeout} * 1000;
    const uint64_t step = std::max<uint64_t>(1000, idle_ms / 4);
    due = std::min(due, std::min(s.last_activity_ms + idle_ms, now + step));
  }
  // In the slot after `now` at the earliest (a due time already past is
  // handled at the next tick, not in a loop).
  due = std::max(due, now + 1);
  s.due_ms = due;
  wheel_.insert({due, rank});
}

void Accounting::unschedule(uint64_t rank) {
  auto it = sess_.find(rank);
  if (it == sess_.end()) return;
  wheel_.erase({it->second.due_ms, rank});
}

void Accounting::wake_many(const std::vector<uint64_t>& due, uint64_t now) {
  if (!hooks_.views) {
    for (uint64_t rank : due) wake(rank, now);
    return;
  }
  // The views of a chunk of sessions read at once: a chunk of keys per map
  // and system call, not a lookup per map entry and session.
  constexpr size_t kChunk = 1024;
  std::vector<SubKey> keys;
  std::vector<AcctView> views;
  std::vector<uint8_t> found;
  for (size_t at = 0; at < due.size(); at += kChunk) {
    const size_t n = std::min(kChunk, due.size() - at);
    keys.clear();
    for (size_t i = 0; i < n; ++i) keys.push_back(agent::key_of_rank(due[at + i]));
    hooks_.views(keys, &views, &found);
    for (size_t i = 0; i < n; ++i)
      if (!found[i] || !wake_in_place(due[at + i], now, &views[i])) wake(due[at + i], now);
  }
}

bool Accounting::wake_in_place(uint64_t rank, uint64_t now, AcctView* v) {
  auto it = sess_.find(rank);
  if (it == sess_.end()) return true;
  Sess& s = it->second;
  const SubKey k = agent::key_of_rank(rank);
  Timers t;
  std::optional<AccountingRequest> req;
  bool hand_over = false;  // a session to end: wake() does it
  // The record read in place, under the table's lock (nothing here calls
  // back into the table or the store): no copy of it per wake-up.
  const bool found = sessions_->read(k, [&](const SessionData& d) {
    t = timers_of(d);
    const uint64_t interval_ms = uint64_t{effective_interim_s(d, opts_)} * 1000;
    if (interval_ms != s.interval_ms) {
      s.interval_ms = interval_ms;
      s.next_interim_ms = next_on_grid(d.session_id, interval_ms, opts_.tick_ms, now + 1);
    }
    if (d.session_timeout && *d.session_timeout &&
        now >= (d.start_unix + *d.session_timeout) * 1000) {
      hand_over = true;
      return;
    }
    add_base(d, s.own0, v);
    const uint64_t packets = v->up_packets + v->down_packets;
    if (packets != s.last_packets) {
      s.last_packets = packets;
      s.last_activity_ms = now;
    }
    if (d.idle_timeout && *d.idle_timeout &&
        now >= s.last_activity_ms + uint64_t{*d.idle_timeout} * 1000) {
      hand_over = true;
      return;
    }
    if (now < s.next_interim_ms) return;
    report(s, v);
    req = make_request(AcctStatus::kInterimUpdate, d, std::move(*v), now / 1000);
    // The next point of the grid (a late tick skips missed ones: no burst).
    s.next_interim_ms = next_on_grid(d.session_id, s.interval_ms, opts_.tick_ms, now + 1);
  });
  if (!found || hand_over) return false;
  if (req) {
    {
      std::lock_guard g(c_mu_);
      ++c_.interims;
    }
    count(AgentReason::kACCT_INTERIM);
    send(std::move(*req), now / 1000, false);
    tell_reported(k, s);
  }
  schedule(rank, s, t, now);
  return true;
}

void Accounting::wake(uint64_t rank, uint64_t now) {
  auto it = sess_.find(rank);
  if (it == sess_.end()) return;
  Sess& s = it->second;
  const SubKey k = agent::key_of_rank(rank);
  auto d = sessions_->get(k);
  if (!d) {  // its deletion is on its way as an event
    sess_.erase(it);
    return;
  }
  // The interval as the table has it now (a CoA may have changed it).
  const uint64_t interval_ms = uint64_t{effective_interim_s(*d, opts_)} * 1000;
  if (interval_ms != s.interval_ms) {
    s.interval_ms = interval_ms;
    s.next_interim_ms = next_on_grid(d->session_id, interval_ms, opts_.tick_ms, now + 1);
  }
  if (d->session_timeout && *d->session_timeout &&
      now >= (d->start_unix + *d->session_timeout) * 1000) {
    {
      std::lock_guard g(c_mu_);
      ++c_.ended_session_timeout;
    }
    spdlog::info("radius: session {} reached its Session-Timeout ({} s)", d->session_id,
                 *d->session_timeout);
    if (end_session(k, cause::kSessionTimeout).ok()) return;  // the Stop follows the deletion
  }
  const bool interim_due = now >= s.next_interim_ms;
  const bool idle_check = d->idle_timeout && *d->idle_timeout;
  AcctView v;
  bool have_view = false;
  if (interim_due || idle_check) {
    have_view = hooks_.view && hooks_.view(k, &v);
    if (!have_view) {  // deleted: the event follows
      sess_.erase(it);
      return;
    }
    add_base(*d, s.own0, &v);
    const uint64_t packets = v.up_packets + v.down_packets;
    if (packets != s.last_packets) {
      s.last_packets = packets;
      s.last_activity_ms = now;
    }
  }
  if (idle_check && now >= s.last_activity_ms + uint64_t{*d->idle_timeout} * 1000) {
    {
      std::lock_guard g(c_mu_);
      ++c_.ended_idle_timeout;
    }
    spdlog::info("radius: session {} idle for {} s (Idle-Timeout)", d->session_id,
                 *d->idle_timeout);
    if (end_session(k, cause::kIdleTimeout).ok()) return;
  }
  if (interim_due && have_view) {
    report(s, &v);
    {
      std::lock_guard g(c_mu_);
      ++c_.interims;
    }
    count(AgentReason::kACCT_INTERIM);
    send(make_request(AcctStatus::kInterimUpdate, *d, v, now / 1000), now / 1000, false);
    tell_reported(k, s);
    // The next point of the grid (a late tick skips missed ones: no burst).
    s.next_interim_ms = next_on_grid(d->session_id, s.interval_ms, opts_.tick_ms, now + 1);
  }
  schedule(rank, s, *d, now);
}

// ---- sending and the queue ----

void Accounting::send(AccountingRequest r, uint64_t event_unix, bool from_queue) {
  if (r.status == AcctStatus::kAccountingOn || r.status == AcctStatus::kAccountingOff) {
    std::lock_guard g(c_mu_);
    if (!from_queue) ++c_.on_off;
  }
  if (from_queue) {
    const uint64_t now_s = now_ms() / 1000;
    r.delay_time = static_cast<uint32_t>(now_s > event_unix ? now_s - event_unix : 0);
  }
  if (!hooks_.send) return;
  // One request shared by the send and its completion (which queues it when
  // no server acknowledged it): not copied per request.
  auto req = std::make_shared<AccountingRequest>(std::move(r));
  hooks_.send(*req, [this, req, event_unix, from_queue](bool delivered) {
    AccountingRequest& copy = *req;
    std::lock_guard g(q_mu_);
    if (from_queue && in_flight_) --in_flight_;
    if (delivered) {
      if (from_queue) next_retry_ms_ = 0;
      {
        std::lock_guard c(c_mu_);
        ++c_.acked;
      }
      count(AgentReason::kACCT_ACKED);
      return;
    }
    if (!from_queue) {
      {
        std::lock_guard c(c_mu_);
        ++c_.undelivered;
      }
      count(AgentReason::kACCT_UNDELIVERED);
      spdlog::warn("radius: {} of session {} not acknowledged by any server: queued",
                   status_name(copy.status), copy.session_id);
    }
    // A newer Interim (or the Stop) of the session queued meanwhile wins.
    if (copy.status == AcctStatus::kInterimUpdate && queued_interims_.count(copy.session_id)) {
      std::lock_guard c(c_mu_);
      ++c_.replaced;
      return;
    }
    enqueue_locked(Queued{std::move(copy), event_unix});
  });
}

void Accounting::enqueue_locked(Queued q) {
  q_dirty_ = true;
  const std::string sid = q.req.session_id;
  if (q.req.status == AcctStatus::kInterimUpdate || q.req.status == AcctStatus::kStop) {
    auto it = queued_interims_.find(sid);
    if (it != queued_interims_.end()) {  // the newer one carries more
      queue_.erase(it->second);
      queued_interims_.erase(it);
      std::lock_guard c(c_mu_);
      ++c_.replaced;
    }
  }
  while (queue_.size() >= opts_.queue_max) {
    const Queued& old = queue_.front();
    if (old.req.status == AcctStatus::kInterimUpdate) queued_interims_.erase(old.req.session_id);
    queue_.pop_front();
    {
      std::lock_guard c(c_mu_);
      ++c_.dropped;
    }
    count(AgentReason::kACCT_QUEUE_DROPPED);
  }
  queue_.push_back(std::move(q));
  if (queue_.back().req.status == AcctStatus::kInterimUpdate)
    queued_interims_[sid] = std::prev(queue_.end());
  std::lock_guard c(c_mu_);
  c_.queued = queue_.size();
}

void Accounting::retry_queue(uint64_t now) {
  std::vector<Queued> batch;
  {
    std::lock_guard g(q_mu_);
    if (queue_.empty() || now < next_retry_ms_) return;
    while (!queue_.empty() && in_flight_ < opts_.queue_in_flight) {
      Queued& q = queue_.front();
      if (q.req.status == AcctStatus::kInterimUpdate) queued_interims_.erase(q.req.session_id);
      batch.push_back(std::move(q));
      queue_.pop_front();
      ++in_flight_;
    }
    if (batch.empty()) return;
    // A delivery from the queue brings the next batch at once (the server is
    // back); otherwise the queue waits queue_retry_s.
    next_retry_ms_ = now + uint64_t{opts_.queue_retry_s} * 1000;
    q_dirty_ = true;
    std::lock_guard c(c_mu_);
    c_.queued = queue_.size();
    c_.resent += batch.size();
  }
  for (auto& q : batch) send(std::move(q.req), q.event_unix, true);
}

void Accounting::flush() {
  std::lock_guard g(q_mu_);
  if (!q_dirty_) return;
  write_queue();
}

bool Accounting::write_queue() {
  q_dirty_ = false;
  if (opts_.state_file.empty()) return true;
  json j = {{"queue", json::array()}};
  for (const auto& q : queue_) j["queue"].push_back(to_json(q.req, q.event_unix));
  std::string error;
  if (!agent::statefile::write_atomic(opts_.state_file, j.dump(), 0600, /*durable=*/false,
                                      &error)) {
    spdlog::error("radius: accounting queue: {}", error);
    q_dirty_ = true;
    return false;
  }
  return true;
}

std::string render_acct_metrics(const AcctCounters& c, const CounterSnapshot& client) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  auto sample = [&](const char* name, std::string_view labels, uint64_t v) {
    fmt::format_to(std::back_inserter(out), "{}{}{}{} {}\n", name, labels.empty() ? "" : "{",
                   labels, labels.empty() ? "" : "}", v);
  };
  family("xbng_radius_acct_requests_total", "counter",
         "Accounting-Requests first sent, by Acct-Status-Type");
  sample("xbng_radius_acct_requests_total", "type=\"start\"", c.starts);
  sample("xbng_radius_acct_requests_total", "type=\"interim\"", c.interims);
  sample("xbng_radius_acct_requests_total", "type=\"stop\"", c.stops);
  sample("xbng_radius_acct_requests_total", "type=\"on_off\"", c.on_off);
  family("xbng_radius_acct_acked_total", "counter",
         "Accounting-Requests acknowledged by a server (first sent or from the queue)");
  sample("xbng_radius_acct_acked_total", "", c.acked);
  family("xbng_radius_acct_undelivered_total", "counter",
         "Accounting-Requests no server acknowledged after every retransmission: queued");
  sample("xbng_radius_acct_undelivered_total", "", c.undelivered);
  family("xbng_radius_acct_resent_total", "counter",
         "Accounting-Requests sent again from the queue");
  sample("xbng_radius_acct_resent_total", "", c.resent);
  family("xbng_radius_acct_queue_dropped_total", "counter",
         "queued Accounting-Requests dropped (the queue full: the oldest goes)");
  sample("xbng_radius_acct_queue_dropped_total", "", c.dropped);
  family("xbng_radius_acct_queue_replaced_total", "counter",
         "queued Interim-Updates replaced by a newer Interim-Update or the Stop of their session");
  sample("xbng_radius_acct_queue_replaced_total", "", c.replaced);
  family("xbng_radius_acct_queued", "gauge", "Accounting-Requests waiting in the queue");
  sample("xbng_radius_acct_queued", "", c.queued);
  family("xbng_radius_acct_sessions", "gauge", "RADIUS sessions accounted (Start sent)");
  sample("xbng_radius_acct_sessions", "", c.sessions);
  family("xbng_radius_acct_sessions_ended_total", "counter",
         "RADIUS sessions ended by accounting, by reason");
  sample("xbng_radius_acct_sessions_ended_total", "reason=\"session_timeout\"",
         c.ended_session_timeout);
  sample("xbng_radius_acct_sessions_ended_total", "reason=\"idle_timeout\"", c.ended_idle_timeout);
  sample("xbng_radius_acct_sessions_ended_total", "reason=\"no_lease\"", c.ended_lease);
  family("xbng_radius_retransmits_total", "counter",
         "RADIUS requests retransmitted (authentication and accounting)");
  sample("xbng_radius_retransmits_total", "", client.retransmits);
  family("xbng_radius_acct_timeouts_total", "counter",
         "Accounting-Requests a server let time out (then the next server is tried)");
  sample("xbng_radius_acct_timeouts_total", "", client.accounting_timeouts);
  return out;
}

AcctCounters Accounting::counters() const {
  std::lock_guard g(c_mu_);
  return c_;
}

std::vector<AccountingRequest> Accounting::queued() const {
  std::lock_guard g(q_mu_);
  std::vector<AccountingRequest> out;
  for (const auto& q : queue_) out.push_back(q.req);
  return out;
}

}  // namespace xbng::radius
