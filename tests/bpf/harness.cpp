// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#include "harness.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <time.h>

#include <cctype>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <stdexcept>

#include "xbng.skel.h"

namespace bpftest {

using testpkt::ip4;
using testpkt::ip6;
using testpkt::mac;

// ---- topology -----------------------------------------------------------------
const PortDef kAcc0{"acc0",
                    XBNG_ROLE_ACCESS,
                    0x88a8,
                    mac("02:00:00:00:a0:00"),
                    1500,
                    0,
                    ip4("100.64.0.1"),
                    ip6("2001:db8:a0::1"),
                    true};
const PortDef kAcc1{"acc1",
                    XBNG_ROLE_ACCESS,
                    0x8100,
                    mac("02:00:00:00:a1:00"),
                    1500,
                    1,
                    ip4("100.65.0.1"),
                    ip6("2001:db8:a1::1"),
                    true};
const PortDef kAcc2{"acc2",
                    XBNG_ROLE_ACCESS,
                    0x9100,
                    mac("02:00:00:00:a2:00"),
                    1500,
                    2,
                    ip4("100.66.0.1"),
                    ip6("2001:db8:a2::1"),
                    true};
// Configured but missing from tx_ports: redirects to it fail.
const PortDef kAcc3{
    "acc3", XBNG_ROLE_ACCESS, 0x88a8, mac("02:00:00:00:a3:00"), 1500, 3, ip4("100.67.0.1"), Ip6{},
    false};
const PortDef kUp0{"up0", XBNG_ROLE_UPLINK, 0, mac("02:00:00:00:0f:00"), 1500, 9, Ip4{}, Ip6{},
                   true};

constexpr uint16_t kFull = XBNG_SUB_F_HAS_IPV4 | XBNG_SUB_F_HAS_IPV6 | XBNG_SUB_F_MAC_VALID;

const SubDef kS1{"s1",
                 &kAcc0,
                 100,
                 200,
                 mac("02:00:00:01:00:01"),
                 kFull | XBNG_SUB_F_V4_PREFIX | XBNG_SUB_F_V6_PREFIX,
                 ip4("100.64.1.10"),
                 ip6("2001:db8:1::10")};
const SubDef kS2{"s2",
                 &kAcc0,
                 100,
                 201,
                 mac("02:00:00:01:00:02"),
                 kFull | XBNG_SUB_F_V4_PREFIX | XBNG_SUB_F_V6_PREFIX,
                 ip4("100.64.1.11"),
                 ip6("2001:db8:1::11")};
const SubDef kS3{"s3",
                 &kAcc1,
                 300,
                 400,
                 mac("02:00:00:01:00:03"),
                 kFull,
                 ip4("100.65.1.10"),
                 ip6("2001:db8:2::10")};
const SubDef kS4{"s4",
                 &kAcc2,
                 500,
                 600,
                 mac("02:00:00:01:00:04"),
                 kFull,
                 ip4("100.66.1.10"),
                 ip6("2001:db8:3::10")};
const SubDef kS5Learn{"s5",
                      &kAcc0,
                      100,
                      210,
                      mac("02:00:00:01:00:05"),
                      XBNG_SUB_F_HAS_IPV4 | XBNG_SUB_F_HAS_IPV6 | XBNG_SUB_F_LEARN_MAC,
                      ip4("100.64.1.50"),
                      ip6("2001:db8:1::50")};
const SubDef kS6Acc3{"s6",
                     &kAcc3,
                     700,
                     800,
                     mac("02:00:00:01:00:06"),
                     XBNG_SUB_F_HAS_IPV4 | XBNG_SUB_F_MAC_VALID,
                     ip4("100.67.1.10"),
                     Ip6{}};
const SubDef kS7V6Only{"s7",
                       &kAcc0,
                       101,
                       300,
                       mac("02:00:00:01:00:07"),
                       XBNG_SUB_F_HAS_IPV6 | XBNG_SUB_F_MAC_VALID,
                       Ip4{},
                       ip6("2001:db8:1::70")};

const SubDef kS8Direct{"s8",
                       &kAcc2,
                       520,
                       7,
                       mac("02:00:00:01:00:08"),
                       kFull,
                       ip4("100.66.1.20"),
                       ip6("2001:db8:3::20"),
                       true};
const SubDef kS9Hidden{"s9",
                       &kAcc2,
                       521,
                       9,
                       mac("02:00:00:01:00:09"),
                       kFull,
                       ip4("100.66.1.30"),
                       ip6("2001:db8:3::30")};
const SubDef kS10DirectLearn{"s10",
                             &kAcc2,
                             521,
                             4000,
                             mac("02:00:00:01:00:0a"),
                             XBNG_SUB_F_HAS_IPV4 | XBNG_SUB_F_LEARN_MAC,
                             ip4("100.66.1.40"),
                             Ip6{},
                             true};

const std::vector<const PortDef*> kPorts{&kAcc0, &kAcc1, &kAcc2, &kAcc3, &kUp0};
const std::vector<const SubDef*> kSubs{
    &kS1,     &kS2,       &kS3,       &kS4,       &kS5Learn,
    &kS6Acc3, &kS7V6Only, &kS8Direct, &kS9Hidden, &kS10DirectLearn};

uint32_t direct_sub_slot(const SubDef& s) {
  return uint32_t(s.svid - kDirectSvlanFirst) * XBNG_DIRECT_SUB_CVIDS + s.cvid;
}
const std::vector<RouteDef> kRoutes{
    {"r4-s1", RouteMap::V4, "100.64.1.10", 32, &kS1},
    {"r4-s2", RouteMap::V4, "100.64.1.11", 32, &kS2},
    {"r4-s3", RouteMap::V4, "100.65.1.10", 32, &kS3},
    {"r4-s4", RouteMap::V4, "100.66.1.10", 32, &kS4},
    {"r4-s5", RouteMap::V4, "100.64.1.50", 32, &kS5Learn},
    {"r4-s6", RouteMap::V4, "100.67.1.10", 32, &kS6Acc3},
    {"d4-s3", RouteMap::D4, "100.70.0.7", 32, &kS3},    // in the direct array
    {"p4d-s2", RouteMap::P4, "100.70.0.16", 28, &kS2},  // framed route inside the direct pool
    {"h4d-s1", RouteMap::V4, "100.70.0.9", 32, &kS1},   // a hash entry the direct pool hides
    {"d64-s3", RouteMap::D6_64, "2001:db8:65:107::", 64, &kS3},  // a /64 slot
    {"d64-s2", RouteMap::D6_64, "2001:db8:65:108::", 64, &kS2},  // under h6d-s1's /128
    {"d64-s1", RouteMap::D6_64, "2001:db8:65:109::", 64, &kS1},
    {"h6d-s1", RouteMap::V6, "2001:db8:65:108::1", 128, &kS1},  // a /128 beats the /64 slot
    {"h6e-s4", RouteMap::V6, "2001:db8:65:10a::5", 128, &kS4},  // in a /64 nobody delegated
    {"u6d-s2", RouteMap::V6, "2001:db8:65:109::1", 128, &kS2},  // uncounted: never read
    {"p6d-s2", RouteMap::P6, "2001:db8:65:1f0::", 60, &kS2},    // delegated /60 in the pool
    {"d6-s4", RouteMap::D6, "2001:db8:66::7", 128, &kS4},       // a /128 slot
    {"h6d-s3", RouteMap::V6, "2001:db8:66::9", 128, &kS3},      // a hash entry the pool hides
    {"r4-s8", RouteMap::V4, "100.66.1.20", 32, &kS8Direct},
    {"r4-s10", RouteMap::V4, "100.66.1.40", 32, &kS10DirectLearn},  // MAC from the array
    {"p4-s1", RouteMap::P4, "198.51.100.0", 28, &kS1},              // framed route
    {"p4-s2", RouteMap::P4, "198.51.100.0", 25, &kS2},              // covers s1's /28
    {"r6-s1", RouteMap::V6, "2001:db8:1::10", 128, &kS1},
    {"r6-s2", RouteMap::V6, "2001:db8:1::11", 128, &kS2},
    {"r6-s3", RouteMap::V6, "2001:db8:2::10", 128, &kS3},
    {"r6-s4", RouteMap::V6, "2001:db8:3::10", 128, &kS4},
    {"r6-s5", RouteMap::V6, "2001:db8:1::50", 128, &kS5Learn},
    {"r6-s7", RouteMap::V6, "2001:db8:1::70", 128, &kS7V6Only},
    {"r64-s1", RouteMap::V6_64, "2001:db8:6401:1::", 64, &kS1},  // delegated /64
    {"r64-s2", RouteMap::V6_64, "2001:db8:5600:1::", 64, &kS2},  // a /64 inside s1's /56
    {"p6-s1", RouteMap::P6, "2001:db8:5600::", 56, &kS1},        // delegated /56
    {"p6-s2", RouteMap::P6, "2001:db8:4800::", 48, &kS2},        // delegated /48
};

const Mac kRouterMac = mac("02:00:00:00:0f:fe");
const Mac kRemoteHostMac = mac("02:00:00:00:0e:01");
const Ip4 kRemote4 = ip4("198.51.100.200");
const Ip6 kRemote6 = ip6("2001:db8:100::1");
const Ip4 kNoNeigh4 = ip4("203.0.113.7");
const Ip6 kNoNeigh6 = ip6("2001:db8:dead::7");
const Ip4 kUnreachable4 = ip4("203.0.113.130");
const Ip4 kBlackhole4 = ip4("203.0.113.200");
const Ip4 kUplinkAddr4 = ip4("192.0.2.1");
const Ip6 kUplinkAddr6 = ip6("2001:db8:ffff::1");
const char* const kPool4 = "100.64.0.0/16";
const char* const kDirectPool4 = "100.70.0.0/24";
const char* const kDirectPool6_64 = "2001:db8:65:100::/56";
const char* const kDirectPool6_128 = "2001:db8:66::/120";
const char* const kPool6 = "2001:db8:1::/48";

struct xbng_sub_key SubDef::key() const {
  struct xbng_sub_key k {};
  k.ifindex = (uint32_t)Harness::get().ifindex(port->name);
  k.outer_vid = svid;
  k.inner_vid = cvid;
  return k;
}

// ---- names ----------------------------------------------------------------------
namespace {

#define XBNG_REASON_NAME_(name, str, kind) #name,
const char* const kReasonNames[] = {XBNG_REASONS(XBNG_REASON_NAME_)};
#undef XBNG_REASON_NAME_
#define XBNG_REASON_KIND_(name, str, kind) kind,
const int kReasonKinds[] = {XBNG_REASONS(XBNG_REASON_KIND_)};
#undef XBNG_REASON_KIND_

std::string action_name(int a) {
  switch (a) {
    case XDP_ABORTED:
      return "XDP_ABORTED";
    case XDP_DROP:
      return "XDP_DROP";
    case XDP_PASS:
      return "XDP_PASS";
    case XDP_TX:
      return "XDP_TX";
    case XDP_REDIRECT:
      return "XDP_REDIRECT";
  }
  return "action " + std::to_string(a);
}

std::string event_str(const struct xbng_event& e) {
  Mac m;
  std::memcpy(m.b.data(), e.mac, 6);
  return "{type " + std::to_string(e.type) + " ifindex " + std::to_string(e.ifindex) + " vids " +
         std::to_string(e.outer_vid) + "/" + std::to_string(e.inner_vid) + " mac " + m.str() + "}";
}

// Key bytes and map of a route.
// Whether a route lives in a direct array (its value a 64-byte line).
bool is_direct(RouteMap m) {
  return m == RouteMap::D4 || m == RouteMap::D6_64 || m == RouteMap::D6;
}

std::pair<const char*, Bytes> route_key(const RouteDef& r) {
  Bytes k;
  auto put = [&k](const void* p, size_t n) {
    const uint8_t* b = (const uint8_t*)p;
    k.insert(k.end(), b, b + n);
  };
  switch (r.map) {
    case RouteMap::V4: {
      Ip4 a = ip4(r.prefix);
      put(a.b.data(), 4);
      return {"routes_v4", k};
    }
    case RouteMap::V6: {
      Ip6 a = ip6(r.prefix);
      put(a.b.data(), 16);
      return {"routes_v6", k};
    }
    case RouteMap::V6_64: {
      Ip6 a = ip6(r.prefix);
      put(a.b.data(), 8);
      return {"routes_v6_64", k};
    }
    case RouteMap::P4: {
      Ip4 a = ip4(r.prefix);
      put(&r.plen, 4);
      put(a.b.data(), 4);
      return {"prefixes_v4", k};
    }
    case RouteMap::P6: {
      Ip6 a = ip6(r.prefix);
      put(&r.plen, 4);
      put(a.b.data(), 16);
      return {"prefixes_v6", k};
    }
    case RouteMap::D4: {
      uint32_t slot = ntohl(ip4(r.prefix).be()) - ntohl(ip4("100.70.0.0").be());
      put(&slot, 4);
      return {"direct_v4", k};
    }
    case RouteMap::D6_64: {  // the /64's offset in the /56: byte 7
      uint32_t slot = ip6(r.prefix).b[7];
      put(&slot, 4);
      return {"direct_v6", k};
    }
    case RouteMap::D6: {  // after the 256 /64s: the /120's last byte
      uint32_t slot = 256 + ip6(r.prefix).b[15];
      put(&slot, 4);
      return {"direct_v6", k};
    }
  }
  throw std::logic_error("route map");
}

const RouteDef& route_def(const std::string& name) {
  for (auto& r : kRoutes)
    if (r.name == name) return r;
  throw std::invalid_argument("no route " + name);
}

int on_event(void* ctx, void* data, size_t size) {
  auto* out = static_cast<std::vector<struct xbng_event>*>(ctx);
  struct xbng_event e {};
  std::memcpy(&e, data, size < sizeof(e) ? size : sizeof(e));
  if (size != sizeof(e)) e.type = 0xdead;  // size mismatch shows as a wrong event
  out->push_back(e);
  return 0;
}

int on_punt(void* ctx, void* data, size_t size) {
  auto* out = static_cast<std::vector<std::vector<uint8_t>>*>(ctx);
  const auto* b = static_cast<const uint8_t*>(data);
  out->emplace_back(b, b + size);
  return 0;
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Row& r) { return os << r.desc; }

std::string row_name(const testing::TestParamInfo<Row>& info) {
  std::string n;
  for (char c : info.param.desc) n += std::isalnum((unsigned char)c) ? c : '_';
  return std::to_string(info.index) + "_" + n;
}

// ---- harness ------------------------------------------------------------------------
struct Harness::Snapshot {
  std::vector<struct xbng_counter> stats;
  std::vector<struct xbng_port_stats> ports;
  std::map<std::string, std::pair<uint64_t, uint64_t>> sub_up;
  std::map<std::string, std::pair<uint64_t, uint64_t>> route_down;
  std::map<std::string, struct xbng_police> police;  // by SubDef name
};

Harness& Harness::get() {
  static Harness h;
  return h;
}

Harness::Harness() {
  ncpus_ = libbpf_num_possible_cpus();
  if (ncpus_ <= 0) throw std::runtime_error("libbpf_num_possible_cpus failed");
  skel_ = xbng__open();
  if (!skel_) throw std::runtime_error("xbng__open failed");
  // The defaults size the subscriber maps for 1M entries (hundreds of MB
  // preallocated); the tests need a few.
  struct bpf_map* big[] = {skel_->maps.subscribers, skel_->maps.routes_v4,
                           skel_->maps.routes_v6,   skel_->maps.routes_v6_64,
                           skel_->maps.prefixes_v4, skel_->maps.prefixes_v6,
                           skel_->maps.police};
  for (auto* m : big) bpf_map__set_max_entries(m, 4096);
  bpf_map__set_max_entries(skel_->maps.direct_v4, 256);  // kDirectPool4
  bpf_map__set_max_entries(skel_->maps.direct_v6, 512);  // kDirectPool6_64, kDirectPool6_128
  bpf_map__set_max_entries(skel_->maps.direct_subscribers, kDirectSvlans * XBNG_DIRECT_SUB_CVIDS);
  // ICMP errors: one token per second (burst 50), so that the time a row
  // takes adds no token between its steps (the rate-limit rows).
  skel_->rodata->icmp_token_ns = 1000000000ull;
  skel_->rodata->icmp_burst_ns = 50 * 1000000000ull;
  // The policers read the test's clock (police_test_now_ns), set per row.
  skel_->rodata->police_test_clock = 1;
  int err = xbng__load(skel_);
  if (err)
    throw std::runtime_error(std::string("xbng__load failed (verifier?): ") + std::strerror(-err));
  rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.events), on_event, &events_, nullptr);
  if (!rb_) throw std::runtime_error("ring_buffer__new failed");
  punt_rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.punt), on_punt, &punts_, nullptr);
  if (!punt_rb_) throw std::runtime_error("ring_buffer__new(punt) failed");
}

