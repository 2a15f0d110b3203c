#include "api/convert.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/status.h"

namespace xbng::agent {

namespace {

absl::Status bad(std::string_view where, std::string_view field, std::string_view value,
                 std::string_view why) {
  return absl::Status(absl::StatusCode::kInvalidArgument,
                      fmt::format("{}: field {}: {} {}", where, field, quote_value(value), why));
}

absl::Status key_fields(const std::string& port, uint32_t outer, uint32_t inner,
                        const PortResolver& ports, std::string_view where, SubKey* out) {
  if (port.empty()) return bad(where, "port", port, "is empty (an access port name is required)");
  auto ifx = ports.access_ifindex(port);
  if (!ifx) return bad(where, "port", port, "is not a configured access port");
  if (auto st = check_vid(outer); !st.ok())
    return bad(where, "outer_vlan", std::to_string(outer), status_message(st));
  if (auto st = check_vid(inner); !st.ok())
    return bad(where, "inner_vlan", std::to_string(inner), status_message(st));
  *out = SubKey{};
  out->ifindex = *ifx;
  out->outer_vid = static_cast<uint16_t>(outer);
  out->inner_vid = static_cast<uint16_t>(inner);
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_key(const xbng::v1::SubscriberKey& in, const PortResolver& ports,
                          std::string_view where, SubKey* out) {
  return key_fields(in.port(), in.outer_vlan(), in.inner_vlan(), ports, where, out);
}

namespace {

// The MAC and host addresses of a subscriber (at least one address).
absl::Status subscriber_addresses(const xbng::v1::Subscriber& in, std::string_view where,
                                  SubscriberSpec& s, bool address_required) {
  if (!in.mac().empty()) {
    auto m = parse_mac(in.mac());
    if (!m) return bad(where, "mac", in.mac(), "is not a MAC address (aa:bb:cc:dd:ee:ff)");
    if (auto st = check_mac(*m); !st.ok()) return bad(where, "mac", in.mac(), status_message(st));
    s.has_mac = true;
    s.mac = *m;
  }
  if (!in.ipv4().empty()) {
    auto a = parse_ipv4(in.ipv4());
    if (!a) return bad(where, "ipv4", in.ipv4(), "is not an IPv4 address");
    if (auto st = check_ipv4_host(*a); !st.ok())
      return bad(where, "ipv4", in.ipv4(), status_message(st));
    s.has_ipv4 = true;
    s.ipv4 = *a;
  }
  if (!in.ipv6().empty()) {
    auto a = parse_ipv6(in.ipv6());
    if (!a) return bad(where, "ipv6", in.ipv6(), "is not an IPv6 address");
    if (auto st = check_ipv6_host(*a); !st.ok())
      return bad(where, "ipv6", in.ipv6(), status_message(st));
    s.has_ipv6 = true;
    s.ipv6 = *a;
  }
  if (!s.has_ipv4 && !s.has_ipv6 && address_required)
    return absl::Status(absl::StatusCode::kInvalidArgument,
                        fmt::format("{}: fields ipv4 and ipv6 are both empty: at least one address "
                                    "is required",
                                    where));
  return absl::OkStatus();
}

// The delegated and routed prefixes of a subscriber.
absl::Status subscriber_prefixes(const xbng::v1::Subscriber& in, std::string_view where,
                                 SubscriberSpec& s) {
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
    if (auto st = check_ipv6_host(a); !st.ok()) return bad(where, field(), t, status_message(st));
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
    if (auto st = check_ipv4_host(a); !st.ok()) return bad(where, field(), t, status_message(st));
    s.prefixes.push_back(*p);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_subscriber(const xbng::v1::Subscriber& in, const PortResolver& ports,
                                 std::string_view where, SubscriberSpec* out,
                                 bool address_required) {
  SubscriberSpec s;
  if (auto st = key_fields(in.port(), in.outer_vlan(), in.inner_vlan(), ports, where, &s.key);
      !st.ok())
    return st;
  if (auto st = subscriber_addresses(in, where, s, address_required); !st.ok()) return st;
  if (auto st = subscriber_prefixes(in, where, s); !st.ok()) return st;
  if (in.has_policy()) {
    const auto& pp = in.policy();
    s.has_policy = true;
    s.policy = PolicySpec{pp.up_rate_bps(), pp.up_burst_bytes(), pp.down_rate_bps(),
                          pp.down_burst_bytes()};
    if (auto st = check_policy(s.policy, ports.max_packet_of(s.key.ifindex)); !st.ok())
      return prefixed(st, fmt::format("{}: field policy: ", where));
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
  return absl::OkStatus();
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
  out->set_origin(static_cast<xbng::v1::Origin>(s.origin));
}

absl::Status validate_at(const xbng::v1::Subscriber& m, const PortResolver& ports, bool in_request,
                         size_t i, SubscriberSpec* out) {
  absl::Status st = validate_subscriber(m, ports, "", out);
  if (st.ok()) return st;
  return prefixed(st, in_request ? fmt::format("subscribers[{}]", i) : fmt::format("entry {}", i));
}

absl::Status validate_request(const std::vector<const xbng::v1::Subscriber*>& in,
                              const PortResolver& ports, std::vector<SubscriberSpec>* out,
                              Origin origin) {
  out->resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (absl::Status st = validate_at(*in[i], ports, true, i, &(*out)[i]); !st.ok()) return st;
    (*out)[i].origin = origin;
  }
  return absl::OkStatus();
}

absl::Status validate_keys(const std::vector<const xbng::v1::SubscriberKey*>& in,
                           const PortResolver& ports, std::vector<SubKey>* out) {
  out->resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    absl::Status st = validate_key(*in[i], ports, "", &(*out)[i]);
    if (!st.ok()) return prefixed(st, fmt::format("keys[{}]", i));  // formatted only on error
  }
  return absl::OkStatus();
}

StreamSource stream_source(std::function<bool(xbng::v1::Subscriber*)> read,
                           const PortResolver& ports, Origin origin) {
  // One message, reused: it keeps the memory of its strings, so receiving
  // allocates (almost) nothing; only its key is kept, for failure reports.
  auto m = std::make_shared<xbng::v1::Subscriber>();
  return [read = std::move(read), &ports, m, origin](StreamBatch* b, size_t max) {
    while (b->got < max) {
      if (!read(m.get())) return false;
      const size_t i = b->base + b->got++;
      b->keys.push_back({m->port(), m->outer_vlan(), m->inner_vlan()});
      SubscriberSpec sp;
      absl::Status st = validate_at(*m, ports, false, i, &sp);
      if (!st.ok()) {
        b->invalid.emplace_back(i, std::move(st));
        continue;
      }
      sp.origin = origin;
      b->specs.push_back(std::move(sp));
      b->idx.push_back(i);
    }
    return true;
  };
}

void counters_to_proto(const SubscriberCounters& c, xbng::v1::Counters* out) {
  out->set_up_packets(c.up_packets);
  out->set_up_bytes(c.up_bytes);
  out->set_down_packets(c.down_packets);
  out->set_down_bytes(c.down_bytes);
  out->set_up_policed_packets(c.up_policed_packets);
  out->set_up_policed_bytes(c.up_policed_bytes);
  out->set_down_policed_packets(c.down_policed_packets);
  out->set_down_policed_bytes(c.down_policed_bytes);
}

void view_to_proto(const SubscriberView& v, const PortResolver& ports, xbng::v1::Subscriber* out) {
  spec_to_proto(v.spec, ports, out);
  if (!v.has_counters) return;
  counters_to_proto(v.counters, out->mutable_counters());
  if (v.learned_mac) {
    out->set_mac(format_mac(v.learned_mac->data()));
    out->set_mac_learned(true);
  }
}

void failure_to_proto(const StreamFailure& f, xbng::v1::Failure* out) {
  out->set_index(f.index);
  out->mutable_key()->set_port(f.key.port);
  out->mutable_key()->set_outer_vlan(f.key.outer_vlan);
  out->mutable_key()->set_inner_vlan(f.key.inner_vlan);
  out->set_code(static_cast<int>(f.status.code()));
  out->set_message(std::string(status_message(f.status)));
}

}  // namespace xbng::agent
