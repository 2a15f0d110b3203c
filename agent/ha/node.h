// What a role change does to this node (HaActions): the data plane's
// deadline, the uplink VIPs (kernel addresses, added on takeover, removed
// when standby), and the announcements of a new active: a gratuitous ARP
// for the IPv4 gateway and an unsolicited NA for the IPv6 gateway and
// fe80::1 on every subscriber's VLAN pair, paced, from the virtual MAC; and
// a gratuitous ARP / unsolicited NA for the VIPs upstream.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "bringup/punt/io.h"
#include "dataplane/dataplane.h"
#include "ha/ha.h"

namespace xbng::agent {

// Frames a takeover sends per second at most (access and uplink together):
// 1M subscribers x 3 frames take 60 s, spread evenly, instead of a burst
// the access switches would drop.
inline constexpr uint32_t kHaAnnounceRate = 50000;

struct HaAnnounceStats {
  uint64_t frames = 0, failed = 0, vlans = 0;
  double seconds = 0;
};

class HaNode final : public HaActions {
 public:
  // Opens the packet sockets of every port. Throws std::runtime_error.
  HaNode(Dataplane* dp, const HaOptions& o);
  ~HaNode() override;
  void set_deadline(uint64_t ns) override;
  void became_active(const std::string& cause) override;
  void became_standby(const std::string& cause) override;
  // Every port the programs are attached to must be up with a carrier
  // (IFF_UP and IFF_RUNNING): an access or uplink cable pulled, a switch
  // port down, a netdev removed.
  std::string ports_down() override;
  HaAnnounceStats last_announce() const;
  // Acting active: the agent's own frames on the access side (unsolicited
  // RAs) are sent only then.
  bool active() const { return active_.load(); }

 private:
  void announce(uint64_t generation);
  void set_vips(bool present);
  void join();

  Dataplane* dp_;
  HaOptions o_;
  int ctl_fd_ = -1;      // ioctl socket for ports_down() (the HA thread's only)
  uint32_t uplink_ = 0;  // ifindex of the uplink carrying the VIPs (0: none)
  std::unique_ptr<punt::PuntTx> tx_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> active_{false};
  std::thread announcer_;
  mutable std::mutex mu_;
  HaAnnounceStats last_;
};

}  // namespace xbng::agent
