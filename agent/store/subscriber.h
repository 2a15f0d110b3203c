// Subscriber: the validated, internal form of xbng.v1.Subscriber, and the
// checks of its fields (api/convert.h validates a proto into one and back).
#pragma once

#include <absl/container/inlined_vector.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "xbng/abi.h"
#include "common/net.h"
#include "common/status.h"
#include "common/sub_key.h"

namespace xbng::agent {

inline bool operator==(const SubKey& a, const SubKey& b) {
  return a.ifindex == b.ifindex && a.outer_vid == b.outer_vid && a.inner_vid == b.inner_vid;
}
struct SubKeyLess {
  bool operator()(const SubKey& a, const SubKey& b) const { return key_rank(a) < key_rank(b); }
};
struct SubKeyHash {
  size_t operator()(const SubKey& k) const { return std::hash<uint64_t>{}(key_rank(k)); }
};

// A rate plan (xbng.v1.Policy). Rates in bits/s of IP packets,
// bursts in bytes; a zero rate is unlimited (and its burst zero).
struct PolicySpec {
  uint64_t up_rate = 0, up_burst = 0, down_rate = 0, down_burst = 0;
  friend bool operator==(const PolicySpec&, const PolicySpec&) = default;
};
inline constexpr uint64_t kMinRateBps = 8000;                  // 8 kbit/s
inline constexpr uint64_t kMaxRateBps = 100000000000ull;       // 100 Gbit/s
inline constexpr uint64_t kMaxBurstBytes = uint64_t{1} << 30;  // 1 GiB
inline constexpr uint32_t kDefaultMaxPacket = 1500;  // burst floor when the port's MTU is unknown
// struct xbng_bucket.byte_ns_fp of a rate (0 for 0 = unlimited), rounded.
uint32_t policy_byte_ns_fp(uint64_t rate_bps);
// Range checks of one policy; `max_packet` is the largest IP packet of the
// port (its MTU). An invalid argument whose message names the field (e.g.
// "up_burst_bytes ...").
absl::Status check_policy(const PolicySpec& p, uint32_t max_packet);

// A validated subscriber. Prefixes are sorted (canonical form) so that two
// specs compare equal exactly when they would program the same entries.
//
// The store keeps one per subscriber: fields are ordered so that the flags
// share one padding-free run (104 bytes, not 120: 16 MB at 1M subscribers).
struct SubscriberSpec {
  SubKey key{};
  uint32_t ipv4 = 0;  // network order
  Mac mac{};
  Ipv6 ipv6{};
  bool has_mac = false;  // false: learn from the first valid frame
  bool has_ipv4 = false;
  bool has_ipv6 = false;
  bool has_policy = false;  // false: the port's default policy applies
  uint8_t mac_policy = 0;   // enum xbng_mac_policy; 0 = the port's
  uint8_t origin = 0;       // enum Origin: who provisioned it
  absl::InlinedVector<Prefix, 1> prefixes;
  PolicySpec policy;

  bool same_provisioning(const SubscriberSpec& o) const;
};
static_assert(sizeof(SubscriberSpec) <= 104, "SubscriberSpec: one per subscriber, keep it packed");

// Who provisioned a subscriber: the numbers of xbng.v1.Origin, kept in
// xbng_subscriber.flags (XBNG_SUB_F_ORIGIN_*).
enum Origin : uint8_t {
  kOriginUnspecified = 0,
  kOriginApi = 1,
  kOriginEtcd = 2,
  kOriginRadius = 3,
  kOriginRelay = 4,
};

// Resolves an access port name to its ifindex (nullopt: not a configured
// access port) and back.
struct PortResolver {
  std::function<std::optional<uint32_t>(std::string_view)> access_ifindex;
  std::function<std::string(uint32_t)> name;
  // Rate plans (both optional): an access port's default policy, and the
  // largest IP packet it carries (its MTU).
  std::function<PolicySpec(uint32_t)> default_policy;
  std::function<uint32_t(uint32_t)> max_packet;
  PolicySpec policy_of(const struct SubscriberSpec& s) const;  // own or the port's default
  uint32_t max_packet_of(uint32_t ifindex) const {
    return max_packet ? max_packet(ifindex) : kDefaultMaxPacket;
  }
};

// Validation limits.
inline constexpr int kMinV6PrefixLen = 40, kMaxV6PrefixLen = 64;
inline constexpr int kMinV4PrefixLen = 8, kMaxV4PrefixLen = 31;

// Single-field checks, exposed for tests and the CLI: an invalid argument
// whose message says what is wrong with the value ("is outside 1..4094"),
// for the caller to put after the field's name and value.
absl::Status check_vid(uint32_t vid);
absl::Status check_ipv4_host(uint32_t be);
absl::Status check_ipv6_host(const Ipv6& a);
absl::Status check_mac(const Mac& m);
// A client's value for an error message: quoted, non-printable bytes as
// \xNN, and only its first `max` bytes ("…" and the full length follow):
// an error never grows with the input (gRPC caps status metadata at ~8 KB).
std::string quote_value(std::string_view v, size_t max = 64);

std::string key_to_string(const SubKey& k, const PortResolver& ports);  // "port/outer/inner"

}  // namespace xbng::agent
