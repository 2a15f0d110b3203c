#include "dataplane/xdp_dispatch.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <net/if.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xdp/libxdp.h>
#include <xdp/prog_dispatcher.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <set>
#include <vector>

#include "dataplane/dataplane.h"
#include "dataplane/skeleton.h"

namespace fs = std::filesystem;

namespace xbng::agent {

namespace {

std::string errstr(long err) { return std::strerror(static_cast<int>(err < 0 ? -err : err)); }

// libxdp's messages go to the agent's log: its warnings as warnings, the
// rest at debug level.
int libxdp_log(enum libxdp_print_level level, const char* format, va_list args) {
  char buf[512];
  std::vsnprintf(buf, sizeof buf, format, args);
  std::string line(buf);
  while (!line.empty() && line.back() == '\n') line.pop_back();
  if (level == LIBXDP_WARN)
    spdlog::warn("libxdp: {}", line);
  else
    spdlog::debug("libxdp: {}", line);
  return 0;
}

void route_libxdp_log() {
  static const bool done = [] {
    libxdp_set_print(libxdp_log);
    return true;
  }();
  (void)done;
}

struct Multiprog {
  struct xdp_multiprog* mp = nullptr;
  ~Multiprog() {
    if (mp) xdp_multiprog__close(mp);
  }
};

// The port's XDP program as libxdp sees it; mp stays null when the port
// has none. Throws on any other failure.
void read_multiprog(const PortInfo& port, Multiprog* out) {
  struct xdp_multiprog* mp = xdp_multiprog__get_from_ifindex(static_cast<int>(port.ifindex));
  const long err = libxdp_get_error(mp);
  if (err == -ENOENT || (!err && !mp)) return;
  if (err)
    throw DataplaneError(
        fmt::format("port {}: reading its XDP program through libxdp: {}", port.name, errstr(err)));
  out->mp = mp;
}

// Ids of the programs xbng pinned for a port (one per file of its directory).
std::set<uint32_t> pinned_ids(const std::string& dir) {
  std::set<uint32_t> ids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    int fd = bpf_obj_get(e.path().c_str());
    if (fd < 0) continue;
    struct bpf_prog_info info {};
    uint32_t len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) ids.insert(info.id);
    close(fd);
  }
  return ids;
}

// The id of the program of xbng's own pinned XDP link on `port`, 0 if none.
uint32_t own_link_prog(const std::string& bpffs, const PortInfo& port) {
  int fd = bpf_obj_get(link_pin_path(bpffs, port.name).c_str());
  if (fd < 0) return 0;
  struct bpf_link_info info {};
  uint32_t len = sizeof info;
  uint32_t id = 0;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.type == BPF_LINK_TYPE_XDP &&
      info.xdp.ifindex == port.ifindex)
    id = info.prog_id;
  close(fd);
  return id;
}

const char* mode_name(enum xdp_attach_mode m) {
  switch (m) {
    case XDP_MODE_SKB:
      return "generic (skb)";
    case XDP_MODE_NATIVE:
      return "native";
    case XDP_MODE_HW:
      return "offloaded";
    default:
      return "unspecified";
  }
}

}  // namespace

std::string dispatch_prog_pin_path(const std::string& bpffs, const std::string& ifname) {
  return fmt::format("{}/progs/{}", pin_root(bpffs), ifname);
}

void libxdp_check_host() {
  route_libxdp_log();
  if (const char* skip = std::getenv("LIBXDP_SKIP_DISPATCHER"); skip && std::string(skip) == "1")
    throw DataplaneError(
        "ports.xdp_attach = \"libxdp\" with LIBXDP_SKIP_DISPATCHER=1 in the environment: libxdp "
        "would attach without its dispatcher; unset it");
  const char* env = std::getenv("LIBXDP_BPFFS");
  const std::string dir = env && *env ? env : "/sys/fs/bpf";
  if (!is_bpffs(dir))
    throw DataplaneError(fmt::format(
        "ports.xdp_attach = \"libxdp\": {} is not a bpf filesystem, and libxdp keeps each port's "
        "dispatcher and the links of its programs pinned under {}/xdp: mount bpffs on the host "
        "(`mount -t bpf bpf {}`); nothing was changed",
        dir, dir, dir));
  // The pins hold the links of every program in the dispatcher: on a bpffs
  // of a private mount namespace they would die with xbngd.
  refuse_private_bpffs(dir);
}

