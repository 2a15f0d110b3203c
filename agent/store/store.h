// SubscriberStore: the in-memory index of every provisioned subscriber and
// the only writer of the subscriber and route maps. Every change is
// validated against the index first, then applied to the maps in an order
// that never blackholes (subscriber, new routes, then old routes out) and
// rolled back if the kernel refuses a write.
#pragma once

#include <absl/container/btree_map.h>
#include <absl/container/btree_set.h>
#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "dataplane/dataplane.h"
#include "telemetry/events.h"
#include "store/claims.h"
#include "store/journal.h"
#include "store/map_ops.h"
#include "store/reserved.h"
#include "store/subscriber.h"

namespace xbng::agent {

struct UpsertResult {
  uint64_t created = 0, updated = 0, unchanged = 0;
};

// A subscriber's key as a stream entry gave it (the entry may be invalid:
// its port need not resolve), for failure reports.
struct EntryKey {
  std::string port;
  uint32_t outer_vlan = 0, inner_vlan = 0;
};

// A refused stream entry: its position in the input (0-based), its key as
// given, and why.
struct StreamFailure {
  size_t index = 0;
  EntryKey key;
  absl::Status status;
};

// One batch of stream input, read and validated by the caller's source
// (api/convert.h for protos) on the store's reader thread.
struct StreamBatch {
  size_t base = 0;                    // set by the store: input index of the batch's first entry
  size_t got = 0;                     // input entries taken, valid or not
  std::vector<EntryKey> keys;         // [got]: each entry's key as given
  std::vector<SubscriberSpec> specs;  // the valid entries...
  std::vector<size_t> idx;            // ... and their input index
  std::vector<std::pair<size_t, absl::Status>> invalid;  // refused by validation
};
// Appends entries to `b` (base + got numbers the next one) until b->got
// reaches `max`; returns false once the input is exhausted.
using StreamSource = std::function<bool(StreamBatch* b, size_t max)>;

struct StreamResult {
  uint64_t applied = 0, failed = 0;
  std::vector<StreamFailure> failures;  // first kMaxReportedFailures, by index
  double apply_seconds = 0;             // spent planning and applying batches (lock included)
  // Input, optional: called with every refused entry (the list above stops
  // at kMaxReportedFailures), under the store's lock.
  std::function<void(const StreamFailure&)> on_failure;
};

struct SubscriberCounters {
  uint64_t up_packets = 0, up_bytes = 0, down_packets = 0, down_bytes = 0;
  uint64_t up_policed_packets = 0, up_policed_bytes = 0;
  uint64_t down_policed_packets = 0, down_policed_bytes = 0;
};

// A subscriber as get() and list() return it: its provisioning and, when
// counters were asked for, its counters and the MAC learned for a subscriber
// provisioned without one.
struct SubscriberView {
  SubscriberSpec spec;
  bool has_counters = false;
  SubscriberCounters counters;
  std::optional<Mac> learned_mac;
};

// A provisioned address or prefix that overlaps a reserved one.
struct ReservedConflict {
  SubKey key{};
  std::string field, value;  // "ipv4", "100.64.0.1"
  std::string reserved;      // what it conflicts with
};

struct ListQuery {
  uint32_t page_size = 1000;
  std::string page_token;
  std::string port;    // empty = any
  uint32_t outer = 0;  // 0 = any
  bool with_counters = false;
};

class SubscriberStore {
 public:
  // Subscribers per planned and applied stream batch. Up to four batches are
  // alive at once (one received, two queued, one applied), each holding its
  // messages and specs: 2048 keeps them to a few MB (8192 cost ~25 MB of
  // peak RSS at 1M subscribers) at the same load rate, and
  // still reaches kParallelApply.
  static constexpr size_t kStreamBatch = 2048;
  // Plans at least this large write the route maps from two threads.
  static constexpr size_t kParallelApply = 2048;
  static constexpr size_t kMaxReportedFailures = 1000;

  // On the kernel maps `maps`.
  SubscriberStore(const StoreMaps& maps, PortResolver ports, EventHub* hub);
  // On any maps (unit tests: maps in memory).
  SubscriberStore(std::unique_ptr<MapOps> maps, PortResolver ports, EventHub* hub);

