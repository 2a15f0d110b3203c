#include "dataplane/host_services.h"

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>

#include "xbng/abi.h"

namespace xbng::agent {

namespace {

struct ProtoName {
  const char* name;
  uint8_t proto;
  bool has_ports;
};
constexpr ProtoName kProtos[] = {{"tcp", 6, true},   {"udp", 17, true},     {"sctp", 132, true},
                                 {"icmp", 1, false}, {"icmpv6", 58, false}, {"gre", 47, false},
                                 {"esp", 50, false}};

bool has_ports(uint8_t proto) { return proto == 6 || proto == 17 || proto == 132; }

}  // namespace

std::optional<std::string> parse_local_service(std::string_view s, LocalService* out) {
  const auto slash = s.find('/');
  const std::string_view p = s.substr(0, slash);
  LocalService r;
  bool found = false;
  for (const auto& n : kProtos)
    if (p == n.name) r.proto = n.proto, found = true;
  if (!found) {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || v > 255)
      return fmt::format(
          "\"{}\": expected tcp/PORT, udp/PORT, sctp/PORT, tcp, udp, icmp, icmpv6 "
          "or an IP protocol number",
          s.substr(0, 64));
    r.proto = static_cast<uint8_t>(v);
  }
  if (slash != std::string_view::npos) {
    const std::string_view ps = s.substr(slash + 1);
    if (!has_ports(r.proto))
      return fmt::format("\"{}\": only tcp, udp and sctp have ports", s.substr(0, 64));
    unsigned v = 0;
    auto [end, ec] = std::from_chars(ps.data(), ps.data() + ps.size(), v);
    if (ps.empty() || ec != std::errc() || end != ps.data() + ps.size() || v < 1 || v > 65535)
      return fmt::format("\"{}\": port expected 1..65535", s.substr(0, 64));
    r.port = static_cast<uint16_t>(v);
  }
  *out = r;
  return std::nullopt;
}

std::string format_local_service(const LocalService& s) {
  for (const auto& n : kProtos)
    if (n.proto == s.proto)
      return s.port ? fmt::format("{}/{}", n.name, s.port) : std::string(n.name);
  return s.port ? fmt::format("{}/{}", s.proto, s.port) : fmt::format("{}", s.proto);
}

void write_local_services(int fd, const std::vector<LocalService>& services) {
  if (services.size() > XBNG_LOCAL_ALLOW_ENTRIES)
    throw std::runtime_error(fmt::format("{} services allowed to the host, at most {}",
                                         services.size(), XBNG_LOCAL_ALLOW_ENTRIES));
  // Add the wanted entries first, then remove the others: a reload never
  // leaves a moment where an allowed service is refused.
  for (const auto& s : services) {
    struct xbng_local_svc k {};
    k.proto = s.proto;
    k.port = s.port;
    uint8_t one = 1;
    if (bpf_map_update_elem(fd, &k, &one, BPF_ANY) != 0)
      throw std::runtime_error(fmt::format("writing map local_allow ({}): {}",
                                           format_local_service(s), std::strerror(errno)));
  }
  std::vector<struct xbng_local_svc> stale;
  struct xbng_local_svc k {
  }, next{};
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, &next) == 0) {
    bool wanted = false;
    for (const auto& s : services) wanted |= s.proto == next.proto && s.port == next.port;
    if (!wanted) stale.push_back(next);
    k = next;
    prev = &k;
  }
  for (const auto& s : stale) bpf_map_delete_elem(fd, &s);
}

}  // namespace xbng::agent
