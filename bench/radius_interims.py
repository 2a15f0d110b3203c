"""1M RADIUS sessions with interims at 300 s against the real xbngd.

Phase 1 (plain, skipped with --no-plain): a fresh xbngd without RADIUS,
the N subscribers of bench/README.md's addressing imported over gRPC
(`xbngctl sub import`), its RSS read; with --plain-storm the same
generator storm as below then binds them (DHCPv4 + DHCPv6 + RA, no
RADIUS), and the RSS is read again: the baseline of the same subscribers
with their leases.

Phase 2 (RADIUS): the lab of bench/bringup_radius.py: acc0 has
auth = "radius", FreeRADIUS (its lean virtual server, an N-entry users
file) in net, interim_interval_s = --interval. The N sessions come up
through the real path: xbng_bench_bringup's storm (each CPE's DISCOVER
makes an Access-Request, the Accept creates the subscriber, the CPE binds
both families, the Start goes out). Nothing else creates them. Then the
bench waits until every session is on its interim grid (a session's first
interim comes ½..1½ intervals after its Start: steady from the storm's end
+ interval/2) and, for --measure seconds, counts the Interim-Updates that
reach FreeRADIUS's link (tcpdump on net's n0, kernel timestamps: per
second and per 100 ms, mean, min, max), xbngd's CPU (and per thread) and
FreeRADIUS's. Then the forwarding cost of other subscribers (xbngd's own
xdp_access, BPF_PROG_TEST_RUN through bench/'s wrapper, random keys among
the first --fwd-keys sessions: `xbng_bench_bringup --fwd-only`) with the
interims running and with xbngd stopped (SIGSTOP: no interim work at all;
SIGCONT after each figure), alternated over --fwd-rounds rounds: the
ratio. Last, xbngd's RSS at N sessions, and per RADIUS session against
phase 1. Prints figures; asserts nothing.

Without --lease-file xbngd keeps its leases and RADIUS session records in
memory only: the lease file is rewritten whole (JSON, every bound lease)
at most once a second, which at 1M sessions is a large file each second
(see the printed note when it is on).

    sudo PYTHONPATH=tests /usr/bin/python3 bench/radius_interims.py -n 1000000 [--interval 300]
        [--measure 60] [--window 512] [--plain-storm] [--lease-file] [--perf FILE] [--json FILE]
"""
from __future__ import annotations

import argparse
import glob
import ipaddress
import json
import math
import os
import signal
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bringup_radius import SECRET, FastFreeRadius, cpu_s, thread_cpu, udp_errors  # noqa: E402
from xbnglab.xbngd import (BENCH_V6_BASE, UPLINK_DUT4, UPLINK_NET4, XbngLab,  # noqa: E402
                           bench_plan, find_bin)

V4_BASE = int(ipaddress.IPv4Address("100.64.0.16"))
P64_BASE = int(ipaddress.IPv6Address("2001:db8:2000::"))


def v6(x: int) -> str:
    return str(ipaddress.IPv6Address(x))


def plan_fields(i: int) -> tuple:
    """bench_plan(i)'s fields, computed directly (bench_plan takes ~90 s for 1M)."""
    return (1 + i // 4000, 1 + i % 4000, "02:00:" + ":".join(f"{b:02x}" for b in i.to_bytes(4, "big")),
            str(ipaddress.IPv4Address(V4_BASE + i)), v6(BENCH_V6_BASE + i), f"{v6(P64_BASE + (i << 64))}/64")


def check_plan() -> None:
    for i in (0, 1, 3999, 4000, 123456, 999999):
        p = bench_plan(i)
        want = (p["outer_vlan"], p["inner_vlan"], p["mac"], p["ipv4"], p["ipv6"], p["ipv6_prefixes"][0])
        assert plan_fields(i) == want, (i, plan_fields(i), want)


def cached(workdir: str, name: str, n: int, line) -> str:
    """workdir/name-n, made once: one line(i) per subscriber."""
    path = os.path.join(workdir, f"{name}-{n}")
    if not os.path.exists(path):
        t0 = time.monotonic()
        with open(path + ".tmp", "w") as f:
            for i in range(n):
                f.write(line(i))
        os.rename(path + ".tmp", path)
        print(f"## wrote {path} in {time.monotonic() - t0:.0f} s", flush=True)
    return path


