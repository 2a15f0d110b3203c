// xbng_bench_lease_flush: what one rewrite of the lease file costs at N
// subscribers. A LeaseTable (agent/bringup/lease/lease.h) with a state file
// in a temporary directory and, per subscriber of bench/README.md's
// addressing, a bound DHCPv4 lease (its /32) and a bound DHCPv6 lease (its
// /128 and /64), as a dual-stack storm leaves them; then --rounds flushes
// (one lease renewed before each, so that there is something to write),
// each timed (wall and this thread's CPU). The rewrite period of xbngd's
// lease thread is max(1 s, 20 x the last rewrite), so the time of one
// rewrite is both the thread's CPU and how much a crash can lose. Prints
// the median, the range and the file size. A benchmark: it measures and
// prints, it never passes or fails.
//
//   build/bin/xbng_bench_lease_flush -n 1000000 [--rounds 5] [--dir /tmp]
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bringup/lease/lease.h"

using namespace xbng::agent;

namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::string v4(uint32_t host) {
  const uint32_t be = htonl(host);
  char b[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &be, b, sizeof b);
  return b;
}

// 2001:db8:1000::16 + i, and the i-th /64 of 2001:db8:2000::/36.
std::string v6_of(uint32_t i) {
  uint8_t a[16] = {0x20, 0x01, 0x0d, 0xb8, 0x10, 0x00};
  const uint64_t low = 0x16 + uint64_t{i};
  for (int k = 0; k < 8; ++k) a[15 - k] = uint8_t(low >> (8 * k));
  char b[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, a, b, sizeof b);
  return b;
}
std::string p64_of(uint32_t i) {
  uint8_t a[16] = {0x20, 0x01, 0x0d, 0xb8, 0x20, 0x00};
  const uint64_t net = 0x2001'0db8'2000'0000ull + uint64_t{i};
  for (int k = 0; k < 8; ++k) a[7 - k] = uint8_t(net >> (8 * k));
  char b[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, a, b, sizeof b);
  return std::string(b) + "/64";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xbng lease file: one rewrite at N subscribers (DHCPv4 + DHCPv6 leases each)"};
  uint32_t n = 1000000, rounds = 5;
  std::string dir = "/tmp";
  app.add_option("-n,--subscribers", n, "subscribers, two leases each")->capture_default_str();
  app.add_option("--rounds", rounds, "flushes timed")->capture_default_str();
  app.add_option("--dir", dir, "where the temporary state directory goes")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::string tmpl = dir + "/xbng-lease-flush-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string file = tmpl + "/leases.json";
  PortResolver ports;
  ports.access_ifindex = [](std::string_view s) -> std::optional<uint32_t> {
    if (s == "acc0") return 7;
    return std::nullopt;
  };
  ports.name = [](uint32_t i) { return i == 7 ? std::string("acc0") : std::string(); };
  std::vector<double> wall, cpu;
  uintmax_t bytes = 0;
  {
    LeaseTable t(nullptr, ports, file);
    const uint64_t now = static_cast<uint64_t>(time(nullptr));
    auto key = [](uint32_t i) {
      return SubKey{7, static_cast<uint16_t>(1 + i / 4000), static_cast<uint16_t>(1 + i % 4000)};
    };
    for (uint32_t i = 0; i < n; ++i) {
      t.bind(key(i), LeaseFamily::kV4, v4(0x64400010u + i), {}, 3600, now);
      t.bind(key(i), LeaseFamily::kV6, v6_of(i), {p64_of(i)}, 7200, now);
    }
    for (uint32_t r = 0; r < rounds; ++r) {
      t.bind(key(r % n), LeaseFamily::kV4, v4(0x64400010u + r % n), {}, 3600, now + r + 1);
      const auto w0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_s();
      if (!t.flush()) {
        std::fprintf(stderr, "lease_flush: the flush failed (see the log above)\n");
        return 1;
      }
      cpu.push_back(thread_cpu_s() - c0);
      wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
    }
    bytes = std::filesystem::file_size(file);
  }
  std::filesystem::remove_all(tmpl);
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double mw = med(wall), mc = med(cpu);
  std::printf(
      "lease file of %u subscribers (%u leases, %.1f MB): one rewrite %.3f s wall (range "
      "%.3f-%.3f), "
      "%.3f s CPU of the writing thread (%.2f us per lease), median of %u; rewritten every %.1f s "
      "by xbngd's lease thread (max(1 s, 20 x the rewrite))\n",
      n, 2 * n, double(bytes) / 1e6, mw, *std::min_element(wall.begin(), wall.end()),
      *std::max_element(wall.begin(), wall.end()), mc, 1e6 * mc / (2.0 * n), rounds,
      std::max(1.0, 20 * mw));
  return 0;
}