void libxdp_check_port(const std::string& bpffs, const PortInfo& port, bool generic) {
  Multiprog m;
  read_multiprog(port, &m);
  if (!m.mp) return;
  if (xdp_multiprog__is_legacy(m.mp)) {
    struct xdp_program* main = xdp_multiprog__main_prog(m.mp);
    const uint32_t id = main ? xdp_program__id(main) : 0;
    if (id && id == own_link_prog(bpffs, port)) return;  // a switch from "link"
    throw DataplaneError(fmt::format(
        "port {}: XDP program {} (id {}) is attached without libxdp's dispatcher; with "
        "ports.xdp_attach = \"libxdp\" xbngd runs beside programs attached through libxdp only "
        "(`xdp-loader load`, or libxdp's xdp_program__attach): attach it that way, or remove it "
        "(`ip link set dev {} xdp off`); nothing was changed",
        port.name, main ? xdp_program__name(main) : "?", id, port.name));
  }
  const enum xdp_attach_mode want = generic ? XDP_MODE_SKB : XDP_MODE_NATIVE;
  if (xdp_multiprog__attach_mode(m.mp) != want)
    throw DataplaneError(fmt::format(
        "port {}: its libxdp dispatcher is attached in {} mode, xbngd is configured for {} "
        "(ports.xdp_generic); nothing was changed",
        port.name, mode_name(xdp_multiprog__attach_mode(m.mp)), mode_name(want)));
  // The swap holds xbng's old and new program at once: one slot spare.
  const std::set<uint32_t> ours = pinned_ids(dispatch_prog_pin_path(bpffs, port.name));
  int others = 0;
  for (struct xdp_program* p = xdp_multiprog__next_prog(nullptr, m.mp); p;
       p = xdp_multiprog__next_prog(p, m.mp))
    others += ours.count(xdp_program__id(p)) ? 0 : 1;
  if (others + 2 > MAX_DISPATCHER_ACTIONS)
    throw DataplaneError(fmt::format(
        "port {}: its libxdp dispatcher holds {} programs of others; xbng needs two of the {} "
        "slots (its program, and the next one while it is swapped in); nothing was changed",
        port.name, others, MAX_DISPATCHER_ACTIONS));
}

void libxdp_check_port_for_link(const std::string& bpffs, const PortInfo& port) {
  Multiprog m;
  read_multiprog(port, &m);
  if (!m.mp || xdp_multiprog__is_legacy(m.mp)) return;
  const std::set<uint32_t> ours = pinned_ids(dispatch_prog_pin_path(bpffs, port.name));
  std::string others;
  for (struct xdp_program* p = xdp_multiprog__next_prog(nullptr, m.mp); p;
       p = xdp_multiprog__next_prog(p, m.mp))
    if (!ours.count(xdp_program__id(p)))
      others += fmt::format("{}{} (id {}, priority {})", others.empty() ? "" : ", ",
                            xdp_program__name(p), xdp_program__id(p), xdp_program__run_prio(p));
  if (others.empty()) return;
  throw DataplaneError(fmt::format(
      "port {}: its libxdp dispatcher runs programs of others: {}; ports.xdp_attach = \"link\" "
      "takes the port's XDP hook for xbng alone and would remove them: keep ports.xdp_attach = "
      "\"libxdp\", or unload them first (`xdp-loader unload`); nothing was changed",
      port.name, others));
}

