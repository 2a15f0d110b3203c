// xbng_bench_store_mem: the subscriber store's own memory at N subscribers,
// without xbngd, gRPC or the kernel around it. A SubscriberStore on maps
// that keep nothing (every write accepted, every lookup empty: the kernel's
// side costs no memory here) and sized for --max-subscribers, through the
// three phases of bench/upsert_rss.py:
//   (a) N subscribers of the lab's addressing plan (tests/xbnglab/xbngd.py:
//       IPv4, IPv6 /128 and one /64 each) streamed (stream(), batches of
//       kStreamBatch);
//   (b) one atomic upsert of --upsert subscribers, each of the first ones
//       moved to the addresses of subscriber N + i;
//   (c) every subscriber deleted (requests of 10,000 keys, as
//       `xbngctl sub del --file`).
// With --update, between (a) and (b): the same N streamed again with a rate
// plan added (bench/provision.py's update: every claim kept), for the
// store's own CPU time of an update.
// After each phase: its wall and CPU seconds, the process's peak RSS during
// it (VmHWM, reset before it), its RSS and the bytes malloc has handed out. Run it under
// heaptrack for a breakdown by allocation site. A benchmark: it measures
// and prints, it never passes or fails.
//
//   build/bin/xbng_bench_store_mem -n 1000000 --max-subscribers 1020000
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <arpa/inet.h>
#include <malloc.h>
#include <sys/resource.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "store/map_ops.h"
#include "store/store.h"

using namespace xbng::agent;

namespace {

// Maps that keep nothing: writes succeed, lookups find nothing.
class NullMaps final : public MapOps {
 public:
  explicit NullMaps(uint32_t cap) : cap_(cap) {}
  uint32_t max_entries(MapId) const override { return cap_; }
  int lookup(MapId, const void*, void*) const override {
    errno = ENOENT;
    return -ENOENT;
  }
  int update(MapId, const void*, const void*, uint64_t) override { return 0; }
  int erase(MapId, const void*) override { return 0; }
  int update_many(MapId, const void*, const void*, size_t n, size_t, size_t,
                  size_t* done) override {
    *done = n;
    return 0;
  }
  int delete_many(MapId, const void*, size_t, size_t) override { return 0; }
  int for_each(MapId, size_t, size_t,
               const std::function<void(const void*, const void*)>&) const override {
    return 0;
  }

 private:
  uint32_t cap_;
};

constexpr uint32_t kIfindex = 7;
constexpr uint32_t kCPerS = 4000;  // C-VIDs per S-VID, as bench/upsert_rss.py

SubKey key_of(uint64_t i) {
  return SubKey{kIfindex, static_cast<uint16_t>(100 + i / kCPerS),
                static_cast<uint16_t>(1 + i % kCPerS)};
}

// Subscriber `key` on the addresses of plan index `a` (tests/xbnglab/xbngd.py).
SubscriberSpec spec_of(uint64_t key, uint64_t a) {
  SubscriberSpec s;
  s.key = key_of(key);
  s.has_mac = true;
  s.mac = {0x02,
           0x00,
           static_cast<uint8_t>(key >> 24),
           static_cast<uint8_t>(key >> 16),
           static_cast<uint8_t>(key >> 8),
           static_cast<uint8_t>(key)};
  s.has_ipv4 = true;
  s.ipv4 = htonl(0x64400000u + 16 + static_cast<uint32_t>(a));  // 100.64.0.16 + a
  s.has_ipv6 = true;
  s.ipv6 = {0x20, 0x01, 0x0d, 0xb8, 0x10, 0x00};  // 2001:db8:1000:: + 16 + a
  const uint64_t lo = 16 + a;
  for (int b = 0; b < 8; ++b) s.ipv6[15 - b] = static_cast<uint8_t>(lo >> (8 * b));
  Prefix p;  // 2001:db8:2000::/64 + a /64s
  p.family = 6;
  p.len = 64;
  const uint64_t hi = 0x20010db820000000ull + a;
  for (int b = 0; b < 8; ++b) p.addr[7 - b] = static_cast<uint8_t>(hi >> (8 * b));
  s.prefixes.push_back(p);
  return s;
}

double status_mb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) return std::stod(line.substr(k.size())) / 1024;
  return 0;
}

void reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

// Bytes handed out by malloc, in its arenas and in blocks of their own (mmap).
double heap_mb() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd) / (1 << 20);
}

// User + system CPU seconds of the process (all threads).
double cpu_s() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

