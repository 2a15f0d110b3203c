// Fleet mode: the desired subscribers of this node live in etcd, and xbngd
// reconciles its maps to them (docs/fleet.md has the key schema: it is part
// of the API).
//
//   /xbng/v1/nodes/<node>/subscribers/<port>/<outer_vlan>/<inner_vlan>
//       value: xbng.v1.Subscriber in canonical proto3 JSON; port, outer_vlan
//       and inner_vlan in the value must match the key (else refused)
//   /xbng/v1/status/<node>
//       written by the node under a lease: boot id, revision fully applied,
//       subscriber count, refused keys with reasons, etcd outages
//
// At start: one consistent read at a single revision, disjoint key ranges
// read by a few threads at once, reconciled into the store as pages arrive (add, update, delete;
// unchanged entries are not touched), then a watch from that revision + 1. A watch that falls
// behind compaction triggers a full re-read, and so does an etcd whose history is not the one
// applied (wiped, restored or another cluster: see fleet.cpp). etcd unreachable: the maps keep
// forwarding with the last applied state while the node retries with backoff.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xbng::agent {

class SubscriberStore;
namespace fleet {
class Kv;
class ValueCodec;
}  // namespace fleet

// How to reach etcd (shared by xbngd and `xbngctl sub import --etcd`).
struct EtcdOptions {
  std::vector<std::string> endpoints;       // HOST:PORT, http://HOST:PORT or https://HOST:PORT
  std::string ca, cert, key;                // TLS: CA of the servers, client cert/key (PEM files)
  std::string username, password;           // etcd authentication (empty: none)
  std::chrono::milliseconds timeout{5000};  // per unary request
};

struct FleetOptions {
  EtcdOptions etcd;
  std::string node;
  // Whose desired subscribers to apply: "" = the node's own; an HA group's
  // members all apply the group's (/xbng/v1/nodes/<group>/subscribers/).
  std::string subscribers_of;
  uint32_t status_ttl_seconds = 10;  // lease of the status key
  uint32_t page_size = 20000;        // keys per range read page
  // Concurrent range requests of a full read (etcd.full_read_readers).
  // Each reader decodes its pages: 4 kept the store fed on a busy 2-core
  // machine where 2 left it waiting (docs/benchmarks.md).
  uint32_t full_read_readers = 4;
  // The node's access ports (set by the agent): the full read splits the
  // prefix into key ranges per port and outer VLAN digits (see fleet.cpp).
  std::vector<std::string> access_ports;
};
inline constexpr uint32_t kMaxFullReadReaders = 8;

// A full read's time by phase (docs/fleet.md, "Reconcile"). Reading,
// decoding and applying overlap (pages are decoded and applied as they
// arrive), so the phases do not add up to the total: `read_s` is the time
// from the first request until the last page arrived, `request_s` the time
// spent in range requests and `decode_s` the time decoding pages, each
// summed over the readers (a reader decodes the page it read), `apply_s`
// the time of the store's applying stage, `wait_s` the time the store
// waited for a page, `delete_s` the deletion of stale subscribers after
// the read.
struct FullReadTimes {
  int64_t revision = 0;  // 0: no full read yet
  uint64_t keys = 0;
  uint32_t readers = 0;
  double total_s = 0, read_s = 0, request_s = 0, decode_s = 0, apply_s = 0, wait_s = 0,
         delete_s = 0;
};

// The key ranges a full read fetches, in key order, together exactly
// [prefix, prefix_range_end(prefix)): per access port, one range per first
// two characters of the outer VLAN. etcd 3.4 walks its whole index from a
// range's start to its end for every page, so paging one big range costs
// O(N^2 / page): bounded ranges keep it linear.
std::vector<std::pair<std::string, std::string>> full_read_ranges(const std::string& prefix,
                                                                  std::vector<std::string> ports);

// --- key schema --------------------------------------------------------------
inline constexpr std::string_view kKeyRoot = "/xbng/v1/";
// A node name: 1..64 of [A-Za-z0-9._-] (no '/'). Returns the error or nullopt.
std::optional<std::string> check_node_name(std::string_view node);
std::string node_subscribers_prefix(std::string_view node);  // ".../nodes/<node>/subscribers/"
std::string subscriber_etcd_key(std::string_view node, std::string_view port, uint32_t outer,
                                uint32_t inner);
