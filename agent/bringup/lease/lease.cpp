#include "bringup/lease/lease.h"

#include <absl/container/flat_hash_map.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <malloc.h>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/net.h"
#include "bringup/punt/counters.h"
#include "common/statefile.h"
#include "common/thread_priority.h"

using json = nlohmann::json;

namespace xbng::agent {

namespace {

// Bound leases from which a state file write trims malloc's free memory,
// and how often at most. malloc_trim(0) locks each of malloc's arenas in
// turn while it gives back its free pages, those of the threads that run at
// real-time priority too (punt.realtime_priority): this thread, of the
// default policy, preempted by the host's other work while it holds one,
// kept a relayed ACK's bind waiting 20 to 40 ms. Once a minute: the
// arenas hold at most one flush's copy in between, which the next flush
// reuses.
constexpr size_t kTrimAfter = 10000;
// Keys per hold of the lock while flush() collects and copies the leases.
constexpr size_t kFlushChunk = 256;
constexpr uint64_t kTrimEveryNs = 60ull * 1000000000ull;

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// s as a JSON string, as nlohmann's dump() writes it: printable ASCII
// straight, anything else through nlohmann (its escapes).
void append_json_string(std::string& out, std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += json(std::string(s)).dump();
      return;
    }
  out += '"';
  out += s;
  out += '"';
}

uint64_t now_seconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// One bound lease as the lease file writes it.
struct FlushEntry {
  std::string port;
  SubKey key;
  int family;
  Lease lease;
};

// The lease file of `bound`, written straight into one string: the bytes
// nlohmann's dump() of the same document gives (keys in order, compact).
// The file is rewritten whole, and building a JSON tree of every lease
// first cost ~3 µs per lease (at 1M sessions, seconds per rewrite).
std::string lease_file_text(const std::vector<FlushEntry>& bound) {
  std::string text;
  text.reserve(64 + bound.size() * 200);
  text += R"({"leases":[)";
  std::string_view last_port;
  std::string port_json;
  for (size_t i = 0; i < bound.size(); ++i) {
    const auto& [port, k, f, l] = bound[i];
    if (port != last_port) {
      port_json.clear();
      append_json_string(port_json, port);
      last_port = port;
    }
    if (i) text += ',';
    text += R"({"address":)";
    append_json_string(text, l.address);
    fmt::format_to(std::back_inserter(text),
                   R"(,"bound_unix":{},"expires_unix":{},"family":"{}","inner_vlan":{},)"
                   R"("outer_vlan":{},"port":)",
                   l.bound_unix, l.expires_unix, f == 0 ? "ipv4" : "ipv6", k.inner_vid,
                   k.outer_vid);
    text += port_json;
    text += R"(,"prefixes":[)";
    for (size_t j = 0; j < l.prefixes.size(); ++j) {
      if (j) text += ',';
      append_json_string(text, l.prefixes[j]);
    }
    text += ']';
    if (!l.server.empty()) {
      text += R"(,"server":)";
      append_json_string(text, l.server);
    }
    text += '}';
  }
  text += R"(],"version":1})";
  text += '\n';
  return text;
}

}  // namespace

LeaseTable::LeaseTable(EventHub* hub, PortResolver ports, std::string state_file)
    : hub_(hub), ports_(std::move(ports)), file_(std::move(state_file)) {
  if (!file_.empty()) load();
}

LeaseTable::~LeaseTable() { stop(); }

void LeaseTable::reserve(size_t n) {
  std::lock_guard g(mu_);
  leases_.reserve(n);
}

void LeaseTable::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
  set_thread_name(thread_, "xbng-lease");
}

void LeaseTable::stop() {
  if (thread_.joinable()) {
    stop_ = true;
    run_cv_.notify_all();
    thread_.join();
  }
  flush();
}

