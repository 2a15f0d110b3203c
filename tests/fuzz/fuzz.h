// A small mutation fuzzer for the control-packet parsers and servers:
// deterministic (seeded), no coverage feedback, built with ASan/UBSan so a
// read past a buffer, an overflow or UB aborts the run. Each target gives
// seed packets (real client messages) and a function that runs one input
// through the code under test and checks its own invariants (abort() on a
// violation). To add a protocol (e.g. DHCPv4): write fuzz_<proto>.cpp
// defining a FuzzTarget and list it in kTargets in fuzz_main.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace xbng::fuzz {

using Bytes = std::vector<uint8_t>;

struct FuzzTarget {
  const char* name;
  std::vector<Bytes> (*seeds)();
  void (*run_one)(const uint8_t* data, size_t size);
  void (*report)();  // prints what the inputs exercised (may be null)
};

#define XBNG_FUZZ_CHECK(cond)                                                                 \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

Bytes from_hex(const char* s);

extern const FuzzTarget kDhcpv6Target;
extern const FuzzTarget kRsTarget;
extern const FuzzTarget kDhcpv4Target;
extern const FuzzTarget kFleetTarget;
extern const FuzzTarget kRadiusTarget;
extern const FuzzTarget kRelay4Target;

}  // namespace xbng::fuzz
