#include "bench_util.hpp"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "pktcost.skel.h"
#include "xbng.skel.h"

namespace xbench {

namespace {

std::string errstr(int err) { return std::strerror(err < 0 ? -err : err); }

void put16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(x >> 8);
  v.push_back(x & 0xff);
}
void put32(std::vector<uint8_t>& v, uint32_t x) {
  put16(v, x >> 16);
  put16(v, x & 0xffff);
}
void put_bytes(std::vector<uint8_t>& v, const uint8_t* p, size_t n) { v.insert(v.end(), p, p + n); }
void put_mac(std::vector<uint8_t>& v, const Mac& m) { put_bytes(v, m.data(), 6); }

uint32_t csum_add(uint32_t s, const uint8_t* p, size_t n) {
  for (size_t k = 0; k + 1 < n; k += 2) s += (uint32_t(p[k]) << 8) | p[k + 1];
  if (n & 1) s += uint32_t(p[n - 1]) << 8;
  return s;
}
uint16_t csum_fold(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(~s);
}

void eth(std::vector<uint8_t>& v, const FrameAddrs& a, uint16_t proto) {
  put_mac(v, a.dst);
  put_mac(v, a.src);
  put16(v, proto);
}

// Ethernet + 0x88a8 S-tag + 0x8100 C-tag of subscriber 0, source MAC = its MAC.
void qinq(std::vector<uint8_t>& v, const FrameAddrs& a, uint16_t proto) {
  put_mac(v, a.dst);
  put_mac(v, sub_mac(0));
  put16(v, XBNG_ETH_P_8021AD);
  put16(v, sub_svid(0));
  put16(v, XBNG_ETH_P_8021Q);
  put16(v, sub_cvid(0));
  put16(v, proto);
}

void ipv4_udp(std::vector<uint8_t>& v, uint32_t src, uint32_t dst, size_t payload) {
  size_t ip = v.size();
  put16(v, 0x4500);
  put16(v, static_cast<uint16_t>(20 + 8 + payload));
  put32(v, 0);               // id, flags, fragment offset
  put16(v, (64 << 8) | 17);  // TTL 64, UDP
  put16(v, 0);               // checksum
  put32(v, src);
  put32(v, dst);
  uint16_t c = csum_fold(csum_add(0, v.data() + ip, 20));
  v[ip + 10] = c >> 8;
  v[ip + 11] = c & 0xff;
  put16(v, 40000);
  put16(v, 9);  // discard
  put16(v, static_cast<uint16_t>(8 + payload));
  put16(v, 0);  // no UDP checksum (IPv4)
  for (size_t k = 0; k < payload; k++) v.push_back(static_cast<uint8_t>('x'));
}

// IPv4 TCP SYN with an MSS option of 8960 (jumbo): xbng clamps it to the
// port's subscriber MTU - 40 on every pass.
void ipv4_syn(std::vector<uint8_t>& v, uint32_t src, uint32_t dst) {
  size_t ip = v.size();
  put16(v, 0x4500);
  put16(v, 20 + 24);
  put32(v, 0x00004000);     // id 0, DF
  put16(v, (64 << 8) | 6);  // TTL 64, TCP
  put16(v, 0);
  put32(v, src);
  put32(v, dst);
  uint16_t c = csum_fold(csum_add(0, v.data() + ip, 20));
  v[ip + 10] = c >> 8;
  v[ip + 11] = c & 0xff;
  size_t tcp = v.size();
  put16(v, 40000);
  put16(v, 443);
  put32(v, 0x01020304);        // sequence
  put32(v, 0);                 // acknowledgment
  put16(v, (6 << 12) | 0x02);  // data offset 6 words, SYN
  put16(v, 64240);             // window
  put16(v, 0);                 // checksum
  put16(v, 0);                 // urgent
  put32(v, 0x02042300);        // MSS 8960
  uint8_t ps[12];
  std::memcpy(ps, v.data() + ip + 12, 8);
  ps[8] = 0;
  ps[9] = 6;
  ps[10] = 0;
  ps[11] = 24;
  c = csum_fold(csum_add(csum_add(0, ps, 12), v.data() + tcp, 24));
  v[tcp + 16] = c >> 8;
  v[tcp + 17] = c & 0xff;
}

void ipv6_udp(std::vector<uint8_t>& v, const uint8_t* src, const uint8_t* dst, size_t payload) {
  size_t ip = v.size();
  put32(v, 0x60000000);
  put16(v, static_cast<uint16_t>(8 + payload));
  put16(v, (17 << 8) | 64);  // next header UDP, hop limit 64
  put_bytes(v, src, 16);
  put_bytes(v, dst, 16);
  size_t udp = v.size();
  put16(v, 40000);
  put16(v, 9);
  put16(v, static_cast<uint16_t>(8 + payload));
  put16(v, 0);
  for (size_t k = 0; k < payload; k++) v.push_back(static_cast<uint8_t>('x'));
  // UDP checksum over the pseudo-header (correct for subscriber 0's frame).
  uint32_t s = csum_add(0, v.data() + ip + 8, 32);
  s += 17 + 8 + payload;
  s = csum_add(s, v.data() + udp, 8 + payload);
  uint16_t c = csum_fold(s);
  if (c == 0) c = 0xffff;
  v[udp + 6] = c >> 8;
  v[udp + 7] = c & 0xff;
}

std::array<uint8_t, 16> words_to_bytes(const std::array<uint32_t, 4>& w) {
  std::array<uint8_t, 16> b{};
  std::memcpy(b.data(), w.data(), 16);
  return b;
}

void pad(std::vector<uint8_t>& v, size_t min) {
  while (v.size() < min) v.push_back(0);
}

}  // namespace

