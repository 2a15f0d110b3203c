#include "store/subscriber.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

bool SubscriberSpec::same_provisioning(const SubscriberSpec& o) const {
  return key == o.key && has_mac == o.has_mac && (!has_mac || mac == o.mac) &&
         has_ipv4 == o.has_ipv4 && (!has_ipv4 || ipv4 == o.ipv4) && has_ipv6 == o.has_ipv6 &&
         (!has_ipv6 || ipv6 == o.ipv6) && prefixes == o.prefixes && has_policy == o.has_policy &&
         (!has_policy || policy == o.policy) && mac_policy == o.mac_policy;
}

PolicySpec PortResolver::policy_of(const SubscriberSpec& s) const {
  if (s.has_policy) return s.policy;
  return default_policy ? default_policy(s.key.ifindex) : PolicySpec{};
}

uint32_t policy_byte_ns_fp(uint64_t rate_bps) {
  if (rate_bps == 0) return 0;
  constexpr uint64_t k = 8000000000ull << XBNG_POLICE_FP_SHIFT;  // ns per byte at 1 bit/s
  return static_cast<uint32_t>((k + rate_bps / 2) / rate_bps);
}

std::optional<std::string> check_policy(const PolicySpec& p, uint32_t max_packet) {
  auto dir = [&](const char* d, uint64_t rate, uint64_t burst) -> std::optional<std::string> {
    if (rate == 0) {
      if (burst != 0)
        return fmt::format(
            "{}_burst_bytes {} is set but {}_rate_bps is 0 (unlimited): set a rate "
            "or a burst of 0",
            d, burst, d);
      return std::nullopt;
    }
    if (rate < kMinRateBps || rate > kMaxRateBps)
      return fmt::format("{}_rate_bps {} is outside {}..{} bits/s (0 = unlimited)", d, rate,
                         kMinRateBps, kMaxRateBps);
    if (burst < max_packet)
      return fmt::format(
          "{}_burst_bytes {} is smaller than one maximum-size packet ({} bytes, "
          "the port's MTU): no such packet could ever pass",
          d, burst, max_packet);
    if (burst > kMaxBurstBytes)
      return fmt::format("{}_burst_bytes {} is above {} (1 GiB)", d, burst, kMaxBurstBytes);
    return std::nullopt;
  };
  if (auto e = dir("up", p.up_rate, p.up_burst)) return e;
  return dir("down", p.down_rate, p.down_burst);
}

std::optional<std::string> check_vid(uint32_t vid) {
  if (vid < 1 || vid > 4094) return std::string("is outside 1..4094");
  return std::nullopt;
}

std::optional<std::string> check_ipv4_host(uint32_t be) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(&be);
  if (b[0] == 0) return std::string("is in 0.0.0.0/8 (this network)");
  if (b[0] == 127) return std::string("is in 127.0.0.0/8 (loopback)");
  if (b[0] >= 224 && b[0] <= 239) return std::string("is in 224.0.0.0/4 (multicast)");
  if (b[0] >= 240) return std::string("is in 240.0.0.0/4 (reserved/broadcast)");
  return std::nullopt;
}

std::optional<std::string> check_ipv6_host(const Ipv6& a) {
  if ((a[0] & 0xe0) != 0x20) return std::string("is outside 2000::/3 (global unicast)");
  return std::nullopt;
}

std::optional<std::string> check_mac(const Mac& m) {
  if (mac_is_zero(m.data())) return std::string("is the zero MAC");
  if (mac_is_multicast(m.data()))
    return std::string("is a multicast/broadcast MAC (group bit set)");
  return std::nullopt;
}

std::string quote_value(std::string_view v, size_t max) {
  std::string out = "\"";
  const std::string_view shown = v.substr(0, max);
  for (unsigned char c : shown) {
    if (c == '"' || c == '\\') out += '\\';
    if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  out += '"';
  if (v.size() > max) out += fmt::format("… ({} bytes)", v.size());
  return out;
}

namespace {

grpc::Status bad(std::string_view where, std::string_view field, std::string_view value,
                 std::string_view why) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      fmt::format("{}: field {}: {} {}", where, field, quote_value(value), why));
}

