#include "api/relay_store.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "api/convert.h"
#include "xbng/v1/xbng.pb.h"

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

}  // namespace

RelaySessions::RelaySessions(SubscriberStore* store, LeaseTable* leases, Clock clock)
    : store_(store), leases_(leases), clock_(clock ? std::move(clock) : Clock(unix_seconds)) {}

absl::Status RelaySessions::bound(const SubKey& k, const Mac& mac, uint32_t addr,
                                  uint32_t lifetime_s, uint32_t server) {
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

void RelaySessions::drop_ipv4(const SubKey& k, const char* why) {
  SubscriberSpec spec;
  std::optional<Mac> learned;
  if (!store_->binding(k, &spec, &learned) || spec.origin != kOriginRelay || !spec.has_ipv4) return;
  const std::string who = key_to_string(k, store_->ports());
  spec.has_ipv4 = false;
  spec.ipv4 = 0;
  absl::Status st;
  if (nothing_left(spec)) {
    uint64_t deleted = 0, not_found = 0;
    st = store_->remove({k}, &deleted, &not_found);
    if (st.ok()) spdlog::info("relay: {} {}: subscriber removed (no address left)", who, why);
  } else {
    UpsertResult res;
    st = store_->upsert({spec}, &res);
    if (st.ok()) spdlog::info("relay: {} {}: IPv4 address removed", who, why);
  }
  if (!st.ok()) spdlog::error("relay: {} {}: {}", who, why, std::string(st.message()));
}

void RelaySessions::ended(const SubKey& k, const char* why) {
  leases_->release(k, LeaseFamily::kV4, clock_());
  drop_ipv4(k, why);
}

void RelaySessions::expired(const SubKey& k, LeaseFamily f) {
  if (f == LeaseFamily::kV4) drop_ipv4(k, "lease expired");
}

std::optional<uint32_t> RelaySessions::lease_server(const SubKey& k) {
  auto l = leases_->get(k, LeaseFamily::kV4);
  if (!l || !l->bound || l->server.empty()) return std::nullopt;
  return parse_ipv4(l->server);
}

size_t RelaySessions::reconcile() {
  ListQuery q;
  q.page_size = 10000;
  std::vector<SubKey> stale;
  for (;;) {
    std::vector<SubscriberView> page;
    std::string next;
    uint64_t total = 0;
    if (!store_->list(q, &page, &next, &total).ok()) break;
    for (const auto& v : page) {
      if (v.spec.origin != kOriginRelay || !v.spec.has_ipv4) continue;
      auto l = leases_->get(v.spec.key, LeaseFamily::kV4);
      if (!l || !l->bound) stale.push_back(v.spec.key);
    }
    if (next.empty()) break;
    q.page_token = next;
  }
  for (const auto& k : stale) drop_ipv4(k, "lease gone while stopped");
  return stale.size();
}

}  // namespace xbng::agent
