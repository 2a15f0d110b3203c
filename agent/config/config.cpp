#include "config/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <toml++/toml.h>

#include "dataplane/host_services.h"
#include "dataplane/mac_policy.h"
#include "common/direct_sub.h"
#include "common/net.h"
#include "config/radius_config_toml.h"
#include "store/subscriber.h"

namespace xbng::agent {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& key, const std::string& why) {
  throw std::runtime_error(fmt::format("config {}: {}: {}", path, key, why));
}

std::string get_string(const std::string& path, const std::string& key, const toml::node& n) {
  if (auto v = n.value<std::string>()) return *v;
  fail(path, key, "expected a string");
}
bool get_bool(const std::string& path, const std::string& key, const toml::node& n) {
  if (auto v = n.value<bool>()) return *v;
  fail(path, key, "expected true or false");
}
uint64_t get_uint(const std::string& path, const std::string& key, const toml::node& n) {
  if (n.is_integer())
    if (auto v = n.value<int64_t>(); v && *v >= 0) return static_cast<uint64_t>(*v);
  fail(path, key, "expected a non-negative integer");
}
// punt.realtime_priority: 0..99, or "auto" (unset: chosen from the ports).
std::optional<uint64_t> get_priority(const std::string& path, const std::string& key,
                                     const toml::node& n) {
  if (auto v = n.value<std::string>()) {
    if (*v == "auto") return std::nullopt;
    fail(path, key, fmt::format("\"{}\": expected \"auto\" or an integer 0..99", *v));
  }
  return get_uint(path, key, n);
}
// A TPID may be written "0x88a8" or 0x88a8 (a TOML hex integer).
std::string get_tpid(const std::string& path, const std::string& key, const toml::node& n) {
  if (n.is_integer()) return fmt::format("{:#x}", *n.value<int64_t>());
  if (auto v = n.value<std::string>()) return *v;
  fail(path, key, "expected a TPID such as \"0x88a8\"");
}
std::vector<std::string> get_strings(const std::string& path, const std::string& key,
                                     const toml::node& n) {
  std::vector<std::string> out;
  if (auto s = n.value<std::string>()) return {*s};
  const toml::array* a = n.as_array();
  if (!a) fail(path, key, "expected an array of strings");
  for (const auto& e : *a) out.push_back(get_string(path, key, e));
  return out;
}

// A port's default rate plan, { up_rate_bps, up_burst_bytes,
// down_rate_bps, down_burst_bytes } (omitted keys are 0).
PolicySpec get_policy(const std::string& path, const std::string& where, const toml::node& n) {
  const toml::table* t = n.as_table();
  if (!t)
    fail(path, where,
         "expected a table { up_rate_bps, up_burst_bytes, down_rate_bps, "
         "down_burst_bytes }");
  PolicySpec p;
  for (const auto& [k, v] : *t) {
    const std::string key = where + "." + std::string(k.str());
    if (k == "up_rate_bps")
      p.up_rate = get_uint(path, key, v);
    else if (k == "up_burst_bytes")
      p.up_burst = get_uint(path, key, v);
    else if (k == "down_rate_bps")
      p.down_rate = get_uint(path, key, v);
    else if (k == "down_burst_bytes")
      p.down_burst = get_uint(path, key, v);
    else
      fail(path, key,
           "unknown key (a policy has up_rate_bps, up_burst_bytes, down_rate_bps, "
           "down_burst_bytes)");
  }
  return p;
}

// ports.access: names, or tables { name, outer_tpid, mtu, gateway_ipv4,
// gateway_ipv6 } (inline or [[ports.access]]), mixed freely.
void get_access(const std::string& path, const toml::node& n, Config* cfg) {
  cfg->access.clear();
  cfg->access_options.clear();
  if (auto s = n.value<std::string>()) {
    cfg->access.push_back(*s);
    return;
  }
  const toml::array* a = n.as_array();
  if (!a) fail(path, "ports.access", "expected an array of port names or port tables");
  size_t i = 0;
  for (const auto& e : *a) {
    const std::string where = fmt::format("ports.access[{}]", i++);
    if (e.is_string()) {
      cfg->access.push_back(*e.value<std::string>());
      continue;
    }
    const toml::table* t = e.as_table();
    if (!t) fail(path, where, "expected a port name or a table with `name`");
    const toml::node* name = t->get("name");
    if (!name) fail(path, where, "a port table needs `name`");
    const std::string port = get_string(path, where + ".name", *name);
    AccessPortConfig o;
    for (const auto& [k, v] : *t) {
      const std::string key = where + "." + std::string(k.str());
      if (k == "name") continue;
      if (k == "outer_tpid")
        o.outer_tpid = get_tpid(path, key, v);
      else if (k == "mtu")
        o.mtu = get_uint(path, key, v);
      else if (k == "gateway_ipv4")
        o.gateway_ipv4 = get_string(path, key, v);
      else if (k == "gateway_ipv6")
        o.gateway_ipv6 = get_string(path, key, v);
      else if (k == "subscriber_mtu")
        o.subscriber_mtu = get_uint(path, key, v);
      else if (k == "mss_clamp")
        o.mss_clamp = get_bool(path, key, v);
      else if (k == "pools")
        o.pools = get_strings(path, key, v);
      else if (k == "direct_svlans")
        o.direct_svlans = get_strings(path, key, v);
      else if (k == "policy")
        o.policy = get_policy(path, key, v);
      else if (k == "mac_policy")
        o.mac_policy = get_string(path, key, v);
      else if (k == "dhcp_lease_time")
        o.dhcp_lease_time = get_uint(path, key, v);
      else if (k == "dhcp_dns")
        o.dhcp_dns = get_strings(path, key, v);
      else if (k == "dhcp_subnet_mask")
        o.dhcp_subnet_mask = get_string(path, key, v);
      else if (k == "auth")
        o.auth = get_string(path, key, v);
      else if (k == "dhcp")
        o.dhcp = get_string(path, key, v);
      else
        fail(path, key,
             "unknown key (a port table has name, outer_tpid, subscriber_mtu, "
             "mss_clamp, pools, direct_svlans, gateway_ipv4, gateway_ipv6, mtu, policy, "
             "mac_policy, dhcp_lease_time, dhcp_dns, dhcp_subnet_mask, auth, dhcp)");
    }
    cfg->access.push_back(port);
    if (!cfg->access_options.emplace(port, o).second)
      fail(path, where, fmt::format("port {} has two tables", port));
  }
}

// ports.uplink: names, or tables { name, icmp_source_ipv4, icmp_source_ipv6 }.
void get_uplink(const std::string& path, const toml::node& n, Config* cfg) {
  cfg->uplink.clear();
  cfg->uplink_options.clear();
  if (auto s = n.value<std::string>()) {
    cfg->uplink.push_back(*s);
    return;
  }
  const toml::array* a = n.as_array();
  if (!a) fail(path, "ports.uplink", "expected an array of port names or port tables");
  size_t i = 0;
  for (const auto& e : *a) {
    const std::string where = fmt::format("ports.uplink[{}]", i++);
    if (e.is_string()) {
      cfg->uplink.push_back(*e.value<std::string>());
      continue;
    }
    const toml::table* t = e.as_table();
    if (!t) fail(path, where, "expected a port name or a table with `name`");
    const toml::node* name = t->get("name");
    if (!name) fail(path, where, "a port table needs `name`");
    const std::string port = get_string(path, where + ".name", *name);
    UplinkPortConfig o;
    for (const auto& [k, v] : *t) {
      const std::string key = where + "." + std::string(k.str());
      if (k == "name") continue;
      if (k == "icmp_source_ipv4")
        o.icmp_source_ipv4 = get_string(path, key, v);
      else if (k == "icmp_source_ipv6")
        o.icmp_source_ipv6 = get_string(path, key, v);
      else
        fail(path, key,
             "unknown key (an uplink table has name, icmp_source_ipv4, "
             "icmp_source_ipv6)");
    }
    cfg->uplink.push_back(port);
    if (!cfg->uplink_options.emplace(port, o).second)
      fail(path, where, fmt::format("port {} has two tables", port));
  }
}

// Keys that moved, so that an old file gets a pointer instead of a bare
// "unknown key".
const char* moved_to(const std::string& key) {
  if (key == "bpf.max_subscribers") return "limits.max_subscribers";
  if (key == "bpf.events_per_sec") return "limits.events_per_sec";
  if (key == "bpf.unknown_interval_ms") return "limits.unknown_event_interval_ms";
  return nullptr;
}

bool valid_ifname(const std::string& n) {
  // The kernel's dev_valid_name().
  if (n.empty() || n.size() >= 16 || n == "." || n == "..") return false;
  for (char c : n)
    if (c == '/' || c == ':' || std::isspace(static_cast<unsigned char>(c))) return false;
  return true;
}

bool is_loopback_host(const std::string& h) {
  return h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0;
}

std::optional<std::string> unreadable(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::string(std::strerror(errno));
  return std::nullopt;
}

std::string join(const std::vector<std::string>& v) {
  return fmt::format("[{}]", fmt::join(v, ","));
}