Harness::~Harness() {
  ring_buffer__free(rb_);
  ring_buffer__free(punt_rb_);
  xbng__destroy(skel_);
}

int Harness::ifindex(const std::string& name) const {
  unsigned idx = if_nametoindex(name.c_str());
  if (!idx) throw std::runtime_error("no interface " + name + " in the test namespace");
  return (int)idx;
}

int Harness::map_fd(const char* name) const {
  struct bpf_map* m = bpf_object__find_map_by_name(skel_->obj, name);
  if (!m) throw std::runtime_error(std::string("no map ") + name);
  return bpf_map__fd(m);
}

void Harness::set_forwarding(const std::string& ifname, bool on) {
  for (const char* fam : {"ipv4", "ipv6"}) {
    std::string path = std::string("/proc/sys/net/") + fam + "/conf/" + ifname + "/forwarding";
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f || std::fputs(on ? "1" : "0", f) < 0 || std::fclose(f) != 0)
      throw std::runtime_error("cannot write " + path);
  }
}

uint64_t Harness::now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void Harness::clear_map(const char* name) {
  int fd = map_fd(name);
  uint8_t key[64];
  while (bpf_map_get_next_key(fd, nullptr, key) == 0)
    if (bpf_map_delete_elem(fd, key) != 0)
      throw std::runtime_error(std::string("cannot clear ") + name);
}

