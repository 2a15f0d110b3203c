// Prepaid downstream credit (bpf/lib/credit.h): the fast path's own code,
// compiled here as C++. Tables of the arithmetic, then the plan's bound
// (admitted bytes <= burst + rate x T over every window, summed over all
// routes) checked over long simulated runs, and under real concurrency.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "lib/credit.h"

namespace {

constexpr uint32_t kFp1 = 1u << XBNG_POLICE_FP_SHIFT;  // 1 ns per byte: 8 Gbit/s
constexpr uint64_t kT0 = 5000000000000ull;             // an arbitrary "now"

struct xbng_bucket bucket(uint64_t tat, uint32_t burst, uint32_t fp = kFp1) {
  struct xbng_bucket b {};
  b.tat_ns = tat;
  b.byte_ns_fp = fp;
  b.burst_bytes = burst;
  return b;
}

TEST(Credit, ChunkCapDepth) {
  struct Row {
    uint32_t burst, chunk, cap, depth;
  };
  const Row rows[] = {
      {0, 0, 0, 0},
      {1500, 0, 0, 1500},
      {262143, 0, 0, 262143},                     // burst/128 = 2047: under the minimum
      {262144, 2048, 4096, 262144 - 3 * 4096},    // the smallest burst with credit
      {1000000, 7812, 9860, 1000000 - 3 * 9860},  // 1 MB: 3% held back
      {0xffffffffu, 33554431, 33556479, 0xffffffffu - 3 * 33556479u},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.burst);
    EXPECT_EQ(credit_chunk(r.burst), r.chunk);
    EXPECT_EQ(credit_cap(credit_chunk(r.burst)), r.cap);
    EXPECT_EQ(credit_depth(r.burst), r.depth);
    EXPECT_EQ(credit_depth(r.burst) + XBNG_CREDIT_ROUTES * credit_cap(credit_chunk(r.burst)),
              r.burst);
  }
}

TEST(Credit, Spend) {
  struct Row {
    uint32_t credit, bytes;
    int covered;
    uint32_t after;
  };
  const Row rows[] = {
      {0, 60, 0, 0}, {59, 60, 0, 59}, {60, 60, 1, 0}, {61, 60, 1, 1}, {31250, 1500, 1, 29750},
  };
  for (const Row& r : rows) {
    uint32_t c = r.credit;
    EXPECT_EQ(credit_spend(&c, r.bytes), r.covered) << r.credit << " " << r.bytes;
    EXPECT_EQ(c, r.after);
  }
}

TEST(Credit, Deposit) {
  struct Row {
    uint32_t credit, chunk;
    int deposited;
    uint32_t after;
  };
  const Row rows[] = {
      {0, 2048, 1, 2048},    {2047, 2048, 1, 4095}, {2048, 2048, 1, 4096},  // exactly the cap
      {2049, 2048, 0, 2049},                                                // would pass it
      {4096, 2048, 0, 4096},
  };
  for (const Row& r : rows) {
    uint32_t c = r.credit;
    EXPECT_EQ(credit_deposit(&c, r.chunk), r.deposited) << r.credit;
    EXPECT_EQ(c, r.after);
  }
}

// Burst 1 MB at 1 ns per byte: chunk 7812, depth 970420 (970420 ns).
TEST(Credit, Draw) {
  constexpr uint32_t kBurst = 1000000, kChunk = 7812, kDepth = 970420;
  struct Row {
    const char* what;
    uint64_t tat;     // bucket before (now = kT0)
    bool has_credit;  // the route holds credit
    uint32_t credit;  // its credit before
    uint32_t bytes;   // the packet
    int admitted;
    uint64_t tat_after;
    uint32_t credit_after;
  };
  const Row rows[] = {
      {"full bucket: packet and chunk", 0, true, 0, 100, 1, kT0 + 100 + kChunk, kChunk},
      {"full bucket, route without credit", 0, false, 0, 100, 1, kT0 + 100, 0},
      {"leftover kept, chunk added", 0, true, 99, 100, 1, kT0 + 100 + kChunk, 99 + kChunk},
      {"leftover at the slack: chunk added", 0, true, XBNG_CREDIT_SLACK, 100, 1, kT0 + 100 + kChunk,
       XBNG_CREDIT_SLACK + kChunk},
      {"chunk would pass the cap: refunded", 0, true, XBNG_CREDIT_SLACK + 1, 100, 1, kT0 + 100,
       XBNG_CREDIT_SLACK + 1},
      {"room for the packet only", kT0 + kDepth - 100, true, 0, 100, 1, kT0 + kDepth, 0},
      {"room for packet and chunk exactly", kT0 + kDepth - 100 - kChunk, true, 0, 100, 1,
       kT0 + kDepth, kChunk},
      {"over the rate: nothing charged", kT0 + kDepth - 99, true, 5, 100, 0, kT0 + kDepth - 99, 5},
      {"the depth, not the burst, bounds the bucket", kT0 + kDepth, false, 0, 1, 0, kT0 + kDepth,
       0},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.what);
    struct xbng_bucket b = bucket(r.tat, kBurst);
    uint32_t c = r.credit;
    EXPECT_EQ(credit_draw(&b, r.has_credit ? &c : nullptr, kT0, r.bytes), r.admitted);
    EXPECT_EQ(b.tat_ns, r.tat_after);
    EXPECT_EQ(c, r.credit_after);
  }
  // A small burst has no credit: exactly the plain bucket.
  struct xbng_bucket b = bucket(kT0 + 1400, 1500);
  uint32_t c = 0;
  EXPECT_EQ(credit_draw(&b, &c, kT0, 100), 1);
  EXPECT_EQ(b.tat_ns, kT0 + 1500);
  EXPECT_EQ(c, 0u);
  EXPECT_EQ(credit_draw(&b, &c, kT0, 1), 0);
}

