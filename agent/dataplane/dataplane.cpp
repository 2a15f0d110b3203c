#include "dataplane/dataplane.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/magic.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "dataplane/skeleton.h"
#include "dataplane/router.h"
#include "dataplane/pinlock.h"
#include "dataplane/mac_policy.h"
#include "dataplane/xdp_dispatch.h"

namespace fs = std::filesystem;

namespace xbng::agent {

namespace {

std::string errstr(int err) { return std::strerror(err < 0 ? -err : err); }

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

void mkdirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw DataplaneError(fmt::format("cannot create {}: {}", path, ec.message()));
}

std::string mount_ns(const char* pid) {
  char buf[64] = {};
  const std::string link = fmt::format("/proc/{}/ns/mnt", pid);
  ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

bool is_bpffs(const std::string& path) {
  struct statfs st {};
  return statfs(path.c_str(), &st) == 0 && static_cast<unsigned long>(st.f_type) == BPF_FS_MAGIC;
}

// Pins must outlive the agent: they must live on the host's bpf filesystem,
// never on one mounted inside a private mount namespace (systemd's
// ProtectSystem/PrivateTmp give the service one), which dies with the
// agent and takes the pins, and so the XDP programs, with it. The pin
// directory must be the same inode on the same filesystem as PID 1 sees.
void refuse_private_bpffs(const std::string& bpffs) {
  struct stat ours {
  }, host{};
  if (stat(bpffs.c_str(), &ours) != 0)
    throw DataplaneError(fmt::format("{}: {}", bpffs, errstr(errno)));
  const std::string host_path = "/proc/1/root" + bpffs;
  if (stat(host_path.c_str(), &host) == 0) {
    if (host.st_dev == ours.st_dev && host.st_ino == ours.st_ino) return;
  } else if (errno != ENOENT) {
    // PID 1's root is out of reach (no ptrace access to it, e.g. another
    // user namespace): its mount table says which bpf filesystems the host
    // has (field 3: the superblock's major:minor, as in st_dev).
    const int e = errno;
    std::ifstream mi("/proc/1/mountinfo");
    if (mi) {
      const std::string dev = fmt::format("{}:{}", major(ours.st_dev), minor(ours.st_dev));
      std::string line;
      while (std::getline(mi, line)) {
        std::istringstream ls(line);
        std::string id, parent, majmin;
        ls >> id >> parent >> majmin;
        const size_t dash = line.find(" - ");
        if (majmin == dev && dash != std::string::npos && line.compare(dash + 3, 4, "bpf ") == 0)
          return;
      }
    } else {
      const std::string self = mount_ns("self"), init = mount_ns("1");
      if (!self.empty() && self == init) return;
      spdlog::warn(
          "cannot verify that {} is on the host's bpf filesystem ({}: {}); make sure "
          "bpffs is the host's, or the pins die with this process",
          bpffs, host_path, errstr(e));
      return;
    }
  }
  throw DataplaneError(fmt::format(
      "{} is not on the host's bpf filesystem: it was mounted inside a private mount namespace "
      "({} differs from PID 1's view of it), so the pins, and the XDP programs with them, would "
      "die with this process. Mount bpffs on the host (`mount -t bpf bpf /sys/fs/bpf`; systemd "
      "does it at boot) and do not let xbngd mount its own; nothing was changed",
      bpffs, bpffs));
}

namespace {

void ensure_bpffs(const std::string& bpffs) {
  if (!is_bpffs("/sys/fs/bpf") && bpffs.rfind("/sys/fs/bpf", 0) == 0) {
    // Only in the host's mount namespace: a mount made in a private one
    // vanishes with the agent (refuse_private_bpffs).
    const std::string self = mount_ns("self"), init = mount_ns("1");
    if (self.empty() || self != init)
      throw DataplaneError(
          "/sys/fs/bpf is not a bpf filesystem in xbngd's mount namespace, which is not the "
          "host's: mount bpffs on the host (`mount -t bpf bpf /sys/fs/bpf`; systemd does it at "
          "boot), so that the pins outlive xbngd");
    if (mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700") != 0)
      throw DataplaneError(
          fmt::format("/sys/fs/bpf is not a bpf filesystem and mounting one "
                      "failed: {}",
                      errstr(errno)));
    spdlog::info("mounted bpffs at /sys/fs/bpf");
  }
  mkdirs(bpffs);
  if (!is_bpffs(bpffs))
    throw DataplaneError(
        fmt::format("{} is not on a bpf filesystem (mount -t bpf bpf "
                    "/sys/fs/bpf)",
                    bpffs));
  refuse_private_bpffs(bpffs);
}

// Pins of another ABI version are never adopted nor silently replaced.
void refuse_other_abi(const std::string& bpffs) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(bpffs, ec)) {
    const std::string name = e.path().filename();
    if (name.size() < 2 || name[0] != 'v' || !e.is_directory()) continue;
    if (name.find_first_not_of("0123456789", 1) != std::string::npos) continue;
    if (name == fmt::format("v{}", XBNG_ABI_VERSION)) continue;
    bool has_pins = false;
    for (const auto& f : fs::recursive_directory_iterator(e.path(), ec))
      if (!f.is_directory()) has_pins = true;
    if (!has_pins) continue;
    throw DataplaneError(fmt::format(
        "{} holds pins of ABI version {}, this xbngd speaks ABI version {}: refusing to adopt "
        "or replace them. Tear them down (`xbngd --teardown --bpffs {}`, which stops "
        "forwarding) or migrate them with the xbngd build that created them",
        e.path().string(), name.substr(1), XBNG_ABI_VERSION, bpffs));
  }
}

const char* map_type_name(uint32_t t) {
  const char* n = libbpf_bpf_map_type_str(static_cast<enum bpf_map_type>(t));
  return n ? n : "?";
}

int ifindex_of(const std::string& name) {
  unsigned idx = if_nametoindex(name.c_str());
  return idx ? static_cast<int>(idx) : -1;
}

std::string ifname_of(uint32_t ifindex) {
  char buf[IF_NAMESIZE] = {};
  if (!if_indextoname(ifindex, buf)) return fmt::format("if{}", ifindex);
  return buf;
}

void netdev_info(const std::string& name, uint8_t mac[6], uint16_t* mtu) {
  Fd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s.fd < 0) throw DataplaneError(fmt::format("socket: {}", errstr(errno)));
  struct ifreq ifr {};
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(s.fd, SIOCGIFHWADDR, &ifr) != 0)
    throw DataplaneError(fmt::format("{}: reading the MAC address: {}", name, errstr(errno)));
  std::memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
  if (ioctl(s.fd, SIOCGIFMTU, &ifr) != 0)
    throw DataplaneError(fmt::format("{}: reading the MTU: {}", name, errstr(errno)));
  *mtu = static_cast<uint16_t>(ifr.ifr_mtu > 0xffff ? 0xffff : ifr.ifr_mtu);
}

