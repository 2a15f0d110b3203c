// What the store's write-ahead journal costs per change, in
// isolation: Journal::begin + clear for a batch the size of a stream batch
// (8,192), all new keys (a bulk load: 8 bytes each) or all updates (each
// previous spec: ~90 bytes with IPv4, IPv6, a /64 and a policy), into a file
// in --dir (tmpfs, like /run/xbng). Prints ns per entry; compare with the
// store's per-entry cost of a load (docs/benchmarks.md: ~10 µs at 1M).
// A benchmark: it measures and prints, it never passes or fails.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "store/journal.h"
#include "common/net.h"

using namespace xbng::agent;

int main(int argc, char** argv) {
  CLI::App app{"per-entry cost of the store journal (begin + clear)"};
  std::string dir = "/run";
  size_t batch = 8192;
  int rounds = 200;
  app.add_option("--dir", dir, "directory for the journal file (tmpfs)")->default_str(dir);
  app.add_option("--batch", batch, "entries per change")->default_str("8192");
  app.add_option("--rounds", rounds, "changes timed per case")->default_str("200");
  CLI11_PARSE(app, argc, argv);
  const std::string path = fmt::format("{}/xbng-bench-journal-{}/store.journal", dir, getpid());
  int rc = 0;
  {
    Journal j(path);
    JournalIntent created, updated;
    for (size_t i = 0; i < batch; ++i) {
      SubKey k{7, static_cast<uint16_t>(100 + i / 4000), static_cast<uint16_t>(1 + i % 4000)};
      created.created.push_back(k);
      SubscriberSpec s;
      s.key = k;
      s.has_ipv4 = true;
      s.ipv4 = 0x10004064 + static_cast<uint32_t>(i);
      s.has_ipv6 = true;
      s.ipv6 = *parse_ipv6("2001:db8:1000::10");
      s.prefixes.push_back(*parse_prefix("2001:db8:2000::/64"));
      s.has_policy = true;
      s.policy = {10000000, 125000, 50000000, 625000};
      updated.before.push_back(s);
    }
    std::printf("%-10s %8s %12s %14s\n", "case", "entries", "bytes/entry", "ns/entry");
    for (auto [name, in] : {std::pair{"created", &created}, std::pair{"updated", &updated}}) {
      std::string body;
      Journal::encode(*in, &body);
      std::vector<double> ns;
      for (int r = 0; r < rounds; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        rc |= j.begin(*in);
        rc |= j.clear();
        ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                         .count() /
                     double(batch));
      }
      std::sort(ns.begin(), ns.end());
      std::printf("%-10s %8zu %12.1f %14.1f   (median of %d; p10 %.1f, p90 %.1f)\n", name, batch,
                  double(body.size()) / double(batch), ns[ns.size() / 2], rounds,
                  ns[ns.size() / 10], ns[ns.size() * 9 / 10]);
    }
  }
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
  if (rc) std::fprintf(stderr, "journal write failed: %d\n", rc);
  return rc ? 1 : 0;
}
