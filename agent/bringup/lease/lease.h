// LeaseTable: what each subscriber's CPE holds from xbngd's DHCP servers,
// per family (bound or not, expiry, address/prefixes). Fed by the DHCPv4 and
// DHCPv6 servers through the dispatcher; read by Get/ListSubscribers;
// publishes LEASE_* events; expires leases on a timer.
//
// A lease belongs to one subscriber and never outlives it nor changes owner:
// the store reports every change of a subscriber (on_subscriber_change, under
// its lock), a deleted or re-created subscriber loses its leases and an
// upsert that takes an address or prefix away ends the lease holding it
// (LEASE_RELEASED). At start, restored leases that no provisioned subscriber
// holds are dropped (retain_owned).
//
// Persistence: a small JSON state file, rewritten atomically (statefile.h:
// a new file, fsync, rename; never through a link) at most once per second
// when something changed and at shutdown. Loading checks every field of
// every entry (types and ranges) and refuses the whole file, naming it and
// the entry, when one is wrong.
// A file rather than a pinned map: leases are the agent's state, not the
// fast path's; a file survives a reboot and an ABI change of the maps, and
// its layout can change without touching the BPF ABI. Keys are stored by
// port name (ifindexes change when a netdev is recreated).
#pragma once

#include <absl/container/btree_set.h>
#include <absl/container/node_hash_map.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "telemetry/events.h"
#include "common/thread_priority.h"
#include "store/subscriber.h"

namespace xbng::agent {

struct Lease {
  bool bound = false;
  uint64_t expires_unix = 0;  // seconds
  uint64_t bound_unix = 0;    // last bind or renew
  std::string address;        // "" = none
  std::vector<std::string> prefixes;
  std::string server;  // the DHCP server that answered (relay ports); "" = xbngd's own
  friend bool operator==(const Lease&, const Lease&) = default;
};

enum class LeaseFamily { kV4 = 0, kV6 = 1 };

class LeaseTable {
 public:
  // state_file "" = no persistence. Loads the file (leases already expired
  // are dropped). Throws std::runtime_error, naming the file (and the
  // entry), on a file that exists but is not a regular file or does not
  // parse and check whole (never silently loses leases).
  LeaseTable(EventHub* hub, PortResolver ports, std::string state_file);
  ~LeaseTable();

  // Told of every bind (LEASE_BOUND, not renewals), every release by the
  // CPE and every expiry, under the table's lock: it must not block nor call
  // back into the table (RADIUS accounting queues an event). Not told of
  // leases ended because their subscriber changed. Set before start().
  using Observer = std::function<void(const SubKey& k, LeaseFamily f, EventType type)>;
  void set_observer(Observer o) { observer_ = std::move(o); }

  // Sizes the table for `n` subscribers up front (--max-subscribers): a
  // table that grows rehashes under its lock, in the middle of a relayed
  // ACK's bind. The agent calls it when an access port relays.
  void reserve(size_t n);
  // Starts the expiry/flush thread (period 1 s).
  void start();
  void stop();  // flushes

  // A bind (or renew when it was bound to the same address): LEASE_BOUND or
  // LEASE_RENEWED. now_unix: seconds.
  // server: the relay's server that answered ("" for xbngd's own).
  void bind(const SubKey& k, LeaseFamily f, std::string address, std::vector<std::string> prefixes,
            uint32_t lifetime_s, uint64_t now_unix, std::string server = "");
  // LEASE_RELEASED when it was bound.
  void release(const SubKey& k, LeaseFamily f, uint64_t now_unix);
  std::optional<Lease> get(const SubKey& k, LeaseFamily f) const;
  // The same for the subscriber named as the API names it (access port name,
  // VLANs); nothing when the port is not an access port.
  std::optional<Lease> get(std::string_view port, uint32_t outer_vlan, uint32_t inner_vlan,
                           LeaseFamily f) const;