void LeaseTable::run() {
  // The whole file is rewritten: keep that under ~5% of the time (60K
  // subscribers' leases take ~0.14 s to write here, so they are rewritten
  // every ~3 s; the loss window on a crash grows with the table, see
  // docs/design.md).
  std::unique_lock l(run_mu_);
  auto next_flush = std::chrono::steady_clock::now();
  while (!stop_) {
    run_cv_.wait_for(l, std::chrono::seconds(1));
    if (stop_) break;
    expire(now_seconds());
    const auto t0 = std::chrono::steady_clock::now();
    if (t0 < next_flush) continue;
    flush();
    const auto took = std::chrono::steady_clock::now() - t0;
    next_flush =
        t0 + std::max<std::chrono::steady_clock::duration>(std::chrono::seconds(1), took * 20);
  }
}

void LeaseTable::publish(EventType type, const SubKey& k, LeaseFamily f, const Lease& l,
                         uint64_t now_unix) {
  (void)now_unix;
  if (!hub_ || !hub_->has_watchers()) return;
  AgentEvent e;
  e.type = type;
  e.key = k;
  e.timestamp_unix_ns = unix_now_ns();
  e.lease_family = f == LeaseFamily::kV4 ? 4 : 6;
  e.lease_bound = l.bound;
  e.lease_expires_unix = l.bound ? l.expires_unix : 0;
  e.lease_address = l.address;
  e.lease_prefixes = l.prefixes;
  hub_->publish(e);
}

void LeaseTable::bind(const SubKey& k, LeaseFamily f, std::string address,
                      std::vector<std::string> prefixes, uint32_t lifetime_s, uint64_t now_unix,
                      std::string server) {
  std::lock_guard g(mu_);
  const uint64_t rank = key_rank(k);
  Lease& l = leases_[rank][static_cast<int>(f)];
  const bool renew = l.bound && l.address == address && l.prefixes == prefixes;
  if (l.bound) by_expiry_.erase({l.expires_unix, rank, static_cast<int>(f)});
  l.bound = true;
  l.address = std::move(address);
  l.prefixes = std::move(prefixes);
  l.server = std::move(server);
  l.bound_unix = now_unix;
  l.expires_unix = now_unix + lifetime_s;
  by_expiry_.insert({l.expires_unix, rank, static_cast<int>(f)});
  if (collecting_) bound_meanwhile_.push_back(rank);
  dirty_ = true;
  publish(renew ? EventType::kLeaseRenewed : EventType::kLeaseBound, k, f, l, now_unix);
  if (observer_ && !renew) observer_(k, f, EventType::kLeaseBound);
  if (sink_) sink_(k, f, &l);
}

void LeaseTable::release(const SubKey& k, LeaseFamily f, uint64_t now_unix) {
  std::lock_guard g(mu_);
  auto it = leases_.find(key_rank(k));
  if (it == leases_.end()) return;
  Lease& l = it->second[static_cast<int>(f)];
  if (!l.bound) return;
  by_expiry_.erase({l.expires_unix, key_rank(k), static_cast<int>(f)});
  l.bound = false;
  dirty_ = true;
  publish(EventType::kLeaseReleased, k, f, l, now_unix);
  if (observer_) observer_(k, f, EventType::kLeaseReleased);
  if (sink_) sink_(k, f, nullptr);
}

bool LeaseTable::holds(const SubscriberSpec& s, LeaseFamily f, const Lease& l) {
  if (f == LeaseFamily::kV4) return s.has_ipv4 && l.address == format_ipv4(s.ipv4);
  if (!l.address.empty() && !(s.has_ipv6 && l.address == format_ipv6(s.ipv6.data()))) return false;
  for (const auto& p : l.prefixes) {
    bool held = false;
    for (const auto& q : s.prefixes) held = held || (q.family == 6 && format_prefix(q) == p);
    if (!held) return false;
  }
  return true;
}

void LeaseTable::end_locked(uint64_t rank, Slot& slot, int f) {
  Lease& l = slot[f];
  by_expiry_.erase({l.expires_unix, rank, f});
  l.bound = false;
  dirty_ = true;
  count(AgentReason::kLEASE_ENDED_DEPROVISIONED);
  publish(EventType::kLeaseReleased, key_of_rank(rank), static_cast<LeaseFamily>(f), l, 0);
  if (sink_) sink_(key_of_rank(rank), static_cast<LeaseFamily>(f), nullptr);
  l = Lease{};  // its address is no longer this subscriber's to show
}

