// etcd write load of HA state replication (agent/ha/replica.h): N DHCP
// leases renewing at T1 = lease time / 2, evenly spread, fed to a
// HaReplica that acts active against a real etcd (--etcd). First every
// lease is bound at once (a mass reconnect: --leases changes in a burst),
// then --seconds of steady renewals. Prints, for each phase, the changes
// queued, the etcd operations, transactions and bytes written, per second,
// and the burst's time to drain. A benchmark: it measures and prints, it
// never passes or fails.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "etcd/etcd_kv.h"
#include "fleet/fleet.h"
#include "ha/replica.h"

using namespace xbng::agent;
using Clock = std::chrono::steady_clock;

namespace {

uint64_t unix_s() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

SubKey key_of(uint32_t i) {
  SubKey k{};
  k.ifindex = 1;
  k.outer_vid = static_cast<uint16_t>(1 + i / 4000);
  k.inner_vid = static_cast<uint16_t>(1 + i % 4000);
  return k;
}

Lease lease_of(uint32_t i, uint64_t now, uint32_t lease_s) {
  Lease l;
  l.bound = true;
  l.address = format_ipv4(__builtin_bswap32(0x64400000u + i));  // 100.64.0.0 + i
  l.bound_unix = now;
  l.expires_unix = now + lease_s;
  return l;
}

void print(const char* phase, const HaReplicaStats& a, const HaReplicaStats& b, double secs) {
  fmt::print(
      "{}: {:.1f} s: {} changes queued, {} etcd operations in {} transactions, {} bytes: {:.1f} "
      "ops/s, {:.2f} txn/s, {:.1f} KB/s, {} write errors\n",
      phase, secs, b.queued - a.queued, b.written - a.written, b.txns - a.txns, b.bytes - a.bytes,
      (b.written - a.written) / secs, (b.txns - a.txns) / secs, (b.bytes - a.bytes) / secs / 1000,
      b.write_errors - a.write_errors);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"etcd write load of HA state replication"};
  std::string etcd = "127.0.0.1:2379", group = "bench";
  uint32_t leases = 60000, lease_s = 600;
  double seconds = 60;
  app.add_option("--etcd", etcd, "etcd endpoint")->default_str(etcd);
  app.add_option("--group", group, "HA group (keys under /xbng/v1/ha/<group>/state/)")
      ->default_str(group);
  app.add_option("--leases", leases, "leases")->default_str("60000");
  app.add_option("--lease-time", lease_s, "lease time, s (renewal at half of it)")
      ->default_str("600");
  app.add_option("--seconds", seconds, "steady renewals measured")->default_str("60");
  CLI11_PARSE(app, argc, argv);

  EtcdOptions eo;
  eo.endpoints = split_endpoints(etcd);
  PortResolver ports;
  ports.name = [](uint32_t) { return std::string("acc0"); };
  ports.access_ifindex = [](std::string_view p) -> std::optional<uint32_t> {
    if (p == "acc0") return 1;
    return std::nullopt;
  };
  HaReplica::Hooks h;
  h.active = [] { return true; };
  HaReplica r(group, "bench", fleet::connect_etcd(eo), ports, std::move(h));

  // The burst: every lease bound at once.
  const auto t0 = Clock::now();
  HaReplicaStats s0 = r.stats();
  const uint64_t now0 = unix_s();
  for (uint32_t i = 0; i < leases; ++i) {
    Lease l = lease_of(i, now0, lease_s);
    r.lease_changed(key_of(i), LeaseFamily::kV4, &l);
  }
  while (r.stats().written - s0.written < leases && Clock::now() - t0 < std::chrono::minutes(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  HaReplicaStats s1 = r.stats();
  print("burst (every lease bound at once)", s0, s1,
        std::chrono::duration<double>(Clock::now() - t0).count());

  // Steady state: leases / (lease_s / 2) renewals a second, evenly spread.
  const double rate = leases / (lease_s / 2.0);
  const auto interval = std::chrono::duration<double>(1.0 / rate);
  const auto t1 = Clock::now();
  auto next = t1;
  uint32_t i = 0;
  while (Clock::now() - t1 < std::chrono::duration<double>(seconds)) {
    Lease l = lease_of(i % leases, unix_s(), lease_s);
    r.lease_changed(key_of(i % leases), LeaseFamily::kV4, &l);
    ++i;
    next += std::chrono::duration_cast<Clock::duration>(interval);
    std::this_thread::sleep_until(next);
  }
  std::this_thread::sleep_for(kHaFlushInterval * 3);
  HaReplicaStats s2 = r.stats();
  fmt::print("steady: {} leases, lease time {} s: {:.1f} renewals/s\n", leases, lease_s, rate);
  print("steady renewals", s1, s2, std::chrono::duration<double>(Clock::now() - t1).count());
  r.stop();
  return 0;
}
