#include "ha/replica.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "fleet/fleet.h"
#include "fleet/kv.h"

namespace xbng::agent {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string ha_state_prefix(std::string_view group) {
  return fmt::format("{}ha/{}/state/", kKeyRoot, group);
}

namespace {

constexpr const char* kKindName[] = {"lease4", "lease6", "mac", "session"};
constexpr int64_t kReadPage = 10000;

uint64_t unix_seconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// A lease value as written by render_lease(); nullopt when a field is
// missing or of the wrong kind.
std::optional<Lease> parse_lease(const std::string& text, int family) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto addr = j.find("address"), pf = j.find("prefixes"), b = j.find("bound_unix"),
       e = j.find("expires_unix");
  if (addr == j.end() || !addr->is_string() || pf == j.end() || !pf->is_array() || b == j.end() ||
      !b->is_number_unsigned() || e == j.end() || !e->is_number_unsigned())
    return std::nullopt;
  Lease l;
  l.bound = true;
  l.address = addr->get<std::string>();
  if (family == 4 ? !parse_ipv4(l.address) : !l.address.empty() && !parse_ipv6(l.address))
    return std::nullopt;
  for (const auto& p : *pf) {
    if (!p.is_string() || !parse_prefix(p.get<std::string>(), family)) return std::nullopt;
    l.prefixes.push_back(p.get<std::string>());
  }
  l.bound_unix = b->get<uint64_t>();
  l.expires_unix = e->get<uint64_t>();
  if (l.expires_unix < l.bound_unix) return std::nullopt;
  if (auto s = j.find("server"); s != j.end()) {
    if (!s->is_string()) return std::nullopt;
    l.server = s->get<std::string>();
  }
  return l;
}

}  // namespace

HaReplica::HaReplica(std::string group, std::string member, std::unique_ptr<fleet::Kv> kv,
                     PortResolver ports, Hooks hooks)
    : group_(std::move(group)),
      member_(std::move(member)),
      prefix_(ha_state_prefix(group_)),
      kv_(std::move(kv)),
      ports_(std::move(ports)),
      hooks_(std::move(hooks)) {
  writer_ = std::thread([this] { write_loop(); });
  watcher_ = std::thread([this] { watch_loop(); });
}

HaReplica::~HaReplica() { stop(); }