void Harness::fill_baseline() {
  for (auto* p : kPorts) {
    struct xbng_port v {};
    uint32_t idx = (uint32_t)ifindex(p->name);
    v.ifindex = idx;
    v.role = p->role;
    v.outer_tpid = p->tpid;
    std::memcpy(v.mac, p->mac.b.data(), 6);
    v.mtu = p->mtu;
    v.slot = p->slot;
    v.gw_ipv4 = p->gw4.be();
    std::memcpy(v.gw_ipv6, p->gw6.b.data(), 16);
    if (p->role == XBNG_ROLE_ACCESS) {
      v.sub_mtu = kSubMtu;
      v.flags = XBNG_PORT_F_MSS_CLAMP;
    } else {
      v.icmp_src4 = kUplinkAddr4.be();
      std::memcpy(v.icmp_src6, kUplinkAddr6.b.data(), 16);
    }
    if (bpf_map_update_elem(map_fd("ports"), &idx, &v, BPF_ANY))
      throw std::runtime_error("ports update");
    if (p->in_tx_ports && bpf_map_update_elem(map_fd("tx_ports"), &idx, &idx, BPF_ANY))
      throw std::runtime_error("tx_ports update: " + std::string(std::strerror(errno)));
  }
  {
    struct xbng_pool pool {
      (uint32_t) ifindex("acc0")
    };
    struct xbng_lpm_v4_key k4 {
      16, ip4("100.64.0.0").be()
    };
    struct xbng_lpm_v6_key k6 {
      48, {}
    };
    std::memcpy(k6.addr, ip6("2001:db8:1::").b.data(), 16);
    struct xbng_lpm_v4_key kd {
      24, ip4("100.70.0.0").be()
    };
    if (bpf_map_update_elem(map_fd("pools_v4"), &k4, &pool, BPF_ANY) ||
        bpf_map_update_elem(map_fd("pools_v4"), &kd, &pool, BPF_ANY) ||
        bpf_map_update_elem(map_fd("pools_v6"), &k6, &pool, BPF_ANY))
      throw std::runtime_error("pools update");
    struct xbng_direct_table t {};
    t.n_v4 = 1;
    t.v4[0].start = ntohl(ip4("100.70.0.0").be());
    t.v4[0].size = 256;
    t.v4[0].base = 0;
    const uint32_t zero = 0;
    if (bpf_map_update_elem(map_fd("direct_pools"), &zero, &t, BPF_ANY))
      throw std::runtime_error("direct_pools update");
    fill_direct_v6();
    struct xbng_direct_sub_table st {};
    st.n = 1;
    st.r[0].ifindex = (uint32_t)ifindex("acc2");
    st.r[0].first_svid = kDirectSvlanFirst;
    st.r[0].n_svids = kDirectSvlans;
    st.r[0].base = 0;
    if (bpf_map_update_elem(map_fd("direct_sub_ranges"), &zero, &st, BPF_ANY))
      throw std::runtime_error("direct_sub_ranges update");
  }
  for (auto* s : kSubs) {
    struct xbng_subscriber v {};
    struct xbng_sub_key k = s->key();
    if (s->flags & XBNG_SUB_F_MAC_VALID) std::memcpy(v.mac, s->mac.b.data(), 6);
    v.flags = s->flags;
    v.slot = sub_slot(*s);
    v.ipv4 = s->v4.be();
    std::memcpy(v.ipv6, s->v6.b.data(), 16);
    if (s->direct) {
      const uint32_t slot = direct_sub_slot(*s);
      v.flags |= XBNG_SUB_F_PRESENT;
      if (bpf_map_update_elem(map_fd("direct_subscribers"), &slot, &v, BPF_ANY))
        throw std::runtime_error("direct_subscribers update");
    } else if (bpf_map_update_elem(map_fd("subscribers"), &k, &v, BPF_ANY)) {
      throw std::runtime_error("subscribers update");
    }
  }
  for (auto& r : kRoutes) {
    struct xbng_route v {};
    v.sub = r.sub->key();
    v.slot = sub_slot(*r.sub);
    if (r.sub->flags & XBNG_SUB_F_MAC_VALID) {
      std::memcpy(v.mac, r.sub->mac.b.data(), 6);
      v.flags = XBNG_ROUTE_F_MAC_VALID;
    }
    auto [map, key] = route_key(r);
    struct xbng_direct_route d {};
    d.r = v;
    const void* val = is_direct(r.map) ? (const void*)&d : (const void*)&v;
    if (bpf_map_update_elem(map_fd(map), key.data(), val, BPF_ANY))
      throw std::runtime_error("route update " + r.name + ": " + std::strerror(errno));
  }
  count_direct_v6();
}

