// The [relay] section of the config file and the per access port `dhcp`:
//   [relay]
//   servers_v4 = ["192.0.2.67", "192.0.2.68"]   # every message goes to each
//   servers_v6 = ["2001:db8:ffff::547"]         # or one group: ["ff05::1:3"] / ["ff02::1:2"]
//   relay_address_v4 = "192.0.2.1"   # giaddr; default: the uplink's first global address
//   circuit_id = "{port}:{svlan}:{cvlan}"   # option 82 sub-option 1 (and the reply's key)
//   remote_id = "{mac}"                     # option 82 sub-option 2
//   remote_id_enterprise = 32473            # DHCPv6 Remote-ID's enterprise number
//   option82_policy = "replace"             # keep | replace | drop (a client's own option 82)
//   multicast_uplink = "upl1"   # servers_v6 a group: out of this uplink (default: the first)
//   [ports]
//   access = [{ name = "eth1", dhcp = "relay" }]   # "server" (default) or "relay"
// docs/relay.md describes the relay.
#pragma once

#include <string>
#include <vector>

#include "relay/relay4.h"
#include "relay/relay6.h"

namespace xbng::agent {

struct RelayConfig {
  bool present = false;  // the file has a [relay] section
  std::vector<std::string> servers_v4, servers_v6;
  std::string relay_address_v4;  // "" = the uplink's first global IPv4 address
  std::string circuit_id = relay::kDefaultCircuitId;
  std::string remote_id = relay::kDefaultRemoteId;
  uint64_t remote_id_enterprise = relay::kDefaultRemoteIdEnterprise;  // 1 .. 2^32-1
  std::string option82_policy = "replace";
  // servers_v6 a multicast group: the uplink the Relay-Forwards leave by and
  // the Relay-Replies arrive on; "" = the first of ports.uplink.
  std::string multicast_uplink;
  friend bool operator==(const RelayConfig&, const RelayConfig&) = default;
};

// Every problem of the section, for the access ports in relay_ports (those
// with dhcp = "relay") and the uplink ports `uplinks`; `punt` = punt.enabled.
void check_relay_config(const RelayConfig& r, const std::vector<std::string>& relay_ports,
                        const std::vector<std::string>& uplinks, bool punt,
                        std::vector<std::string>* errors, std::vector<std::string>* warnings);

// The relay's options (servers, templates, policy); relay_address is left
// 0 when relay_address_v4 is "" (the agent takes the uplink's). The config
// must have passed check_relay_config.
relay::Relay4Options to_relay4_options(const RelayConfig& r);

// The DHCPv6 relay's options (servers_v6, Interface-ID = the circuit_id
// template, Remote-ID = the remote_id template after remote_id_enterprise). Only used when
// servers_v6 is not empty; the config must have passed check_relay_config.
relay::Relay6Options to_relay6_options(const RelayConfig& r);

}  // namespace xbng::agent
