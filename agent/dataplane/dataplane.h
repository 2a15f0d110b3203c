// Dataplane: the XDP programs and their maps, pinned under
// <bpffs>/v<XBNG_ABI_VERSION>/{maps,links}/. Start loads the embedded
// skeleton, adopting what is already pinned (maps reused, programs swapped
// into the pinned links without detaching), configures the ports and leaves
// everything pinned when destroyed: forwarding outlives the agent.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "xbng/abi.h"
#include "dataplane/host_services.h"
#include "common/direct.h"
#include "common/direct_sub.h"
#include "common/net.h"
#include "common/status.h"
#include "dataplane/pinlock.h"
#include "store/subscriber.h"

struct XbngSkelRefs;

namespace xbng::agent {

// One identifier per map of include/xbng/maps.def, in its order.
enum class MapId : int {
#define XBNG_MAP(id, name, sizing, trace) id,
#include "xbng/maps.def"
#undef XBNG_MAP
  kCount
};
inline constexpr int kMapCount = static_cast<int>(MapId::kCount);
const char* map_name(MapId id);
// Maps whose size follows --max-subscribers (sizing SUBSCRIBERS).
bool map_sized_by_subscribers(MapId id);
// Maps whose size follows limits.direct_slots or limits.direct_slots_v6
// (sizing DIRECT, DIRECT6).
bool map_sized_by_direct(MapId id);
// Maps whose size follows limits.direct_subscriber_slots (sizing DIRECT_SUBS).
bool map_sized_by_direct_subs(MapId id);
// Maps the trace build reuses from the running programs (trace SHARED).
bool map_shared_with_trace(MapId id);

struct DispatchLoadTarget;  // dataplane/xdp_dispatch.h

struct DataplaneError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct PortInfo {
  std::string name;
  uint32_t ifindex = 0;
  int role = XBNG_ROLE_NONE;
  struct xbng_port cfg {};
};

// Settings of one access port that differ from the global ones.
struct AccessPortOverride {
  std::optional<uint16_t> outer_tpid;
  uint16_t mtu = 0;                      // 0: the netdev's MTU
  std::optional<uint32_t> gateway_ipv4;  // network order
  std::optional<Ipv6> gateway_ipv6;
  uint16_t sub_mtu = 0;  // 0: XBNG_DEFAULT_SUBSCRIBER_MTU
  bool mss_clamp = true;
  std::vector<Prefix> pools;
  // S-VLAN ranges (first, last) whose subscribers go to the direct array.
  std::vector<std::pair<uint16_t, uint16_t>> direct_svlans;
  PolicySpec default_policy;          // the port's default rate plan
  std::optional<uint8_t> mac_policy;  // enum xbng_mac_policy
  bool punt_unknown = false;          // XBNG_PORT_F_PUNT_UNKNOWN (auth = "radius")
  bool relay4 = false;                // XBNG_PORT_F_RELAY4 (dhcp = "relay", IPv4 servers)
};

// Settings of one uplink.
struct UplinkPortOverride {
  std::optional<uint32_t> icmp_source_ipv4;  // network order; default: first global address
  std::optional<Ipv6> icmp_source_ipv6;
};

struct DataplaneOptions {
  std::vector<std::string> access;
  std::map<std::string, AccessPortOverride> access_overrides;  // by access port name
  std::vector<std::string> uplink;
  std::map<std::string, UplinkPortOverride> uplink_overrides;  // by uplink name
  uint64_t icmp_rate_per_sec = XBNG_DEFAULT_ICMP_RATE;
  uint64_t icmp_burst = XBNG_DEFAULT_ICMP_BURST;
  uint32_t gateway_ipv4 = 0;  // network order, 0 = none
  Ipv6 gateway_ipv6{};
  std::string bpffs = "/sys/fs/bpf/xbng";
  uint32_t max_subscribers = XBNG_DEFAULT_MAX_SUBSCRIBERS;
  // Slots of `direct_v4` (IPv4 host routes inside the pools; 0: none, every
  // /32 in the hash). Fixed at creation like max_subscribers.
  uint32_t direct_slots = 0;
  // Slots of `direct_v6` (IPv6 /64s and /128s inside the pools; 0: none).
  uint32_t direct_slots_v6 = 0;
  // Slots of `direct_subscribers` (subscribers inside the access ports'
  // declared S-VLAN ranges, 4096 a range's S-VLAN; 0: none, every
  // subscriber in the hash). Fixed at creation like max_subscribers.
  uint32_t direct_subscriber_slots = 0;
  uint16_t outer_tpid = XBNG_ETH_P_8021AD;
  bool xdp_generic = false;
  // How the programs reach each port's XDP hook: xbng's own pinned bpf_link
  // (false), or libxdp's dispatcher at run priority `xdp_priority`, beside
  // the operator's programs (true; agent/dataplane/xdp_dispatch.h).
  bool xdp_libxdp = false;
  unsigned xdp_priority = 100;
  uint64_t events_per_sec = XBNG_DEFAULT_EVENTS_PER_SEC;
  uint64_t unknown_interval_ns = XBNG_DEFAULT_UNKNOWN_INTERVAL_NS;
  // MAC policy of access ports without their own, and the host
  // services subscribers may reach.
  uint8_t mac_policy = XBNG_MAC_POLICY_LEARN_ONCE;
  std::vector<LocalService> allow_to_host;
  // Bring-up: punt control frames to xbngd, and their limits.
  bool punt_enabled = true;
  uint32_t punt_sub_rate = XBNG_DEFAULT_PUNT_SUB_RATE;    // frames/s per subscriber
  uint32_t punt_sub_burst = XBNG_DEFAULT_PUNT_SUB_BURST;  // frames in a burst
  uint64_t punt_port_rate = XBNG_DEFAULT_PUNT_PORT_RATE;  // frames/s per access port per CPU
  bool punt_xsk = false;  // punted frames to AF_XDP sockets (`punt_xsks`), else the ring buffer
  // Tests: skip writing /proc/sys forwarding and ethtool changes.
  bool configure_netdevs = true;
  // High availability ([ha]): ports start standby (xbng_port.ha_deadline_ns
  // = XBNG_HA_STANDBY), access ports answer with the group's virtual MAC,
  // uplinks carry the VIPs (gw_ipv4/gw_ipv6) whose ARP/ND XDP drops while
  // not active.
  bool ha = false;
  Mac ha_virtual_mac{};
  uint32_t ha_vip4 = 0;  // network order, 0 = none
  Ipv6 ha_vip6{};
};

// Whether `path` is on a bpf filesystem; refuses (DataplaneError) one that
// is not the host's (a private mount namespace's: its pins die with xbngd).
bool is_bpffs(const std::string& path);
void refuse_private_bpffs(const std::string& path);

// The slots option a map sized by the direct options follows.
uint32_t map_direct_slots(MapId id, const DataplaneOptions& o);

// Paths under a bpffs directory.
std::string pin_root(const std::string& bpffs);  // <bpffs>/v<ABI>
std::string map_pin_path(const std::string& bpffs, MapId id);
std::string link_pin_path(const std::string& bpffs, const std::string& ifname);

class Dataplane {
 public:
  // Throws DataplaneError with an actionable message.
  static std::unique_ptr<Dataplane> start(const DataplaneOptions& opts);
  // Detaches every pinned link (all ABI versions), takes xbng's programs out
  // of libxdp's dispatchers (leaving the others'), and removes every pin,
  // under the pin directory's lock (a running agent holds it: refused).
  struct TeardownReport {
    std::vector<std::string> removed;  // one line per detached/unpinned object
    std::vector<std::string> errors;   // anything that failed or was refused
    bool nothing_to_remove = false;    // no pin directory, or nothing in it
    bool ok() const { return errors.empty(); }
  };
  static TeardownReport teardown(const std::string& bpffs);