  // From now on, every change of the maps is first recorded in
  // `j` (see journal.h). Set before rebuild() or the first change.
  void set_journal(std::unique_ptr<Journal> j);
  // Fresh maps (no adoption): a change left pending in the journal is void.
  // Returns what was discarded, for the log ("" when nothing was pending).
  std::string discard_journal();

  // Rebuilds the index from the maps (adoption). Orphan routes (owner gone,
  // or host route that no longer matches its owner) are deleted. A change
  // the previous agent left pending in the journal is then resolved: an
  // upsert rolled back, a delete rolled forward (said in *summary). Returns
  // the number of subscribers found.
  size_t rebuild(std::string* summary);

  // All or nothing. `specs` are validated (api/convert.h); an error names
  // the entry as "subscribers[i]".
  absl::Status upsert(std::vector<SubscriberSpec> specs, UpsertResult* out);
  // Bulk: each entry applied whole or reported. Entries are fed in order, in
  // batches of kStreamBatch, by `source` (on a thread of the store's, while
  // this one applies the previous batch); an error names an entry as
  // "entry i", numbered from 0.
  // `resync`: the entries restate what a source of truth holds (the fleet's
  // full read), not new requests: an entry equal to the subscriber's
  // provisioning is left alone even under mac policy "follow" (where a
  // request without MAC otherwise makes it learn again).
  void stream(const StreamSource& source, StreamResult* out, bool resync = false);
  absl::Status remove(const std::vector<SubKey>& keys, uint64_t* deleted, uint64_t* not_found);
  // NOT_FOUND when `key` is not provisioned.
  absl::Status get(const SubKey& key, SubscriberView* out) const;
  // get() of many keys at once (found[i] 0: keys[i] is not provisioned),
  // the counters read with a chunk of keys per map and system call
  // (MapOps::lookup_many) instead of a lookup per map entry.
  void get_many(std::span<const SubKey> keys, std::vector<SubscriberView>* out,
                std::vector<uint8_t>* found) const;
  // INVALID_ARGUMENT for a bad page token, port or outer VLAN.
  absl::Status list(const ListQuery& q, std::vector<SubscriberView>* out, std::string* next_token,
                    uint64_t* total) const;

  // From now on refuse claims that overlap `r`, and check every
  // provisioned subscriber against it (conflicts logged and kept for
  // GetStats). Null: no reserved addresses.
  void set_reserved(std::shared_ptr<const ReservedSet> r);
  std::vector<ReservedConflict> reserved_conflicts(uint64_t* total) const;
  static constexpr size_t kMaxReportedConflicts = 100;

  // The fast path moved subscriber k to `mac` (policy follow):
  // the MAC copies in its routes follow.
  void follow_mac(const SubKey& k, const Mac& mac);

  size_t size() const;

  // Bring-up (DHCP, RS): the provisioned binding of `k` and, for a
  // subscriber provisioned without MAC, the MAC learned so far (from the
  // fast path or a DHCP exchange; `learned` null: not read, no map lookup).
  // False when `k` is not provisioned.
  bool binding(const SubKey& k, SubscriberSpec* out, std::optional<Mac>* learned) const;
  // binding() of many keys at once, the learned MACs read with a chunk of
  // keys per system call (MapOps::lookup_many) instead of a lookup each
  // (found[i] 0: keys[i] is not provisioned).
  void bindings_many(std::span<const SubKey> keys, std::vector<SubscriberSpec>* out,
                     std::vector<std::optional<Mac>>* learned, std::vector<uint8_t>* found) const;
  // The subscriber whose IPv4 address is exactly `be` (network order), from
  // the ownership index (dynamic authorization's Framed-IP-Address).
  std::optional<SubKey> owner_of_ipv4(uint32_t be) const;
  // Records the MAC a valid DHCP exchange showed for a subscriber
  // provisioned without one: the subscriber entry gets it (the routes take it
  // from there on first use) and MAC_LEARNED is published. FAILED_PRECONDITION
  // when another MAC is already known; NOT_FOUND when not provisioned.
  absl::Status learn_mac(const SubKey& k, const Mac& mac);
  // A MAC learned on the group's active member (HA state replication), for
  // a subscriber provisioned without one: the subscriber entry takes it
  // (replacing one learned before: policy follow moves it) and its routes
  // follow. False when not provisioned or provisioned with a MAC.
  bool apply_replica_mac(const SubKey& k, const Mac& mac);
  // Told of every MAC learn_mac() records, under the store's lock: it must
  // only queue (HA state replication). Set once, before the first change.
  using MacHook = std::function<void(const SubKey& k, const Mac& mac)>;
  void set_mac_hook(MacHook h) { mac_hook_ = std::move(h); }
  // Entries of each subscriber-sized map as the index knows them.
  uint64_t map_entries(MapId id) const;
  const PortResolver& ports() const { return ports_; }
  // Map writes a rollback (or a cleanup after a change) could not do: each
  // is logged with what it left behind, and counted here.
  uint64_t rollback_failures() const { return rollback_failures_.load(std::memory_order_relaxed); }

