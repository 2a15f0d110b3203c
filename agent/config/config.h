// xbngd configuration: a TOML file (--config) overridden by command-line
// flags. deploy/xbngd.toml is the annotated reference; in short:
//   [ports]   access = ["eth1", { name = "eth2", outer_tpid = "0x8100", subscriber_mtu = 1500,
//             mss_clamp = true, pools = ["100.64.0.0/16", "2001:db8:1000::/36"] }]
//             (or [[ports.access]] tables), uplink = ["eth0"] (or tables
//             { name, icmp_source_ipv4, icmp_source_ipv6 }), outer_tpid = "0x88a8",
//   [ports]   access = ["eth1", { name = "eth2", outer_tpid = "0x8100", mtu = 1508 }]
//             (a port table may also hold `policy = { up_rate_bps = .., up_burst_bytes = ..,
//              down_rate_bps = .., down_burst_bytes = .. }`: its default rate plan)
//             (or [[ports.access]] tables), uplink = ["eth0"], outer_tpid = "0x88a8",
//             xdp_generic = false, xdp_attach = "link" | "libxdp", xdp_priority = 100
//   [icmp]    rate_per_sec = 1000, burst = 50 (ICMP errors sent from XDP, per CPU)
//   [gateway] ipv4 = "100.64.0.1", ipv6 = "2001:db8::1"
//   [limits]  max_subscribers = 1000000, events_per_sec = 1000, unknown_event_interval_ms = 1000,
//             direct_slots = 0 (IPv4 host routes of the pools in a direct array; 0: off),
//             direct_slots_v6 = 0 (IPv6 /64s and /128s of the pools in a direct array; 0: off),
//             direct_subscriber_slots = 0 (subscribers of the ports' direct_svlans in a
//             direct array, 4096 slots an S-VLAN; 0: off)
//   [grpc]    listen = "unix:///run/xbng/xbngd.sock", tls_cert, tls_key, tls_client_ca,
//             insecure_tcp = false
//   [api]     max_connections = 1024, max_request_bytes = 524288, max_watchers = 16,
//             watcher_queue = 65536  (bounded API resources)
//   [grpc]    tls_no_client_auth = false (TLS without client certificates, explicitly)
//   [metrics] listen = "127.0.0.1:9469" ("" disables)
//   [bpf]     bpffs = "/sys/fs/bpf/xbng"
//   [log]     level = "info"
//   [etcd]    (fleet mode, docs/fleet.md) endpoints = ["10.0.0.1:2379", ...] (--etcd a,b,c),
//             node = "bng1" (--node), ca, cert, key (TLS to etcd: --etcd-ca/--etcd-cert/
//             --etcd-key), username, password or password_file (--etcd-username,
//             --etcd-password-file), status_ttl = 10 (seconds), full_read_readers = 4
//             (concurrent range requests of a full read, 1..8)
//   [security] mac_policy = "learn-once" | "follow" | "enforce",
//             allow_to_host = ["tcp/22", "icmp"], reserved = ["192.0.2.0/24"]
//             (per access port too: { name = "eth1", mac_policy = "enforce" })
//   [punt]    enabled = true, subscriber_rate = 10, subscriber_burst = 20, port_rate = 20000,
//             transport = "ringbuf" | "af_xdp"
//   [dhcp]    enabled = true, lease_time = 3600, dns = ["192.0.2.53"], subnet_mask = "",
//             lease_file = "/var/lib/xbng/leases.json"
//   per access port: dhcp_lease_time, dhcp_dns, dhcp_subnet_mask, auth = "none" | "radius",
//             dhcp = "server" | "relay"
//   [relay]   the DHCP relay's servers and option 82: config/relay_config.h
//   [dhcpv6]  enabled = true, preferred_lifetime = 3600, valid_lifetime = 7200, t1 = 1800,
//             t2 = 2880, dns = [], rapid_commit = true,
//             duid_file = "/var/lib/xbng/dhcpv6-server-duid"
//   [radius], [plans] RADIUS servers, CoA, rate plans by name: config/radius_config.h
//   [ra]      enabled = true, managed = true, other = true, router_lifetime = 1800,
//             mtu = 1500, dns = [] (RDNSS; default: [dhcpv6] dns), dns_lifetime = 1800,
//             slaac = false, unsolicited_interval = 600
//   [ha]      group = "bng-pair-1", member = "a", priority = 100, preempt = false,
//             lease_ttl_s = 2, virtual_mac = "02:00:5e:00:01:01" (default: from the group),
//             uplink_vip_v4 = "192.0.2.1/24", uplink_vip_v6 = "2001:db8:ffff::1/64"
// Unknown sections or keys are errors (a typo must not be silently ignored).
// Nothing here touches the system: no BPF, netlink or sockets (check_config
// reads the TLS files to prove they are readable, nothing more).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/dataplane.h"
#include "fleet/fleet.h"
#include "ha/ha.h"
#include "bringup/punt/dispatcher.h"
#include "api/service.h"
#include "config/radius_config.h"
#include "config/relay_config.h"

