#include "relay/agent_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace xbng::agent::relay {

namespace {

constexpr size_t kMaxTemplate = 128;

void put_sub(std::vector<uint8_t>& b, uint8_t code, const void* v, size_t len) {
  b.push_back(code);
  b.push_back(static_cast<uint8_t>(len));
  const auto* p = static_cast<const uint8_t*>(v);
  b.insert(b.end(), p, p + len);
}

// One piece of a template: literal text, or a placeholder name.
struct Piece {
  bool placeholder;
  std::string_view text;
};

// Splits a template; false on an unclosed brace.
bool pieces_of(std::string_view t, std::vector<Piece>* out) {
  size_t i = 0;
  while (i < t.size()) {
    const size_t open = t.find('{', i);
    if (open == std::string_view::npos) {
      out->push_back({false, t.substr(i)});
      break;
    }
    if (open > i) out->push_back({false, t.substr(i, open - i)});
    const size_t close = t.find('}', open);
    if (close == std::string_view::npos) return false;
    out->push_back({true, t.substr(open + 1, close - open - 1)});
    i = close + 1;
  }
  return true;
}

bool known(std::string_view name) {
  return name == "port" || name == "svlan" || name == "cvlan" || name == "mac";
}

bool parse_vid(std::string_view s, uint16_t* out) {
  if (s.empty() || s.size() > 4 || s[0] == '0') return false;  // as expand writes it
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v < 1 || v > 4094) return false;
  *out = static_cast<uint16_t>(v);
  return true;
}

}  // namespace

std::vector<uint8_t> encode_agent_info(const AgentInfo& a) {
  // 2 x (2 + 4) for 5 and 11; what remains is shared by the two ids.
  size_t room = 255;
  if (a.link_selection) room -= 6;
  if (a.server_id_override) room -= 6;
  const size_t cid = std::min(a.circuit_id.size(), a.circuit_id.empty() ? 0 : room - 2);
  room -= a.circuit_id.empty() ? 0 : cid + 2;
  const size_t rid = a.remote_id.empty() || room < 3 ? 0 : std::min(a.remote_id.size(), room - 2);
  std::vector<uint8_t> b;
  b.reserve(255);
  if (cid) put_sub(b, kSubCircuitId, a.circuit_id.data(), cid);
  if (rid) put_sub(b, kSubRemoteId, a.remote_id.data(), rid);
  if (a.link_selection) put_sub(b, kSubLinkSelection, &*a.link_selection, 4);
  if (a.server_id_override) put_sub(b, kSubServerIdOverride, &*a.server_id_override, 4);
  return b;
}

std::optional<AgentInfo> decode_agent_info(std::span<const uint8_t> v) {
  AgentInfo a;
  size_t i = 0;
  while (i < v.size()) {
    if (i + 2 > v.size()) return std::nullopt;
    const uint8_t code = v[i], len = v[i + 1];
    if (len == 0 || i + 2 + len > v.size()) return std::nullopt;
    const uint8_t* p = &v[i + 2];
    switch (code) {
      case kSubCircuitId:
        a.circuit_id.assign(reinterpret_cast<const char*>(p), len);
        break;
      case kSubRemoteId:
        a.remote_id.assign(reinterpret_cast<const char*>(p), len);
        break;
      case kSubLinkSelection:
      case kSubServerIdOverride: {
        if (len != 4) return std::nullopt;
        uint32_t x;
        std::memcpy(&x, p, 4);
        (code == kSubLinkSelection ? a.link_selection : a.server_id_override) = x;
        break;
      }
      default:
        break;
    }
    i += 2 + len;
  }
  return a;
}

std::optional<Policy> parse_policy(std::string_view s) {
  if (s == "keep") return Policy::kKeep;
  if (s == "replace") return Policy::kReplace;
  if (s == "drop") return Policy::kDrop;
  return std::nullopt;
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kKeep:
      return "keep";
    case Policy::kReplace:
      return "replace";
    case Policy::kDrop:
      return "drop";
  }
  return "?";
}

std::string expand(std::string_view t, const TemplateVars& v) {
  std::vector<Piece> ps;
  if (!pieces_of(t, &ps)) return std::string(t);
  std::string out;
  for (const auto& p : ps) {
    if (!p.placeholder)
      out += p.text;
    else if (p.text == "port")
      out += v.port;
    else if (p.text == "svlan")
      out += std::to_string(v.svlan);
    else if (p.text == "cvlan")
      out += std::to_string(v.cvlan);
    else if (p.text == "mac")
      out += format_mac(v.mac.data());
    else
      out += fmt::format("{{{}}}", p.text);
  }
  return out;
}

std::optional<std::string> check_template(std::string_view t, bool need_key) {
  if (t.empty()) return std::string("is empty");
  if (t.size() > kMaxTemplate) return fmt::format("is longer than {} bytes", kMaxTemplate);
  std::vector<Piece> ps;
  if (!pieces_of(t, &ps)) return std::string("has a '{' without its '}'");
  int port = 0, svlan = 0, cvlan = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (!ps[i].placeholder) {
      if (ps[i].text.find('}') != std::string_view::npos)
        return std::string("has a '}' without its '{'");
      continue;
    }
    if (!known(ps[i].text))
      return fmt::format(
          "{{{}}}: unknown placeholder (known: {{port}} {{svlan}} {{cvlan}} {{mac}})", ps[i].text);
    port += ps[i].text == "port";
    svlan += ps[i].text == "svlan";
    cvlan += ps[i].text == "cvlan";
    if (need_key && i + 1 < ps.size() && ps[i + 1].placeholder)
      return fmt::format("{{{}}}{{{}}}: placeholders must be separated by literal text", ps[i].text,
                         ps[i + 1].text);
  }
  if (need_key && (port != 1 || svlan != 1 || cvlan != 1))
    return std::string(
        "must hold {port}, {svlan} and {cvlan} once each (a server's reply is matched back "
        "to its subscriber by them)");
  return std::nullopt;
}

bool match_template(std::string_view t, std::string_view value, TemplateVars* out) {
  std::vector<Piece> ps;
  if (!pieces_of(t, &ps)) return false;
  TemplateVars v;
  bool have_port = false, have_s = false, have_c = false;
  size_t at = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    const Piece& p = ps[i];
    if (!p.placeholder) {
      if (value.substr(at, p.text.size()) != p.text) return false;
      at += p.text.size();
      continue;
    }
    // A placeholder runs to the next literal's first occurrence (or the end).
    size_t end = value.size();
    if (p.text == "mac") {
      end = at + 17;
      if (end > value.size()) return false;
    } else if (i + 1 < ps.size()) {
      end = value.find(ps[i + 1].text, at);
      if (end == std::string_view::npos) return false;
    }
    const std::string_view field = value.substr(at, end - at);
    if (p.text == "port") {
      if (field.empty() || field.size() > 15) return false;
      v.port = std::string(field);
      have_port = true;
    } else if (p.text == "svlan") {
      if (!parse_vid(field, &v.svlan)) return false;
      have_s = true;
    } else if (p.text == "cvlan") {
      if (!parse_vid(field, &v.cvlan)) return false;
      have_c = true;
    } else if (p.text == "mac") {
      auto m = parse_mac(field);
      if (!m) return false;
      v.mac = *m;
    } else {
      return false;
    }
    at = end;
  }
  if (at != value.size() || !have_port || !have_s || !have_c) return false;
  *out = std::move(v);
  return true;
}

}  // namespace xbng::agent::relay