size_t LeaseTable::on_subscriber_change(const SubKey& k, const SubscriberSpec* now, bool created) {
  std::lock_guard g(mu_);
  // Without leases (static provisioning) a change costs the lock only, not
  // a probe of a reserved table: a bulk load changes every subscriber.
  if (leases_.empty()) return 0;
  auto it = leases_.find(key_rank(k));
  if (it == leases_.end()) return 0;
  size_t n = 0;
  for (int f = 0; f < 2; ++f) {
    Lease& l = it->second[f];
    if (now && !created && holds(*now, static_cast<LeaseFamily>(f), l)) continue;
    if (l.bound) {
      end_locked(it->first, it->second, f);
      ++n;
    } else {
      l = Lease{};
    }
  }
  if (it->second[0] == Lease{} && it->second[1] == Lease{}) leases_.erase(it);
  return n;
}

void LeaseTable::confirm(const SubKey& k, LeaseFamily f, const SubscriberSpec* now) {
  std::lock_guard g(mu_);
  auto it = leases_.find(key_rank(k));
  if (it == leases_.end()) return;
  Lease& l = it->second[static_cast<int>(f)];
  if (!l.bound || (now && holds(*now, f, l))) return;
  end_locked(it->first, it->second, static_cast<int>(f));
}

size_t LeaseTable::retain_owned(const std::function<bool(const SubKey&, SubscriberSpec*)>& lookup) {
  constexpr size_t kLogged = 10;
  std::lock_guard g(mu_);
  size_t dropped = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    const SubKey k = key_of_rank(it->first);
    SubscriberSpec s;
    const bool found = lookup(k, &s);
    for (int f = 0; f < 2; ++f) {
      Lease& l = it->second[f];
      if (!l.bound || (found && holds(s, static_cast<LeaseFamily>(f), l))) continue;
      if (++dropped <= kLogged)
        spdlog::warn("lease state {}: dropped the {} lease {} of {}/{}/{}: {}", file_,
                     f == 0 ? "ipv4" : "ipv6", l.address.empty() ? "(prefixes only)" : l.address,
                     ports_.name ? ports_.name(k.ifindex) : std::to_string(k.ifindex), k.outer_vid,
                     k.inner_vid,
                     found ? "the subscriber no longer holds it"
                           : "the subscriber is no longer provisioned");
      by_expiry_.erase({l.expires_unix, it->first, f});
      l = Lease{};
      dirty_ = true;
    }
    if (it->second[0] == Lease{} && it->second[1] == Lease{})
      leases_.erase(it++);
    else
      ++it;
  }
  if (dropped)
    spdlog::warn(
        "lease state {}: {} restored lease(s) dropped: their subscriber is no longer "
        "provisioned or no longer holds the address",
        file_, dropped);
  return dropped;
}

std::optional<Lease> LeaseTable::get(const SubKey& k, LeaseFamily f) const {
  std::lock_guard g(mu_);
  auto it = leases_.find(key_rank(k));
  if (it == leases_.end()) return std::nullopt;
  const Lease& l = it->second[static_cast<int>(f)];
  if (!l.bound && l.address.empty() && l.prefixes.empty()) return std::nullopt;
  return l;
}

size_t LeaseTable::expire(uint64_t now_unix) {
  std::vector<std::tuple<SubKey, LeaseFamily, Lease>> ended;
  {
    std::lock_guard g(mu_);
    while (!by_expiry_.empty()) {
      auto [exp, rank, fam] = *by_expiry_.begin();
      if (exp > now_unix) break;
      by_expiry_.erase(by_expiry_.begin());
      Lease& l = leases_[rank][fam];
      l.bound = false;
      dirty_ = true;
      count(AgentReason::kLEASE_EXPIRED);
      publish(EventType::kLeaseExpired, key_of_rank(rank), static_cast<LeaseFamily>(fam), l,
              now_unix);
      if (observer_)
        observer_(key_of_rank(rank), static_cast<LeaseFamily>(fam), EventType::kLeaseExpired);
      if (sink_) sink_(key_of_rank(rank), static_cast<LeaseFamily>(fam), nullptr);
      ended.emplace_back(key_of_rank(rank), static_cast<LeaseFamily>(fam), l);
    }
  }
  if (expiry_hook_)
    for (const auto& [k, f, l] : ended) expiry_hook_(k, f, l);
  return ended.size();
}

