// xbngctl ha status / ha switchover: the HA group of the xbngd asked.
#include <fmt/format.h>

#include <cstdio>
#include <ctime>

#include "ctl/ctl.h"
#include "ctl/output.h"

namespace xbng::agent {

namespace v1 = xbng::v1;

namespace {

std::string when(double unix_s) {
  if (unix_s <= 0) return "-";
  const time_t t = static_cast<time_t>(unix_s);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  const double ago = static_cast<double>(std::time(nullptr)) - unix_s;
  return fmt::format("{} ({:.0f} s ago)", buf, ago < 0 ? 0 : ago);
}

}  // namespace

int Ctl::ha_status() {
  v1::GetHaStatusRequest req;
  v1::GetHaStatusResponse r;
  grpc::ClientContext ctx;
  auto st = stub_->GetHaStatus(&ctx, req, &r);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) {
    std::printf("%s\n", to_json(r).c_str());
    return 0;
  }
  std::printf("group %s, this member %s: %s since %s\n", r.group().c_str(), r.member().c_str(),
              r.role().c_str(), when(r.role_since_unix()).c_str());
  if (r.active_member().empty())
    std::printf("active: none\n");
  else
    std::printf("active: %s since %s\n", r.active_member().c_str(),
                when(r.active_since_unix()).c_str());
  if (r.last_takeover_member().empty())
    std::printf("last takeover: none\n");
  else
    std::printf("last takeover: %s at %s: %s\n", r.last_takeover_member().c_str(),
                when(r.last_takeover_unix()).c_str(), r.last_takeover_cause().c_str());
  std::printf("etcd: %s%s%s\n", r.etcd_ok() ? "ok" : "NOT REACHABLE",
              r.last_error().empty() ? "" : ", last error: ", r.last_error().c_str());
  std::printf("\n%-16s %-16s %-8s %8s %-7s %-7s %-6s %s\n", "MEMBER", "NODE", "ROLE", "PRIORITY",
              "PREEMPT", "HOLDING", "SYNCED", "PORTS");
  for (const auto& m : r.members())
    std::printf("%-16s %-16s %-8s %8u %-7s %-7s %-6s %s\n", m.member().c_str(), m.node().c_str(),
                m.role().c_str(), m.priority(), m.preempt() ? "yes" : "no",
                m.holding() ? "yes" : "no", m.synced() ? "yes" : "no",
                m.ports_down().empty() ? "up" : m.ports_down().c_str());
  return 0;
}

int Ctl::ha_switchover() {
  v1::HaSwitchoverRequest req;
  v1::HaSwitchoverResponse r;
  grpc::ClientContext ctx;
  auto st = stub_->HaSwitchover(&ctx, req, &r);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) {
    std::printf("%s\n", to_json(r).c_str());
    return 0;
  }
  if (r.active_member().empty())
    std::printf("stepped down; no other member active yet\n");
  else
    std::printf("stepped down; %s is active\n", r.active_member().c_str());
  return 0;
}

}  // namespace xbng::agent
