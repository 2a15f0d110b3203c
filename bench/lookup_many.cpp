// What reading the values an update replaces costs, one system call per
// value (bpf_map_lookup_elem: agent/store/writer.cpp before
// bpf/store_read.bpf.c, and still where that program does not load)
// against one syscall program run per chunk of 2,048 keys
// (bench/bpf/lookup_many.bpf.c: the lookups in the kernel, keys and values
// through a mmapable array).
// A hash map of -n route values (struct xbng_route), looked up in a random
// order, --rounds times each way, alternated. Prints seconds and ns per
// key; checks that both ways read the same values. Needs root.
// A benchmark: it measures and prints, it never passes or fails.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "lookup_many.skel.h"
#include "xbng/abi.h"

namespace {

constexpr uint32_t kChunk = 2048;  // LM_CHUNK of lookup_many.bpf.c

struct Scratch {  // struct lm_scratch
  uint32_t keys[kChunk];
  struct xbng_route vals[kChunk];
  uint8_t found[kChunk];
};

double secs_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hash map values read one system call each vs in a syscall program"};
  uint32_t n = 1'000'000;
  int rounds = 3;
  app.add_option("-n", n, "entries in the map, all looked up")->default_str("1000000");
  app.add_option("--rounds", rounds, "timed rounds each way")->default_str("3");
  CLI11_PARSE(app, argc, argv);
  lookup_many* sk = lookup_many::open_and_load();
  if (!sk) {
    fmt::print(stderr, "loading lookup_many.bpf.o: {}\n", std::strerror(errno));
    return 1;
  }
  const int map = bpf_map__fd(sk->maps.lm_routes);
  const int prog = bpf_program__fd(sk->progs.lookup_many);
  const size_t len = (sizeof(Scratch) + 4095) & ~size_t{4095};
  void* mem =
      mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(sk->maps.lm_scratch), 0);
  if (mem == MAP_FAILED) {
    fmt::print(stderr, "mmap of lm_scratch: {}\n", std::strerror(errno));
    return 1;
  }
  auto* sc = static_cast<Scratch*>(mem);
  std::vector<uint32_t> keys(n);
  for (uint32_t i = 0; i < n; ++i) {
    keys[i] = i * 2654435761u;
    struct xbng_route v {};
    v.down_packets = i;
    v.down_bytes = uint64_t{i} * 100;
    if (bpf_map_update_elem(map, &keys[i], &v, BPF_ANY) != 0) {
      fmt::print(stderr, "filling the map: {}\n", std::strerror(errno));
      return 1;
    }
  }
  std::shuffle(keys.begin(), keys.end(), std::mt19937(1));
  fmt::print("{} route values ({} bytes each), all looked up in random order\n", n,
             sizeof(struct xbng_route));
  fmt::print("{:>5} {:>16} {:>10} {:>22} {:>10} {:>7}\n", "round", "per key: s", "ns/key",
             "syscall program: s", "ns/key", "ratio");
  for (int r = 0; r < rounds; ++r) {
    uint64_t sum_a = 0, sum_b = 0;
    double ta = 0, tb = 0;
    for (int way = 0; way < 2; ++way) {  // alternated: odd rounds start with the program
      const bool per_key = (way == 0) == (r % 2 == 0);
      const auto t0 = std::chrono::steady_clock::now();
      if (per_key) {
        for (uint32_t k : keys) {
          struct xbng_route v;
          if (bpf_map_lookup_elem(map, &k, &v) == 0) sum_a += v.down_packets + v.down_bytes;
        }
        ta = secs_since(t0);
        continue;
      }
      for (uint32_t i = 0; i < n; i += kChunk) {
        const uint32_t m = std::min(kChunk, n - i);
        std::memcpy(sc->keys, &keys[i], m * sizeof(uint32_t));
        struct {
          uint32_t n;
        } args{m};
        LIBBPF_OPTS(bpf_test_run_opts, ro, .ctx_in = &args, .ctx_size_in = sizeof args);
        if (bpf_prog_test_run_opts(prog, &ro) != 0) {
          fmt::print(stderr, "running lookup_many: {}\n", std::strerror(errno));
          return 1;
        }
        for (uint32_t j = 0; j < m; ++j)
          if (sc->found[j]) sum_b += sc->vals[j].down_packets + sc->vals[j].down_bytes;
      }
      tb = secs_since(t0);
    }
    fmt::print("{:>5} {:>16.3f} {:>10.0f} {:>22.3f} {:>10.0f} {:>7.2f}{}\n", r + 1, ta,
               ta * 1e9 / n, tb, tb * 1e9 / n, ta / tb,
               sum_a == sum_b ? "" : "  (the two ways read different values)");
  }
  munmap(mem, len);
  lookup_many::destroy(sk);
  return 0;
}