bool LeaseTable::apply_replica(const SubKey& k, LeaseFamily f, const Lease* in, uint64_t now_unix) {
  std::lock_guard g(mu_);
  const uint64_t rank = key_rank(k);
  const int fi = static_cast<int>(f);
  auto it = leases_.find(rank);
  if (!in) {
    if (it == leases_.end() || !it->second[fi].bound) return false;
    by_expiry_.erase({it->second[fi].expires_unix, rank, fi});
    it->second[fi] = Lease{};
    if (it->second[0] == Lease{} && it->second[1] == Lease{}) leases_.erase(it);
    dirty_ = true;
    return true;
  }
  if (!in->bound || in->expires_unix <= now_unix) return false;
  if (it != leases_.end()) {
    const Lease& cur = it->second[fi];
    if (cur.bound && (cur.bound_unix > in->bound_unix || cur == *in)) return false;
  }
  Lease& l = leases_[rank][fi];
  if (l.bound) by_expiry_.erase({l.expires_unix, rank, fi});
  l = *in;
  by_expiry_.insert({l.expires_unix, rank, fi});
  if (collecting_) bound_meanwhile_.push_back(rank);
  dirty_ = true;
  return true;
}

size_t LeaseTable::size() const {
  std::lock_guard g(mu_);
  return by_expiry_.size();
}

std::optional<Lease> LeaseTable::get(std::string_view port, uint32_t outer_vlan,
                                     uint32_t inner_vlan, LeaseFamily f) const {
  auto idx = ports_.access_ifindex ? ports_.access_ifindex(port) : std::nullopt;
  if (!idx) return std::nullopt;
  SubKey k{};
  k.ifindex = *idx;
  k.outer_vid = static_cast<uint16_t>(outer_vlan);
  k.inner_vid = static_cast<uint16_t>(inner_vlan);
  return get(k, f);
}

// The keys of the bound leases, collected kFlushChunk at a time from the
// expiry index (resuming after the last one taken), the lock released in
// between; a lease bound meanwhile may move behind the cursor, so bind()
// notes those keys. False (nothing collected) when nothing changed since
// the last write.
bool LeaseTable::bound_keys(std::vector<uint64_t>* ranks) {
  {
    std::lock_guard g(mu_);
    if (!dirty_) return false;
    dirty_ = false;
    collecting_ = true;
    bound_meanwhile_.clear();
    ranks->reserve(by_expiry_.size());
  }
  std::tuple<uint64_t, uint64_t, int> cursor{0, 0, -1};
  for (bool more = true; more;) {
    std::lock_guard g(mu_);
    auto it = by_expiry_.upper_bound(cursor);
    for (size_t n = 0; it != by_expiry_.end() && n < kFlushChunk; ++it, ++n)
      ranks->push_back(std::get<1>(*it));
    more = it != by_expiry_.end();
    if (more) cursor = *std::prev(it);
    if (!more) {
      collecting_ = false;
      ranks->insert(ranks->end(), bound_meanwhile_.begin(), bound_meanwhile_.end());
      bound_meanwhile_ = {};
    }
  }
  std::sort(ranks->begin(), ranks->end());
  ranks->erase(std::unique(ranks->begin(), ranks->end()), ranks->end());
  return true;
}

