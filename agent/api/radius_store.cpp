#include "api/radius_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <charconv>

#include "api/convert.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::radius {

namespace {

uint64_t unix_seconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// The same checks and path as a gRPC upsert of one subscriber.
absl::Status upsert_validated(agent::SubscriberStore* store, const SubscriberSpec& spec,
                              const char* what) {
  xbng::v1::Subscriber m;
  agent::spec_to_proto(spec, store->ports(), &m);
  std::vector<SubscriberSpec> specs(1);
  if (absl::Status st = agent::validate_subscriber(m, store->ports(), what, &specs[0]); !st.ok())
    return st;
  specs[0].origin = agent::kOriginRadius;
  agent::UpsertResult res;
  return store->upsert(std::move(specs), &res);
}

std::string rates(const PolicySpec& p) {
  auto r = [](uint64_t bps) {
    return bps ? fmt::format("{} bit/s", bps) : std::string("unlimited");
  };
  return fmt::format("up {}, down {}", r(p.up_rate), r(p.down_rate));
}

}  // namespace

namespace {

// An Accept's subscriber checked as a gRPC request would be (the Accept's
// values as a message) into *out; ALREADY_EXISTS when the key was
// provisioned meanwhile.
absl::Status check_accept(agent::SubscriberStore* store, const SubscriberSpec& spec,
                          SubscriberSpec* out) {
  SubscriberSpec existing;
  std::optional<Mac> learned;
  if (store->binding(spec.key, &existing, &learned))
    return absl::AlreadyExistsError("provisioned meanwhile");
  xbng::v1::Subscriber m;
  agent::spec_to_proto(spec, store->ports(), &m);
  // An Accept with no address at all got here only for a relay port
  // (spec_from_accept): the relayed lease gives the addresses.
  const bool bare = !spec.has_ipv4 && !spec.has_ipv6 && spec.prefixes.empty();
  if (absl::Status st = agent::validate_subscriber(m, store->ports(), "Access-Accept", out, !bare);
      !st.ok())
    return st;
  out->origin = agent::kOriginRadius;
  return absl::OkStatus();
}

// The checked subscribers of a batch (those whose status is OK) in one
// store upsert: one pass over the maps for the whole batch. The upsert is
// all or nothing, so when the store refuses it (an overlap, capacity) each
// is upserted on its own for its own status. A refused subscriber's session
// record goes again.
void upsert_batch(agent::SubscriberStore* store, SessionTable* sessions,
                  const std::vector<std::pair<SubscriberSpec, SessionData>>& in,
                  std::vector<SubscriberSpec> checked, std::vector<absl::Status>* st) {
  std::vector<SubscriberSpec> all;
  for (size_t i = 0; i < in.size(); ++i)
    if ((*st)[i].ok()) all.push_back(checked[i]);
  agent::UpsertResult res;
  if (all.empty() || (all.size() > 1 && store->upsert(std::move(all), &res).ok())) return;
  bool undone = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!(*st)[i].ok()) continue;
    std::vector<SubscriberSpec> one;
    one.push_back(std::move(checked[i]));
    (*st)[i] = store->upsert(std::move(one), &res);
    if (!(*st)[i].ok() && sessions) {
      sessions->on_subscriber_change(in[i].first.key, nullptr);
      undone = true;
    }
  }
  if (undone) sessions->flush();
}

}  // namespace

AccessSessions::CreateFn store_creator(agent::SubscriberStore* store, SessionTable* sessions) {
  return [store, sessions](const SubscriberSpec& spec, const SessionData& data) -> absl::Status {
    return store_creator_many(store, sessions)({{spec, data}})[0];
  };
}

AccessSessions::CreateManyFn store_creator_many(agent::SubscriberStore* store,
                                                SessionTable* sessions) {
  return [store, sessions](const std::vector<std::pair<SubscriberSpec, SessionData>>& in) {
    std::vector<absl::Status> st(in.size());
    std::vector<SubscriberSpec> checked(in.size());
    std::vector<std::pair<SubKey, SessionData>> records;
    for (size_t i = 0; i < in.size(); ++i) {
      st[i] = check_accept(store, in[i].first, &checked[i]);
      if (st[i].ok() && sessions) records.emplace_back(in[i].first.key, in[i].second);
    }
    // Every record of the batch durable first (one write), then the
    // subscribers (one upsert).
    if (sessions && !records.empty() && !sessions->record_many(records)[0]) {
      for (auto& s : st)
        if (s.ok()) s = absl::UnavailableError("the session state file cannot be written");
      return st;
    }
    upsert_batch(store, sessions, in, std::move(checked), &st);
    return st;
  };
}

}  // namespace xbng::radius