// "255.255.255.0" -> 24; nullopt when not a contiguous mask.
std::optional<uint8_t> mask_len(const std::string& m) {
  auto a = parse_ipv4(m);
  if (!a) return std::nullopt;
  const uint32_t h = __builtin_bswap32(*a), inv = ~h;
  if (h == 0 || (inv & (inv + 1)) != 0) return std::nullopt;  // 1s then 0s only
  return static_cast<uint8_t>(__builtin_popcount(h));
}

// Reads one TOML value into a Config field with its getter.
template <auto Field, auto Get>
void set(const std::string& path, const std::string& key, const toml::node& v, Config* cfg) {
  cfg->*Field = Get(path, key, v);
}
template <auto Field, auto Get>
void set_relay(const std::string& path, const std::string& key, const toml::node& v, Config* cfg) {
  cfg->relay.*Field = Get(path, key, v);
}
void set_access(const std::string& path, const std::string&, const toml::node& v, Config* cfg) {
  get_access(path, v, cfg);
}
void set_uplink(const std::string& path, const std::string&, const toml::node& v, Config* cfg) {
  get_uplink(path, v, cfg);
}

// Every key of the file ("section.name") and what reads it.
struct FileKey {
  const char* key;
  void (*set)(const std::string& path, const std::string& key, const toml::node& v, Config* cfg);
};
const FileKey kFileKeys[] = {
    {"ports.access", &set_access},
    {"ports.uplink", &set_uplink},
    {"icmp.rate_per_sec", &set<&Config::icmp_rate_per_sec, get_uint>},
    {"icmp.burst", &set<&Config::icmp_burst, get_uint>},
    {"ports.outer_tpid", &set<&Config::outer_tpid, get_tpid>},
    {"ports.xdp_generic", &set<&Config::xdp_generic, get_bool>},
    {"ports.xdp_attach", &set<&Config::xdp_attach, get_string>},
    {"ports.xdp_priority", &set<&Config::xdp_priority, get_uint>},
    {"gateway.ipv4", &set<&Config::gateway_ipv4, get_string>},
    {"gateway.ipv6", &set<&Config::gateway_ipv6, get_string>},
    {"grpc.listen", &set<&Config::grpc, get_string>},
    {"grpc.tls_cert", &set<&Config::tls_cert, get_string>},
    {"grpc.tls_key", &set<&Config::tls_key, get_string>},
    {"grpc.tls_client_ca", &set<&Config::tls_client_ca, get_string>},
    {"grpc.insecure_tcp", &set<&Config::insecure_tcp, get_bool>},
    {"metrics.listen", &set<&Config::metrics_listen, get_string>},
    {"bpf.bpffs", &set<&Config::bpffs, get_string>},
    {"limits.max_subscribers", &set<&Config::max_subscribers, get_uint>},
    {"limits.direct_slots", &set<&Config::direct_slots, get_uint>},
    {"limits.direct_slots_v6", &set<&Config::direct_slots_v6, get_uint>},
    {"limits.direct_subscriber_slots", &set<&Config::direct_subscriber_slots, get_uint>},
    {"limits.events_per_sec", &set<&Config::events_per_sec, get_uint>},
    {"limits.unknown_event_interval_ms", &set<&Config::unknown_interval_ms, get_uint>},
    {"log.level", &set<&Config::log_level, get_string>},
    {"etcd.endpoints", &set<&Config::etcd_endpoints, get_strings>},
    {"etcd.node", &set<&Config::etcd_node, get_string>},
    {"etcd.ca", &set<&Config::etcd_ca, get_string>},
    {"etcd.cert", &set<&Config::etcd_cert, get_string>},
    {"etcd.key", &set<&Config::etcd_key, get_string>},
    {"etcd.username", &set<&Config::etcd_username, get_string>},
    {"etcd.password", &set<&Config::etcd_password, get_string>},
    {"etcd.password_file", &set<&Config::etcd_password_file, get_string>},
    {"etcd.status_ttl", &set<&Config::etcd_status_ttl, get_uint>},
    {"etcd.full_read_readers", &set<&Config::etcd_full_read_readers, get_uint>},
    {"grpc.tls_no_client_auth", &set<&Config::tls_no_client_auth, get_bool>},
    {"api.max_connections", &set<&Config::api_max_connections, get_uint>},
    {"api.max_request_bytes", &set<&Config::api_max_request_bytes, get_uint>},
    {"api.max_watchers", &set<&Config::api_max_watchers, get_uint>},
    {"api.watcher_queue", &set<&Config::api_watcher_queue, get_uint>},
    {"security.mac_policy", &set<&Config::mac_policy, get_string>},
    {"security.allow_to_host", &set<&Config::allow_to_host, get_strings>},
    {"security.reserved", &set<&Config::reserved, get_strings>},
    {"punt.enabled", &set<&Config::punt_enabled, get_bool>},
    {"punt.subscriber_rate", &set<&Config::punt_subscriber_rate, get_uint>},
    {"punt.subscriber_burst", &set<&Config::punt_subscriber_burst, get_uint>},
    {"punt.port_rate", &set<&Config::punt_port_rate, get_uint>},
    {"punt.transport", &set<&Config::punt_transport, get_string>},
    {"punt.realtime_priority", &set<&Config::punt_realtime_priority, get_priority>},
    {"dhcp.enabled", &set<&Config::dhcp_enabled, get_bool>},
    {"dhcp.lease_time", &set<&Config::dhcp_lease_time, get_uint>},
    {"dhcp.dns", &set<&Config::dhcp_dns, get_strings>},
    {"dhcp.subnet_mask", &set<&Config::dhcp_subnet_mask, get_string>},
    {"dhcp.lease_file", &set<&Config::lease_file, get_string>},
    {"dhcpv6.enabled", &set<&Config::dhcpv6_enabled, get_bool>},
    {"dhcpv6.preferred_lifetime", &set<&Config::dhcpv6_preferred, get_uint>},
    {"dhcpv6.valid_lifetime", &set<&Config::dhcpv6_valid, get_uint>},
    {"dhcpv6.t1", &set<&Config::dhcpv6_t1, get_uint>},
    {"dhcpv6.t2", &set<&Config::dhcpv6_t2, get_uint>},
    {"dhcpv6.dns", &set<&Config::dhcpv6_dns, get_strings>},
    {"dhcpv6.rapid_commit", &set<&Config::dhcpv6_rapid_commit, get_bool>},
    {"dhcpv6.duid_file", &set<&Config::duid_file, get_string>},
    {"ra.enabled", &set<&Config::ra_enabled, get_bool>},
    {"ra.managed", &set<&Config::ra_managed, get_bool>},
    {"ra.other", &set<&Config::ra_other, get_bool>},
    {"ra.router_lifetime", &set<&Config::ra_router_lifetime, get_uint>},
    {"ra.mtu", &set<&Config::ra_mtu, get_uint>},
    {"ra.dns", &set<&Config::ra_dns, get_strings>},
    {"ra.dns_lifetime", &set<&Config::ra_dns_lifetime, get_uint>},
    {"ra.slaac", &set<&Config::ra_slaac, get_bool>},
    {"ra.unsolicited_interval", &set<&Config::ra_unsolicited_interval, get_uint>},
    {"relay.servers_v4", &set_relay<&RelayConfig::servers_v4, get_strings>},
    {"relay.servers_v6", &set_relay<&RelayConfig::servers_v6, get_strings>},
    {"relay.relay_address_v4", &set_relay<&RelayConfig::relay_address_v4, get_string>},
    {"relay.circuit_id", &set_relay<&RelayConfig::circuit_id, get_string>},
    {"relay.remote_id", &set_relay<&RelayConfig::remote_id, get_string>},
    {"relay.remote_id_enterprise", &set_relay<&RelayConfig::remote_id_enterprise, get_uint>},
    {"relay.option82_policy", &set_relay<&RelayConfig::option82_policy, get_string>},
    {"relay.multicast_uplink", &set_relay<&RelayConfig::multicast_uplink, get_string>},
    {"ha.group", &set<&Config::ha_group, get_string>},
    {"ha.member", &set<&Config::ha_member, get_string>},
    {"ha.priority", &set<&Config::ha_priority, get_uint>},
    {"ha.preempt", &set<&Config::ha_preempt, get_bool>},
    {"ha.lease_ttl_s", &set<&Config::ha_lease_ttl_s, get_uint>},
    {"ha.virtual_mac", &set<&Config::ha_virtual_mac, get_string>},
    {"ha.uplink_vip_v4", &set<&Config::ha_uplink_vip_v4, get_string>},
    {"ha.uplink_vip_v6", &set<&Config::ha_uplink_vip_v6, get_string>},
};

}  // namespace