  ~Dataplane();
  Dataplane(const Dataplane&) = delete;
  Dataplane& operator=(const Dataplane&) = delete;

  int fd(MapId id) const { return fds_[static_cast<int>(id)]; }
  uint32_t max_entries(MapId id) const { return max_entries_[static_cast<int>(id)]; }
  bool adopted() const { return adopted_; }
  // Where host routes live (the tables written to `direct_pools` and
  // `direct_pools_v6`).
  const DirectLayout& direct() const { return direct_; }
  // Where subscribers live (the table written to `direct_sub_ranges`).
  const DirectSubLayout& direct_subs() const { return direct_subs_; }
  const std::vector<PortInfo>& ports() const { return ports_; }
  const std::string& bpffs() const { return opts_.bpffs; }
  PortResolver resolver() const;
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Raises each access netdev's MTU back to subscriber_mtu + 8 if it was
  // lowered (SIGHUP). A failed precondition naming every netdev it could
  // not raise.
  absl::Status ensure_access_mtu();
  // Writes the load-time configuration (rodata) of this agent's programs
  // into an opened skeleton: the live one, and the trace build's (trace.h).
  void apply_load_config(XbngSkelRefs* refs) const;
  // Rewrites `local_allow` (start, reload). Throws DataplaneError.
  void set_allow_to_host(const std::vector<LocalService>& services);
  // High availability: writes `ns` (CLOCK_MONOTONIC; XBNG_HA_STANDBY for a
  // standby) as every port's ha_deadline_ns. Returns false (logged) when a
  // port entry could not be written. Thread-safe.
  bool set_ha_deadline(uint64_t ns);