TEST(Credit, RefundCappedAtTheDepth) {
  struct xbng_bucket b = bucket(kT0 + 50, 1000000);
  bucket_refund(&b, 100);  // tat in the past: a full bucket, the 50 extra lost
  EXPECT_EQ(b.tat_ns, kT0 - 50);
  EXPECT_EQ(bucket_take_depth(&b, kT0, 1000, 1000), 1);  // depth 1000 admits 1000, not 1050
  EXPECT_EQ(b.tat_ns, kT0 + 1000);
  EXPECT_EQ(bucket_take_depth(&b, kT0, 1, 1000), 0);
}

// The police_down step in C++: credit first, then the bucket.
struct Sub {
  struct xbng_bucket b;
  uint32_t credit[5] = {};  // routes 0..2 with credit, 3..4 without (prefixes)
  int admit(int route, uint64_t now, uint32_t bytes) {
    const bool has = route < XBNG_CREDIT_ROUTES;
    if (has && credit_spend(&credit[route], bytes)) return 1;
    return credit_draw(&b, has ? &credit[route] : nullptr, now, bytes);
  }
};

// Over every window [t_i, t_j] of admitted packets: bytes <= burst + (t_j -
// t_i) / ns_per_byte. O(n): max over i <= j of (S_j - t_j/n) - (S_{i-1} - t_i/n).
void check_bound(const std::vector<std::pair<uint64_t, uint32_t>>& adm, uint32_t burst,
                 uint64_t ns_per_byte, const char* what) {
  double best_g = 1e300, worst = -1e300;
  double s = 0;
  for (const auto& [t, len] : adm) {
    double tb = double(t - kT0) / double(ns_per_byte);
    best_g = std::min(best_g, s - tb);
    s += len;
    worst = std::max(worst, (s - tb) - best_g);
  }
  EXPECT_LE(worst, double(burst)) << what;
}

TEST(Credit, PlanHoldsOverEveryWindow) {
  for (uint64_t nspb : {1, 2, 8}) {
    for (uint32_t burst : {131072u, 1000000u, 3000u}) {
      std::mt19937_64 rng(burst * 31 + nspb);
      Sub sub{bucket(0, burst, static_cast<uint32_t>(nspb << XBNG_POLICE_FP_SHIFT)), {}};
      std::vector<std::pair<uint64_t, uint32_t>> adm;
      uint64_t now = kT0, offered = 0, admitted = 0;
      // Phases: offered at 3x the rate, idle gaps, bursts on one route, on all.
      for (int i = 0; i < 400000; ++i) {
        uint32_t len = 40 + static_cast<uint32_t>(rng() % 1461);
        int route = static_cast<int>(rng() % 5);
        if ((i / 50000) % 2) route = 0;                   // one route only, for a while
        if (rng() % 20000 == 0) now += rng() % 50000000;  // idle: the bucket refills
        now += (len * nspb) / 3;                          // 3x the rate
        offered += len;
        if (sub.admit(route, now, len)) {
          adm.emplace_back(now, len);
          admitted += len;
        }
      }
      SCOPED_TRACE(::testing::Message() << "burst " << burst << ", " << nspb << " ns/byte");
      check_bound(adm, burst, nspb, "admitted over a window");
      // Not held below the plan either: a third of what was offered at 3x,
      // less what the clock gave during idle gaps unused, less at most the
      // credit left in the routes and a burst.
      const uint64_t elapsed = now - kT0;
      EXPECT_LE(admitted, burst + elapsed / nspb);
      EXPECT_GE(admitted, offered / 3 - offered / 100);
      uint64_t stranded = 0;
      for (uint32_t c : sub.credit) stranded += c;
      EXPECT_LE(stranded, uint64_t{XBNG_CREDIT_ROUTES} * credit_cap(credit_chunk(burst)));
    }
  }
}

// Four threads, three routes, the clock stopped: nothing refills, so what
// all of them admit together can never pass the burst, however their CASes
// interleave.
TEST(Credit, ConcurrentDrawsNeverPassTheBurst) {
  constexpr uint32_t kBurst = 1000000;
  for (int round = 0; round < 20; ++round) {
    Sub sub{bucket(0, kBurst), {}};
    std::atomic<uint64_t> admitted{0};
    std::vector<std::thread> th;
    for (int t = 0; t < 4; ++t)
      th.emplace_back([&, t] {
        uint64_t mine = 0;
        for (int i = 0; i < 20000; ++i) {
          uint32_t len = 64 + static_cast<uint32_t>((i * 7 + t * 13) % 1400);
          if (sub.admit((i + t) % 4, kT0, len)) mine += len;
        }
        admitted += mine;
      });
    for (auto& x : th) x.join();
    EXPECT_LE(admitted.load(), kBurst);
    uint64_t left = 0;
    for (uint32_t c : sub.credit) left += c;
    // What was admitted plus what the routes still hold came from the bucket.
    EXPECT_LE(admitted.load() + left, kBurst);
    // Tokens may be lost (a refund losing its races), never most of them.
    EXPECT_GE(admitted.load() + left, credit_depth(kBurst) / 2);
  }
}

}  // namespace