void load_config_file(const std::string& path, Config* cfg) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(fmt::format("config {}:{}:{}: {}", path, e.source().begin.line,
                                         e.source().begin.column, e.description()));
  }
  for (const auto& [sec, node] : t) {
    const std::string s(sec.str());
    const toml::table* tab = node.as_table();
    if (!tab) fail(path, s, "expected a [section]");
    if (s == "radius") {
      load_radius_section(path, *tab, &cfg->radius);
      continue;
    }
    if (s == "plans") {
      load_plans_section(path, *tab, &cfg->plans);
      continue;
    }
    if (s == "relay") cfg->relay.present = true;
    for (const auto& [k, v] : *tab) {
      const std::string key = s + "." + std::string(k.str());
      auto it = std::find_if(std::begin(kFileKeys), std::end(kFileKeys),
                             [&](const FileKey& f) { return key == f.key; });
      if (it != std::end(kFileKeys))
        it->set(path, key, v, cfg);
      else if (const char* m = moved_to(key))
        fail(path, key, fmt::format("unknown key (now {})", m));
      else
        fail(path, key, "unknown key");
    }
  }
}

std::optional<std::string> parse_listen(std::string_view s, std::string* host, uint16_t* port) {
  std::string_view h, p;
  if (!s.empty() && s[0] == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return "expected [IPV6]:PORT";
    h = s.substr(1, close - 1);
    p = s.substr(close + 2);
    if (!parse_ipv6(h)) return fmt::format("{}: not an IPv6 address", h);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return "expected HOST:PORT";
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (h.find(':') != std::string_view::npos) return "an IPv6 address needs brackets: [::1]:PORT";
    if (h.empty()) return "empty host (0.0.0.0 or [::] listen on every address)";
    if (h.find_first_not_of("0123456789.") == std::string_view::npos) {
      if (!parse_ipv4(h)) return fmt::format("{}: not an IPv4 address", h);
    } else if (h.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789.-") != std::string_view::npos) {
      return fmt::format("{}: not an address nor a host name", h);
    }
  }
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string_view::npos)
    return fmt::format("port {}: expected 1..65535", p);
  const unsigned long v = std::stoul(std::string(p));
  if (v < 1 || v > 65535) return fmt::format("port {}: expected 1..65535", p);
  *host = std::string(h);
  *port = static_cast<uint16_t>(v);
  return std::nullopt;
}

namespace {

// Collects the problems of one check_config run; the checks of a section
// each take one.
class Checker {
 public:
  explicit Checker(ConfigCheck* r) : r_(r) {}
  template <typename... A>
  void err(fmt::format_string<A...> f, A&&... a) {
    r_->errors.push_back(fmt::format(f, std::forward<A>(a)...));
  }
  template <typename... A>
  void warn(fmt::format_string<A...> f, A&&... a) {
    r_->warnings.push_back(fmt::format(f, std::forward<A>(a)...));
  }
  void tpid(const std::string& what, const std::string& v) {
    auto t = parse_u16(v);
    if (!t || (*t != XBNG_ETH_P_8021AD && *t != XBNG_ETH_P_8021Q && *t != XBNG_ETH_P_QINQ_9100))
      err("{} {}: expected 0x88a8, 0x8100 or 0x9100", what, v);
  }
  void ipv4_host(const std::string& what, const std::string& v) {
    auto a = parse_ipv4(v);
    if (!a)
      err("{} {}: not an IPv4 address", what, v);
    else if (auto st = check_ipv4_host(*a); !st.ok())
      err("{} {}: {}", what, v, status_message(st));
  }
  void ipv6_host(const std::string& what, const std::string& v) {
    auto a = parse_ipv6(v);
    if (!a)
      err("{} {}: not an IPv6 address", what, v);
    else if (auto st = check_ipv6_host(*a); !st.ok())
      err("{} {}: {}", what, v, status_message(st));
  }

 private:
  ConfigCheck* r_;
};

// The ports: given, valid names, not twice, not too many.
void check_ports(const Config& c, Checker& k) {
  if (c.access.empty()) k.err("ports.access (--access): no access port");
  if (c.uplink.empty()) k.err("ports.uplink (--uplink): no uplink port");
  std::set<std::string> seen;
  for (const auto* list : {&c.access, &c.uplink})
    for (const auto& n : *list) {
      if (!valid_ifname(n))
        k.err("port \"{}\": not a valid interface name (1-15 characters, no '/', ':' or spaces)",
              n);
      else if (!seen.insert(n).second)
        k.err("port {}: configured twice", n);
    }
  if (c.access.size() + c.uplink.size() > XBNG_MAX_PORTS)
    k.err("{} ports configured, at most {}", c.access.size() + c.uplink.size(), XBNG_MAX_PORTS);
  if (c.xdp_attach != "link" && c.xdp_attach != "libxdp")
    k.err(
        "ports.xdp_attach {}: expected link (xbng's own XDP link) or libxdp (libxdp's "
        "dispatcher, beside other programs)",
        c.xdp_attach);
  if (c.xdp_priority > 0xffffffffull)
    k.err("ports.xdp_priority {}: expected 0..4294967295 (libxdp's run priority)", c.xdp_priority);
  else if (c.xdp_attach != "libxdp" && c.xdp_priority != Config{}.xdp_priority)
    k.warn(
        "ports.xdp_priority {} has no effect: it orders programs in libxdp's dispatcher "
        "(ports.xdp_attach = \"libxdp\")",
        c.xdp_priority);
  for (const auto& [name, o] : c.access_options)
    if (std::find(c.access.begin(), c.access.end(), name) == c.access.end())
      k.warn("ports.access: settings for {}, which is not an access port, are ignored", name);
}

// A port's `direct_svlans`: each "A-B" or "A" (S-VIDs 1..4094, A <= B), no
// two of them overlapping.
void check_direct_svlans(const std::string& w, const std::vector<std::string>& v, Checker& k) {
  std::vector<std::pair<uint16_t, uint16_t>> seen;
  for (const auto& s : v) {
    auto r = parse_svlan_range(s);
    if (!r) {
      k.err("{} direct_svlans: \"{}\" is not an S-VLAN range (A-B or A, S-VIDs 1..4094, A <= B)", w,
            s);
      continue;
    }
    for (const auto& [f, l] : seen)
      if (r->first <= l && f <= r->second) k.err("{} direct_svlans: {} overlaps {}-{}", w, s, f, l);
    seen.push_back(*r);
  }
}

// Each access port: TPID, gateways, MTUs, pools, policy (the global TPID and gateways first).
void check_access_ports(const Config& c, Checker& k) {
  k.tpid("ports.outer_tpid (--outer-tpid)", c.outer_tpid);
  if (!c.gateway_ipv4.empty()) k.ipv4_host("gateway.ipv4 (--gateway-ipv4)", c.gateway_ipv4);
  if (!c.gateway_ipv6.empty()) k.ipv6_host("gateway.ipv6 (--gateway-ipv6)", c.gateway_ipv6);
  for (const auto& name : c.access) {
    auto it = c.access_options.find(name);
    const AccessPortConfig o = it == c.access_options.end() ? AccessPortConfig{} : it->second;
    const std::string w = "ports.access " + name;
    if (!o.outer_tpid.empty()) k.tpid(w + " outer_tpid", o.outer_tpid);
    if (!o.gateway_ipv4.empty()) k.ipv4_host(w + " gateway_ipv4", o.gateway_ipv4);
    if (!o.gateway_ipv6.empty()) k.ipv6_host(w + " gateway_ipv6", o.gateway_ipv6);
    if (o.mtu && o.subscriber_mtu)
      k.err(
          "{}: both mtu {} and subscriber_mtu {}: give subscriber_mtu only (mtu is the older "
          "form of subscriber_mtu + 8)",
          w, o.mtu, o.subscriber_mtu);
    else if (o.mtu && (o.mtu < 76 || o.mtu > 65535))
      k.err("{} mtu {}: expected 76..65535 (an IPv4 minimum of 68 plus 8 bytes of tags)", w, o.mtu);
    else if (o.mtu && o.mtu < 1288)
      k.warn("{} mtu {}: below 1288, IPv6 (1280 minimum) cannot reach subscribers", w, o.mtu);
    if (o.subscriber_mtu && (o.subscriber_mtu < 68 || o.subscriber_mtu > 65527))
      k.err(
          "{} subscriber_mtu {}: expected 68..65527 (IPv4 minimum; plus 8 bytes of tags, at most "
          "65535)",
          w, o.subscriber_mtu);
    else if (o.subscriber_mtu && o.subscriber_mtu < 1280)
      k.warn("{} subscriber_mtu {}: below 1280, IPv6 cannot reach subscribers", w,
             o.subscriber_mtu);
    check_direct_svlans(w, o.direct_svlans, k);
    for (const auto& pool : o.pools) {
      auto pf = parse_prefix(pool);
      if (!pf)
        k.err("{} pools: \"{}\" is not a prefix (A.B.C.D/N or X::/N)", w, pool);
      else if (!host_bits_zero(pf->addr.data(), pf->family == 4 ? 4 : 16, pf->len))
        k.err("{} pools: {} has host bits set", w, pool);
      else if (pf->len < (pf->family == 4 ? 8 : 16))
        k.err("{} pools: {} is shorter than /{}: not a subscriber pool", w, pool,
              pf->family == 4 ? 8 : 16);
    }
    if (auto st = check_policy(o.policy, o.mtu ? static_cast<uint32_t>(o.mtu) : kDefaultMaxPacket);
        !st.ok())
      k.err("{} policy: {}", w, status_message(st));
    if (c.gateway_ipv4.empty() && c.gateway_ipv6.empty() && o.gateway_ipv4.empty() &&
        o.gateway_ipv6.empty())
      k.err(
          "access port {} has no gateway: set gateway.ipv4 and/or gateway.ipv6 "
          "(--gateway-ipv4/--gateway-ipv6) or per port",
          name);
  }
}

// Pools of different ports must not overlap (one owner per address).
void check_pool_overlap(const Config& c, Checker& k) {
  std::vector<std::pair<std::string, Prefix>> all;
  for (const auto& name : c.access) {
    auto it = c.access_options.find(name);
    if (it == c.access_options.end()) continue;
    for (const auto& pool : it->second.pools)
      if (auto pf = parse_prefix(pool)) all.emplace_back(name, *pf);
  }
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j)
      if (prefixes_overlap(all[i].second, all[j].second))
        k.err("pools {} (port {}) and {} (port {}) overlap", format_prefix(all[i].second),
              all[i].first, format_prefix(all[j].second), all[j].first);
}

