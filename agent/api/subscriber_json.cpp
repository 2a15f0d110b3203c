#include "api/subscriber_json.h"

#include <google/protobuf/util/json_util.h>

#include <cstdint>
#include <memory>

#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

namespace {

class FastSubscriberJson {
 public:
  // spare: a rate plan to reuse for this line's (see subscriber_from_json_fast).
  FastSubscriberJson(std::string_view s, std::unique_ptr<xbng::v1::Policy> spare)
      : p_(s.data()), e_(s.data() + s.size()), spare_(std::move(spare)) {}

  bool parse(xbng::v1::Subscriber* out) {
    ws();
    if (!eat('{')) return false;
    ws();
    if (eat('}')) return end();
    unsigned seen = 0;
    for (;;) {
      std::string_view name;
      if (!str(&name)) return false;
      ws();
      if (!eat(':')) return false;
      ws();
      const int f = field(name);
      // A field named twice (even once in each spelling) goes to the exact parser.
      if (f < 0 || (seen & (1u << f))) return false;
      seen |= 1u << f;
      if (!value(f, out)) return false;
      ws();
      if (eat(',')) {
        ws();
        continue;
      }
      if (eat('}')) return end();
      return false;
    }
  }

 private:
  enum { kPort, kOuter, kInner, kMac, kIpv4, kIpv6, kV6Prefixes, kV4Prefixes, kPolicy, kFields };
  // Each field's proto name and its lowerCamel JSON name.
  static int field(std::string_view n) {
    static constexpr std::string_view names[kFields][2] = {{"port", "port"},
                                                           {"outer_vlan", "outerVlan"},
                                                           {"inner_vlan", "innerVlan"},
                                                           {"mac", "mac"},
                                                           {"ipv4", "ipv4"},
                                                           {"ipv6", "ipv6"},
                                                           {"ipv6_prefixes", "ipv6Prefixes"},
                                                           {"ipv4_prefixes", "ipv4Prefixes"},
                                                           {"policy", "policy"}};
    return index_of(names, n);
  }
  // The index of the pair in `names` that holds n (either spelling), or -1.
  template <size_t N>
  static int index_of(const std::string_view (&names)[N][2], std::string_view n) {
    for (size_t i = 0; i < N; ++i)
      if (n == names[i][0] || n == names[i][1]) return static_cast<int>(i);
    return -1;
  }
  // The rate plan (xbng.v1.Policy): an object of its four uint64 fields,
  // each at most once, as plain or quoted decimal numbers (proto3 JSON
  // writes 64-bit integers quoted). A repricing import carries one on every
  // line: without this it went to JsonStringToMessage, ~20x slower.
  // Its field (0..3: up rate, up burst, down rate, down burst) by either
  // name, or -1.
  static int policy_field(std::string_view n) {
    static constexpr std::string_view names[4][2] = {{"up_rate_bps", "upRateBps"},
                                                     {"up_burst_bytes", "upBurstBytes"},
                                                     {"down_rate_bps", "downRateBps"},
                                                     {"down_burst_bytes", "downBurstBytes"}};
    return index_of(names, n);
  }
  bool policy(xbng::v1::Policy* out) {
    if (!eat('{')) return false;
    ws();
    if (eat('}')) return true;
    unsigned seen = 0;
    for (;;) {
      std::string_view name;
      if (!str(&name)) return false;
      const int f = policy_field(name);
      if (f < 0 || (seen & (1u << f))) return false;
      seen |= 1u << f;
      ws();
      if (!eat(':')) return false;
      ws();
      const bool quoted = eat('"');
      uint64_t n = 0;
      if (!u53(&n) || (quoted && !eat('"'))) return false;
      f == 0   ? out->set_up_rate_bps(n)
      : f == 1 ? out->set_up_burst_bytes(n)
      : f == 2 ? out->set_down_rate_bps(n)
               : out->set_down_burst_bytes(n);
      ws();
      if (eat('}')) return true;
      if (!eat(',')) return false;
      ws();
    }
  }
  // A plain decimal below 2^53 (exact as a double too): no sign, no leading
  // zero, no fraction or exponent.
  bool u53(uint64_t* n) {
    const char* b = p_;
    uint64_t v = 0;
    while (p_ < e_ && *p_ >= '0' && *p_ <= '9' && p_ - b < 16) v = v * 10 + (*p_++ - '0');
    if (p_ == b || (p_ - b > 1 && *b == '0') || v >= (uint64_t{1} << 53)) return false;
    if (p_ < e_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E' || (*p_ >= '0' && *p_ <= '9')))
      return false;
    *n = v;
    return true;
  }
  bool value(int f, xbng::v1::Subscriber* out) {
    std::string_view v;
    if (f == kPolicy) {
      if (spare_) out->set_allocated_policy(spare_.release());
      return policy(out->mutable_policy());
    }
    if (f == kOuter || f == kInner) {
      uint32_t n = 0;
      if (!uint(&n)) return false;
      f == kOuter ? out->set_outer_vlan(n) : out->set_inner_vlan(n);
      return true;
    }
    if (f == kV6Prefixes || f == kV4Prefixes) {
      if (!eat('[')) return false;
      ws();
      if (eat(']')) return true;
      for (;;) {
        if (!str(&v)) return false;
        (f == kV6Prefixes ? out->add_ipv6_prefixes() : out->add_ipv4_prefixes())->assign(v);
        ws();
        if (eat(']')) return true;
        if (!eat(',')) return false;
        ws();
      }
    }
    if (!str(&v)) return false;
    (f == kPort   ? out->mutable_port()
     : f == kMac  ? out->mutable_mac()
     : f == kIpv4 ? out->mutable_ipv4()
                  : out->mutable_ipv6())
        ->assign(v);
    return true;
  }
  bool str(std::string_view* v) {
    if (!eat('"')) return false;
    const char* b = p_;
    while (p_ < e_ && *p_ != '"') {
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
      ++p_;
    }
    if (p_ == e_) return false;
    *v = std::string_view(b, p_ - b);
    ++p_;
    return true;
  }
  // A plain uint32: no sign, no leading zero, no fraction or exponent.
  bool uint(uint32_t* n) {
    const char* b = p_;
    uint64_t v = 0;
    while (p_ < e_ && *p_ >= '0' && *p_ <= '9' && p_ - b < 10) v = v * 10 + (*p_++ - '0');
    if (p_ == b || (p_ - b > 1 && *b == '0') || v > UINT32_MAX) return false;
    if (p_ < e_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E' || (*p_ >= '0' && *p_ <= '9')))
      return false;
    *n = static_cast<uint32_t>(v);
    return true;
  }
  void ws() {
    while (p_ < e_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool eat(char c) {
    if (p_ < e_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool end() {
    ws();
    return p_ == e_;
  }
  const char* p_;
  const char* e_;
  std::unique_ptr<xbng::v1::Policy> spare_;
};

}  // namespace

bool subscriber_from_json_fast(std::string_view json, xbng::v1::Subscriber* out) {
  // A message reused line after line keeps its rate plan's allocation:
  // Clear() frees it, and a repricing import (a plan on every line) would
  // allocate and free one a line.
  std::unique_ptr<xbng::v1::Policy> spare;
  if (out->GetArena() == nullptr && out->has_policy()) {
    spare.reset(out->release_policy());
    spare->Clear();
  }
  out->Clear();
  return FastSubscriberJson(json, std::move(spare)).parse(out);
}

std::optional<std::string> subscriber_from_json(std::string_view json, xbng::v1::Subscriber* out) {
  if (subscriber_from_json_fast(json, out)) return std::nullopt;
  out->Clear();
  auto st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), out);
  if (!st.ok()) return std::string(st.message());
  return std::nullopt;
}

}  // namespace xbng::agent