std::string status_etcd_key(std::string_view node);
// The smallest key greater than every key starting with `prefix`.
std::string prefix_range_end(std::string_view prefix);
// "<port>/<outer>/<inner>" (the part after the node's prefix), decimal VLANs
// without leading zeros. Returns the error or nullopt.
std::optional<std::string> parse_subscriber_key_suffix(std::string_view suffix, std::string* port,
                                                       uint32_t* outer, uint32_t* inner);
// etcd keys and values are bytes. The offset of the first byte that is not
// part of well-formed UTF-8 (no overlong forms, no surrogates, at most
// U+10FFFF), or nullopt when all of `s` is UTF-8.
std::optional<size_t> invalid_utf8_at(std::string_view s);
// `s` for a log line or a JSON string: well-formed UTF-8 as is, every other
// byte as \xNN (lowercase hex). Deterministic; never throws.
std::string escape_bytes(std::string_view s);
// The status value (/xbng/v1/status/<node>, docs/fleet.md). Every string is
// escaped (escape_bytes) before it goes into the JSON, so rendering cannot
// fail on bytes from etcd.
struct FleetStatus {
  std::string node, boot_id;
  int64_t revision = 0;
  uint64_t subscribers = 0;
  bool synced = false;
  const std::map<std::string, std::string>* refused = nullptr;  // every refused key → reason
  std::string endpoint, last_error;
  uint64_t outages = 0, full_syncs = 0, compactions = 0, history_resets = 0, internal_errors = 0;
  double last_outage_seconds = 0;
  FullReadTimes full_read;  // the last full read applied
};
inline constexpr size_t kStatusRefusedListed = 100;  // refused keys listed (the count is exact)
std::string render_fleet_status(const FleetStatus& s);

// Endpoint list from "a:2379,b:2379" (also accepts http(s):// prefixes).
std::vector<std::string> split_endpoints(std::string_view s);

// --- the reconciler ----------------------------------------------------------
struct FleetState {
  bool etcd_up = false;
  bool synced = false;           // a full read has been applied and the watch runs
  int64_t applied_revision = 0;  // every change of this node's keys up to it is applied
  uint64_t refused = 0;          // keys refused now
  uint64_t outages = 0;          // etcd became unreachable (count)
  uint64_t full_syncs = 0;       // full reads applied (1 + resyncs)
  uint64_t compactions = 0;      // reads or watches that fell behind compaction
  uint64_t history_resets = 0;   // full reads because etcd's history changed (wiped, replaced)
  uint64_t internal_errors = 0;  // exceptions caught at a reconciler thread's top level
  uint64_t events = 0;           // watch events applied
  double outage_seconds = 0;     // current outage (0 when up)
  FullReadTimes last_full_read;  // the last full read applied, by phase
  std::string last_error;
  std::string endpoint;
};

class Fleet {
 public:
  // Starts the reconciler's threads on etcd `kv` (fleet/kv.h), its values
  // decoded by `codec` (which must outlive the Fleet). Throws
  // std::runtime_error on a bad option (node name, status ttl).
  Fleet(const FleetOptions& o, SubscriberStore* store, std::string boot_id,
        std::unique_ptr<fleet::Kv> kv, const fleet::ValueCodec& codec);
  ~Fleet();
  void stop();  // idempotent: stops the threads, revokes the status lease
  FleetState state() const;
  // Prometheus exposition lines (xbng_fleet_*).
  std::string render_metrics() const;
  // The status value as it would be written now.
  std::string status_json() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// `xbngctl sub import --etcd`: writes subscribers into a node's prefix in
// transactions of at most `txn_ops` puts, `inflight` transactions at once.
struct EtcdImportResult {
  uint64_t written = 0, txns = 0;
  double seconds = 0;
};
class EtcdWriter {
 public:
  // Throws std::runtime_error on a bad node name.
  EtcdWriter(std::unique_ptr<fleet::Kv> kv, std::string node, uint32_t txn_ops = 128,
             uint32_t inflight = 8);
  ~EtcdWriter();
  // Queues a put of the subscriber value `value` (etcd/value_codec.h) under
  // the key of port/outer/inner. Throws std::runtime_error when etcd refuses
  // a transaction.
  void put(std::string_view port, uint32_t outer, uint32_t inner, std::string value);
  void del(std::string_view port, uint32_t outer, uint32_t inner);
  EtcdImportResult finish();  // waits for every transaction
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The CLI command; returns the exit code (1: some entries invalid or
// unreadable, nothing of them written). Throws std::runtime_error.
int ctl_etcd_import(const EtcdOptions& eo, const std::string& node, const std::string& file,
                    uint32_t txn_ops, uint32_t inflight);

}  // namespace xbng::agent