// HA: the access netdev takes the group's virtual MAC, so that frames the
// fast path hands to the kernel (no neighbour yet, allowed host services)
// are still addressed to the netdev.
void set_netdev_mac(const std::string& name, const Mac& mac) {
  Fd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s.fd < 0) throw DataplaneError(fmt::format("socket: {}", errstr(errno)));
  struct ifreq ifr {};
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(s.fd, SIOCGIFHWADDR, &ifr) != 0)
    throw DataplaneError(fmt::format("{}: reading the MAC address: {}", name, errstr(errno)));
  if (std::memcmp(ifr.ifr_hwaddr.sa_data, mac.data(), 6) == 0) return;
  std::memcpy(ifr.ifr_hwaddr.sa_data, mac.data(), 6);
  if (ioctl(s.fd, SIOCSIFHWADDR, &ifr) != 0)
    throw DataplaneError(fmt::format("{}: setting the HA virtual MAC {}: {}", name,
                                     format_mac(mac.data()), errstr(errno)));
  spdlog::info("{}: MAC set to the HA group's virtual MAC {}", name, format_mac(mac.data()));
}

void write_sysctl(const std::string& path, const char* value) {
  std::ofstream f(path);
  if (!f) throw DataplaneError(fmt::format("cannot open {}: {}", path, errstr(errno)));
  f << value;
  f.flush();
  if (!f) throw DataplaneError(fmt::format("cannot write {}: {}", path, errstr(errno)));
}

// RX VLAN offload strips the outer/inner tag into the skb before XDP sees
// the frame on some drivers: turn rx-vlan-hw-parse/rx-vlan-stag-hw-parse
// off on access ports. Returns a warning when that is not possible.
std::optional<std::string> disable_rx_vlan_offload(const std::string& name) {
  Fd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (s.fd < 0) return fmt::format("{}: socket: {}", name, errstr(errno));
  struct ifreq ifr {};
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());

  alignas(8) uint8_t ssbuf[sizeof(ethtool_sset_info) + sizeof(uint32_t)] = {};
  auto* sset = reinterpret_cast<ethtool_sset_info*>(ssbuf);
  sset->cmd = ETHTOOL_GSSET_INFO;
  sset->sset_mask = 1ull << ETH_SS_FEATURES;
  ifr.ifr_data = reinterpret_cast<char*>(sset);
  if (ioctl(s.fd, SIOCETHTOOL, &ifr) != 0 || !sset->sset_mask)
    return fmt::format(
        "{}: cannot read the offload feature names (ETHTOOL_GSSET_INFO: {}); "
        "check `ethtool -k {} | grep vlan` manually",
        name, errstr(errno), name);
  const uint32_t n = sset->data[0];
  std::vector<uint8_t> sbuf(sizeof(ethtool_gstrings) + n * ETH_GSTRING_LEN);
  auto* gs = reinterpret_cast<ethtool_gstrings*>(sbuf.data());
  gs->cmd = ETHTOOL_GSTRINGS;
  gs->string_set = ETH_SS_FEATURES;
  gs->len = n;
  ifr.ifr_data = reinterpret_cast<char*>(gs);
  if (ioctl(s.fd, SIOCETHTOOL, &ifr) != 0)
    return fmt::format("{}: ETHTOOL_GSTRINGS: {}", name, errstr(errno));
  std::vector<uint32_t> wanted;
  for (uint32_t i = 0; i < n; ++i) {
    std::string f(
        reinterpret_cast<char*>(gs->data + i * ETH_GSTRING_LEN),
        strnlen(reinterpret_cast<char*>(gs->data + i * ETH_GSTRING_LEN), ETH_GSTRING_LEN));
    if (f == "rx-vlan-hw-parse" || f == "rx-vlan-stag-hw-parse") wanted.push_back(i);
  }
  const uint32_t blocks = (n + 31) / 32;
  auto read = [&](std::vector<uint8_t>& buf) -> ethtool_gfeatures* {
    buf.assign(sizeof(ethtool_gfeatures) + blocks * sizeof(ethtool_get_features_block), 0);
    auto* g = reinterpret_cast<ethtool_gfeatures*>(buf.data());
    g->cmd = ETHTOOL_GFEATURES;
    g->size = blocks;
    ifr.ifr_data = reinterpret_cast<char*>(g);
    return ioctl(s.fd, SIOCETHTOOL, &ifr) == 0 ? g : nullptr;
  };
  std::vector<uint8_t> gbuf;
  auto* g = read(gbuf);
  if (!g) return fmt::format("{}: ETHTOOL_GFEATURES: {}", name, errstr(errno));
  auto active = [&](ethtool_gfeatures* gf, uint32_t i) {
    return (gf->features[i / 32].active >> (i % 32)) & 1;
  };
  std::vector<uint32_t> on;
  for (uint32_t i : wanted)
    if (active(g, i)) on.push_back(i);
  if (on.empty()) return std::nullopt;

  std::vector<uint8_t> sfb(sizeof(ethtool_sfeatures) + blocks * sizeof(ethtool_set_features_block),
                           0);
  auto* sf = reinterpret_cast<ethtool_sfeatures*>(sfb.data());
  sf->cmd = ETHTOOL_SFEATURES;
  sf->size = blocks;
  for (uint32_t i : on) sf->features[i / 32].valid |= 1u << (i % 32);
  ifr.ifr_data = reinterpret_cast<char*>(sf);
  int rc = ioctl(s.fd, SIOCETHTOOL, &ifr);
  int serr = errno;
  g = read(gbuf);
  std::string still;
  for (uint32_t i : on)
    if (!g || active(g, i))
      still += std::string(still.empty() ? "" : ", ") +
               std::string(reinterpret_cast<char*>(gs->data + i * ETH_GSTRING_LEN));
  if (still.empty()) {
    spdlog::info("{}: RX VLAN offload turned off so XDP sees both tags", name);
    return std::nullopt;
  }
  return fmt::format(
      "{}: RX VLAN offload ({}) is on and could not be turned off ({}): the "
      "driver may strip tags before XDP sees them and QinQ frames would be "
      "dropped as untagged/single-tagged; run `ethtool -K {} rxvlan off "
      "rx-vlan-stag-hw-parse off`",
      name, still, rc ? errstr(serr) : "setting ignored", name);
}

}  // namespace