grpc::Status key_fields(const std::string& port, uint32_t outer, uint32_t inner,
                        const PortResolver& ports, std::string_view where, SubKey* out) {
  if (port.empty()) return bad(where, "port", port, "is empty (an access port name is required)");
  auto ifx = ports.access_ifindex(port);
  if (!ifx) return bad(where, "port", port, "is not a configured access port");
  if (auto e = check_vid(outer)) return bad(where, "outer_vlan", std::to_string(outer), *e);
  if (auto e = check_vid(inner)) return bad(where, "inner_vlan", std::to_string(inner), *e);
  *out = SubKey{};
  out->ifindex = *ifx;
  out->outer_vid = static_cast<uint16_t>(outer);
  out->inner_vid = static_cast<uint16_t>(inner);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status validate_key(const xbng::v1::SubscriberKey& in, const PortResolver& ports,
                          std::string_view where, SubKey* out) {
  return key_fields(in.port(), in.outer_vlan(), in.inner_vlan(), ports, where, out);
}

grpc::Status validate_subscriber(const xbng::v1::Subscriber& in, const PortResolver& ports,
                                 std::string_view where, SubscriberSpec* out) {
  SubscriberSpec s;
  if (auto st = key_fields(in.port(), in.outer_vlan(), in.inner_vlan(), ports, where, &s.key);
      !st.ok())
    return st;
  if (!in.mac().empty()) {
    auto m = parse_mac(in.mac());
    if (!m) return bad(where, "mac", in.mac(), "is not a MAC address (aa:bb:cc:dd:ee:ff)");
    if (auto e = check_mac(*m)) return bad(where, "mac", in.mac(), *e);
    s.has_mac = true;
    s.mac = *m;
  }
  if (!in.ipv4().empty()) {
    auto a = parse_ipv4(in.ipv4());
    if (!a) return bad(where, "ipv4", in.ipv4(), "is not an IPv4 address");
    if (auto e = check_ipv4_host(*a)) return bad(where, "ipv4", in.ipv4(), *e);
    s.has_ipv4 = true;
    s.ipv4 = *a;
  }
  if (!in.ipv6().empty()) {
    auto a = parse_ipv6(in.ipv6());
    if (!a) return bad(where, "ipv6", in.ipv6(), "is not an IPv6 address");
    if (auto e = check_ipv6_host(*a)) return bad(where, "ipv6", in.ipv6(), *e);
    s.has_ipv6 = true;
    s.ipv6 = *a;
  }
  if (!s.has_ipv4 && !s.has_ipv6)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        fmt::format("{}: fields ipv4 and ipv6 are both empty: at least one address "
                                    "is required",
                                    where));
  for (int i = 0; i < in.ipv6_prefixes_size(); ++i) {
    const std::string& t = in.ipv6_prefixes(i);
    // The field name is formatted only on error (hot path of bulk loads).
    auto field = [i] { return fmt::format("ipv6_prefixes[{}]", i); };
    auto p = parse_prefix(t, 6);
    if (!p) return bad(where, field(), t, "is not an IPv6 prefix (ADDR/LEN)");
    if (p->len < kMinV6PrefixLen || p->len > kMaxV6PrefixLen)
      return bad(where, field(), t,
                 fmt::format("has length /{}: allowed /{}../{}", p->len, kMinV6PrefixLen,
                             kMaxV6PrefixLen));
    if (!host_bits_zero(p->addr.data(), 16, p->len))
      return bad(where, field(), t, "has host bits set");
    Ipv6 a;
    std::copy(p->addr.begin(), p->addr.end(), a.begin());
    if (auto e = check_ipv6_host(a)) return bad(where, field(), t, *e);
    s.prefixes.push_back(*p);
  }
  for (int i = 0; i < in.ipv4_prefixes_size(); ++i) {
    const std::string& t = in.ipv4_prefixes(i);
    // The field name is formatted only on error (hot path of bulk loads).
    auto field = [i] { return fmt::format("ipv4_prefixes[{}]", i); };
    auto p = parse_prefix(t, 4);
    if (!p) return bad(where, field(), t, "is not an IPv4 prefix (A.B.C.D/LEN)");
    if (p->len < kMinV4PrefixLen || p->len > kMaxV4PrefixLen)
      return bad(where, field(), t,
                 fmt::format("has length /{}: allowed /{}../{}", p->len, kMinV4PrefixLen,
                             kMaxV4PrefixLen));
    if (!host_bits_zero(p->addr.data(), 4, p->len))
      return bad(where, field(), t, "has host bits set");
    uint32_t a;
    std::memcpy(&a, p->addr.data(), 4);
    if (auto e = check_ipv4_host(a)) return bad(where, field(), t, *e);
    s.prefixes.push_back(*p);
  }
  if (in.has_policy()) {
    const auto& pp = in.policy();
    s.has_policy = true;
    s.policy = PolicySpec{pp.up_rate_bps(), pp.up_burst_bytes(), pp.down_rate_bps(),
                          pp.down_burst_bytes()};
    if (auto e = check_policy(s.policy, ports.max_packet_of(s.key.ifindex)))
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          fmt::format("{}: field policy: {}", where, *e));
  }
  if (static_cast<int>(in.mac_policy()) < 0 ||
      static_cast<int>(in.mac_policy()) > XBNG_MAC_POLICY_ENFORCE)
    return bad(where, "mac_policy", fmt::format("{}", static_cast<int>(in.mac_policy())),
               "is not a MacPolicy (0..3)");
  s.mac_policy = static_cast<uint8_t>(in.mac_policy());
  std::sort(s.prefixes.begin(), s.prefixes.end());
  for (size_t i = 1; i < s.prefixes.size(); ++i)
    if (s.prefixes[i] == s.prefixes[i - 1])
      return bad(where, s.prefixes[i].family == 6 ? "ipv6_prefixes" : "ipv4_prefixes",
                 format_prefix(s.prefixes[i]), "is listed twice");
  *out = std::move(s);
  return grpc::Status::OK;
}

