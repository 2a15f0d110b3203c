// xbngctl bpf dump: the pinned maps read directly with libbpf (no gRPC, no
// BPF object: the maps xbngd pinned under --bpffs).
#include <fmt/format.h>
#include <net/if.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "ctl/ctl.h"
#include "dataplane/dataplane.h"
#include "common/net.h"

namespace xbng::agent {

// ---- bpf dump -----------------------------------------------------------------

namespace {

std::string if_name(uint32_t ifx) {
  char buf[IF_NAMESIZE] = {};
  return if_indextoname(ifx, buf) ? std::string(buf) : fmt::format("if{}", ifx);
}

std::string key_str(const struct xbng_sub_key& k) {
  return fmt::format("{}/{}/{}", if_name(k.ifindex), k.outer_vid, k.inner_vid);
}

// One subscriber line; `map` names where it lives (the hash or the array).
void print_subscriber(const CtlOptions& o, const char* map, const struct xbng_sub_key& key,
                      const struct xbng_subscriber& s) {
  std::string mac = (s.flags & XBNG_SUB_F_MAC_VALID) ? format_mac(s.mac) : "-";
  std::string v4 = (s.flags & XBNG_SUB_F_HAS_IPV4) ? format_ipv4(s.ipv4) : "-";
  std::string v6 =
      (s.flags & XBNG_SUB_F_HAS_IPV6) ? format_ipv6(reinterpret_cast<const uint8_t*>(s.ipv6)) : "-";
  if (o.json)
    std::printf(
        "{\"map\":\"%s\",\"key\":\"%s\",\"mac\":\"%s\","
        "\"flags\":%u,\"ipv4\":\"%s\",\"ipv6\":\"%s\","
        "\"up_packets\":%llu,\"up_bytes\":%llu}\n",
        map, key_str(key).c_str(), mac.c_str(), s.flags, v4.c_str(), v6.c_str(),
        (unsigned long long)s.up_packets, (unsigned long long)s.up_bytes);
  else
    std::printf("%-20s %-17s 0x%04x %-15s %-39s %12llu %14llu\n", key_str(key).c_str(), mac.c_str(),
                s.flags, v4.c_str(), v6.c_str(), (unsigned long long)s.up_packets,
                (unsigned long long)s.up_bytes);
}

// Prints the subscribers, one line each: the hash's, then those of the
// direct array (at the keys its layout gives the slots); returns how many.
uint64_t dump_subscribers(const CtlOptions& o, const std::string& bpffs, const PinnedMaps& maps) {
  uint64_t nsubs = 0;
  if (!o.json)
    std::printf("# subscribers (%s)\n%-20s %-17s %-6s %-15s %-39s %12s %14s\n",
                map_pin_path(bpffs, MapId::kSubscribers).c_str(), "KEY", "MAC", "FLAGS", "IPV4",
                "IPV6", "UP_PKTS", "UP_BYTES");
  int rc = map_for_each(maps.fd(MapId::kSubscribers), sizeof(struct xbng_sub_key),
                        sizeof(struct xbng_subscriber), [&](const void* k, const void* v) {
                          struct xbng_sub_key key;
                          struct xbng_subscriber s;
                          std::memcpy(&key, k, sizeof key);
                          std::memcpy(&s, v, sizeof s);
                          ++nsubs;
                          print_subscriber(o, "subscribers", key, s);
                        });
  if (rc) throw std::runtime_error(fmt::format("reading subscribers: {}", std::strerror(-rc)));
  DirectSubLayout d;
  if ((rc = direct_sub_read_layout(maps.fd(MapId::kDirectSubRanges), &d)))
    throw std::runtime_error(fmt::format("reading direct_sub_ranges: {}", std::strerror(-rc)));
  if (!d.empty() && !o.json)
    std::printf("# direct_subscribers (%s)\n", map_pin_path(bpffs, MapId::kDirectSubs).c_str());
  rc = direct_sub_for_each(maps.fd(MapId::kDirectSubs), d,
                           [&](const struct xbng_sub_key& key, const struct xbng_subscriber& s) {
                             ++nsubs;
                             print_subscriber(o, "direct_subscribers", key, s);
                           });
  if (rc)
    throw std::runtime_error(fmt::format("reading direct_subscribers: {}", std::strerror(-rc)));
  return nsubs;
}

// The destination of a route map's key (`b`, as map `id` lays it out).
Prefix route_destination(MapId id, const uint8_t* b) {
  Prefix p;
  if (id == MapId::kRoutesV4) {
    p.family = 4, p.len = 32;
    std::memcpy(p.addr.data(), b, 4);
  } else if (id == MapId::kRoutesV6) {
    p.family = 6, p.len = 128;
    std::memcpy(p.addr.data(), b, 16);
  } else if (id == MapId::kRoutesV6_64) {
    p.family = 6, p.len = 64;
    std::memcpy(p.addr.data(), b, 8);
  } else {
    uint32_t len;
    std::memcpy(&len, b, 4);
    p.family = id == MapId::kPrefixesV4 ? 4 : 6;
    p.len = static_cast<uint8_t>(len);
    std::memcpy(p.addr.data(), b + 4, p.family == 4 ? 4 : 16);
  }
  return p;
}

// One route of map `id` to `p`: a table line, or a JSON line with --json.
void print_route(const CtlOptions& o, MapId id, const Prefix& p, const struct xbng_route& r) {
  const std::string mac = (r.flags & XBNG_ROUTE_F_MAC_VALID) ? format_mac(r.mac) : "-";
  if (o.json)
    std::printf(
        "{\"map\":\"%s\",\"destination\":\"%s\",\"owner\":\"%s\",\"mac\":\"%s\","
        "\"down_packets\":%llu,\"down_bytes\":%llu}\n",
        map_name(id), format_prefix(p).c_str(), key_str(r.sub).c_str(), mac.c_str(),
        (unsigned long long)r.down_packets, (unsigned long long)r.down_bytes);
  else
    std::printf("%-44s %-20s %-17s %12llu %14llu\n", format_prefix(p).c_str(),
                key_str(r.sub).c_str(), mac.c_str(), (unsigned long long)r.down_packets,
                (unsigned long long)r.down_bytes);
}

// Prints one route map (keys of `ks` bytes), one line a route; returns how many.
uint64_t dump_routes(const CtlOptions& o, const PinnedMaps& maps, MapId id, size_t ks) {
  uint64_t nroutes = 0;
  if (!o.json)
    std::printf("\n# %s\n%-44s %-20s %-17s %12s %14s\n", map_name(id), "DESTINATION", "OWNER",
                "MAC", "DOWN_PKTS", "DOWN_BYTES");
  int rc =
      map_for_each(maps.fd(id), ks, sizeof(struct xbng_route), [&](const void* k, const void* v) {
        struct xbng_route r;
        std::memcpy(&r, v, sizeof r);
        const Prefix p = route_destination(id, static_cast<const uint8_t*>(k));
        ++nroutes;
        print_route(o, id, p, r);
      });
  if (rc) throw std::runtime_error(fmt::format("reading {}: {}", map_name(id), std::strerror(-rc)));
  return nroutes;
}

// Prints the host routes of the direct arrays (the pools the pinned
// `direct_pools` and `direct_pools_v6` tables lay out), one section an
// array, as dump_routes does; returns how many.
uint64_t dump_direct(const CtlOptions& o, const PinnedMaps& maps) {
  DirectLayout d;
  if (int rc = direct_read_layout(maps.fd(MapId::kDirectPools), maps.fd(MapId::kDirectPoolsV6), &d))
    throw std::runtime_error(fmt::format("reading the direct tables: {}", std::strerror(-rc)));
  uint64_t nroutes = 0;
  for (MapId arr : {MapId::kDirectV4, MapId::kDirectV6}) {
    const bool v4 = arr == MapId::kDirectV4;
    const auto units = direct_units(v4 ? 4 : 6);
    uint64_t slots = 0;
    for (DirectUnit u : units) slots += d.slots(u);
    if (!o.json)
      std::printf("\n# %s (%zu pools, %llu slots)\n%-44s %-20s %-17s %12s %14s\n", map_name(arr),
                  v4 ? d.v4.size() : d.v6.size(), (unsigned long long)slots, "DESTINATION", "OWNER",
                  "MAC", "DOWN_PKTS", "DOWN_BYTES");
    for (DirectUnit u : units) {
      const MapId hash = direct_hash_map(u);
      int rc = direct_for_each(maps.fd(arr), d, u, [&](const void* k, const struct xbng_route& r) {
        ++nroutes;
        print_route(o, arr, route_destination(hash, static_cast<const uint8_t*>(k)), r);
      });
      if (rc)
        throw std::runtime_error(fmt::format("reading {}: {}", map_name(arr), std::strerror(-rc)));
    }
  }
  return nroutes;
}

}  // namespace

int ctl_bpf_dump(const CtlOptions& o, const std::string& bpffs) {
  PinnedMaps maps(bpffs);
  const uint64_t nsubs = dump_subscribers(o, bpffs, maps);
  uint64_t nroutes = 0;
  struct RouteMap {
    MapId id;
    size_t ks;
  };
  for (auto [id, ks] : {RouteMap{MapId::kRoutesV4, 4}, RouteMap{MapId::kRoutesV6, 16},
                        RouteMap{MapId::kRoutesV6_64, 8}, RouteMap{MapId::kPrefixesV4, 8},
                        RouteMap{MapId::kPrefixesV6, 20}})
    nroutes += dump_routes(o, maps, id, ks);
  nroutes += dump_direct(o, maps);
  if (!o.json) std::printf("\n-- %lu subscribers, %lu routes\n", nsubs, nroutes);
  return 0;
}

}  // namespace xbng::agent