  // Called for every subscriber a change created, updated or deleted, once
  // the change is in the maps and the index, under the store's lock (so that
  // nothing reads the subscriber in between): `now` null = deleted,
  // `created` = the key was not provisioned before. Every path that changes
  // subscribers (upsert, stream and import, delete, the fleet's sync) goes
  // through here; the lease table ends the leases a subscriber loses. Set
  // once, before the first change; it must not call back into the store.
  using ChangeHook = std::function<void(const SubKey& k, const SubscriberSpec* now, bool created)>;
  void set_change_hook(ChangeHook h) { change_hook_ = std::move(h); }
  // Called, under the store's lock, for each subscriber of origin `origin`
  // about to be deleted, with its counters as they are just before its
  // entries leave the maps (RADIUS accounting's Stop). The same rules as the
  // change hook. Set once, before the first change.
  using RemovalHook = std::function<void(const SubscriberView& last)>;
  void set_removal_hook(uint8_t origin, RemovalHook h) {
    removal_origin_ = origin;
    removal_hook_ = std::move(h);
  }

 private:
  struct Plan;
  struct Staged;
  enum class Mode { kAtomic, kSequential };

  // ---- planning (planner.cpp)
  // Plans entries [0, n); in kSequential mode stops before an entry whose key
  // is already in the plan and returns its position (n when all planned).
  size_t plan(const std::vector<SubscriberSpec>& specs, const std::vector<size_t>& input_index,
              Mode mode, Plan* p, absl::Status* atomic_error,
              std::vector<std::pair<size_t, absl::Status>>* failures);
  // The checks of one entry's claims against the index, the reserved
  // addresses and the plan; counts in adds[] the entries it would add, and
  // marks in *owned the claims that have an owner and in *own those whose
  // owner is the entry's own subscriber (bit i: claim i, i < 64).
  // (`input` numbers the entry in messages: "subscribers[i]" when atomic,
  // "entry i" otherwise.)
  absl::Status check_entry(const SubscriberSpec& s, const std::vector<RouteKey>& cl, bool atomic,
                           size_t input, const absl::flat_hash_map<uint64_t, size_t>& released,
                           const Plan& p, const std::vector<SubscriberSpec>& specs, uint64_t* adds,
                           uint64_t* owned, uint64_t* own) const;
  absl::Status check_capacity(const Plan& p, const uint64_t* adds, bool atomic, size_t input) const;
  // Takes the planned entry's claims into the plan.
  static void add_to_plan(Plan* p, const SubscriberSpec& s, const std::vector<RouteKey>& cl,
                          size_t i, const uint64_t* adds);
  // Nested overlaps of claim `c` (of the entry with key rank `rank`) with
  // claims of other subscribers, in the index (unless `released`) and in the
  // plan. Exact duplicates are not looked at (the caller checks them).
  absl::Status overlap(const RouteKey& c, uint64_t rank, const SubKey& key,
                       const absl::flat_hash_map<uint64_t, size_t>& released, const Plan& p,
                       const std::vector<SubscriberSpec>& specs, bool atomic, size_t input) const;

  // ---- the stream pipeline (stream.cpp)
  // Plans and applies specs (numbered by idx) in sequential mode under mu_,
  // reporting each refused entry to `fail`; leaves both vectors empty (their
  // buffers kept for reuse).
  void apply_specs(std::vector<SubscriberSpec>& specs, std::vector<size_t>& idx, bool resync,
                   const std::function<void(size_t, const absl::Status&)>& fail, uint64_t* applied);