// ---- processes and namespaces ------------------------------------------------------
std::string sh(const std::string& cmd) {
  std::string full = cmd + " 2>&1";
  FILE* f = popen(full.c_str(), "r");
  if (!f) throw BenchError(fmt::format("popen({}): {}", cmd, errstr(errno)));
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = pclose(f);
  if (rc != 0) throw BenchError(fmt::format("command failed (status {}): {}\n{}", rc, cmd, out));
  return out;
}

void ip_batch(const std::string& ns, const std::vector<std::string>& lines) {
  constexpr size_t kChunk = 200000;  // bounds ip's own memory (GBs at 1M lines)
  std::string path = fmt::format("/tmp/xbngbench-{}-batch.txt", getpid());
  for (size_t off = 0; off < lines.size(); off += kChunk) {
    {
      std::ofstream f(path, std::ios::trunc);
      for (size_t k = off; k < std::min(lines.size(), off + kChunk); k++) f << lines[k] << '\n';
      if (!f) throw BenchError("cannot write " + path);
    }
    try {
      sh(fmt::format("ip {} -batch {}", ns.empty() ? "" : "-n " + ns, path));
    } catch (...) {
      unlink(path.c_str());
      throw;
    }
  }
  unlink(path.c_str());
}

void sysctl_net(const std::string& key, const std::string& value) {
  std::string path = "/proc/sys/" + key;
  for (auto& c : path)
    if (c == '.') c = '/';
  std::ofstream f(path);
  f << value;
  f.flush();
  if (!f) throw BenchError(fmt::format("sysctl {}={}: cannot write {}", key, value, path));
}

NetnsGuard::NetnsGuard(const std::string& name) {
  orig_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (orig_ < 0) throw BenchError(fmt::format("open own netns: {}", errstr(errno)));
  std::string path = "/run/netns/" + name;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    close(orig_);
    throw BenchError(fmt::format("setns {}: {}", path, errstr(e)));
  }
  close(fd);
}

NetnsGuard::~NetnsGuard() {
  if (orig_ >= 0) {
    setns(orig_, CLONE_NEWNET);
    close(orig_);
  }
}

namespace {
// Signal-safe registry: fixed storage, removal = umount2 + unlink (what
// `ip netns del` does); the namespace dies with its last reference.
constexpr int kMaxNetns = 16;
char g_netns[kMaxNetns][96];
volatile sig_atomic_t g_netns_count = 0;
bool g_handlers = false;

void remove_netns_path(const char* name) {
  char path[300];
  std::snprintf(path, sizeof path, "/run/netns/%.250s", name);
  umount2(path, MNT_DETACH);
  unlink(path);
}

void on_signal(int sig) {
  NetnsRegistry::remove_all();
  signal(sig, SIG_DFL);
  raise(sig);
}

bool pid_alive(long pid) { return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }
}  // namespace

