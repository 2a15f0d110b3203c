// Dispatcher: routes each punted frame to its protocol server with the
// subscriber's binding (from the store's index, never from the BPF map) and
// sends the reply as a whole QinQ frame on the access port: the
// subscriber's tags, the port's outer TPID and MAC, dst MAC = the
// subscriber's. Lease changes go to the LeaseTable. It also owns the
// unsolicited-RA schedule (RaScheduler, a timing wheel over every IPv6
// subscriber) and the thread that sends what comes due.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bringup/dhcpv4/server.h"
#include "bringup/dhcpv6/server.h"
#include "bringup/lease/lease.h"
#include "common/net.h"
#include "bringup/punt/frame.h"
#include "bringup/punt/io.h"
#include "bringup/ra/ra.h"
#include "bringup/ra/scheduler.h"
#include "common/thread_priority.h"
#include "store/store.h"

namespace xbng::agent::punt {

// One access port as the protocol servers see it.
struct PortBringup {
  uint32_t ifindex = 0;
  Mac mac{};
  uint16_t outer_tpid = 0x88a8;
  dhcpv4::Settings dhcpv4;
  dhcpv6::Settings dhcpv6;
  ra::Settings ra;
  // Subscribers created on demand (auth = "radius"): frames of unknown keys
  // go to the unknown-key handler instead of being dropped.
  bool auth = false;
  // dhcp = "relay": every DHCPv4 frame (provisioned key or not) goes to the
  // relay handler (after RADIUS, for an unknown key of an auth port).
  bool relay4 = false;
  // The same for DHCPv6 (a relay port when relay.servers_v6 is set).
  bool relay6 = false;
};

struct BringupOptions {
  bool enabled = true;  // false: no punt, no servers (frames dropped as before)
  bool af_xdp = false;  // [punt] transport = "af_xdp": the RX of xsk.h besides the ring's
  bool dhcpv4 = true, dhcpv6 = true, ra = true;
  // DHCPv4 defaults (gateway = the port's) and per access port overrides.
  dhcpv4::Settings dhcpv4_defaults;
  std::map<std::string, dhcpv4::Settings> dhcpv4_ports;  // complete settings by port name
  dhcpv6::Settings dhcpv6_settings;  // server_duid filled at start from duid_file
  std::string duid_file;
  ra::Settings ra_settings;
  bool ra_slaac = false;                     // PIO (A=1) with the subscriber's first /64 prefix
  uint64_t ra_unsolicited_interval_s = 600;  // every IPv6 subscriber hears one per interval
  uint32_t ra_slots = 3000;                  // ticks per interval
  uint32_t max_subscribers = XBNG_DEFAULT_MAX_SUBSCRIBERS;
  std::string lease_file;  // "" = leases not persisted
  // Access ports whose unknown keys are authorized on demand (auth = "radius").
  std::set<std::string> auth_ports;
  // Access ports whose DHCPv4 is relayed (dhcp = "relay").
  std::set<std::string> relay4_ports;
  // Access ports whose DHCPv6 is relayed (dhcp = "relay" and relay.servers_v6).
  std::set<std::string> relay6_ports;
  // SCHED_FIFO priority of the punt RX thread and the relays' socket
  // threads (punt.realtime_priority); 0: the default policy.
  int realtime_priority = 0;
  // Whether the operator set it: a kernel refusal then stops xbngd. The
  // automatic setting of a relaying host is refused with a warning and
  // the threads stay at the default policy.
  bool realtime_required = false;
};

class Dispatcher {
 public:
  using Clock = std::function<uint64_t()>;  // unix seconds
  Dispatcher(SubscriberStore* store, LeaseTable* leases, std::vector<PortBringup> ports,
             BringupOptions opts, Sender send, Clock clock = nullptr);
  ~Dispatcher();

  // RX thread entry point.
  void handle(const PuntedFrame& f);

  // Unsolicited RAs: seeds the schedule with every provisioned IPv6
  // subscriber and starts the thread that sends what comes due.
  void start_ra();
  void stop_ra();
  // Sends the RAs due at now_ns (CLOCK_MONOTONIC); returns how many (tests).
  size_t ra_tick(uint64_t now_ns);
  size_t ra_scheduled() const;

  const PortBringup* port(uint32_t ifindex) const;

  // Receives the punted frames of unprovisioned keys on `auth` ports (the
  // RADIUS session flow). Set before the RX thread starts.
  using UnknownHandler = std::function<void(const PuntedFrame&)>;
  void set_unknown_handler(UnknownHandler h) { unknown_ = std::move(h); }
  // Receives the DHCPv4 frames of relay4 ports. Set before the RX thread starts.
  using RelayHandler = std::function<void(const SubKey&, const FrameView&)>;
  void set_relay4_handler(RelayHandler h) { relay4_ = std::move(h); }
  // Receives the DHCPv6 frames of relay6 ports. Set before the RX thread starts.
  void set_relay6_handler(RelayHandler h) { relay6_ = std::move(h); }
  // Unsolicited RAs for k from now on (a subscriber the DHCPv6 relay bound).
  void schedule_ra(const SubKey& key);

 private:
  void on_dhcpv4(const FrameView& v, const PortBringup& port, const SubKey& key,
                 const SubscriberSpec& spec, const std::optional<Mac>& learned);
  void on_dhcpv6(const FrameView& v, const PortBringup& port, const SubKey& key,
                 const SubscriberSpec& spec);
  void on_rs(const FrameView& v, const PortBringup& port, const SubKey& key,
             const SubscriberSpec& spec);
  bool send_ra(const PortBringup& port, const SubKey& key, const SubscriberSpec& spec,
               const Mac& dst_mac, const Ipv6& dst);
  void confirm(const SubKey& key, LeaseFamily f);
  L2 l2_to(const PortBringup& port, const SubKey& key, const Mac& dst) const;

  SubscriberStore* store_;
  LeaseTable* leases_;
  std::map<uint32_t, PortBringup> ports_;
  BringupOptions opts_;
  Sender send_;
  Clock clock_;
  UnknownHandler unknown_;
  RelayHandler relay4_;
  RelayHandler relay6_;

  // The scheduler has one owner at a time: xbng-ra (the default policy) or
  // a thread that may run at real-time priority (the DHCPv6 relay's, after
  // each reply): priority inheritance.
  mutable PiMutex ra_mu_;
  std::unique_ptr<ra::RaScheduler> ra_sched_;
  std::atomic<bool> ra_stop_{false};
  std::mutex ra_wait_mu_;
  std::condition_variable ra_cv_;
  std::thread ra_thread_;
};

}  // namespace xbng::agent::punt