int possible_cpus() {
  static int n = libbpf_num_possible_cpus();
  return n;
}

std::unique_ptr<Dataplane> Dataplane::start(const DataplaneOptions& opts) {
  std::unique_ptr<Dataplane> dp(new Dataplane());
  for (int& f : dp->fds_) f = -1;
  dp->opts_ = opts;
  ensure_bpffs(opts.bpffs);
  // Before anything under the pin directory is read or written: a second
  // agent stops here, having touched nothing.
  dp->lock_ = PinLock::acquire(opts.bpffs);
  refuse_other_abi(opts.bpffs);
  mkdirs(pin_root(opts.bpffs) + "/maps");
  mkdirs(pin_root(opts.bpffs) + "/links");

  // Resolve ports first: a typo fails before anything is loaded.
  std::set<std::string> seen;
  auto add_port = [&](const std::string& name, int role) {
    if (!seen.insert(name).second)
      throw DataplaneError(fmt::format("port {} is configured twice", name));
    int idx = ifindex_of(name);
    if (idx < 0) throw DataplaneError(fmt::format("port {}: no such network interface", name));
    PortInfo p;
    p.name = name;
    p.ifindex = static_cast<uint32_t>(idx);
    p.role = role;
    dp->ports_.push_back(p);
  };
  for (const auto& n : opts.access) add_port(n, XBNG_ROLE_ACCESS);
  for (const auto& n : opts.uplink) add_port(n, XBNG_ROLE_UPLINK);
  if (dp->ports_.size() > XBNG_MAX_PORTS)
    throw DataplaneError(
        fmt::format("{} ports configured, at most {}", dp->ports_.size(), XBNG_MAX_PORTS));

  // Router settings that can refuse the start do so before anything is
  // loaded or pinned: pools overlapping an uplink subnet, access MTUs the
  // driver will not raise.
  dp->check_pools();
  dp->ensure_access_mtu_or_throw();
  dp->check_attach();
  dp->open_and_load();
  dp->configure_ports();
  dp->configure_pools();
  dp->set_allow_to_host(opts.allow_to_host);
  // Before the programs are swapped in: they skip the /128 hash for a /64
  // whose line counts none, and the pinned lines of a build without the
  // counts hold none.
  dp->count_direct_v6();
  dp->attach_ports();
  // After the programs are swapped in: a previous build without the direct
  // array kept forwarding from the hash until then, and the host routes
  // that move into the array leave the hash only now.
  std::vector<Prefix> pools;
  for (const auto& p : dp->ports_) {
    if (p.role != XBNG_ROLE_ACCESS) continue;
    if (auto it = opts.access_overrides.find(p.name); it != opts.access_overrides.end())
      pools.insert(pools.end(), it->second.pools.begin(), it->second.pools.end());
  }
  dp->configure_direct(pools);
  dp->configure_direct_subs();
  return dp;
}

void Dataplane::apply_load_config(XbngSkelRefs* r) const {
  *r->events_per_sec = opts_.events_per_sec;
  *r->unknown_interval_ns = opts_.unknown_interval_ns;
  // ICMP error bucket: rate 0 leaves token_ns 0, which sends nothing.
  const uint64_t token_ns = opts_.icmp_rate_per_sec ? 1000000000ull / opts_.icmp_rate_per_sec : 0;
  *r->icmp_token_ns = token_ns;
  *r->icmp_burst_ns = token_ns * (opts_.icmp_burst ? opts_.icmp_burst : 1);
  // Punt (bring-up): on/off and the rate limits.
  *r->punt_enabled = opts_.punt_enabled ? 1 : 0;
  const uint64_t rate = std::max<uint32_t>(opts_.punt_sub_rate, 1);
  *r->punt_sub_interval_ns = 1000000000ull / rate;
  *r->punt_sub_tolerance_ns =
      (std::max<uint32_t>(opts_.punt_sub_burst, 1) - 1) * (1000000000ull / rate);
  *r->punt_port_per_sec = opts_.punt_port_rate;
  *r->punt_xsk = opts_.punt_xsk ? 1 : 0;
}

namespace {

// Makes `m` reuse the map pinned for `id`, after checking that it has this
// build's layout (a map sized by subscribers keeps its pinned size); false
// when none is pinned. Throws when the pinned one does not fit.
bool reuse_pinned(const DataplaneOptions& opts, MapId id, struct bpf_map* m,
                  std::vector<std::string>* warnings) {
  const std::string path = map_pin_path(opts.bpffs, id);
  if (access(path.c_str(), F_OK) != 0) return false;
  Fd pfd(bpf_obj_get(path.c_str()));
  if (pfd.fd < 0)
    throw DataplaneError(fmt::format("{}: cannot open the pinned object: {}", path, errstr(errno)));
  struct bpf_map_info info {};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(pfd.fd, &info, &len) != 0)
    throw DataplaneError(fmt::format("{}: not a BPF map ({})", path, errstr(errno)));
  const bool flags_ok = (info.map_flags & ~BPF_F_RDONLY_PROG) == bpf_map__map_flags(m);
  if (info.type != bpf_map__type(m) || info.key_size != bpf_map__key_size(m) ||
      info.value_size != bpf_map__value_size(m) || !flags_ok)
    throw DataplaneError(fmt::format(
        "{}: pinned map does not match this build (pinned: {} key {} value {} flags {:#x}; "
        "expected: {} key {} value {} flags {:#x}) although both claim ABI version {}. "
        "Nothing was changed: the attached programs keep forwarding with the pinned maps. "
        "No migration exists between these layouts: keep running the build that created "
        "them, or tear down with `xbngd --teardown --bpffs {}` (stops forwarding) and start "
        "this build afresh",
        path, map_type_name(info.type), info.key_size, info.value_size, info.map_flags,
        map_type_name(bpf_map__type(m)), bpf_map__key_size(m), bpf_map__value_size(m),
        bpf_map__map_flags(m), XBNG_ABI_VERSION, opts.bpffs));
  if (info.max_entries != bpf_map__max_entries(m)) {
    if (!map_sized_by_subscribers(id) && !map_sized_by_direct(id) && !map_sized_by_direct_subs(id))
      throw DataplaneError(
          fmt::format("{}: pinned map has {} entries, this build expects {}: tear down with `xbngd "
                      "--teardown --bpffs {}`",
                      path, info.max_entries, bpf_map__max_entries(m), opts.bpffs));
    if (id == MapId::kSubscribers) {
      auto w = fmt::format(
          "pinned maps hold up to {} subscribers; --max-subscribers {} "
          "ignored (resizing needs a teardown)",
          info.max_entries, opts.max_subscribers);
      spdlog::warn("{}", w);
      warnings->push_back(w);
    }
    if (map_sized_by_direct(id)) {
      auto w = fmt::format(
          "pinned map {} has {} slots; limits.{} {} ignored (resizing needs a teardown)",
          map_name(id), info.max_entries,
          id == MapId::kDirectV6 ? "direct_slots_v6" : "direct_slots", map_direct_slots(id, opts));
      spdlog::warn("{}", w);
      warnings->push_back(w);
    }
    if (map_sized_by_direct_subs(id)) {
      auto w = fmt::format(
          "pinned map {} has {} slots; limits.direct_subscriber_slots {} ignored (resizing "
          "needs a teardown)",
          map_name(id), info.max_entries, opts.direct_subscriber_slots);
      spdlog::warn("{}", w);
      warnings->push_back(w);
    }
    bpf_map__set_max_entries(m, info.max_entries);
  }
  if (int err = bpf_map__reuse_fd(m, pfd.fd); err)
    throw DataplaneError(fmt::format("{}: reusing the pinned map: {}", path, errstr(err)));
  return true;
}

}  // namespace

