// xbngctl stats / events / health: what xbngd counts, what happens, whether it serves.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "api/health_check.h"
#include "ctl/ctl.h"
#include "ctl/output.h"

namespace xbng::agent {

namespace v1 = xbng::v1;

int Ctl::stats() {
  v1::GetStatsRequest req;
  v1::GetStatsResponse resp;
  grpc::ClientContext ctx;
  auto st = stub_->GetStats(&ctx, req, &resp);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) {
    std::printf("%s\n", to_json(resp).c_str());
    return 0;
  }
  std::printf("subscribers %lu   (boot id %s)\n\n", resp.subscribers(), resp.boot_id().c_str());
  std::printf("%-28s %-8s %14s %16s\n", "REASON", "KIND", "PACKETS", "BYTES");
  for (const auto& r : resp.reasons())
    std::printf("%-28s %-8s %14lu %16lu\n", r.reason().c_str(), r.kind().c_str(), r.packets(),
                r.bytes());
  std::printf("\n%-12s %7s %-7s %12s %14s %12s %14s\n", "PORT", "IFINDEX", "ROLE", "RX_PKTS",
              "RX_BYTES", "TX_PKTS", "TX_BYTES");
  for (const auto& p : resp.ports())
    std::printf("%-12s %7u %-7s %12lu %14lu %12lu %14lu\n", p.name().c_str(), p.ifindex(),
                p.role().c_str(), p.rx_packets(), p.rx_bytes(), p.tx_packets(), p.tx_bytes());
  std::printf("\n%-14s %10s %12s %6s\n", "MAP", "ENTRIES", "MAX", "FILL");
  for (const auto& m : resp.maps())
    std::printf("%-14s %10lu %12lu %5.1f%%\n", m.name().c_str(), m.entries(), m.max_entries(),
                m.max_entries() ? 100.0 * double(m.entries()) / double(m.max_entries()) : 0.0);
  std::printf(
      "\napi: %lu/%lu gRPC connections (%lu refused), %lu watchers (%lu disconnected "
      "for falling behind, %lu refused)\n",
      resp.grpc_connections(), resp.grpc_max_connections(), resp.grpc_connections_refused(),
      resp.watchers(), resp.watchers_disconnected(), resp.watchers_refused());
  if (resp.reserved_conflict_count()) {
    std::printf("\nRESERVED ADDRESS CONFLICTS: %lu (first %d)\n", resp.reserved_conflict_count(),
                resp.reserved_conflicts_size());
    for (const auto& c : resp.reserved_conflicts())
      std::printf("  %s/%u/%u %s %s overlaps %s\n", c.key().port().c_str(), c.key().outer_vlan(),
                  c.key().inner_vlan(), c.field().c_str(), c.value().c_str(), c.reserved().c_str());
  }
  return 0;
}

int Ctl::events(int count) {
  grpc::ClientContext ctx;
  v1::WatchEventsRequest req;
  auto reader = stub_->WatchEvents(&ctx, req);
  v1::Event e;
  int n = 0;
  while ((count <= 0 || n < count) && reader->Read(&e)) {
    ++n;
    if (o_.json) {
      std::printf("%s\n", to_json(e).c_str());
    } else {
      std::string key = e.has_key() ? fmt::format("{}/{}/{}", e.key().port(), e.key().outer_vlan(),
                                                  e.key().inner_vlan())
                                    : "-";
      std::string extra;
      if (e.type() == v1::Event::AGENT_STARTED) extra = "boot_id=" + e.boot_id();
      if (e.has_lease()) {
        extra = e.lease_family() + " " + e.lease().address();
        for (const auto& p : e.lease().prefixes()) extra += " " + p;
        if (e.lease().bound()) extra += fmt::format(" expires={}", e.lease().expires_unix());
      }
      std::printf("%lu %-20s %-20s %s%s\n", e.timestamp_unix_ns(),
                  v1::Event::Type_Name(e.type()).c_str(), key.c_str(), e.mac().c_str(),
                  extra.c_str());
    }
    std::fflush(stdout);
  }
  if (count > 0 && n >= count) {
    ctx.TryCancel();
    return 0;
  }
  auto st = reader->Finish();
  if (!st.ok()) return fail(st, &ctx);
  return 0;
}

int Ctl::health(int timeout_ms) {
  auto st = check_health(make_channel(o_), std::chrono::milliseconds(timeout_ms));
  if (!st.ok()) {
    CtlFailure f =
        st.error_code() == grpc::StatusCode::UNAVAILABLE && st.error_message() == kNotServing
            ? CtlFailure{"not_serving",
                         fmt::format("xbngd at {} is NOT SERVING: it "
                                     "answered the health check with "
                                     "another status than SERVING",
                                     o_.server),
                         "not serving",
                         "",
                         "UNAVAILABLE",
                         st.error_message(),
                         kExitRefused,
                         {}}
            : describe_failure(o_, st, nullptr, std::chrono::milliseconds(timeout_ms));
    if (o_.json)
      std::printf("{\"status\":\"NOT_SERVING\",\"error\":%s}\n",
                  failure_json(f, o_.server).c_str());
    std::fprintf(stderr, "xbngctl: %s\n", f.message.c_str());
    return f.exit_code;
  }
  if (o_.json)
    std::printf("{\"status\":\"SERVING\"}\n");
  else
    std::printf("%s: SERVING\n", o_.server.c_str());
  return 0;
}

}  // namespace xbng::agent