std::string NetnsRegistry::create(const std::string& role) {
  std::string name = fmt::format("xbngbench-{}-{}", getpid(), role);
  if (g_netns_count >= kMaxNetns) throw BenchError("too many namespaces");
  std::snprintf(g_netns[g_netns_count], sizeof g_netns[0], "%s", name.c_str());
  g_netns_count = g_netns_count + 1;  // registered before creation: removed even if half-made
  sh("ip netns add " + name);
  sh(fmt::format("ip -n {} link set lo up", name));
  return name;
}

void NetnsRegistry::remove_all() {
  int n = g_netns_count;
  g_netns_count = 0;
  for (int k = n - 1; k >= 0; k--) remove_netns_path(g_netns[k]);
}

void NetnsRegistry::sweep_stale() {
  DIR* d = opendir("/run/netns");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    long pid = 0;
    if (std::sscanf(e->d_name, "xbngbench-%ld-", &pid) == 1 && pid > 0 && !pid_alive(pid)) {
      std::fprintf(stderr, "removing stale namespace %s\n", e->d_name);
      remove_netns_path(e->d_name);
    }
  }
  closedir(d);
}

void NetnsRegistry::install_handlers() {
  if (g_handlers) return;
  g_handlers = true;
  std::atexit([] { NetnsRegistry::remove_all(); });
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) signal(sig, on_signal);
}

unsigned ifindex_of(const std::string& ifname) {
  unsigned idx = if_nametoindex(ifname.c_str());
  if (!idx) throw BenchError(fmt::format("no interface {}: {}", ifname, errstr(errno)));
  return idx;
}

Mac mac_of(const std::string& ifname) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw BenchError(fmt::format("socket: {}", errstr(errno)));
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname.c_str());
  int rc = ioctl(s, SIOCGIFHWADDR, &ifr);
  int e = errno;
  close(s);
  if (rc != 0) throw BenchError(fmt::format("SIOCGIFHWADDR {}: {}", ifname, errstr(e)));
  Mac m{};
  std::memcpy(m.data(), ifr.ifr_hwaddr.sa_data, 6);
  return m;
}

std::string mac_str(const Mac& m) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4],
                     m[5]);
}

// ---- addressing ---------------------------------------------------------------------
std::array<uint32_t, 4> sub_v6(uint32_t i) {
  return {htonl(PC_V6_HOST_W0), htonl(PC_V6_HOST_W1), 0, htonl(PC_V6_HOST_W3_BASE + i)};
}
std::array<uint32_t, 2> sub_v6_64(uint32_t i) {
  return {htonl(PC_V6_PFX_W0), htonl(PC_V6_PFX_W1_BASE + i)};
}
Mac sub_mac(uint32_t i) {
  return {0x02,
          0x00,
          static_cast<uint8_t>(i >> 24),
          static_cast<uint8_t>(i >> 16),
          static_cast<uint8_t>(i >> 8),
          static_cast<uint8_t>(i)};
}

// ---- frames --------------------------------------------------------------------------
std::vector<uint8_t> frame_up_v4(const FrameAddrs& a) {
  std::vector<uint8_t> v;
  qinq(v, a, 0x0800);
  ipv4_udp(v, sub_v4(0), a.v4_other, 22);
  return v;  // 22 + 20 + 8 + 22 = 72
}

std::vector<uint8_t> frame_up_syn4(const FrameAddrs& a) {
  std::vector<uint8_t> v;
  qinq(v, a, 0x0800);
  ipv4_syn(v, sub_v4(0), a.v4_other);
  return v;  // 22 + 20 + 24 = 66
}

std::vector<uint8_t> frame_down_syn4(const FrameAddrs& a, uint32_t src_v4) {
  std::vector<uint8_t> v;
  eth(v, a, 0x0800);
  ipv4_syn(v, src_v4, sub_v4(0));
  return v;  // 14 + 20 + 24 = 58
}

std::vector<uint8_t> frame_up_v6(const FrameAddrs& a) {
  std::vector<uint8_t> v;
  qinq(v, a, 0x86dd);
  auto src = words_to_bytes(sub_v6(0));
  ipv6_udp(v, src.data(), a.v6_other.data(), 2);
  return v;  // 22 + 40 + 8 + 2 = 72
}

std::vector<uint8_t> frame_arp(const FrameAddrs& a, uint32_t target_v4) {
  std::vector<uint8_t> v;
  Mac bcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  FrameAddrs b = a;
  b.dst = bcast;
  qinq(v, b, 0x0806);
  put16(v, 1);       // Ethernet
  put16(v, 0x0800);  // IPv4
  v.push_back(6);
  v.push_back(4);
  put16(v, 1);  // request
  put_mac(v, sub_mac(0));
  put32(v, sub_v4(0));
  put_mac(v, Mac{});
  put32(v, target_v4);
  pad(v, 64);
  return v;
}

