#include "radius/session_table.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/statefile.h"
#include "common/sub_key.h"

namespace xbng::radius {

using json = nlohmann::json;

json session_data_json(const SessionData& d) {
  json j = {{"session_id", d.session_id},
            {"user_name", d.user_name},
            {"classes", json::array()},
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
  if (d.acct_base != AcctCounts{})
    j["acct_base"] = {{"up_bytes", d.acct_base.up_bytes},
                      {"up_packets", d.acct_base.up_packets},
                      {"down_bytes", d.acct_base.down_bytes},
                      {"down_packets", d.acct_base.down_packets}};
  return j;
}

bool session_data_from_json(const json& j, SessionData* d) {
  *d = SessionData{};
  d->session_id = j.at("session_id").get<std::string>();
  d->user_name = j.at("user_name").get<std::string>();
  d->start_unix = j.at("start_unix").get<uint64_t>();
  for (const auto& h : j.at("classes")) {
    const std::string hex = h.get<std::string>();
    if (hex.size() % 2) return false;
    std::string c;
    for (size_t i = 0; i < hex.size(); i += 2) {
      auto nib = [](char x) -> int {
        if (x >= '0' && x <= '9') return x - '0';
        if (x >= 'a' && x <= 'f') return x - 'a' + 10;
        if (x >= 'A' && x <= 'F') return x - 'A' + 10;
        return -1;
      };
      const int a = nib(hex[i]), b = nib(hex[i + 1]);
      if (a < 0 || b < 0) return false;
      c += static_cast<char>(a * 16 + b);
    }
    d->classes.push_back(std::move(c));
  }
  if (j.contains("session_timeout")) d->session_timeout = j["session_timeout"].get<uint32_t>();
  if (j.contains("idle_timeout")) d->idle_timeout = j["idle_timeout"].get<uint32_t>();
  if (j.contains("interim_interval")) d->interim_interval = j["interim_interval"].get<uint32_t>();
  if (j.contains("filter_id")) d->filter_id = j["filter_id"].get<std::string>();
  if (j.contains("acct_started")) d->acct_started = j["acct_started"].get<bool>();
  if (j.contains("acct_base")) {
    const json& b = j["acct_base"];
    d->acct_base.up_bytes = b.at("up_bytes").get<uint64_t>();
    d->acct_base.up_packets = b.at("up_packets").get<uint64_t>();
    d->acct_base.down_bytes = b.at("down_bytes").get<uint64_t>();
    d->acct_base.down_packets = b.at("down_packets").get<uint64_t>();
  }
  return true;
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode 15, table 3-7:
// no overlong forms, no surrogates, nothing beyond U+10FFFF), 0 if none.
size_t utf8_length(std::string_view s, size_t i) {
  auto b = [&](size_t at) { return static_cast<unsigned char>(s[at]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  auto cont = [&](size_t at, unsigned char lo = 0x80, unsigned char hi = 0xbf) {
    return at < s.size() && b(at) >= lo && b(at) <= hi;
  };
  if (c >= 0xc2 && c <= 0xdf) return cont(i + 1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    const unsigned char lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    return cont(i + 1, lo, hi) && cont(i + 2) ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    const unsigned char lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    return cont(i + 1, lo, hi) && cont(i + 2) && cont(i + 3) ? 4 : 0;
  }
  return 0;
}

// A JSON string as nlohmann's dump() writes it (ensure_ascii off): the
// two-character escapes, \u00xx for the other control characters, UTF-8
// as it is. False on a byte sequence that is not UTF-8.
bool append_string(std::string* out, std::string_view s) {
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_length(s, i);
      if (!n) return false;
      out->append(s.data() + i, n);
      i += n;
      continue;
    }
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (c < 0x20)
          fmt::format_to(std::back_inserter(*out), "\\u{:04x}", c);
        else
          *out += static_cast<char>(c);
    }
    ++i;
  }
  *out += '"';
  return true;
}

}  // namespace

bool append_record_json(std::string* out, const SubKey& k, const SessionData& d, bool op_put) {
  const size_t start = out->size();
  auto num = [&](std::string_view key, uint64_t v) {
    fmt::format_to(std::back_inserter(*out), "\"{}\":{},", key, v);
  };
  auto str = [&](std::string_view key, std::string_view v) {
    fmt::format_to(std::back_inserter(*out), "\"{}\":", key);
    if (!append_string(out, v)) return false;
    *out += ',';
    return true;
  };
  // The keys in nlohmann's order (std::map: sorted).
  *out += '{';
  if (d.acct_base != AcctCounts{})
    fmt::format_to(std::back_inserter(*out),
                   R"("acct_base":{{"down_bytes":{},"down_packets":{},"up_bytes":{},)"
                   R"("up_packets":{}}},)",
                   d.acct_base.down_bytes, d.acct_base.down_packets, d.acct_base.up_bytes,
                   d.acct_base.up_packets);
  if (d.acct_started) *out += R"("acct_started":true,)";
  *out += R"("classes":[)";
  for (size_t i = 0; i < d.classes.size(); ++i) {  // Class is binary: kept as hex
    *out += i ? ",\"" : "\"";
    for (unsigned char ch : d.classes[i]) fmt::format_to(std::back_inserter(*out), "{:02x}", ch);
    *out += '"';
  }
  *out += "],";
  bool ok = !d.filter_id || str("filter_id", *d.filter_id);
  if (d.idle_timeout) num("idle_timeout", *d.idle_timeout);
  num("ifindex", k.ifindex);
  num("inner_vlan", k.inner_vid);
  if (d.interim_interval) num("interim_interval", *d.interim_interval);
  if (op_put) *out += R"("op":"put",)";
  num("outer_vlan", k.outer_vid);
  ok = ok && str("session_id", d.session_id);
  if (d.session_timeout) num("session_timeout", *d.session_timeout);
  num("start_unix", d.start_unix);
  ok = ok && str("user_name", d.user_name);
  if (!ok) {
    out->resize(start);
    return false;
  }
  out->back() = '}';
  return true;
}

namespace {

using json = nlohmann::json;
constexpr size_t kMaxFileBytes = size_t{1} << 30;

// Sessions from which a snapshot trims malloc's free memory once written.
constexpr size_t kTrimAfter = 10000;

json to_json(const SubKey& k, const SessionData& d) {
  json j = session_data_json(d);
  j["ifindex"] = k.ifindex;
  j["outer_vlan"] = k.outer_vid;
  j["inner_vlan"] = k.inner_vid;
  return j;
}

bool from_json(const json& j, SubKey* k, SessionData* d) {
  *k = SubKey{};
  k->ifindex = j.at("ifindex").get<uint32_t>();
  k->outer_vid = j.at("outer_vlan").get<uint16_t>();
  k->inner_vid = j.at("inner_vlan").get<uint16_t>();
  return session_data_from_json(j, d);
}

json key_json(const SubKey& k) {
  return {{"ifindex", k.ifindex}, {"outer_vlan", k.outer_vid}, {"inner_vlan", k.inner_vid}};
}

std::string put_line(const SubKey& k, const SessionData& d) {
  std::string line;
  line.reserve(256);
  if (append_record_json(&line, k, d, /*op_put=*/true)) {
    line += '\n';
    return line;
  }
  json j = to_json(k, d);
  j["op"] = "put";
  return j.dump() + "\n";
}

std::string del_line(const SubKey& k) {
  json j = key_json(k);
  j["op"] = "del";
  return j.dump() + "\n";
}

std::string header_line(uint64_t generation) {
  return json{{"generation", generation}}.dump() + "\n";
}

bool write_all(int fd, const std::string& buf, uint64_t off, std::string* error) {
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n =
        ::pwrite(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = std::strerror(errno);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd) != 0) {
    *error = std::string("fdatasync: ") + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

SessionTable::SessionTable(std::string path) : path_(std::move(path)) {}

SessionTable::~SessionTable() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

// The snapshot's records (text: the whole file). Error text naming the
// file and the session otherwise.
std::optional<std::string> SessionTable::load_snapshot_locked(const std::string& text) {
  size_t n = 0;
  try {
    const json j = json::parse(text);
    if (j.contains("generation")) generation_ = j["generation"].get<uint64_t>();
    for (const auto& e : j.at("sessions")) {
      SubKey k;
      SessionData d;
      ++n;
      if (!from_json(e, &k, &d)) return fmt::format("{}: session {}: a malformed Class", path_, n);
      recs_[agent::key_rank(k)] = std::move(d);
    }
  } catch (const std::exception& e) {
    return n ? fmt::format("{}: session {}: {}", path_, n, e.what())
             : fmt::format("{}: {}", path_, e.what());
  }
  return std::nullopt;
}

// One journal line after the header: a record put or deleted.
std::optional<std::string> SessionTable::replay_line_locked(const json& j, size_t line) {
  const std::string op = j.at("op").get<std::string>();
  SubKey k;
  SessionData d;
  if (op == "put") {
    if (!from_json(j, &k, &d))
      return fmt::format("{}: line {}: a malformed Class", log_path(), line);
    recs_[agent::key_rank(k)] = std::move(d);
  } else if (op == "del") {
    k = SubKey{};
    k.ifindex = j.at("ifindex").get<uint32_t>();
    k.outer_vid = j.at("outer_vlan").get<uint16_t>();
    k.inner_vid = j.at("inner_vlan").get<uint16_t>();
    recs_.erase(agent::key_rank(k));
  } else {
    return fmt::format("{}: line {}: unknown op \"{}\"", log_path(), line, op);
  }
  return std::nullopt;
}

// The journal replayed over the snapshot (text: the whole file). A journal
// of another generation is contained in the snapshot; a torn last line is
// a write cut off by a crash, never acknowledged, and dropped.
std::optional<std::string> SessionTable::replay_log_locked(const std::string& text) {
  size_t pos = 0, line = 0;
  bool header = false;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      spdlog::warn("radius: {}: a torn last record ({} bytes) dropped", log_path(),
                   text.size() - pos);
      break;
    }
    ++line;
    const std::string_view l(text.data() + pos, nl - pos);
    try {
      const json j = json::parse(l);
      if (!header) {
        if (j.at("generation").get<uint64_t>() != generation_) break;
        header = true;
      } else if (auto e = replay_line_locked(j, line)) {
        return e;
      }
    } catch (const std::exception& e) {
      return fmt::format("{}: line {}: {}", log_path(), line, e.what());
    }
    pos = nl + 1;
    log_bytes_ = pos;
  }
  if (header) log_state_ = LogState::kAppend;
  return std::nullopt;
}

std::optional<std::string> SessionTable::load() {
  std::lock_guard g(mu_);
  recs_.clear();
  reindex_locked();
  generation_ = 0;
  log_bytes_ = 0;
  log_state_ = LogState::kReset;
  if (path_.empty()) return std::nullopt;
  auto fail = [&](std::string e) {
    recs_.clear();
    reindex_locked();
    log_state_ = LogState::kDamaged;
    return std::optional<std::string>(std::move(e));
  };
  std::string text, error;
  switch (agent::statefile::read(path_, kMaxFileBytes, &text, &error)) {
    case agent::statefile::ReadStatus::kAbsent:
      break;
    case agent::statefile::ReadStatus::kError:
      return fail(error);
    case agent::statefile::ReadStatus::kOk:
      if (auto e = load_snapshot_locked(text)) return fail(*e);
      break;
  }
  text.clear();
  switch (agent::statefile::read(log_path(), kMaxFileBytes, &text, &error)) {
    case agent::statefile::ReadStatus::kAbsent:
      break;
    case agent::statefile::ReadStatus::kError:
      return fail(error);
    case agent::statefile::ReadStatus::kOk:
      if (auto e = replay_log_locked(text)) return fail(*e);
      break;
  }
  reindex_locked();
  return std::nullopt;
}

void SessionTable::retain(const std::function<bool(const SubKey&)>& live) {
  std::unique_lock g(mu_);
  size_t dropped = 0;
  for (auto it = recs_.begin(); it != recs_.end();)
    if (live(agent::key_of_rank(it->first))) {
      ++it;
    } else {
      index_remove_locked(it->first, it->second);
      pending_ += del_line(agent::key_of_rank(it->first));
      ++staged_;
      it = recs_.erase(it);
      ++dropped;
    }
  if (dropped) {
    spdlog::info("radius: {} session record(s) without their subscriber dropped", dropped);
    commit_wait(g);
  }
}

bool SessionTable::open_log_locked(std::string* error) {
  if (log_fd_ >= 0) return true;
  if (log_state_ == LogState::kDamaged) {
    // Left for inspection; the table starts again from what it holds.
    for (const std::string& p : {path_, log_path()})
      if (::access(p.c_str(), F_OK) == 0 && std::rename(p.c_str(), (p + ".damaged").c_str()) != 0) {
        *error = fmt::format("{}: cannot be set aside: {}", p, std::strerror(errno));
        return false;
      }
    spdlog::warn("radius: the damaged session state is kept as {}.damaged", path_);
    log_state_ = LogState::kReset;
  }
  log_fd_ = agent::statefile::open_in_place(log_path(), 0600, error);
  if (log_fd_ < 0) return false;
  if (log_state_ == LogState::kAppend) {
    // Cuts off a torn last record.
    if (::ftruncate(log_fd_, static_cast<off_t>(log_bytes_)) != 0) {
      *error = fmt::format("{}: {}", log_path(), std::strerror(errno));
      ::close(log_fd_);
      log_fd_ = -1;
      return false;
    }
    return true;
  }
  // A new journal: its header names the snapshot's generation.
  const std::string h = header_line(generation_);
  std::string e;
  if (::ftruncate(log_fd_, 0) != 0 || !write_all(log_fd_, h, 0, &e)) {
    *error = fmt::format("{}: {}", log_path(), e.empty() ? std::strerror(errno) : e);
    ::close(log_fd_);
    log_fd_ = -1;
    return false;
  }
  log_bytes_ = h.size();
  log_state_ = LogState::kAppend;
  return true;
}

bool SessionTable::commit_wait(std::unique_lock<std::mutex>& g) {
  if (path_.empty()) {
    pending_.clear();
    return true;
  }
  std::shared_ptr<Batch> mine = open_;
  while (!mine->done) {
    if (writing_) {
      cv_.wait(g);
      continue;
    }
    // This caller writes every change staged so far: one write + fsync.
    writing_ = true;
    std::shared_ptr<Batch> batch = std::move(open_);
    open_ = std::make_shared<Batch>();
    std::string buf;
    buf.swap(pending_);
    const uint64_t lines = staged_;
    staged_ = 0;
    std::string error;
    bool ok = open_log_locked(&error);
    const uint64_t off = log_bytes_;
    g.unlock();
    if (ok) ok = write_all(log_fd_, buf, off, &error);
    g.lock();
    if (ok) {
      log_bytes_ += buf.size();
      ++stats_.commits;
      stats_.records += lines;
    } else {
      spdlog::error("radius: session state: {}: {}", log_path(), error);
      // The journal is cut back to its last good record.
      if (log_fd_ >= 0 && ::ftruncate(log_fd_, static_cast<off_t>(log_bytes_)) != 0) {
        ::close(log_fd_);
        log_fd_ = -1;
        log_state_ = LogState::kReset;
      }
    }
    batch->ok = ok;
    batch->done = true;
    if (ok && log_bytes_ > std::max(compact_min_bytes_, kCompactFactor * live_bytes_locked()))
      compact_locked(g);
    writing_ = false;
    cv_.notify_all();
  }
  return mine->ok;
}

uint64_t SessionTable::live_bytes_locked() const {
  return recs_.size() * (put_bytes_ / std::max<uint64_t>(1, puts_) + 1);
}

void SessionTable::compact_locked(std::unique_lock<std::mutex>& g) {
  // writing_ is held: no other write to the journal meanwhile. Changes staged
  // while the snapshot is written are in it and in the next journal too
  // (replaying a full record twice is harmless).
  //
  // The snapshot is written entry by entry into one string: the bytes of
  // the whole document's dump (its keys sorted: "generation", "sessions"),
  // without a json tree of every session (~1 KB each, which glibc kept in
  // the arena afterwards: hundreds of MB at 1M sessions, and built under
  // the table's lock). A large snapshot gives its pages back once written.
  const uint64_t gen = generation_ + 1;
  std::string text = fmt::format(R"({{"generation":{},"sessions":[)", gen);
  text.reserve(text.size() + recs_.size() * 300);
  bool first = true;
  for (const auto& [rank, d] : recs_) {
    if (!first) text += ',';
    first = false;
    const SubKey k = agent::key_of_rank(rank);
    if (!append_record_json(&text, k, d, /*op_put=*/false)) text += to_json(k, d).dump();
  }
  text += "]}";
  const bool large = recs_.size() >= kTrimAfter;
  g.unlock();
  std::string error;
  bool ok = agent::statefile::write_atomic(path_, text, 0600, /*durable=*/true, &error);
  text = {};
  if (large) malloc_trim(0);
  const std::string h = header_line(gen);
  if (ok && (::ftruncate(log_fd_, 0) != 0 || !write_all(log_fd_, h, 0, &error))) {
    // The snapshot holds everything; a journal of the old generation is
    // ignored at load, so start again with a new file.
    ::close(log_fd_);
    log_fd_ = -1;
    g.lock();
    generation_ = gen;
    log_state_ = LogState::kReset;
    spdlog::error("radius: session state: {}: {}", log_path(), error);
    return;
  }
  g.lock();
  if (!ok) {
    spdlog::error("radius: session state: {}", error);
    return;
  }
  generation_ = gen;
  log_bytes_ = h.size();
  ++stats_.compactions;
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
  return record_many({{k, d}})[0];
}

std::vector<bool> SessionTable::record_many(const std::vector<std::pair<SubKey, SessionData>>& rs) {
  std::unique_lock g(mu_);
  std::vector<std::optional<SessionData>> before(rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    const auto& [k, d] = rs[i];
    const uint64_t rank = agent::key_rank(k);
    if (auto it = recs_.find(rank); it != recs_.end()) {
      before[i] = it->second;
      index_remove_locked(rank, it->second);
    }
    recs_[rank] = d;
    index_add_locked(rank, d);
    std::string line = put_line(k, d);
    put_bytes_ += line.size();
    ++puts_;
    pending_ += line;
    ++staged_;
  }
  if (rs.empty() || commit_wait(g)) return std::vector<bool>(rs.size(), true);
  // Not on disk: the table is as before (unless changed again meanwhile).
  for (size_t i = rs.size(); i-- > 0;) {
    const auto& [k, d] = rs[i];
    const uint64_t rank = agent::key_rank(k);
    auto it = recs_.find(rank);
    if (it == recs_.end() || !(it->second == d)) continue;
    index_remove_locked(rank, it->second);
    if (before[i]) {
      it->second = *before[i];
      index_add_locked(rank, *before[i]);
    } else {
      recs_.erase(it);
    }
  }
  return std::vector<bool>(rs.size(), false);
}

bool SessionTable::update(const SubKey& k, const std::function<void(SessionData*)>& change) {
  std::unique_lock g(mu_);
  const uint64_t rank = agent::key_rank(k);
  auto it = recs_.find(rank);
  if (it == recs_.end()) return false;
  const SessionData before = it->second;
  change(&it->second);
  index_remove_locked(rank, before);
  index_add_locked(rank, it->second);
  const SessionData after = it->second;
  pending_ += put_line(k, after);
  ++staged_;
  if (commit_wait(g)) return true;
  it = recs_.find(rank);
  if (it != recs_.end() && it->second == after) {
    index_remove_locked(rank, it->second);
    it->second = before;
    index_add_locked(rank, before);
  }
  return false;
}

std::vector<SubKey> SessionTable::find_by_session_id(std::string_view id) const {
  std::lock_guard g(mu_);
  std::vector<SubKey> out;
  auto [b, e] = by_session_id_.equal_range(std::string(id));
  for (auto it = b; it != e; ++it) out.push_back(agent::key_of_rank(it->second));
  return out;
}

std::vector<SubKey> SessionTable::find_by_user_name(std::string_view name) const {
  std::lock_guard g(mu_);
  std::vector<SubKey> out;
  auto [b, e] = by_user_name_.equal_range(std::string(name));
  for (auto it = b; it != e; ++it) out.push_back(agent::key_of_rank(it->second));
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
  // Written with the next commit (a record without its subscriber is
  // dropped at the next start anyway).
  pending_ += del_line(k);
  ++staged_;
}

std::optional<SessionData> SessionTable::get(const SubKey& k) const {
  std::lock_guard g(mu_);
  auto it = recs_.find(agent::key_rank(k));
  if (it == recs_.end()) return std::nullopt;
  return it->second;
}

bool SessionTable::read(const SubKey& k, const std::function<void(const SessionData&)>& f) const {
  std::lock_guard g(mu_);
  auto it = recs_.find(agent::key_rank(k));
  if (it == recs_.end()) return false;
  f(it->second);
  return true;
}

void SessionTable::for_each(const std::function<void(const SubKey&, const SessionData&)>& f) const {
  std::lock_guard g(mu_);
  for (const auto& [rank, d] : recs_) f(agent::key_of_rank(rank), d);
}

bool SessionTable::mark_acct_started(const SubKey& k) { return mark_acct_started_many({k})[0]; }

std::vector<bool> SessionTable::mark_acct_started_many(const std::vector<SubKey>& ks) {
  std::unique_lock g(mu_);
  std::vector<bool> out(ks.size(), false);
  std::vector<size_t> marked;  // by this call: undone when the write fails
  for (size_t i = 0; i < ks.size(); ++i) {
    auto it = recs_.find(agent::key_rank(ks[i]));
    if (it == recs_.end()) continue;
    out[i] = true;
    if (it->second.acct_started) continue;
    it->second.acct_started = true;
    pending_ += put_line(ks[i], it->second);
    ++staged_;
    marked.push_back(i);
  }
  if (marked.empty() || commit_wait(g)) return out;
  for (size_t i : marked) {
    out[i] = false;
    auto it = recs_.find(agent::key_rank(ks[i]));
    if (it != recs_.end()) it->second.acct_started = false;
  }
  return out;
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

bool SessionTable::flush() {
  std::unique_lock g(mu_);
  if (pending_.empty()) return true;
  return commit_wait(g);
}

SessionTable::Stats SessionTable::stats() const {
  std::lock_guard g(mu_);
  Stats s = stats_;
  s.log_bytes = log_bytes_;
  return s;
}

}  // namespace xbng::radius
