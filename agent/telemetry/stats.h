// A snapshot of the data plane's counters, summed over CPUs: the one reader
// behind GetStats and the Prometheus metrics.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/dataplane.h"
#include "store/store.h"

namespace xbng::agent {

struct ReasonCounter {
  const char* reason;  // from XBNG_REASONS: "drop_untagged", ...
  const char* kind;    // "forward", "tx", "pass", "drop", "info"
  uint64_t packets = 0, bytes = 0;
};

struct PortCounters {
  std::string name;
  uint32_t ifindex = 0;
  const char* role = "";  // "access" or "uplink"
  bool valid = false;     // false: port_stats could not be read
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
};

struct MapFill {
  const char* map;
  uint64_t entries = 0, max_entries = 0;
};

struct StatsSnapshot {
  std::vector<ReasonCounter> reasons;  // every reason, in enum order
  std::vector<PortCounters> ports;
  uint64_t subscribers = 0;
  std::vector<MapFill> maps;  // the subscriber-sized maps, ports and tx_ports
};

// Names of every reason and its kind, in enum xbng_reason order.
const char* reason_name(uint32_t reason);
const char* reason_kind(uint32_t reason);

// Reads `stats` and `port_stats` (per-CPU, summed) and the fill of the
// maps. An internal error naming the map when a read fails.
absl::Status read_stats(const StoreMaps& maps, const std::vector<PortInfo>& ports,
                        const SubscriberStore& store, StatsSnapshot* out);

}  // namespace xbng::agent
