#include "xbng/agent/lease/lease.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "xbng/agent/net.h"
#include "xbng/agent/punt/counters.h"
#include "xbng/v1/xbng.pb.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace xbng::agent {

namespace {

SubKey key_of(uint64_t rank) {
  SubKey k{};
  k.ifindex = static_cast<uint32_t>(rank >> 32);
  k.outer_vid = static_cast<uint16_t>(rank >> 16);
  k.inner_vid = static_cast<uint16_t>(rank);
  return k;
}

uint64_t now_seconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

void to_pb(const Lease& l, v1::Lease* out) {
  out->set_bound(l.bound);
  out->set_expires_unix(l.bound ? l.expires_unix : 0);
  out->set_address(l.address);
  for (const auto& p : l.prefixes) out->add_prefixes(p);
  out->set_bound_unix(l.bound_unix);
}

}  // namespace

LeaseTable::LeaseTable(EventHub* hub, PortResolver ports, std::string state_file)
    : hub_(hub), ports_(std::move(ports)), file_(std::move(state_file)) {
  if (!file_.empty()) load();
}

LeaseTable::~LeaseTable() { stop(); }

void LeaseTable::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
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
  // The whole file is rewritten: keep that under ~5% of the time (a 60K-lease
  // file takes ~0.2 s to write here, so it is rewritten every ~4 s; the loss
  // window on a crash grows with the table, see docs/design.md).
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
    next_flush = t0 + std::max<std::chrono::steady_clock::duration>(std::chrono::seconds(1),
                                                                     took * 20);
  }
}

void LeaseTable::publish(int type, const SubKey& k, LeaseFamily f, const Lease& l,
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
                      std::vector<std::string> prefixes, uint32_t lifetime_s, uint64_t now_unix) {
  std::lock_guard g(mu_);
  const uint64_t rank = key_rank(k);
  Lease& l = leases_[rank][static_cast<int>(f)];
  const bool renew = l.bound && l.address == address && l.prefixes == prefixes;
  if (l.bound) by_expiry_.erase({l.expires_unix, rank, static_cast<int>(f)});
  l.bound = true;
  l.address = std::move(address);
  l.prefixes = std::move(prefixes);
  l.bound_unix = now_unix;
  l.expires_unix = now_unix + lifetime_s;
  by_expiry_.insert({l.expires_unix, rank, static_cast<int>(f)});
  dirty_ = true;
  publish(renew ? v1::Event::LEASE_RENEWED : v1::Event::LEASE_BOUND, k, f, l, now_unix);
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
  publish(v1::Event::LEASE_RELEASED, k, f, l, now_unix);
}

bool LeaseTable::holds(const SubscriberSpec& s, LeaseFamily f, const Lease& l) {
  if (f == LeaseFamily::kV4) return s.has_ipv4 && l.address == format_ipv4(s.ipv4);
  if (!l.address.empty() && !(s.has_ipv6 && l.address == format_ipv6(s.ipv6.data())))
    return false;
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
  publish(v1::Event::LEASE_RELEASED, key_of(rank), static_cast<LeaseFamily>(f), l, 0);
  l = Lease{};  // its address is no longer this subscriber's to show
}

size_t LeaseTable::on_subscriber_change(const SubKey& k, const SubscriberSpec* now, bool created) {
  std::lock_guard g(mu_);
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
    const SubKey k = key_of(it->first);
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
                     found ? "the subscriber no longer holds it" : "the subscriber is no longer provisioned");
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
    spdlog::warn("lease state {}: {} restored lease(s) dropped: their subscriber is no longer "
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
  std::lock_guard g(mu_);
  size_t n = 0;
  while (!by_expiry_.empty()) {
    auto [exp, rank, fam] = *by_expiry_.begin();
    if (exp > now_unix) break;
    by_expiry_.erase(by_expiry_.begin());
    Lease& l = leases_[rank][fam];
    l.bound = false;
    dirty_ = true;
    ++n;
    count(AgentReason::kLEASE_EXPIRED);
    publish(v1::Event::LEASE_EXPIRED, key_of(rank), static_cast<LeaseFamily>(fam), l, now_unix);
  }
  return n;
}