void HaReplica::stop() {
  {
    std::lock_guard l(mu_);
    if (stop_) return;
    stop_ = true;
    if (watch_) watch_->cancel();
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (writer_.joinable()) writer_.join();  // its last flush sends what is queued
}

bool HaReplica::sleep_for(milliseconds d) {
  std::unique_lock l(mu_);
  return !cv_.wait_for(l, d, [&] { return stop_; });
}

std::string HaReplica::key_of(Kind kind, const SubKey& k) const {
  return fmt::format("{}{}/{}/{}/{}", prefix_, kKindName[kind],
                     ports_.name ? ports_.name(k.ifindex) : std::to_string(k.ifindex), k.outer_vid,
                     k.inner_vid);
}

void HaReplica::queue(Kind kind, const SubKey& k, std::optional<std::string> value) {
  std::lock_guard l(mu_);
  pending_[{kind, key_rank(k)}].value = std::move(value);
  ++st_.queued;
}

void HaReplica::lease_changed(const SubKey& k, LeaseFamily f, const Lease* now) {
  if (!hooks_.active()) return;
  std::optional<std::string> v;
  if (now && now->bound) {
    nlohmann::json j;
    j["address"] = now->address;
    j["prefixes"] = now->prefixes;
    j["bound_unix"] = now->bound_unix;
    j["expires_unix"] = now->expires_unix;
    if (!now->server.empty()) j["server"] = now->server;
    j["member"] = member_;
    v = j.dump();
  }
  queue(f == LeaseFamily::kV4 ? kLease4 : kLease6, k, std::move(v));
}

void HaReplica::mac_learned(const SubKey& k, const Mac& mac) {
  if (!hooks_.active()) return;
  nlohmann::json j;
  j["mac"] = format_mac(mac.data());
  j["member"] = member_;
  queue(kMac, k, j.dump());
}

void HaReplica::subscriber_gone(const SubKey& k) {
  if (!hooks_.active()) return;
  queue(kMac, k, std::nullopt);
}

void HaReplica::session_changed(const SubKey& k, bool session) {
  if (!hooks_.active() || !hooks_.session_value) return;
  std::lock_guard l(mu_);
  const uint64_t rank = key_rank(k);
  if (!session && !sessions_.contains(rank)) return;  // never a session: no key to delete
  Pending& p = pending_[{kSession, rank}];
  p.value.reset();
  p.render = true;
  ++st_.queued;
}

void HaReplica::write_loop() {
  for (;;) {
    const bool more = sleep_for(kHaFlushInterval);
    flush();
    if (!more) return;
  }
}

// Sends what is queued, kHaTxnOps operations a transaction. A failed
// transaction's operations go back to the queue unless a newer change of
// the same key came meanwhile.
void HaReplica::flush() {
  decltype(pending_) batch;
  {
    std::lock_guard l(mu_);
    batch.swap(pending_);
  }
  if (batch.empty()) return;
  std::vector<std::pair<std::pair<uint8_t, uint64_t>, Pending>> items(batch.begin(), batch.end());
  // Sessions first: a standby applies in this order, and a lease applied
  // before its subscriber exists would be ended by the subscriber's creation.
  std::stable_partition(items.begin(), items.end(),
                        [](const auto& it) { return it.first.first == kSession; });
  // A session's value as it is now (nullopt: its key goes); a key etcd does
  // not have and that is no session is nothing to write.
  for (auto& [id, p] : items)
    if (p.render) p.value = hooks_.session_value(key_of_rank(id.second));
  {
    std::lock_guard l(mu_);
    std::erase_if(items, [&](const auto& it) {
      return it.first.first == kSession && !it.second.value && !sessions_.contains(it.first.second);
    });
  }
  if (items.empty()) return;
  for (size_t i = 0; i < items.size(); i += kHaTxnOps) {
    const size_t end = std::min(items.size(), i + kHaTxnOps);
    std::vector<fleet::TxnOp> ops;
    uint64_t bytes = 0;
    for (size_t j = i; j < end; ++j) {
      const auto& [id, p] = items[j];
      fleet::TxnOp op;
      op.type = p.value ? fleet::TxnOp::Type::kPut : fleet::TxnOp::Type::kDelete;
      op.key = key_of(static_cast<Kind>(id.first), key_of_rank(id.second));
      if (p.value) op.value = *p.value;
      bytes += op.key.size() + op.value.size();
      ops.push_back(std::move(op));
    }
    auto c = kv_->conn();
    absl::Status s = c->txn(ops, milliseconds(2000));
    std::lock_guard l(mu_);
    if (s.ok()) {
      st_.written += ops.size();
      st_.bytes += bytes;
      ++st_.txns;
      for (size_t j = i; j < end; ++j)
        if (items[j].first.first == kSession) {
          if (items[j].second.value)
            sessions_.insert(items[j].first.second);
          else
            sessions_.erase(items[j].first.second);
        }
      continue;
    }
    kv_->failed(c, s);
    ++st_.write_errors;
    const auto now = Clock::now();
    if (now - last_warn_ >= std::chrono::seconds(30)) {  // not at every flush of an outage
      last_warn_ = now;
      spdlog::warn(
          "ha: state replication: a transaction of {} operation(s) failed: {}; {} change(s) "
          "kept for the next flush ({} failed transactions so far)",
          ops.size(), fleet::status_text(s), items.size() - i, st_.write_errors);
    }
    for (size_t j = i; j < items.size(); ++j) {
      Pending p = items[j].second;
      if (p.render) p.value.reset();  // read again at the next flush
      pending_.try_emplace(items[j].first, std::move(p));
    }
    return;
  }
}

void HaReplica::watch_loop() {
  int attempt = 0;
  while (true) {
    {
      std::unique_lock l(mu_);
      if (stop_) return;
    }
    if (hooks_.ready && !hooks_.ready()) {
      if (!sleep_for(milliseconds(200))) return;
      continue;
    }
    int64_t rev = 0;
    if (full_read(&rev)) {
      attempt = 0;
      watch_from(rev + 1);
    }
    if (!sleep_for(milliseconds(std::min(5000, 200 << std::min(attempt++, 5))))) return;
  }
}

bool HaReplica::read_range(const std::shared_ptr<fleet::KvConn>& c, const std::string& key,
                           const std::string& end, int64_t* rev, uint64_t* n,
                           const std::function<void(const fleet::KeyValue&)>& each) {
  fleet::RangeRequest rq;
  rq.key = key;
  rq.range_end = end;
  rq.limit = kReadPage;
  rq.revision = *rev;
  for (;;) {
    fleet::RangeResponse rs;
    if (absl::Status s = c->range(rq, milliseconds(10000), &rs); !s.ok()) {
      kv_->failed(c, s);
      spdlog::debug("ha: state replication: read: {}", fleet::status_text(s));
      return false;
    }
    if (!rq.revision) rq.revision = rs.header.revision;
    for (const auto& kv : rs.kvs) each(kv);
    *n += rs.kvs.size();
    if (!rs.more || rs.kvs.empty()) break;
    rq.key = rs.kvs.back().key + '\0';
  }
  *rev = rq.revision;
  return true;
}

// Every state key at one revision, applied; *rev is that revision. The
// sessions first (their subscribers must exist before their leases), then
// the rest; a standby then deletes the sessions etcd does not have.
bool HaReplica::full_read(int64_t* rev) {
  auto c = kv_->conn();
  const std::string sess = prefix_ + kKindName[kSession] + "/";
  const std::string sess_end = prefix_range_end(sess);
  int64_t at = 0;
  uint64_t n = 0;
  absl::flat_hash_set<uint64_t> present;
  auto apply_session = [&](const fleet::KeyValue& kv) {
    if (auto k = apply(kv, false)) present.insert(key_rank(*k));
  };
  auto apply_other = [&](const fleet::KeyValue& kv) { apply(kv, false); };
  if (!read_range(c, sess, sess_end, &at, &n, apply_session) ||
      !read_range(c, prefix_, sess, &at, &n, apply_other) ||
      !read_range(c, sess_end, prefix_range_end(prefix_), &at, &n, apply_other))
    return false;
  *rev = at;
  size_t pruned = 0;
  if (hooks_.prune_sessions && !hooks_.active())
    pruned = hooks_.prune_sessions([&](const SubKey& k) { return present.contains(key_rank(k)); });
  std::lock_guard l(mu_);
  ++st_.full_reads;
  // What etcd has now; an active keeps what it wrote since the read too.
  if (hooks_.session_value && !hooks_.active())
    sessions_.swap(present);
  else if (hooks_.session_value)
    sessions_.insert(present.begin(), present.end());
  spdlog::info(
      "ha: state replication: {} key(s) of {} read at revision {} ({} session(s) without a key "
      "deleted); watching",
      n, prefix_, *rev, pruned);
  return true;
}

void HaReplica::watch_from(int64_t rev) {
  auto c = kv_->conn();
  std::unique_ptr<fleet::WatchStream> w;
  if (absl::Status s = c->watch(&w); !s.ok()) {
    kv_->failed(c, s);
    return;
  }
  {
    std::lock_guard l(mu_);
    if (stop_) return;
    watch_ = w.get();
  }
  w->create(prefix_, prefix_range_end(prefix_), rev);
  fleet::WatchResponse r;
  while (w->read(&r)) {
    if (r.canceled) break;
    for (const auto& e : r.events) apply(e.kv, e.type == fleet::WatchEvent::Type::kDelete);
  }
  {
    std::lock_guard l(mu_);
    watch_ = nullptr;
  }
  w->cancel();
  if (absl::Status s = w->finish(); !s.ok() && s.code() != absl::StatusCode::kCancelled)
    kv_->failed(c, s);
}

// One key from etcd. The active skips its own writes coming back (its
// state is newer); a lease older than the one held is ignored by the
// table, so a late write of a former active cannot roll a renewal back.
// Returns the key when it names a subscriber of this member.
std::optional<SubKey> HaReplica::apply(const fleet::KeyValue& kv, bool deleted) {
  auto refuse = [&](std::string_view why) -> std::optional<SubKey> {
    spdlog::warn("ha: state replication: key {} refused: {}", escape_bytes(kv.key), why);
    std::lock_guard l(mu_);
    ++st_.refused;
    return std::nullopt;
  };
  std::string_view rest(kv.key);
  rest.remove_prefix(std::min(rest.size(), prefix_.size()));
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return refuse("no kind");
  const std::string_view kind = rest.substr(0, slash);
  std::string port;
  uint32_t outer = 0, inner = 0;
  if (parse_subscriber_key_suffix(rest.substr(slash + 1), &port, &outer, &inner))
    return refuse("not <port>/<outer>/<inner>");
  auto ifx = ports_.access_ifindex ? ports_.access_ifindex(port) : std::nullopt;
  if (!ifx) return std::nullopt;  // a port this member does not have
  SubKey k{};
  k.ifindex = *ifx;
  k.outer_vid = static_cast<uint16_t>(outer);
  k.inner_vid = static_cast<uint16_t>(inner);
  const bool active = hooks_.active();
  bool changed = false;
  if (kind == "session") {
    if (!hooks_.apply_session) return k;
    if (deleted) {
      // The active ignores deletes: its own come back after it may have
      // written the key again (its own writes keep sessions_).
      if (!active) {
        {
          std::lock_guard l(mu_);
          sessions_.erase(key_rank(k));
        }
        changed = hooks_.remove_session(k);
      }
    } else {
      std::string why;
      const int r = hooks_.apply_session(k, port, kv.value, active, &why);
      if (r < 0) {
        refuse(why);
        return k;
      }
      changed = r > 0;
      std::lock_guard l(mu_);
      sessions_.insert(key_rank(k));
    }
  } else if (kind == "lease4" || kind == "lease6") {
    if (!hooks_.leases) return k;
    const LeaseFamily f = kind == "lease4" ? LeaseFamily::kV4 : LeaseFamily::kV6;
    if (deleted) {
      if (!active) changed = hooks_.leases->apply_replica(k, f, nullptr, unix_seconds());
    } else {
      auto l = parse_lease(kv.value, f == LeaseFamily::kV4 ? 4 : 6);
      if (!l) return refuse("not a lease");
      changed = hooks_.leases->apply_replica(k, f, &*l, unix_seconds());
    }
  } else if (kind == "mac") {
    if (deleted) return k;
    auto j = nlohmann::json::parse(kv.value, nullptr, false);
    std::optional<Mac> mac;
    if (j.is_object() && j.contains("mac") && j["mac"].is_string())
      mac = parse_mac(j["mac"].get<std::string>());
    if (!mac) return refuse("not a MAC");
    if (active && j.value("member", "") == member_) return k;
    changed = hooks_.apply_mac && hooks_.apply_mac(k, *mac);
  } else {
    return refuse("unknown kind");
  }
  if (changed) {
    std::lock_guard l(mu_);
    ++st_.applied;
  }
  return k;
}

HaReplicaStats HaReplica::stats() const {
  std::lock_guard l(mu_);
  HaReplicaStats s = st_;
  s.pending = pending_.size();
  return s;
}

std::string HaReplica::render_metrics() const {
  const HaReplicaStats s = stats();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, uint64_t v) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n{}{{group=\"{}\"}} {}\n",
                   name, help, name, type, name, group_, v);
  };
  metric("xbng_ha_replication_queued_total", "counter",
         "state changes queued for etcd by the active (before coalescing)", s.queued);
  metric("xbng_ha_replication_written_total", "counter", "state operations written to etcd",
         s.written);
  metric("xbng_ha_replication_txns_total", "counter", "etcd transactions of state replication",
         s.txns);
  metric("xbng_ha_replication_bytes_total", "counter", "bytes of keys and values written", s.bytes);
  metric("xbng_ha_replication_write_errors_total", "counter",
         "failed state transactions (their operations stay queued)", s.write_errors);
  metric("xbng_ha_replication_applied_total", "counter",
         "replicated changes applied to this member", s.applied);
  metric("xbng_ha_replication_refused_total", "counter", "state keys from etcd that did not parse",
         s.refused);
  metric("xbng_ha_replication_pending", "gauge", "state changes queued now", s.pending);
  return out;
}

}  // namespace xbng::agent