struct DispatchLoadTarget {
  struct xdp_program* dispatcher = nullptr;
  int main_fd = -1;
  ~DispatchLoadTarget() {
    if (dispatcher) xdp_program__close(dispatcher);
  }
};

namespace {

// libxdp's xdp-dispatcher.o, opened (not loaded). Throws when absent.
struct xdp_program* open_dispatcher_object() {
  struct xdp_program* d = xdp_program__find_file("xdp-dispatcher.o", nullptr, nullptr);
  if (long err = libxdp_get_error(d); err || !d)
    throw DataplaneError(fmt::format(
        "ports.xdp_attach = \"libxdp\": libxdp's xdp-dispatcher.o cannot be opened ({}); it is "
        "installed with libxdp (Debian: libxdp1, under /usr/lib/<arch>/bpf; or set "
        "LIBXDP_OBJECT_PATH)",
        errstr(err ? err : -ENOENT)));
  return d;
}

// Loads the dispatcher's own xdp_pass as a freplace program of `t`'s
// prog0, as libxdp's compatibility check does: a kernel that refuses it
// cannot run a dispatcher with programs in it.
void probe_freplace(const DispatchLoadTarget& t) {
  struct xdp_program* probe = open_dispatcher_object();
  struct bpf_object* obj = xdp_program__bpf_obj(probe);
  struct bpf_program* p = bpf_object__find_program_by_name(obj, "xdp_pass");
  struct bpf_program* q = bpf_object__find_program_by_name(obj, "xdp_dispatcher");
  int err = -ENOENT;
  if (p && q) {
    bpf_program__set_autoload(q, false);
    bpf_program__set_type(p, BPF_PROG_TYPE_EXT);
    bpf_program__set_expected_attach_type(p, static_cast<enum bpf_attach_type>(0));
    err = bpf_program__set_attach_target(p, t.main_fd, "prog0");
    if (!err) err = bpf_object__load(obj);
  }
  xdp_program__close(probe);
  if (!err) return;
  throw DataplaneError(fmt::format(
      "ports.xdp_attach = \"libxdp\": this kernel refuses freplace (BPF_PROG_TYPE_EXT) programs "
      "({}), and libxdp's dispatcher calls every program through one (kernel lockdown, or a "
      "kernel without BPF trampolines; libxdp itself then attaches a single program without "
      "the dispatcher). Use ports.xdp_attach = \"link\"; nothing was changed",
      errstr(err)));
}

}  // namespace

std::shared_ptr<DispatchLoadTarget> libxdp_load_target() {
  route_libxdp_log();
  auto t = std::make_shared<DispatchLoadTarget>();
  t->dispatcher = open_dispatcher_object();
  // A one-slot dispatcher, loaded only as the target the kernel checks the
  // freplace programs against (prog0's prototype); never attached.
  struct bpf_object* obj = xdp_program__bpf_obj(t->dispatcher);
  struct xdp_dispatcher_config cfg {};
  cfg.magic = XDP_DISPATCHER_MAGIC;
  cfg.dispatcher_version = XDP_DISPATCHER_VERSION;
  cfg.num_progs_enabled = 1;
  cfg.chain_call_actions[0] = 1U << XDP_DISPATCHER_RETVAL;
  struct bpf_map* rodata = bpf_object__next_map(obj, nullptr);
  if (!rodata || bpf_map__set_initial_value(rodata, &cfg, sizeof cfg) != 0)
    throw DataplaneError("libxdp's xdp-dispatcher.o: its configuration cannot be set");
  if (struct bpf_program* pass = bpf_object__find_program_by_name(obj, "xdp_pass"))
    bpf_program__set_autoload(pass, false);
  if (int err = bpf_object__load(obj); err)
    throw DataplaneError(fmt::format("loading libxdp's dispatcher: {}", errstr(err)));
  struct bpf_program* main = bpf_object__find_program_by_name(obj, "xdp_dispatcher");
  if (!main) throw DataplaneError("libxdp's xdp-dispatcher.o has no program xdp_dispatcher");
  t->main_fd = bpf_program__fd(main);
  probe_freplace(*t);
  return t;
}