std::vector<uint8_t> frame_down_v4(const FrameAddrs& a, uint32_t src_v4) {
  std::vector<uint8_t> v;
  eth(v, a, 0x0800);
  ipv4_udp(v, src_v4, sub_v4(0), 22);
  return v;  // 14 + 20 + 8 + 22 = 64
}

std::vector<uint8_t> frame_down_v6(const FrameAddrs& a, bool prefix64) {
  std::vector<uint8_t> v;
  eth(v, a, 0x86dd);
  std::array<uint8_t, 16> dst{};
  if (prefix64) {
    auto p = sub_v6_64(0);
    std::memcpy(dst.data(), p.data(), 8);
    dst[15] = 1;  // interface ID ::1 inside the /64
  } else {
    dst = words_to_bytes(sub_v6(0));
  }
  ipv6_udp(v, a.v6_other.data(), dst.data(), 2);
  return v;  // 14 + 40 + 8 + 2 = 64
}

// ---- skeletons ------------------------------------------------------------------------
void XbngDeleter::operator()(::xbng* s) const { xbng__destroy(s); }
void PktcostDeleter::operator()(::pktcost* s) const { pktcost__destroy(s); }

XbngSkel load_xbng(uint32_t n) {
  XbngSkel s(xbng__open());
  if (!s) throw BenchError(fmt::format("opening the xbng skeleton: {}", errstr(errno)));
  uint32_t entries = std::max<uint32_t>(n, 1);
  for (bpf_map* m :
       {s->maps.subscribers, s->maps.routes_v4, s->maps.routes_v6, s->maps.routes_v6_64,
        s->maps.prefixes_v4, s->maps.prefixes_v6, s->maps.police})
    bpf_map__set_max_entries(m, entries);
  bpf_map__set_max_entries(s->maps.direct_v4, bench_direct_slots(n));
  bpf_map__set_max_entries(s->maps.direct_v6, bench_direct_64_slots(n) + bench_direct_128_slots(n));
  bpf_map__set_max_entries(s->maps.direct_subscribers, bench_dsub_slots(n));
  if (int err = xbng__load(s.get()))
    throw BenchError(fmt::format("loading xbng (N={}): {}", n, errstr(err)));
  return s;
}

PktcostSkel load_pktcost(uint32_t n, bool subs) {
  PktcostSkel s(pktcost__open());
  if (!s) throw BenchError(fmt::format("opening the pktcost skeleton: {}", errstr(errno)));
  uint32_t entries = std::max<uint32_t>(n, 1);
  bpf_map__set_max_entries(s->maps.ref_hash_map, entries);
  bpf_map__set_max_entries(s->maps.ref_lpm_map, entries);
  bpf_map__set_max_entries(s->maps.ref_route_bkt_map, entries);
  bpf_map__set_max_entries(s->maps.ref_police_map, entries);
  bpf_map__set_max_entries(s->maps.ref_sub_map, entries);
  for (bpf_map* m : {s->maps.ref_sub40_map, s->maps.ref_sub64_map, s->maps.ref_sub72_map})
    bpf_map__set_max_entries(m, subs ? entries : 1);
  if (int err = pktcost__load(s.get()))
    throw BenchError(fmt::format("loading pktcost (N={}): {}", n, errstr(err)));
  return s;
}

int xbng_prog_access(::xbng* s) { return bpf_program__fd(s->progs.xdp_access); }
int xbng_prog_uplink(::xbng* s) { return bpf_program__fd(s->progs.xdp_uplink); }

