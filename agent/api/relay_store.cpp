#include "api/relay_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>

#include "api/convert.h"
#include "xbng/v1/xbng.pb.h"
#include "store/scan.h"

namespace xbng::agent {

namespace {

uint64_t unix_seconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

bool nothing_left(const SubscriberSpec& s) {
  return !s.has_ipv4 && !s.has_ipv6 && s.prefixes.empty();
}

// Subscribers whose addresses the relayed leases own: those the relay
// created, and those RADIUS authorized on the relay port (the Accept gave
// the plan, the lease the address). The others keep what their source gave.
bool lease_owned(const SubscriberSpec& s) {
  return s.origin == kOriginRelay || s.origin == kOriginRadius;
}

}  // namespace

RelaySessions::RelaySessions(SubscriberStore* store, LeaseTable* leases, Clock clock)
    : store_(store), leases_(leases), clock_(clock ? std::move(clock) : Clock(unix_seconds)) {}

absl::Status RelaySessions::bound(const SubKey& k, const Mac& mac, uint32_t addr,
                                  uint32_t lifetime_s, uint32_t server) {
  std::lock_guard lk(mu_);
  SubscriberSpec spec;
  std::optional<Mac> learned;
  const bool exists = store_->binding(k, &spec, &learned);
  if (!exists || !spec.has_ipv4 || spec.ipv4 != addr) {
    if (!exists) {
      spec = SubscriberSpec{};
      spec.key = k;
      spec.mac = mac;
      spec.has_mac = true;
      spec.origin = kOriginRelay;
    }
    spec.ipv4 = addr;
    spec.has_ipv4 = true;
    // The same checks as a gRPC request: the lease's values as a message.
    xbng::v1::Subscriber m;
    spec_to_proto(spec, store_->ports(), &m);
    std::vector<SubscriberSpec> specs(1);
    if (absl::Status st = validate_subscriber(m, store_->ports(), "DHCPACK", &specs[0]); !st.ok())
      return st;
    specs[0].origin = spec.origin;
    UpsertResult res;
    if (absl::Status st = store_->upsert(std::move(specs), &res); !st.ok()) return st;
  }
  const uint64_t now = clock_();
  leases_->bind(k, LeaseFamily::kV4, format_ipv4(addr), {}, lifetime_s, now, format_ipv4(server));
  // The subscriber as it is now: a change in between ends the lease at once.
  SubscriberSpec after;
  const bool found = store_->binding(k, &after, &learned);
  leases_->confirm(k, LeaseFamily::kV4, found ? &after : nullptr);
  return absl::OkStatus();
}

absl::Status RelaySessions::bound6(const SubKey& k, const Mac& mac, const relay::Reply6Leases& l,
                                   const Ipv6& server) {
  std::lock_guard lk(mu_);
  SubscriberSpec spec;
  std::optional<Mac> learned;
  const bool exists = store_->binding(k, &spec, &learned);
  if (!exists) {
    spec = SubscriberSpec{};
    spec.key = k;
    spec.mac = mac;
    spec.has_mac = true;
    spec.origin = kOriginRelay;
  }
  SubscriberSpec want = spec;
  uint32_t lifetime = UINT32_MAX;
  std::string address;
  if (!l.addresses.empty()) {
    want.ipv6 = l.addresses[0].address;
    want.has_ipv6 = true;
    lifetime = std::min(lifetime, l.addresses[0].valid);
    address = format_ipv6(want.ipv6.data());
  }
  std::vector<std::string> prefixes;
  for (const auto& lp : l.prefixes) {
    Prefix p;
    p.family = 6;
    p.len = lp.length;
    p.addr = lp.prefix;
    bool have = false;
    for (const auto& q : want.prefixes) have = have || q == p;
    if (!have) want.prefixes.push_back(p);
    prefixes.push_back(format_prefix(p));
    lifetime = std::min(lifetime, lp.valid);
  }
  if (!exists || !want.same_provisioning(spec)) {
    xbng::v1::Subscriber m;
    spec_to_proto(want, store_->ports(), &m);
    std::vector<SubscriberSpec> specs(1);
    if (absl::Status st = validate_subscriber(m, store_->ports(), "DHCPv6 REPLY", &specs[0]);
        !st.ok())
      return st;
    specs[0].origin = want.origin;
    UpsertResult res;
    if (absl::Status st = store_->upsert(std::move(specs), &res); !st.ok()) return st;
  }
  const uint64_t now = clock_();
  leases_->bind(k, LeaseFamily::kV6, address, std::move(prefixes), lifetime, now,
                format_ipv6(server.data()));
  SubscriberSpec after;
  const bool found = store_->binding(k, &after, &learned);
  leases_->confirm(k, LeaseFamily::kV6, found ? &after : nullptr);
  return absl::OkStatus();
}

void RelaySessions::ended6(const SubKey& k, const char* why) {
  leases_->release(k, LeaseFamily::kV6, clock_());
  drop_ipv6(k, why);
}

void RelaySessions::drop_ipv6(const SubKey& k, const char* why) {
  std::lock_guard lk(mu_);
  SubscriberSpec spec;
  std::optional<Mac> learned;
  if (!store_->binding(k, &spec, &learned) || !lease_owned(spec)) return;
  bool v6_prefix = false;
  for (const auto& p : spec.prefixes) v6_prefix = v6_prefix || p.family == 6;
  if (!spec.has_ipv6 && !v6_prefix) return;
  spec.has_ipv6 = false;
  spec.ipv6 = Ipv6{};
  spec.prefixes.erase(std::remove_if(spec.prefixes.begin(), spec.prefixes.end(),
                                     [](const Prefix& p) { return p.family == 6; }),
                      spec.prefixes.end());
  shrink(k, std::move(spec), "IPv6 address and prefixes", why);
}

void RelaySessions::drop_ipv4(const SubKey& k, const char* why) {
  std::lock_guard lk(mu_);
  SubscriberSpec spec;
  std::optional<Mac> learned;
  if (!store_->binding(k, &spec, &learned) || !lease_owned(spec) || !spec.has_ipv4) return;
  spec.has_ipv4 = false;
  spec.ipv4 = 0;
  shrink(k, std::move(spec), "IPv4 address", why);
}

void RelaySessions::shrink(const SubKey& k, SubscriberSpec spec, const char* what,
                           const char* why) {
  const std::string who = key_to_string(k, store_->ports());
  absl::Status st;
  if (nothing_left(spec)) {
    uint64_t deleted = 0, not_found = 0;
    st = store_->remove({k}, &deleted, &not_found);
    if (st.ok()) spdlog::info("relay: {} {}: subscriber removed (no address left)", who, why);
  } else {
    UpsertResult res;
    st = store_->upsert({spec}, &res);
    if (st.ok()) spdlog::info("relay: {} {}: {} removed", who, why, what);
  }
  if (!st.ok()) spdlog::error("relay: {} {}: {}", who, why, std::string(st.message()));
}

void RelaySessions::ended(const SubKey& k, const char* why) {
  leases_->release(k, LeaseFamily::kV4, clock_());
  drop_ipv4(k, why);
}

void RelaySessions::expired(const SubKey& k, LeaseFamily f) {
  if (f == LeaseFamily::kV4) drop_ipv4(k, "lease expired");
  if (f == LeaseFamily::kV6) drop_ipv6(k, "lease expired");
}

std::optional<uint32_t> RelaySessions::lease_server(const SubKey& k) {
  auto l = leases_->get(k, LeaseFamily::kV4);
  if (!l || !l->bound || l->server.empty()) return std::nullopt;
  return parse_ipv4(l->server);
}

size_t RelaySessions::reconcile() {
  std::vector<SubKey> stale, stale6;
  for_each_subscriber(*store_, [&](const SubscriberView& v) {
    if (v.spec.origin != kOriginRelay) return;
    if (v.spec.has_ipv4) {
      auto l = leases_->get(v.spec.key, LeaseFamily::kV4);
      if (!l || !l->bound) stale.push_back(v.spec.key);
    }
    bool v6 = v.spec.has_ipv6;
    for (const auto& p : v.spec.prefixes) v6 = v6 || p.family == 6;
    if (v6) {
      auto l = leases_->get(v.spec.key, LeaseFamily::kV6);
      if (!l || !l->bound) stale6.push_back(v.spec.key);
    }
  });
  for (const auto& k : stale) drop_ipv4(k, "lease gone while stopped");
  for (const auto& k : stale6) drop_ipv6(k, "lease gone while stopped");
  return stale.size() + stale6.size();
}

}  // namespace xbng::agent
