// BpfMapOps::lookup_many on kernel maps: the chunked reads of
// bpf/store_read.bpf.c return what one bpf_map_lookup_elem per key returns
// (values and absent keys, several chunks, every map it reads), and the
// maps it does not read (the LPM prefixes) are read one key at a time, as
// is every map when the program is not loaded (the fallback of a kernel
// that refuses it).
// swap_many (bpf/store_read.bpf.c's swap_many, and without it) reads,
// merges and writes as xbng/store_read.h's merge says, and stops at a
// refused write.
// Root (exits 77 = skipped without it); the maps are the test's own,
// unpinned, gone with the process.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "store/map_ops.h"
#include "xbng/abi.h"
#include "xbng/store_read.h"

using namespace xbng::agent;

namespace {

constexpr uint32_t kEntries = 3 * XBNG_READ_CHUNK + 100;  // four chunks, the last partial

struct Maps {
  StoreMaps sm{};
  Maps() {
    for (int i = 0; i < kMapCount; ++i) sm.fd[i] = -1;
    make(MapId::kSubscribers, BPF_MAP_TYPE_HASH, sizeof(struct xbng_sub_key),
         sizeof(struct xbng_subscriber), 0);
    make(MapId::kPolice, BPF_MAP_TYPE_ARRAY, 4, sizeof(struct xbng_police), BPF_F_MMAPABLE);
    make(MapId::kRoutesV4, BPF_MAP_TYPE_HASH, 4, sizeof(struct xbng_route), 0);
    make(MapId::kRoutesV6, BPF_MAP_TYPE_HASH, 16, sizeof(struct xbng_route), 0);
    make(MapId::kRoutesV6_64, BPF_MAP_TYPE_HASH, 8, sizeof(struct xbng_route), 0);
    make(MapId::kPrefixesV4, BPF_MAP_TYPE_LPM_TRIE, 8, sizeof(struct xbng_route),
         BPF_F_NO_PREALLOC);
  }
  ~Maps() {
    for (int fd : sm.fd)
      if (fd >= 0) close(fd);
  }
  void make(MapId m, bpf_map_type t, uint32_t ks, uint32_t vs, uint32_t flags) {
    LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = flags);
    const int fd = bpf_map_create(t, map_name(m), ks, vs, 2 * kEntries, &o);
    ASSERT_GE(fd, 0) << map_name(m) << ": " << std::strerror(errno);
    sm.fd[static_cast<int>(m)] = fd;
    sm.max_entries[static_cast<int>(m)] = 2 * kEntries;
  }
};

// Entry i's value bytes: distinct in every byte position.
void fill(uint32_t i, void* v, size_t vs) {
  auto* b = static_cast<uint8_t*>(v);
  for (size_t j = 0; j < vs; ++j) b[j] = static_cast<uint8_t>(i * 7 + j + (i >> 8));
}

// Writes the even keys of 0..2*kEntries-1 (key bytes from `key_of`), then
// reads all of them, even and odd, both ways, and compares.
template <typename KeyOf>
void check(BpfMapOps& ops, int fd, MapId m, size_t ks, size_t vs, KeyOf key_of) {
  const uint32_t n = 2 * kEntries;
  std::vector<uint8_t> keys(n * ks), v(vs);
  for (uint32_t i = 0; i < n; ++i) {
    key_of(i, &keys[i * ks]);
    if (i % 2) continue;
    fill(i, v.data(), vs);
    ASSERT_EQ(bpf_map_update_elem(fd, &keys[i * ks], v.data(), BPF_ANY), 0) << std::strerror(errno);
  }
  std::vector<uint8_t> got(n * vs), found(n, 0xee);
  const uint64_t runs = ops.program_runs();
  ops.lookup_many(m, keys.data(), n, ks, got.data(), vs, found.data());
  // Through the program, a chunk a run; the trie, and every map without
  // the program, a key at a time.
  const bool chunked = ops.reads_in_chunks() && m != MapId::kPrefixesV4;
  EXPECT_EQ(ops.program_runs() - runs, chunked ? (n + XBNG_READ_CHUNK - 1) / XBNG_READ_CHUNK : 0)
      << map_name(m);
  size_t present = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const int rc = bpf_map_lookup_elem(fd, &keys[i * ks], v.data());
    ASSERT_EQ(found[i], rc == 0 ? 1 : 0) << map_name(m) << " key " << i;
    if (rc != 0) continue;
    ++present;
    ASSERT_EQ(std::memcmp(&got[i * vs], v.data(), vs), 0) << map_name(m) << " key " << i;
  }
  // The police array has every index: all present.
  EXPECT_EQ(present, m == MapId::kPolice ? n : n / 2) << map_name(m);
}

