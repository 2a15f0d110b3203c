// Attaching through libxdp's dispatcher (`[ports] xdp_attach = "libxdp"`).
//
// The port's XDP hook holds libxdp's dispatcher, which calls up to ten
// component programs in run-priority order (lower first), each through
// freplace; a program's chain-call actions say which of its verdicts go on
// to the next one. xbng's two programs are loaded as freplace (EXT)
// programs and run at `xdp_priority` (carried in their BTF: libxdp reads a
// loaded program's priority from there only): an operator program at a
// lower priority number runs first, and its XDP_PASS (its chain-call
// action) continues to xbng. xbng chains on XDP_PASS only (libxdp's default,
// which it keeps for a loaded program): its other verdicts end the frame.
//
// Replacing xbng's program (restart, upgrade) is two dispatcher swaps, each
// atomic (libxdp attaches a new dispatcher with XDP_FLAGS_REPLACE over the
// old one): first a dispatcher holding the old and the new xbng program,
// then one without the old. In the middle one each frame meets the first
// of them (a frame it passes meets the second too); no frame ever meets
// neither. The programs of others in the dispatcher are linked again into
// each new one (libxdp re-attaches their freplace programs), never removed.
//
// xbng's program on each port is pinned at <pin root>/progs/<ifname>: how a
// restart finds its own program among the dispatcher's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct XbngSkelRefs;
struct bpf_object;

namespace xbng::agent {

struct PortInfo;

// <pin root>/progs/<ifname>.
std::string dispatch_prog_pin_path(const std::string& bpffs, const std::string& ifname);

// Refuses (DataplaneError) a host where libxdp cannot keep its dispatchers:
// no bpf filesystem at /sys/fs/bpf (or $LIBXDP_BPFFS), or one that is not
// the host's, or LIBXDP_SKIP_DISPATCHER set.
void libxdp_check_host();

// Refuses (DataplaneError, nothing changed) a port whose XDP program is not
// a libxdp dispatcher, unless it is xbng's own pinned link (a switch from
// xdp_attach = "link"), a dispatcher in the other mode (`generic`: SKB) and
// one without two free slots (xbng's program and its successor in a swap).
void libxdp_check_port(const std::string& bpffs, const PortInfo& port, bool generic);

// Refuses (DataplaneError, nothing changed) the link attach of a port whose
// libxdp dispatcher holds programs of others: they would be detached.
void libxdp_check_port_for_link(const std::string& bpffs, const PortInfo& port);

// A dispatcher loaded (never attached) as the target xbng's programs are
// loaded against as freplace programs. Refuses (DataplaneError, nothing
// changed) a kernel that does not load freplace programs.
struct DispatchLoadTarget;
std::shared_ptr<DispatchLoadTarget> libxdp_load_target();
// Makes the opened, not yet loaded programs of `refs` freplace programs of
// `target`, with libxdp's run priority `priority` in their BTF (libxdp
// reads it from the loaded programs).
void libxdp_prepare_load(XbngSkelRefs* refs, const DispatchLoadTarget& target, unsigned priority);

// libxdp takes a loaded program's run priority only from its BTF (the
// setters refuse a loaded program): a struct `_<program name>` in a
// `.xdp_run_config` DATASEC whose `priority` member points to an int array
// of that length, as xdp_helpers.h's XDP_RUN_CONFIG writes it. Adds one per
// program of `progs` to the opened object's BTF, so it reaches the kernel
// with the programs and libxdp reads it back from their fds. (The chain-call
// actions of such a struct libxdp does not apply to a loaded program:
// xbng's stay libxdp's default, XDP_PASS.) Static VARs: libbpf looks no ELF
// symbol up for them. Throws DataplaneError.
void libxdp_add_run_config(struct bpf_object* obj, const std::vector<std::string>& progs,
                           unsigned priority);

// Puts `prog_fd` into the port's dispatcher at `priority` and takes xbng's
// previous program out of it (see above); pins the new one. Throws
// DataplaneError. `generic`: SKB mode.
void libxdp_attach_port(const std::string& bpffs, const PortInfo& port, int prog_fd,
                        unsigned priority, bool generic);

// Takes xbng's pinned program out of the dispatcher of `ifname` (when the
// port still exists and holds it) and unpins it. A port left with no other
// program loses its dispatcher. Returns an error text, empty when done.
std::string libxdp_detach_pinned(const std::string& pin, const std::string& ifname);

}  // namespace xbng::agent
