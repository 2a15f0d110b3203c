// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Entry point of xbng_bpf_tests. Before any test runs, the process moves to a
// private network namespace (unshare(CLONE_NEWNET)) and builds the test
// topology there with `ip`: everything it creates vanishes with the process,
// nothing touches the host's namespace. No XDP program is attached and
// nothing is pinned: BPF_PROG_TEST_RUN needs neither.
#include <gtest/gtest.h>
#include <sched.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr int kSkip = 77;  // ctest SKIP_RETURN_CODE

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "xbng_bpf_tests: %s\n", what.c_str());
  std::exit(1);
}

// Runs a command (argv[0] looked up in PATH) in this (private) namespace.
void run(std::vector<std::string> args) {
  std::vector<char*> argv;
  std::string line;
  for (auto& a : args) {
    argv.push_back(a.data());
    line += a + " ";
  }
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) die("cannot run " + line + ": " + std::strerror(rc));
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    die("failed: " + line);
}

void write_sysctl(const std::string& path, const std::string& value) {
  std::ofstream f("/proc/sys/net/" + path);
  f << value;
  f.close();
  if (!f) die("cannot write /proc/sys/net/" + path);
}

ino_t netns_inode() {
  struct stat st {};
  if (stat("/proc/self/ns/net", &st) != 0)
    die(std::string("stat /proc/self/ns/net: ") + std::strerror(errno));
  return st.st_ino;
}

// The topology of harness.cpp (kAcc*, kUp0, the uplink neighbours).
void build_topology() {
  run({"ip", "link", "set", "lo", "up"});
  const char* access[][2] = {{"acc0", "02:00:00:00:a0:00"},
                             {"acc1", "02:00:00:00:a1:00"},
                             {"acc2", "02:00:00:00:a2:00"},
                             {"acc3", "02:00:00:00:a3:00"}};
  for (auto& a : access) {
    std::string peer = std::string(a[0]) + "p";
    run({"ip", "link", "add", a[0], "address", a[1], "type", "veth", "peer", "name", peer});
    run({"ip", "link", "set", a[0], "up"});
    run({"ip", "link", "set", peer, "up"});
  }
  run({"ip", "link", "add", "up0", "address", "02:00:00:00:0f:00", "type", "veth", "peer", "name",
       "up0p", "address", "02:00:00:00:0f:01"});
  run({"ip", "link", "set", "up0", "up"});
  run({"ip", "link", "set", "up0p", "up"});
  run({"ip", "addr", "add", "192.0.2.1/24", "dev", "up0"});
  run({"ip", "-6", "addr", "add", "2001:db8:ffff::1/64", "dev", "up0", "nodad"});
  run({"ip", "neigh", "replace", "192.0.2.254", "lladdr", "02:00:00:00:0f:fe", "dev", "up0", "nud",
       "permanent"});
  run({"ip", "-6", "neigh", "replace", "2001:db8:ffff::fe", "lladdr", "02:00:00:00:0f:fe", "dev",
       "up0", "nud", "permanent"});
  run({"ip", "route", "add", "default", "via", "192.0.2.254", "dev", "up0"});
  run({"ip", "-6", "route", "add", "default", "via", "2001:db8:ffff::fe", "dev", "up0"});
  // No neighbour for these gateways: BPF_FIB_LKUP_RET_NO_NEIGH.
  run({"ip", "route", "add", "203.0.113.0/25", "via", "192.0.2.253", "dev", "up0"});
  run({"ip", "-6", "route", "add", "2001:db8:dead::/48", "via", "2001:db8:ffff::fd", "dev", "up0"});
  run({"ip", "route", "add", "unreachable", "203.0.113.128/26"});
  run({"ip", "route", "add", "blackhole", "203.0.113.192/26"});
  // Per-netns sysctls (after the links exist: `all` propagates to them).
  write_sysctl("ipv4/ip_forward", "1");
  write_sysctl("ipv4/conf/all/forwarding", "1");
  write_sysctl("ipv6/conf/all/forwarding", "1");
}

}  // namespace

int main(int argc, char** argv) {
  if (geteuid() != 0) {
    std::fprintf(stderr, "xbng_bpf_tests: needs root (BPF, network namespaces); skipped\n");
    return kSkip;
  }
  ino_t host_ns = netns_inode();
  if (unshare(CLONE_NEWNET) != 0)
    die(std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno));
  if (netns_inode() == host_ns)
    die("still in the original network namespace after unshare; refusing to continue");
  build_topology();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
