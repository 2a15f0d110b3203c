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

A/B in one run: --transport ringbuf,af_xdp (xbngd's [punt] transport) and
--base-xbngd PATH (another build's xbngd, e.g. main's, on its own default
transport) give the variants; --rounds R runs each R times, alternated
(A B C, C B A, ...), a fresh lab per storm, then prints per variant the
median and range of each figure.

    sudo PYTHONPATH=tests /usr/bin/python3 bench/bringup.py -n 60000 --window 512 --port-rate 100000 \
        --transport ringbuf,af_xdp --base-xbngd /work/main/build/bin/xbngd --rounds 3
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
        workdir: str, self_test_first: bool, port_rate: int | None = None,
        transport: str | None = None, xbngd: str | None = None, counters: dict | None = None,
        mem: bool = False, mem_wait: int = 30) -> int:
    gen = find_bin("xbng_bench_bringup")
    if self_test_first:
        print("## Generator ceiling: the same storm against the in-process responder (no xbngd)", flush=True)
        subprocess.run([gen, "-n", str(n), "--window", str(window), *extra], check=False)
    os.makedirs(workdir, exist_ok=True)
    with XbngLab(kind="xbngbench") as x:
        if xbngd:
            x.xbngd = xbngd
        xargs = []
        punt = []
        if port_rate is not None:  # xbngd's per-port punt limit (frames/s per CPU), [punt] port_rate
            punt.append(f"port_rate = {port_rate}")
        if transport:  # how punted frames reach xbngd, [punt] transport
            punt.append(f'transport = "{transport}"')
        if punt:
            conf = os.path.join(x.lab.rundir, "punt.toml")
            with open(conf, "w") as f:
                f.write("[punt]\n" + "\n".join(punt) + "\n")
            xargs = ["--config", conf]
            print(f"## xbngd {x.xbngd} [punt] {', '.join(punt)}", flush=True)
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
        if counters is not None:
            counters.update({k: v for k, v in st.items() if k != "_raw"})
        return rc


# The figures of the A/B summary: (label, where in the generator's JSON).
FIGURES = [("wall s", ("results", "wall_s")), ("sessions/s", ("results", "sessions_per_s")),
           ("TTB p50 ms", ("results", "ttb_p50_ms")), ("TTB p99 ms", ("results", "ttb_p99_ms")),
           ("retransmits", ("results", "retransmits")), ("bound", ("results", "bound")),
           ("xbngd CPU avg %", ("process", "cpu_pct_avg")),
           ("xbngd CPU peak %", ("process", "cpu_pct_peak"))]
DROPS = ["drop_punt_rate_port", "drop_punt_ring_full", "punt_af_xdp_dropped"]


def ab(variants: list[tuple[str, str | None, str | None]], rounds: int, a) -> int:
    """Runs every variant (label, transport, xbngd) `rounds` times, alternated;
    prints median [min..max] of each figure per variant."""
    got: dict[str, list[dict]] = {v[0]: [] for v in variants}
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            order = variants if r % 2 == 0 else list(reversed(variants))
            for label, transport, xbngd in order:
                print(f"\n######## round {r + 1}/{rounds}: {label}", flush=True)
                out = os.path.join(d, "run.json")
                cnt: dict = {}
                rc = run(a.subscribers, a.others, a.window, a.extra, out, a.workdir, False,
                         a.port_rate, transport, xbngd, cnt)
                if rc != 0 or not os.path.exists(out):
                    print(f"## {label}: the storm failed ({rc})", flush=True)
                    continue
                with open(out) as f:
                    j = json.load(f)
                os.unlink(out)
                j["counters"] = {k: cnt.get(k, 0) for k in DROPS}
                got[label].append(j)
    print(f"\n## A/B summary: {a.subscribers:,} CPEs, window {a.window}, port_rate {a.port_rate}, "
          f"{rounds} round(s) alternated; median [min..max] over the runs; load {os.getloadavg()}")
    cols = [f for f, _ in FIGURES] + DROPS
    print("| variant | runs | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for label, runs in got.items():
        cells = []
        for f, (sec, key) in FIGURES:
            vals = [r.get(sec, {}).get(key) for r in runs if r.get(sec, {}).get(key) is not None]
            cells.append(spread(vals))
        for k in DROPS:
            cells.append(spread([r["counters"][k] for r in runs]))
        print(f"| {label} | {len(runs)} | " + " | ".join(cells) + " |")
    # Paired ratios: each variant's wall time over the first variant's in the
    # same round (both under that round's noise).
    first = variants[0][0]
    for label, runs in got.items():
        if label == first or not got[first]:
            continue
        ratios = [r["results"]["wall_s"] / b["results"]["wall_s"] for r, b in zip(runs, got[first])]
        if ratios:
            print(f"## wall s {label} / {first}, per round: " + ", ".join(f"{x:.2f}" for x in ratios) +
                  f"; median {statistics.median(ratios):.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(got, f, indent=1)
    return 0


def spread(vals: list) -> str:
    if not vals:
        return "-"
    fmt = (lambda v: f"{v:,.0f}") if max(abs(v) for v in vals) >= 100 else (lambda v: f"{v:.1f}")
    return f"{fmt(statistics.median(vals))} [{fmt(min(vals))}..{fmt(max(vals))}]"


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
    ap.add_argument("--transport",
                    help="xbngd's [punt] transport (ringbuf, af_xdp); several, comma-separated: an A/B")
    ap.add_argument("--base-xbngd", help="another build's xbngd as one more A/B variant (its defaults)")
    ap.add_argument("--rounds", type=int, default=1, help="A/B: runs of each variant, alternated")
    ap.add_argument("--mem", action="store_true",
                    help="print where xbngd's RSS lies after start, import and the storm, then after "
                         "malloc_trim(0) (called through gdb)")
    ap.add_argument("--mem-wait", type=int, default=30, help="seconds between the storm's end and the "
                    "second --mem report (let a lease file write of the whole table happen)")
    ap.add_argument("extra", nargs="*", help="more xbng_bench_bringup options (after --)")
    a = ap.parse_args()
    transports = a.transport.split(",") if a.transport else []
    if a.base_xbngd or len(transports) > 1 or a.rounds > 1:
        variants = [(f"base ({a.base_xbngd})", None, a.base_xbngd)] if a.base_xbngd else []
        variants += [(t or "this build", t, None) for t in transports or [None]]
        return ab(variants, a.rounds, a)
    return run(a.subscribers, a.others, a.window, a.extra, a.json, a.workdir, a.self_test_first,
               a.port_rate, transports[0] if transports else None, mem=a.mem,
               mem_wait=a.mem_wait)


if __name__ == "__main__":
    sys.exit(main())
