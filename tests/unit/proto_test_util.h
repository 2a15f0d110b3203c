// Helpers for the protocol unit tests: hex literals with spaces and
// comments allowed, and a readable diff of two byte strings.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xbng::test {

using Bytes = std::vector<uint8_t>;

// "01 5927ee | 0001 000e ..." → bytes. Whitespace and '|' separate, text
// from '#' to the end of a line is a comment.
inline Bytes hex(std::string_view s) {
  Bytes out;
  int hi = -1;
  bool comment = false;
  for (char c : s) {
    if (comment) {
      comment = c != '\n';
      continue;
    }
    if (c == '#') {
      comment = true;
      continue;
    }
    int v = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (v < 0) continue;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  EXPECT_EQ(hi, -1) << "odd number of hex digits";
  return out;
}

inline std::string to_hex(const Bytes& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i && i % 16 == 0)
      s += '\n';
    else if (i)
      s += ' ';
    s += d[b[i] >> 4];
    s += d[b[i] & 15];
  }
  return s;
}

inline ::testing::AssertionResult bytes_eq(const Bytes& got, const Bytes& want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return ::testing::AssertionFailure() << "first difference at byte " << i << " (got " << got.size()
                                       << " bytes, want " << want.size() << ")\n got:\n"
                                       << to_hex(got) << "\n want:\n"
                                       << to_hex(want);
}

}  // namespace xbng::test
