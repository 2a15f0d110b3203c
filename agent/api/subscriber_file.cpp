#include "api/subscriber_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "api/subscriber_json.h"

namespace xbng::agent {

namespace v1 = xbng::v1;

namespace {

// Splits `s` at `sep` without copying: calls fn for each field.
template <typename F>
void for_each_field(std::string_view s, char sep, F&& fn) {
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    fn(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
}

// `ncols`: 8 (kCsvHeader) or 12 (kCsvHeaderPolicy).
std::string parse_csv(std::string_view l, v1::Subscriber* s, size_t ncols = 8) {
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  std::string_view f[12];
  size_t nf = 0;
  for_each_field(l, ',', [&](std::string_view x) {
    if (nf < 12) f[nf] = x;
    ++nf;
  });
  if (nf != ncols)
    return fmt::format("expected {} columns ({}), got {}", ncols,
                       ncols == 8 ? kCsvHeader : kCsvHeaderPolicy, nf);
  s->Clear();
  s->set_port(f[0].data(), f[0].size());
  auto num = [](std::string_view t, uint32_t* v) {
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string_view::npos)
      return false;
    uint32_t x = 0;
    for (char c : t) x = x * 10 + static_cast<uint32_t>(c - '0');
    *v = x;
    return true;
  };
  uint32_t o = 0, i = 0;
  if (!num(f[1], &o)) return fmt::format("outer_vlan \"{}\" is not a number", f[1]);
  if (!num(f[2], &i)) return fmt::format("inner_vlan \"{}\" is not a number", f[2]);
  s->set_outer_vlan(o);
  s->set_inner_vlan(i);
  s->set_mac(f[3].data(), f[3].size());
  s->set_ipv4(f[4].data(), f[4].size());
  s->set_ipv6(f[5].data(), f[5].size());
  if (!f[6].empty())
    for_each_field(f[6], ';',
                   [&](std::string_view x) { s->add_ipv6_prefixes(x.data(), x.size()); });
  if (!f[7].empty())
    for_each_field(f[7], ';',
                   [&](std::string_view x) { s->add_ipv4_prefixes(x.data(), x.size()); });
  if (ncols == 12 && !(f[8].empty() && f[9].empty() && f[10].empty() && f[11].empty())) {
    const RatePlanText text = {f[8], f[9], f[10], f[11]};
    if (auto bad = parse_policy(text, s))
      return fmt::format("{} \"{}\" is not a number", kRatePlanFields[*bad], text[*bad]);
  }
  return "";
}

// Reads a file line by line through a large buffer (no per-line stream
// machinery). Lines are passed without their '\n'.
class LineReader {
 public:
  explicit LineReader(const std::string& file) : f_(std::fopen(file.c_str(), "rb")), buf_(1 << 20) {
    if (!f_) throw std::runtime_error(fmt::format("cannot read {}", file));
  }
  ~LineReader() { std::fclose(f_); }
  bool next(std::string_view* line) {
    for (;;) {
      if (const char* nl = static_cast<const char*>(std::memchr(buf_.data() + b_, '\n', e_ - b_))) {
        *line = std::string_view(buf_.data() + b_, nl - (buf_.data() + b_));
        b_ = nl - buf_.data() + 1;
        return true;
      }
      if (eof_) {
        if (b_ == e_) return false;
        *line = std::string_view(buf_.data() + b_, e_ - b_);
        b_ = e_;
        return true;
      }
      // Move the partial line to the front, grow for very long lines, refill.
      std::memmove(buf_.data(), buf_.data() + b_, e_ - b_);
      e_ -= b_;
      b_ = 0;
      if (e_ == buf_.size()) buf_.resize(buf_.size() * 2);
      const size_t got = std::fread(buf_.data() + e_, 1, buf_.size() - e_, f_);
      if (got == 0) eof_ = true;
      e_ += got;
    }
  }

 private:
  std::FILE* f_;
  std::vector<char> buf_;
  size_t b_ = 0, e_ = 0;
  bool eof_ = false;
};

}  // namespace

std::optional<size_t> parse_policy(const RatePlanText& text, v1::Subscriber* out) {
  RatePlanValues v{};
  if (auto bad = parse_rate_plan(text, &v)) return bad;
  auto* p = out->mutable_policy();
  p->set_up_rate_bps(v[0]);
  p->set_up_burst_bytes(v[1]);
  p->set_down_rate_bps(v[2]);
  p->set_down_burst_bytes(v[3]);
  return std::nullopt;
}

std::string parse_csv_line(const std::string& line, v1::Subscriber* s) {
  return parse_csv(line, s, std::count(line.begin(), line.end(), ',') >= 11 ? 12 : 8);
}

uint64_t read_import_file(const std::string& file,
                          const std::function<bool(const v1::Subscriber&)>& fn,
                          std::vector<std::string>* errors) {
  LineReader in(file);
  std::string_view line;
  bool csv = false, header_seen = false;
  size_t ncols = 8;
  uint64_t lineno = 0, bad = 0;
  v1::Subscriber s;
  while (in.next(&line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    if (!header_seen) {
      header_seen = true;
      if (line[0] != '{') {
        csv = true;
        std::string_view h = line;
        if (!h.empty() && h.back() == '\r') h.remove_suffix(1);
        if (h == kCsvHeaderPolicy)
          ncols = 12;
        else if (h != kCsvHeader)
          throw std::runtime_error(fmt::format("{}:1: CSV header must be \"{}\" or \"{}\"", file,
                                               kCsvHeader, kCsvHeaderPolicy));
        continue;
      }
    }
    std::string err;
    if (csv) {
      err = parse_csv(line, &s, ncols);
    } else if (auto e = subscriber_from_json(line, &s)) {
      err = std::move(*e);
    }
    if (!err.empty()) {
      ++bad;
      if (errors->size() < 20) errors->push_back(fmt::format("{}:{}: {}", file, lineno, err));
      continue;
    }
    if (!fn(s)) break;
  }
  return bad;
}

}  // namespace xbng::agent
