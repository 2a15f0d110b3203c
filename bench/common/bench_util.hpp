// (Namespace xbench, not xbng::bench: the generated skeleton declares a
// global `struct xbng`, which a namespace xbng would collide with.)
// Shared plumbing of the xbng benchmarks (per-packet cost and forwarding): shell and
// namespace helpers, benchmark frames, subscriber addressing, loading the
// fast path and the harness and filling their maps, per-CPU counters.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "pktcost.h"
#include "xbng/abi.h"

struct xbng;
struct pktcost;

namespace xbench {

struct BenchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Mac = std::array<uint8_t, 6>;

// ---- processes and namespaces -------------------------------------------------
// Runs `bash -c cmd` (in the calling thread's network namespace); throws with
// the command's output when it fails. Returns stdout.
std::string sh(const std::string& cmd);
// `ip [-n ns] -batch FILE` over `lines`, in chunks.
void ip_batch(const std::string& ns, const std::vector<std::string>& lines);
// Writes a sysctl of the calling thread's network namespace (/proc/sys/net).
void sysctl_net(const std::string& key, const std::string& value);

// Moves the calling thread into /run/netns/<name> until destroyed.
class NetnsGuard {
 public:
  explicit NetnsGuard(const std::string& name);
  ~NetnsGuard();
  NetnsGuard(const NetnsGuard&) = delete;
  NetnsGuard& operator=(const NetnsGuard&) = delete;