// The n128 counts of the pool of /64s (2001:db8:65:100::/56, slots 0..255),
// as xbngd keeps them: each /128 of `routes_v6` inside it counted in its
// /64's line, except u6d-s2 (a /128 the count does not know of: the row
// that shows a line counting none is not looked up in the hash).
void Harness::count_direct_v6() {
  const Ip6 pool = ip6("2001:db8:65:100::");
  for (auto& r : kRoutes) {
    if (r.map != RouteMap::V6 || r.name == "u6d-s2") continue;
    const Ip6 a = ip6(r.prefix);
    if (std::memcmp(a.b.data(), pool.b.data(), 7) != 0) continue;
    uint32_t slot = a.b[7];
    struct xbng_direct_route d {};
    if (bpf_map_lookup_elem(map_fd("direct_v6"), &slot, &d)) throw std::runtime_error("direct_v6");
    d.n128++;
    if (bpf_map_update_elem(map_fd("direct_v6"), &slot, &d, BPF_ANY))
      throw std::runtime_error("direct_v6 count " + r.name);
  }
}

void Harness::fill_direct_v6() {
  struct xbng_pool pool {
    (uint32_t) ifindex("acc0")
  };
  struct xbng_direct_table_v6 t {};
  for (auto [text, len, unit] :
       {std::tuple<const char*, uint32_t, uint32_t>{"2001:db8:65:100::", 56, 64},
        {"2001:db8:66::", 120, 128}}) {
    struct xbng_lpm_v6_key k {
      len, {}
    };
    const Ip6 a = ip6(text);
    std::memcpy(k.addr, a.b.data(), 16);
    if (bpf_map_update_elem(map_fd("pools_v6"), &k, &pool, BPF_ANY))
      throw std::runtime_error("pools_v6 update");
    struct xbng_direct_pool_v6& p = t.pools[t.n++];
    for (int i = 0; i < 8; i++) {
      p.hi = p.hi << 8 | a.b[i];
      p.lo = p.lo << 8 | a.b[8 + i];
    }
    p.size = 256;
    p.base = unit == 64 ? 0 : 256;
    p.unit = unit;
  }
  const uint32_t zero = 0;
  if (bpf_map_update_elem(map_fd("direct_pools_v6"), &zero, &t, BPF_ANY))
    throw std::runtime_error("direct_pools_v6 update");
}

