"""The standard xbng lab: sub <-> dut <-> net, with the real xbngd in dut.

    sub: s0 ===== acc0 :dut: upl0 ===== n0 :net
         (QinQ)   access      uplink   (untagged, 192.0.2.0/24, 2001:db8:ffff::/64)

Subscriber addressing plan (index i, 0-based), shared by the tests, the demo
and the benchmarks:
    S-VID = 100 + i // c_per_s, C-VID = 1 + i % c_per_s
    IPv4  = 100.64.0.0 + 16 + i (100.64/10 holds 4M)   gateway 100.64.0.1
    IPv6  = 2001:db8:1000::/64 + 16 + i                 gateway 2001:db8:1000::1
    /64   = 2001:db8:2000::/36, the i-th /64
    MAC   = 02:00:<i as 4 bytes>
"""
from __future__ import annotations

import ipaddress
import json
import os
import select
import socket
import subprocess
import time

from xbnglab.lab import Lab, read_text, sh, wait_for

GW4 = "100.64.0.1"
GW6 = "2001:db8:1000::1"
UPLINK_DUT4, UPLINK_NET4 = "192.0.2.1", "192.0.2.2"
UPLINK_DUT6, UPLINK_NET6 = "2001:db8:ffff::1", "2001:db8:ffff::2"
V4_BASE = int(ipaddress.IPv4Address("100.64.0.0")) + 16
V6_BASE = int(ipaddress.IPv6Address("2001:db8:1000::")) + 16
P64_BASE = int(ipaddress.IPv6Address("2001:db8:2000::"))


def plan(i: int, c_per_s: int = 1000, port: str = "acc0") -> dict:
    return {
        "port": port,
        "outer_vlan": 100 + i // c_per_s,
        "inner_vlan": 1 + i % c_per_s,
        "mac": "02:00:" + ":".join(f"{b:02x}" for b in i.to_bytes(4, "big")),
        "ipv4": str(ipaddress.IPv4Address(V4_BASE + i)),
        "ipv6": str(ipaddress.IPv6Address(V6_BASE + i)),
        "ipv6_prefixes": [f"{ipaddress.IPv6Address(P64_BASE + (i << 64))}/64"],
    }



BENCH_V6_BASE = int(ipaddress.IPv6Address("2001:db8:1000::16"))


def bench_plan(i: int) -> dict:
    """bench/README.md's addressing (what bench/'s BPF wrapper and the generator expect): the lab
    plan with S-VID 1 + i/4000 and IPv6 2001:db8:1000::16 (hex) + i."""
    p = plan(i, c_per_s=4000)
    p["outer_vlan"] = 1 + i // 4000
    p["ipv6"] = str(ipaddress.IPv6Address(BENCH_V6_BASE + i))
    return p

def write_jsonl(path: str, subs) -> int:
    n = 0
    with open(path, "w") as f:
        for s in subs:
            f.write(json.dumps(s) + "\n")
            n += 1
    return n


def find_bin(name: str) -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.environ.get("XBNG_BIN"), os.path.join(here, "..", "..", "build", "bin")):
        if d and os.path.exists(os.path.join(d, name)):
            return os.path.abspath(os.path.join(d, name))
    raise FileNotFoundError(f"{name} not built (set XBNG_BIN)")


def find_pass_obj() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.environ.get("XBNG_XDP_PASS_OBJ"),
              os.path.join(here, "..", "..", "build", "tests", "integration",
                           "xbng_xdp_pass_gen", "xdp_pass.bpf.o")):
        if p and os.path.exists(p):
            return os.path.abspath(p)
    raise FileNotFoundError("xdp_pass.bpf.o not built (set XBNG_XDP_PASS_OBJ)")


