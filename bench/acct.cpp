// xbng_bench_acct: RADIUS accounting of N sessions (default 1M) with
// interims every --interval-s (default 300), on a simulated clock: one full
// interval in --tick-ms slots. Each request is built as the client builds it
// (the attributes, then the signed Accounting-Request: MD5) and counted by
// slot; no socket (the sink is in-process). Prints:
//   - memory per RADIUS session (RSS growth / N): the session records
//     (SessionTable) and the accounting schedule, separately;
//   - the Starts (all N bound at once) and the interims of one interval:
//     requests/s of simulated time, the largest slot against the mean
//     (evenness), and the worker's CPU per request and at the steady rate.
//
//   xbng_bench_acct [--sessions 1000000] [--interval-s 300] [--tick-ms 100]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "radius/accounting.h"
#include "radius/codec.h"

using namespace xbng;

namespace {

uint64_t rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

double cpu_s() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

radius::SubKey key_of(uint32_t i) {
  radius::SubKey k{};
  k.ifindex = 2 + i / (4094 * 4094);
  k.outer_vid = static_cast<uint16_t>(1 + (i / 4094) % 4094);
  k.inner_vid = static_cast<uint16_t>(1 + i % 4094);
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RADIUS accounting: rate, spread and memory per session"};
  uint32_t n = 1'000'000, interval_s = 300, tick_ms = 100;
  app.add_option("--sessions", n, "sessions");
  app.add_option("--interval-s", interval_s, "Acct-Interim-Interval");
  app.add_option("--tick-ms", tick_ms, "slot");
  CLI11_PARSE(app, argc, argv);

  uint64_t now = 1'700'000'000'000;
  radius::SessionTable table("");
  radius::Config cfg;
  cfg.nas_identifier = "xbng-bench";
  cfg.nas_ipv4 = 0x0100000a;
  uint64_t slot_count = 0;
  std::vector<uint64_t> per_slot;
  uint64_t sent = 0, bytes = 0;
  radius::Accounting::Hooks h;
  h.send = [&](const radius::AccountingRequest& r, std::function<void(bool)> done) {
    auto pkt = radius::build_signed_request(radius::kAccountingRequest, static_cast<uint8_t>(sent),
                                            radius::accounting_attributes(cfg, r), "secret");
    bytes += pkt.ok() ? pkt->size() : 0;
    ++sent;
    ++slot_count;
    done(true);
  };
  h.view = [](const radius::SubKey& k, radius::AcctView* v) {
    v->nas_port_id = fmt::format("eth1:{}.{}", k.outer_vid, k.inner_vid);
    v->calling_station_id = "02:00:00:00:00:01";
    v->framed_ip = 0x0100400a + k.inner_vid;
    v->up_bytes = uint64_t{k.inner_vid} << 20;
    v->down_bytes = uint64_t{k.inner_vid} << 24;
    v->up_packets = v->down_packets = k.inner_vid;
    return true;
  };
  h.remove = [](const radius::SubKey&) { return absl::OkStatus(); };
  h.lease_bound = [](const radius::SubKey&) { return true; };
  h.now_ms = [&] { return now; };
  radius::AcctOptions o;
  o.interim_interval_s = o.interim_min_s = interval_s;
  o.tick_ms = tick_ms;

  const uint64_t rss0 = rss_kb();
  for (uint32_t i = 0; i < n; ++i) {
    radius::SessionData d;
    d.session_id = fmt::format("{:016x}-{:012x}", now * 1'000'000 + i, agent::key_rank(key_of(i)));
    d.user_name = fmt::format("eth1:{}:{}", key_of(i).outer_vid, key_of(i).inner_vid);
    d.classes = {"bench-class"};
    d.start_unix = now / 1000;
    table.record(key_of(i), d);
  }
  const uint64_t rss1 = rss_kb();
  radius::Accounting acct(&table, o, h);
  for (uint32_t i = 0; i < n; ++i)
    acct.on_lease(key_of(i), radius::Accounting::LeaseChange::kBound);
  double c0 = cpu_s();
  acct.tick();
  const double start_cpu = cpu_s() - c0;
  const uint64_t starts = sent;
  const uint64_t rss2 = rss_kb();

  // One interval and a half (the first interims come ½..1½ intervals after
  // the Start): measure the last full interval.
  const uint64_t ticks = uint64_t{interval_s} * 1000 / tick_ms;
  double cpu = 0;
  uint64_t measured = 0;
  for (uint64_t t = 0; t < ticks * 3 / 2; ++t) {
    now += tick_ms;
    slot_count = 0;
    c0 = cpu_s();
    acct.tick();
    if (t >= ticks / 2) {
      cpu += cpu_s() - c0;
      per_slot.push_back(slot_count);
      measured += slot_count;
    }
  }
  const double mean = double(measured) / per_slot.size();
  const uint64_t mx = *std::max_element(per_slot.begin(), per_slot.end());
  const uint64_t mn = *std::min_element(per_slot.begin(), per_slot.end());
  std::printf("sessions %u, interim interval %u s, slot %u ms\n", n, interval_s, tick_ms);
  std::printf("memory per session: %.0f B session record + %.0f B accounting schedule = %.0f B\n",
              (rss1 - rss0) * 1024.0 / n, (rss2 - rss1) * 1024.0 / n, (rss2 - rss0) * 1024.0 / n);
  std::printf("starts: %llu in %.2f s CPU (%.2f us each)\n", (unsigned long long)starts, start_cpu,
              start_cpu * 1e6 / starts);
  std::printf(
      "interims over one interval: %llu = %.0f/s; per %u ms slot mean %.1f, min %llu, "
      "max %llu (max/mean %.2f)\n",
      (unsigned long long)measured, measured / double(interval_s), tick_ms, mean,
      (unsigned long long)mn, (unsigned long long)mx, mx / mean);
  std::printf("worker CPU: %.2f us per interim (read, build, sign), %.1f%% of a core at %.0f/s\n",
              cpu * 1e6 / measured, 100.0 * cpu / interval_s, measured / double(interval_s));
  std::printf("mean request %.0f bytes\n", double(bytes) / sent);
  return 0;
}