bool LeaseTable::flush() {
  if (file_.empty()) return true;
  // The bound leases are copied under the lock and serialized outside it:
  // the DHCP servers binding meanwhile never wait for the JSON. The copy
  // itself (strings: ~5 allocations a lease) is made kFlushChunk keys at a
  // time, the lock released in between, so that a bind (a relayed ACK, on
  // a thread that may run at real-time priority) waits for one chunk at
  // most, not for the whole table (tens of ms at 60,000 subscribers, more
  // when this thread is preempted holding the lock). Each lease is written
  // as it was at some moment of the flush; a change during it sets dirty_
  // again and the next flush writes it.
  std::vector<uint64_t> ranks;
  if (!bound_keys(&ranks)) return true;
  std::vector<FlushEntry> bound;
  bound.reserve(ranks.size() * 2);
  for (size_t i = 0; i < ranks.size(); i += kFlushChunk) {
    std::lock_guard g(mu_);
    for (size_t j = i; j < std::min(ranks.size(), i + kFlushChunk); ++j) {
      auto it = leases_.find(ranks[j]);
      if (it == leases_.end()) continue;  // ended since
      for (int f = 0; f < 2; ++f)
        if (it->second[f].bound) bound.push_back({{}, key_of_rank(ranks[j]), f, it->second[f]});
    }
  }
  ranks = {};
  // Port names outside the lock (a lease of a port no longer configured is
  // not written).
  std::map<uint32_t, std::string> names;
  for (FlushEntry& e : bound) {
    auto [it, fresh] = names.try_emplace(e.key.ifindex);
    if (fresh && ports_.name) it->second = ports_.name(e.key.ifindex);
    e.port = it->second;
  }
  std::erase_if(bound, [](const FlushEntry& e) { return e.port.empty(); });
  std::string text = lease_file_text(bound);
  const uint64_t now_ns = monotonic_ns();
  const bool trim = bound.size() >= kTrimAfter && now_ns - last_trim_ns_ >= kTrimEveryNs;
  bound = {};
  std::string err;
  const bool ok = statefile::write_atomic(file_, text, 0644, true, &err);
  text = {};
  // The copy and the text are freed: give their pages back to the system
  // (glibc keeps them in the arena otherwise; at 1M subscribers that is
  // hundreds of MB held between writes).
  if (trim) {
    malloc_trim(0);
    last_trim_ns_ = now_ns;
  }
  if (!ok) {
    count(AgentReason::kLEASE_STATE_WRITE_ERROR);
    spdlog::error("lease state {}", err);
    std::lock_guard g(mu_);
    dirty_ = true;
    return false;
  }
  return true;
}

namespace {

// Bounds of what the agent itself writes. A lease file holds at most two
// leases per subscriber (~250 bytes each): 1 GiB is far beyond 1M subscribers.
constexpr size_t kMaxLeaseFileBytes = size_t{1} << 30;
constexpr size_t kMaxLeasePrefixes = 256;
constexpr uint64_t kMaxUnixSeconds = uint64_t{1} << 40;  // year ~36800

struct ParsedLease {
  std::string port;
  uint16_t outer_vid = 0, inner_vid = 0;
  LeaseFamily family = LeaseFamily::kV4;
  Lease lease;
};

// Typed fields of one JSON object; each getter is false with *why naming
// the field when it is missing, of another type or out of range.
struct EntryReader {
  const json& e;
  std::string* why;