namespace xbng::radius {

StoreDynAuthBackend::StoreDynAuthBackend(agent::SubscriberStore* store, SessionTable* sessions,
                                         std::map<std::string, PolicySpec> plans, WallClock wall)
    : store_(store),
      sessions_(sessions),
      plans_(std::move(plans)),
      wall_(wall ? std::move(wall) : WallClock(unix_seconds)) {}

bool StoreDynAuthBackend::is_radius(const SubKey& k, SubscriberSpec* spec) const {
  std::optional<Mac> learned;
  return sessions_->get(k) && store_->binding(k, spec, &learned) &&
         spec->origin == agent::kOriginRadius;
}

std::vector<SubKey> StoreDynAuthBackend::only_radius(std::vector<SubKey> ks) const {
  std::vector<SubKey> out;
  SubscriberSpec spec;
  for (const auto& k : ks)
    if (is_radius(k, &spec)) out.push_back(k);
  return out;
}

std::vector<SubKey> StoreDynAuthBackend::by_session_id(std::string_view id) {
  return only_radius(sessions_->find_by_session_id(id));
}

std::vector<SubKey> StoreDynAuthBackend::by_user_name(std::string_view name) {
  return only_radius(sessions_->find_by_user_name(name));
}

std::optional<SubKey> StoreDynAuthBackend::by_nas_port_id(std::string_view id) {
  const size_t colon = id.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view vlans = id.substr(colon + 1);
  const size_t dot = vlans.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  auto num = [](std::string_view s) -> std::optional<uint16_t> {
    uint16_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty() || v == 0 || v > 4094)
      return std::nullopt;
    return v;
  };
  auto outer = num(vlans.substr(0, dot)), inner = num(vlans.substr(dot + 1));
  if (!outer || !inner || !store_->ports().access_ifindex) return std::nullopt;
  auto ifx = store_->ports().access_ifindex(id.substr(0, colon));
  if (!ifx) return std::nullopt;
  SubKey k{};
  k.ifindex = *ifx;
  k.outer_vid = *outer;
  k.inner_vid = *inner;
  SubscriberSpec spec;
  if (!is_radius(k, &spec)) return std::nullopt;
  return k;
}

std::optional<SubKey> StoreDynAuthBackend::by_framed_ip(uint32_t be) {
  auto k = store_->owner_of_ipv4(be);
  SubscriberSpec spec;
  if (!k || !is_radius(*k, &spec)) return std::nullopt;
  return k;
}

namespace {

// A CoA's changes to the session data. Its Session-Timeout counts from now
// (stored as time elapsed since the start plus the new value); 0 removes a
// limit.
void apply_to_session_data(const DynAuthChange& c, uint64_t now, SessionData* d) {
  if (c.filter_id)
    d->filter_id = *c.filter_id;
  else if (c.wispr_up || c.wispr_down)
    d->filter_id.reset();
  if (c.session_timeout) {
    if (*c.session_timeout == 0) {
      d->session_timeout.reset();
    } else {
      const uint64_t elapsed = now > d->start_unix ? now - d->start_unix : 0;
      d->session_timeout =
          static_cast<uint32_t>(std::min<uint64_t>(elapsed + *c.session_timeout, UINT32_MAX));
    }
  }
  if (c.idle_timeout) {
    if (*c.idle_timeout == 0)
      d->idle_timeout.reset();
    else
      d->idle_timeout = *c.idle_timeout;
  }
}

uint32_t cause_of(const absl::Status& st) {
  return st.code() == absl::StatusCode::kInvalidArgument ? error_cause::kInvalidAttributeValue
         : st.code() == absl::StatusCode::kNotFound      ? error_cause::kSessionContextNotFound
                                                         : error_cause::kResourcesUnavailable;
}

}  // namespace

