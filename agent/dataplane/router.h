// What xbngd does to the system for router correctness (ICMP errors, MTU, MSS, pools), apart
// from the BPF maps: the uplinks' own addresses (the default ICMP error
// source, the subnets a pool may not overlap) and the access netdevs' MTU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/net.h"

namespace xbng::agent {

// The addresses configured on an interface, in the kernel's order (the
// primary IPv4 address first), as prefixes with their subnet length.
std::vector<Prefix> interface_addresses(const std::string& ifname);

// The first global (not link-local, loopback nor multicast) address of a
// family (4 or 6) among `addrs`.
std::optional<Prefix> first_global(const std::vector<Prefix>& addrs, int family);

// A pool that overlaps one of the uplinks' subnets: "pool P overlaps
// uplink U's subnet S". Empty when none does.
std::optional<std::string> pool_overlap(const Prefix& pool, const std::string& uplink,
                                        const std::vector<Prefix>& uplink_addrs);

// Raises `ifname`'s MTU to at least `need`. Returns the MTU before (== after
// when nothing was raised). Throws std::runtime_error naming the port and
// the MTU when the driver refuses.
int ensure_mtu(const std::string& ifname, int need, const std::string& why);

}  // namespace xbng::agent
