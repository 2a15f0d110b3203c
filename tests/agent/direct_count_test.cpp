// The /128 counts of the delegated /64s in `direct_v6` (abi.h
// xbng_direct_route n128), as BpfMapOps keeps them on kernel maps: every
// write of kRoutesV6 inside a pool of /64s moves its /64's count by what
// the hash gained or lost (replaces, absent deletes, duplicates in a batch
// and failed writes included); writes of the /64s leave the counts alone,
// also from another thread at the same time; direct_count_v6 (start,
// layout change) makes them exact whatever they held. Root (the maps are
// the test's own, unpinned).
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include "dataplane/dataplane.h"
#include "store/map_ops.h"
#include "xbng/abi.h"

using namespace xbng::agent;

namespace {

constexpr uint32_t kSlots =
    512;  // /64s of 2001:db8:65:100::/56 at 0, /128s of 2001:db8:66::/120 at 256

struct Key16 {
  uint8_t b[16];
};

// A /128 inside the /64 at offset `off` of the pool of /64s, interface id `iid`.
Key16 k128(uint32_t off, uint32_t iid) {
  Key16 k{};
  const uint32_t w[4] = {htonl(0x20010db8u), htonl(0x00650100u + off), 0, htonl(iid)};
  std::memcpy(k.b, w, 16);
  return k;
}

struct Maps {
  StoreMaps sm{};
  Maps(uint32_t v6_entries = 1024) {
    for (int i = 0; i < kMapCount; ++i) sm.fd[i] = -1;
    make(MapId::kRoutesV6, BPF_MAP_TYPE_HASH, 16, sizeof(struct xbng_route), 0, v6_entries);
    make(MapId::kRoutesV6_64, BPF_MAP_TYPE_HASH, 8, sizeof(struct xbng_route), 0, 1024);
    make(MapId::kDirectV6, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct xbng_direct_route), BPF_F_MMAPABLE,
         kSlots);
    std::vector<Prefix> pools = {*parse_prefix("2001:db8:65:100::/56"),
                                 *parse_prefix("2001:db8:66::/120")};
    sm.direct = DirectLayout::plan(pools, 0, kSlots, nullptr);
  }
  ~Maps() {
    for (int fd : sm.fd)
      if (fd >= 0) close(fd);
  }
  void make(MapId m, bpf_map_type t, uint32_t ks, uint32_t vs, uint32_t flags, uint32_t n) {
    LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = flags);
    const int fd = bpf_map_create(t, map_name(m), ks, vs, n, &o);
    ASSERT_GE(fd, 0) << map_name(m) << ": " << std::strerror(errno);
    sm.fd[static_cast<int>(m)] = fd;
    sm.max_entries[static_cast<int>(m)] = n;
  }
  int fd(MapId m) const { return sm.fd[static_cast<int>(m)]; }
  struct xbng_direct_route line(uint32_t slot) const {
    struct xbng_direct_route d {};
    EXPECT_EQ(bpf_map_lookup_elem(fd(MapId::kDirectV6), &slot, &d), 0);
    return d;
  }
  uint32_t count(uint32_t slot) const { return line(slot).n128; }
  // The count every /64 line should hold: the /128s of the hash inside it.
  void expect_exact() const {
    std::vector<uint32_t> want(256, 0);
    map_for_each(fd(MapId::kRoutesV6), 16, sizeof(struct xbng_route),
                 [&](const void* k, const void*) {
                   auto slot = sm.direct.slot_of(DirectUnit::kV6_64, k);
                   if (slot) ++want[*slot];
                 });
    for (uint32_t s = 0; s < 256; ++s) ASSERT_EQ(count(s), want[s]) << "slot " << s;
  }
};

struct xbng_route route(uint32_t ifindex) {
  struct xbng_route r {};
  r.sub.ifindex = ifindex;
  r.sub.outer_vid = 100;
  r.sub.inner_vid = 7;
  return r;
}

}  // namespace