template <typename F>
void phase(const char* name, F&& f) {
  reset_peak();
  const double before = status_mb("VmRSS");
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_s();
  f();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_s() - c0;
  const double peak = status_mb("VmHWM");
  malloc_trim(0);
  std::printf("%-34s %8.2f %6.2f %10.1f %9.1f %9.1f %9.1f\n", name, secs, cpu, before, peak,
              status_mb("VmRSS"), heap_mb());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the subscriber store's own memory at N subscribers (maps that keep nothing)"};
  uint64_t n = 1000000, cap = 0, upsert = 5546;
  bool update = false, shuffle = false;
  app.add_option("-n,--subscribers", n, "subscribers streamed")->default_str("1000000");
  app.add_option("--max-subscribers", cap, "the maps' (and the store's) capacity; 0: n + 20000");
  app.add_option("--upsert", upsert, "subscribers moved by one atomic upsert (512 KiB: ~5,546)")
      ->default_str("5546");
  app.add_flag("--update", update, "stream the N again with a rate plan added, before (b)");
  app.add_flag("--shuffle", shuffle,
               "stream (and update) the subscribers in a random order: every index lookup a "
               "cache miss, as a load in no particular order");
  CLI11_PARSE(app, argc, argv);
  if (!cap) cap = n + 20000;
  if (n + upsert > cap) {
    std::fprintf(stderr, "--max-subscribers must hold n + --upsert\n");
    return 2;
  }

  PortResolver ports;
  ports.access_ifindex = [](std::string_view) { return std::optional<uint32_t>(kIfindex); };
  ports.name = [](uint32_t) { return std::string("acc0"); };
  std::printf("%-34s %8s %6s %10s %9s %9s %9s\n", "phase", "seconds", "CPU s", "RSS before",
              "peak RSS", "RSS after", "heap MB");
  std::unique_ptr<SubscriberStore> store;
  phase("store created", [&] {
    store = std::make_unique<SubscriberStore>(std::make_unique<NullMaps>(cap), ports, nullptr);
  });

  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  if (shuffle) std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
  // Streams subscribers 0..n-1 (with a rate plan when `policy`).
  auto stream = [&](bool policy, StreamResult* out) {
    uint64_t next = 0;
    store->stream(
        [&](StreamBatch* b, size_t max) {
          for (; b->got < max && next < n; ++next, ++b->got) {
            const uint64_t i = order[next];
            b->keys.push_back({"acc0", 100 + static_cast<uint32_t>(i / kCPerS),
                               1 + static_cast<uint32_t>(i % kCPerS)});
            b->specs.push_back(spec_of(i, i));
            if (policy) {
              b->specs.back().has_policy = true;
              b->specs.back().policy = {10000000, 125000, 50000000, 625000};
            }
            b->idx.push_back(b->base + b->got);
          }
          return next < n;
        },
        out);
  };
  auto check = [&](const char* what, const StreamResult& r) {
    if (!r.failed && r.applied == n) return true;
    std::fprintf(stderr, "%s: %lu applied, %lu failed%s%s\n", what, r.applied, r.failed,
                 r.failures.empty() ? "" : ": ",
                 r.failures.empty() ? "" : std::string(r.failures[0].status.message()).c_str());
    return false;
  };
  StreamResult sr;
  phase(fmt::format("(a) stream {}", n).c_str(), [&] { stream(false, &sr); });
  if (!check("stream", sr)) return 1;
  if (update) {
    StreamResult ur2;
    phase(fmt::format("(a2) stream {} again, rate plan", n).c_str(), [&] { stream(true, &ur2); });
    if (!check("update", ur2)) return 1;
  }

  UpsertResult ur;
  absl::Status ust;
  phase(fmt::format("(b) one upsert moving {}", upsert).c_str(), [&] {
    std::vector<SubscriberSpec> specs;
    specs.reserve(upsert);
    for (uint64_t i = 0; i < upsert && i < n; ++i) specs.push_back(spec_of(i, n + i));
    ust = store->upsert(std::move(specs), &ur);
  });
  if (!ust.ok()) {
    std::fprintf(stderr, "upsert: %s\n", std::string(ust.message()).c_str());
    return 1;
  }

  uint64_t deleted = 0;
  phase("(c) delete everything", [&] {
    for (uint64_t i = 0; i < n; i += 10000) {
      std::vector<SubKey> keys;
      for (uint64_t j = i; j < std::min(n, i + 10000); ++j) keys.push_back(key_of(j));
      uint64_t d = 0, nf = 0;
      if (absl::Status st = store->remove(keys, &d, &nf); !st.ok()) {
        std::fprintf(stderr, "delete: %s\n", std::string(st.message()).c_str());
        std::exit(1);
      }
      deleted += d;
    }
  });
  std::printf("subscribers: %lu streamed, upsert updated %lu, %lu deleted, %zu left\n", sr.applied,
              ur.updated, deleted, store->size());
  return 0;
}