size_t LeaseTable::size() const {
  std::lock_guard g(mu_);
  return by_expiry_.size();
}

void LeaseTable::fill(v1::Subscriber* out) const {
  SubKey k{};
  auto idx = ports_.access_ifindex ? ports_.access_ifindex(out->port()) : std::nullopt;
  if (!idx) return;
  k.ifindex = *idx;
  k.outer_vid = static_cast<uint16_t>(out->outer_vlan());
  k.inner_vid = static_cast<uint16_t>(out->inner_vlan());
  if (auto l = get(k, LeaseFamily::kV4)) to_pb(*l, out->mutable_lease_v4());
  if (auto l = get(k, LeaseFamily::kV6)) to_pb(*l, out->mutable_lease_v6());
}

bool LeaseTable::flush() {
  if (file_.empty()) return true;
  json doc;
  {
    std::lock_guard g(mu_);
    if (!dirty_) return true;
    doc["version"] = 1;
    json arr = json::array();
    for (const auto& [rank, slot] : leases_) {
      const SubKey k = key_of(rank);
      const std::string port = ports_.name ? ports_.name(k.ifindex) : std::string();
      if (port.empty()) continue;
      for (int f = 0; f < 2; ++f) {
        const Lease& l = slot[f];
        if (!l.bound) continue;
        arr.push_back({{"port", port},
                       {"outer_vlan", k.outer_vid},
                       {"inner_vlan", k.inner_vid},
                       {"family", f == 0 ? "ipv4" : "ipv6"},
                       {"address", l.address},
                       {"prefixes", l.prefixes},
                       {"bound_unix", l.bound_unix},
                       {"expires_unix", l.expires_unix}});
      }
    }
    doc["leases"] = std::move(arr);
    dirty_ = false;
  }
  const std::string tmp = file_ + ".tmp";
  std::error_code ec;
  fs::create_directories(fs::path(file_).parent_path(), ec);
  {
    std::ofstream o(tmp, std::ios::trunc);
    o << doc.dump() << "\n";
    o.flush();
    if (!o) {
      count(AgentReason::kLEASE_STATE_WRITE_ERROR);
      spdlog::error("lease state {}: cannot write {}", file_, tmp);
      std::lock_guard g(mu_);
      dirty_ = true;
      return false;
    }
  }
  fs::rename(tmp, file_, ec);
  if (ec) {
    count(AgentReason::kLEASE_STATE_WRITE_ERROR);
    spdlog::error("lease state {}: rename failed: {}", file_, ec.message());
    std::lock_guard g(mu_);
    dirty_ = true;
    return false;
  }
  return true;
}

void LeaseTable::load() {
  std::ifstream in(file_);
  if (!in) return;  // first start
  json doc;
  try {
    doc = json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format(
        "lease state {}: cannot parse ({}); move it away to start without leases", file_,
        e.what()));
  }
  const uint64_t now = now_seconds();
  size_t loaded = 0, expired = 0, unknown_port = 0;
  for (const auto& e : doc.value("leases", json::array())) {
    auto idx = ports_.access_ifindex(e.value("port", ""));
    if (!idx) {
      ++unknown_port;
      continue;
    }
    SubKey k{};
    k.ifindex = *idx;
    k.outer_vid = e.value("outer_vlan", uint16_t{0});
    k.inner_vid = e.value("inner_vlan", uint16_t{0});
    const int f = e.value("family", "") == "ipv6" ? 1 : 0;
    Lease l;
    l.bound = true;
    l.address = e.value("address", "");
    l.prefixes = e.value("prefixes", std::vector<std::string>{});
    l.bound_unix = e.value("bound_unix", uint64_t{0});
    l.expires_unix = e.value("expires_unix", uint64_t{0});
    if (l.expires_unix <= now) {
      ++expired;
      continue;
    }
    const uint64_t rank = key_rank(k);
    leases_[rank][f] = l;
    by_expiry_.insert({l.expires_unix, rank, f});
    ++loaded;
  }
  spdlog::info("lease state {}: {} leases restored, {} expired while stopped, {} on ports no "
               "longer configured",
               file_, loaded, expired, unknown_port);
  dirty_ = expired || unknown_port;
}

}  // namespace xbng::agent