void libxdp_add_run_config(struct bpf_object* obj, const std::vector<std::string>& progs,
                           unsigned priority) {
  struct btf* btf = bpf_object__btf(obj);
  if (!btf) throw DataplaneError("xbng's BPF object has no BTF: libxdp cannot run its programs");
  int int_id = btf__find_by_name_kind(btf, "int", BTF_KIND_INT);
  if (int_id < 0) int_id = btf__add_int(btf, "int", 4, BTF_INT_SIGNED);
  const int prio_ptr = btf__add_ptr(btf, btf__add_array(btf, int_id, int_id, priority));
  const uint32_t size = 8;
  std::vector<int> vars;
  int err = std::min(int_id, prio_ptr);
  for (const auto& name : progs) {
    const int st = btf__add_struct(btf, "", size);
    err = std::min(err, btf__add_field(btf, "priority", prio_ptr, 0, 0));
    vars.push_back(btf__add_var(btf, ("_" + name).c_str(), BTF_VAR_STATIC, st));
    err = std::min(err, std::min(st, vars.back()));
  }
  err = std::min(err, btf__add_datasec(btf, ".xdp_run_config", size * progs.size()));
  for (size_t i = 0; i < vars.size(); ++i)
    err = std::min(err, btf__add_datasec_var_info(btf, vars[i], size * i, size));
  if (err < 0)
    throw DataplaneError(
        fmt::format("adding libxdp's run configuration to xbng's BTF: {}", errstr(err)));
}

void libxdp_prepare_load(XbngSkelRefs* refs, const DispatchLoadTarget& t, unsigned priority) {
  std::vector<std::string> names;
  for (struct bpf_program* p : {refs->xdp_access, refs->xdp_uplink}) {
    bpf_program__set_type(p, BPF_PROG_TYPE_EXT);
    bpf_program__set_expected_attach_type(p, static_cast<enum bpf_attach_type>(0));
    if (int err = bpf_program__set_attach_target(p, t.main_fd, "prog0"); err)
      throw DataplaneError(
          fmt::format("{}: setting the freplace target: {}", bpf_program__name(p), errstr(err)));
    names.emplace_back(bpf_program__name(p));
  }
  libxdp_add_run_config(refs->obj, names, priority);
}

namespace {

// Detaches, in one dispatcher swap, every program of `ids` the port's
// dispatcher holds. Returns 0 or -errno.
int detach_ids(const PortInfo& port, const std::set<uint32_t>& ids) {
  Multiprog m;
  read_multiprog(port, &m);
  if (!m.mp || xdp_multiprog__is_legacy(m.mp)) return 0;
  std::vector<struct xdp_program*> progs;
  for (struct xdp_program* p = xdp_multiprog__next_prog(nullptr, m.mp); p;
       p = xdp_multiprog__next_prog(p, m.mp))
    if (ids.count(xdp_program__id(p))) progs.push_back(p);
  if (progs.empty()) return 0;
  return xdp_program__detach_multi(progs.data(), progs.size(), static_cast<int>(port.ifindex),
                                   xdp_multiprog__attach_mode(m.mp), 0);
}

// xdp_attach = "link" before: xbng's own link leaves the hook (no XDP on
// the port until the dispatcher is attached, a few milliseconds).
void leave_own_link(const std::string& bpffs, const PortInfo& port) {
  const std::string path = link_pin_path(bpffs, port.name);
  int fd = bpf_obj_get(path.c_str());
  if (fd < 0) return;
  spdlog::warn(
      "port {}: switching from ports.xdp_attach = \"link\" to \"libxdp\": xbng's XDP link is "
      "detached and the dispatcher attached (frames in between reach the kernel unprocessed)",
      port.name);
  if (bpf_link_detach(fd) != 0 && errno != ENOLINK) {
    const int e = errno;
    close(fd);
    throw DataplaneError(
        fmt::format("port {}: detaching xbng's XDP link {}: {}", port.name, path, errstr(e)));
  }
  close(fd);
  unlink(path.c_str());
}

}  // namespace