def users_line(i: int) -> str:
    o, c, _, ip4, ip6, pfx = plan_fields(i)
    return (f'"acc0:{o}:{c}" Auth-Type := Accept\n\tFramed-IP-Address = {ip4},\n'
            f'\tFramed-IPv6-Address = {ip6},\n\tDelegated-IPv6-Prefix = {pfx}\n\n')


def jsonl_line(i: int) -> str:
    o, c, mac, ip4, ip6, pfx = plan_fields(i)
    return json.dumps({"port": "acc0", "outer_vlan": o, "inner_vlan": c, "mac": mac, "ipv4": ip4,
                       "ipv6": ip6, "ipv6_prefixes": [pfx]}) + "\n"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) / 1024
    return float("nan")


def settle_rss(pid: int, seconds: float = 3.0) -> float:
    """RSS once it stops moving (background work after a load finishes)."""
    last, t_end = rss_mb(pid), time.monotonic() + 30
    while time.monotonic() < t_end:
        time.sleep(seconds)
        now = rss_mb(pid)
        if abs(now - last) < 1:
            return now
        last = now
    return last


def storm(x: XbngLab, gen: str, n: int, window: int, json_out: str, extra: list[str]) -> dict:
    argv = [gen, "-n", str(n), "--first", "0", "--window", str(window), "--timeout", "120",
            "--netns", x.sub.name, "--iface", "s0", "--pid", str(x.daemon.pid), "--json", json_out,
            *extra]
    print("## storm:", " ".join(os.path.basename(a) if a == gen else a for a in argv[1:]), flush=True)
    subprocess.run(argv, check=False)
    with open(json_out) as f:
        return json.load(f)


def plain_phase(a, gen: str, workdir: str) -> dict:
    out = {}
    with XbngLab(kind="xbngpl") as x:
        x.start(max_subscribers=a.subscribers + 1024)
        pid = x.daemon.pid
        out["idle_mb"] = settle_rss(pid)
        path = cached(workdir, "plain.jsonl", a.subscribers, jsonl_line)
        t0 = time.monotonic()
        r = x.ctl("sub", "import", path, timeout=600)
        print(f"## plain: imported {int(r['applied']):,} subscribers in {time.monotonic() - t0:.1f} s",
              flush=True)
        out["imported_mb"] = settle_rss(pid)
        print(f"  plain xbngd RSS: idle {out['idle_mb']:.0f} MB, {a.subscribers:,} imported "
              f"{out['imported_mb']:.0f} MB", flush=True)
        if a.plain_storm:
            x.resolve_uplink_neighbours()
            res = storm(x, gen, a.subscribers, a.window, os.path.join(x.lab.rundir, "plain.json"),
                        [])
            out["storm"] = res["results"]
            out["bound_mb"] = settle_rss(pid)
            print(f"  plain xbngd RSS with {res['results']['bound']:,} bound: "
                  f"{out['bound_mb']:.0f} MB", flush=True)
    return out


