// Import files of subscribers (CSV or JSON Lines), as xbngctl sub import,
// sub del --file and the benchmarks read them. Pure: no gRPC, no BPF.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/units.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

inline constexpr const char* kCsvHeader =
    "port,outer_vlan,inner_vlan,mac,ipv4,ipv6,ipv6_prefixes,ipv4_prefixes";
// The same with the rate plan's four columns (Policy's fields). On a
// line, four empty cells = no policy of its own (the port default applies);
// otherwise empty cells are 0 (unlimited).
inline constexpr const char* kCsvHeaderPolicy =
    "port,outer_vlan,inner_vlan,mac,ipv4,ipv6,ipv6_prefixes,ipv4_prefixes,"
    "up_rate_bps,up_burst_bytes,down_rate_bps,down_burst_bytes";

// Sets the policy of `out` (its four fields) from their text (common/units.h:
// SI suffixes, empty = 0). Returns the index (into kRatePlanFields) of the
// first that is not a number, `out` then unchanged; nullopt when all are.
std::optional<size_t> parse_policy(const RatePlanText& text, xbng::v1::Subscriber* out);

// Parses one CSV data line (header kCsvHeader) into a Subscriber; returns
// an error text or empty.
std::string parse_csv_line(const std::string& line, xbng::v1::Subscriber* out);
// Reads an import file (CSV with kCsvHeader or JSON Lines), calling fn for
// each readable entry; unreadable lines go to errors (first 20) and are
// counted in the return value.
uint64_t read_import_file(const std::string& file,
                          const std::function<bool(const xbng::v1::Subscriber&)>& fn,
                          std::vector<std::string>* errors);

}  // namespace xbng::agent