TEST(DirectCount, EachWriteOfA128MovesItsSlashSixtyFoursCount) {
  Maps m;
  BpfMapOps ops(m.sm, /*chunked_reads=*/false);
  const struct xbng_route r = route(3);
  const Key16 a = k128(8, 1), b = k128(8, 2), c = k128(9, 1);
  ASSERT_EQ(ops.update(MapId::kRoutesV6, a.b, &r, BPF_ANY), 0);
  EXPECT_EQ(m.count(8), 1u);
  ASSERT_EQ(ops.update(MapId::kRoutesV6, a.b, &r, BPF_ANY), 0);  // a replace: no new /128
  EXPECT_EQ(m.count(8), 1u);
  EXPECT_EQ(ops.update(MapId::kRoutesV6, a.b, &r, BPF_NOEXIST), -EEXIST);
  EXPECT_EQ(m.count(8), 1u);
  EXPECT_EQ(ops.update(MapId::kRoutesV6, b.b, &r, BPF_EXIST), -ENOENT);  // refused: uncounted
  EXPECT_EQ(m.count(8), 1u);
  ASSERT_EQ(ops.update(MapId::kRoutesV6, b.b, &r, BPF_NOEXIST), 0);
  ASSERT_EQ(ops.update(MapId::kRoutesV6, c.b, &r, BPF_ANY), 0);
  EXPECT_EQ(m.count(8), 2u);
  EXPECT_EQ(m.count(9), 1u);
  // The /64 written and erased around the counts, through its line.
  const uint8_t* p64 = a.b;  // a /64 key: the first 8 bytes
  ASSERT_EQ(ops.update(MapId::kRoutesV6_64, p64, &r, BPF_NOEXIST), 0);
  EXPECT_EQ(m.line(8).r.sub.ifindex, 3u);
  EXPECT_EQ(m.count(8), 2u);
  struct xbng_route got {};
  ASSERT_EQ(ops.lookup(MapId::kRoutesV6_64, p64, &got), 0);
  EXPECT_EQ(got.sub.ifindex, 3u);
  ASSERT_EQ(ops.erase(MapId::kRoutesV6_64, p64), 0);
  EXPECT_EQ(m.line(8).r.sub.ifindex, 0u);
  EXPECT_EQ(m.count(8), 2u);  // a count on a slot without a route
  EXPECT_EQ(ops.lookup(MapId::kRoutesV6_64, p64, &got), -ENOENT);
  ASSERT_EQ(ops.erase(MapId::kRoutesV6, a.b), 0);
  EXPECT_EQ(m.count(8), 1u);
  EXPECT_EQ(ops.erase(MapId::kRoutesV6, a.b), -ENOENT);  // absent: nothing to uncount
  EXPECT_EQ(m.count(8), 1u);
  // Outside the pool of /64s: no count anywhere; a /128 of the pool of
  // /128s goes to its own line, with no count.
  const Key16 out = k128(0x100, 1);  // 2001:db8:65:200::1
  Key16 in128{};
  const uint32_t w[4] = {htonl(0x20010db8u), htonl(0x00660000u), 0, htonl(7)};
  std::memcpy(in128.b, w, 16);
  ASSERT_EQ(ops.update(MapId::kRoutesV6, out.b, &r, BPF_ANY), 0);
  ASSERT_EQ(ops.update(MapId::kRoutesV6, in128.b, &r, BPF_ANY), 0);
  EXPECT_EQ(m.line(256 + 7).r.sub.ifindex, 3u);
  EXPECT_EQ(m.line(256 + 7).n128, 0u);
  m.expect_exact();
}

TEST(DirectCount, BatchesCountNewKeysOnceAndUncountWhatTheyDidNotWrite) {
  Maps m(6);  // a hash of 6: the batch below fails part-way
  BpfMapOps ops(m.sm, /*chunked_reads=*/false);
  const struct xbng_route r = route(4);
  std::vector<Key16> keys = {k128(1, 1), k128(1, 2), k128(1, 1), k128(2, 1)};  // a duplicate
  size_t done = 0;
  ASSERT_EQ(ops.update_many(MapId::kRoutesV6, keys.data(),
                            std::vector<struct xbng_route>(4, r).data(), 4, 16, sizeof r, &done),
            0);
  EXPECT_EQ(done, 4u);
  EXPECT_EQ(m.count(1), 2u);
  EXPECT_EQ(m.count(2), 1u);
  m.expect_exact();
  // 3 present, room for 3 more: the 4th new key fails, the 5th is never written.
  keys.clear();
  for (uint32_t i = 0; i < 5; ++i) keys.push_back(k128(3, 10 + i));
  const int rc =
      ops.update_many(MapId::kRoutesV6, keys.data(), std::vector<struct xbng_route>(5, r).data(), 5,
                      16, sizeof r, &done);
  EXPECT_NE(rc, 0);
  EXPECT_EQ(done, 3u);
  EXPECT_EQ(m.count(3), 3u);
  m.expect_exact();
  // Deletes: present keys uncounted once (a duplicate, an absent key).
  keys = {k128(1, 1), k128(1, 1), k128(3, 10), k128(3, 99)};
  ASSERT_EQ(ops.delete_many(MapId::kRoutesV6, keys.data(), keys.size(), 16), 0);
  EXPECT_EQ(m.count(1), 1u);
  EXPECT_EQ(m.count(3), 2u);
  m.expect_exact();
}

