// Addresses that are never a subscriber's. A subscriber
// address or prefix that equals, covers or lies inside one of them is
// refused (FAILED_PRECONDITION naming the conflict):
//   - the IPv4/IPv6 gateway of every access port;
//   - every address of every xbng port, and the connected subnets of the
//     uplinks (their broadcast address and the next hops inside them);
//   - the operator's `[security] reserved` ranges.
// Port addresses come from netlink: ReservedWatcher follows RTM_NEWADDR /
// RTM_DELADDR and calls back with a fresh set, so that subscribers that
// conflict with a newly added address are reported at once (a periodic scan
// would cost a pass over every subscriber each period and still report late).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/dataplane.h"
#include "common/net.h"

namespace xbng::agent {

class ReservedSet {
 public:
  struct Entry {
    Prefix prefix;
    std::string what;  // "the address of uplink upl0", "reserved range (security.reserved)"
  };
  void add(const Prefix& p, std::string what);
  // The first entry overlapping `p` (equal, covering or covered), or null.
  const Entry* find(const Prefix& p) const;
  size_t size() const { return entries_.size(); }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  struct Span {
    unsigned __int128 lo, hi;
    uint8_t family;
  };
  std::vector<Entry> entries_;
  std::vector<Span> spans_;
};

// One address of an interface, from netlink.
struct IfAddress {
  uint32_t ifindex = 0;
  Prefix addr;  // the address with the interface prefix length
};
// Every global/site address of the given interfaces (RTM_GETADDR dump).
// Throws std::runtime_error.
std::vector<IfAddress> read_if_addresses();

// The set for these ports, gateways and operator ranges.
ReservedSet build_reserved(const std::vector<PortInfo>& ports,
                           const std::vector<std::string>& operator_ranges,
                           const std::vector<IfAddress>& addrs);

// Follows address changes (netlink RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR)
// and calls on_change() from its own thread after each burst of changes.
class AddressWatcher {
 public:
  explicit AddressWatcher(std::function<void()> on_change);  // throws std::runtime_error
  ~AddressWatcher();

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::function<void()> on_change_;
  std::thread thread_;
};

}  // namespace xbng::agent