  const json* field(const char* name) const {
    auto it = e.find(name);
    if (it == e.end()) {
      *why = fmt::format("no \"{}\"", name);
      return nullptr;
    }
    return &*it;
  }
  bool str(const char* name, std::string* v) const {
    const json* j = field(name);
    if (!j) return false;
    if (!j->is_string())
      return *why = fmt::format("\"{}\" is {}, not a string", name, j->type_name()), false;
    *v = j->get<std::string>();
    return true;
  }
  bool uint(const char* name, uint64_t lo, uint64_t hi, uint64_t* v) const {
    const json* j = field(name);
    if (!j) return false;
    if (!j->is_number_integer())
      return *why = fmt::format("\"{}\" is {} {}, not an integer", name, j->type_name(), j->dump()),
             false;
    if (j->is_number_unsigned()
            ? j->get<uint64_t>() < lo || j->get<uint64_t>() > hi
            : j->get<int64_t>() < 0 || static_cast<uint64_t>(j->get<int64_t>()) < lo ||
                  static_cast<uint64_t>(j->get<int64_t>()) > hi)
      return *why = fmt::format("\"{}\" {} is outside {}..{}", name, j->dump(), lo, hi), false;
    *v = j->is_number_unsigned() ? j->get<uint64_t>() : static_cast<uint64_t>(j->get<int64_t>());
    return true;
  }
};

// "port", "outer_vlan", "inner_vlan" and "family".
bool decode_owner(const EntryReader& r, ParsedLease* out, std::string* family) {
  std::string* why = r.why;
  uint64_t outer = 0, inner = 0;
  if (!r.str("port", &out->port)) return false;
  if (out->port.empty() || out->port.size() > 15)  // IFNAMSIZ - 1
    return *why = fmt::format("\"port\" \"{}\" is not an interface name (1..15 characters)",
                              out->port.substr(0, 64)),
           false;
  if (!r.uint("outer_vlan", 1, 4094, &outer) || !r.uint("inner_vlan", 1, 4094, &inner))
    return false;
  out->outer_vid = static_cast<uint16_t>(outer);
  out->inner_vid = static_cast<uint16_t>(inner);
  if (!r.str("family", family)) return false;
  if (*family != "ipv4" && *family != "ipv6")
    return *why = fmt::format("\"family\" \"{}\" is neither \"ipv4\" nor \"ipv6\"",
                              family->substr(0, 64)),
           false;
  out->family = *family == "ipv4" ? LeaseFamily::kV4 : LeaseFamily::kV6;
  return true;
}

// "prefixes": an array of prefixes of the lease's family.
bool decode_prefixes(const EntryReader& r, const std::string& family, ParsedLease* out) {
  std::string* why = r.why;
  const json* pf = r.field("prefixes");
  if (!pf) return false;
  if (!pf->is_array())
    return *why = fmt::format("\"prefixes\" is {}, not an array", pf->type_name()), false;
  if (pf->size() > kMaxLeasePrefixes)
    return *why = fmt::format("\"prefixes\" has {} entries, more than {}", pf->size(),
                              kMaxLeasePrefixes),
           false;
  for (size_t k = 0; k < pf->size(); ++k) {
    const json& p = (*pf)[k];
    if (!p.is_string() ||
        !parse_prefix(p.get<std::string>(), out->family == LeaseFamily::kV4 ? 4 : 6))
      return *why = fmt::format("\"prefixes\"[{}] {} is not an {} prefix", k,
                                p.dump().substr(0, 64), family == "ipv4" ? "IPv4" : "IPv6"),
             false;
    out->lease.prefixes.push_back(p.get<std::string>());
  }
  return true;
}

// One entry of the file, every field present, typed and in range (what
// flush() writes); false with *why naming the field otherwise.
bool decode_entry(const json& e, ParsedLease* out, std::string* why) {
  if (!e.is_object()) return *why = fmt::format("is {}, not an object", e.type_name()), false;
  const EntryReader r{e, why};
  std::string family;
  if (!decode_owner(r, out, &family)) return false;
  Lease& l = out->lease;
  l.bound = true;
  if (!r.str("address", &l.address)) return false;
  if (out->family == LeaseFamily::kV4 ? !parse_ipv4(l.address)
                                      : !l.address.empty() && !parse_ipv6(l.address))
    return *why = fmt::format("\"address\" \"{}\" is not an {} address", l.address.substr(0, 64),
                              family == "ipv4" ? "IPv4" : "IPv6"),
           false;
  if (!decode_prefixes(r, family, out)) return false;
  // "server" (optional): the relay's DHCP server that answered.
  if (auto sv = e.find("server"); sv != e.end()) {
    if (!sv->is_string() ||
        (!parse_ipv4(sv->get<std::string>()) && !parse_ipv6(sv->get<std::string>())))
      return *why = fmt::format("\"server\" {} is not an IP address", sv->dump().substr(0, 64)),
             false;
    l.server = sv->get<std::string>();
  }
  if (!r.uint("bound_unix", 0, kMaxUnixSeconds, &l.bound_unix) ||
      !r.uint("expires_unix", 0, kMaxUnixSeconds, &l.expires_unix))
    return false;
  if (l.expires_unix < l.bound_unix || l.expires_unix - l.bound_unix > UINT32_MAX)
    return *why = fmt::format(
               "\"expires_unix\" {} is not within a lease time (0..{} s) of "
               "\"bound_unix\" {}",
               l.expires_unix, UINT32_MAX, l.bound_unix),
           false;
  return true;
}

}  // namespace

