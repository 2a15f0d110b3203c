#include "ha/node.h"

#include <bpf/bpf.h>
#include <linux/if_addr.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "bringup/punt/frame.h"
#include "xbng/abi.h"

namespace xbng::agent {

namespace {

const Mac kBroadcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
const Mac kAllNodesMac{0x33, 0x33, 0x00, 0x00, 0x00, 0x01};
const Ipv6 kAllNodes{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
const Ipv6 kFe80_1{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

// An unsolicited NA (RFC 4861 7.2.6) for `target` from `mac`: router and
// override flags, the target link-layer address option.
std::vector<uint8_t> unsolicited_na(const punt::L2& l2, const Ipv6& target, const Mac& mac,
                                    bool router) {
  std::vector<uint8_t> body(32, 0);
  body[0] = 136;
  body[4] = static_cast<uint8_t>((router ? 0x80 : 0) | 0x20);
  std::memcpy(&body[8], target.data(), 16);
  body[24] = 2;  // target link-layer address
  body[25] = 1;
  std::memcpy(&body[26], mac.data(), 6);
  return punt::build_icmp6(l2, target, kAllNodes, body, 255);
}

// RTM_NEWADDR / RTM_DELADDR of one address. Returns 0 or -errno.
int change_address(int type, uint32_t ifindex, const InterfaceAddress& a) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return -errno;
  struct {
    nlmsghdr h;
    ifaddrmsg ifa;
    char attrs[64];
  } rq{};
  const int alen = a.family == 4 ? 4 : 16;
  rq.h.nlmsg_type = static_cast<uint16_t>(type);
  rq.h.nlmsg_flags =
      NLM_F_REQUEST | NLM_F_ACK | (type == RTM_NEWADDR ? NLM_F_CREATE | NLM_F_REPLACE : 0);
  rq.ifa.ifa_family = a.family == 4 ? AF_INET : AF_INET6;
  rq.ifa.ifa_prefixlen = a.len;
  rq.ifa.ifa_index = ifindex;
  rq.ifa.ifa_flags =
      a.family == 6 ? IFA_F_NODAD : 0;  // usable at once: the VIP moves, it is not new
  size_t len = NLMSG_LENGTH(sizeof(ifaddrmsg));
  for (int t : {IFA_LOCAL, IFA_ADDRESS}) {
    auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&rq) + NLMSG_ALIGN(len));
    rta->rta_type = static_cast<unsigned short>(t);
    rta->rta_len = static_cast<unsigned short>(RTA_LENGTH(alen));
    std::memcpy(RTA_DATA(rta), a.addr.data(), alen);
    len = NLMSG_ALIGN(len) + RTA_ALIGN(rta->rta_len);
  }
  rq.h.nlmsg_len = static_cast<uint32_t>(len);
  int rc = 0;
  if (send(fd, &rq, len, 0) < 0) {
    rc = -errno;
  } else {
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      rc = -errno;
    } else {
      auto* h = reinterpret_cast<nlmsghdr*>(buf);
      if (NLMSG_OK(h, static_cast<uint32_t>(n)) && h->nlmsg_type == NLMSG_ERROR)
        rc = reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
    }
  }
  close(fd);
  return rc;
}

}  // namespace

HaNode::HaNode(Dataplane* dp, const HaOptions& o) : dp_(dp), o_(o) {
  std::vector<uint32_t> ifx;
  for (const auto& p : dp_->ports()) {
    ifx.push_back(p.ifindex);
    if (p.role == XBNG_ROLE_UPLINK && !uplink_) uplink_ = p.ifindex;
  }
  tx_ = std::make_unique<punt::PuntTx>(ifx);
}

HaNode::~HaNode() {
  ++generation_;
  join();
  if (ctl_fd_ >= 0) close(ctl_fd_);
}

void HaNode::join() {
  if (announcer_.joinable()) announcer_.join();
}

void HaNode::set_deadline(uint64_t ns) {
  if (ns == XBNG_HA_STANDBY) active_ = false;
  dp_->set_ha_deadline(ns);
}

std::string HaNode::ports_down() {
  // A socket of this process's network namespace, where the ports are.
  if (ctl_fd_ < 0) ctl_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (ctl_fd_ < 0) return {};  // cannot tell: do not claim a port is down
  std::string down;
  for (const auto& p : dp_->ports()) {
    ifreq ifr{};
    // By index: a renamed netdev is still the port the programs are on.
    ifr.ifr_ifindex = static_cast<int>(p.ifindex);
    const char* what = nullptr;
    if (ioctl(ctl_fd_, SIOCGIFNAME, &ifr) < 0) {
      what = "is gone";
    } else if (ioctl(ctl_fd_, SIOCGIFFLAGS, &ifr) < 0) {
      continue;
    } else if (!(ifr.ifr_flags & IFF_UP)) {
      what = "is down";
    } else if (!(ifr.ifr_flags & IFF_RUNNING)) {
      what = "has no carrier";
    }
    if (!what) continue;
    if (!down.empty()) down += ", ";
    down += fmt::format("{} {} {}", p.role == XBNG_ROLE_UPLINK ? "uplink" : "access", p.name, what);
  }
  return down;
}