void Harness::reset() {
  for (const char* m : {"subscribers", "routes_v4", "routes_v6", "routes_v6_64", "prefixes_v4",
                        "prefixes_v6", "ports", "tx_ports", "unknown_seen", "pools_v4", "pools_v6",
                        "local_allow", "mac_seen", "punt_limit"})
    clear_map(m);
  for (auto [arr, n] : {std::pair<const char*, uint32_t>{"direct_v4", 256}, {"direct_v6", 512}}) {
    // an array: emptied slot by slot (all zeros: no route there)
    const struct xbng_direct_route empty {};
    for (uint32_t slot = 0; slot < n; slot++)
      if (bpf_map_update_elem(map_fd(arr), &slot, &empty, BPF_ANY))
        throw std::runtime_error(std::string(arr) + " clear");
  }
  // Rows write the direct subscribers' own slots (counters, MACs) and the
  // empty slot the unknown-key rows probe: those are cleared.
  const struct xbng_subscriber none {};
  for (auto* s : kSubs) {
    if (s->svid < kDirectSvlanFirst || s->svid >= kDirectSvlanFirst + kDirectSvlans) continue;
    const uint32_t slot = direct_sub_slot(*s);
    if (bpf_map_update_elem(map_fd("direct_subscribers"), &slot, &none, BPF_ANY))
      throw std::runtime_error("direct_subscribers clear");
  }
  set_event_budget(0, 0);
  set_icmp_budget(0, 0);  // a full bucket on first use
  for (auto* p : kPorts) set_punt_port_used(p->slot, 0, 0);
  drain_punts();
  set_forwarding("acc0", true);  // a row may have turned it off
  for (auto* s : kSubs) set_police(*s, {});
  set_clock(0);
  fill_baseline();
  drain_events();
}

std::vector<struct xbng_event> Harness::drain_events() {
  events_.clear();
  ring_buffer__consume(rb_);
  return events_;
}

std::vector<std::vector<uint8_t>> Harness::drain_punts() {
  punts_.clear();
  ring_buffer__consume(punt_rb_);
  return punts_;
}

void Harness::set_punt_tat(const struct xbng_sub_key& k, uint64_t tat_ns, uint32_t kind) {
  struct xbng_punt_gcra v {};
  (void)bpf_map_lookup_elem(map_fd("punt_limit"), &k, &v); /* the other protocols' stay */
  for (uint32_t i = 0; i < XBNG_PUNT_KINDS; i++)
    if (kind == 0 || kind == i + 1) v.tat_ns[i] = tat_ns;
  if (bpf_map_update_elem(map_fd("punt_limit"), &k, &v, BPF_ANY))
    throw std::runtime_error("punt_limit update");
}

void Harness::set_punt_port_used(uint32_t slot, uint64_t window_start_ns, uint64_t used) {
  std::vector<struct xbng_punt_window> v(ncpus_);
  for (auto& w : v) {
    w.window_start_ns = window_start_ns;
    w.used = used;
  }
  if (bpf_map_update_elem(map_fd("punt_port_budget"), &slot, v.data(), BPF_ANY))
    throw std::runtime_error("punt_port_budget update");
}

struct xbng_subscriber Harness::subscriber(const SubDef& s) {
  struct xbng_subscriber v {};
  struct xbng_sub_key k = s.key();
  if (s.direct) {
    const uint32_t slot = direct_sub_slot(s);
    if (bpf_map_lookup_elem(map_fd("direct_subscribers"), &slot, &v) ||
        !(v.flags & XBNG_SUB_F_PRESENT))
      ADD_FAILURE() << "direct subscriber " << s.name << " missing";
    return v;
  }
  if (bpf_map_lookup_elem(map_fd("subscribers"), &k, &v))
    ADD_FAILURE() << "subscriber " << s.name << " missing";
  return v;
}

uint32_t sub_slot(const SubDef& s) {
  for (size_t i = 0; i < kSubs.size(); i++)
    if (kSubs[i] == &s)
      return (uint32_t)i + 1;  // slot 0 stays unused: a zeroed slot field is visible
  throw std::runtime_error("unknown subscriber " + s.name);
}

