// xbng_fuzz [--target NAME|all] [--iterations N] [--seed S] [--max-len L]
// Deterministic mutation fuzzing of the control-packet parsers; see fuzz.h.
// Prints per target: inputs run, how many the code accepted, time.
#include <chrono>
#include <cstring>
#include <random>
#include <string>

#include "fuzz.h"

namespace xbng::fuzz {

Bytes from_hex(const char* s) {
  Bytes out;
  int hi = -1;
  for (; *s; ++s) {
    char c = *s;
    int v = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (v < 0) continue;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  return out;
}

namespace {

const FuzzTarget* const kTargets[] = {&kDhcpv6Target, &kRsTarget,     &kDhcpv4Target,
                                      &kFleetTarget,  &kRadiusTarget, &kRelay4Target};

class Mutator {
 public:
  Mutator(uint64_t seed, size_t max_len) : rng_(seed), max_len_(max_len) {}

  uint64_t below(uint64_t n) { return n ? rng_() % n : 0; }

  // 1..5 stacked mutations of a seed (sometimes spliced with another).
  Bytes mutate(const std::vector<Bytes>& seeds) {
    Bytes b = seeds[below(seeds.size())];
    int n = 1 + static_cast<int>(below(5));
    for (int i = 0; i < n; ++i) step(b, seeds);
    if (b.size() > max_len_) b.resize(max_len_);
    return b;
  }

 private:
  void step(Bytes& b, const std::vector<Bytes>& seeds) {
    static const uint16_t kInteresting16[] = {0,     1,      2,      3,      4,     7,    8,
                                              12,    16,     24,     25,     0x7f,  0x80, 0xff,
                                              0x100, 0x7fff, 0x8000, 0xfffe, 0xffff};
    static const uint8_t kInteresting8[] = {0,  1,  2,  3,  4,  5,  6,    7,    8,    9,
                                            11, 12, 13, 14, 25, 26, 0x7f, 0x80, 0x85, 0xff};
    switch (below(10)) {
      case 0:  // bit flip
        if (!b.empty()) b[below(b.size())] ^= static_cast<uint8_t>(1u << below(8));
        break;
      case 1:  // interesting byte
        if (!b.empty()) b[below(b.size())] = kInteresting8[below(sizeof kInteresting8)];
        break;
      case 2:  // interesting 16-bit value: option codes and lengths
        if (b.size() >= 2) {
          size_t at = below(b.size() - 1);
          uint16_t v = kInteresting16[below(sizeof kInteresting16 / 2)];
          if (below(2)) v = static_cast<uint16_t>((b[at] << 8 | b[at + 1]) + below(5) - 2);
          b[at] = static_cast<uint8_t>(v >> 8);
          b[at + 1] = static_cast<uint8_t>(v);
        }
        break;
      case 3:  // truncate
        if (!b.empty()) b.resize(below(b.size()));
        break;
      case 4: {  // delete a range
        if (b.empty()) break;
        size_t at = below(b.size()), n = 1 + below(std::min<size_t>(16, b.size() - at));
        b.erase(b.begin() + static_cast<ptrdiff_t>(at), b.begin() + static_cast<ptrdiff_t>(at + n));
        break;
      }
      case 5: {  // insert random bytes
        size_t at = below(b.size() + 1), n = 1 + below(16);
        Bytes r(n);
        for (auto& x : r) x = static_cast<uint8_t>(rng_());
        b.insert(b.begin() + static_cast<ptrdiff_t>(at), r.begin(), r.end());
        break;
      }
      case 6: {  // duplicate a range (repeated options)
        if (b.size() < 4) break;
        size_t at = below(b.size()), n = 1 + below(std::min<size_t>(64, b.size() - at));
        Bytes r(b.begin() + static_cast<ptrdiff_t>(at), b.begin() + static_cast<ptrdiff_t>(at + n));
        size_t to = below(b.size() + 1);
        b.insert(b.begin() + static_cast<ptrdiff_t>(to), r.begin(), r.end());
        break;
      }
      case 7: {  // splice the tail of another seed
        const Bytes& o = seeds[below(seeds.size())];
        if (o.empty() || b.empty()) break;
        size_t cut = below(b.size()), from = below(o.size());
        b.resize(cut);
        b.insert(b.end(), o.begin() + static_cast<ptrdiff_t>(from), o.end());
        break;
      }
      case 8:  // message type
        if (!b.empty()) b[0] = static_cast<uint8_t>(below(4) ? below(16) : rng_());
        break;
      case 9:  // grow: oversized inputs
        if (below(8) == 0) b.resize(b.size() + below(1600), static_cast<uint8_t>(rng_()));
        break;
    }
  }

  std::mt19937_64 rng_;
  size_t max_len_;
};

}  // namespace
}  // namespace xbng::fuzz

int main(int argc, char** argv) {
  using namespace xbng::fuzz;
  std::string target = "all";
  uint64_t iterations = 200000, seed = 1;
  size_t max_len = 2048;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "xbng_fuzz: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--target")
      target = next();
    else if (a == "--iterations")
      iterations = std::stoull(next());
    else if (a == "--seed")
      seed = std::stoull(next());
    else if (a == "--max-len")
      max_len = std::stoull(next());
    else {
      std::fprintf(stderr,
                   "usage: xbng_fuzz [--target dhcpv6|rs|dhcpv4|fleet|radius|all] [--iterations N] "
                   "[--seed S] [--max-len L]\n");
      return 2;
    }
  }
  bool any = false;
  for (const FuzzTarget* t : kTargets) {
    if (target != "all" && target != t->name) continue;
    any = true;
    auto seeds = t->seeds();
    for (const Bytes& s : seeds) t->run_one(s.data(), s.size());  // seeds first, unmutated
    Mutator m(seed, max_len);
    auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < iterations; ++i) {
      Bytes b = m.mutate(seeds);
      t->run_one(b.data(), b.size());
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %llu mutated inputs (seed %llu) in %.1f s, no crash, no invariant broken\n",
                t->name, static_cast<unsigned long long>(iterations),
                static_cast<unsigned long long>(seed), s);
    if (t->report) t->report();
  }
  if (!any) {
    std::fprintf(stderr, "xbng_fuzz: no target named %s\n", target.c_str());
    return 2;
  }
  return 0;
}
