// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Table-driven BPF tests: the topology every row runs against, the row
// format, and the runner that feeds rows through BPF_PROG_TEST_RUN.
//
// A row is a description and one or more steps; a step is a frame into one
// program on one port, the expected XDP action, the expected output frame
// (byte-exact; default: the input, unchanged), the expected per-reason
// counter deltas (every reason not listed must stay unchanged), the events
// expected on the ring buffer and the subscriber/route counter deltas. Before
// every row the maps are reset to the baseline topology below.
#ifndef XBNG_TESTS_BPF_HARNESS_H
#define XBNG_TESTS_BPF_HARNESS_H

#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "packet.h"
#include "xbng/abi.h"

struct xbng;
struct ring_buffer;

namespace bpftest {

using testpkt::Bytes;
using testpkt::Ip4;
using testpkt::Ip6;
using testpkt::Mac;
using testpkt::Packet;

// ---- topology ---------------------------------------------------------------
// Interfaces live in the test's private network namespace (see main.cpp).
struct PortDef {
  std::string name;  // interface name in the private netns
  uint16_t role;     // XBNG_ROLE_*
  uint16_t tpid;     // outer TPID (access)
  Mac mac;
  uint16_t mtu;
  uint32_t slot;
  Ip4 gw4;
  Ip6 gw6;
  bool in_tx_ports;
};

struct SubDef {
  std::string name;
  const PortDef* port;
  uint16_t svid, cvid;
  Mac mac;         // the MAC its frames come from (also provisioned unless LEARN_MAC)
  uint16_t flags;  // XBNG_SUB_F_*
  Ip4 v4;
  Ip6 v6;
  bool direct = false;  // in direct_subscribers (inside kDirectSvlans), not the hash
  struct xbng_sub_key key() const;
};

// D4: an IPv4 /32 in the direct array (direct_v4), inside kDirectPool4;
// D6_64 / D6: an IPv6 /64 / /128 in direct_v6, inside kDirectPool6_64 /
// kDirectPool6_128.
enum class RouteMap { V4, V6, V6_64, P4, P6, D4, D6_64, D6 };

struct RouteDef {
  std::string name;
  RouteMap map;
  std::string prefix;  // address text
  uint32_t plen;       // for the tries
  const SubDef* sub;
};

extern const PortDef kAcc0, kAcc1, kAcc2, kAcc3, kUp0;
extern const SubDef kS1, kS2, kS3, kS4, kS5Learn, kS6Acc3, kS7V6Only;
// The direct subscriber range: acc2 S-VLANs 520-521 (slots 0..8191). s8 is
// in the array; s9 is a hash entry the range hides (unknown to the fast
// path); s10 learns its MAC, in the array.
extern const SubDef kS8Direct, kS9Hidden, kS10DirectLearn;
inline constexpr uint16_t kDirectSvlanFirst = 520, kDirectSvlans = 2;
// The slot of a key inside the direct range.
uint32_t direct_sub_slot(const SubDef& s);
extern const std::vector<const PortDef*> kPorts;
extern const std::vector<const SubDef*> kSubs;
extern const std::vector<RouteDef> kRoutes;

// Uplink neighbours (permanent, see main.cpp) and the uplink's addresses.
extern const Mac kRouterMac;      // 192.0.2.254 / 2001:db8:ffff::fe
extern const Mac kRemoteHostMac;  // any unicast MAC on the uplink side
extern const Ip4 kRemote4;        // via the default route
extern const Ip6 kRemote6;
extern const Ip4 kNoNeigh4;  // route via a gateway without neighbour
extern const Ip6 kNoNeigh6;
extern const Ip4 kUnreachable4;  // `unreachable` route
extern const Ip4 kBlackhole4;    // `blackhole` route
extern const Ip4 kUplinkAddr4;   // the host's own address on up0
extern const Ip6 kUplinkAddr6;   // its global IPv6 address (ICMP errors' source)
// Baseline of the router settings: every access port has
// subscriber MTU kSubMtu (= its MTU - 8) and MSS clamping on; acc0 owns the
// pools kPool4 / kPool6; up0 sends ICMP errors from kUplinkAddr4/6.
constexpr uint16_t kSubMtu = 1492;
extern const char* const kPool4;  // "100.64.0.0/16"
extern const char* const kPool6;  // "2001:db8:1::/48"
// The direct pool: its IPv4 /32s live in direct_v4 (slot = offset), and it
// is a declared pool of acc0 too (pools_v4).
extern const char* const kDirectPool4;  // "100.70.0.0/24"
// The IPv6 direct pools, declared pools of acc0 too (pools_v6): a pool of
// /64s (slots 0..255 of direct_v6) and one of /128s (slots 256..511).
extern const char* const kDirectPool6_64;   // "2001:db8:65:100::/56"
extern const char* const kDirectPool6_128;  // "2001:db8:66::/120"

// ---- rows -------------------------------------------------------------------
enum class Prog { Access, Uplink };

struct ExpectedEvent {
  uint32_t type;  // XBNG_EVENT_*
  const PortDef* port;
  uint16_t svid, cvid;
  Mac mac;
};

class Harness;

// A frame the access program copied into the `punt` ring buffer:
// the record's port/VLANs/kind; its bytes must be the step's input frame.
struct ExpectedPunt {
  uint32_t kind;  // XBNG_PUNT_KIND_*
  const PortDef* port;
  uint16_t svid, cvid;
};

struct Step {
  Prog prog = Prog::Access;
  const PortDef* ingress = nullptr;  // nullptr: use ingress_name
  std::string ingress_name;          // an interface not in `ports`
  Bytes in;
  int action = XDP_DROP;
  std::optional<Bytes> out;         // default: `in`, unchanged
  std::map<int, uint64_t> counts;   // enum xbng_reason -> packets
  const PortDef* egress = nullptr;  // REDIRECT: port whose tx grows
  std::vector<ExpectedEvent> events;
  std::vector<ExpectedPunt> punts;
  std::map<std::string, uint64_t> sub_up;        // SubDef name -> packets
  std::map<std::string, uint64_t> route_down;    // RouteDef name -> packets
  std::map<std::string, uint64_t> policed_up;    // SubDef name -> packets
  std::map<std::string, uint64_t> policed_down;  // SubDef name -> packets
  std::function<void(Harness&)> before;
  std::function<void(Harness&)> after;