void Dataplane::open_and_load() {
  skel_ = std::make_unique<XbngSkelRefs>();
  if (!xbng_skel_open(skel_.get()))
    throw DataplaneError(fmt::format("opening the BPF skeleton: {}", errstr(errno)));
  apply_load_config(skel_.get());
  struct bpf_map* maps[kMapCount];
  for (int i = 0; i < kMapCount; ++i) {
    maps[i] = bpf_object__find_map_by_name(skel_->obj, map_name(static_cast<MapId>(i)));
    if (!maps[i])
      throw DataplaneError(
          fmt::format("the BPF object has no map {}", map_name(static_cast<MapId>(i))));
  }
  bool pinned[kMapCount] = {};
  int npinned = 0;
  for (int i = 0; i < kMapCount; ++i) {
    const MapId id = static_cast<MapId>(i);
    struct bpf_map* m = maps[i];
    if (map_sized_by_subscribers(id)) bpf_map__set_max_entries(m, opts_.max_subscribers);
    if (map_sized_by_direct(id))
      bpf_map__set_max_entries(m, std::max<uint32_t>(map_direct_slots(id, opts_), 1));
    if (map_sized_by_direct_subs(id))
      bpf_map__set_max_entries(m, std::max<uint32_t>(opts_.direct_subscriber_slots, 1));
    if (!reuse_pinned(opts_, id, m, &warnings_)) continue;
    pinned[i] = true;
    ++npinned;
  }
  adopted_ = pinned[static_cast<int>(MapId::kSubscribers)];

  // libxdp's dispatcher calls freplace programs, loaded against a
  // dispatcher (check_attach loaded it), dropped once the load is done.
  if (load_target_) libxdp_prepare_load(skel_.get(), *load_target_, opts_.xdp_priority);
  const int load_err = xbng_skel_load(skel_.get());
  load_target_.reset();
  if (int err = load_err; err)
    throw DataplaneError(
        fmt::format("loading the XDP programs failed: {} (run with "
                    "--log-level debug for the verifier log)",
                    errstr(err)));
  for (int i = 0; i < kMapCount; ++i) {
    const MapId id = static_cast<MapId>(i);
    if (!pinned[i]) {
      const std::string path = map_pin_path(opts_.bpffs, id);
      if (int err = bpf_map__pin(maps[i], path.c_str()); err)
        throw DataplaneError(fmt::format("pinning map at {}: {}", path, errstr(err)));
    }
    fds_[i] = dup(bpf_map__fd(maps[i]));
    max_entries_[i] = bpf_map__max_entries(maps[i]);
  }
  spdlog::info("BPF programs loaded; maps {} under {}/maps ({} of {} adopted)",
               npinned ? "adopted/pinned" : "pinned", pin_root(opts_.bpffs), npinned, kMapCount);
}

namespace {

// One line per port at start: its role and the settings XDP uses.
void log_port(const PortInfo& p) {
  const struct xbng_port& c = p.cfg;
  if (p.role == XBNG_ROLE_ACCESS)
    spdlog::info(
        "port {} (ifindex {}): access, mac {}, mtu {}, outer tpid {:#06x}, "
        "subscriber mtu {}, mss clamp {}, mac policy {}, unknown keys {}, gateway {} {}, slot {}",
        p.name, p.ifindex, format_mac(c.mac), c.mtu, c.outer_tpid, c.sub_mtu,
        c.flags & XBNG_PORT_F_MSS_CLAMP ? "on" : "off", mac_policy_name(c.mac_policy),
        c.flags & XBNG_PORT_F_PUNT_UNKNOWN ? "punted" : "dropped",
        c.gw_ipv4 ? format_ipv4(c.gw_ipv4) : "-",
        (c.gw_ipv6[0] | c.gw_ipv6[1] | c.gw_ipv6[2] | c.gw_ipv6[3]) == 0
            ? std::string("-")
            : format_ipv6(reinterpret_cast<const uint8_t*>(c.gw_ipv6)),
        c.slot);
  else
    spdlog::info("port {} (ifindex {}): uplink, mac {}, mtu {}, icmp source {} {}, slot {}", p.name,
                 p.ifindex, format_mac(c.mac), c.mtu, c.icmp_src4 ? format_ipv4(c.icmp_src4) : "-",
                 (c.icmp_src6[0] | c.icmp_src6[1] | c.icmp_src6[2] | c.icmp_src6[3]) == 0
                     ? std::string("-")
                     : format_ipv6(reinterpret_cast<const uint8_t*>(c.icmp_src6)),
                 c.slot);
}

}  // namespace

