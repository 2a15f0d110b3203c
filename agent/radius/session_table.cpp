#include "radius/session_table.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "common/statefile.h"

namespace xbng::radius {

namespace {

using json = nlohmann::json;
constexpr size_t kMaxFileBytes = size_t{1} << 30;

SubKey key_of(uint64_t rank) {
  SubKey k{};
  k.ifindex = static_cast<uint32_t>(rank >> 32);
  k.outer_vid = static_cast<uint16_t>(rank >> 16);
  k.inner_vid = static_cast<uint16_t>(rank);
  return k;
}

json to_json(const SubKey& k, const SessionData& d) {
  json j = {{"ifindex", k.ifindex},       {"outer_vlan", k.outer_vid}, {"inner_vlan", k.inner_vid},
            {"session_id", d.session_id}, {"user_name", d.user_name},  {"classes", json::array()},
            {"start_unix", d.start_unix}};
  // Class is binary: kept as hex.
  for (const auto& c : d.classes) {
    std::string hex;
    for (unsigned char ch : c) hex += fmt::format("{:02x}", ch);
    j["classes"].push_back(hex);
  }
  if (d.session_timeout) j["session_timeout"] = *d.session_timeout;
  if (d.idle_timeout) j["idle_timeout"] = *d.idle_timeout;
  if (d.interim_interval) j["interim_interval"] = *d.interim_interval;
  if (d.filter_id) j["filter_id"] = *d.filter_id;
  if (d.acct_started) j["acct_started"] = true;
  return j;
}

bool from_json(const json& j, SubKey* k, SessionData* d) {
  *k = SubKey{};
  k->ifindex = j.at("ifindex").get<uint32_t>();
  k->outer_vid = j.at("outer_vlan").get<uint16_t>();
  k->inner_vid = j.at("inner_vlan").get<uint16_t>();
  d->session_id = j.at("session_id").get<std::string>();
  d->user_name = j.at("user_name").get<std::string>();
  d->start_unix = j.at("start_unix").get<uint64_t>();
  for (const auto& h : j.at("classes")) {
    const std::string hex = h.get<std::string>();
    if (hex.size() % 2) return false;
    std::string c;
    for (size_t i = 0; i < hex.size(); i += 2)
      c += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    d->classes.push_back(std::move(c));
  }
  if (j.contains("session_timeout")) d->session_timeout = j["session_timeout"].get<uint32_t>();
  if (j.contains("idle_timeout")) d->idle_timeout = j["idle_timeout"].get<uint32_t>();
  if (j.contains("interim_interval")) d->interim_interval = j["interim_interval"].get<uint32_t>();
  if (j.contains("filter_id")) d->filter_id = j["filter_id"].get<std::string>();
  if (j.contains("acct_started")) d->acct_started = j["acct_started"].get<bool>();
  return true;
}

}  // namespace

SessionTable::SessionTable(std::string path) : path_(std::move(path)) {}

std::optional<std::string> SessionTable::load() {
  std::lock_guard g(mu_);
  recs_.clear();
  if (path_.empty()) return std::nullopt;
  std::string text, error;
  switch (agent::statefile::read(path_, kMaxFileBytes, &text, &error)) {
    case agent::statefile::ReadStatus::kAbsent:
      return std::nullopt;
    case agent::statefile::ReadStatus::kError:
      return error;
    case agent::statefile::ReadStatus::kOk:
      break;
  }
  try {
    const json j = json::parse(text);
    for (const auto& e : j.at("sessions")) {
      SubKey k;
      SessionData d;
      if (!from_json(e, &k, &d)) return fmt::format("{}: a malformed Class", path_);
      recs_[agent::key_rank(k)] = std::move(d);
    }
  } catch (const std::exception& e) {
    recs_.clear();
    reindex_locked();
    return fmt::format("{}: {}", path_, e.what());
  }
  reindex_locked();
  return std::nullopt;
}

void SessionTable::retain(const std::function<bool(const SubKey&)>& live) {
  std::lock_guard g(mu_);
  size_t dropped = 0;
  for (auto it = recs_.begin(); it != recs_.end();)
    if (live(key_of(it->first))) {
      ++it;
    } else {
      index_remove_locked(it->first, it->second);
      it = recs_.erase(it);
      ++dropped;
    }
  if (dropped) {
    spdlog::info("radius: {} session record(s) without their subscriber dropped", dropped);
    write_locked();
  }
}

bool SessionTable::write_locked() {
  dirty_ = false;
  if (path_.empty()) return true;
  json j = {{"sessions", json::array()}};
  for (const auto& [rank, d] : recs_) j["sessions"].push_back(to_json(key_of(rank), d));
  std::string error;
  if (!agent::statefile::write_atomic(path_, j.dump(), 0600, /*durable=*/true, &error)) {
    spdlog::error("radius: session state: {}", error);
    dirty_ = true;
    return false;
  }
  return true;
}

void SessionTable::index_add_locked(uint64_t rank, const SessionData& d) {
  by_session_id_.emplace(d.session_id, rank);
  by_user_name_.emplace(d.user_name, rank);
}

void SessionTable::index_remove_locked(uint64_t rank, const SessionData& d) {
  for (auto* idx : {&by_session_id_, &by_user_name_}) {
    const std::string& v = idx == &by_session_id_ ? d.session_id : d.user_name;
    auto [b, e] = idx->equal_range(v);
    for (auto it = b; it != e; ++it)
      if (it->second == rank) {
        idx->erase(it);
        break;
      }
  }
}

void SessionTable::reindex_locked() {
  by_session_id_.clear();
  by_user_name_.clear();
  for (const auto& [rank, d] : recs_) index_add_locked(rank, d);
}

bool SessionTable::record(const SubKey& k, const SessionData& d) {
  std::lock_guard g(mu_);
  const uint64_t rank = agent::key_rank(k);
  if (auto it = recs_.find(rank); it != recs_.end()) index_remove_locked(rank, it->second);
  recs_[rank] = d;
  index_add_locked(rank, d);
  return write_locked();
}

bool SessionTable::update(const SubKey& k, const std::function<void(SessionData*)>& change) {
  std::lock_guard g(mu_);
  const uint64_t rank = agent::key_rank(k);
  auto it = recs_.find(rank);
  if (it == recs_.end()) return false;
  const SessionData before = it->second;
  change(&it->second);
  index_remove_locked(rank, before);
  index_add_locked(rank, it->second);
  if (write_locked()) return true;
  index_remove_locked(rank, it->second);
  it->second = before;
  index_add_locked(rank, before);
  return false;
}

std::vector<SubKey> SessionTable::find_by_session_id(std::string_view id) const {
  std::lock_guard g(mu_);
  std::vector<SubKey> out;
  auto [b, e] = by_session_id_.equal_range(std::string(id));
  for (auto it = b; it != e; ++it) out.push_back(key_of(it->second));
  return out;
}

std::vector<SubKey> SessionTable::find_by_user_name(std::string_view name) const {
  std::lock_guard g(mu_);
  std::vector<SubKey> out;
  auto [b, e] = by_user_name_.equal_range(std::string(name));
  for (auto it = b; it != e; ++it) out.push_back(key_of(it->second));
  return out;
}

void SessionTable::on_subscriber_change(const SubKey& k, const SubscriberSpec* now) {
  if (now && now->origin == agent::kOriginRadius) return;
  std::lock_guard g(mu_);
  const uint64_t rank = agent::key_rank(k);
  auto it = recs_.find(rank);
  if (it == recs_.end()) return;
  index_remove_locked(rank, it->second);
  recs_.erase(it);
  dirty_ = true;
}

std::optional<SessionData> SessionTable::get(const SubKey& k) const {
  std::lock_guard g(mu_);
  auto it = recs_.find(agent::key_rank(k));
  if (it == recs_.end()) return std::nullopt;
  return it->second;
}

void SessionTable::for_each(const std::function<void(const SubKey&, const SessionData&)>& f) const {
  std::lock_guard g(mu_);
  for (const auto& [rank, d] : recs_) f(key_of(rank), d);
}

bool SessionTable::mark_acct_started(const SubKey& k) {
  std::lock_guard g(mu_);
  auto it = recs_.find(agent::key_rank(k));
  if (it == recs_.end()) return false;
  if (!it->second.acct_started) {
    it->second.acct_started = true;
    dirty_ = true;
  }
  return true;
}

size_t SessionTable::size() const {
  std::lock_guard g(mu_);
  return recs_.size();
}

void SessionTable::set_end_cause(const SubKey& k, uint32_t acct_terminate_cause) {
  std::lock_guard g(mu_);
  end_causes_[agent::key_rank(k)] = acct_terminate_cause;
}

std::optional<uint32_t> SessionTable::take_end_cause(const SubKey& k) {
  std::lock_guard g(mu_);
  auto it = end_causes_.find(agent::key_rank(k));
  if (it == end_causes_.end()) return std::nullopt;
  uint32_t c = it->second;
  end_causes_.erase(it);
  return c;
}

void SessionTable::flush() {
  std::lock_guard g(mu_);
  if (dirty_) write_locked();
}

}  // namespace xbng::radius
