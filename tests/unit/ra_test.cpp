// RS parser, RA builder (byte-exact, RFC 4861 §4.1/§4.2/§4.6, RFC 8106) and
// the unsolicited-RA timing wheel. RS vectors are real: Linux's own RS (with
// source link-layer option, as dhcpcd also sends it) and rdisc6's (none),
// captured in a throwaway namespace pair (tests/unit/capture_vectors.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>

#include "proto_test_util.h"
#include "bringup/ra/ra.h"
#include "bringup/ra/scheduler.h"

using namespace xbng::agent;
using namespace xbng::agent::ra;
using xbng::test::Bytes;
using xbng::test::bytes_eq;
using xbng::test::hex;

namespace {

TEST(RouterSolicit, ParsesLinuxRsWithSourceLla) {
  RouterSolicit rs;
  ASSERT_EQ(parse_rs(hex("85 00 5b2c 00000000 0101 020000001001"), false, &rs), RsError::kOk);
  EXPECT_TRUE(rs.has_source_lla);
  EXPECT_EQ(format_mac(rs.source_lla.data()), "02:00:00:00:10:01");
}

TEST(RouterSolicit, ParsesRdisc6RsWithoutOptions) {
  RouterSolicit rs;
  ASSERT_EQ(parse_rs(hex("85 00 6e36 00000000"), false, &rs), RsError::kOk);
  EXPECT_FALSE(rs.has_source_lla);
  // From :: (before DAD) without the option: valid.
  EXPECT_EQ(parse_rs(hex("85 00 6e36 00000000"), true, &rs), RsError::kOk);
}

TEST(RouterSolicit, SkipsUnknownOptions) {
  RouterSolicit rs;
  EXPECT_EQ(parse_rs(hex("85 00 0000 00000000 0e01 000000000000 0101 020000001001"), false, &rs),
            RsError::kOk);
  EXPECT_TRUE(rs.has_source_lla);
}

TEST(RouterSolicit, RejectsMalformedWithTheReason) {
  struct Case {
    const char* what;
    Bytes b;
    bool unspecified;
    RsError want;
  };
  Bytes big = hex("85 00 0000 00000000");
  for (int i = 0; i < 182; ++i) {
    Bytes opt = hex("0e01 000000000000");
    big.insert(big.end(), opt.begin(), opt.end());
  }
  std::vector<Case> cases = {
      {"empty", {}, false, RsError::kTooShort},
      {"7 bytes", hex("85 00 0000 000000"), false, RsError::kTooShort},
      {"oversized", big, false, RsError::kOversized},
      {"router advert", hex("86 00 0000 00000000"), false, RsError::kNotRs},
      {"neighbour solicitation", hex("87 00 0000 00000000"), false, RsError::kNotRs},
      {"code 1", hex("85 01 0000 00000000"), false, RsError::kBadCode},
      {"1 byte of option", hex("85 00 0000 00000000 01"), false, RsError::kTruncatedOption},
      {"option length 0", hex("85 00 0000 00000000 0100 020000001001"), false,
       RsError::kZeroLengthOption},
      {"option past the end", hex("85 00 0000 00000000 0102 020000001001"), false,
       RsError::kTruncatedOption},
      {"SLLA of 16 bytes", hex("85 00 0000 00000000 0102 020000001001 0000000000000000"), false,
       RsError::kBadSourceLla},
      {"two SLLA", hex("85 00 0000 00000000 0101 020000001001 0101 020000001002"), false,
       RsError::kBadSourceLla},
      {"SLLA from ::", hex("85 00 0000 00000000 0101 020000001001"), true,
       RsError::kLlaWithUnspecified},
  };
  for (const auto& c : cases) {
    RouterSolicit rs;
    EXPECT_EQ(parse_rs(c.b, c.unspecified, &rs), c.want)
        << c.what << ": got " << rs_error_name(parse_rs(c.b, c.unspecified, &rs));
  }
  for (int i = 0; i <= static_cast<int>(RsError::kLlaWithUnspecified); ++i)
    EXPECT_NE(rs_error_name(static_cast<RsError>(i)), "unknown");
}

const Mac kPortMac{0x02, 0x00, 0x5e, 0x00, 0x00, 0x01};

TEST(RouterAdvert, DefaultsByteExact) {
  Settings s;
  s.rdnss = {*parse_ipv6("2001:db8::53"), *parse_ipv6("2001:db8::54")};
  std::vector<uint8_t> out;
  size_t n = build_ra(s, kPortMac, nullptr, &out);
  EXPECT_EQ(n, out.size());
  Bytes want =
      hex("86 00 0000"           // type 134, code 0, checksum (frame layer)
          "40 c0 0708"           // hop limit 64, M=1 O=1, router lifetime 1800
          "00000000 00000000"    // reachable, retrans: unspecified
          "01 01 02005e000001"   // source link-layer address: the port MAC
          "05 01 0000 000005dc"  // MTU 1500
          "19 05 0000 00000708"  // RDNSS, 2 servers, lifetime 1800
          "20010db8000000000000000000000053 20010db8000000000000000000000054");
  EXPECT_TRUE(bytes_eq(out, want));
}

TEST(RouterAdvert, FlagsOffNoMtuNoRdnss) {
  Settings s;
  s.managed = s.other = false;
  s.mtu = 0;
  s.cur_hop_limit = 0;
  s.router_lifetime = 9000;
  s.reachable_time = 30000;
  s.retrans_timer = 1000;
  std::vector<uint8_t> out;
  build_ra(s, kPortMac, nullptr, &out);
  EXPECT_TRUE(bytes_eq(out, hex("86 00 0000 00 00 2328 00007530 000003e8 01 01 02005e000001")));
}

TEST(RouterAdvert, PrefixInformationOnlyWhenSlaacIsConfigured) {
  Settings s;
  s.mtu = 0;
  Prefix p64 = *parse_prefix("2001:db8:2000:1::/64");
  std::vector<uint8_t> out;
  build_ra(s, kPortMac, &p64, &out);
  EXPECT_TRUE(bytes_eq(out, hex("86 00 0000 40 c0 0708 00000000 00000000 01 01 02005e000001"
                                "03 04 40 c0 00015180 00003840 00000000"  // L=1 A=1, 1 day / 4 h
                                "20010db8200000010000000000000000")));
  // Not a /64: advertised on-link, but not for autoconfiguration.
  Prefix p56 = *parse_prefix("2001:db8:2000::/56");
  build_ra(s, kPortMac, &p56, &out);
  ASSERT_EQ(out.size(), 16u + 8u + 32u);
  EXPECT_EQ(out[24 + 2], 56);
  EXPECT_EQ(out[24 + 3], 0x80);
  // A v4 prefix is never put in a PIO.
  Prefix v4 = *parse_prefix("198.51.100.0/28");
  EXPECT_EQ(build_ra(s, kPortMac, &v4, &out), 16u + 8u);
  EXPECT_EQ(out.size(), 16u + 8u);
}

TEST(RouterAdvert, OutputBufferIsReused) {
  Settings s;
  std::vector<uint8_t> out;
  build_ra(s, kPortMac, nullptr, &out);
  size_t n = out.size();
  build_ra(s, kPortMac, nullptr, &out);
  EXPECT_EQ(out.size(), n);  // cleared, not appended
}

TEST(RouterAdvert, SettingsChecks) {
  Settings s;
  EXPECT_TRUE(check_settings(s).empty());
  EXPECT_TRUE(check_interval(s, 600).empty());
  EXPECT_FALSE(check_interval(s, 1800).empty());
  EXPECT_FALSE(check_interval(s, 0).empty());
  s.router_lifetime = 9001;
  s.mtu = 1000;
  s.rdnss = {*parse_ipv6("2001:db8::53")};
  s.rdnss_lifetime = 60;
  auto e = check_settings(s);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_NE(e[0].find("9001"), std::string::npos);
  EXPECT_NE(e[1].find("1000"), std::string::npos);
  EXPECT_NE(e[2].find("RDNSS lifetime 60"), std::string::npos);
}

// --- unsolicited RA scheduler ------------------------------------------------

constexpr uint64_t kSec = 1'000'000'000;

// Runs the wheel for `turns` full turns and returns, per key, the times it came up.
std::map<uint64_t, std::vector<uint64_t>> run_turns(RaScheduler& w, uint64_t t0, int turns,
                                                    size_t* max_batch = nullptr) {
  std::map<uint64_t, std::vector<uint64_t>> seen;
  std::vector<uint64_t> due;
  uint64_t end = t0 + uint64_t(turns) * w.slots() * w.tick_ns();
  for (uint64_t t = t0; t < end; t += w.tick_ns()) {
    due.clear();
    w.tick(t, &due);
    if (max_batch) *max_batch = std::max(*max_batch, due.size());
    for (uint64_t k : due) seen[k].push_back(t);
  }
  return seen;
}

TEST(RaScheduler, EveryKeyOncePerTurn) {
  RaScheduler w(60 * kSec, 600, 10000);
  for (uint64_t k = 0; k < 10000; ++k) ASSERT_TRUE(w.add(k * 7919));
  auto seen = run_turns(w, 5 * kSec, 3);
  ASSERT_EQ(seen.size(), 10000u);
  for (auto& [k, times] : seen) {
    ASSERT_EQ(times.size(), 3u) << k;
    EXPECT_EQ(times[1] - times[0], 60 * kSec);
    EXPECT_EQ(times[2] - times[1], 60 * kSec);
  }
}

TEST(RaScheduler, SpreadsEvenlyForAnyCount) {
  for (uint32_t n : {1u, 7u, 100u, 5000u, 60000u}) {
    RaScheduler w(600 * kSec, 60000, 1'000'000);
    for (uint32_t k = 0; k < n; ++k) ASSERT_TRUE(w.add(k));
    std::vector<uint32_t> used;
    uint32_t max = 0;
    for (uint32_t s = 0; s < w.slots(); ++s) {
      max = std::max(max, w.slot_size(s));
      if (w.slot_size(s)) used.push_back(s);
    }
    EXPECT_LE(max, 1u) << n;  // n ≤ slots: never two in one slot
    // Largest gap in time between two occupied slots (cyclic): an even
    // spread leaves gaps close to slots/n; the golden-ratio stride is
    // within a factor of ~2.7 of it (three-distance theorem).
    uint32_t gap = used.front() + w.slots() - used.back();
    for (size_t i = 1; i < used.size(); ++i) gap = std::max(gap, used[i] - used[i - 1]);
    if (n > 1) {
      EXPECT_LE(gap, 3 * w.slots() / n) << n;
    }
  }
}

TEST(RaScheduler, OneMillionAddedAtOnceIsNeverABurst) {
  const uint32_t n = 1'000'000, slots = 60000;  // 600 s / 10 ms ticks
  RaScheduler w(600 * kSec, slots, n);
  auto t0 = std::chrono::steady_clock::now();
  for (uint32_t k = 0; k < n; ++k) ASSERT_TRUE(w.add(k));
  double add_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint32_t max = 0, min = UINT32_MAX;
  for (uint32_t s = 0; s < slots; ++s) {
    max = std::max(max, w.slot_size(s));
    min = std::min(min, w.slot_size(s));
  }
  // 1M / 60000 = 16.7: every slot holds 16 or 17.
  EXPECT_LE(max, 17u);
  EXPECT_GE(min, 16u);
  EXPECT_FALSE(w.add(n));  // capacity is a bound
  size_t max_batch = 0, total = 0;
  std::vector<uint64_t> due;
  for (uint64_t t = 0; t < 600 * kSec; t += w.tick_ns()) {
    due.clear();
    w.tick(t, &due);
    max_batch = std::max(max_batch, due.size());
    total += due.size();
  }
  EXPECT_EQ(total, n);
  EXPECT_LE(max_batch, 17u);
  std::printf("1M keys added in %.3f s; max batch per 10 ms tick %zu\n", add_s, max_batch);
}

TEST(RaScheduler, ChurnNeverStarvesOrRepeatsAndStaysBounded) {
  const uint32_t slots = 1000, cap = 20000;
  RaScheduler w(100 * kSec, slots, cap);
  std::mt19937_64 rng(42);
  std::set<uint64_t> present;
  std::map<uint64_t, uint64_t> last;  // key → last time it came up (or added)
  std::vector<uint64_t> due;
  uint64_t t = 0, next_key = 0;
  for (int i = 0; i < 15000; ++i) {  // warm up to 15K keys
    ASSERT_TRUE(w.add(next_key));
    present.insert(next_key);
    last[next_key++] = t;
  }
  size_t max_batch = 0;
  for (int step = 0; step < 5 * int(slots); ++step, t += w.tick_ns()) {
    // ~6 adds and ~6 removes per tick: the whole population turns over
    // about twice during the run.
    for (int j = 0; j < 6; ++j) {
      if (present.size() < cap && w.add(next_key)) {
        present.insert(next_key);
        last[next_key++] = t;
      }
      if (!present.empty()) {
        auto it = present.lower_bound(rng() % next_key);
        if (it == present.end()) it = present.begin();
        ASSERT_TRUE(w.remove(*it));
        last.erase(*it);
        present.erase(it);
      }
    }
    due.clear();
    w.tick(t, &due);
    max_batch = std::max(max_batch, due.size());
    for (uint64_t k : due) {
      ASSERT_TRUE(present.count(k)) << "removed key " << k << " came up";
      ASSERT_LE(t - last[k], 100 * kSec) << "key " << k << " waited more than one turn";
      last[k] = t;
    }
    // No present key has waited longer than a turn (+1 tick).
    if (step % 500 == 0) {
      for (auto& [k, when] : last) ASSERT_LE(t - when, 100 * kSec + w.tick_ns()) << k;
    }
  }
  EXPECT_EQ(w.size(), present.size());
  size_t sum = 0;
  for (uint32_t s = 0; s < slots; ++s) {
    EXPECT_LE(w.slot_size(s), w.slot_capacity());
    sum += w.slot_size(s);
  }
  EXPECT_EQ(sum, present.size());
  EXPECT_LE(max_batch, w.slot_capacity());
}

TEST(RaScheduler, LateCallerGetsEachKeyOnceNotABacklog) {
  RaScheduler w(10 * kSec, 100, 1000);
  for (uint64_t k = 0; k < 1000; ++k) w.add(k);
  std::vector<uint64_t> due;
  w.tick(0, &due);
  due.clear();
  w.tick(35 * kSec, &due);  // 3.5 turns late
  std::set<uint64_t> uniq(due.begin(), due.end());
  EXPECT_EQ(due.size(), 1000u);
  EXPECT_EQ(uniq.size(), 1000u);
  EXPECT_GT(w.next_tick_ns(), 35 * kSec);
  due.clear();
  EXPECT_EQ(w.tick(35 * kSec, &due), 0u);  // nothing twice
}

// The index keeps node numbers and finds keys through the nodes: lookups
// must stay right across its rehashes and the reuse of freed nodes.
TEST(RaScheduler, IndexByNodeSurvivesGrowthAndNodeReuse) {
  const uint32_t cap = 200000;
  RaScheduler w(100 * kSec, 1000, cap);
  std::mt19937_64 rng(7);
  std::map<uint64_t, bool> ref;                            // key → present
  auto key = [&] { return rng() | (uint64_t{1} << 63); };  // high bit: far from node numbers
  for (uint32_t i = 0; i < cap; ++i) {                     // several rehashes on the way
    uint64_t k = key();
    ASSERT_TRUE(w.add(k));
    ref[k] = true;
  }
  EXPECT_FALSE(w.add(key()));  // full
  for (auto& [k, present] : ref)
    if (rng() % 2) {
      ASSERT_TRUE(w.remove(k));
      present = false;
    }
  for (uint32_t i = 0; i < cap / 4; ++i) {  // onto freed nodes
    uint64_t k = key();
    ASSERT_TRUE(w.add(k));
    ref[k] = true;
  }
  size_t n = 0;
  for (auto& [k, present] : ref) {
    ASSERT_EQ(w.contains(k), present) << k;
    ASSERT_EQ(w.slot_of(k) != UINT32_MAX, present) << k;
    ASSERT_FALSE(w.contains(k & ~(uint64_t{1} << 63))) << k;
    n += present;
  }
  EXPECT_EQ(w.size(), n);
  std::vector<uint64_t> due;
  w.tick(0, &due);
  w.tick(100 * kSec - 1, &due);  // one whole turn
  std::sort(due.begin(), due.end());
  EXPECT_EQ(due.size(), n);
  EXPECT_TRUE(std::adjacent_find(due.begin(), due.end()) == due.end());
  for (uint64_t k : due) ASSERT_TRUE(ref.at(k)) << k;
}

TEST(RaScheduler, AddRemoveContract) {
  RaScheduler w(kSec, 10, 3);
  EXPECT_TRUE(w.add(1));
  EXPECT_FALSE(w.add(1));
  EXPECT_TRUE(w.add(2));
  EXPECT_TRUE(w.add(3));
  EXPECT_FALSE(w.add(4));  // full
  EXPECT_TRUE(w.remove(2));
  EXPECT_FALSE(w.remove(2));
  EXPECT_EQ(w.slot_of(2), UINT32_MAX);
  EXPECT_TRUE(w.add(4));  // the freed node is reused
  EXPECT_EQ(w.size(), 3u);
  EXPECT_THROW(RaScheduler(0, 10, 1), std::invalid_argument);
  EXPECT_THROW(RaScheduler(kSec, 0, 1), std::invalid_argument);
}

}  // namespace