// The policy a CoA asks for (none when the plan does not change), checked
// as a gRPC upsert's would be. 0, or the Error-Cause with *why.
uint32_t StoreDynAuthBackend::policy_of_change(const SubKey& k, const SubscriberSpec& spec,
                                               const DynAuthChange& c,
                                               std::optional<PolicySpec>* policy,
                                               std::string* why) const {
  const uint32_t max_packet = store_->ports().max_packet_of(k.ifindex);
  if (c.filter_id) {
    auto it = plans_.find(*c.filter_id);
    if (it == plans_.end()) {
      *why = fmt::format("Filter-Id {} names no plan in [plans]", agent::quote_value(*c.filter_id));
      return error_cause::kInvalidAttributeValue;
    }
    *policy = it->second;
  } else if (c.wispr_up || c.wispr_down) {
    PolicySpec p = store_->ports().policy_of(spec);
    if (c.wispr_up) {
      p.up_rate = *c.wispr_up;
      p.up_burst = burst_for(p.up_rate, max_packet);
    }
    if (c.wispr_down) {
      p.down_rate = *c.wispr_down;
      p.down_burst = burst_for(p.down_rate, max_packet);
    }
    *policy = p;
  }
  if (*policy)
    if (absl::Status st = agent::check_policy(**policy, max_packet); !st.ok()) {
      *why = "rate plan: " + std::string(st.message());
      return error_cause::kInvalidAttributeValue;
    }
  return 0;
}

uint32_t StoreDynAuthBackend::change(const SubKey& k, const DynAuthChange& c, std::string* why) {
  SubscriberSpec spec;
  if (!is_radius(k, &spec)) {
    *why = "the session ended meanwhile";
    return error_cause::kSessionContextNotFound;
  }
  const std::string name = agent::key_to_string(k, store_->ports());
  std::optional<PolicySpec> policy;
  if (uint32_t cause = policy_of_change(k, spec, c, &policy, why)) return cause;
  // Session data first (durably): a crash before the upsert leaves the old
  // plan in the maps and the new timers, which the next CoA restates.
  auto before = sessions_->get(k);
  if (!before) {
    *why = "the session ended meanwhile";
    return error_cause::kSessionContextNotFound;
  }
  const uint64_t now = wall_();
  const bool data_changes =
      c.filter_id || c.wispr_up || c.wispr_down || c.session_timeout || c.idle_timeout;
  if (data_changes &&
      !sessions_->update(k, [&](SessionData* d) { apply_to_session_data(c, now, d); })) {
    *why = "the session state file cannot be written";
    return error_cause::kResourcesUnavailable;
  }
  if (policy && !(spec.has_policy && spec.policy == *policy)) {
    SubscriberSpec next = spec;
    next.policy = *policy;
    next.has_policy = true;
    absl::Status st = upsert_validated(store_, next, "CoA-Request");
    if (!st.ok()) {
      sessions_->update(k, [&](SessionData* d) { *d = *before; });
      *why = std::string(st.message());
      return cause_of(st);
    }
  }
  if ((c.session_timeout || c.idle_timeout) && timers_changed_) timers_changed_(k);
  spdlog::info(
      "radius: CoA-Request: subscriber {}: {}{}{}", name,
      policy ? "rate plan " +
                   (c.filter_id ? *c.filter_id + " (" + rates(*policy) + ")" : rates(*policy))
             : std::string("plan unchanged"),
      c.session_timeout ? fmt::format(", Session-Timeout {} s from now", *c.session_timeout)
                        : std::string(),
      c.idle_timeout ? fmt::format(", Idle-Timeout {} s", *c.idle_timeout) : std::string());
  return 0;
}

uint32_t StoreDynAuthBackend::disconnect(const SubKey& k, std::string* why) {
  SubscriberSpec spec;
  if (!is_radius(k, &spec)) {
    *why = "the session ended meanwhile";
    return error_cause::kSessionContextNotFound;
  }
  sessions_->set_end_cause(k, kTerminateAdminReset);
  uint64_t deleted = 0, not_found = 0;
  absl::Status st = store_->remove({k}, &deleted, &not_found);
  if (!st.ok() || deleted == 0) {
    sessions_->take_end_cause(k);
    *why = st.ok() ? std::string("the session ended meanwhile") : std::string(st.message());
    return st.ok() ? error_cause::kSessionContextNotFound : error_cause::kResourcesUnavailable;
  }
  spdlog::info("radius: Disconnect-Request: subscriber {} deleted (Admin-Reset)",
               agent::key_to_string(k, store_->ports()));
  return 0;
}

}  // namespace xbng::radius
