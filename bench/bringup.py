"""Bring-up storm against the real xbngd (DHCPv4, DHCPv6, RS/RA).

A standard xbng lab (tests/xbnglab/xbngd.py: sub <-> dut <-> net, the
real xbngd in dut). OTHERS subscribers plus N storm subscribers are
provisioned through gRPC with bench/README.md's addressing (S-VID 1 + i/4000,
C-VID 1 + i%4000); then xbng_bench_bringup emulates the N storm CPEs on the
sub side of the access veth (all at once, window-limited), while it samples
xbngd's CPU and RSS from /proc and times xbngd's own xdp_access on the other
subscribers (BPF_PROG_TEST_RUN through bench/'s wrapper) before and during
the storm. Prints the generator's figures; asserts nothing.

    PYTHONPATH=tests /usr/bin/python3 bench/bringup.py --subscribers 60000 [--others 1000] [--json FILE]
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time

from xbnglab.xbngd import XbngLab, bench_plan, find_bin, write_jsonl


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def mem_report(pid: int, what: str) -> None:
    """xbngd's RSS at one stage and where it lies: the main heap, glibc's
    thread arenas (anonymous mappings inside 64 MiB-aligned reservations),
    other anonymous mappings (large allocations glibc mmaps on their own,
    thread stacks) and file-backed pages."""
    maps = []  # (start, end, name, rss kB)
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                lo, hi = (int(v, 16) for v in head[0].split("-"))
                cur = [lo, hi, head[5] if len(head) > 5 else "", 0]
                maps.append(cur)
            elif head[0] == "Rss:" and cur is not None:
                cur[3] = int(head[1])
    arena = 64 << 20
    by = {"heap": 0, "arenas": 0, "anon": 0, "file": 0}
    big = []
    for lo, hi, name, rss in maps:
        if name == "[heap]":
            by["heap"] += rss
        elif name.startswith("/"):
            by["file"] += rss
        elif name == "" and lo % arena == 0 and hi - lo <= arena:
            by["arenas"] += rss
        else:
            by["anon"] += rss
            if name == "" and rss > 1024:
                big.append((rss, hi - lo))
    big.sort(reverse=True)
    print(f"  mem {what}: RSS {rss_kb(pid) / 1024:.1f} MB (peak so far {rss_kb(pid, 'VmHWM') / 1024:.1f}) = main heap {by['heap'] / 1024:.1f}, "
          f"thread arenas {by['arenas'] / 1024:.1f}, other anonymous {by['anon'] / 1024:.1f}, "
          f"files {by['file'] / 1024:.1f} MB; largest other anonymous (RSS/size MB): "
          + ", ".join(f"{r / 1024:.1f}/{s / 2**20:.1f}" for r, s in big[:6]), flush=True)


def gdb_call(pid: int, expr: str) -> None:
    subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", f"call {expr}"],
                   capture_output=True, text=True, check=False, timeout=120)


def run(n: int, others: int, window: int, extra: list[str], json_out: str | None,
        workdir: str, self_test_first: bool, port_rate: int | None = None, mem: bool = False,
        mem_wait: int = 30) -> int:
    gen = find_bin("xbng_bench_bringup")
    if self_test_first:
        print("## Generator ceiling: the same storm against the in-process responder (no xbngd)", flush=True)
        subprocess.run([gen, "-n", str(n), "--window", str(window), *extra], check=False)
    os.makedirs(workdir, exist_ok=True)
    with XbngLab(kind="xbngbench") as x:
        xargs = []
        if port_rate is not None:  # xbngd's per-port punt limit (frames/s per CPU), [punt] port_rate
            conf = os.path.join(x.lab.rundir, "punt.toml")
            with open(conf, "w") as f:
                f.write(f"[punt]\nport_rate = {port_rate}\n")
            xargs = ["--config", conf]
            print(f"## xbngd [punt] port_rate = {port_rate}", flush=True)
        x.start(max_subscribers=max(1024, n + others + 1024), extra=xargs)
        pid = x.daemon.pid
        if mem:
            mem_report(pid, "started")
        path = os.path.join(workdir, f"bringup-{n}.jsonl")
        write_jsonl(path, (bench_plan(i) for i in range(others + n)))
        t0 = time.monotonic()
        out = x.ctl("sub", "import", path)
        os.unlink(path)
        print(f"## provisioned {int(out['applied']):,} subscribers in {time.monotonic() - t0:.1f} s "
              f"({others:,} others + {n:,} storm CPEs)", flush=True)
        if mem:
            mem_report(pid, "imported")
        x.resolve_uplink_neighbours()
        links = glob.glob(f"{x.lab.bpffs}/v*/links/acc0")
        argv = [gen, "-n", str(n), "--first", str(others), "--window", str(window),
                "--netns", x.sub.name, "--iface", "s0", "--pid", str(pid), *extra]
        if links and others:
            argv += ["--fwd-netns", x.dut.name, "--fwd-link", links[0], "--fwd-keys", str(others)]
        if json_out:
            argv += ["--json", json_out]
        print("## Storm against xbngd:", " ".join(os.path.basename(a) if a == gen else a for a in argv[1:]),
              flush=True)
        rc = subprocess.run(argv, check=False).returncode
        if mem:
            mem_report(pid, "bound")
            # The lease file is rewritten at most every 20x its last write time:
            # wait for one write of the whole table.
            time.sleep(mem_wait)
            mem_report(pid, f"bound+{mem_wait}s")
            gdb_call(pid, "(int)malloc_trim(0)")
            mem_report(pid, "after malloc_trim(0)")
        st = x.stats()
        moved = {k: v for k, v in st.items() if k != "_raw" and v and
                 any(w in k for w in ("dhcp", "router", "punt", "rate", "lease", "ra_"))}
        if moved:
            print("  xbngd counters:", ", ".join(f"{k}={v}" for k, v in sorted(moved.items())))
        return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscribers", "-n", type=int, default=60000)
    ap.add_argument("--others", type=int, default=1000, help="provisioned, not in the storm: forwarding probe keys")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--json")
    ap.add_argument("--workdir", default="build/bench/work")
    ap.add_argument("--self-test-first", action="store_true",
                    help="run the same storm against the in-process responder first (the generator's ceiling)")
    ap.add_argument("--port-rate", type=int,
                    help="xbngd's [punt] port_rate (frames/s per CPU; default: xbngd's own default)")
    ap.add_argument("--mem", action="store_true",
                    help="print where xbngd's RSS lies after start, import and the storm, then after "
                         "malloc_trim(0) (called through gdb)")
    ap.add_argument("--mem-wait", type=int, default=30, help="seconds between the storm's end and the "
                    "second --mem report (let a lease file write of the whole table happen)")
    ap.add_argument("extra", nargs="*", help="more xbng_bench_bringup options (after --)")
    a = ap.parse_args()
    return run(a.subscribers, a.others, a.window, a.extra, a.json, a.workdir, a.self_test_first,
               a.port_rate, a.mem, a.mem_wait)


if __name__ == "__main__":
    sys.exit(main())
