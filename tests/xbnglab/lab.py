"""Throwaway veth labs in network namespaces, for the integration tests,
the demo and the benchmarks.

Every namespace, bpffs directory and runtime directory a Lab creates carries
the creating process's pid in its name (``xbngt-<pid>-<role>``). Cleanup runs
on every exit path we control (context manager, atexit, SIGTERM/SIGINT/SIGHUP);
for the ones we do not (SIGKILL, a crash), ``sweep_stale()`` removes whatever a
dead pid left behind, and every Lab calls it before building anything.

Nothing is ever created in the root network namespace: veth pairs are created
inside a lab namespace and one end is moved to the other lab namespace.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import time

CLONE_NEWNET = 0x40000000
BPFFS = "/sys/fs/bpf"
NETNS_DIR = "/run/netns"


def _abi_version() -> int:
    """XBNG_ABI_VERSION of include/xbng/abi.h: pins live under <bpffs>/v<it>/."""
    abi = os.path.join(os.path.dirname(__file__), "..", "..", "include", "xbng", "abi.h")
    with open(abi) as f:
        m = re.search(r"^#define XBNG_ABI_VERSION (\d+)", f.read(), re.M)
    return int(m.group(1))


ABI_VERSION = _abi_version()
PIN_VERSION_DIR = f"v{ABI_VERSION}"  # the pin directory's version component

_libc = ctypes.CDLL(None, use_errno=True)
_NAME_RE = re.compile(r"^(xbngt|xbngdemo|xbngbench)-(\d+)-")
_live_labs: list["Lab"] = []


def sh(cmd: list[str] | str, check: bool = True, capture: bool = True,
       timeout: float | None = 60, input: str | None = None) -> subprocess.CompletedProcess:
    """Runs a command; on failure raises with its output in the message."""
    if isinstance(cmd, str):
        cmd = ["bash", "-c", cmd]
    r = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise RuntimeError(f"command failed ({r.returncode}): {' '.join(cmd)}\n"
                           f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ensure_bpffs() -> None:
    if not os.path.ismount(BPFFS):
        sh(["mount", "-t", "bpf", "bpf", BPFFS])


def _remove_netns(name: str) -> None:
    pids = sh(["ip", "netns", "pids", name], check=False).stdout.split()
    for p in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(p), signal.SIGKILL)
    for p in pids:  # let the kernel reap them before the netns goes
        for _ in range(50):
            if not _pid_alive(int(p)):
                break
            time.sleep(0.02)
    sh(["ip", "netns", "del", name], check=False)


def sweep_stale() -> list[str]:
    """Removes namespaces, pins and run dirs left by lab processes that died."""
    removed = []
    for line in sh(["ip", "netns", "list"], check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME_RE.match(name)
        if m and not _pid_alive(int(m.group(2))):
            _remove_netns(name)
            removed.append(name)
    for base in (BPFFS, "/run", "/run/xbng"):
        with contextlib.suppress(FileNotFoundError):
            for entry in os.listdir(base):
                m = _NAME_RE.match(entry + "-")
                if m and not _pid_alive(int(m.group(2))):
                    shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
                    removed.append(os.path.join(base, entry))
    return removed


class Netns:
    """A named network namespace (ip netns)."""

    def __init__(self, name: str):
        self.name = name
        self.path = os.path.join(NETNS_DIR, name)

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh(["ip", "-n", self.name, *args], check=check)

    def exec(self, cmd: list[str], check: bool = True, timeout: float | None = 60) -> subprocess.CompletedProcess:
        """Runs cmd inside the namespace (ip netns exec: private /sys, no bpffs)."""
        return sh(["ip", "netns", "exec", self.name, *cmd], check=check, timeout=timeout)

    def nsenter_argv(self, cmd: list[str]) -> list[str]:
        """argv running cmd inside the namespace with the host's /sys/fs/bpf visible."""
        return ["nsenter", f"--net={self.path}", *cmd]

    def sysctl(self, key: str, value: str) -> None:
        self.exec(["sysctl", "-qw", f"{key}={value}"])

    @contextlib.contextmanager
    def entered(self):
        """Moves the calling thread into this namespace for the duration."""
        orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(self.path, os.O_RDONLY)
        try:
            if _libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns {self.name}")
            yield
        finally:
            _libc.setns(orig, CLONE_NEWNET)
            os.close(orig)
            os.close(target)

    def packet_socket(self, ifname: str) -> socket.socket:
        """A raw AF_PACKET socket bound to ifname inside this namespace."""
        with self.entered():
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            s.bind((ifname, 0))
        # Tests send bursts, then read: make room (SO_RCVBUFFORCE: we are root).
        s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        enable_auxdata(s)
        return s

    def ifindex(self, ifname: str) -> int:
        out = self.ip("-o", "link", "show", "dev", ifname).stdout
        return int(out.split(":", 1)[0])

    def mac(self, ifname: str) -> str:
        out = self.ip("-o", "link", "show", "dev", ifname).stdout
        return re.search(r"link/ether ([0-9a-f:]{17})", out).group(1)