def read_pcap(path: str) -> list[tuple[float, int]]:
    """(kernel timestamp s, Acct-Status-Type) of each Accounting-Request in a
    tcpdump file of Ethernet frames (IPv4, UDP to 1813)."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack_from("<I", data, 0)[0]
    nano = magic == 0xa1b23c4d
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, off)
        pkt = data[off + 16: off + 16 + incl]
        off += 16 + incl
        if len(pkt) < 14 + 20 + 8 + 20 or pkt[12:14] != b"\x08\x00":
            continue
        ip = 14 + (pkt[14] & 0x0f) * 4
        rad = ip + 8
        if pkt[rad] != 4:  # Accounting-Request
            continue
        p = rad + 20
        status = 0
        while p + 2 <= len(pkt):
            t, ln = pkt[p], pkt[p + 1]
            if ln < 2:
                break
            if t == 40 and ln == 6 and p + 6 <= len(pkt):
                status = struct.unpack_from(">I", pkt, p + 2)[0]
                break
            p += ln
        out.append((sec + frac / (1e9 if nano else 1e6), status))
    return out


def spread(times: list[float], t0: float, t1: float, slot: float) -> dict:
    k = int(round((t1 - t0) / slot))
    counts = [0] * k
    for t in times:
        j = math.floor((t - t0) / slot)
        if 0 <= j < k:
            counts[j] += 1
    return {"counts": counts, "slot_s": slot, "slots": k, "mean": statistics.mean(counts), "min": min(counts),
            "max": max(counts), "stdev": statistics.pstdev(counts),
            "p1": sorted(counts)[k // 100], "p99": sorted(counts)[min(k - 1, k * 99 // 100)]}


def metrics(x: XbngLab) -> dict[str, float]:
    m = x.dut.exec(["curl", "-s", "http://127.0.0.1:9469/metrics"], check=False).stdout
    out = {}
    for ln in m.splitlines():
        if ln.startswith("xbng_radius_") and " " in ln:
            k, v = ln.rsplit(" ", 1)
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def fwd_ab(x: XbngLab, gen: str, a) -> dict:
    links = glob.glob(f"{x.lab.bpffs}/v*/links/acc0")
    argv = [gen, "--fwd-only", str(a.fwd_samples), "--fwd-netns", x.dut.name, "--fwd-link", links[0],
            "--fwd-keys", str(a.fwd_keys), "--fwd-repeat", str(a.fwd_repeat)]
    pid = x.daemon.pid
    on, off = [], []

    def probe() -> list[float]:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"fwd probe: {r.stderr.strip()}")
        return json.loads(r.stdout.strip().splitlines()[-1])["ns"]

    stopped_s = 0.0
    for rnd in range(a.fwd_rounds):
        for running in ((True, False) if rnd % 2 == 0 else (False, True)):
            if running:
                on.append(statistics.median(probe()))
                continue
            t0 = time.monotonic()
            os.kill(pid, signal.SIGSTOP)
            try:
                off.append(statistics.median(probe()))
            finally:
                os.kill(pid, signal.SIGCONT)
            stopped_s += time.monotonic() - t0
    ratios = [b / c for b, c in zip(on, off)]
    return {"keys": a.fwd_keys, "repeat": a.fwd_repeat, "rounds": a.fwd_rounds,
            "with_interims_ns": on, "xbngd_stopped_ns": off, "ratio_per_round": ratios,
            "ratio_median": statistics.median(ratios),
            "with_median_ns": statistics.median(on), "stopped_median_ns": statistics.median(off),
            "stopped_s_total": stopped_s}


def radius_phase(a, gen: str, workdir: str) -> dict:
    n, out = a.subscribers, {}
    users = cached(workdir, "radius-users", n, users_line)
    with open(users) as f:
        users_text = f.read()
    with XbngLab(kind="xbngri") as x:
        t0 = time.monotonic()
        radius = FastFreeRadius(x.lab, x.net, [(UPLINK_DUT4, SECRET)], users_text, lean=True,
                                threads=a.radius_threads)
        del users_text
        pcap = os.path.join(x.lab.rundir, "acct.pcap")
        dump = None
        try:
            radius.start(timeout=600)
            print(f"## FreeRADIUS (lean) up with {n:,} users in {time.monotonic() - t0:.1f} s",
                  flush=True)
            conf = os.path.join(x.lab.rundir, "radius.toml")
            with open(conf, "w") as f:
                f.write('[ports]\naccess = [{ name = "acc0", auth = "radius" }]\n\n'
                        f'[radius]\nservers = [{{ address = "{UPLINK_NET4}", secret = "{SECRET}" }}]\n'
                        f'timeout_ms = 2000\nretries = 3\ncoa_listen = ""\n'
                        f'interim_interval_s = {a.interval}\n')
            extra = ["--config", conf]
            if a.lease_file:
                extra += ["--lease-file", os.path.join(x.lab.rundir, "leases.json")]
            x.start(max_subscribers=n + 1024, extra=extra)
            pid = x.daemon.pid
            out["idle_mb"] = settle_rss(pid)
            x.resolve_uplink_neighbours()
            res = storm(x, gen, n, a.window, os.path.join(x.lab.rundir, "storm.json"), [])
            t_end = time.monotonic()
            out["storm"] = res["results"]
            out["storm_process"] = res.get("process")
            # Interims from here on (the storm's own traffic is not captured).
            dump = x.lab.spawn(x.net.nsenter_argv(
                ["tcpdump", "-i", "n0", "-n", "-s", "512", "-B", "65536", "--time-stamp-precision",
                 "nano", "-w", pcap, "udp dst port 1813"]), log=os.path.join(x.lab.rundir, "tcpdump.log"))
            t_ss = t_end + a.interval / 2 + 5
            print(f"## waiting {t_ss - time.monotonic():.0f} s for every session's first interim "
                  f"(steady from the storm's end + interval/2)", flush=True)
            time.sleep(max(0.0, t_ss - time.monotonic()))
            out["sessions_mb"] = rss_mb(pid)
            m0 = metrics(x)
            perf = None
            if a.perf:  # xbngd's threads told apart by what they run
                perf = subprocess.Popen(["perf", "record", "-q", "-F", "499", "-g", "-p", str(pid),
                                         "-o", a.perf], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
            th0, rad0, w0 = thread_cpu(pid), cpu_s(radius.proc.pid), time.time()
            time.sleep(a.measure)
            th1, rad1, w1 = thread_cpu(pid), cpu_s(radius.proc.pid), time.time()
            if perf:
                perf.send_signal(signal.SIGINT)
                perf.wait(120)
            m1 = metrics(x)
            busy = sorted(((c - th0.get(t, ("", 0.0))[1], t, comm) for t, (comm, c) in th1.items()),
                          reverse=True)
            out["window"] = {"wall_s": w1 - w0, "xbngd_cpu_s": sum(b[0] for b in busy),
                             "threads": [(comm, tid, round(c, 2)) for c, tid, comm in busy[:6]],
                             "freeradius_cpu_s": rad1 - rad0,
                             "metrics_delta": {k: m1[k] - m0.get(k, 0) for k in m1
                                               if m1[k] != m0.get(k, 0)}}
            out["fwd"] = fwd_ab(x, gen, a)
            out["after_mb"] = rss_mb(pid)
            x.lab.stop(dump, signal.SIGINT)
            dump = None
            acct = read_pcap(pcap)
            interims = [t for t, s in acct if s == 3]
            out["interims_captured"] = len(interims)
            out["starts_captured"] = sum(1 for _, s in acct if s == 1)
            out["stops_captured"] = sum(1 for _, s in acct if s == 2)
            out["per_s"] = spread(interims, w0, w0 + int(w1 - w0), 1.0)
            out["per_100ms"] = spread(interims, w0, w0 + int(w1 - w0), 0.1)
            out["window_rel"] = [0, w1 - w0]
            # Every second of the capture (from the storm's end): the ramp to
            # the steady rate, the window, and the forwarding A/B after it.
            t_cap0 = min(interims) if interims else w0
            out["capture_per_s"] = {"t0_rel_window": int(t_cap0) - w0,
                                    "counts": spread(interims, int(t_cap0), int(max(interims)) + 1,
                                                     1.0)["counts"] if interims else []}
            out["udp_drops"] = {ns.name.rsplit("-", 1)[1]: udp_errors(ns) for ns in (x.dut, x.net)}
            out["tcpdump"] = open(os.path.join(x.lab.rundir, "tcpdump.log")).read().strip()[-300:]
            out["load"] = os.getloadavg()
        finally:
            if dump is not None:
                x.lab.stop(dump, signal.SIGINT)
            radius.stop()
    return out


def report(a, plain: dict | None, rad: dict) -> None:
    n = a.subscribers
    s = rad["storm"]
    print(f"\n== {n:,} RADIUS sessions, interim_interval_s = {a.interval} ==")
    print(f"  bring-up: {s['bound']:,} bound, {s['failed']} failed in {s['wall_s']:.1f} s = "
          f"{s['sessions_per_s']:,.0f} sessions/s (TTB p50 {s['ttb_p50_ms']:.0f} / p99 "
          f"{s['ttb_p99_ms']:.0f} ms), retransmits {s['retransmits']}")
    w, ps, pt = rad["window"], rad["per_s"], rad["per_100ms"]
    print(f"  Interim-Updates at FreeRADIUS's link over {w['wall_s']:.0f} s: expected "
          f"{n / a.interval:,.0f}/s; per second mean {ps['mean']:,.0f}, min {ps['min']:,}, "
          f"max {ps['max']:,} (sd {ps['stdev']:.0f}); per 100 ms mean {pt['mean']:.0f}, min "
          f"{pt['min']}, max {pt['max']} (p1 {pt['p1']}, p99 {pt['p99']}, max/mean "
          f"{pt['max'] / pt['mean']:.2f})")
    c = rad["capture_per_s"]["counts"]
    print(f"  every second of the capture (from {rad['capture_per_s']['t0_rel_window']:.0f} s "
          f"before the window, mean per 10 s): "
          f"{', '.join(f'{statistics.mean(c[i:i + 10]):,.0f}' for i in range(0, len(c), 10))}")
    print(f"  CPU over the window: xbngd {w['xbngd_cpu_s']:.2f} s = "
          f"{100 * w['xbngd_cpu_s'] / w['wall_s']:.1f} % of a core "
          f"({1e6 * w['xbngd_cpu_s'] / max(1, ps['mean'] * w['wall_s']):.1f} µs per interim, all "
          f"threads); threads: {', '.join(f'{c} {v}' for c, _, v in w['threads'])}; "
          f"FreeRADIUS {w['freeradius_cpu_s']:.2f} s")
    print("  xbngd RADIUS metrics over the window:",
          ", ".join(f"{k}={v:g}" for k, v in sorted(w["metrics_delta"].items())))
    f = rad["fwd"]
    print(f"  forwarding of {f['keys']} sessions' upstream IPv4 (xdp_access, random keys): "
          f"{f['with_median_ns']:.0f} ns/packet with interims, {f['stopped_median_ns']:.0f} "
          f"with xbngd stopped; ratio per round "
          f"{', '.join(f'{r:.3f}' for r in f['ratio_per_round'])}: median {f['ratio_median']:.3f}")
    print(f"  xbngd RSS: idle {rad['idle_mb']:.0f} MB, {n:,} sessions {rad['sessions_mb']:.0f} MB "
          f"(storm peak {rad['storm_process']['rss_mb_peak'] if rad.get('storm_process') else float('nan'):.0f})")
    if plain:
        print(f"  plain xbngd RSS: idle {plain['idle_mb']:.0f} MB, {n:,} imported "
              f"{plain['imported_mb']:.0f} MB" +
              (f", bound {plain['bound_mb']:.0f} MB" if "bound_mb" in plain else ""))
        base = plain.get("bound_mb", plain["imported_mb"])
        what = "bound" if "bound_mb" in plain else "imported (no leases)"
        print(f"  per RADIUS session vs plain {what}: "
              f"({rad['sessions_mb']:.0f} - {base:.0f}) MB / {n:,} = "
              f"{(rad['sessions_mb'] - base) * 1048576 / n:.0f} B; whole process "
              f"{rad['sessions_mb'] * 1048576 / n:.0f} B per session")
    print(f"  captured: {rad['interims_captured']:,} interims, {rad['starts_captured']} starts, "
          f"{rad['stops_captured']} stops; UDP drops {rad['udp_drops']}; tcpdump: "
          f"{rad['tcpdump'].splitlines()[-1] if rad['tcpdump'] else ''}")
    print(f"  load average at the end: {rad['load'][0]:.2f} on {os.cpu_count()} CPUs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscribers", "-n", type=int, default=1000000)
    ap.add_argument("--interval", type=int, default=300, help="interim_interval_s (60..)")
    ap.add_argument("--measure", type=float, default=60, help="seconds of interims counted")
    ap.add_argument("--window", type=int, default=512, help="the storm's window")
    ap.add_argument("--radius-threads", type=int, default=8)
    ap.add_argument("--fwd-keys", type=int, default=1000)
    ap.add_argument("--fwd-repeat", type=int, default=500000)
    ap.add_argument("--fwd-samples", type=int, default=3)
    ap.add_argument("--fwd-rounds", type=int, default=6)
    ap.add_argument("--no-plain", action="store_true", help="skip the plain baseline")
    ap.add_argument("--plain-storm", action="store_true",
                    help="bind the plain subscribers with the same storm (their leases)")
    ap.add_argument("--lease-file", action="store_true", help="xbngd persists its leases")
    ap.add_argument("--perf", metavar="FILE",
                    help="perf record xbngd over the counting window into FILE (its threads apart)")
    ap.add_argument("--workdir", default="build/bench/work")
    ap.add_argument("--json")
    a = ap.parse_args()
    check_plan()
    os.makedirs(a.workdir, exist_ok=True)
    gen = find_bin("xbng_bench_bringup")
    print(f"## load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    plain = None if a.no_plain else plain_phase(a, gen, a.workdir)
    rad = radius_phase(a, gen, a.workdir)
    report(a, plain, rad)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": vars(a), "plain": plain, "radius": rad}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