void Harness::set_clock(uint64_t now_ns) { skel_->bss->police_test_now_ns = now_ns; }

struct xbng_police Harness::police(const SubDef& s) {
  struct xbng_police v {};
  uint32_t slot = sub_slot(s);
  if (bpf_map_lookup_elem(map_fd("police"), &slot, &v))
    ADD_FAILURE() << "police[" << slot << "] lookup";
  return v;
}

void Harness::set_police(const SubDef& s, const struct xbng_police& v) {
  uint32_t slot = sub_slot(s);
  if (bpf_map_update_elem(map_fd("police"), &slot, &v, BPF_ANY))
    throw std::runtime_error("police update");
}

void Harness::set_up_bucket(const SubDef& s, const struct xbng_bucket& b) {
  struct xbng_subscriber v = subscriber(s);
  struct xbng_sub_key k = s.key();
  v.up = b;
  if (bpf_map_update_elem(map_fd("subscribers"), &k, &v, BPF_EXIST))
    throw std::runtime_error("subscribers update");
}

void Harness::set_down_bucket(const SubDef& s, const struct xbng_bucket& b) {
  struct xbng_police v = police(s);
  v.down = b;
  set_police(s, v);
  for (auto& r : kRoutes) {
    if (r.sub != &s) continue;
    struct xbng_route rv = route(r.name);
    if (b.byte_ns_fp)
      rv.flags |= XBNG_ROUTE_F_POLICED;
    else
      rv.flags &= (uint16_t)~XBNG_ROUTE_F_POLICED;
    auto [map, key] = route_key(r);
    if (bpf_map_update_elem(map_fd(map), key.data(), &rv, BPF_EXIST))
      throw std::runtime_error("route update " + r.name);
  }
}

struct xbng_route Harness::route(const std::string& name) {
  struct xbng_direct_route v {};  // the largest route value
  auto [map, key] = route_key(route_def(name));
  if (bpf_map_lookup_elem(map_fd(map), key.data(), &v))
    ADD_FAILURE() << "route " << name << " missing";
  return v.r;
}

void Harness::set_route(const std::string& name, const struct xbng_route& v) {
  const RouteDef& r = route_def(name);
  auto [map, key] = route_key(r);
  struct xbng_direct_route d {};
  if (is_direct(r.map) && bpf_map_lookup_elem(map_fd(map), key.data(), &d))  // keeps its n128
    throw std::runtime_error("route lookup " + name);
  d.r = v;
  const void* val = is_direct(r.map) ? (const void*)&d : (const void*)&v;
  if (bpf_map_update_elem(map_fd(map), key.data(), val, BPF_EXIST))
    throw std::runtime_error("route update " + name);
}

bool Harness::remove_port_entry(const char* map, const std::string& ifname) {
  uint32_t idx = (uint32_t)ifindex(ifname);
  return bpf_map_delete_elem(map_fd(map), &idx) == 0;
}

void Harness::set_unknown_seen(const struct xbng_sub_key& k, uint64_t last_ns) {
  struct xbng_unknown_seen v {
    last_ns
  };
  if (bpf_map_update_elem(map_fd("unknown_seen"), &k, &v, BPF_ANY))
    ADD_FAILURE() << "unknown_seen update";
}

bool Harness::unknown_seen(const struct xbng_sub_key& k) {
  struct xbng_unknown_seen v {};
  return bpf_map_lookup_elem(map_fd("unknown_seen"), &k, &v) == 0;
}

void Harness::set_event_budget(uint64_t window_start_ns, uint64_t used) {
  std::vector<struct xbng_event_budget> v(ncpus_);
  for (auto& b : v) {
    b.window_start_ns = window_start_ns;
    b.used = used;
  }
  uint32_t zero = 0;
  if (bpf_map_update_elem(map_fd("event_budget"), &zero, v.data(), BPF_ANY))
    throw std::runtime_error("event_budget update");
}

void Harness::set_icmp_budget(uint64_t last_ns, uint64_t credit_ns) {
  std::vector<struct xbng_icmp_budget> v(ncpus_);
  for (auto& b : v) {
    b.last_ns = last_ns;
    b.credit_ns = credit_ns;
  }
  uint32_t zero = 0;
  if (bpf_map_update_elem(map_fd("icmp_budget"), &zero, v.data(), BPF_ANY))
    throw std::runtime_error("icmp_budget update");
}

void Harness::edit_port(const std::string& ifname,
                        const std::function<void(struct xbng_port&)>& f) {
  uint32_t idx = (uint32_t)ifindex(ifname);
  struct xbng_port v {};
  if (bpf_map_lookup_elem(map_fd("ports"), &idx, &v))
    throw std::runtime_error("no ports entry for " + ifname);
  f(v);
  if (bpf_map_update_elem(map_fd("ports"), &idx, &v, BPF_ANY))
    throw std::runtime_error("ports update " + ifname);
}

Harness::Snapshot Harness::snapshot() {
  Snapshot s;
  s.stats.resize(XBNG_REASON_MAX);
  std::vector<struct xbng_counter> c(ncpus_);
  for (uint32_t r = 0; r < XBNG_REASON_MAX; r++) {
    if (bpf_map_lookup_elem(map_fd("stats"), &r, c.data()))
      throw std::runtime_error("stats lookup");
    for (auto& x : c) {
      s.stats[r].packets += x.packets;
      s.stats[r].bytes += x.bytes;
    }
  }
  s.ports.resize(XBNG_MAX_PORTS);
  std::vector<struct xbng_port_stats> p(ncpus_);
  for (uint32_t slot = 0; slot < XBNG_MAX_PORTS; slot++) {
    if (bpf_map_lookup_elem(map_fd("port_stats"), &slot, p.data()))
      throw std::runtime_error("port_stats lookup");
    for (auto& x : p) {
      s.ports[slot].rx_packets += x.rx_packets;
      s.ports[slot].rx_bytes += x.rx_bytes;
      s.ports[slot].tx_packets += x.tx_packets;
      s.ports[slot].tx_bytes += x.tx_bytes;
    }
  }
  for (auto* sub : kSubs) {
    struct xbng_subscriber v = subscriber(*sub);
    s.sub_up[sub->name] = {v.up_packets, v.up_bytes};
  }
  for (auto& r : kRoutes) {
    struct xbng_route v = route(r.name);
    s.route_down[r.name] = {v.down_packets, v.down_bytes};
  }
  for (auto* sub : kSubs) s.police[sub->name] = police(*sub);
  return s;
}

