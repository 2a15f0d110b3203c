#include "telemetry/stats.h"

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <iterator>

#include "bringup/punt/counters.h"
#include "common/status.h"
#include "xbng/reasons.h"

namespace xbng::agent {

namespace {

struct ReasonInfo {
  const char* name;
  int kind;
};
#define XBNG_REASON_INFO_(n, str, kind) {str, kind},
constexpr ReasonInfo kReasons[] = {XBNG_REASONS(XBNG_REASON_INFO_)};
#undef XBNG_REASON_INFO_
static_assert(std::size(kReasons) == XBNG_REASON_MAX);

const char* kind_name(int kind) {
  switch (kind) {
    case XBNG_KIND_FORWARD:
      return "forward";
    case XBNG_KIND_TX:
      return "tx";
    case XBNG_KIND_PASS:
      return "pass";
    case XBNG_KIND_DROP:
      return "drop";
    case XBNG_KIND_PUNT:
      return "punt";
    default:
      return "info";
  }
}

}  // namespace

const char* reason_name(uint32_t r) { return r < XBNG_REASON_MAX ? kReasons[r].name : "?"; }
const char* reason_kind(uint32_t r) {
  return r < XBNG_REASON_MAX ? kind_name(kReasons[r].kind) : "?";
}

absl::Status read_stats(const StoreMaps& maps, const std::vector<PortInfo>& ports,
                        const SubscriberStore& store, StatsSnapshot* out) {
  *out = StatsSnapshot{};
  const int ncpu = possible_cpus();
  std::vector<struct xbng_counter> pc(ncpu);
  const int sfd = maps.fd[static_cast<int>(MapId::kStats)];
  out->reasons.reserve(XBNG_REASON_MAX);
  for (uint32_t i = 0; i < XBNG_REASON_MAX; ++i) {
    ReasonCounter r{reason_name(i), reason_kind(i)};
    if (bpf_map_lookup_elem(sfd, &i, pc.data()) != 0)
      return internal_error("reading map stats[{}]: {}", i, std::strerror(errno));
    for (const auto& c : pc) r.packets += c.packets, r.bytes += c.bytes;
    out->reasons.push_back(r);
  }
  // The agent's own (bring-up) reasons, after the fast path's.
  for (const auto& c : agent_counters()) {
    ReasonCounter r{c.name, c.kind};
    r.packets = c.value;
    out->reasons.push_back(r);
  }
  std::vector<struct xbng_port_stats> ps(ncpu);
  for (const auto& port : ports) {
    PortCounters o;
    o.name = port.name;
    o.ifindex = port.ifindex;
    o.role = port.role == XBNG_ROLE_ACCESS ? "access" : "uplink";
    uint32_t slot = port.cfg.slot;
    if (bpf_map_lookup_elem(maps.fd[static_cast<int>(MapId::kPortStats)], &slot, ps.data()) == 0) {
      o.valid = true;
      for (const auto& s : ps)
        o.rx_packets += s.rx_packets, o.rx_bytes += s.rx_bytes, o.tx_packets += s.tx_packets,
            o.tx_bytes += s.tx_bytes;
    }
    out->ports.push_back(std::move(o));
  }
  out->subscribers = store.size();
  for (MapId m : {MapId::kSubscribers, MapId::kRoutesV4, MapId::kRoutesV6, MapId::kRoutesV6_64,
                  MapId::kPrefixesV4, MapId::kPrefixesV6, MapId::kPorts, MapId::kTxPorts}) {
    MapFill f{map_name(m)};
    f.entries = m == MapId::kPorts || m == MapId::kTxPorts ? ports.size() : store.map_entries(m);
    f.max_entries = maps.max_entries[static_cast<int>(m)];
    out->maps.push_back(f);
  }
  return absl::OkStatus();
}

}  // namespace xbng::agent