namespace {
void update(int fd, const void* k, const void* v, const char* what) {
  if (bpf_map_update_elem(fd, k, v, BPF_ANY) != 0)
    throw BenchError(fmt::format("updating {}: {}", what, errstr(errno)));
}

template <typename K, typename V>
void batch_update(int fd, const std::vector<K>& keys, const std::vector<V>& vals,
                  const char* what) {
  LIBBPF_OPTS(bpf_map_batch_opts, bo, .elem_flags = BPF_ANY);
  constexpr size_t kChunk = 65536;
  for (size_t off = 0; off < keys.size(); off += kChunk) {
    __u32 count = static_cast<__u32>(std::min(kChunk, keys.size() - off));
    if (bpf_map_update_batch(fd, &keys[off], &vals[off], &count, &bo) != 0)
      throw BenchError(fmt::format("bpf_map_update_batch {} at {}: {}", what, off, errstr(errno)));
  }
}

xbng_route route_of(uint32_t access_ifindex, uint32_t i) {
  xbng_route r{};
  r.sub.ifindex = access_ifindex;
  r.sub.outer_vid = sub_svid(i);
  r.sub.inner_vid = sub_cvid(i);
  Mac m = sub_mac(i);
  std::memcpy(r.mac, m.data(), 6);
  r.flags = XBNG_ROUTE_F_MAC_VALID;
  r.slot = i;
  return r;
}

// 100 Gbit/s (the largest plan), 1 MB deep.
xbng_bucket bench_bucket() {
  xbng_bucket b{};
  b.byte_ns_fp = static_cast<uint32_t>(((8000000000ull << XBNG_POLICE_FP_SHIFT) + 50000000000ull) /
                                       100000000000ull);
  b.burst_bytes = 1000000;
  return b;
}

uint64_t percpu_sum_u64(int fd, uint32_t key, size_t value_size, size_t field_off) {
  int ncpu = libbpf_num_possible_cpus();
  std::vector<uint8_t> buf(static_cast<size_t>(ncpu) * ((value_size + 7) & ~size_t(7)));
  if (bpf_map_lookup_elem(fd, &key, buf.data()) != 0)
    throw BenchError(fmt::format("reading per-CPU counter {}: {}", key, errstr(errno)));
  uint64_t sum = 0;
  size_t stride = (value_size + 7) & ~size_t(7);
  for (int c = 0; c < ncpu; c++) {
    uint64_t x;
    std::memcpy(&x, buf.data() + c * stride + field_off, 8);
    sum += x;
  }
  return sum;
}
}  // namespace

void xbng_add_port(::xbng* s, const PortConfig& p) {
  xbng_port v{};
  v.ifindex = p.ifindex;
  v.role = p.role;
  v.outer_tpid = XBNG_ETH_P_8021AD;
  std::memcpy(v.mac, p.mac.data(), 6);
  v.mtu = 1500;
  v.slot = p.slot;
  if (p.role == XBNG_ROLE_ACCESS) {  // subscriber MTU, MSS clamping on
    v.mtu = XBNG_DEFAULT_SUBSCRIBER_MTU + XBNG_QINQ_TAGS_BYTES;
    v.sub_mtu = XBNG_DEFAULT_SUBSCRIBER_MTU;
    v.flags = XBNG_PORT_F_MSS_CLAMP;
  }
  v.gw_ipv4 = htonl(0x64400001);  // 100.64.0.1
  v.gw_ipv6[0] = htonl(PC_V6_HOST_W0);
  v.gw_ipv6[1] = htonl(PC_V6_HOST_W1);
  v.gw_ipv6[3] = htonl(1);  // 2001:db8:1000::1
  update(bpf_map__fd(s->maps.ports), &p.ifindex, &v, "ports");
  update(bpf_map__fd(s->maps.tx_ports), &p.ifindex, &p.ifindex, "tx_ports");
}