  // Subscriber k was changed: `now` null = deleted; `created` = a new
  // subscriber took the key (nothing of an old one's carries over). Ends
  // (LEASE_RELEASED, forgotten) each lease of k that `now` does not hold,
  // every one when deleted or created. Returns how many ended.
  size_t on_subscriber_change(const SubKey& k, const SubscriberSpec* now, bool created);
  // After a bind: ends the lease of family f of k unless `now` (k's
  // subscriber as read after the bind; null = not provisioned) holds it.
  // Closes the window between the dispatcher's read of the binding and its
  // bind, in which a change of the subscriber would have been missed.
  void confirm(const SubKey& k, LeaseFamily f, const SubscriberSpec* now);
  // At start: drops (before anyone watches: no event) every lease whose
  // subscriber `lookup` does not find or that it no longer holds; logs them.
  // Returns how many were dropped.
  size_t retain_owned(const std::function<bool(const SubKey&, SubscriberSpec*)>& lookup);
  // Whether subscriber s holds lease l of family f (its address, prefixes).
  static bool holds(const SubscriberSpec& s, LeaseFamily f, const Lease& l);
  // Expires what ended before now_unix; returns how many. The expiry hook
  // (when set) hears each expired lease after the table's lock is released.
  size_t expire(uint64_t now_unix);
  using ExpiryHook = std::function<void(const SubKey&, LeaseFamily, const Lease&)>;
  void set_expiry_hook(ExpiryHook h) { expiry_hook_ = std::move(h); }
  // Told of every change of a lease as it happens (bind, renewal, release,
  // expiry, end by deprovisioning; `now` null = no longer bound), under the
  // table's lock: it must only queue (HA state replication). Not told of
  // apply_replica(). Set before start().
  using ChangeSink = std::function<void(const SubKey& k, LeaseFamily f, const Lease* now)>;
  void set_change_sink(ChangeSink s) { sink_ = std::move(s); }
  // A lease replicated from the group's active member (`l` null: it ended):
  // applied without events, observer or sink. A bound lease older than the
  // one held (bound_unix) or already expired is ignored. Returns whether
  // anything changed.
  bool apply_replica(const SubKey& k, LeaseFamily f, const Lease* l, uint64_t now_unix);
  // Writes the state file if something changed. Returns false on error.
  bool flush();
  size_t size() const;

 private:
  using Slot = std::array<Lease, 2>;
  void publish(EventType type, const SubKey& k, LeaseFamily f, const Lease& l, uint64_t now_unix);
  // Ends lease f of the entry at `it` (bound) as deprovisioned: event,
  // counter, forgotten (a lease never outlives its subscriber). Under mu_.
  void end_locked(uint64_t rank, std::array<Lease, 2>& slot, int f);
  void load();
  void run();
  bool bound_keys(std::vector<uint64_t>* ranks);

  EventHub* hub_;
  Observer observer_;
  PortResolver ports_;
  ExpiryHook expiry_hook_;
  ChangeSink sink_;
  std::string file_;
  // Priority inheritance: a relayed answer binds its lease from a thread
  // that may run at real-time priority, and flush() (xbng-lease, the
  // default policy) holds mu_ a chunk at a time.
  mutable PiMutex mu_;
  // Nodes: the table's slots are pointers, so that reserve() costs 9 bytes
  // a subscriber rather than a whole Slot.
  absl::node_hash_map<uint64_t, Slot> leases_;                      // key_rank -> per family
  absl::btree_set<std::tuple<uint64_t, uint64_t, int>> by_expiry_;  // (expires, rank, family)
  bool dirty_ = false;
  // While flush() collects the bound leases (a chunk of by_expiry_ at a
  // time): the keys bound meanwhile, which may have moved behind its
  // cursor.
  bool collecting_ = false;
  std::vector<uint64_t> bound_meanwhile_;
  std::atomic<bool> stop_{false};
  std::mutex run_mu_;
  std::condition_variable run_cv_;
  std::thread thread_;
  uint64_t last_trim_ns_ = 0;  // flush()'s last malloc_trim (CLOCK_MONOTONIC)
};

}  // namespace xbng::agent
