// The self-test responder of xbng_bench_bringup (see responder.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace bringup {

struct ResponderStats {
  std::atomic<uint64_t> dhcp4{0}, dhcp6{0}, rs{0}, other{0};
};

// Runs until *stop, in namespace `ns` on `ifname`; sets *ready once listening.
void run_responder(const std::string& ns, const std::string& ifname, uint32_t first, uint32_t n,
                   std::atomic<bool>* stop, std::atomic<bool>* ready, ResponderStats* st);

}  // namespace bringup