double xbng_fill_subscribers(::xbng* s, uint32_t access_ifindex, uint32_t n, bool police) {
  std::vector<uint32_t> pk(n);
  std::vector<xbng_police> pv(n);
  std::vector<xbng_sub_key> sk(n);
  std::vector<xbng_subscriber> sv(n);
  std::vector<__be32> k4(n);
  std::vector<xbng_v6_key> k6(n);
  std::vector<xbng_v6_64_key> k64(n);
  std::vector<xbng_route> rv(n);
  for (uint32_t i = 0; i < n; i++) {
    sk[i] = {access_ifindex, sub_svid(i), sub_cvid(i)};
    xbng_subscriber& v = sv[i];
    v = {};
    Mac m = sub_mac(i);
    std::memcpy(v.mac, m.data(), 6);
    v.flags =
        XBNG_SUB_F_HAS_IPV4 | XBNG_SUB_F_HAS_IPV6 | XBNG_SUB_F_MAC_VALID | XBNG_SUB_F_V6_PREFIX;
    v.ipv4 = htonl(sub_v4(i));
    auto a6 = sub_v6(i);
    std::memcpy(v.ipv6, a6.data(), 16);
    k4[i] = htonl(sub_v4(i));
    std::memcpy(k6[i].addr, a6.data(), 16);
    auto p = sub_v6_64(i);
    std::memcpy(k64[i].addr, p.data(), 8);
    rv[i] = route_of(access_ifindex, i);
    v.slot = i;
    pk[i] = i;
    pv[i] = {};
    if (police) {
      v.up = bench_bucket();
      pv[i].down = bench_bucket();
      pv[i].up_rate_bps = pv[i].down_rate_bps = 100000000000ull;
      // As xbngd writes them: the /32, /128 and /64 are the subscriber's
      // first three routes, each with prepaid credit.
      rv[i].flags |= XBNG_ROUTE_F_POLICED | XBNG_ROUTE_F_CREDIT;
    }
  }
  double t0 = now_s();
  batch_update(bpf_map__fd(s->maps.police), pk, pv, "police");
  batch_update(bpf_map__fd(s->maps.subscribers), sk, sv, "subscribers");
  batch_update(bpf_map__fd(s->maps.routes_v4), k4, rv, "routes_v4");
  batch_update(bpf_map__fd(s->maps.routes_v6), k6, rv, "routes_v6");
  batch_update(bpf_map__fd(s->maps.routes_v6_64), k64, rv, "routes_v6_64");
  // The same /32 routes in the direct array, at their offsets in the pool.
  std::vector<uint32_t> dk(n);
  std::vector<xbng_direct_route> dv(n);
  const uint32_t start = sub_v4(0) & ~(bench_direct_slots(n) - 1);
  for (uint32_t i = 0; i < n; i++) {
    dk[i] = sub_v4(i) - start;
    dv[i] = {};
    dv[i].r = rv[i];
  }
  batch_update(bpf_map__fd(s->maps.direct_v4), dk, dv, "direct_v4");
  // The /64s and /128s in direct_v6 (see xbng_set_direct).
  dk.resize(2 * size_t{n});
  dv.resize(2 * size_t{n});
  for (uint32_t i = 0; i < n; i++) {
    dk[i] = i;
    dk[n + i] = bench_direct_64_slots(n) + PC_V6_HOST_W3_BASE + i;
    dv[n + i] = dv[i];
  }
  batch_update(bpf_map__fd(s->maps.direct_v6), dk, dv, "direct_v6");
  // The same subscribers in the direct array, one S-VLAN range from S-VID 1.
  std::vector<uint32_t> ssk(n);
  for (uint32_t i = 0; i < n; i++) {
    ssk[i] = (sub_svid(i) - 1u) * XBNG_DIRECT_SUB_CVIDS + sub_cvid(i);
    sv[i].flags |= XBNG_SUB_F_PRESENT;
  }
  batch_update(bpf_map__fd(s->maps.direct_subscribers), ssk, sv, "direct_subscribers");
  return now_s() - t0;
}

uint32_t bench_direct_64_slots(uint32_t n) { return std::bit_ceil(std::max<uint32_t>(n, 1)); }

uint32_t bench_direct_128_slots(uint32_t n) { return std::bit_ceil(PC_V6_HOST_W3_BASE + n); }

uint32_t bench_dsub_svids(uint32_t n) { return n ? sub_svid(n - 1) : 1; }

void xbng_set_direct_subs(::xbng* s, uint32_t access_ifindex, uint32_t n, bool on) {
  xbng_direct_sub_table t{};
  if (on) {
    t.n = 1;
    t.r[0].ifindex = access_ifindex;
    t.r[0].first_svid = 1;
    t.r[0].n_svids = static_cast<uint16_t>(bench_dsub_svids(n));
    t.r[0].base = 0;
  }
  const uint32_t zero = 0;
  update(bpf_map__fd(s->maps.direct_sub_ranges), &zero, &t, "direct_sub_ranges");
}

uint32_t bench_direct_len(uint32_t n) {
  uint32_t len = 32;
  while (len > 8 && (uint64_t{1} << (32 - len)) < uint64_t{sub_v4(0) & 0xffff} + n) --len;
  return len;
}