// Gives each port its stats slot: the one it had (port_stats is pinned, so
// slots stay stable across restarts), else the lowest free one. Ports no
// longer configured leave the ports and tx_ports maps.
void Dataplane::assign_port_slots() {
  std::map<uint32_t, uint32_t> old_slot;
  std::vector<uint32_t> stale;
  map_for_each(fd(MapId::kPorts), sizeof(uint32_t), sizeof(struct xbng_port),
               [&](const void* k, const void* v) {
                 uint32_t ifx;
                 std::memcpy(&ifx, k, 4);
                 struct xbng_port p;
                 std::memcpy(&p, v, sizeof p);
                 old_slot[ifx] = p.slot;
               });
  std::set<uint32_t> used;
  for (auto& p : ports_)
    if (auto it = old_slot.find(p.ifindex); it != old_slot.end()) {
      p.cfg.slot = it->second;
      used.insert(it->second);
    }
  uint32_t next = 0;
  for (auto& p : ports_) {
    if (old_slot.count(p.ifindex)) continue;
    while (used.count(next)) ++next;
    p.cfg.slot = next;
    used.insert(next);
  }
  for (const auto& [ifx, slot] : old_slot) {
    bool configured = false;
    for (const auto& p : ports_) configured |= p.ifindex == ifx;
    if (!configured) stale.push_back(ifx);
  }
  for (uint32_t ifx : stale) {
    // An entry already absent is fine; any other failure leaves a stale
    // entry behind: said, not hidden.
    for (MapId m : {MapId::kPorts, MapId::kTxPorts})
      if (bpf_map_delete_elem(fd(m), &ifx) != 0 && errno != ENOENT)
        spdlog::error("ifindex {} ({}): removing it from {}: {}", ifx, ifname_of(ifx), map_name(m),
                      errstr(errno));
    spdlog::warn("ifindex {} ({}) is no longer configured: removed from ports/tx_ports", ifx,
                 ifname_of(ifx));
  }
}

// The ports-map entry of one port: its netdev, the global settings and the
// port's own (access ports), or its ICMP source (uplinks).
void Dataplane::fill_port_config(PortInfo& p) {
  auto& c = p.cfg;
  c.ifindex = p.ifindex;
  c.role = static_cast<uint16_t>(p.role);
  c.outer_tpid = p.role == XBNG_ROLE_ACCESS ? opts_.outer_tpid : 0;
  if (opts_.ha && p.role == XBNG_ROLE_ACCESS && opts_.configure_netdevs)
    set_netdev_mac(p.name, opts_.ha_virtual_mac);
  netdev_info(p.name, c.mac, &c.mtu);
  if (p.role == XBNG_ROLE_ACCESS) {
    c.sub_mtu = XBNG_DEFAULT_SUBSCRIBER_MTU;
    c.flags = XBNG_PORT_F_MSS_CLAMP;
  }
  c.gw_ipv4 = opts_.gateway_ipv4;
  std::memcpy(c.gw_ipv6, opts_.gateway_ipv6.data(), 16);
  c.mac_policy = p.role == XBNG_ROLE_ACCESS ? opts_.mac_policy : 0;
  if (auto it = opts_.access_overrides.find(p.name);
      p.role == XBNG_ROLE_ACCESS && it != opts_.access_overrides.end()) {
    const AccessPortOverride& o = it->second;
    if (o.outer_tpid) c.outer_tpid = *o.outer_tpid;
    if (o.gateway_ipv4) c.gw_ipv4 = *o.gateway_ipv4;
    if (o.gateway_ipv6) std::memcpy(c.gw_ipv6, o.gateway_ipv6->data(), 16);
    if (o.sub_mtu) c.sub_mtu = o.sub_mtu;
    if (o.mac_policy) c.mac_policy = *o.mac_policy;
    if (!o.mss_clamp) c.flags &= static_cast<uint16_t>(~XBNG_PORT_F_MSS_CLAMP);
    if (o.punt_unknown) c.flags |= XBNG_PORT_F_PUNT_UNKNOWN;
    if (o.relay4) c.flags |= XBNG_PORT_F_RELAY4;
  }
  if (opts_.ha) {
    c.ha_deadline_ns = XBNG_HA_STANDBY;
    if (p.role == XBNG_ROLE_ACCESS) {
      std::memcpy(c.mac, opts_.ha_virtual_mac.data(), 6);
    } else {
      c.gw_ipv4 = opts_.ha_vip4;
      std::memcpy(c.gw_ipv6, opts_.ha_vip6.data(), 16);
    }
  }
  if (p.role == XBNG_ROLE_ACCESS) {
    // The netdev must carry subscriber_mtu plus both tags: drivers drop
    // larger frames on redirect, silently.
    // (raised to that before loading, see ensure_access_mtu_or_throw)
    c.mtu = static_cast<uint16_t>(c.sub_mtu + XBNG_QINQ_TAGS_BYTES);
  } else {
    configure_uplink_icmp_source(p.name, &c);
  }
}

bool Dataplane::set_ha_deadline(uint64_t ns) {
  bool ok = true;
  for (const auto& p : ports_) {
    struct xbng_port c = p.cfg;
    c.ha_deadline_ns = ns;
    if (bpf_map_update_elem(fd(MapId::kPorts), &p.ifindex, &c, BPF_EXIST) != 0) {
      spdlog::error("ha: {}: writing the deadline into map ports: {}", p.name, errstr(errno));
      ok = false;
    }
  }
  return ok;
}

void Dataplane::configure_ports() {
  assign_port_slots();
  for (auto& p : ports_) {
    fill_port_config(p);
    const auto& c = p.cfg;
    if (bpf_map_update_elem(fd(MapId::kPorts), &p.ifindex, &c, BPF_ANY) != 0)
      throw DataplaneError(fmt::format("{}: writing map ports: {}", p.name, errstr(errno)));
    if (bpf_map_update_elem(fd(MapId::kTxPorts), &p.ifindex, &p.ifindex, BPF_ANY) != 0)
      throw DataplaneError(fmt::format("{}: writing map tx_ports: {}", p.name, errstr(errno)));
    if (opts_.configure_netdevs) {
      // bpf_fib_lookup answers NOT_FWDED unless forwarding is on for the
      // ingress device (per network namespace).
      write_sysctl(fmt::format("/proc/sys/net/ipv4/conf/{}/forwarding", p.name), "1");
      write_sysctl(fmt::format("/proc/sys/net/ipv6/conf/{}/forwarding", p.name), "1");
      if (p.role == XBNG_ROLE_ACCESS)
        if (auto w = disable_rx_vlan_offload(p.name)) {
          spdlog::warn("{}", *w);
          warnings_.push_back(*w);
        }
    }
    log_port(p);
  }
}

uint16_t Dataplane::subscriber_mtu(const std::string& port) const {
  auto it = opts_.access_overrides.find(port);
  return it != opts_.access_overrides.end() && it->second.sub_mtu ? it->second.sub_mtu
                                                                  : XBNG_DEFAULT_SUBSCRIBER_MTU;
}

