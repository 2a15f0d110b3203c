// The fleet key schema (docs/fleet.md): names, parsing, UTF-8, the status
// value. The subscriber values' codec is etcd/value_codec.cpp.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "fleet/fleet.h"
#include "fleet/kv.h"

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
// Length of the well-formed UTF-8 sequence at s[i], or 0 (RFC 3629, table 3-7
// of the Unicode standard: the second byte's range depends on the first).
size_t utf8_seq(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // no overlong forms
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;  // no overlong forms
    if (c == 0xf4) hi = 0x8f;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xbf) return 0;
  return n;
}
}  // namespace

std::optional<size_t> invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    // ASCII (every key and value of the schema) eight bytes at a time.
    if (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (!(w & 0x8080808080808080u)) {
        i += 8;
        continue;
      }
    }
    const size_t n = utf8_seq(s, i);
    if (!n) return i;
    i += n;
  }
  return std::nullopt;
}

std::string escape_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_seq(s, i);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      const auto c = static_cast<unsigned char>(s[i++]);
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string render_fleet_status(const FleetStatus& s) {
  nlohmann::json j;
  j["node"] = escape_bytes(s.node);
  j["boot_id"] = escape_bytes(s.boot_id);
  j["revision"] = s.revision;
  j["subscribers"] = s.subscribers;
  j["synced"] = s.synced;
  j["refused_count"] = s.refused ? s.refused->size() : 0;
  auto& arr = j["refused"] = nlohmann::json::array();
  if (s.refused)
    for (const auto& [k, why] : *s.refused) {
      if (arr.size() >= kStatusRefusedListed) break;
      arr.push_back({{"key", escape_bytes(k)}, {"reason", escape_bytes(why)}});
    }
  j["etcd"] = {{"endpoint", escape_bytes(s.endpoint)},
               {"outages", s.outages},
               {"last_outage_seconds", s.last_outage_seconds},
               {"last_error", escape_bytes(s.last_error)},
               {"full_syncs", s.full_syncs},
               {"compactions", s.compactions},
               {"history_resets", s.history_resets},
               {"internal_errors", s.internal_errors}};
  // Seconds rounded to the millisecond: the value is rewritten only when it changes.
  const auto ms = [](double v) { return std::round(v * 1000) / 1000; };
  const FullReadTimes& f = s.full_read;
  j["full_read"] = {{"revision", f.revision},
                    {"keys", f.keys},
                    {"readers", f.readers},
                    {"seconds", ms(f.total_s)},
                    {"read_seconds", ms(f.read_s)},
                    {"request_seconds", ms(f.request_s)},
                    {"decode_seconds", ms(f.decode_s)},
                    {"apply_seconds", ms(f.apply_s)},
                    {"wait_seconds", ms(f.wait_s)},
                    {"delete_seconds", ms(f.delete_s)}};
  // Everything is escaped above; "replace" only keeps dump() from ever throwing.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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

absl::Status fleet::KvConn::range_view(const RangeRequest& rq, std::chrono::milliseconds timeout,
                                       const std::function<void(const RangeView&)>& page) {
  RangeResponse r;
  if (absl::Status s = range(rq, timeout, &r); !s.ok()) return s;
  std::vector<KeyValueView> kvs;
  kvs.reserve(r.kvs.size());
  for (const KeyValue& kv : r.kvs)
    kvs.push_back({kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version});
  page(RangeView{r.header, kvs, r.more, r.count});
  return absl::OkStatus();
}

std::string fleet::status_text(const absl::Status& st) {
  return fmt::format("{}: {}", absl::StatusCodeToString(st.code()),
                     std::string_view(st.message().data(), st.message().size()));
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
