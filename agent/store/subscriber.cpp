#include "store/subscriber.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace xbng::agent {

bool SubscriberSpec::same_provisioning(const SubscriberSpec& o) const {
  return key == o.key && has_mac == o.has_mac && (!has_mac || mac == o.mac) &&
         has_ipv4 == o.has_ipv4 && (!has_ipv4 || ipv4 == o.ipv4) && has_ipv6 == o.has_ipv6 &&
         (!has_ipv6 || ipv6 == o.ipv6) && prefixes == o.prefixes && has_policy == o.has_policy &&
         (!has_policy || policy == o.policy) && mac_policy == o.mac_policy && origin == o.origin;
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

absl::Status check_policy(const PolicySpec& p, uint32_t max_packet) {
  auto dir = [&](const char* d, uint64_t rate, uint64_t burst) -> absl::Status {
    if (rate == 0) {
      if (burst != 0)
        return invalid_argument(
            "{}_burst_bytes {} is set but {}_rate_bps is 0 (unlimited): set a rate "
            "or a burst of 0",
            d, burst, d);
      return absl::OkStatus();
    }
    if (rate < kMinRateBps || rate > kMaxRateBps)
      return invalid_argument("{}_rate_bps {} is outside {}..{} bits/s (0 = unlimited)", d, rate,
                              kMinRateBps, kMaxRateBps);
    if (burst < max_packet)
      return invalid_argument(
          "{}_burst_bytes {} is smaller than one maximum-size packet ({} bytes, "
          "the port's MTU): no such packet could ever pass",
          d, burst, max_packet);
    if (burst > kMaxBurstBytes)
      return invalid_argument("{}_burst_bytes {} is above {} (1 GiB)", d, burst, kMaxBurstBytes);
    return absl::OkStatus();
  };
  if (auto st = dir("up", p.up_rate, p.up_burst); !st.ok()) return st;
  return dir("down", p.down_rate, p.down_burst);
}

absl::Status check_vid(uint32_t vid) {
  if (vid < 1 || vid > 4094) return absl::InvalidArgumentError("is outside 1..4094");
  return absl::OkStatus();
}

absl::Status check_ipv4_host(uint32_t be) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(&be);
  if (b[0] == 0) return absl::InvalidArgumentError("is in 0.0.0.0/8 (this network)");
  if (b[0] == 127) return absl::InvalidArgumentError("is in 127.0.0.0/8 (loopback)");
  if (b[0] >= 224 && b[0] <= 239)
    return absl::InvalidArgumentError("is in 224.0.0.0/4 (multicast)");
  if (b[0] >= 240) return absl::InvalidArgumentError("is in 240.0.0.0/4 (reserved/broadcast)");
  return absl::OkStatus();
}

absl::Status check_ipv6_host(const Ipv6& a) {
  if ((a[0] & 0xe0) != 0x20)
    return absl::InvalidArgumentError("is outside 2000::/3 (global unicast)");
  return absl::OkStatus();
}

absl::Status check_mac(const Mac& m) {
  if (mac_is_zero(m.data())) return absl::InvalidArgumentError("is the zero MAC");
  if (mac_is_multicast(m.data()))
    return absl::InvalidArgumentError("is a multicast/broadcast MAC (group bit set)");
  return absl::OkStatus();
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

std::string key_to_string(const SubKey& k, const PortResolver& ports) {
  return fmt::format("{}/{}/{}", ports.name(k.ifindex), k.outer_vid, k.inner_vid);
}

}  // namespace xbng::agent
