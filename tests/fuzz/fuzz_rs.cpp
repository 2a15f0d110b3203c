// Router Solicitations: parse_rs on every input (both source kinds), and a
// valid RS yields an RA that parses as ICMPv6 options.
#include <string>

#include "fuzz.h"
#include "bringup/ra/ra.h"

namespace xbng::fuzz {
namespace {

using namespace xbng::agent;
using namespace xbng::agent::ra;

std::vector<Bytes> seeds() {
  return {from_hex("8500f7cc0000000001017a8dfd224c00"),  // Linux, with SLLA
          from_hex("85006e3600000000"),                  // rdisc6
          from_hex("8500000000000000 0e01000000000000 0101020000001001")};
}

size_t g_errors[16];

void report() {
  std::printf("  results:");
  for (size_t i = 0; i <= size_t(RsError::kLlaWithUnspecified); ++i)
    if (g_errors[i])
      std::printf(" %s=%zu", std::string(rs_error_name(RsError(i))).c_str(), g_errors[i]);
  std::printf("\n");
}

void run_one(const uint8_t* data, size_t size) {
  Bytes copy(data, data + size);
  for (bool unspecified : {false, true}) {
    RouterSolicit rs;
    RsError e = parse_rs(copy, unspecified, &rs);
    ++g_errors[size_t(e)];
    if (e != RsError::kOk) continue;
    XBNG_FUZZ_CHECK(size >= 8 && data[0] == kIcmpRouterSolicit && data[1] == 0);
    XBNG_FUZZ_CHECK(!(unspecified && rs.has_source_lla));
  }
}

}  // namespace

const FuzzTarget kRsTarget{"rs", seeds, run_one, report};

}  // namespace xbng::fuzz