void HaNode::set_vips(bool present) {
  if (!uplink_) return;
  for (const auto* a : {o_.vip4 ? &*o_.vip4 : nullptr, o_.vip6 ? &*o_.vip6 : nullptr}) {
    if (!a) continue;
    int rc = change_address(present ? RTM_NEWADDR : RTM_DELADDR, uplink_, *a);
    if (rc == -EADDRNOTAVAIL && !present) continue;  // not there: nothing to remove
    if (rc)
      spdlog::error("ha: {} uplink VIP {}: {}", present ? "adding" : "removing",
                    format_interface_address(*a), std::strerror(-rc));
    else
      spdlog::info("ha: uplink VIP {} {}", format_interface_address(*a),
                   present ? "added" : "removed");
  }
}

void HaNode::became_active(const std::string&) {
  const uint64_t gen = ++generation_;
  join();
  active_ = true;
  set_vips(true);
  announcer_ = std::thread([this, gen] { announce(gen); });
}

void HaNode::became_standby(const std::string&) {
  active_ = false;
  ++generation_;
  join();
  set_vips(false);
}

HaAnnounceStats HaNode::last_announce() const {
  std::lock_guard l(mu_);
  return last_;
}

namespace {

// Every subscriber VLAN pair, from the pinned maps: the hash's keys, then
// those of the direct array's present slots.
std::vector<struct xbng_sub_key> subscriber_keys(const Dataplane& dp) {
  std::vector<struct xbng_sub_key> keys;
  map_for_each(dp.fd(MapId::kSubscribers), sizeof(struct xbng_sub_key),
               sizeof(struct xbng_subscriber), [&](const void* k, const void*) {
                 struct xbng_sub_key key;
                 std::memcpy(&key, k, sizeof key);
                 keys.push_back(key);
               });
  direct_sub_for_each(
      dp.fd(MapId::kDirectSubs), dp.direct_subs(),
      [&](const struct xbng_sub_key& k, const struct xbng_subscriber&) { keys.push_back(k); });
  return keys;
}

}  // namespace

void HaNode::announce(uint64_t gen) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  HaAnnounceStats st;
  const auto interval = std::chrono::nanoseconds(1000000000ull / kHaAnnounceRate);
  auto next = start;
  auto send = [&](uint32_t ifx, const std::vector<uint8_t>& f) {
    if (generation_ != gen) return false;
    std::this_thread::sleep_until(next);
    next += interval;
    if (tx_->send(ifx, f))
      ++st.frames;
    else
      ++st.failed;
    return true;
  };
  // Upstream first: the return path of every subscriber.
  if (uplink_) {
    Mac up_mac{};
    for (const auto& p : dp_->ports())
      if (p.ifindex == uplink_) std::memcpy(up_mac.data(), p.cfg.mac, 6);
    punt::L2 l2;
    l2.outer_tpid = 0;
    l2.src = up_mac;
    if (o_.vip4) {
      uint32_t a;
      std::memcpy(&a, o_.vip4->addr.data(), 4);
      l2.dst = kBroadcast;
      send(uplink_, punt::build_arp(l2, 1, up_mac, a, Mac{}, a));
    }
    if (o_.vip6) {
      l2.dst = kAllNodesMac;
      Ipv6 t;
      std::memcpy(t.data(), o_.vip6->addr.data(), 16);
      send(uplink_, unsolicited_na(l2, t, up_mac, false));
    }
  }
  // Every subscriber VLAN pair, from the pinned maps.
  const std::vector<struct xbng_sub_key> keys = subscriber_keys(*dp_);
  std::map<uint32_t, const PortInfo*> ports;
  for (const auto& p : dp_->ports()) ports[p.ifindex] = &p;
  for (const auto& k : keys) {
    auto it = ports.find(k.ifindex);
    if (it == ports.end() || it->second->role != XBNG_ROLE_ACCESS) continue;
    const struct xbng_port& c = it->second->cfg;
    punt::L2 l2;
    l2.src = o_.virtual_mac;
    l2.outer_tpid = c.outer_tpid;
    l2.outer_vid = k.outer_vid;
    l2.inner_vid = k.inner_vid;
    ++st.vlans;
    if (c.gw_ipv4) {
      l2.dst = kBroadcast;
      if (!send(k.ifindex, punt::build_arp(l2, 1, o_.virtual_mac, c.gw_ipv4, Mac{}, c.gw_ipv4)))
        break;
    }
    l2.dst = kAllNodesMac;
    Ipv6 gw6;
    std::memcpy(gw6.data(), c.gw_ipv6, 16);
    bool has6 = false;
    for (uint8_t b : gw6) has6 |= b != 0;
    if (has6 && !send(k.ifindex, unsolicited_na(l2, gw6, o_.virtual_mac, true))) break;
    if (!send(k.ifindex, unsolicited_na(l2, kFe80_1, o_.virtual_mac, true))) break;
  }
  st.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  spdlog::info(
      "ha: takeover announced: {} frame(s) on {} subscriber VLAN pair(s) and the uplink in "
      "{:.3f} s ({} failed){}",
      st.frames, st.vlans, st.seconds, st.failed,
      generation_ != gen ? "; cut short: the role changed" : "");
  std::lock_guard l(mu_);
  last_ = st;
}

}  // namespace xbng::agent