absl::Status Dataplane::ensure_access_mtu() {
  if (!opts_.configure_netdevs) return absl::OkStatus();
  std::string errors;
  for (const auto& p : ports_) {
    if (p.role != XBNG_ROLE_ACCESS) continue;
    const uint16_t sub = subscriber_mtu(p.name);
    try {
      ensure_mtu(p.name, sub + XBNG_QINQ_TAGS_BYTES,
                 fmt::format("subscriber_mtu {} + {} bytes of tags", sub, XBNG_QINQ_TAGS_BYTES));
    } catch (const std::runtime_error& e) {
      errors += std::string(errors.empty() ? "" : "; ") + e.what();
    }
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(errors);
}

void Dataplane::ensure_access_mtu_or_throw() {
  if (auto st = ensure_access_mtu(); !st.ok())
    throw DataplaneError(std::string(status_message(st)));
}

void Dataplane::check_pools() const {
  for (const auto& u : ports_) {
    if (u.role != XBNG_ROLE_UPLINK) continue;
    const auto addrs = interface_addresses(u.name);
    for (const auto& [port, o] : opts_.access_overrides)
      for (const auto& pool : o.pools)
        if (auto e = pool_overlap(pool, u.name, addrs))
          throw DataplaneError(fmt::format("port {}: {}", port, *e));
  }
}

void Dataplane::configure_uplink_icmp_source(const std::string& name, struct xbng_port* c) {
  const auto addrs = interface_addresses(name);
  UplinkPortOverride o;
  if (auto it = opts_.uplink_overrides.find(name); it != opts_.uplink_overrides.end())
    o = it->second;
  if (o.icmp_source_ipv4) {
    c->icmp_src4 = *o.icmp_source_ipv4;
  } else if (auto a = first_global(addrs, 4)) {
    std::memcpy(&c->icmp_src4, a->addr.data(), 4);
  } else {
    auto w = fmt::format(
        "uplink {}: no IPv4 address and no icmp_source_ipv4: no ICMPv4 error "
        "goes to the network (time exceeded, fragmentation needed, "
        "unreachable)",
        name);
    spdlog::warn("{}", w);
    warnings_.push_back(w);
  }
  if (o.icmp_source_ipv6) {
    std::memcpy(c->icmp_src6, o.icmp_source_ipv6->data(), 16);
  } else if (auto a = first_global(addrs, 6)) {
    std::memcpy(c->icmp_src6, a->addr.data(), 16);
  } else {
    auto w = fmt::format(
        "uplink {}: no global IPv6 address and no icmp_source_ipv6: no ICMPv6 "
        "error goes to the network (time exceeded, packet too big, "
        "unreachable)",
        name);
    spdlog::warn("{}", w);
    warnings_.push_back(w);
  }
}

// The pools of every access port (checked by check_pools), written whole:
// the tries are emptied first, a restart may drop pools.
void Dataplane::configure_pools() {
  struct Entry {
    Prefix pool;
    uint32_t ifindex;
  };
  std::vector<Entry> entries;
  for (const auto& p : ports_) {
    if (p.role != XBNG_ROLE_ACCESS) continue;
    auto it = opts_.access_overrides.find(p.name);
    if (it == opts_.access_overrides.end()) continue;
    for (const auto& pool : it->second.pools) entries.push_back({pool, p.ifindex});
  }
  for (MapId id : {MapId::kPoolsV4, MapId::kPoolsV6}) {
    const size_t ks = id == MapId::kPoolsV4 ? sizeof(xbng_lpm_v4_key) : sizeof(xbng_lpm_v6_key);
    std::vector<uint8_t> key(ks);
    while (bpf_map_get_next_key(fd(id), nullptr, key.data()) == 0)
      if (bpf_map_delete_elem(fd(id), key.data()) != 0)
        throw DataplaneError(fmt::format("clearing map {}: {}", map_name(id), errstr(errno)));
  }
  for (const auto& e : entries) {
    struct xbng_pool v {};
    v.ifindex = e.ifindex;
    int rc;
    if (e.pool.family == 4) {
      struct xbng_lpm_v4_key k {};
      k.prefixlen = e.pool.len;
      std::memcpy(&k.addr, e.pool.addr.data(), 4);
      rc = bpf_map_update_elem(fd(MapId::kPoolsV4), &k, &v, BPF_ANY);
    } else {
      struct xbng_lpm_v6_key k {};
      k.prefixlen = e.pool.len;
      std::memcpy(k.addr, e.pool.addr.data(), 16);
      rc = bpf_map_update_elem(fd(MapId::kPoolsV6), &k, &v, BPF_ANY);
    }
    if (rc != 0)
      throw DataplaneError(
          fmt::format("writing pool {}: {}", format_prefix(e.pool), errstr(errno)));
    spdlog::info("port {}: subscriber pool {}", ifname_of(e.ifindex), format_prefix(e.pool));
  }
}

// Lays the pools out in the direct arrays (as many as fit, in order, each
// family in its own array) and writes the tables. When a family's pinned
// table differs (pools or the array's size changed since the last start)
// its host routes move first (direct_relayout): packets see the hash copy
// or the array copy, never neither; counter increments on a copy between
// the two copies are lost. Runs once the new programs are attached (a
// program of a build without the array reads only the hash).
void Dataplane::configure_direct(const std::vector<Prefix>& pools) {
  std::vector<std::string> skipped;
  const uint32_t slots = opts_.direct_slots ? max_entries(MapId::kDirectV4) : 0;
  const uint32_t slots_v6 = opts_.direct_slots_v6 ? max_entries(MapId::kDirectV6) : 0;
  DirectLayout want = DirectLayout::plan(pools, slots, slots_v6, &skipped);
  for (const auto& p : skipped) {
    const bool v6 = p.find(':') != std::string::npos;
    auto w = fmt::format(
        "pool {}: not in the direct array ({} {} full, or {} pools already): its {} stay on the "
        "hash path",
        p, v6 ? "limits.direct_slots_v6" : "limits.direct_slots", v6 ? slots_v6 : slots,
        XBNG_DIRECT_POOLS, v6 ? "IPv6 /64 or /128 routes" : "IPv4 host routes");
    spdlog::warn("{}", w);
    warnings_.push_back(w);
  }
  DirectLayout have;
  if (int rc = direct_read_layout(fd(MapId::kDirectPools), fd(MapId::kDirectPoolsV6), &have))
    throw DataplaneError(fmt::format("reading the direct tables: {}", errstr(rc)));
  direct_ = want;
  for (const auto& p : want.v4)
    spdlog::info("direct routes: pool {}.{}.{}.{}/{} at slots {}..{}", p.start >> 24,
                 (p.start >> 16) & 255, (p.start >> 8) & 255, p.start & 255,
                 32 - std::countr_zero(p.size), p.base, p.base + p.size - 1);
  for (const auto& p : want.v6)
    spdlog::info("direct routes: pool {} (its /{}s) at slots {}..{} of direct_v6",
                 format_prefix(DirectLayout::prefix_of(p)), p.unit, p.base, p.base + p.size - 1);
  for (int f : {4, 6}) {
    if (have.family(f) == want.family(f)) continue;
    auto [out, in] = direct_relayout(f, have, want, [this](MapId m) { return fd(m); });
    spdlog::info(
        "direct routes: IPv{} layout changed; {} host routes moved out of the array, {} into it", f,
        out, in);
  }
}

// The /128 counts of the pinned layout's pools of /64s, exact (a previous
// run may have stopped between a count and its /128, or not kept them).
void Dataplane::count_direct_v6() {
  DirectLayout have;
  if (int rc = direct_read_layout(fd(MapId::kDirectPools), fd(MapId::kDirectPoolsV6), &have))
    throw DataplaneError(fmt::format("reading the direct tables: {}", errstr(rc)));
  if (!have.has(DirectUnit::kV6_64)) return;
  DirectLines lines;
  if (int rc = lines.map(fd(MapId::kDirectV6), true))
    throw DataplaneError(fmt::format("mapping map direct_v6: {}", errstr(rc)));
  const size_t n = direct_count_v6(fd(MapId::kRoutesV6), lines, have);
  spdlog::info("direct routes: {} /128s inside the delegated /64s of direct_v6 counted", n);
}

// Refuses, before anything is loaded, a port whose XDP hook the configured
// attach cannot share (xdp_dispatch.h).
void Dataplane::check_attach() {
  if (opts_.xdp_libxdp) {
    libxdp_check_host();
    load_target_ = libxdp_load_target();
  }
  for (const auto& p : ports_) {
    if (opts_.xdp_libxdp)
      libxdp_check_port(opts_.bpffs, p, opts_.xdp_generic);
    else if (access(dispatch_prog_pin_path(opts_.bpffs, p.name).c_str(), F_OK) == 0)
      libxdp_check_port_for_link(opts_.bpffs, p);
  }
}

void Dataplane::attach_ports() {
  std::set<std::string> configured;
  for (const auto& p : ports_) {
    configured.insert(p.name);
    struct bpf_program* prog = p.role == XBNG_ROLE_ACCESS ? skel_->xdp_access : skel_->xdp_uplink;
    if (opts_.xdp_libxdp)
      libxdp_attach_port(opts_.bpffs, p, bpf_program__fd(prog), opts_.xdp_priority,
                         opts_.xdp_generic);
    else
      attach_port_link(p, bpf_program__fd(prog));
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(pin_root(opts_.bpffs) + "/links", ec)) {
    const std::string name = e.path().filename();
    if (configured.count(name)) continue;
    Fd lfd(bpf_obj_get(e.path().c_str()));
    if (lfd.fd >= 0) bpf_link_detach(lfd.fd);
    unlink(e.path().c_str());
    spdlog::warn("port {} is no longer configured: its XDP link was detached and unpinned", name);
  }
  for (const auto& e : fs::directory_iterator(pin_root(opts_.bpffs) + "/progs", ec)) {
    const std::string name = e.path().filename();
    if (configured.count(name)) continue;
    if (auto err = libxdp_detach_pinned(e.path(), name); !err.empty())
      spdlog::error("port {} is no longer configured: {}", name, err);
    else
      spdlog::warn("port {} is no longer configured: xbng's program left its dispatcher", name);
  }
}

// xbng's own bpf_link on the port: the new program swapped into the pinned
// link (no detach), or a new link created and pinned.
void Dataplane::attach_port_link(const PortInfo& p, int prog_fd) {
  const char* prog_name = p.role == XBNG_ROLE_ACCESS ? "xdp_access" : "xdp_uplink";
  const std::string progs = dispatch_prog_pin_path(opts_.bpffs, p.name);
  if (access(progs.c_str(), F_OK) == 0) {
    // check_attach made sure no program of others is in the dispatcher.
    spdlog::warn(
        "port {}: switching from ports.xdp_attach = \"libxdp\" to \"link\": xbng's program "
        "leaves libxdp's dispatcher and its own link is attached (frames in between reach the "
        "kernel unprocessed)",
        p.name);
    if (auto err = libxdp_detach_pinned(progs, p.name); !err.empty())
      throw DataplaneError(fmt::format("port {}: {}", p.name, err));
  }
  const std::string path = link_pin_path(opts_.bpffs, p.name);
  Fd lfd(bpf_obj_get(path.c_str()));
  if (lfd.fd >= 0) {
    struct bpf_link_info info {};
    uint32_t len = sizeof info;
    bool same_dev = bpf_obj_get_info_by_fd(lfd.fd, &info, &len) == 0 &&
                    info.type == BPF_LINK_TYPE_XDP && info.xdp.ifindex == p.ifindex;
    if (same_dev && bpf_link_update(lfd.fd, prog_fd, nullptr) == 0) {
      spdlog::info("port {}: new {} program swapped into the pinned XDP link (no detach)", p.name,
                   prog_name);
      return;
    }
    spdlog::warn("port {}: pinned XDP link at {} is stale ({}): replacing it", p.name, path,
                 same_dev ? errstr(errno) : "interface recreated or link detached");
    unlink(path.c_str());
  }
  LIBBPF_OPTS(bpf_link_create_opts, lo);
  lo.flags = opts_.xdp_generic ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
  Fd nfd(bpf_link_create(prog_fd, static_cast<int>(p.ifindex), BPF_XDP, &lo));
  if (nfd.fd < 0) {
    int e = errno;
    throw DataplaneError(fmt::format(
        "port {}: attaching {} XDP failed: {}{}", p.name, opts_.xdp_generic ? "generic" : "native",
        errstr(e),
        e == EBUSY || e == EEXIST
            ? " (another XDP program is attached: `ip link set dev IF xdp off`, or run beside it "
              "with ports.xdp_attach = \"libxdp\" when it was attached through libxdp)"
        : (!opts_.xdp_generic && (e == EOPNOTSUPP || e == EINVAL))
            ? " (the driver lacks native XDP: use --xdp-generic)"
            : ""));
  }
  if (bpf_obj_pin(nfd.fd, path.c_str()) != 0)
    throw DataplaneError(
        fmt::format("port {}: pinning the XDP link at {}: {}", p.name, path, errstr(errno)));
  spdlog::info("port {}: {} attached ({} XDP), link pinned at {}", p.name, prog_name,
               opts_.xdp_generic ? "generic" : "native", path);
}

void Dataplane::set_allow_to_host(const std::vector<LocalService>& services) {
  try {
    write_local_services(fd(MapId::kLocalAllow), services);
  } catch (const std::runtime_error& e) {
    throw DataplaneError(e.what());
  }
  std::string list;
  for (const auto& s : services) list += (list.empty() ? "" : ", ") + format_local_service(s);
  spdlog::info("subscribers may reach the host's own addresses on: {}",
               list.empty() ? "nothing (every frame for the host is dropped: drop_to_host)" : list);
}

Dataplane::~Dataplane() {
  for (int f : fds_)
    if (f >= 0) close(f);
  if (skel_) xbng_skel_destroy(skel_.get());  // programs live on in the pinned links
}

PortResolver Dataplane::resolver() const {
  PortResolver r;
  r.access_ifindex = [this](std::string_view name) -> std::optional<uint32_t> {
    for (const auto& p : ports_)
      if (p.role == XBNG_ROLE_ACCESS && p.name == name) return p.ifindex;
    return std::nullopt;
  };
  r.name = [this](uint32_t ifx) -> std::string {
    for (const auto& p : ports_)
      if (p.ifindex == ifx) return p.name;
    return ifname_of(ifx);
  };
  r.default_policy = [this](uint32_t ifx) -> PolicySpec {
    for (const auto& p : ports_)
      if (p.ifindex == ifx) {
        auto it = opts_.access_overrides.find(p.name);
        return it == opts_.access_overrides.end() ? PolicySpec{} : it->second.default_policy;
      }
    return PolicySpec{};
  };
  r.max_packet = [this](uint32_t ifx) -> uint32_t {
    for (const auto& p : ports_)
      if (p.ifindex == ifx && p.cfg.mtu) return p.cfg.mtu;
    return kDefaultMaxPacket;
  };
  return r;
}

namespace {

void teardown_failed(Dataplane::TeardownReport* r, const std::string& what, int err) {
  r->errors.push_back(fmt::format("{}: {}", what, errstr(err)));
}

// The entries of `dir` (none when it does not exist); every entry is
// looked at, every failure reported.
void list_entries(const fs::path& dir, std::vector<fs::path>* out, Dataplane::TeardownReport* r) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) {
    if (ec.value() != ENOENT) teardown_failed(r, dir.string(), ec.value());
    return;
  }
  for (; it != end; it.increment(ec)) {
    if (ec) {
      teardown_failed(r, dir.string(), ec.value());
      return;
    }
    out->push_back(it->path());
  }
}