namespace xbng::agent {

// Per access port settings; empty/0 = the global value (outer TPID and
// gateways) or the netdev's MTU.
// Router correctness: subscriber_mtu (0 = 1500, or `mtu` - 8 when only the older `mtu`
// key is given), mss_clamp (default on), pools (CIDR prefixes).
struct AccessPortConfig {
  std::string outer_tpid;
  uint64_t mtu = 0;  // older form: subscriber_mtu + 8
  std::string gateway_ipv4, gateway_ipv6;
  uint64_t subscriber_mtu = 0;
  std::optional<bool> mss_clamp;
  std::vector<std::string> pools;
  // S-VLAN ranges ("A-B" or "A") whose subscribers live in the direct
  // subscriber array (with limits.direct_subscriber_slots).
  std::vector<std::string> direct_svlans;
  // Default rate plan: `policy = { up_rate_bps, up_burst_bytes, down_rate_bps,
  // down_burst_bytes }`, the rate plan of this port's subscribers that have
  // none of their own (xbng.v1.Policy; absent = unlimited). Applied at start
  // (subscribers written under another default are rewritten then).
  PolicySpec policy;
  std::string mac_policy;  // "" = security.mac_policy
  // Bring-up (DHCP/RA on the punt path); unset = the [dhcp] value.
  std::optional<uint64_t> dhcp_lease_time;
  std::optional<std::vector<std::string>> dhcp_dns;
  std::optional<std::string> dhcp_subnet_mask;
  // Subscribers created on demand: "" or "none" (only provisioned keys are
  // served), or "radius" (the first DHCP/RS of an unknown key asks [radius]
  // for an Access-Accept that creates the subscriber).
  std::string auth;
  // DHCP on this port: "" or "server" (xbngd answers from the provisioned
  // bindings), or "relay" (relayed to [relay]'s servers; the subscriber is
  // born from the lease, docs/relay.md).
  std::string dhcp;
  friend bool operator==(const AccessPortConfig&, const AccessPortConfig&) = default;
};

// Per uplink: the source of ICMP errors sent from XDP toward the network;
// empty = the uplink's first global address of that family.
struct UplinkPortConfig {
  std::string icmp_source_ipv4, icmp_source_ipv6;
  friend bool operator==(const UplinkPortConfig&, const UplinkPortConfig&) = default;
};

inline constexpr const char* kDefaultMetricsListen = "127.0.0.1:9469";

// SCHED_FIFO priority of the control-frame threads of a host whose ports
// relay, unless punt.realtime_priority says otherwise: the low end of the
// real-time range, below the kernel's threaded interrupts (50), above every
// thread of the default policy. A relayed CPE's every message crosses those
// threads twice; at the default policy they wait for a CPU behind the
// host's other work (docs/relay.md, "Measured").
constexpr int kRelayRealtimePriority = 10;

struct Config {
  std::vector<std::string> access, uplink;
  std::map<std::string, AccessPortConfig> access_options;  // by access port name
  std::map<std::string, UplinkPortConfig> uplink_options;  // by uplink name
  uint64_t icmp_rate_per_sec = XBNG_DEFAULT_ICMP_RATE;     // 0: no ICMP errors
  uint64_t icmp_burst = XBNG_DEFAULT_ICMP_BURST;
  std::string gateway_ipv4, gateway_ipv6;
  std::string grpc = "unix:///run/xbng/xbngd.sock";
  std::string tls_cert, tls_key, tls_client_ca;
  bool insecure_tcp = false;
  std::string metrics_listen = kDefaultMetricsListen;
  std::string bpffs = "/sys/fs/bpf/xbng";
  uint64_t max_subscribers = XBNG_DEFAULT_MAX_SUBSCRIBERS;
  uint64_t direct_slots = 0;     // slots of the IPv4 direct array (64 bytes each), 0: none
  uint64_t direct_slots_v6 = 0;  // slots of the IPv6 direct array (64 bytes each), 0: none
  // Slots of the direct subscriber array (64 bytes each, 4096 an S-VLAN), 0: none.
  uint64_t direct_subscriber_slots = 0;
  std::string outer_tpid = "0x88a8";
  bool xdp_generic = false;
  // How the programs reach each port's XDP hook: "link" (xbng's own pinned
  // bpf_link, the port for xbng alone) or "libxdp" (libxdp's dispatcher, at
  // run priority xdp_priority, after the operator's programs of lower ones).
  std::string xdp_attach = "link";
  uint64_t xdp_priority = 100;
  uint64_t events_per_sec = XBNG_DEFAULT_EVENTS_PER_SEC;
  uint64_t unknown_interval_ms = XBNG_DEFAULT_UNKNOWN_INTERVAL_NS / 1000000;
  std::string log_level = "info";
  // Fleet mode (docs/fleet.md): no endpoints = single node driven by gRPC.
  std::vector<std::string> etcd_endpoints;
  std::string etcd_node;
  std::string etcd_ca, etcd_cert, etcd_key;
  std::string etcd_username, etcd_password, etcd_password_file;
  uint64_t etcd_status_ttl = 10;
  uint64_t etcd_full_read_readers = 4;  // concurrent range requests of a full read
  // ---- bounded API resources, TLS client authentication ----
  bool tls_no_client_auth = false;              // grpc.tls_no_client_auth
  uint64_t api_max_connections = 1024;          // api.max_connections
  uint64_t api_max_request_bytes = 512u << 10;  // api.max_request_bytes
  uint64_t api_max_watchers = 16;               // api.max_watchers
  uint64_t api_watcher_queue = 65536;           // api.watcher_queue (events)
  // [security]: MAC policy, reserved ranges, services allowed to the host
  std::string mac_policy = "learn-once";   // of access ports without their own
  std::vector<std::string> allow_to_host;  // "tcp/22", "udp/53", "icmp", ...
  std::vector<std::string> reserved;       // prefixes never given to subscribers
  // Bring-up: [punt] and [dhcp].
  bool punt_enabled = true;
  uint64_t punt_subscriber_rate = XBNG_DEFAULT_PUNT_SUB_RATE;
  uint64_t punt_subscriber_burst = XBNG_DEFAULT_PUNT_SUB_BURST;
  uint64_t punt_port_rate = XBNG_DEFAULT_PUNT_PORT_RATE;
  // How punted frames reach xbngd: "ringbuf" (copied into the BPF ring
  // buffer) or "af_xdp" (redirected to AF_XDP sockets, libxdp).
  std::string punt_transport = "ringbuf";
  // SCHED_FIFO priority of the threads that carry control frames (the punt
  // RX thread, the relays' socket threads); 0: the default policy. Unset
  // ("auto", the default): kRelayRealtimePriority when an access port
  // relays (its CPEs wait for the ISP's servers through those threads),
  // otherwise the default policy.
  std::optional<uint64_t> punt_realtime_priority;
  bool dhcp_enabled = true;
  uint64_t dhcp_lease_time = 3600;
  std::vector<std::string> dhcp_dns;
  std::string dhcp_subnet_mask;  // "" = /32 with option 121
  // [dhcpv6]
  bool dhcpv6_enabled = true;
  uint64_t dhcpv6_preferred = 3600, dhcpv6_valid = 7200, dhcpv6_t1 = 1800, dhcpv6_t2 = 2880;
  std::vector<std::string> dhcpv6_dns;
  bool dhcpv6_rapid_commit = true;
  std::string duid_file;  // "" = <state dir>/dhcpv6-server-duid (state dir: see lease_file)
  // [ra]
  bool ra_enabled = true, ra_managed = true, ra_other = true, ra_slaac = false;
  uint64_t ra_router_lifetime = 1800, ra_mtu = 1500, ra_dns_lifetime = 1800;
  std::optional<std::vector<std::string>> ra_dns;  // unset: [dhcpv6] dns
  uint64_t ra_unsolicited_interval = 600;
  // "" = <state dir>/leases.json; state dir = /var/lib/xbng with the default
  // bpffs, else /run/xbng/<basename of bpffs> (labs never share nor pile up state).
  std::string lease_file;
  // [radius] and [plans] (radius_config.h).
  RadiusConfig radius;
  PlanTable plans;
  // [relay] (relay_config.h).
  RelayConfig relay;
  // [ha]: an active/standby group elected through etcd (docs/fleet.md, "High
  // availability"); no group = no HA (always active).
  std::string ha_group, ha_member;
  uint64_t ha_priority = 100;
  bool ha_preempt = false;
  uint64_t ha_lease_ttl_s = 2;
  std::string ha_virtual_mac;  // "" = derived from the group name (ha_default_virtual_mac)
  std::string ha_uplink_vip_v4, ha_uplink_vip_v6;  // "A.B.C.D/N", "X::Y/N"; "" = none
};
// The access ports with dhcp = "relay".
std::vector<std::string> relay_ports_of(const Config& cfg);

// Merges the TOML file into cfg. Throws std::runtime_error naming the file,
// the key and the problem (syntax errors with line:column).
void load_config_file(const std::string& path, Config* cfg);

struct ConfigCheck {
  std::vector<std::string> errors;    // the config cannot be used
  std::vector<std::string> warnings;  // usable, but probably not what was meant
  bool ok() const { return errors.empty(); }
};
// Every check that needs no access to the system: ports given and not
// duplicated, interface name syntax, addresses, TPIDs, MTUs, limits, listen
// strings, TCP gRPC without TLS, TLS files readable, log level. Every problem
// is reported, not only the first.
ConfigCheck check_config(const Config& cfg);

// Converts a checked config. Throw std::runtime_error with every problem of
// check_config.
DataplaneOptions to_dataplane_options(const Config& cfg);
ServerOptions to_server_options(const Config& cfg);
// Fleet options when etcd endpoints are configured (reads password_file).
std::optional<FleetOptions> to_fleet_options(const Config& cfg);
// HA options when [ha] names a group (needs fleet mode).
std::optional<HaOptions> to_ha_options(const Config& cfg);
// security.allow_to_host parsed and deduplicated. Throws on a bad entry.
std::vector<LocalService> allow_to_host_of(const Config& cfg);
punt::BringupOptions to_bringup_options(const Config& cfg);
punt::BringupOptions to_bringup_options_unchecked(const Config& cfg);
// The store's write-ahead journal (journal.h). Runtime state, on
// tmpfs like the pins it describes: /run/xbng/store.journal for the default
// bpffs, else /run/xbng/<basename of bpffs>/store.journal.
std::string store_journal_path(const Config& cfg);

// "HOST:PORT" with HOST an IPv4 address, a bracketed IPv6 address or a
// host name. Returns the error, or nullopt and fills host/port.
std::optional<std::string> parse_listen(std::string_view s, std::string* host, uint16_t* port);

// SIGHUP: what a new config changes, split into what is applied live and
// what is refused (each refusal names the setting and how to apply it).
struct ReloadPlan {
  bool log_level = false;            // apply next.log_level
  bool metrics_listen = false;       // rebind the metrics server on next.metrics_listen
  bool allow_to_host = false;        // rewrite local_allow from next.allow_to_host
  bool reserved = false;             // new reserved ranges: check every subscriber again
  std::vector<std::string> applied;  // "log.level: info -> debug"
  std::vector<std::string> refused;  // "ports.access: [a] -> [a,b]: cannot change live; ..."
};
ReloadPlan plan_reload(const Config& running, const Config& next);

}  // namespace xbng::agent