// Every map the store reads in chunks, and one it does not.
void check_all(Maps& maps, BpfMapOps& ops) {
  auto be32 = [](uint32_t i, uint8_t* k) {
    const uint32_t a = htonl(0x64400000u + i);
    std::memcpy(k, &a, 4);
  };
  check(ops, maps.sm.fd[static_cast<int>(MapId::kSubscribers)], MapId::kSubscribers,
        sizeof(struct xbng_sub_key), sizeof(struct xbng_subscriber), [](uint32_t i, uint8_t* k) {
          struct xbng_sub_key s = {7, static_cast<uint16_t>(1 + i / 4000),
                                   static_cast<uint16_t>(1 + i % 4000)};
          std::memcpy(k, &s, sizeof s);
        });
  // Slots 0..n-1 all exist (an array): what the store reads are the values.
  check(ops, maps.sm.fd[static_cast<int>(MapId::kPolice)], MapId::kPolice, 4,
        sizeof(struct xbng_police), [](uint32_t i, uint8_t* k) { std::memcpy(k, &i, 4); });
  check(ops, maps.sm.fd[static_cast<int>(MapId::kRoutesV4)], MapId::kRoutesV4, 4,
        sizeof(struct xbng_route), be32);
  check(ops, maps.sm.fd[static_cast<int>(MapId::kRoutesV6)], MapId::kRoutesV6, 16,
        sizeof(struct xbng_route), [](uint32_t i, uint8_t* k) {
          const uint32_t a[4] = {htonl(0x20010db8u), 0, htonl(i >> 16), htonl(i)};
          std::memcpy(k, a, 16);
        });
  check(ops, maps.sm.fd[static_cast<int>(MapId::kRoutesV6_64)], MapId::kRoutesV6_64, 8,
        sizeof(struct xbng_route), [](uint32_t i, uint8_t* k) {
          const uint32_t a[2] = {htonl(0x20010db8u), htonl(i)};
          std::memcpy(k, a, 8);
        });
  // Not read by the program (a trie): the per-key path, same answers.
  check(ops, maps.sm.fd[static_cast<int>(MapId::kPrefixesV4)], MapId::kPrefixesV4, 8,
        sizeof(struct xbng_route), [](uint32_t i, uint8_t* k) {
          const uint32_t a[2] = {24, htonl(0xc6336400u + (i << 8))};
          std::memcpy(k, a, 8);
        });
}

}  // namespace

TEST(StoreRead, ChunkedReadsMatchPerKeyLookups) {
  Maps maps;
  BpfMapOps ops(maps.sm);
  ASSERT_TRUE(ops.reads_in_chunks()) << "store_read.bpf.o did not load (see the log)";
  check_all(maps, ops);
}

// Without the program, lookup_many() gives the same answers a key at a time.
TEST(StoreRead, WithoutTheProgramPerKeyReadsMatch) {
  Maps maps;
  BpfMapOps ops(maps.sm, /*chunked_reads=*/false);
  ASSERT_FALSE(ops.reads_in_chunks());
  check_all(maps, ops);
  EXPECT_EQ(ops.program_runs(), 0u);
}

// swap_many of n keys of m: the even ones present with value fill(i), the
// odd ones absent (`police`, an array: all present); the new value of key i is fill(i + 1) with,
// for every fourth key, the owner and what the merge compares made equal to the old one's (a route
// left as it is unless asked, XBNG_SWAP_REWRITE every eighth). Through the program or not, the same
// answers: what each key held, found and written as the merge of xbng/store_read.h says, the maps
// holding the merged values.
template <typename KeyOf>
void check_swap(BpfMapOps& ops, int fd, MapId m, size_t ks, size_t vs, KeyOf key_of) {
  const uint32_t n = 2 * kEntries;
  std::vector<uint8_t> keys(n * ks), vals(n * vs), want_old(n * vs), in(n);
  for (uint32_t i = 0; i < n; ++i) {
    key_of(i, &keys[i * ks]);
    fill(i, &want_old[i * vs], vs);
    fill(i + 1, &vals[i * vs], vs);
    if (i % 4 == 0) {  // same owner, MAC, flags and slot: the first 16 bytes
      std::memcpy(&vals[i * vs], &want_old[i * vs], 16);
      if (m != MapId::kSubscribers) std::memcpy(&vals[i * vs + 16], &want_old[i * vs + 16], 4);
    }
    in[i] = m == MapId::kSubscribers ? (i % 3 == 0 ? XBNG_SWAP_KEEP_MAC : 0)
                                     : (i % 8 == 0 ? XBNG_SWAP_REWRITE : 0);
    if (m == MapId::kPolice || i % 2 == 0) {
      ASSERT_EQ(bpf_map_update_elem(fd, &keys[i * ks], &want_old[i * vs], BPF_ANY), 0)
          << std::strerror(errno);
    }
  }
  std::vector<uint8_t> old(n * vs), flags = in;
  size_t done = 0;
  const uint64_t runs = ops.swap_runs();
  ASSERT_EQ(ops.swap_many(m, keys.data(), n, ks, vals.data(), old.data(), vs, flags.data(), &done),
            0)
      << map_name(m) << ": " << std::strerror(errno);
  EXPECT_EQ(done, n);
  EXPECT_EQ(ops.swap_runs() - runs,
            ops.reads_in_chunks() ? (n + XBNG_READ_CHUNK - 1) / XBNG_READ_CHUNK : 0);
  size_t written = 0;
  std::vector<uint8_t> v(vs);
  for (uint32_t i = 0; i < n; ++i) {
    std::vector<uint8_t> merged(&vals[i * vs], &vals[(i + 1) * vs]);
    const bool present = m == MapId::kPolice || i % 2 == 0;
    const bool write = !present || swap_merge(m, merged.data(), &want_old[i * vs], in[i]);
    ASSERT_EQ(flags[i], (present ? XBNG_SWAP_FOUND : 0) | (write ? XBNG_SWAP_WRITTEN : 0))
        << map_name(m) << " key " << i;
    if (present) {
      ASSERT_EQ(std::memcmp(&old[i * vs], &want_old[i * vs], vs), 0) << i;
    }
    ASSERT_EQ(bpf_map_lookup_elem(fd, &keys[i * ks], v.data()), 0);
    const uint8_t* now = write ? merged.data() : &want_old[i * vs];
    ASSERT_EQ(std::memcmp(v.data(), now, vs), 0) << map_name(m) << " key " << i;
    written += write;
  }
  // Police slots and subscriber entries are always written; some routes
  // were left as they were, others rewritten: both paths taken.
  if (m == MapId::kSubscribers || m == MapId::kPolice) {
    EXPECT_EQ(written, n);
  } else {
    EXPECT_LT(written, n);
  }
}