// Each uplink: its ICMP source addresses.
void check_uplink_ports(const Config& c, Checker& k) {
  for (const auto& [name, o] : c.uplink_options) {
    const std::string w = "ports.uplink " + name;
    if (!o.icmp_source_ipv4.empty()) k.ipv4_host(w + " icmp_source_ipv4", o.icmp_source_ipv4);
    if (!o.icmp_source_ipv6.empty()) k.ipv6_host(w + " icmp_source_ipv6", o.icmp_source_ipv6);
  }
}

// [icmp]: the rate of ICMP errors from XDP.
void check_icmp(const Config& c, Checker& k) {
  if (c.icmp_rate_per_sec > 1'000'000)
    k.err("icmp.rate_per_sec {}: expected 0..1000000 (0: no ICMP errors from XDP)",
          c.icmp_rate_per_sec);
  if (c.icmp_burst < 1 || c.icmp_burst > 100'000)
    k.err("icmp.burst {}: expected 1..100000", c.icmp_burst);
}

// [dhcp], and the per-port DHCP settings.
void check_dhcp(const Config& c, Checker& k) {
  auto check_one = [&](const std::string& w, uint64_t lease, const std::vector<std::string>& dns,
                       const std::string& mask) {
    if (lease < 10 || lease > 31'536'000)
      k.err("{}lease_time {}: expected 10..31536000 seconds", w, lease);
    for (const auto& d : dns)
      if (!parse_ipv4(d)) k.err("{}dns {}: not an IPv4 address", w, d);
    if (dns.size() > 8) k.err("{}dns: at most 8 servers", w);
    if (!mask.empty() && !mask_len(mask))
      k.err("{}subnet_mask {}: not a contiguous IPv4 netmask", w, mask);
  };
  check_one("dhcp.", c.dhcp_lease_time, c.dhcp_dns, c.dhcp_subnet_mask);
  for (const auto& [name, o] : c.access_options)
    check_one("ports.access " + name + " dhcp_", o.dhcp_lease_time.value_or(c.dhcp_lease_time),
              o.dhcp_dns.value_or(c.dhcp_dns), o.dhcp_subnet_mask.value_or(c.dhcp_subnet_mask));
}

// [dhcpv6] and [ra].
void check_dhcpv6_ra(const Config& c, Checker& k) {
  std::vector<std::string> dummy;
  for (const auto& d : c.dhcpv6_dns)
    if (!parse_ipv6(d)) k.err("dhcpv6.dns {}: not an IPv6 address", d);
  for (const auto& d : c.ra_dns.value_or(dummy))
    if (!parse_ipv6(d)) k.err("ra.dns {}: not an IPv6 address", d);
  if (c.dhcpv6_valid > 0xffffffffull || c.dhcpv6_preferred > 0xffffffffull ||
      c.dhcpv6_t1 > 0xffffffffull || c.dhcpv6_t2 > 0xffffffffull)
    k.err("dhcpv6 lifetimes: at most 4294967295 seconds");
  if (c.ra_router_lifetime > 0xffff)
    k.err("ra.router_lifetime {}: at most 9000", c.ra_router_lifetime);
  if (c.ra_unsolicited_interval < 4 || c.ra_unsolicited_interval > 86400)
    k.err("ra.unsolicited_interval {}: expected 4..86400 seconds", c.ra_unsolicited_interval);
  punt::BringupOptions b = to_bringup_options_unchecked(c);
  const std::vector<uint8_t> placeholder{0, 4, 1, 2, 3, 4};  // the real DUID is loaded at start
  b.dhcpv6_settings.server_duid.assign(placeholder);
  for (const auto& e : dhcpv6::check_settings(b.dhcpv6_settings)) k.err("dhcpv6: {}", e);
  for (const auto& e : ra::check_settings(b.ra_settings)) k.err("ra: {}", e);
  if (c.ra_enabled)
    if (auto e =
            ra::check_interval(b.ra_settings, static_cast<uint32_t>(c.ra_unsolicited_interval));
        !e.empty())
      k.err("ra.unsolicited_interval: {}", e);
}

// [punt]: the rate limits of control frames.
void check_punt(const Config& c, Checker& k) {
  if (c.punt_subscriber_rate < 1 || c.punt_subscriber_rate > 100000)
    k.err("punt.subscriber_rate {}: expected 1..100000 frames/s", c.punt_subscriber_rate);
  if (c.punt_subscriber_burst < 1 || c.punt_subscriber_burst > 100000)
    k.err("punt.subscriber_burst {}: expected 1..100000 frames", c.punt_subscriber_burst);
  if (c.punt_port_rate > 10'000'000)
    k.err("punt.port_rate {}: expected 0..10000000 frames/s per CPU", c.punt_port_rate);
  if (c.punt_transport != "ringbuf" && c.punt_transport != "af_xdp")
    k.err("punt.transport {}: expected ringbuf or af_xdp", c.punt_transport);
  const uint64_t fifo = c.punt_realtime_priority.value_or(0);
  if (fifo > 99)
    k.err(
        "punt.realtime_priority {}: expected 0 (the default policy), 1..99 (SCHED_FIFO) or "
        "\"auto\"",
        fifo);
  else if (fifo && !c.punt_enabled)
    k.warn("punt.realtime_priority {} has no effect: the punt path is off", fifo);
}

// [security]: MAC policy, reserved ranges, services allowed to the host.
void check_security(const Config& c, Checker& k) {
  if (!parse_mac_policy(c.mac_policy) || c.mac_policy.empty())
    k.err("security.mac_policy {}: expected learn-once, follow or enforce", c.mac_policy);
  for (const auto& name : c.access)
    if (auto it = c.access_options.find(name);
        it != c.access_options.end() && !parse_mac_policy(it->second.mac_policy))
      k.err("ports.access {} mac_policy {}: expected learn-once, follow or enforce", name,
            it->second.mac_policy);
  for (const auto& name : c.access) {
    auto it = c.access_options.find(name);
    if (it == c.access_options.end()) continue;
    const std::string& auth = it->second.auth;
    if (!auth.empty() && auth != "none" && auth != "radius")
      k.err("ports.access {} auth {}: expected \"none\" or \"radius\"", name, quote_value(auth));
    if (auth == "radius" && !c.punt_enabled)
      k.err("ports.access {} auth radius: needs the punt path (punt.enabled = true)", name);
    if (auth == "radius" && !c.radius.present)
      k.err("ports.access {} auth radius: needs a [radius] section (its servers)", name);
    const std::string& dhcp = it->second.dhcp;
    if (!dhcp.empty() && dhcp != "server" && dhcp != "relay")
      k.err("ports.access {} dhcp {}: expected \"server\" or \"relay\"", name, quote_value(dhcp));
    if (dhcp == "relay" && !c.relay.servers_v4.empty() && it->second.gateway_ipv4.empty() &&
        c.gateway_ipv4.empty())
      k.err(
          "ports.access {} dhcp relay: needs an IPv4 gateway (gateway_ipv4 or gateway.ipv4): "
          "it selects the servers' subnet and stands for them toward the client",
          name);
    if (dhcp == "relay" && !c.relay.servers_v6.empty() && it->second.gateway_ipv6.empty() &&
        c.gateway_ipv6.empty())
      k.err(
          "ports.access {} dhcp relay: relay.servers_v6 needs an IPv6 gateway (gateway_ipv6 or "
          "gateway.ipv6): it is the link-address that selects the servers' subnet",
          name);
  }
  for (const auto& a : c.allow_to_host) {
    LocalService ls;
    if (auto e = parse_local_service(a, &ls)) k.err("security.allow_to_host {}", *e);
  }
  if (c.allow_to_host.size() > XBNG_LOCAL_ALLOW_ENTRIES)
    k.err("security.allow_to_host: {} entries, at most {}", c.allow_to_host.size(),
          XBNG_LOCAL_ALLOW_ENTRIES);
  for (const auto& r : c.reserved)
    if (!parse_prefix(r) && !parse_ipv4(r) && !parse_ipv6(r))
      k.err(
          "security.reserved \"{}\": expected an IPv4 or IPv6 address or prefix (A.B.C.D/N, X::/N)",
          r.substr(0, 64));
}

// [limits] and [bpf].
void check_limits(const Config& c, Checker& k) {
  if (c.max_subscribers < 1 || c.max_subscribers > 16'000'000)
    k.err("limits.max_subscribers (--max-subscribers) {}: expected 1..16000000", c.max_subscribers);
  if (c.direct_slots > 16'777'216)
    k.err("limits.direct_slots {}: expected 0..16777216 (0: every IPv4 host route in the hash)",
          c.direct_slots);
  if (c.direct_slots_v6 > 16'777'216)
    k.err(
        "limits.direct_slots_v6 {}: expected 0..16777216 (0: every IPv6 /64 and /128 in the "
        "hashes)",
        c.direct_slots_v6);
  if (c.direct_subscriber_slots > 16'777'216)
    k.err(
        "limits.direct_subscriber_slots {}: expected 0..16777216 (4096 per S-VLAN of "
        "direct_svlans; 0: every subscriber in the hash)",
        c.direct_subscriber_slots);
  if (c.events_per_sec > 1'000'000)
    k.err("limits.events_per_sec {}: expected 0..1000000 (0 disables unknown-subscriber events)",
          c.events_per_sec);
  if (c.unknown_interval_ms < 1 || c.unknown_interval_ms > 3'600'000)
    k.err("limits.unknown_event_interval_ms {}: expected 1..3600000", c.unknown_interval_ms);
  if (c.bpffs.empty() || c.bpffs[0] != '/')
    k.err("bpf.bpffs (--bpffs) {}: expected an absolute path", c.bpffs);
  else if (c.bpffs.rfind("/sys/fs/bpf/", 0) != 0)
    k.warn("bpf.bpffs {}: not under /sys/fs/bpf; it must be on a bpf filesystem", c.bpffs);
}

// [grpc]: the listen address and its TLS.
void check_grpc(const Config& c, Checker& k) {
  if (c.grpc.rfind("unix:", 0) == 0) {
    const std::string p = c.grpc.substr(c.grpc.rfind("unix://", 0) == 0 ? 7 : 5);
    if (p.empty() || p[0] != '/')
      k.err("grpc.listen (--grpc) {}: expected unix:///absolute/path", c.grpc);
    if (!c.tls_cert.empty() || !c.tls_key.empty())
      k.warn("grpc.tls_cert/tls_key are ignored on a unix socket ({})", c.grpc);
  } else {
    std::string host;
    uint16_t port = 0;
    if (auto e = parse_listen(c.grpc, &host, &port))
      k.err("grpc.listen (--grpc) {}: {} (or unix:///path)", c.grpc, *e);
    if (c.tls_cert.empty() != c.tls_key.empty())
      k.err("grpc: TLS needs both tls_cert and tls_key (--tls-cert, --tls-key)");
    else if (c.tls_cert.empty() && !c.insecure_tcp)
      k.err(
          "grpc.listen {}: TCP needs TLS (tls_cert and tls_key), or insecure_tcp = true "
          "(--insecure-tcp) to accept plaintext explicitly",
          c.grpc);
    else if (c.tls_cert.empty())
      k.warn(
          "grpc.listen {}: plaintext TCP (insecure_tcp): anyone who reaches it can provision "
          "subscribers",
          c.grpc);
    if (!c.tls_cert.empty() && c.tls_client_ca.empty() && !c.tls_no_client_auth)
      k.err(
          "grpc.listen {}: TLS without tls_client_ca accepts clients without certificates: give "
          "grpc.tls_client_ca (--tls-client-ca), or tls_no_client_auth = true "
          "(--tls-no-client-auth) to allow that explicitly",
          c.grpc);
    else if (!c.tls_cert.empty() && c.tls_client_ca.empty())
      k.warn(
          "grpc.listen {}: TLS without client certificates (tls_no_client_auth): anyone who "
          "reaches it can provision subscribers",
          c.grpc);
    for (auto [what, path] :
         {std::pair{"grpc.tls_cert", &c.tls_cert}, std::pair{"grpc.tls_key", &c.tls_key},
          std::pair{"grpc.tls_client_ca", &c.tls_client_ca}})
      if (!path->empty())
        if (auto e = unreadable(*path)) k.err("{} {}: cannot read: {}", what, *path, *e);
  }
}

// [api]: bounded API resources.
void check_api_limits(const Config& c, Checker& k) {
  if (c.api_max_connections < 1 || c.api_max_connections > 1'000'000)
    k.err("api.max_connections {}: expected 1..1000000", c.api_max_connections);
  if (c.api_max_request_bytes < 65536 || c.api_max_request_bytes > (256u << 20))
    k.err("api.max_request_bytes {}: expected 65536..268435456", c.api_max_request_bytes);
  if (c.api_max_watchers < 1 || c.api_max_watchers > 10'000)
    k.err("api.max_watchers {}: expected 1..10000", c.api_max_watchers);
  if (c.api_watcher_queue < 16 || c.api_watcher_queue > 16'000'000)
    k.err("api.watcher_queue {}: expected 16..16000000", c.api_watcher_queue);
}

// [metrics].
void check_metrics(const Config& c, Checker& k) {
  if (!c.metrics_listen.empty()) {
    std::string host;
    uint16_t port = 0;
    if (auto e = parse_listen(c.metrics_listen, &host, &port))
      k.err("metrics.listen (--metrics-listen) {}: {} (\"\" disables metrics)", c.metrics_listen,
            *e);
    else if (!is_loopback_host(host))
      k.warn(
          "metrics.listen {}: not a loopback address; the metrics endpoint has no "
          "authentication",
          c.metrics_listen);
  }
}

// [etcd]: fleet mode.
void check_fleet(const Config& c, Checker& k) {
  if (c.etcd_endpoints.empty()) {
    if (!c.etcd_node.empty())
      k.err("etcd.node (--node) {}: needs etcd.endpoints (--etcd)", c.etcd_node);
  } else {
    if (c.etcd_node.empty())
      k.err("etcd.endpoints (--etcd) given without etcd.node (--node)");
    else if (auto e = check_node_name(c.etcd_node))
      k.err("etcd.node (--node): {}", *e);
    for (const auto& ep : c.etcd_endpoints) {
      std::string e = ep, host;
      uint16_t port = 0;
      if (e.rfind("https://", 0) == 0)
        e = e.substr(8);
      else if (e.rfind("http://", 0) == 0)
        e = e.substr(7);
      if (auto why = parse_listen(e, &host, &port))
        k.err("etcd.endpoints (--etcd) {}: {}", ep, *why);
    }
    if (c.etcd_cert.empty() != c.etcd_key.empty())
      k.err(
          "etcd: a client certificate needs its key (etcd.cert and etcd.key, --etcd-cert and "
          "--etcd-key)");
    for (auto [what, path] :
         {std::pair{"etcd.ca", &c.etcd_ca}, std::pair{"etcd.cert", &c.etcd_cert},
          std::pair{"etcd.key", &c.etcd_key},
          std::pair{"etcd.password_file", &c.etcd_password_file}})
      if (!path->empty())
        if (auto e = unreadable(*path)) k.err("{} {}: cannot read: {}", what, *path, *e);
    if (!c.etcd_password.empty() && !c.etcd_password_file.empty())
      k.err("etcd: give password or password_file, not both");
    if ((!c.etcd_password.empty() || !c.etcd_password_file.empty()) && c.etcd_username.empty())
      k.err("etcd: a password needs etcd.username (--etcd-username)");
    if (c.etcd_status_ttl < 2 || c.etcd_status_ttl > 3600)
      k.err("etcd.status_ttl {}: expected 2..3600 seconds", c.etcd_status_ttl);
    if (c.etcd_full_read_readers < 1 || c.etcd_full_read_readers > kMaxFullReadReaders)
      k.err("etcd.full_read_readers {}: expected 1..{}", c.etcd_full_read_readers,
            kMaxFullReadReaders);
  }
}

// [ha]: an active/standby group, elected through etcd.
void check_ha(const Config& c, Checker& k) {
  if (c.ha_group.empty()) {
    if (!c.ha_member.empty() || !c.ha_virtual_mac.empty() || !c.ha_uplink_vip_v4.empty() ||
        !c.ha_uplink_vip_v6.empty())
      k.err("ha: a member, virtual MAC or VIP needs ha.group");
    return;
  }
  if (auto e = check_node_name(c.ha_group)) k.err("ha.group: {}", *e);
  if (c.ha_member.empty())
    k.err("ha.member: required with ha.group (the member's name, unique in the group)");
  else if (auto e = check_node_name(c.ha_member))
    k.err("ha.member: {}", *e);
  if (c.etcd_endpoints.empty())
    k.err("ha.group {}: needs fleet mode (etcd.endpoints / --etcd): the group is elected there",
          c.ha_group);
  if (c.ha_priority > 65535) k.err("ha.priority {}: expected 0..65535", c.ha_priority);
  if (c.ha_lease_ttl_s < 2 || c.ha_lease_ttl_s > 60)
    k.err("ha.lease_ttl_s {}: expected 2..60 seconds", c.ha_lease_ttl_s);
  if (!c.ha_virtual_mac.empty()) {
    auto m = parse_mac(c.ha_virtual_mac);
    if (!m)
      k.err("ha.virtual_mac {}: not a MAC address", c.ha_virtual_mac);
    else if (mac_is_zero(m->data()) || mac_is_multicast(m->data()))
      k.err("ha.virtual_mac {}: must be a unicast MAC", c.ha_virtual_mac);
  }
  if (!c.ha_uplink_vip_v4.empty() && !parse_interface_address(c.ha_uplink_vip_v4, 4))
    k.err("ha.uplink_vip_v4 {}: expected an IPv4 address with its prefix length (192.0.2.1/24)",
          c.ha_uplink_vip_v4);
  if (!c.ha_uplink_vip_v6.empty() && !parse_interface_address(c.ha_uplink_vip_v6, 6))
    k.err(
        "ha.uplink_vip_v6 {}: expected an IPv6 address with its prefix length "
        "(2001:db8:ffff::1/64)",
        c.ha_uplink_vip_v6);
  if ((!c.ha_uplink_vip_v4.empty() || !c.ha_uplink_vip_v6.empty()) && c.uplink.size() != 1)
    k.err("ha: the uplink VIPs need exactly one uplink port ({} given)", c.uplink.size());
}

// [log].
void check_log(const Config& c, Checker& k) {
  if (spdlog::level::from_str(c.log_level) == spdlog::level::off && c.log_level != "off")
    k.err("log.level (--log-level) {}: expected trace, debug, info, warn, error, critical or off",
          c.log_level);
}

}  // namespace

ConfigCheck check_config(const Config& c) {
  ConfigCheck r;
  Checker k(&r);
  check_ports(c, k);
  check_access_ports(c, k);
  check_pool_overlap(c, k);
  check_uplink_ports(c, k);
  check_icmp(c, k);
  check_dhcp(c, k);
  check_dhcpv6_ra(c, k);
  check_punt(c, k);
  check_security(c, k);
  check_limits(c, k);
  check_grpc(c, k);
  check_api_limits(c, k);
  check_metrics(c, k);
  check_fleet(c, k);
  check_ha(c, k);
  check_log(c, k);
  // RADIUS and rate plans.
  check_radius_config(c.radius, c.plans, &r.errors, &r.warnings);
  check_relay_config(c.relay, relay_ports_of(c), c.uplink, c.punt_enabled, &r.errors, &r.warnings);
  return r;
}

std::vector<std::string> relay_ports_of(const Config& c) {
  std::vector<std::string> out;
  for (const auto& name : c.access)
    if (auto it = c.access_options.find(name);
        it != c.access_options.end() && it->second.dhcp == "relay")
      out.push_back(name);
  return out;
}

DataplaneOptions to_dataplane_options(const Config& c) {
  ConfigCheck chk = check_config(c);
  if (!chk.ok()) throw std::runtime_error(fmt::format("{}", fmt::join(chk.errors, "; ")));
  DataplaneOptions o;
  o.access = c.access;
  o.uplink = c.uplink;
  if (auto h = to_ha_options(c)) {
    o.ha = true;
    o.ha_virtual_mac = h->virtual_mac;
    if (h->vip4) std::memcpy(&o.ha_vip4, h->vip4->addr.data(), 4);
    if (h->vip6) std::memcpy(o.ha_vip6.data(), h->vip6->addr.data(), 16);
  }
  if (!c.gateway_ipv4.empty()) o.gateway_ipv4 = *parse_ipv4(c.gateway_ipv4);
  if (!c.gateway_ipv6.empty()) o.gateway_ipv6 = *parse_ipv6(c.gateway_ipv6);
  o.outer_tpid = *parse_u16(c.outer_tpid);
  for (const auto& name : c.access) {
    auto it = c.access_options.find(name);
    if (it == c.access_options.end()) continue;
    const AccessPortConfig& a = it->second;
    AccessPortOverride ov;
    if (!a.outer_tpid.empty()) ov.outer_tpid = *parse_u16(a.outer_tpid);
    ov.mtu = static_cast<uint16_t>(a.mtu);
    if (a.subscriber_mtu)
      ov.sub_mtu = static_cast<uint16_t>(a.subscriber_mtu);
    else if (a.mtu)
      ov.sub_mtu = static_cast<uint16_t>(a.mtu - XBNG_QINQ_TAGS_BYTES);
    ov.mss_clamp = a.mss_clamp.value_or(true);
    for (const auto& pool : a.pools) ov.pools.push_back(*parse_prefix(pool));
    for (const auto& r : a.direct_svlans) ov.direct_svlans.push_back(*parse_svlan_range(r));
    if (!a.gateway_ipv4.empty()) ov.gateway_ipv4 = *parse_ipv4(a.gateway_ipv4);
    if (!a.gateway_ipv6.empty()) ov.gateway_ipv6 = *parse_ipv6(a.gateway_ipv6);
    ov.default_policy = a.policy;
    if (!a.mac_policy.empty()) ov.mac_policy = *parse_mac_policy(a.mac_policy);
    // Unknown keys' first DHCP/RS are punted: to RADIUS, or to the relay.
    ov.punt_unknown = a.auth == "radius" || a.dhcp == "relay";
    ov.relay4 = a.dhcp == "relay" && !c.relay.servers_v4.empty();
    o.access_overrides[name] = ov;
  }
  for (const auto& [name, u] : c.uplink_options) {
    UplinkPortOverride ov;
    if (!u.icmp_source_ipv4.empty()) ov.icmp_source_ipv4 = *parse_ipv4(u.icmp_source_ipv4);
    if (!u.icmp_source_ipv6.empty()) ov.icmp_source_ipv6 = *parse_ipv6(u.icmp_source_ipv6);
    o.uplink_overrides[name] = ov;
  }
  o.icmp_rate_per_sec = c.icmp_rate_per_sec;
  o.icmp_burst = c.icmp_burst;
  o.mac_policy = *parse_mac_policy(c.mac_policy);
  o.allow_to_host = allow_to_host_of(c);
  o.max_subscribers = static_cast<uint32_t>(c.max_subscribers);
  o.direct_slots = static_cast<uint32_t>(c.direct_slots);
  o.direct_slots_v6 = static_cast<uint32_t>(c.direct_slots_v6);
  o.direct_subscriber_slots = static_cast<uint32_t>(c.direct_subscriber_slots);
  o.bpffs = c.bpffs;
  o.xdp_generic = c.xdp_generic;
  o.xdp_libxdp = c.xdp_attach == "libxdp";
  o.xdp_priority = static_cast<unsigned>(c.xdp_priority);
  o.events_per_sec = c.events_per_sec;
  o.unknown_interval_ns = c.unknown_interval_ms * 1000000ull;
  o.punt_enabled = c.punt_enabled;
  o.punt_sub_rate = static_cast<uint32_t>(c.punt_subscriber_rate);
  o.punt_sub_burst = static_cast<uint32_t>(c.punt_subscriber_burst);
  o.punt_port_rate = c.punt_port_rate;
  o.punt_xsk = c.punt_transport == "af_xdp";
  return o;
}

std::vector<LocalService> allow_to_host_of(const Config& c) {
  std::vector<LocalService> out;
  for (const auto& a : c.allow_to_host) {
    LocalService ls;
    if (auto e = parse_local_service(a, &ls))
      throw std::runtime_error("security.allow_to_host " + *e);
    if (std::find(out.begin(), out.end(), ls) == out.end()) out.push_back(ls);
  }
  return out;
}

punt::BringupOptions to_bringup_options(const Config& c) {
  ConfigCheck chk = check_config(c);
  if (!chk.ok()) throw std::runtime_error(fmt::format("{}", fmt::join(chk.errors, "; ")));
  return to_bringup_options_unchecked(c);
}

std::string store_journal_path(const Config& c) {
  const std::string base = c.bpffs.substr(c.bpffs.find_last_of('/') + 1);
  return c.bpffs == "/sys/fs/bpf/xbng" || base.empty() ? "/run/xbng/store.journal"
                                                       : "/run/xbng/" + base + "/store.journal";
}

punt::BringupOptions to_bringup_options_unchecked(const Config& c) {
  punt::BringupOptions b;
  b.enabled = c.punt_enabled;
  b.af_xdp = c.punt_transport == "af_xdp";
  b.dhcpv4 = c.dhcp_enabled;
  b.lease_file = c.lease_file;
  if (c.punt_realtime_priority) {
    b.realtime_priority = static_cast<int>(*c.punt_realtime_priority);
    b.realtime_required = true;
  } else if (!relay_ports_of(c).empty()) {
    b.realtime_priority = kRelayRealtimePriority;
  }
  for (const auto& [name, a] : c.access_options)
    if (a.auth == "radius") b.auth_ports.insert(name);
  for (const auto& name : relay_ports_of(c)) {
    if (!c.relay.servers_v4.empty()) b.relay4_ports.insert(name);
    if (!c.relay.servers_v6.empty()) b.relay6_ports.insert(name);
  }
  // Defaults: /var/lib/xbng for the production pin directory; another bpffs
  // (a lab, a test) keeps its state under /run/xbng/<its name>/, so that
  // throwaway instances never share nor accumulate state in /var/lib.
  const std::string base = c.bpffs.substr(c.bpffs.find_last_of('/') + 1);
  const std::string state_dir = c.bpffs == "/sys/fs/bpf/xbng" || base.empty()
                                    ? std::string("/var/lib/xbng")
                                    : "/run/xbng/" + base;
  if (b.lease_file.empty()) b.lease_file = state_dir + "/leases.json";
  auto settings = [](uint64_t lease, const std::vector<std::string>& dns, const std::string& mask) {
    dhcpv4::Settings s;
    s.lease_time = static_cast<uint32_t>(lease);
    for (const auto& d : dns)
      if (auto a = parse_ipv4(d)) s.dns.push_back(*a);
    s.prefix_len = mask.empty() ? 32 : mask_len(mask).value_or(32);
    return s;
  };
  b.dhcpv4_defaults = settings(c.dhcp_lease_time, c.dhcp_dns, c.dhcp_subnet_mask);
  for (const auto& [name, o] : c.access_options)
    b.dhcpv4_ports[name] =
        settings(o.dhcp_lease_time.value_or(c.dhcp_lease_time), o.dhcp_dns.value_or(c.dhcp_dns),
                 o.dhcp_subnet_mask.value_or(c.dhcp_subnet_mask));
  b.dhcpv6 = c.dhcpv6_enabled;
  b.ra = c.ra_enabled;
  b.max_subscribers = static_cast<uint32_t>(c.max_subscribers);
  auto v6list = [](const std::vector<std::string>& in) {
    std::vector<Ipv6> out;
    for (const auto& d : in)
      if (auto a = parse_ipv6(d)) out.push_back(*a);
    return out;
  };
  b.dhcpv6_settings.preferred_lifetime = static_cast<uint32_t>(c.dhcpv6_preferred);
  b.dhcpv6_settings.valid_lifetime = static_cast<uint32_t>(c.dhcpv6_valid);
  b.dhcpv6_settings.t1 = static_cast<uint32_t>(c.dhcpv6_t1);
  b.dhcpv6_settings.t2 = static_cast<uint32_t>(c.dhcpv6_t2);
  b.dhcpv6_settings.dns_servers = v6list(c.dhcpv6_dns);
  b.dhcpv6_settings.rapid_commit = c.dhcpv6_rapid_commit;
  b.duid_file = c.duid_file;
  if (b.duid_file.empty()) b.duid_file = state_dir + "/dhcpv6-server-duid";
  b.ra_settings.managed = c.ra_managed;
  b.ra_settings.other = c.ra_other;
  b.ra_settings.router_lifetime = static_cast<uint16_t>(c.ra_router_lifetime);
  b.ra_settings.mtu = static_cast<uint32_t>(c.ra_mtu);
  b.ra_settings.rdnss = v6list(c.ra_dns.value_or(c.dhcpv6_dns));
  b.ra_settings.rdnss_lifetime = static_cast<uint32_t>(c.ra_dns_lifetime);
  b.ra_slaac = c.ra_slaac;
  b.ra_unsolicited_interval_s = c.ra_unsolicited_interval;
  return b;
}

ServerOptions to_server_options(const Config& c) {
  ServerOptions s;
  s.listen = c.grpc;
  s.tls_cert = c.tls_cert;
  s.tls_key = c.tls_key;
  s.tls_client_ca = c.tls_client_ca;
  s.insecure_tcp = c.insecure_tcp;
  s.tls_no_client_auth = c.tls_no_client_auth;
  s.max_connections = c.api_max_connections;
  s.max_request_bytes = c.api_max_request_bytes;
  s.max_watchers = c.api_max_watchers;
  s.watcher_queue = c.api_watcher_queue;
  return s;
}

std::optional<FleetOptions> to_fleet_options(const Config& c) {
  if (c.etcd_endpoints.empty()) return std::nullopt;
  FleetOptions f;
  for (const auto& e : c.etcd_endpoints)
    for (auto& s : split_endpoints(e)) f.etcd.endpoints.push_back(s);
  f.node = c.etcd_node;
  f.etcd.ca = c.etcd_ca;
  f.etcd.cert = c.etcd_cert;
  f.etcd.key = c.etcd_key;
  f.etcd.username = c.etcd_username;
  f.etcd.password = c.etcd_password;
  if (!c.etcd_password_file.empty()) {
    std::ifstream in(c.etcd_password_file);
    if (!in)
      throw std::runtime_error("etcd.password_file " + c.etcd_password_file + ": cannot read");
    std::getline(in, f.etcd.password);
  }
  f.status_ttl_seconds = static_cast<uint32_t>(c.etcd_status_ttl);
  f.full_read_readers = static_cast<uint32_t>(c.etcd_full_read_readers);
  // Every member of an HA group applies the group's desired state.
  if (!c.ha_group.empty()) f.subscribers_of = c.ha_group;
  return f;
}

std::optional<HaOptions> to_ha_options(const Config& c) {
  if (c.ha_group.empty()) return std::nullopt;
  HaOptions h;
  h.group = c.ha_group;
  h.member = c.ha_member;
  h.node = c.etcd_node;
  h.priority = static_cast<uint32_t>(c.ha_priority);
  h.preempt = c.ha_preempt;
  h.lease_ttl_s = static_cast<uint32_t>(c.ha_lease_ttl_s);
  h.virtual_mac =
      c.ha_virtual_mac.empty() ? ha_default_virtual_mac(c.ha_group) : *parse_mac(c.ha_virtual_mac);
  if (!c.ha_uplink_vip_v4.empty()) h.vip4 = parse_interface_address(c.ha_uplink_vip_v4, 4);
  if (!c.ha_uplink_vip_v6.empty()) h.vip6 = parse_interface_address(c.ha_uplink_vip_v6, 6);
  return h;
}

namespace {

// The per-port settings of a config as one text, to compare two configs.
std::string port_settings_text(const Config& c) {
  std::vector<std::string> v;
  for (const auto& [n, o] : c.access_options)
    v.push_back(
        fmt::format("{}{{tpid={},mtu={},gw4={},gw6={},subscriber_mtu={},mss_clamp={},"
                    "pools={},direct_svlans={},policy={}/{}/{}/{},mac_policy={},auth={},dhcp={}}}",
                    n, o.outer_tpid, o.mtu, o.gateway_ipv4, o.gateway_ipv6, o.subscriber_mtu,
                    o.mss_clamp ? (*o.mss_clamp ? "on" : "off") : "-", join(o.pools),
                    join(o.direct_svlans), o.policy.up_rate, o.policy.up_burst, o.policy.down_rate,
                    o.policy.down_burst, o.mac_policy, o.auth, o.dhcp));
  for (const auto& [n, o] : c.uplink_options)
    v.push_back(fmt::format("{}{{icmp_source={},{}}}", n, o.icmp_source_ipv4, o.icmp_source_ipv6));
  return join(v);
}

// The bring-up settings ([punt], [dhcp], [dhcpv6], [ra], per port) as one text.
std::string bringup_text(const Config& c) {
  std::vector<std::string> v{
      fmt::format("punt={},{}/{}/{},{},fifo={}", c.punt_enabled, c.punt_subscriber_rate,
                  c.punt_subscriber_burst, c.punt_port_rate, c.punt_transport,
                  c.punt_realtime_priority ? std::to_string(*c.punt_realtime_priority) : "auto"),
      fmt::format("dhcp={},{},{},{},{}", c.dhcp_enabled, c.dhcp_lease_time, join(c.dhcp_dns),
                  c.dhcp_subnet_mask, c.lease_file),
      fmt::format("dhcpv6={},{}/{}/{}/{},{},{},{}", c.dhcpv6_enabled, c.dhcpv6_preferred,
                  c.dhcpv6_valid, c.dhcpv6_t1, c.dhcpv6_t2, join(c.dhcpv6_dns),
                  c.dhcpv6_rapid_commit, c.duid_file),
      fmt::format("ra={},{}{},{},{},{},{},{},{}", c.ra_enabled, c.ra_managed, c.ra_other,
                  c.ra_router_lifetime, c.ra_mtu,
                  join(c.ra_dns.value_or(std::vector<std::string>{})), c.ra_dns_lifetime,
                  c.ra_slaac, c.ra_unsolicited_interval)};
  for (const auto& [n, o] : c.access_options)
    if (o.dhcp_lease_time || o.dhcp_dns || o.dhcp_subnet_mask)
      v.push_back(fmt::format("{}{{lease={},dns={},mask={}}}", n, o.dhcp_lease_time.value_or(0),
                              join(o.dhcp_dns.value_or(std::vector<std::string>{})),
                              o.dhcp_subnet_mask.value_or("")));
  return join(v);
}

// The changes a reload applies live: log level, metrics endpoint, services
// allowed to the host, reserved ranges.
void plan_live_changes(const Config& a, const Config& b, ReloadPlan* plan) {
  ReloadPlan& p = *plan;
  if (a.log_level != b.log_level) {
    p.log_level = true;
    p.applied.push_back(fmt::format("log.level: {} -> {}", a.log_level, b.log_level));
  }
  if (a.metrics_listen != b.metrics_listen) {
    p.metrics_listen = true;
    p.applied.push_back(
        fmt::format("metrics.listen: \"{}\" -> \"{}\"", a.metrics_listen, b.metrics_listen));
  }
  if (a.allow_to_host != b.allow_to_host) {
    p.allow_to_host = true;
    p.applied.push_back(fmt::format("security.allow_to_host: {} -> {}", join(a.allow_to_host),
                                    join(b.allow_to_host)));
  }
  if (a.reserved != b.reserved) {
    p.reserved = true;
    p.applied.push_back(
        fmt::format("security.reserved: {} -> {}", join(a.reserved), join(b.reserved)));
  }
}

}  // namespace

namespace {

// Settings fixed while xbngd runs; two ways to apply them.
constexpr const char* kRestart =
    "restart xbngd to apply it (`systemctl restart xbngd`: the new programs and port settings "
    "are swapped in with no packet lost)";
constexpr const char* kTeardown =
    "needs `xbngd --teardown` (stops forwarding) and a fresh start, since the pinned maps "
    "keep their size and location";

// Records a setting that changed and cannot change live.
struct Refuser {
  ReloadPlan* p;
  void operator()(const char* key, const std::string& from, const std::string& to, const char* why,
                  const char* how) const {
    if (from != to)
      p->refused.push_back(
          fmt::format("{}: {} -> {}: cannot change live ({}); {}", key, from, to, why, how));
  }
};

// Ports, RADIUS, plans and what the XDP program freezes when it is loaded.
void refuse_dataplane_changes(const Config& a, const Config& b, ReloadPlan* p) {
  const Refuser refuse{p};
  constexpr const char* kPorts = "the XDP links and the ports map are set at start";
  refuse("ports.access", join(a.access), join(b.access), kPorts, kRestart);
  // RADIUS: the client and its sockets are set up at start. Secrets are
  // never shown, only that something changed.
  if (!(a.radius == b.radius))
    p->refused.push_back(
        fmt::format("radius: changed: cannot change live (the RADIUS client is set "
                    "up at start); {}",
                    kRestart));
  if (!(a.relay == b.relay))
    p->refused.push_back(fmt::format(
        "relay: changed: cannot change live (the relay and its socket are set up at start); {}",
        kRestart));
  if (a.plans != b.plans)
    p->refused.push_back(
        fmt::format("plans: changed: cannot change live (plans are read at start); {}", kRestart));
  refuse("ports.access (per-port settings)", port_settings_text(a), port_settings_text(b), kPorts,
         kRestart);
  refuse("ports.uplink", join(a.uplink), join(b.uplink), kPorts, kRestart);
  refuse("ports.outer_tpid", a.outer_tpid, b.outer_tpid, kPorts, kRestart);
  refuse("ports.xdp_generic", fmt::format("{}", a.xdp_generic), fmt::format("{}", b.xdp_generic),
         "the attach mode is chosen when a link is created",
         "needs `xbngd --teardown` (stops forwarding) and a fresh start");
  refuse("ports.xdp_attach", a.xdp_attach, b.xdp_attach,
         "the programs are attached to the ports at start",
         "restart xbngd to apply it (the switch detaches one attach before it makes the other: "
         "frames in between reach the kernel unprocessed)");
  refuse("ports.xdp_priority", fmt::format("{}", a.xdp_priority), fmt::format("{}", b.xdp_priority),
         "the dispatcher's order is set when xbng attaches", kRestart);
  refuse("security.mac_policy", a.mac_policy, b.mac_policy, kPorts, kRestart);
  refuse("gateway.ipv4", a.gateway_ipv4, b.gateway_ipv4, kPorts, kRestart);
  refuse("gateway.ipv6", a.gateway_ipv6, b.gateway_ipv6, kPorts, kRestart);
  refuse("icmp.rate_per_sec", fmt::format("{}", a.icmp_rate_per_sec),
         fmt::format("{}", b.icmp_rate_per_sec),
         "a `const volatile` of the XDP program, frozen when it is loaded", kRestart);
  refuse("icmp.burst", fmt::format("{}", a.icmp_burst), fmt::format("{}", b.icmp_burst),
         "a `const volatile` of the XDP program, frozen when it is loaded", kRestart);
  refuse("limits.max_subscribers", fmt::format("{}", a.max_subscribers),
         fmt::format("{}", b.max_subscribers), "a BPF map's size is fixed at creation", kTeardown);
  refuse("limits.direct_slots", fmt::format("{}", a.direct_slots),
         fmt::format("{}", b.direct_slots), "a BPF map's size is fixed at creation", kTeardown);
  refuse("limits.direct_slots_v6", fmt::format("{}", a.direct_slots_v6),
         fmt::format("{}", b.direct_slots_v6), "a BPF map's size is fixed at creation", kTeardown);
  refuse("limits.direct_subscriber_slots", fmt::format("{}", a.direct_subscriber_slots),
         fmt::format("{}", b.direct_subscriber_slots), "a BPF map's size is fixed at creation",
         kTeardown);
  refuse("limits.events_per_sec", fmt::format("{}", a.events_per_sec),
         fmt::format("{}", b.events_per_sec),
         "a `const volatile` of the XDP program, frozen when it is loaded", kRestart);
  refuse("limits.unknown_event_interval_ms", fmt::format("{}", a.unknown_interval_ms),
         fmt::format("{}", b.unknown_interval_ms),
         "a `const volatile` of the XDP program, frozen when it is loaded", kRestart);
  refuse("bpf.bpffs", a.bpffs, b.bpffs, "the pins live there", kTeardown);
  refuse("punt/dhcp/dhcpv6/ra", bringup_text(a), bringup_text(b),
         "punt limits are `const volatile`s of the XDP program; the servers are built at start",
         kRestart);
}

// The gRPC server, the fleet's etcd client and the API's bounds.
void refuse_api_changes(const Config& a, const Config& b, ReloadPlan* p) {
  const Refuser refuse{p};
  constexpr const char* kGrpc = "the gRPC server binds and loads its credentials at start";
  refuse("grpc.listen", a.grpc, b.grpc, kGrpc, kRestart);
  refuse("grpc.tls_cert", a.tls_cert, b.tls_cert, kGrpc, kRestart);
  refuse("grpc.tls_key", a.tls_key, b.tls_key, kGrpc, kRestart);
  refuse("grpc.tls_client_ca", a.tls_client_ca, b.tls_client_ca, kGrpc, kRestart);
  refuse("grpc.insecure_tcp", fmt::format("{}", a.insecure_tcp), fmt::format("{}", b.insecure_tcp),
         kGrpc, kRestart);
  constexpr const char* kEtcd = "the fleet reconciler connects and reads its prefix at start";
  refuse("etcd.endpoints", join(a.etcd_endpoints), join(b.etcd_endpoints), kEtcd, kRestart);
  refuse("etcd.node", a.etcd_node, b.etcd_node, kEtcd, kRestart);
  refuse(
      "ha (group, member, priority, preempt, lease_ttl_s, virtual_mac, VIPs)",
      fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", a.ha_group, a.ha_member, a.ha_priority, a.ha_preempt,
                  a.ha_lease_ttl_s, a.ha_virtual_mac, a.ha_uplink_vip_v4, a.ha_uplink_vip_v6),
      fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", b.ha_group, b.ha_member, b.ha_priority, b.ha_preempt,
                  b.ha_lease_ttl_s, b.ha_virtual_mac, b.ha_uplink_vip_v4, b.ha_uplink_vip_v6),
      "the HA group is joined at start", kRestart);
  refuse("etcd (TLS, credentials, status_ttl, full_read_readers)",
         fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", a.etcd_ca, a.etcd_cert, a.etcd_key, a.etcd_username,
                     a.etcd_password.empty() ? "" : "*", a.etcd_password_file, a.etcd_status_ttl,
                     a.etcd_full_read_readers),
         fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", b.etcd_ca, b.etcd_cert, b.etcd_key, b.etcd_username,
                     b.etcd_password.empty() ? "" : "*", b.etcd_password_file, b.etcd_status_ttl,
                     b.etcd_full_read_readers),
         kEtcd, kRestart);
  refuse("grpc.tls_no_client_auth", fmt::format("{}", a.tls_no_client_auth),
         fmt::format("{}", b.tls_no_client_auth), kGrpc, kRestart);
  for (auto [key, x, y] :
       {std::tuple{"api.max_connections", a.api_max_connections, b.api_max_connections},
        std::tuple{"api.max_request_bytes", a.api_max_request_bytes, b.api_max_request_bytes},
        std::tuple{"api.max_watchers", a.api_max_watchers, b.api_max_watchers},
        std::tuple{"api.watcher_queue", a.api_watcher_queue, b.api_watcher_queue}})
    refuse(key, fmt::format("{}", x), fmt::format("{}", y), kGrpc, kRestart);
}

}  // namespace

ReloadPlan plan_reload(const Config& a, const Config& b) {
  ReloadPlan p;
  plan_live_changes(a, b, &p);
  // Everything else is fixed while xbngd runs.
  refuse_dataplane_changes(a, b, &p);
  refuse_api_changes(a, b, &p);
  return p;
}

}  // namespace xbng::agent