class Lab:
    """A set of namespaces, processes and pins removed together."""

    def __init__(self, kind: str = "xbngt"):
        if os.geteuid() != 0:
            raise PermissionError("labs need root (network namespaces, BPF)")
        ensure_bpffs()
        sweep_stale()
        self.id = f"{kind}-{os.getpid()}"
        self.namespaces: dict[str, Netns] = {}
        self.procs: list[subprocess.Popen] = []
        self.bpffs = os.path.join(BPFFS, self.id)
        self.rundir = os.path.join("/run", self.id)
        os.makedirs(self.rundir, exist_ok=True)
        self._closed = False
        _live_labs.append(self)

    # -- topology ---------------------------------------------------------
    def netns(self, role: str) -> Netns:
        name = f"{self.id}-{role}"
        sh(["ip", "netns", "add", name])
        ns = Netns(name)
        self.namespaces[role] = ns
        ns.ip("link", "set", "lo", "up")
        return ns

    def veth(self, a: Netns, a_if: str, b: Netns, b_if: str, mtu: int | None = None) -> None:
        """A veth pair created inside namespace a, peer moved to b: never in the root netns."""
        a.ip("link", "add", a_if, "type", "veth", "peer", "name", b_if, "netns", b.name)
        for ns, ifn in ((a, a_if), (b, b_if)):
            if mtu:
                ns.ip("link", "set", "dev", ifn, "mtu", str(mtu))
            ns.ip("link", "set", "dev", ifn, "up")

    def attach_pass(self, ns: Netns, ifname: str, obj: str) -> None:
        """A pass-through XDP program, so that frames redirected into the peer are received."""
        ns.ip("link", "set", "dev", ifname, "xdpdrv", "obj", obj, "sec", "xdp")

    # -- processes ----------------------------------------------------------
    def spawn(self, argv: list[str], log: str | None = None, **kw) -> subprocess.Popen:
        out = open(log, "w") if log else subprocess.DEVNULL
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
                             start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        return p.returncode

    # -- teardown -------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for p in reversed(self.procs):
            with contextlib.suppress(Exception):
                self.stop(p, signal.SIGKILL, timeout=5)
        for ns in self.namespaces.values():
            _remove_netns(ns.name)
        shutil.rmtree(self.bpffs, ignore_errors=True)
        shutil.rmtree(self.rundir, ignore_errors=True)
        # xbngd's state (leases, DHCPv6 DUID) for a non-default pin dir.
        # xbngd's state (leases, DUID) of a lab's agents: /run/xbng/<basename
        # of their bpffs>, i.e. <id> or <id>-<node>.
        for state in glob.glob(os.path.join("/run/xbng", self.id)) + \
                glob.glob(os.path.join("/run/xbng", self.id + "-*")):
            shutil.rmtree(state, ignore_errors=True)
        with contextlib.suppress(ValueError):
            _live_labs.remove(self)

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close_all() -> None:
    for lab in list(_live_labs):
        with contextlib.suppress(Exception):
            lab.close()


def _on_signal(signum, _frame):
    _close_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(_close_all)
for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_sig, _on_signal)


def read_text(path: str) -> str:
    """A file's text; "" while it does not exist (a log not yet written)."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_for(pred, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


SOL_PACKET = 263
PACKET_AUXDATA = 8
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40


def enable_auxdata(sock: socket.socket) -> None:
    sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)


def _restore_vlan(data: bytes, ancdata) -> bytes:
    """The kernel moves the outermost VLAN tag of a received frame into
    metadata before AF_PACKET sees it; put it back from PACKET_AUXDATA."""
    for level, typ, cdata in ancdata:
        if level == SOL_PACKET and typ == PACKET_AUXDATA and len(cdata) >= 20:
            status = int.from_bytes(cdata[0:4], "little")
            tci = int.from_bytes(cdata[16:18], "little")
            tpid = int.from_bytes(cdata[18:20], "little")
            if status & TP_STATUS_VLAN_VALID:
                if not status & TP_STATUS_VLAN_TPID_VALID:
                    tpid = 0x8100
                return data[:12] + tpid.to_bytes(2, "big") + tci.to_bytes(2, "big") + data[12:]
    return data


def recv_frames(sock: socket.socket, timeout: float, want: int | None = None,
                match=None) -> list[bytes]:
    """Frames read from a packet socket (made with packet_socket, auxdata on)
    until timeout or until `want` frames matched, VLAN tags restored."""
    frames: list[bytes] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            data, anc, _flags, addr = sock.recvmsg(65535, socket.CMSG_SPACE(64))
        except socket.timeout:
            break
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        data = _restore_vlan(data, anc)
        if match is None or match(data):
            frames.append(data)
            if want is not None and len(frames) >= want:
                break
    return frames


def drain(sock: socket.socket) -> None:
    sock.setblocking(False)
    try:
        while True:
            sock.recv(65535)
    except (BlockingIOError, socket.timeout):
        pass
    finally:
        sock.setblocking(True)