// Detaches and unpins the links of one version's directory `v`, unpins
// its maps and removes its directories.
void teardown_version(const fs::path& v, Dataplane::TeardownReport* r) {
  std::vector<fs::path> links, maps;
  list_entries(v / "links", &links, r);
  for (const auto& l : links) {
    Fd lfd(bpf_obj_get(l.c_str()));
    if (lfd.fd < 0) {
      teardown_failed(r, fmt::format("{}: opening the pinned link", l.string()), errno);
      continue;
    }
    if (bpf_link_detach(lfd.fd) != 0 && errno != ENOLINK) {
      teardown_failed(r, fmt::format("{}: detach", l.string()), errno);
      continue;
    }
    if (unlink(l.c_str()) != 0)
      teardown_failed(r, fmt::format("{}: unpin", l.string()), errno);
    else
      r->removed.push_back(fmt::format("detached and unpinned {}", l.string()));
  }
  std::vector<fs::path> progs;
  list_entries(v / "progs", &progs, r);
  for (const auto& d : progs) {
    if (auto err = libxdp_detach_pinned(d, d.filename()); !err.empty())
      r->errors.push_back(err);
    else
      r->removed.push_back(
          fmt::format("took xbng's program out of the libxdp dispatcher of {} and unpinned {}",
                      d.filename().string(), d.string()));
  }
  list_entries(v / "maps", &maps, r);
  for (const auto& m : maps) {
    if (unlink(m.c_str()) != 0)
      teardown_failed(r, fmt::format("{}: unpin", m.string()), errno);
    else
      r->removed.push_back(fmt::format("unpinned {}", m.string()));
  }
  for (const fs::path& d : {v / "links", v / "progs", v / "maps", v})
    if (rmdir(d.c_str()) != 0 && errno != ENOENT)
      teardown_failed(r, fmt::format("{}: rmdir", d.string()), errno);
}

}  // namespace