  // ---- writing (writer.cpp)
  absl::Status apply(Plan& p);
  // The values apply() writes, and what they replace: slots taken, every
  // claim placed and the replaced routes listed (stage_*), the new values
  // encoded; then, in write_staged(), the police slots, the subscriber
  // entries and each route map's routes written over what they replace in
  // one pass that reads it, carries the kernel's fields over and writes
  // (MapOps::swap_many; a route that would not change is not written).
  void stage_entries(const Plan& p, Staged* w);
  void stage_routes(const Plan& p, Staged* w) const;
  void encode_entries(const Plan& p, Staged* w);
  static void set_mac(Staged* w, size_t i);
  template <typename V, typename K, typename KeyOf, typename ValOf, typename Got>
  int write_in_order(MapId m, Staged* w, KeyOf key, ValOf val, Got got, size_t* done);
  int write_police(Staged* w, size_t* done);
  int write_subscribers(Staged* w, size_t* done);
  int write_route_map(const Plan& p, MapId m, Staged* w, size_t* written) const;
  absl::Status write_staged(const Plan& p, Staged* w);
  void undo(Staged* w, size_t police, size_t subs, const size_t* routes);
  void commit_index(Plan& p, const Staged& w);
  // Removes the indexed keys among `keys` (routes first, then the entries).
  absl::Status remove_locked(const std::vector<SubKey>& keys, uint64_t* deleted,
                             uint64_t* not_found);
  struct Removal;
  void collect_removal(const std::vector<SubKey>& ks, Removal* r, uint64_t* not_found) const;
  absl::Status delete_removal(Removal& r);
  void forget(const std::vector<uint32_t>& recs);
  // A write that had to be undone could not be: logged and counted.
  void rollback_failed(MapId m, size_t entries, int rc, const char* what);

  // ---- journal and adoption (adoption.cpp)
  // Journal: records the intent; an error status means nothing
  // may be written. No-ops without a journal or while recovering.
  absl::Status journal_begin(const JournalIntent& intent);
  void journal_clear();
  // Resolves a change the previous agent left pending (under mu_).
  std::string recover(const JournalIntent& intent);
  struct Adopted;
  void adopt_subscribers(Adopted* a);
  void adopt_routes(Adopted* a);
  void repair_host_routes(Adopted* a);
  void refresh_policies(const std::optional<JournalIntent>& intent, Adopted* a);

  // ---- queries (query.cpp)
  void fill_counters(uint32_t rec, SubscriberView* out) const;
  void view_of(uint32_t rec, bool counters, SubscriberView* out) const;
  uint64_t key_ranges(std::optional<uint32_t> port, uint32_t outer,
                      std::vector<std::pair<uint64_t, uint64_t>>* ranges) const;

  uint64_t map_entries_locked(MapId id) const;
  uint8_t effective_mac_policy(const SubscriberSpec& s) const;
  static void claims_of(const SubscriberSpec& s, std::vector<RouteKey>* out) {
    ClaimsIndex::claims_of(s, out);
  }
  uint32_t alloc_record(SubscriberSpec&& s);
  // Puts s at record (= police slot) `rec`, growing the table as needed.
  void place_record(uint32_t rec, SubscriberSpec&& s);
  void count_key(const SubKey& k, int delta);
  std::string owner_name(uint32_t rec) const;
  void publish(EventType type, const SubKey& k, const Mac* mac);

  std::unique_ptr<MapOps> maps_;
  PortResolver ports_;
  ChangeHook change_hook_;
  MacHook mac_hook_;
  uint8_t removal_origin_ = 0;
  RemovalHook removal_hook_;
  EventHub* hub_;
  std::shared_ptr<const ReservedSet> reserved_;  // under mu_
  std::unique_ptr<Journal> journal_;             // under mu_; null: none
  bool recovering_ = false;                      // rebuild(): journal_ left as found
  mutable std::mutex conflicts_mu_;
  std::vector<ReservedConflict> conflicts_;
  uint64_t conflicts_total_ = 0;
  std::atomic<uint64_t> rollback_failures_{0};

  mutable std::shared_mutex mu_;
  std::vector<SubscriberSpec> recs_;  // ifindex 0 = free slot
  std::vector<uint32_t> free_;
  absl::btree_map<uint64_t, uint32_t> index_;  // key_rank → record (sorted: stable pages)
  ClaimsIndex claims_{&recs_};                 // address/prefix → record
  absl::flat_hash_map<uint32_t, uint64_t> per_port_;
  absl::flat_hash_map<uint64_t, uint64_t> per_port_outer_;
};

}  // namespace xbng::agent