void spec_to_proto(const SubscriberSpec& s, const PortResolver& ports, xbng::v1::Subscriber* out) {
  out->set_port(ports.name(s.key.ifindex));
  out->set_outer_vlan(s.key.outer_vid);
  out->set_inner_vlan(s.key.inner_vid);
  if (s.has_mac) out->set_mac(format_mac(s.mac.data()));
  if (s.has_ipv4) out->set_ipv4(format_ipv4(s.ipv4));
  if (s.has_ipv6) out->set_ipv6(format_ipv6(s.ipv6.data()));
  out->set_mac_policy(static_cast<xbng::v1::MacPolicy>(s.mac_policy));
  for (const auto& p : s.prefixes) {
    if (p.family == 6)
      out->add_ipv6_prefixes(format_prefix(p));
    else
      out->add_ipv4_prefixes(format_prefix(p));
  }
  auto put = [](const PolicySpec& p, xbng::v1::Policy* o) {
    o->set_up_rate_bps(p.up_rate);
    o->set_up_burst_bytes(p.up_burst);
    o->set_down_rate_bps(p.down_rate);
    o->set_down_burst_bytes(p.down_burst);
  };
  if (s.has_policy) put(s.policy, out->mutable_policy());
  put(ports.policy_of(s), out->mutable_effective_policy());
}

std::string key_to_string(const SubKey& k, const PortResolver& ports) {
  return fmt::format("{}/{}/{}", ports.name(k.ifindex), k.outer_vid, k.inner_vid);
}

}  // namespace xbng::agent