 private:
  Dataplane() = default;
  void open_and_load();
  void attach_ports();
  void attach_port_link(const PortInfo& p, int prog_fd);
  void check_attach();
  void configure_ports();
  void assign_port_slots();
  void fill_port_config(PortInfo& p);
  void configure_pools();
  void configure_direct(const std::vector<Prefix>& pools);
  void count_direct_v6();
  void configure_direct_subs();
  void move_direct_subs(const DirectSubLayout& have, const DirectSubLayout& want);
  void check_pools() const;
  void ensure_access_mtu_or_throw();
  uint16_t subscriber_mtu(const std::string& port) const;
  void configure_uplink_icmp_source(const std::string& name, struct xbng_port* c);

  PinLock lock_;  // the pin directory, held for the agent's life
  DataplaneOptions opts_;
  std::unique_ptr<XbngSkelRefs> skel_;
  int fds_[kMapCount];
  uint32_t max_entries_[kMapCount]{};
  bool adopted_ = false;
  std::vector<PortInfo> ports_;
  std::vector<std::string> warnings_;
  DirectLayout direct_;
  std::shared_ptr<DispatchLoadTarget> load_target_;  // xdp_attach = "libxdp", until load
  DirectSubLayout direct_subs_;
};

// Opens the pinned maps of <bpffs>/v<ABI> read-write without loading
// anything (xbngctl bpf dump, tests). Throws DataplaneError.
class PinnedMaps {
 public:
  explicit PinnedMaps(const std::string& bpffs);
  ~PinnedMaps();
  PinnedMaps(const PinnedMaps&) = delete;
  PinnedMaps& operator=(const PinnedMaps&) = delete;
  int fd(MapId id) const { return fds_[static_cast<int>(id)]; }