void xbng_set_direct(::xbng* s, uint32_t n, bool on) {
  xbng_direct_table t{};
  if (on) {
    t.n_v4 = 1;
    t.v4[0].size = bench_direct_slots(n);
    t.v4[0].start = sub_v4(0) & ~(t.v4[0].size - 1);
    t.v4[0].base = 0;
  }
  const uint32_t zero = 0;
  update(bpf_map__fd(s->maps.direct_pools), &zero, &t, "direct_pools");
  xbng_direct_table_v6 t6{};
  if (on) {
    t6.n = 2;
    t6.pools[0].hi = uint64_t{PC_V6_PFX_W0} << 32 | PC_V6_PFX_W1_BASE;
    t6.pools[0].size = bench_direct_64_slots(n);
    t6.pools[0].unit = 64;
    t6.pools[1].hi = uint64_t{PC_V6_HOST_W0} << 32 | PC_V6_HOST_W1;
    t6.pools[1].size = bench_direct_128_slots(n);
    t6.pools[1].base = t6.pools[0].size;
    t6.pools[1].unit = 128;
  }
  update(bpf_map__fd(s->maps.direct_pools_v6), &zero, &t6, "direct_pools_v6");
}

double pktcost_fill_refs(::pktcost* s, uint32_t access_ifindex, uint32_t n) {
  std::vector<__be32> k4(n);
  std::vector<xbng_lpm_v4_key> kl(n);
  std::vector<xbng_route> rv(n);
  for (uint32_t i = 0; i < n; i++) {
    k4[i] = htonl(sub_v4(i));
    kl[i] = {32, k4[i]};
    rv[i] = route_of(access_ifindex, i);
  }
  std::vector<pc_route_bkt> rb(n);
  std::vector<uint32_t> pk(n);
  std::vector<xbng_police> pv(n);
  std::vector<xbng_sub_key> sk(n);
  std::vector<pc_sub_bkt> sv(n);
  for (uint32_t i = 0; i < n; i++) {
    rb[i] = {rv[i], bench_bucket()};
    pk[i] = i;
    pv[i] = {};
    pv[i].down = bench_bucket();
    sk[i] = rv[i].sub;
    sv[i] = {};
    sv[i].s.slot = i;
    sv[i].down = bench_bucket();
  }
  double t0 = now_s();
  batch_update(bpf_map__fd(s->maps.ref_hash_map), k4, rv, "ref_hash_map");
  batch_update(bpf_map__fd(s->maps.ref_lpm_map), kl, rv, "ref_lpm_map");
  batch_update(bpf_map__fd(s->maps.ref_route_bkt_map), k4, rb, "ref_route_bkt_map");
  batch_update(bpf_map__fd(s->maps.ref_police_map), pk, pv, "ref_police_map");
  batch_update(bpf_map__fd(s->maps.ref_sub_map), sk, sv, "ref_sub_map");
  return now_s() - t0;
}

double pktcost_fill_sub_refs(::pktcost* s, uint32_t access_ifindex, uint32_t n) {
  std::vector<xbng_sub_key> k(n);
  std::vector<pc_sub_v40> v40(n);
  std::vector<xbng_subscriber> v64(n);
  std::vector<pc_sub_v72> v72(n);
  for (uint32_t i = 0; i < n; i++) {
    k[i] = {access_ifindex, sub_svid(i), sub_cvid(i)};
    v40[i] = {};
    v64[i] = {};
    v72[i] = {};
    v40[i].flags = v64[i].flags = v72[i].flags = XBNG_SUB_F_MAC_VALID;
  }
  double t0 = now_s();
  batch_update(bpf_map__fd(s->maps.ref_sub40_map), k, v40, "ref_sub40_map");
  batch_update(bpf_map__fd(s->maps.ref_sub64_map), k, v64, "ref_sub64_map");
  batch_update(bpf_map__fd(s->maps.ref_sub72_map), k, v72, "ref_sub72_map");
  return now_s() - t0;
}

uint64_t map_memlock(uint32_t type, uint32_t key_size, uint32_t value_size, uint32_t n,
                     uint32_t flags) {
  LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = flags);
  int fd =
      bpf_map_create(static_cast<bpf_map_type>(type), "memlock_probe", key_size, value_size, n, &o);
  if (fd < 0) throw BenchError(fmt::format("bpf_map_create (memory probe): {}", errstr(errno)));
  std::ifstream f(fmt::format("/proc/self/fdinfo/{}", fd));
  std::string line;
  uint64_t mem = 0;
  while (std::getline(f, line))
    if (line.rfind("memlock:", 0) == 0) mem = std::stoull(line.substr(8));
  close(fd);
  return mem;
}

void pktcost_set_ref_tx(::pktcost* s, uint32_t ifindex) {
  uint32_t k = 0;
  update(bpf_map__fd(s->maps.ref_tx), &k, &ifindex, "ref_tx");
}