 private:
  int orig_ = -1;
};

// Named namespaces xbngbench-<pid>-<role>, removed on every exit path we
// control (explicit remove, atexit, SIGINT/SIGTERM/SIGHUP/SIGQUIT); leftovers
// of a killed run (dead pid) are swept at start.
class NetnsRegistry {
 public:
  static std::string create(const std::string& role);  // returns the name
  static void remove_all();
  static void sweep_stale();
  static void install_handlers();
};

// In the calling thread's namespace.
unsigned ifindex_of(const std::string& ifname);
Mac mac_of(const std::string& ifname);
std::string mac_str(const Mac& m);

// ---- subscriber addressing (see pktcost.h) ------------------------------------
inline uint16_t sub_svid(uint32_t i) { return 1 + i / PC_CVIDS_PER_SVID; }
inline uint16_t sub_cvid(uint32_t i) { return 1 + i % PC_CVIDS_PER_SVID; }
inline uint32_t sub_v4(uint32_t i) { return PC_V4_BASE + i; }  // host order
std::array<uint32_t, 4> sub_v6(uint32_t i);                    // network order words
std::array<uint32_t, 2> sub_v6_64(uint32_t i);                 // network order words
Mac sub_mac(uint32_t i);

// ---- frames ---------------------------------------------------------------------
// Templates for subscriber 0; the wrapper rewrites the keys per repetition.
struct FrameAddrs {
  Mac dst{};  // the port MAC (upstream) / next-hop MAC
  Mac src{};
  uint32_t v4_other = 0xcb007101;  // 203.0.113.1: the far end (host order)
  std::array<uint8_t, 16> v6_other{0x20, 0x01, 0x0d, 0xb8, 0xf0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
};
std::vector<uint8_t> frame_up_v4(const FrameAddrs& a);  // QinQ 0x88a8 IPv4/UDP, 72 bytes
std::vector<uint8_t> frame_up_v6(const FrameAddrs& a);  // QinQ IPv6/UDP, 72 bytes
std::vector<uint8_t> frame_arp(const FrameAddrs& a, uint32_t target_v4);   // QinQ ARP request
std::vector<uint8_t> frame_down_v4(const FrameAddrs& a, uint32_t src_v4);  // IPv4/UDP, 64 bytes
std::vector<uint8_t> frame_down_v6(const FrameAddrs& a, bool prefix64);    // IPv6/UDP, 64 bytes
// TCP SYNs with MSS 8960 (clamped by xbng on every pass).
std::vector<uint8_t> frame_up_syn4(const FrameAddrs& a);                     // QinQ, 66 bytes
std::vector<uint8_t> frame_down_syn4(const FrameAddrs& a, uint32_t src_v4);  // 58 bytes

// ---- skeletons -------------------------------------------------------------------
struct XbngDeleter {
  void operator()(::xbng* s) const;
};
struct PktcostDeleter {
  void operator()(::pktcost* s) const;
};
using XbngSkel = std::unique_ptr<::xbng, XbngDeleter>;
using PktcostSkel = std::unique_ptr<::pktcost, PktcostDeleter>;

// The fast path with its subscriber-sized maps at `n` entries.
XbngSkel load_xbng(uint32_t n);
// The harness with its reference maps at `n` entries.
// subs: the subscriber-keyed references sized to n too (else 1 entry).
PktcostSkel load_pktcost(uint32_t n, bool subs = false);

int xbng_prog_access(::xbng* s);
int xbng_prog_uplink(::xbng* s);

struct PortConfig {
  uint32_t ifindex = 0;
  uint16_t role = XBNG_ROLE_NONE;
  Mac mac{};
  uint32_t slot = 0;
};
// ports[ifindex] and tx_ports[ifindex] (devmap: call in the port's namespace).
void xbng_add_port(::xbng* s, const PortConfig& p);
// N subscribers on access port `access_ifindex`: subscribers, routes_v4,
// routes_v6, routes_v6_64 (bpf_map_update_batch). Returns seconds taken.
// police: every subscriber gets a rate plan far above what the
// harness sends (100 Gbit/s, 1 MB bursts, both directions): the buckets are
// charged on every packet, nothing is dropped. Else: unlimited.
double xbng_fill_subscribers(::xbng* s, uint32_t access_ifindex, uint32_t n, bool police = false);
// The direct pool of the benchmark's N subscribers: the smallest IPv4 prefix
// at 100.64.0.0 holding sub_v4(0 .. n-1) (its length), and its size.
uint32_t bench_direct_len(uint32_t n);
inline uint32_t bench_direct_slots(uint32_t n) { return 1u << (32 - bench_direct_len(n)); }
// The IPv6 direct pools of the N subscribers, laid out in `direct_v6`: the
// /64s of the smallest prefix at 2001:db8:2000::/36 holding sub_v6_64(0 ..
// n-1) (slots 0 .. bench_direct_64_slots(n) - 1), then the /128s of the
// smallest prefix at 2001:db8:1000::/64 holding sub_v6(0 .. n-1).
uint32_t bench_direct_64_slots(uint32_t n);
uint32_t bench_direct_128_slots(uint32_t n);
// Points xbng's host-route lookups at the direct arrays (on: the bench's
// pools, one IPv4 and two IPv6; off: empty tables, every route on the hash
// path). Both hold the same routes (xbng_fill_subscribers writes both).
void xbng_set_direct(::xbng* s, uint32_t n, bool on);
// The direct subscriber range of the benchmark's N subscribers: S-VIDs
// 1 .. sub_svid(n - 1) of the access port, 4096 slots each.
uint32_t bench_dsub_svids(uint32_t n);
inline uint32_t bench_dsub_slots(uint32_t n) { return bench_dsub_svids(n) * XBNG_DIRECT_SUB_CVIDS; }
// Points xbng's subscriber lookup at the direct array (on: one range, the
// bench's; off: an empty table, every subscriber on the hash path). Both
// hold the same subscribers (xbng_fill_subscribers writes both).
void xbng_set_direct_subs(::xbng* s, uint32_t access_ifindex, uint32_t n, bool on);
// Kernel memory (fdinfo memlock) of a map of `type` with N entries
// of these sizes, created and closed again.
uint64_t map_memlock(uint32_t type, uint32_t key_size, uint32_t value_size, uint32_t n,
                     uint32_t flags = 0);
// Reference maps over the same IPv4 keys; ref_tx[0] = redirect_ifindex
// (call in that device's namespace).
double pktcost_fill_refs(::pktcost* s, uint32_t access_ifindex, uint32_t n);
// The subscriber-keyed references (load_pktcost(n, true)).
double pktcost_fill_sub_refs(::pktcost* s, uint32_t access_ifindex, uint32_t n);
void pktcost_set_ref_tx(::pktcost* s, uint32_t ifindex);
void pktcost_set_slot(::pktcost* s, uint32_t slot, int prog_fd);

// Sum over CPUs of xbng stats[reason].packets.
uint64_t xbng_reason_packets(::xbng* s, uint32_t reason);
// Every reason's packets (index = enum xbng_reason).
std::vector<uint64_t> xbng_all_reasons(::xbng* s);
std::string reason_name(uint32_t reason);
// Sum over CPUs of pktcost counters[idx] (PC_CNT_*).
uint64_t pktcost_counter(::pktcost* s, uint32_t idx);
constexpr uint32_t kCntRefMiss = 0;
constexpr uint32_t kCntSink = 1;

// Wrapper configuration (through the mmap'ed .bss).
struct WrapperConfig {
  std::vector<uint8_t> tmpl;
  uint32_t mode = PC_MODE_NONE;
  uint32_t nkeys = 1;
  bool random = false;
  uint32_t fixed_index = 0;
  bool use_tail = true;
  uint32_t target = PC_SLOT_REF_NOP;
  uint32_t out_action = 3;  // XDP_TX
};
void pktcost_configure(::pktcost* s, const WrapperConfig& c);

// ---- misc -------------------------------------------------------------------------
std::string action_name(uint32_t action);
// "1K" -> 1000, "60K" -> 60000, "1M" -> 1000000, "1234" -> 1234.
uint32_t parse_size(const std::string& s);
// "1K,60K,1M" -> sorted, unique sizes.
std::vector<uint32_t> parse_sizes(const std::string& list);
// a / b, or nothing when either figure is missing or b is not positive.
std::optional<double> ratio(std::optional<double> a, std::optional<double> b);
std::string size_label(uint32_t n);
nlohmann::json machine_info();
double now_s();  // monotonic

}  // namespace xbench