// The store writes kRoutesV6 and kRoutesV6_64 from two threads at once:
// the routes of the /64s never overwrite the counts of their lines.
TEST(DirectCount, SlashSixtyFourWritesOnAnotherThreadKeepTheCounts) {
  Maps m;
  BpfMapOps ops(m.sm, /*chunked_reads=*/false);
  std::thread t64([&] {
    for (int round = 0; round < 20; ++round)
      for (uint32_t off = 0; off < 256; ++off) {
        const Key16 k = k128(off, 0);
        const struct xbng_route r = route(1 + off);
        const int rc = round % 2 == 0 ? ops.update(MapId::kRoutesV6_64, k.b, &r, BPF_ANY)
                                      : ops.erase(MapId::kRoutesV6_64, k.b);
        ASSERT_EQ(rc, 0);
      }
  });
  const struct xbng_route r = route(9);
  int failed = 0;  // no ASSERT before the join
  for (int round = 0; round < 3; ++round)
    for (uint32_t off = 0; off < 256; ++off) {
      const Key16 k = k128(off, 1 + round);
      failed += ops.update(MapId::kRoutesV6, k.b, &r, BPF_ANY) != 0;
      if (off % 3 == 0) failed += ops.erase(MapId::kRoutesV6, k.b) != 0;
    }
  t64.join();
  ASSERT_EQ(failed, 0);
  m.expect_exact();
  for (uint32_t off = 0; off < 256; ++off) ASSERT_EQ(m.count(off), off % 3 == 0 ? 0u : 3u);
}

TEST(DirectCount, StartAndLayoutChangesWriteTheCountsExact) {
  Maps m;
  const struct xbng_route r = route(5);
  for (uint32_t off : {4u, 4u, 7u}) {
    static uint32_t iid = 0;
    const Key16 k = k128(off, ++iid);
    ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kRoutesV6), k.b, &r, BPF_ANY), 0);
  }
  // What a stop between a count and its /128 (or a build without counts)
  // leaves: too many on 9, none on 4 and 7; a route on 4 kept.
  for (uint32_t slot : {4u, 9u}) {
    struct xbng_direct_route d {};
    d.r = route(6);
    d.n128 = slot == 9 ? 2 : 0;
    ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kDirectV6), &slot, &d, BPF_ANY), 0);
  }
  DirectLines lines;
  ASSERT_EQ(lines.map(m.fd(MapId::kDirectV6), true), 0);
  EXPECT_EQ(direct_count_v6(m.fd(MapId::kRoutesV6), lines, m.sm.direct), 3u);
  EXPECT_EQ(m.count(4), 2u);
  EXPECT_EQ(m.count(7), 1u);
  EXPECT_EQ(m.count(9), 0u);
  EXPECT_EQ(m.line(4).r.sub.ifindex, 6u);
  m.expect_exact();
}

// A layout change (direct_relayout) counts the /128s in the lines of the
// new pools of /64s before it writes the new table; a move back out of the
// array leaves no count behind.
TEST(DirectCount, RelayoutCountsBeforeTheTable) {
  Maps m;
  m.make(MapId::kDirectPoolsV6, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct xbng_direct_table_v6), 0, 1);
  const struct xbng_route r = route(7);
  const Key16 a = k128(5, 1), b = k128(5, 2), c = k128(6, 1);
  for (const Key16* k : {&a, &b, &c})
    ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kRoutesV6), k->b, &r, BPF_ANY), 0);
  ASSERT_EQ(bpf_map_update_elem(m.fd(MapId::kRoutesV6_64), a.b, &r, BPF_ANY), 0);  // a's /64
  auto fd = [&](MapId id) { return m.fd(id); };
  auto [out, in] = direct_relayout(6, DirectLayout{}, m.sm.direct, fd);
  EXPECT_EQ(out, 0u);
  EXPECT_EQ(in, 1u);  // the /64 (the /128s stay in the hash)
  EXPECT_EQ(m.line(5).r.sub.ifindex, 7u);
  EXPECT_EQ(m.count(5), 2u);
  EXPECT_EQ(m.count(6), 1u);
  m.expect_exact();
  struct xbng_direct_table_v6 t6 {};
  const uint32_t zero = 0;
  ASSERT_EQ(bpf_map_lookup_elem(m.fd(MapId::kDirectPoolsV6), &zero, &t6), 0);
  EXPECT_TRUE(DirectLayout::from_tables({}, t6) == m.sm.direct);
  std::tie(out, in) = direct_relayout(6, m.sm.direct, DirectLayout{}, fd);
  EXPECT_EQ(out, 1u);
  EXPECT_EQ(m.count(5), 0u);
  EXPECT_EQ(m.count(6), 0u);
  EXPECT_EQ(m.line(5).r.sub.ifindex, 0u);
}
