// The fleet key schema (docs/fleet.md): names, parsing, value codec.
#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>

#include "xbng/agent/fleet.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

std::optional<std::string> check_node_name(std::string_view node) {
  if (node.empty()) return "node name is empty";
  if (node.size() > 64) return fmt::format("node name \"{}\" is longer than 64 characters", node);
  for (char c : node)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return fmt::format("node name \"{}\": only letters, digits, '.', '_' and '-' are allowed",
                         node);
  return std::nullopt;
}

std::string node_subscribers_prefix(std::string_view node) {
  return fmt::format("{}nodes/{}/subscribers/", kKeyRoot, node);
}

std::string subscriber_etcd_key(std::string_view node, std::string_view port, uint32_t outer,
                                uint32_t inner) {
  return fmt::format("{}nodes/{}/subscribers/{}/{}/{}", kKeyRoot, node, port, outer, inner);
}

std::string status_etcd_key(std::string_view node) {
  return fmt::format("{}status/{}", kKeyRoot, node);
}

std::string prefix_range_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      ++end.back();
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

namespace {
std::optional<uint32_t> parse_vid(std::string_view s) {
  if (s.empty() || s.size() > 4 || s[0] == '0') return std::nullopt;
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 1 || v > 4094) return std::nullopt;
  return v;
}
}  // namespace

std::optional<std::string> parse_subscriber_key_suffix(std::string_view suffix, std::string* port,
                                                       uint32_t* outer, uint32_t* inner) {
  const auto a = suffix.find('/');
  const auto b = a == std::string_view::npos ? a : suffix.find('/', a + 1);
  if (b == std::string_view::npos || suffix.find('/', b + 1) != std::string_view::npos)
    return fmt::format("key must end in <port>/<outer_vlan>/<inner_vlan>, found \"{}\"", suffix);
  const std::string_view p = suffix.substr(0, a), o = suffix.substr(a + 1, b - a - 1),
                         i = suffix.substr(b + 1);
  if (p.empty()) return "key has an empty port";
  auto ov = parse_vid(o), iv = parse_vid(i);
  if (!ov)
    return fmt::format("key outer_vlan \"{}\": expected 1..4094 in decimal, no leading zero", o);
  if (!iv)
    return fmt::format("key inner_vlan \"{}\": expected 1..4094 in decimal, no leading zero", i);
  *port = std::string(p);
  *outer = *ov;
  *inner = *iv;
  return std::nullopt;
}

namespace {

// The common case of a value, parsed ~20x faster than JsonStringToMessage: an
// object of known fields (canonical lowerCamel or original names, each at
// most once) holding plain strings (no escapes), plain decimal numbers and
// arrays of plain strings. Anything else (escapes, quoted numbers, null,
// counters, unknown fields, bad syntax) returns false, and the caller uses
// JsonStringToMessage, which decides: the fast path never accepts what the
// exact one refuses, nor reads anything differently.
class FastValue {
 public:
  explicit FastValue(std::string_view s) : p_(s.data()), e_(s.data() + s.size()) {}
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
  enum { kPort, kOuter, kInner, kMac, kIpv4, kIpv6, kV6Prefixes, kV4Prefixes };
  static int field(std::string_view n) {
    static constexpr std::string_view names[][2] = {
        {"port", "port"},           {"outerVlan", "outer_vlan"},
        {"innerVlan", "inner_vlan"}, {"mac", "mac"},
        {"ipv4", "ipv4"},           {"ipv6", "ipv6"},
        {"ipv6Prefixes", "ipv6_prefixes"}, {"ipv4Prefixes", "ipv4_prefixes"}};
    for (int i = 0; i < 8; ++i)
      if (n == names[i][0] || n == names[i][1]) return i;
    return -1;
  }
  bool value(int f, xbng::v1::Subscriber* out) {
    std::string_view v;
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
    switch (f) {
      case kPort: out->set_port(std::string(v)); break;
      case kMac: out->set_mac(std::string(v)); break;
      case kIpv4: out->set_ipv4(std::string(v)); break;
      default: out->set_ipv6(std::string(v)); break;
    }
    return true;
  }
  bool str(std::string_view* v) {
    if (!eat('"')) return false;
    const char* b = p_;
    while (p_ < e_ && *p_ != '"') {
      if (*p_ == '\\' || static_cast<unsigned char>(*p_) < 0x20 ||
          static_cast<unsigned char>(*p_) >= 0x80)
        return false;
      ++p_;
    }
    if (p_ == e_) return false;
    *v = std::string_view(b, p_ - b);
    ++p_;
    return true;
  }
  bool uint(uint32_t* n) {
    const char* b = p_;
    uint64_t v = 0;
    while (p_ < e_ && *p_ >= '0' && *p_ <= '9' && p_ - b < 10) v = v * 10 + (*p_++ - '0');
    if (p_ == b || (p_ - b > 1 && *b == '0') || v > 0xffffffffull) return false;
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
};

}  // namespace

std::optional<std::string> decode_subscriber_value(std::string_view json, std::string_view port,
                                                   uint32_t outer, uint32_t inner,
                                                   xbng::v1::Subscriber* out) {
  out->Clear();
  if (!FastValue(json).parse(out)) {
    out->Clear();
    auto st = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(json.data(), json.size()), out);
    if (!st.ok())
      return fmt::format("value is not an xbng.v1.Subscriber in JSON: {}", std::string(st.message()));
  }
  if (out->port() != port || out->outer_vlan() != outer || out->inner_vlan() != inner)
    return fmt::format("value says {}/{}/{} but the key says {}/{}/{}", out->port(),
                       out->outer_vlan(), out->inner_vlan(), port, outer, inner);
  return std::nullopt;
}

std::string encode_subscriber_value(const xbng::v1::Subscriber& s) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(s, &out);
  return out;
}

std::vector<std::pair<std::string, std::string>> full_read_ranges(const std::string& prefix,
                                                                 std::vector<std::string> ports) {
  std::vector<std::string> cut;
  for (const auto& p : ports) {
    const std::string b = prefix + p + "/";
    for (char d = '1'; d <= '9'; ++d) {
      cut.push_back(b + d);
      cut.push_back(b + d + "/");
      for (char e = '0'; e <= '9'; ++e) cut.push_back(b + d + e);
    }
    cut.push_back(b + ":");  // after every digit
  }
  std::sort(cut.begin(), cut.end());
  cut.erase(std::unique(cut.begin(), cut.end()), cut.end());
  std::vector<std::pair<std::string, std::string>> out;
  std::string from = prefix;
  for (auto& c : cut) {
    out.emplace_back(from, c);
    from = c;
  }
  out.emplace_back(from, prefix_range_end(prefix));
  return out;
}

std::vector<std::string> split_endpoints(std::string_view s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    if (c == std::string_view::npos) c = s.size();
    std::string_view e = s.substr(pos, c - pos);
    while (!e.empty() && e.front() == ' ') e.remove_prefix(1);
    while (!e.empty() && e.back() == ' ') e.remove_suffix(1);
    if (!e.empty()) out.emplace_back(e);
    pos = c + 1;
  }
  return out;
}

}  // namespace xbng::agent
