// Numbers with SI suffixes, as rate plans are written ("20M" bit/s, "1.5k"
// bytes): the one parser of the CLI's flags and the import files.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace xbng::agent {

// "20M" -> 20000000, "1500" -> 1500, "1.5k" -> 1500 (k, M, G: powers of 1000,
// either case; exact, no floating point); nullopt if not a number, finer
// than one unit, or out of range.
std::optional<uint64_t> parse_si(std::string_view s);

// The four values of a rate plan, in the order of xbng.v1.Policy:
// up_rate_bps, up_burst_bytes, down_rate_bps, down_burst_bytes.
using RatePlanText = std::array<std::string_view, 4>;
using RatePlanValues = std::array<uint64_t, 4>;
inline constexpr RatePlanText kRatePlanFields = {"up_rate_bps", "up_burst_bytes", "down_rate_bps",
                                                 "down_burst_bytes"};

// Parses each value with parse_si, an empty one as 0. Returns the index of
// the first value that is not a number (`out` then partly written), or
// nullopt when all are.
std::optional<size_t> parse_rate_plan(const RatePlanText& text, RatePlanValues* out);

}  // namespace xbng::agent