void pktcost_set_slot(::pktcost* s, uint32_t slot, int prog_fd) {
  update(bpf_map__fd(s->maps.progs), &slot, &prog_fd, "progs");
}

uint64_t xbng_reason_packets(::xbng* s, uint32_t reason) {
  return percpu_sum_u64(bpf_map__fd(s->maps.stats), reason, sizeof(xbng_counter), 0);
}

std::vector<uint64_t> xbng_all_reasons(::xbng* s) {
  std::vector<uint64_t> v(XBNG_REASON_MAX);
  for (uint32_t r = 0; r < XBNG_REASON_MAX; r++) v[r] = xbng_reason_packets(s, r);
  return v;
}

std::string reason_name(uint32_t reason) {
#define XBNG_REASON_NAME_(name, str, kind) str,
  static const char* kNames[] = {XBNG_REASONS(XBNG_REASON_NAME_)};
#undef XBNG_REASON_NAME_
  return reason < XBNG_REASON_MAX ? kNames[reason] : fmt::format("reason{}", reason);
}

uint64_t pktcost_counter(::pktcost* s, uint32_t idx) {
  return percpu_sum_u64(bpf_map__fd(s->maps.counters), idx, sizeof(uint64_t), 0);
}

void pktcost_configure(::pktcost* s, const WrapperConfig& c) {
  if (c.tmpl.empty() || c.tmpl.size() > PC_TMPL_MAX)
    throw BenchError(fmt::format("template of {} bytes (max {})", c.tmpl.size(), PC_TMPL_MAX));
  if (c.nkeys == 0) throw BenchError("nkeys must be > 0");
  auto* b = s->bss;
  std::memset(b->tmpl, 0, sizeof b->tmpl);
  std::memcpy(b->tmpl, c.tmpl.data(), c.tmpl.size());
  b->tmpl_len = static_cast<uint32_t>(c.tmpl.size());
  b->mode = c.mode;
  b->nkeys = c.nkeys;
  b->random_keys = c.random ? 1 : 0;
  b->fixed_index = c.fixed_index;
  b->use_tail = c.use_tail ? 1 : 0;
  b->target = c.target;
  b->out_action = c.out_action;
}

// ---- misc -------------------------------------------------------------------------------
std::string action_name(uint32_t a) {
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
    default:
      return fmt::format("action {}", a);
  }
}

uint32_t parse_size(const std::string& s) {
  if (s.empty()) throw BenchError("empty size");
  size_t pos = 0;
  double v = std::stod(s, &pos);
  std::string suf = s.substr(pos);
  if (suf == "K" || suf == "k")
    v *= 1e3;
  else if (suf == "M" || suf == "m")
    v *= 1e6;
  else if (!suf.empty())
    throw BenchError("bad size: " + s);
  if (v < 1 || v > 16e6) throw BenchError("size out of range (1..16M): " + s);
  return static_cast<uint32_t>(v);
}

std::optional<double> ratio(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *b <= 0) return std::nullopt;
  return *a / *b;
}

std::vector<uint32_t> parse_sizes(const std::string& list) {
  std::vector<uint32_t> sizes;
  std::stringstream ss(list);
  for (std::string tok; std::getline(ss, tok, ',');)
    if (!tok.empty()) sizes.push_back(parse_size(tok));
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

std::string size_label(uint32_t n) {
  if (n >= 1000000 && n % 1000000 == 0) return fmt::format("{}M", n / 1000000);
  if (n >= 1000 && n % 1000 == 0) return fmt::format("{}K", n / 1000);
  return std::to_string(n);
}

nlohmann::json machine_info() {
  nlohmann::json j;
  utsname u{};
  if (uname(&u) == 0) {
    j["kernel"] = u.release;
    j["hostname"] = u.nodename;
  }
  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line))
    if (line.rfind("model name", 0) == 0) {
      j["cpu"] = line.substr(line.find(':') + 2);
      break;
    }
  j["cpus"] = libbpf_num_possible_cpus();
  j["online_cpus"] = sysconf(_SC_NPROCESSORS_ONLN);
  j["mem_total_mb"] =
      static_cast<long long>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / (1 << 20);
  double load[3];
  if (getloadavg(load, 3) == 3) j["loadavg_at_start"] = {load[0], load[1], load[2]};
  return j;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace xbench