 private:
  int fds_[kMapCount];
};

// ---- map helpers ----------------------------------------------------------
// Writes n entries; uses bpf_map_update_batch, falls back to single updates
// where the map type lacks batch support. Returns 0 or -errno; *done is the
// number of leading entries written.
int map_update_many(int fd, const void* keys, const void* values, size_t n, size_t key_size,
                    size_t value_size, size_t* done);
// Deletes n keys, ignoring keys that are absent. Returns 0 or -errno.
int map_delete_many(int fd, const void* keys, size_t n, size_t key_size);
// Calls fn(key, value) for every entry (value size = value_size; for
// per-CPU maps pass the full per-CPU size). Returns 0 or -errno.
int map_for_each(int fd, size_t key_size, size_t value_size,
                 const std::function<void(const void*, const void*)>& fn);
int possible_cpus();
// ---- direct routes (direct_maps.cpp) -------------------------------------
// The hash map whose keys the slots of unit u stand for, and their array.
MapId direct_hash_map(DirectUnit u);
MapId direct_array_map(DirectUnit u);
// The units whose slots live in family f's (4 or 6) array.
std::vector<DirectUnit> direct_units(int f);
// The unit of a route map's keys that a direct array can hold, or none.
std::optional<DirectUnit> direct_unit_of(MapId route_map);

// A direct array (`direct_v4`, `direct_v6`: mmapable) mapped into this
// process, so that its lines are read, cleared and filled in place instead
// of one system call each.
class DirectLines {
 public:
  DirectLines() = default;
  ~DirectLines();
  DirectLines(const DirectLines&) = delete;
  DirectLines& operator=(const DirectLines&) = delete;
  // Maps array `fd` (read-only unless `write`). Returns 0 or -errno.
  int map(int fd, bool write);
  uint32_t size() const { return n_; }
  struct xbng_direct_route* line(uint32_t slot) const {
    return slot < n_ ? &mem_[slot] : nullptr;
  }

 private:
  struct xbng_direct_route* mem_ = nullptr;
  uint32_t n_ = 0;
  size_t len_ = 0;
};

// Calls fn(key, route) for every present entry of the pools of unit u (key:
// the hash map's key bytes) in array `fd` under layout `d`. Returns 0 or
// -errno.
int direct_for_each(int fd, const DirectLayout& d, DirectUnit u,
                    const std::function<void(const void* key, const struct xbng_route&)>& fn);
// Reads the layout `direct_pools` and `direct_pools_v6` hold. Returns 0 or
// -errno.
int direct_read_layout(int pools_fd, int pools_v6_fd, DirectLayout* out);
// Writes family f's (4 or 6) table of `d`. Throws DataplaneError.
void direct_write_table(int f, int pools_fd, const DirectLayout& d);
// Writes the n128 count of every line of d's pools of /64s (abi.h
// xbng_direct_route) from the /128s in `routes_v6` (fd): each line goes from
// its old count to the exact one in one store, so that a /128 the hash
// holds is never uncounted. `lines` mapped writable. Returns the /128s
// counted. Throws DataplaneError.
size_t direct_count_v6(int routes_v6_fd, const DirectLines& lines, const DirectLayout& d);
// Moves family f's host routes from layout `have` to `want`; fd(m) gives
// the maps. Returns how many moved {out of the arrays, into them}. Throws
// DataplaneError. See Dataplane::configure_direct.
std::pair<size_t, size_t> direct_relayout(int f, const DirectLayout& have, const DirectLayout& want,
                                          const std::function<int(MapId)>& fd);
// Calls fn(key, subscriber) for every present entry of the
// `direct_subscribers` array `fd` under layout `d` (XBNG_SUB_F_PRESENT
// stripped). Returns 0 or -errno.
int direct_sub_for_each(
    int fd, const DirectSubLayout& d,
    const std::function<void(const struct xbng_sub_key&, const struct xbng_subscriber&)>& fn);
// Reads the layout a `direct_sub_ranges` map holds. Returns 0 or -errno.
int direct_sub_read_layout(int ranges_fd, DirectSubLayout* out);
// Looks a subscriber up where layout `d` puts its key: the slot of
// `array_fd`, or the `subscribers` hash `hash_fd`. Returns 0 or -errno
// (-ENOENT: not there; XBNG_SUB_F_PRESENT stripped).
int direct_sub_lookup(int hash_fd, int array_fd, const DirectSubLayout& d,
                      const struct xbng_sub_key& key, struct xbng_subscriber* out);

}  // namespace xbng::agent