  // Fluent modifiers for the tables.
  Step& expect_out(Bytes b) {
    out = std::move(b);
    return *this;
  }
  Step& via(const PortDef& p) {
    egress = &p;
    return *this;
  }
  Step& count(int reason, uint64_t n = 1) {
    counts[reason] += n;
    return *this;
  }
  Step& event(const ExpectedEvent& e) {
    events.push_back(e);
    return *this;
  }
  Step& punted(const ExpectedPunt& p) {
    punts.push_back(p);
    return *this;
  }
  Step& up(const std::string& sub, uint64_t n = 1) {
    sub_up[sub] += n;
    return *this;
  }
  Step& down(const std::string& route, uint64_t n = 1) {
    route_down[route] += n;
    return *this;
  }
  Step& policed(const std::string& sub, bool upstream) {
    (upstream ? policed_up : policed_down)[sub] += 1;
    return *this;
  }
  Step& pre(std::function<void(Harness&)> f) {
    before = std::move(f);
    return *this;
  }
  Step& post(std::function<void(Harness&)> f) {
    after = std::move(f);
    return *this;
  }
};

struct Row {
  std::string desc;
  std::vector<Step> steps;
};

std::ostream& operator<<(std::ostream& os, const Row& r);

// gtest parameter name from a description.
std::string row_name(const testing::TestParamInfo<Row>& info);

// ---- runner -----------------------------------------------------------------
class Harness {
 public:
  static Harness& get();  // loads the skeleton once
  ~Harness();

  void reset();             // maps back to the baseline, ring buffer drained
  void run(const Step& s);  // one step, with gtest expectations

  int ifindex(const std::string& name) const;
  int map_fd(const char* name) const;
  struct xbng* skel() {
    return skel_;
  }