Dataplane::TeardownReport Dataplane::teardown(const std::string& bpffs) {
  TeardownReport r;
  struct stat st {};
  if (lstat(bpffs.c_str(), &st) != 0) {
    if (errno == ENOENT)
      r.nothing_to_remove = true;
    else
      teardown_failed(&r, bpffs, errno);
    return r;
  }
  if (!S_ISDIR(st.st_mode)) {
    r.errors.push_back(fmt::format("{}: not a directory", bpffs));
    return r;
  }
  PinLock lock;
  try {
    lock = PinLock::acquire(bpffs);
  } catch (const DataplaneError& e) {
    const auto pid = pin_lock_holder(bpffs);
    r.errors.push_back(pid ? fmt::format("xbngd (PID {}) is running on {}: stop it before the "
                                         "teardown; nothing was removed",
                                         *pid, bpffs)
                           : std::string(e.what()));
    return r;
  }
  std::vector<fs::path> versions;
  list_entries(bpffs, &versions, &r);
  for (const auto& v : versions) {
    const std::string vname = v.filename();
    if (vname.size() < 2 || vname[0] != 'v' ||
        vname.find_first_not_of("0123456789", 1) != std::string::npos)
      continue;
    teardown_version(v, &r);
  }
  if (rmdir(bpffs.c_str()) != 0) teardown_failed(&r, fmt::format("{}: rmdir", bpffs), errno);
  r.nothing_to_remove = r.removed.empty() && r.errors.empty();
  return r;
}

}  // namespace xbng::agent