void libxdp_attach_port(const std::string& bpffs, const PortInfo& port, int prog_fd,
                        unsigned priority, bool generic) {
  const std::string dir = dispatch_prog_pin_path(bpffs, port.name);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw DataplaneError(fmt::format("cannot create {}: {}", dir, ec.message()));
  const std::set<uint32_t> old_ids = pinned_ids(dir);
  struct bpf_prog_info info {};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0)
    throw DataplaneError(fmt::format("port {}: reading the program: {}", port.name, errstr(errno)));
  // Pinned before it is attached: a crash past this point leaves every xbng
  // program of the dispatcher pinned, and the next start takes them out.
  const std::string pin = fmt::format("{}/{}", dir, info.id);
  if (!old_ids.count(info.id) && bpf_obj_pin(prog_fd, pin.c_str()) != 0)
    throw DataplaneError(fmt::format("port {}: pinning {}: {}", port.name, pin, errstr(errno)));
  leave_own_link(bpffs, port);

  struct xdp_program* p = xdp_program__from_fd(prog_fd);
  if (long err = libxdp_get_error(p); err || !p)
    throw DataplaneError(
        fmt::format("port {}: libxdp: {}", port.name, errstr(err ? err : -EINVAL)));
  // The run priority came with the program's BTF (libxdp_add_run_config).
  if (const unsigned got = xdp_program__run_prio(p); got != priority) {
    xdp_program__close(p);
    unlink(pin.c_str());
    throw DataplaneError(
        fmt::format("port {}: libxdp reads {} at priority {} from its BTF, not {}; nothing was "
                    "attached",
                    port.name, info.name, got, priority));
  }
  const enum xdp_attach_mode mode = generic ? XDP_MODE_SKB : XDP_MODE_NATIVE;
  int err =
      old_ids.count(info.id) ? 0 : xdp_program__attach(p, static_cast<int>(port.ifindex), mode, 0);
  xdp_program__close(p);
  if (err) {
    unlink(pin.c_str());
    throw DataplaneError(fmt::format("port {}: attaching {} through libxdp's dispatcher: {}",
                                     port.name, info.name, errstr(err)));
  }
  std::set<uint32_t> olds = old_ids;
  olds.erase(info.id);
  if (int derr = detach_ids(port, olds); derr)
    throw DataplaneError(fmt::format(
        "port {}: the new {} is in the dispatcher, but taking xbng's previous program out of it "
        "failed: {} (both end every frame: forwarding is right; the next start retries)",
        port.name, info.name, errstr(derr)));
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename() != std::to_string(info.id)) unlink(e.path().c_str());
  spdlog::info("port {}: {} in libxdp's dispatcher ({} mode, priority {}){}", port.name, info.name,
               mode_name(mode), priority,
               olds.empty() ? "" : ", in place of xbng's previous program");
}

std::string libxdp_detach_pinned(const std::string& dir, const std::string& ifname) {
  route_libxdp_log();
  std::string error;
  const unsigned ifx = if_nametoindex(ifname.c_str());
  if (ifx) {
    PortInfo port;
    port.name = ifname;
    port.ifindex = ifx;
    try {
      if (int err = detach_ids(port, pinned_ids(dir)); err)
        error =
            fmt::format("{}: taking xbng's program out of the dispatcher: {}", ifname, errstr(err));
    } catch (const DataplaneError& e) {
      error = e.what();
    }
  }
  if (!error.empty()) return error;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) unlink(e.path().c_str());
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT)
    return fmt::format("{}: rmdir: {}", dir, errstr(errno));
  return {};
}

}  // namespace xbng::agent
