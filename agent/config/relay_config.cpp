#include "config/relay_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "store/subscriber.h"

namespace xbng::agent {

namespace {

using Errors = std::vector<std::string>;

// Each relay port: a [relay] section with servers, and the punt path.
void check_relay_ports(const RelayConfig& r, const std::vector<std::string>& relay_ports, bool punt,
                       Errors* errors, Errors* warnings) {
  auto err = [&](std::string s) { errors->push_back(std::move(s)); };
  for (const auto& p : relay_ports) {
    if (!r.present)
      err(fmt::format("ports.access {} dhcp relay: needs a [relay] section (its servers)", p));
    else if (r.servers_v4.empty() && r.servers_v6.empty())
      err(fmt::format(
          "ports.access {} dhcp relay: relay.servers_v4 and relay.servers_v6 are both empty", p));
    else if (r.servers_v4.empty())
      warnings->push_back(fmt::format(
          "ports.access {} dhcp relay: relays DHCPv6 only (relay.servers_v4 is empty): its "
          "DHCPv4 is answered by xbngd's own server, for provisioned subscribers",
          p));
    else if (r.servers_v6.empty())
      warnings->push_back(fmt::format(
          "ports.access {} dhcp relay: relays DHCPv4 only (relay.servers_v6 is empty): its "
          "DHCPv6 is answered by xbngd's own server, for provisioned subscribers",
          p));
    if (!punt)
      err(fmt::format("ports.access {} dhcp relay: needs the punt path (punt.enabled = true)", p));
  }
}

void check_servers_v4(const RelayConfig& r, Errors* errors) {
  auto err = [&](std::string s) { errors->push_back(std::move(s)); };
  if (r.servers_v4.size() > relay::kMaxServers)
    err(fmt::format("relay.servers_v4: {} servers, at most {}", r.servers_v4.size(),
                    relay::kMaxServers));
  std::set<uint32_t> seen4;
  for (const auto& s : r.servers_v4) {
    auto a = parse_ipv4(s);
    if (!a)
      err(fmt::format("relay.servers_v4 {}: not an IPv4 address", quote_value(s)));
    else if (absl::Status st = check_ipv4_host(*a); !st.ok())
      err(fmt::format("relay.servers_v4 {}: {}", s, std::string(st.message())));
    else if (!seen4.insert(*a).second)
      err(fmt::format("relay.servers_v4 {}: listed twice", s));
  }
}

// Global unicast servers, or one DHCP multicast group alone.
void check_servers_v6(const RelayConfig& r, Errors* errors, Errors* warnings) {
  auto err = [&](std::string s) { errors->push_back(std::move(s)); };
  std::set<std::string> seen6;
  for (const auto& s : r.servers_v6) {
    auto a = parse_ipv6(s);
    if (!a)
      err(fmt::format("relay.servers_v6 {}: not an IPv6 address", quote_value(s)));
    else if (relay::is_dhcp_group(*a) && r.servers_v6.size() > 1)
      err(
          fmt::format("relay.servers_v6 {}: a multicast group must be the only entry (the "
                      "servers listening there get each Relay-Forward once)",
                      s));
    else if (relay::is_dhcp_group(*a))
      warnings->push_back(
          fmt::format("relay.servers_v6 {}: Relay-Forwards multicast out of {}; a "
                      "Relay-Reply from any host on that uplink is accepted",
                      s,
                      r.multicast_uplink.empty() ? std::string("the first uplink")
                                                 : "relay.multicast_uplink " + r.multicast_uplink));
    else if ((*a)[0] == 0xff)
      err(
          fmt::format("relay.servers_v6 {}: the multicast groups are ff05::1:3 "
                      "(All_DHCP_Servers) and ff02::1:2 (All_DHCP_Relay_Agents_and_Servers)",
                      s));
    else if (((*a)[0] == 0xfe && ((*a)[1] & 0xc0) == 0x80) || *a == Ipv6{})
      err(fmt::format("relay.servers_v6 {}: not a global unicast address or a DHCP multicast group",
                      s));
    else if (!seen6.insert(format_ipv6(a->data())).second)
      err(fmt::format("relay.servers_v6 {}: listed twice", s));
  }
  if (r.servers_v6.size() > relay::kMaxServers6)
    err(fmt::format("relay.servers_v6: {} servers, at most {}", r.servers_v6.size(),
                    relay::kMaxServers6));
}

}  // namespace

void check_relay_config(const RelayConfig& r, const std::vector<std::string>& relay_ports,
                        const std::vector<std::string>& uplinks, bool punt,
                        std::vector<std::string>* errors, std::vector<std::string>* warnings) {
  auto err = [&](std::string s) { errors->push_back(std::move(s)); };
  check_relay_ports(r, relay_ports, punt, errors, warnings);
  if (!r.present) return;
  if (relay_ports.empty())
    warnings->push_back("relay: no access port has dhcp = \"relay\": the section is not used");
  check_servers_v4(r, errors);
  check_servers_v6(r, errors, warnings);
  if (!r.multicast_uplink.empty()) {
    const bool group = r.servers_v6.size() == 1 && parse_ipv6(r.servers_v6[0]) &&
                       relay::is_dhcp_group(*parse_ipv6(r.servers_v6[0]));
    if (std::find(uplinks.begin(), uplinks.end(), r.multicast_uplink) == uplinks.end())
      err(fmt::format("relay.multicast_uplink {}: not an uplink port (ports.uplink: {})",
                      quote_value(r.multicast_uplink), fmt::join(uplinks, ", ")));
    else if (!group)
      warnings->push_back(fmt::format(
          "relay.multicast_uplink {}: not used (relay.servers_v6 is not a multicast group)",
          r.multicast_uplink));
  }
  if (!r.relay_address_v4.empty()) {
    auto a = parse_ipv4(r.relay_address_v4);
    if (!a)
      err(fmt::format("relay.relay_address_v4 {}: not an IPv4 address",
                      quote_value(r.relay_address_v4)));
    else if (absl::Status st = check_ipv4_host(*a); !st.ok())
      err(fmt::format("relay.relay_address_v4 {}: {}", r.relay_address_v4,
                      std::string(st.message())));
  }
  if (auto e = relay::check_template(r.circuit_id, true))
    err(fmt::format("relay.circuit_id {}: {}", quote_value(r.circuit_id), *e));
  if (auto e = relay::check_template(r.remote_id, false))
    err(fmt::format("relay.remote_id {}: {}", quote_value(r.remote_id), *e));
  // IANA's enterprise number 0 is reserved; the option carries 32 bits.
  if (r.remote_id_enterprise == 0 || r.remote_id_enterprise > UINT32_MAX)
    err(fmt::format("relay.remote_id_enterprise {}: expected an IANA enterprise number, 1 to {}",
                    r.remote_id_enterprise, UINT32_MAX));
  if (!relay::parse_policy(r.option82_policy))
    err(fmt::format("relay.option82_policy {}: expected \"keep\", \"replace\" or \"drop\"",
                    quote_value(r.option82_policy)));
}

relay::Relay4Options to_relay4_options(const RelayConfig& r) {
  relay::Relay4Options o;
  for (const auto& s : r.servers_v4)
    if (auto a = parse_ipv4(s)) o.servers.push_back(*a);
  if (!r.relay_address_v4.empty()) o.relay_address = parse_ipv4(r.relay_address_v4).value_or(0);
  o.circuit_id = r.circuit_id;
  o.remote_id = r.remote_id;
  o.policy = relay::parse_policy(r.option82_policy).value_or(relay::Policy::kReplace);
  return o;
}

relay::Relay6Options to_relay6_options(const RelayConfig& r) {
  relay::Relay6Options o;
  for (const auto& s : r.servers_v6)
    if (auto a = parse_ipv6(s)) o.servers.push_back(*a);
  o.circuit_id = r.circuit_id;
  o.remote_id = r.remote_id;
  o.enterprise = static_cast<uint32_t>(r.remote_id_enterprise);
  o.uplink = r.multicast_uplink;
  return o;
}

}  // namespace xbng::agent
