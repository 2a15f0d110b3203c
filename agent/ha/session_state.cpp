#include "ha/session_state.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "api/convert.h"
#include "etcd/value_codec.h"
#include "xbng/v1/xbng.pb.h"
#include "store/scan.h"

namespace xbng::agent {

using json = nlohmann::json;

std::string encode_session_value(const ReplicatedSession& s, const PortResolver& ports) {
  xbng::v1::Subscriber m;
  spec_to_proto(s.spec, ports, &m);
  m.clear_origin();            // the value's own "origin" says it
  m.clear_effective_policy();  // output only: the store derives it
  json j;
  j["v"] = kSessionValueVersion;
  j["member"] = s.member;
  j["origin"] = s.spec.origin == kOriginRadius ? "radius" : "relay";
  j["subscriber"] = json::parse(encode_subscriber_value(m));
  if (s.radius) j["radius"] = radius::session_data_json(*s.radius);
  return j.dump();
}

std::optional<std::string> decode_session_value(std::string_view value, std::string_view port,
                                                uint32_t outer, uint32_t inner,
                                                const PortResolver& ports, ReplicatedSession* out) {
  *out = ReplicatedSession{};
  const json j = json::parse(value, nullptr, false);
  if (!j.is_object()) return std::string("not a JSON object");
  const auto v = j.find("v");
  if (v == j.end() || !v->is_number_unsigned()) return std::string("no version (\"v\")");
  if (v->get<uint64_t>() != kSessionValueVersion)
    return fmt::format("version {} (this xbngd reads version {})", v->get<uint64_t>(),
                       kSessionValueVersion);
  const auto o = j.find("origin");
  if (o == j.end() || !o->is_string() ||
      (o->get<std::string>() != "radius" && o->get<std::string>() != "relay"))
    return std::string("origin is not \"radius\" or \"relay\"");
  const uint8_t origin = o->get<std::string>() == "radius" ? kOriginRadius : kOriginRelay;
  if (const auto m = j.find("member"); m != j.end()) {
    if (!m->is_string()) return std::string("member is not a string");
    out->member = m->get<std::string>();
  }
  const auto sj = j.find("subscriber");
  if (sj == j.end() || !sj->is_object()) return std::string("no subscriber object");
  xbng::v1::Subscriber msg;
  if (auto e = decode_subscriber_value(sj->dump(), port, outer, inner, &msg))
    return "subscriber: " + *e;
  // Without an address only on a relayed port (addresses from the lease):
  // the active had it, the store's checks decide.
  if (absl::Status st = validate_subscriber(msg, ports, "subscriber", &out->spec, false); !st.ok())
    return std::string(st.message());
  out->spec.origin = origin;
  const auto r = j.find("radius");
  if (origin == kOriginRelay) {
    if (r != j.end()) return std::string("session data for a relay session");
    return std::nullopt;
  }
  if (r == j.end() || !r->is_object()) return std::string("a RADIUS session without its data");
  radius::SessionData d;
  try {
    if (!radius::session_data_from_json(*r, &d)) return std::string("radius: a malformed Class");
  } catch (const std::exception& e) {
    return fmt::format("radius: {}", e.what());
  }
  if (d.session_id.empty()) return std::string("radius: no Acct-Session-Id");
  out->radius = std::move(d);
  return std::nullopt;
}

SessionReplication::SessionReplication(SubscriberStore* store, radius::SessionTable* sessions,
                                       std::string member)
    : store_(store), sessions_(sessions), member_(std::move(member)) {}

std::optional<std::string> SessionReplication::value_of(const SubKey& k) {
  const uint64_t rank = key_rank(k);
  ReplicatedSession s;
  std::optional<Mac> learned;
  const bool is_session = store_->binding(k, &s.spec, &learned) && session_origin(s.spec.origin);
  if (is_session && s.spec.origin == kOriginRadius) {
    // Its record is written before the subscriber and leaves with it.
    if (sessions_) s.radius = sessions_->get(k);
    if (!s.radius) return std::nullopt;
  }
  {
    std::lock_guard l(mu_);
    auto it = reported_.find(rank);
    if (!is_session) {
      if (it != reported_.end()) reported_.erase(it);
      return std::nullopt;
    }
    if (s.radius && it != reported_.end()) s.radius->acct_base = it->second;
  }
  s.member = member_;
  try {
    return encode_session_value(s, store_->ports());
  } catch (const std::exception& e) {  // bytes JSON cannot carry (a User-Name)
    spdlog::warn("ha: session {} not replicated: {}", key_to_string(k, store_->ports()), e.what());
    return std::nullopt;
  }
}

void SessionReplication::reported(const SubKey& k, const radius::AcctCounts& c) {
  std::lock_guard l(mu_);
  reported_[key_rank(k)] = c;
}

int SessionReplication::apply(const SubKey& k, std::string_view port, std::string_view value,
                              bool active, std::string* why) {
  ReplicatedSession s;
  if (auto e = decode_session_value(value, port, k.outer_vid, k.inner_vid, store_->ports(), &s)) {
    *why = *e;
    return -1;
  }
  if (active && s.member == member_) return 0;  // its own write coming back
  SubscriberSpec cur;
  std::optional<Mac> learned;
  const bool have = store_->binding(k, &cur, &learned);
  if (active && have) return 0;  // the active's own state is newer
  if (have && !session_origin(cur.origin)) {
    *why = "the key is provisioned by another source on this member";
    return -1;
  }
  bool changed = false;
  if (s.radius) {
    if (!sessions_) {
      *why = "a RADIUS session on a member without RADIUS";
      return -1;
    }
    // The session data first, as for an Accept: the subscriber never
    // exists as RADIUS's without it.
    auto d = sessions_->get(k);
    if (!d || !(*d == *s.radius)) {
      if (!sessions_->record(k, *s.radius)) {
        *why = "the session state file cannot be written";
        return -1;
      }
      changed = true;
    }
  }
  // An equal subscriber is left alone (an upsert without MAC would make
  // one under mac policy follow learn again).
  if (have && cur.same_provisioning(s.spec)) return changed ? 1 : 0;
  std::vector<SubscriberSpec> one;
  one.push_back(s.spec);
  UpsertResult res;
  if (absl::Status st = store_->upsert(std::move(one), &res); !st.ok()) {
    if (s.radius && !(have && cur.origin == kOriginRadius)) {
      sessions_->on_subscriber_change(k, nullptr);
      sessions_->flush();
    }
    *why = std::string(st.message());
    return -1;
  }
  return 1;
}

bool SessionReplication::remove(const SubKey& k) {
  SubscriberSpec cur;
  std::optional<Mac> learned;
  if (!store_->binding(k, &cur, &learned) || !session_origin(cur.origin)) return false;
  uint64_t deleted = 0, not_found = 0;
  if (absl::Status st = store_->remove({k}, &deleted, &not_found); !st.ok()) {
    spdlog::warn("ha: session {}: delete failed: {}", key_to_string(k, store_->ports()),
                 std::string(st.message()));
    return false;
  }
  return deleted > 0;
}

size_t SessionReplication::prune(const std::function<bool(const SubKey&)>& present) {
  std::vector<SubKey> gone;
  for_each_subscriber(*store_, [&](const SubscriberView& v) {
    if (session_origin(v.spec.origin) && !present(v.spec.key)) gone.push_back(v.spec.key);
  });
  size_t removed = 0;
  constexpr size_t kChunk = 10000;
  for (size_t i = 0; i < gone.size(); i += kChunk) {
    const std::vector<SubKey> chunk(
        gone.begin() + static_cast<std::ptrdiff_t>(i),
        gone.begin() + static_cast<std::ptrdiff_t>(std::min(gone.size(), i + kChunk)));
    uint64_t deleted = 0, not_found = 0;
    if (absl::Status st = store_->remove(chunk, &deleted, &not_found); !st.ok()) {
      spdlog::warn("ha: deleting {} session(s) etcd no longer has failed: {}", chunk.size(),
                   std::string(st.message()));
      break;
    }
    removed += deleted;
  }
  if (removed) spdlog::info("ha: {} session(s) whose key etcd no longer has deleted", removed);
  return removed;
}

}  // namespace xbng::agent