void Harness::run(const Step& st) {
  if (st.before) st.before(*this);
  Snapshot before = snapshot();

  int prog_fd =
      bpf_program__fd(st.prog == Prog::Access ? skel_->progs.xdp_access : skel_->progs.xdp_uplink);
  struct xdp_md ctx {};
  ctx.data_end = (uint32_t)st.in.size();
  ctx.ingress_ifindex = (uint32_t)ifindex(st.ingress ? st.ingress->name : st.ingress_name);
  std::vector<uint8_t> buf(4096);
  struct bpf_test_run_opts opts {};
  opts.sz = sizeof(opts);
  opts.data_in = st.in.data();
  opts.data_size_in = (uint32_t)st.in.size();
  opts.data_out = buf.data();
  opts.data_size_out = (uint32_t)buf.size();
  opts.ctx_in = &ctx;
  opts.ctx_size_in = sizeof(ctx);
  opts.repeat = 1;
  int err = bpf_prog_test_run_opts(prog_fd, &opts);
  ASSERT_EQ(err, 0) << "BPF_PROG_TEST_RUN: " << std::strerror(errno);
  Bytes out(buf.begin(), buf.begin() + opts.data_size_out);

  // Verdict and frame.
  EXPECT_EQ(action_name((int)opts.retval), action_name(st.action));
  const Bytes& want = st.out ? *st.out : st.in;
  EXPECT_TRUE(out == want) << "output frame differs: " << testpkt::diff(out, want);
  std::string why;
  EXPECT_TRUE(testpkt::all_checksums_ok(st.in, &why)) << "input frame: bad " << why;
  if (opts.retval != XDP_DROP) {
    EXPECT_TRUE(testpkt::all_checksums_ok(out, &why)) << "output frame: bad " << why;
  }

  Snapshot after = snapshot();

  // stats[reason]: packets as listed, bytes = frame length as received
  // (0 for the event-side counters).
  for (int r = 0; r < XBNG_REASON_MAX; r++) {
    auto it = st.counts.find(r);
    uint64_t pk = it == st.counts.end() ? 0 : it->second;
    uint64_t by = kReasonKinds[r] == XBNG_KIND_INFO ? 0 : pk * st.in.size();
    EXPECT_EQ(after.stats[r].packets - before.stats[r].packets, pk)
        << "stats[" << kReasonNames[r] << "].packets";
    EXPECT_EQ(after.stats[r].bytes - before.stats[r].bytes, by)
        << "stats[" << kReasonNames[r] << "].bytes";
  }

  // port_stats: rx on the ingress port when it has the program's role; tx
  // on the ingress port for XDP_TX, on `egress` for XDP_REDIRECT.
  std::vector<struct xbng_port_stats> want_ports(XBNG_MAX_PORTS);
  uint16_t role = st.prog == Prog::Access ? XBNG_ROLE_ACCESS : XBNG_ROLE_UPLINK;
  if (st.ingress && st.ingress->role == role) {
    want_ports[st.ingress->slot].rx_packets += 1;
    want_ports[st.ingress->slot].rx_bytes += st.in.size();
  }
  const PortDef* tx = st.action == XDP_TX         ? st.ingress
                      : st.action == XDP_REDIRECT ? st.egress
                                                  : nullptr;
  if (st.action == XDP_REDIRECT) {
    EXPECT_NE(st.egress, nullptr) << "row error: REDIRECT without egress";
  }
  if (tx) {
    want_ports[tx->slot].tx_packets += 1;
    want_ports[tx->slot].tx_bytes += want.size();
  }
  for (uint32_t slot = 0; slot < XBNG_MAX_PORTS; slot++) {
    const auto &a = after.ports[slot], &b = before.ports[slot], &w = want_ports[slot];
    EXPECT_EQ(a.rx_packets - b.rx_packets, w.rx_packets) << "port_stats[" << slot << "].rx_packets";
    EXPECT_EQ(a.rx_bytes - b.rx_bytes, w.rx_bytes) << "port_stats[" << slot << "].rx_bytes";
    EXPECT_EQ(a.tx_packets - b.tx_packets, w.tx_packets) << "port_stats[" << slot << "].tx_packets";
    EXPECT_EQ(a.tx_bytes - b.tx_bytes, w.tx_bytes) << "port_stats[" << slot << "].tx_bytes";
  }

  // Subscriber (up, bytes as received) and route (down, bytes as sent).
  for (auto& [name, v] : after.sub_up) {
    auto it = st.sub_up.find(name);
    uint64_t pk = it == st.sub_up.end() ? 0 : it->second;
    EXPECT_EQ(v.first - before.sub_up[name].first, pk) << "subscriber " << name << " up_packets";
    EXPECT_EQ(v.second - before.sub_up[name].second, pk * st.in.size())
        << "subscriber " << name << " up_bytes";
  }
  for (auto& [name, v] : after.route_down) {
    auto it = st.route_down.find(name);
    uint64_t pk = it == st.route_down.end() ? 0 : it->second;
    EXPECT_EQ(v.first - before.route_down[name].first, pk) << "route " << name << " down_packets";
    EXPECT_EQ(v.second - before.route_down[name].second, pk * want.size())
        << "route " << name << " down_bytes";
  }

  // Policed counters: bytes are frames as received upstream, as
  // they would have been sent (tags pushed) downstream.
  for (auto& [name, a] : after.police) {
    const auto& b = before.police[name];
    auto up = st.policed_up.find(name), down = st.policed_down.find(name);
    uint64_t pu = up == st.policed_up.end() ? 0 : up->second;
    uint64_t pd = down == st.policed_down.end() ? 0 : down->second;
    EXPECT_EQ(a.up_policed_packets - b.up_policed_packets, pu)
        << "police " << name << " up_policed_packets";
    EXPECT_EQ(a.up_policed_bytes - b.up_policed_bytes, pu * st.in.size())
        << "police " << name << " up_policed_bytes";
    EXPECT_EQ(a.down_policed_packets - b.down_policed_packets, pd)
        << "police " << name << " down_policed_packets";
    EXPECT_EQ(a.down_policed_bytes - b.down_policed_bytes, pd * (st.in.size() + 8))
        << "police " << name << " down_policed_bytes";
  }

  // Ring-buffer events.
  uint64_t now = now_ns();
  std::vector<struct xbng_event> got = drain_events();
  EXPECT_EQ(got.size(), st.events.size()) << "number of ring-buffer events";
  for (size_t i = 0; i < got.size() && i < st.events.size(); i++) {
    const auto& e = got[i];
    const auto& w = st.events[i];
    std::string g = event_str(e);
    EXPECT_EQ(e.type, w.type) << g;
    EXPECT_EQ(e.ifindex, (uint32_t)ifindex(w.port->name)) << g;
    EXPECT_EQ(e.outer_vid, w.svid) << g;
    EXPECT_EQ(e.inner_vid, w.cvid) << g;
    EXPECT_EQ(0, std::memcmp(e.mac, w.mac.b.data(), 6)) << g << " want mac " << w.mac.str();
    EXPECT_EQ(e.pad, 0) << g;
    EXPECT_EQ(e.reserved, 0u) << g;
    EXPECT_GT(e.timestamp_ns, 0u) << g;
    EXPECT_LE(e.timestamp_ns, now) << g;
  }

  // Punted frames: the record names the port, the VLANs and the kind, and
  // carries the frame exactly as received.
  std::vector<std::vector<uint8_t>> punts = drain_punts();
  EXPECT_EQ(punts.size(), st.punts.size()) << "number of punted frames";
  for (size_t i = 0; i < punts.size() && i < st.punts.size(); i++) {
    struct xbng_punt_record r;
    ASSERT_EQ(punts[i].size(), sizeof(r)) << "punt record size";
    std::memcpy(&r, punts[i].data(), sizeof(r));
    const auto& w = st.punts[i];
    EXPECT_EQ(r.kind, w.kind);
    EXPECT_EQ(r.ifindex, (uint32_t)ifindex(w.port->name));
    EXPECT_EQ(r.outer_vid, w.svid);
    EXPECT_EQ(r.inner_vid, w.cvid);
    EXPECT_GT(r.timestamp_ns, 0u);
    EXPECT_LE(r.timestamp_ns, now);
    ASSERT_EQ(r.len, st.in.size()) << "punted length";
    EXPECT_EQ(Bytes(r.frame, r.frame + r.len), st.in) << "punted bytes";
  }

  if (st.after) st.after(*this);
}

