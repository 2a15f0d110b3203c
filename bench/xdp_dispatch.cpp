// Per-packet cost of libxdp's dispatcher (ports.xdp_attach = "libxdp")
// against a program attached alone, under BPF_PROG_TEST_RUN: the
// dispatcher's own bare XDP_PASS program, then the dispatcher itself with
// 1, 2 and 3 program slots enabled and chained. Where the kernel loads
// freplace programs, each slot holds the bare program (what the dispatcher
// really runs); where it refuses them, the slots keep their empty stubs,
// which cost the same call and chain check less the jump into the
// extension. Variants alternate round by round; medians and ranges printed.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <xdp/libxdp.h>
#include <xdp/prog_dispatcher.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Variant {
  std::string name;
  int fd = -1;
  std::vector<double> ns;
};

int silent(enum libxdp_print_level, const char*, va_list) { return 0; }

// The dispatcher object with `slots` slots enabled, every slot chaining on
// every action (so that each frame passes through all of them). Loaded;
// returns the xdp_program (closed by the caller) or null.
struct xdp_program* load_dispatcher(unsigned slots, const char* prog_name) {
  struct xdp_program* d = xdp_program__find_file("xdp-dispatcher.o", nullptr, nullptr);
  if (libxdp_get_error(d) || !d) return nullptr;
  struct bpf_object* obj = xdp_program__bpf_obj(d);
  struct xdp_dispatcher_config cfg {};
  cfg.magic = XDP_DISPATCHER_MAGIC;
  cfg.dispatcher_version = XDP_DISPATCHER_VERSION;
  cfg.num_progs_enabled = static_cast<uint8_t>(slots);
  for (unsigned i = 0; i < slots; ++i) cfg.chain_call_actions[i] = ~0U;
  bpf_map__set_initial_value(bpf_object__next_map(obj, nullptr), &cfg, sizeof cfg);
  for (const char* n : {"xdp_dispatcher", "xdp_pass"})
    bpf_program__set_autoload(bpf_object__find_program_by_name(obj, n),
                              std::strcmp(n, prog_name) == 0);
  if (bpf_object__load(obj) != 0) {
    xdp_program__close(d);
    return nullptr;
  }
  return d;
}

int prog_fd(struct xdp_program* d, const char* name) {
  return bpf_program__fd(bpf_object__find_program_by_name(xdp_program__bpf_obj(d), name));
}

// Fills every slot of dispatcher `disp` with a freplace copy of the bare
// program. Returns 0 or -errno (the kernel's refusal).
int fill_slots(int disp, unsigned slots, std::vector<struct xdp_program*>* keep,
               std::vector<int>* links) {
  for (unsigned i = 0; i < slots; ++i) {
    struct xdp_program* e = xdp_program__find_file("xdp-dispatcher.o", nullptr, nullptr);
    if (libxdp_get_error(e) || !e) return -ENOENT;
    keep->push_back(e);
    struct bpf_object* obj = xdp_program__bpf_obj(e);
    bpf_program__set_autoload(bpf_object__find_program_by_name(obj, "xdp_dispatcher"), false);
    struct bpf_program* p = bpf_object__find_program_by_name(obj, "xdp_pass");
    bpf_program__set_type(p, BPF_PROG_TYPE_EXT);
    bpf_program__set_expected_attach_type(p, static_cast<enum bpf_attach_type>(0));
    const std::string fn = fmt::format("prog{}", i);
    if (int err = bpf_program__set_attach_target(p, disp, fn.c_str()); err) return err;
    if (int err = bpf_object__load(obj); err) return err;
    int l = bpf_raw_tracepoint_open(nullptr, bpf_program__fd(p));
    if (l < 0) return -errno;
    links->push_back(l);
  }
  return 0;
}

double run_ns(int fd, unsigned repeat) {
  unsigned char frame[64] = {};
  std::memset(frame, 0xff, 6);
  frame[12] = 0x08;
  LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = frame, .data_size_in = sizeof frame,
              .repeat = static_cast<int>(repeat));
  if (bpf_prog_test_run_opts(fd, &o) != 0) return -1;
  return o.duration;  // average ns per run
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"per-packet cost of libxdp's dispatcher (BPF_PROG_TEST_RUN)"};
  unsigned repeat = 1000000, rounds = 9;
  app.add_option("--repeat", repeat, "runs per measurement")->default_val(repeat);
  app.add_option("--rounds", rounds, "alternated rounds")->default_val(rounds);
  CLI11_PARSE(app, argc, argv);
  libxdp_set_print(silent);
  libbpf_set_print(nullptr);

  std::vector<struct xdp_program*> objs, keep;
  std::vector<int> links;
  std::vector<Variant> vs;
  struct xdp_program* bare = load_dispatcher(1, "xdp_pass");
  if (!bare) {
    fmt::print(stderr, "cannot load libxdp's xdp-dispatcher.o: {}\n", std::strerror(errno));
    return 1;
  }
  objs.push_back(bare);
  vs.push_back({"program alone (XDP_PASS)", prog_fd(bare, "xdp_pass"), {}});
  bool freplace = true;
  for (unsigned slots = 1; slots <= 3; ++slots) {
    struct xdp_program* d = load_dispatcher(slots, "xdp_dispatcher");
    if (!d) return 1;
    objs.push_back(d);
    const int fd = prog_fd(d, "xdp_dispatcher");
    int err = freplace ? fill_slots(fd, slots, &keep, &links) : -EPERM;
    if (err && freplace) {
      fmt::print("freplace refused by this kernel ({}): the slots keep their empty stubs\n",
                 std::strerror(-err));
      freplace = false;
    }
    vs.push_back({fmt::format("dispatcher, {} slot{} ({})", slots, slots > 1 ? "s" : "",
                              freplace ? "each the program, through freplace" : "empty stubs"),
                  fd,
                  {}});
  }
  for (unsigned r = 0; r < rounds; ++r)
    for (size_t i = 0; i < vs.size(); ++i) {
      Variant& v = vs[r % 2 ? vs.size() - 1 - i : i];
      v.ns.push_back(run_ns(v.fd, repeat));
    }
  const double base = [&] {
    auto s = vs[0].ns;
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }();
  fmt::print("{:<58} {:>8} {:>16} {:>10}\n", "variant (BPF_PROG_TEST_RUN, 64-byte frame)", "ns/run",
             "[min..max]", "- alone");
  for (auto& v : vs) {
    std::sort(v.ns.begin(), v.ns.end());
    const double med = v.ns[v.ns.size() / 2];
    fmt::print("{:<58} {:>8.1f} {:>16} {:>+10.1f}\n", v.name, med,
               fmt::format("[{:.0f}..{:.0f}]", v.ns.front(), v.ns.back()), med - base);
  }
  for (int l : links) close(l);
  for (auto* p : keep) xdp_program__close(p);
  for (auto* p : objs) xdp_program__close(p);
  return 0;
}