void check_swaps(Maps& maps, BpfMapOps& ops) {
  auto fd = [&](MapId m) { return maps.sm.fd[static_cast<int>(m)]; };
  check_swap(ops, fd(MapId::kSubscribers), MapId::kSubscribers, sizeof(struct xbng_sub_key),
             sizeof(struct xbng_subscriber), [](uint32_t i, uint8_t* k) {
               struct xbng_sub_key s = {9, static_cast<uint16_t>(1 + i / 4000),
                                        static_cast<uint16_t>(1 + i % 4000)};
               std::memcpy(k, &s, sizeof s);
             });
  check_swap(ops, fd(MapId::kPolice), MapId::kPolice, 4, sizeof(struct xbng_police),
             [](uint32_t i, uint8_t* k) { std::memcpy(k, &i, 4); });
  check_swap(ops, fd(MapId::kRoutesV4), MapId::kRoutesV4, 4, sizeof(struct xbng_route),
             [](uint32_t i, uint8_t* k) {
               const uint32_t a = htonl(0x0a000000u + i);
               std::memcpy(k, &a, 4);
             });
  check_swap(ops, fd(MapId::kRoutesV6_64), MapId::kRoutesV6_64, 8, sizeof(struct xbng_route),
             [](uint32_t i, uint8_t* k) {
               const uint32_t a[2] = {htonl(0x20010db9u), htonl(i)};
               std::memcpy(k, a, 8);
             });
}

TEST(StoreRead, SwapsThroughTheProgramMergeAsTheStoreDoes) {
  Maps maps;
  BpfMapOps ops(maps.sm);
  ASSERT_TRUE(ops.reads_in_chunks()) << "store_read.bpf.o did not load (see the log)";
  check_swaps(maps, ops);
}

TEST(StoreRead, SwapsWithoutTheProgramMergeAsTheStoreDoes) {
  Maps maps;
  BpfMapOps ops(maps.sm, /*chunked_reads=*/false);
  check_swaps(maps, ops);
  EXPECT_EQ(ops.swap_runs(), 0u);
}

// A write the map refuses (full) stops the swap there: the keys before it
// processed, the refused one and those after it not written.
TEST(StoreRead, RefusedSwapStopsAtTheRefusedKey) {
  Maps maps;
  BpfMapOps ops(maps.sm);
  const int fd = maps.sm.fd[static_cast<int>(MapId::kRoutesV4)];
  const uint32_t cap = 2 * kEntries, n = cap + 10;
  std::vector<uint32_t> keys(n);
  std::vector<struct xbng_route> vals(n), old(n);
  std::vector<uint8_t> flags(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    keys[i] = htonl(0x0b000000u + i);
    vals[i].sub.ifindex = 1 + i;
  }
  size_t done = 0;
  const int rc = ops.swap_many(MapId::kRoutesV4, keys.data(), n, 4, vals.data(), old.data(),
                               sizeof vals[0], flags.data(), &done);
  EXPECT_LT(rc, 0);
  EXPECT_EQ(done, cap);
  struct xbng_route r;
  for (uint32_t i = 0; i < n; ++i)
    ASSERT_EQ(bpf_map_lookup_elem(fd, &keys[i], &r) == 0, i < cap) << i;
  for (uint32_t i = 0; i < cap; ++i) ASSERT_EQ(flags[i], XBNG_SWAP_WRITTEN) << i;
}

TEST(StoreRead, NoKeysNoRead) {
  Maps maps;
  BpfMapOps ops(maps.sm);
  uint8_t found = 0xee;
  ops.lookup_many(MapId::kSubscribers, nullptr, 0, 8, nullptr, 64, &found);
  EXPECT_EQ(found, 0xee);
}

int main(int argc, char** argv) {
  if (geteuid() != 0) {
    std::fprintf(stderr, "xbng_store_read_tests: needs root (BPF maps and programs); skipped\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