TEST_P(Table, Row) {
  const Row& row = GetParam();
  Harness& h = Harness::get();
  h.reset();
  for (size_t i = 0; i < row.steps.size(); i++) {
    SCOPED_TRACE("step " + std::to_string(i + 1) + " of " + std::to_string(row.steps.size()));
    h.run(row.steps[i]);
    if (HasFatalFailure()) return;
  }
}

Step access(const PortDef& port, Bytes in, int action, int reason) {
  Step s;
  s.prog = Prog::Access;
  s.ingress = &port;
  s.in = std::move(in);
  s.action = action;
  s.counts = {{reason, 1}};
  return s;
}

Step uplink(Bytes in, int action, int reason) {
  Step s;
  s.prog = Prog::Uplink;
  s.ingress = &kUp0;
  s.in = std::move(in);
  s.action = action;
  s.counts = {{reason, 1}};
  return s;
}

Row row(std::string desc, Step s) { return Row{std::move(desc), {std::move(s)}}; }

Row row(std::string desc, std::vector<Step> steps) {
  return Row{std::move(desc), std::move(steps)};
}

// ---- frame helpers ---------------------------------------------------------------
Packet from_sub(const SubDef& s) {
  return Packet().eth(s.port->mac, s.mac).qinq(s.port->tpid, s.svid, s.cvid);
}

Packet to_sub(const SubDef& s) {
  return Packet().eth(s.mac, s.port->mac).qinq(s.port->tpid, s.svid, s.cvid);
}

Packet plain(const Mac& dst, const Mac& src) { return Packet().eth(dst, src); }

Bytes udp4(Packet l2, const Ip4& src, const Ip4& dst, const testpkt::Ipv4Opts& o) {
  return l2.ipv4(src, dst, o).udp(40000, 443).payload(32).build();
}

Bytes udp6(Packet l2, const Ip6& src, const Ip6& dst, const testpkt::Ipv6Opts& o) {
  return l2.ipv6(src, dst, o).udp(40000, 443).payload(32).build();
}

testpkt::Ipv4Opts ttl4(uint8_t ttl) {
  testpkt::Ipv4Opts o;
  o.ttl = ttl;
  return o;
}

testpkt::Ipv6Opts hlim6(uint8_t hop_limit) {
  testpkt::Ipv6Opts o;
  o.hop_limit = hop_limit;
  return o;
}

Bytes truncate(const Bytes& f, size_t n) {
  if (n > f.size()) throw std::invalid_argument("truncate beyond the frame");
  return Bytes(f.begin(), f.begin() + (long)n);
}

}  // namespace bpftest