def subscribed(watch: subprocess.Popen, timeout: float = 30) -> str:
    """Waits for the first line of an `xbngctl events` process (text mode,
    stdout piped) and returns it: the agent writes AGENT_STARTED once the
    stream is subscribed, so what happens after this reaches the watcher. A
    fixed sleep instead would be too short on a busy machine."""
    ready, _, _ = select.select([watch.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError(f"timed out after {timeout:g}s waiting for the event stream to open")
    line = watch.stdout.readline()
    if not line:
        raise AssertionError(f"xbngctl events ended before its first event (rc {watch.poll()})")
    return line


class CtlError(RuntimeError):
    def __init__(self, returncode: int, stdout: str, stderr: str):
        super().__init__(f"xbngctl exited {returncode}: {stderr.strip() or stdout.strip()}")
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


class Daemon:
    """One xbngd of a lab and the xbngctl that talks to it. A subclass sets
    lab (the Lab), socket_path, grpc, log, xbngctl and what (its name in
    messages)."""

    CTL_TIMEOUT = 600
    what = "xbngd"
    daemon: subprocess.Popen | None = None

    def launch(self, argv: list[str], timeout: float = 30) -> subprocess.Popen:
        """Spawns xbngd (argv) and waits until it answers on its socket."""
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self.daemon = self.lab.spawn(argv, log=self.log)

        def ready():
            if self.daemon.poll() is not None:
                raise RuntimeError(f"{self.what} exited {self.daemon.returncode}:\n{self.read_log()}")
            return os.path.exists(self.socket_path) and self.ctl_raw("stats").returncode == 0
        wait_for(ready, timeout, 0.1, f"{self.what} to serve gRPC")
        return self.daemon

    def read_log(self) -> str:
        return read_text(self.log)

    def ctl_raw(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([self.xbngctl, "--server", self.grpc, *args],
                              capture_output=True, text=True, timeout=timeout or self.CTL_TIMEOUT)

    def ctl(self, *args: str, timeout: float | None = None):
        """Runs xbngctl --json ARGS; returns parsed JSON, raises CtlError on failure."""
        r = self.ctl_raw("--json", *args, timeout=timeout)
        if r.returncode != 0:
            raise CtlError(r.returncode, r.stdout, r.stderr)
        return json.loads(r.stdout) if r.stdout.strip() else None


class XbngLab(Daemon):
    def __init__(self, kind: str = "xbngt", access_mtu: int | None = None):
        self.lab = Lab(kind)
        lab = self.lab
        try:
            self.sub, self.dut, self.net = lab.netns("sub"), lab.netns("dut"), lab.netns("net")
            lab.veth(self.sub, "s0", self.dut, "acc0", mtu=access_mtu)
            lab.veth(self.dut, "upl0", self.net, "n0")
            # The sub side's own kernel must stay quiet on the access link
            # (no IPv6 RS/MLD noise in the drop counters the tests check).
            self.sub.sysctl("net.ipv6.conf.s0.disable_ipv6", "1")
            obj = find_pass_obj()
            lab.attach_pass(self.sub, "s0", obj)
            lab.attach_pass(self.net, "n0", obj)
            d, n = self.dut, self.net
            # Kernel-built packets from net cross xbng as XDP frames: their
            # checksums must be complete (no CHECKSUM_PARTIAL over veth).
            n.exec(["ethtool", "-K", "n0", "tx", "off"])
            d.ip("addr", "add", f"{UPLINK_DUT4}/24", "dev", "upl0")
            d.ip("-6", "addr", "add", f"{UPLINK_DUT6}/64", "dev", "upl0", "nodad")
            n.ip("addr", "add", f"{UPLINK_NET4}/24", "dev", "n0")
            n.ip("-6", "addr", "add", f"{UPLINK_NET6}/64", "dev", "n0", "nodad")
            d.ip("route", "add", "default", "via", UPLINK_NET4)
            d.ip("-6", "route", "add", "default", "via", UPLINK_NET6)
            for pfx in ("100.64.0.0/10", "198.51.100.0/24", "203.0.113.0/24"):
                n.ip("route", "add", pfx, "via", UPLINK_DUT4)
            for pfx in ("2001:db8:1000::/36", "2001:db8:2000::/36", "2001:db8:3000::/36"):
                n.ip("-6", "route", "add", pfx, "via", UPLINK_DUT6)
            for ns in (d, n):
                ns.sysctl("net.ipv4.ip_forward", "1")
                ns.sysctl("net.ipv6.conf.all.forwarding", "1")
            # A discard service in net: test traffic to UDP/9 draws no ICMP
            # errors back towards the subscribers.
            self._discard = []
            for fam, addr in ((socket.AF_INET, UPLINK_NET4), (socket.AF_INET6, UPLINK_NET6)):
                with n.entered():
                    sk = socket.socket(fam, socket.SOCK_DGRAM)
                sk.bind((addr, 9))
                self._discard.append(sk)
            self.socket_path = os.path.join(lab.rundir, "xbngd.sock")
            self.grpc = f"unix://{self.socket_path}"
            self.xbngd = find_bin("xbngd")
            self.xbngctl = find_bin("xbngctl")
            self.daemon: subprocess.Popen | None = None
            self.log = os.path.join(lab.rundir, "xbngd.log")
        except BaseException:
            lab.close()
            raise

    # -- the daemon ------------------------------------------------------------
    def xbngd_argv(self, max_subscribers: int = 65536, extra: list[str] | None = None) -> list[str]:
        return self.dut.nsenter_argv([
            self.xbngd, "--access", "acc0", "--uplink", "upl0",
            "--gateway-ipv4", GW4, "--gateway-ipv6", GW6,
            "--grpc", self.grpc, "--bpffs", self.lab.bpffs,
            "--max-subscribers", str(max_subscribers), *(extra or [])])

    def start(self, max_subscribers: int = 65536, extra: list[str] | None = None,
              timeout: float = 30) -> subprocess.Popen:
        return self.launch(self.xbngd_argv(max_subscribers, extra), timeout)

    def stop(self, sig=None) -> int:
        import signal as _s
        rc = self.lab.stop(self.daemon, sig or _s.SIGTERM)
        return rc

    def pinned_map(self, name: str) -> str:
        """Path of a pinned map of the running ABI version (<bpffs>/v<ABI>/maps/NAME)."""
        import glob
        found = glob.glob(f"{self.lab.bpffs}/v*/maps/{name}")
        if len(found) != 1:
            raise RuntimeError(f"pinned map {name}: {found or 'absent'}")
        return found[0]

    def teardown_dataplane(self) -> None:
        sh(self.dut.nsenter_argv([self.xbngd, "--teardown", "--bpffs", self.lab.bpffs]))

    # -- the CLI ------------------------------------------------------------------
    def import_subs(self, subs) -> tuple[dict, float]:
        path = os.path.join(self.lab.rundir, f"subs-{time.monotonic_ns()}.jsonl")
        write_jsonl(path, subs)
        t0 = time.monotonic()
        out = self.ctl("sub", "import", path)
        dt = time.monotonic() - t0
        os.unlink(path)
        return out, dt

    def stats(self) -> dict:
        """GetStats as {reason: packets} plus the raw response under '_raw'."""
        raw = self.ctl("stats")
        by = {r["reason"]: int(r.get("packets", 0)) for r in raw.get("reasons", [])}
        by["_raw"] = raw
        return by

    def resolve_uplink_neighbours(self) -> None:
        """Lets the dut kernel learn net's MACs (the fast path needs resolved neighbours)."""
        self.dut.exec(["ping", "-c1", "-W1", UPLINK_NET4], check=False)
        self.dut.exec(["ping", "-6", "-c1", "-W1", UPLINK_NET6], check=False)

    def close(self) -> None:
        for sk in getattr(self, "_discard", []):
            sk.close()
        self.lab.close()

    def __enter__(self) -> "XbngLab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