void LeaseTable::load() {
  std::string text, err;
  switch (statefile::read(file_, kMaxLeaseFileBytes, &text, &err)) {
    case statefile::ReadStatus::kAbsent:
      return;  // first start
    case statefile::ReadStatus::kError:
      throw std::runtime_error(
          fmt::format("lease state {}; move it away to start without leases", err));
    case statefile::ReadStatus::kOk:
      break;
  }
  auto refuse = [&](const std::string& what) {
    return std::runtime_error(fmt::format(
        "lease state {}: {}; fix it or move it away to start without leases", file_, what));
  };
  json doc;
  try {
    doc = json::parse(text);
  } catch (const std::exception& e) {
    throw refuse(fmt::format("cannot parse ({})", e.what()));
  }
  const char* shape = "a lease file is {\"version\": 1, \"leases\": [...]}";
  if (!doc.is_object())
    throw refuse(fmt::format("is {}, not an object ({})", doc.type_name(), shape));
  auto ver = doc.find("version");
  if (ver == doc.end() || !ver->is_number_unsigned() || ver->get<uint64_t>() != 1)
    throw refuse(fmt::format("\"version\" is {}, not 1 ({})",
                             ver == doc.end() ? "missing" : ver->dump().substr(0, 64), shape));
  auto arr = doc.find("leases");
  if (arr == doc.end() || !arr->is_array())
    throw refuse(fmt::format("\"leases\" is {}, not an array ({})",
                             arr == doc.end() ? "missing" : arr->type_name(), shape));
  // Decoded and checked whole before anything is kept: a bad entry changes nothing.
  std::vector<ParsedLease> parsed(arr->size());
  absl::flat_hash_map<std::pair<std::string, uint64_t>, size_t> seen;
  for (size_t i = 0; i < arr->size(); ++i) {
    std::string why;
    if (!decode_entry((*arr)[i], &parsed[i], &why))
      throw refuse(fmt::format("entry {}: {}", i, why));
    const ParsedLease& p = parsed[i];
    const uint64_t id =
        uint64_t{p.outer_vid} << 20 | uint64_t{p.inner_vid} << 4 | static_cast<uint64_t>(p.family);
    auto [it, fresh] = seen.try_emplace(std::make_pair(p.port, id), i);
    if (!fresh)
      throw refuse(fmt::format("entry {}: a second {} lease of {}/{}/{} (entry {} is the first)", i,
                               p.family == LeaseFamily::kV4 ? "ipv4" : "ipv6", p.port, p.outer_vid,
                               p.inner_vid, it->second));
  }
  const uint64_t now = now_seconds();
  size_t loaded = 0, expired = 0, unknown_port = 0;
  for (ParsedLease& p : parsed) {
    auto idx = ports_.access_ifindex(p.port);
    if (!idx) {
      ++unknown_port;
      continue;
    }
    if (p.lease.expires_unix <= now) {
      ++expired;
      continue;
    }
    SubKey k{};
    k.ifindex = *idx;
    k.outer_vid = p.outer_vid;
    k.inner_vid = p.inner_vid;
    const int f = static_cast<int>(p.family);
    const uint64_t rank = key_rank(k);
    by_expiry_.insert({p.lease.expires_unix, rank, f});
    leases_[rank][f] = std::move(p.lease);
    ++loaded;
  }
  spdlog::info(
      "lease state {}: {} leases restored, {} expired while stopped, {} on ports no "
      "longer configured",
      file_, loaded, expired, unknown_port);
  dirty_ = expired || unknown_port;
}

}  // namespace xbng::agent