  // State access for before/after hooks.
  struct xbng_subscriber subscriber(const SubDef& s);
  struct xbng_route route(const std::string& name);
  void set_route(const std::string& name, const struct xbng_route& v);
  // Deletes `ports` / `tx_ports` entry of interface `ifname`.
  bool remove_port_entry(const char* map, const std::string& ifname);
  void set_unknown_seen(const struct xbng_sub_key& k, uint64_t last_ns);
  bool unknown_seen(const struct xbng_sub_key& k);
  void set_event_budget(uint64_t window_start_ns, uint64_t used);  // all CPUs
  void set_icmp_budget(uint64_t last_ns, uint64_t credit_ns);      // all CPUs
  // Reads, edits and writes back the `ports` entry of `ifname`.
  void edit_port(const std::string& ifname, const std::function<void(struct xbng_port&)>& f);
  static uint64_t now_ns();  // CLOCK_MONOTONIC = bpf_ktime_get_ns()
  // The policers' clock (police_test_now_ns; 0 after reset()),
  // police entries and buckets. set_down_bucket also sets or clears
  // XBNG_ROUTE_F_POLICED on every route of `s`, as the agent does.
  void set_clock(uint64_t now_ns);
  struct xbng_police police(const SubDef& s);
  void set_police(const SubDef& s, const struct xbng_police& v);
  void set_up_bucket(const SubDef& s, const struct xbng_bucket& b);
  void set_down_bucket(const SubDef& s, const struct xbng_bucket& b);
  // net.ipv{4,6}.conf.<ifname>.forwarding in the private namespace.
  static void set_forwarding(const std::string& ifname, bool on);

  std::vector<struct xbng_event> drain_events();
  std::vector<std::vector<uint8_t>> drain_punts();  // whole records
  // Punt rate-limit state: GCRA time of a subscriber; port budget (all CPUs).
  // Every protocol's budget of k (kind 0), or only kind's (enum xbng_punt_kind):
  // the next frame allowed at tat_ns.
  void set_punt_tat(const struct xbng_sub_key& k, uint64_t tat_ns, uint32_t kind = 0);
  void set_punt_port_used(uint32_t slot, uint64_t window_start_ns, uint64_t used);

 private:
  Harness();
  struct Snapshot;
  Snapshot snapshot();
  void fill_baseline();
  void fill_direct_v6();   // the IPv6 direct pools: pools_v6 and their table
  void count_direct_v6();  // the /128 counts of the pool of /64s' lines
  void clear_map(const char* name);

  struct xbng* skel_ = nullptr;
  struct ring_buffer* rb_ = nullptr;
  std::vector<struct xbng_event> events_;
  struct ring_buffer* punt_rb_ = nullptr;
  std::vector<std::vector<uint8_t>> punts_;
  int ncpus_ = 0;
};

class Table : public testing::TestWithParam<Row> {};

// Steps: a frame into xdp_access on `port` / into xdp_uplink on up0, with the
// expected action and the one reason it is counted under.
Step access(const PortDef& port, Bytes in, int action, int reason);
Step uplink(Bytes in, int action, int reason);
Row row(std::string desc, Step s);
Row row(std::string desc, std::vector<Step> steps);

// Row tables (one file each), instantiated in tables.cpp.
std::vector<Row> upstream_rows();
std::vector<Row> control_rows();
std::vector<Row> downstream_rows();
std::vector<Row> router_rows();
std::vector<Row> police_rows();  // rate plans

// Slot of `s` in the police map (index in kSubs + 1).
uint32_t sub_slot(const SubDef& s);
std::vector<Row> punt_rows();

// ---- frame helpers used by the row files ------------------------------------
// Frame from subscriber `s` as its port expects it (port MAC as destination).
Packet from_sub(const SubDef& s);
// Frame as the fast path sends it to subscriber `s`.
Packet to_sub(const SubDef& s);
// Untagged frame on the uplink side.
Packet plain(const Mac& dst, const Mac& src);

// The UDP datagram most rows carry: 40000 -> 443, 32 bytes of payload.
Bytes udp4(Packet l2, const Ip4& src, const Ip4& dst, const testpkt::Ipv4Opts& o = {});
Bytes udp6(Packet l2, const Ip6& src, const Ip6& dst, const testpkt::Ipv6Opts& o = {});
testpkt::Ipv4Opts ttl4(uint8_t ttl);
testpkt::Ipv6Opts hlim6(uint8_t hop_limit);

Bytes truncate(const Bytes& f, size_t n);

}  // namespace bpftest

#endif  // XBNG_TESTS_BPF_HARNESS_H
