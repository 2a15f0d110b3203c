#include "common/units.h"

namespace xbng::agent {

std::optional<uint64_t> parse_si(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t mult = 1;
  switch (s.back()) {
    case 'k':
    case 'K':
      mult = 1000;
      break;
    case 'm':
    case 'M':
      mult = 1000000;
      break;
    case 'g':
    case 'G':
      mult = 1000000000;
      break;
  }
  if (mult != 1) s.remove_suffix(1);
  if (s.empty() || s.size() > 20) return std::nullopt;
  // Digits with at most one '.', scaled exactly (no floating point).
  uint64_t whole = 0, frac = 0, scale = 1;
  bool dot = false;
  for (char c : s) {
    if (c == '.' && !dot) {
      dot = true;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    if (!dot) {
      if (whole > (UINT64_MAX - 9) / 10) return std::nullopt;
      whole = whole * 10 + static_cast<uint64_t>(c - '0');
    } else if (scale < mult) {
      frac = frac * 10 + static_cast<uint64_t>(c - '0');
      scale *= 10;
    } else if (c != '0') {
      return std::nullopt;  // finer than one unit
    }
  }
  if (whole > UINT64_MAX / mult) return std::nullopt;
  return whole * mult + frac * (mult / scale);
}

std::optional<size_t> parse_rate_plan(const RatePlanText& text, RatePlanValues* out) {
  for (size_t k = 0; k < text.size(); ++k) {
    (*out)[k] = 0;
    if (text[k].empty()) continue;
    auto n = parse_si(text[k]);
    if (!n) return k;
    (*out)[k] = *n;
  }
  return std::nullopt;
}

}  // namespace xbng::agent
