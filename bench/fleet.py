"""Fleet-mode benchmark: xbngd driven from a real etcd.

One etcd member (Debian's /usr/bin/etcd, data dir on disk) and one xbngd node
in namespaces of a lab. For each size N:
  write     `xbngctl sub import --etcd` of N subscribers (128 puts per
            transaction, 8 in flight): wall time, keys/s
  start     xbngd started with the N keys already in etcd: time from the
            process start to the status key's revision = etcd's and N
            subscribers applied (polled through the metrics endpoint); the
            node's own "full read" log line (read+apply, delete phase);
            xbngd VmRSS and VmHWM after it
  restart   the same with the pins of the first run adopted (every entry
            unchanged: the cost of a reconcile that writes nothing)
  watch     M changes (new MACs) written by xbngctl while the node follows:
            the writer's rate, the node's applied rate over the same window,
            and the lag at the end (last put acknowledged -> applied)
  latency   single puts through etcd's JSON gateway, time from before the put
            until xbngd's applied revision covers it (metrics endpoint polled
            every ~1 ms): median, p90, max of 30

With --variants (A/B mode) the keys are written once per size, then xbngd is
started fresh (pins removed, nothing adopted) once per variant per round,
variants alternated within each round (a shared, noisy machine drifts: compare
within a round): start -> all applied, the node's phases (its "full read" log
line), the CPU time xbngd used from its start and etcd during the start, and
RSS; medians per variant and their ratio to the first variant. --etcd-flag
passes more flags to the etcd member (--etcd-flag=--enable-pprof: etcd's
/debug/pprof for a CPU profile of the member).

Prints figures (and --json); asserts nothing. The machine is shared: compare
within one run.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import statistics
import subprocess
import time
import urllib.request

from xbnglab.etcd import EtcdCluster, FleetNode
from xbnglab.lab import Lab, wait_for
from xbnglab.xbngd import find_bin, find_pass_obj, plan, write_jsonl

C_PER_S = 4000


def proc_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of every thread of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        st = f.read()
    f = st[st.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def phases(line: str) -> dict:
    """The phases of the node's "full read" log line (older builds log fewer)."""
    out = {}
    for name, rx in (("read_apply_s", r"keys in ([\d.]+) s"), ("read_s", r"range reads ([\d.]+) s"),
                     ("request_s", r"([\d.]+) s in requests"), ("decode_s", r"decoding ([\d.]+) s"),
                     ("wait_s", r"waiting for pages ([\d.]+) s"),
                     ("apply_s", r"applying ([\d.]+) s"),
                     ("delete_phase_s", r"deleted in ([\d.]+) s"),
                     ("readers", r"with (\d+) readers")):
        m = re.search(rx, line)
        out[name] = float(m.group(1)) if m else None
    return out


def fmt_phases(s: dict) -> str:
    f = lambda k: "-" if s.get(k) is None else f"{s[k]:.2f}"
    return (f"read+apply {f('read_apply_s')} s: range reads {f('read_s')} s (requests "
            f"{f('request_s')} s), decoding {f('decode_s')} s (waiting {f('wait_s')} s), "
            f"applying {f('apply_s')} s, delete {f('delete_phase_s')} s")


class Bench:
    def __init__(self, workdir: str, etcd_flags: list[str] | None = None):
        self.lab = Lab("xbngbench")
        lab = self.lab
        self.etcd_ns, peer = lab.netns("etcd"), lab.netns("peer")
        self.cluster = EtcdCluster(lab, self.etcd_ns, members=1)
        self.cluster.dir = os.path.join(workdir, f"etcd-{os.getpid()}")  # on disk, not tmpfs
        self.cluster.extra_args = list(etcd_flags or [])
        shutil.rmtree(self.cluster.dir, ignore_errors=True)
        self.cluster.start_member(0)
        self.cluster.wait_healthy()
        self.node = FleetNode(lab, 1, self.etcd_ns, peer, find_pass_obj())
        self.workdir = workdir
        self.gw = f"http://127.0.0.1:2379"

    def close(self):
        self.lab.close()
        shutil.rmtree(self.cluster.dir, ignore_errors=True)

    def metrics(self) -> dict:
        try:
            return self.node.metrics()
        except OSError:
            return {}

    def applied(self) -> int:
        return int(self.metrics().get("xbng_fleet_applied_revision", 0))

    def gw_put(self, key: str, value: str) -> int:
        body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                           "value": base64.b64encode(value.encode()).decode()}).encode()
        with self.etcd_ns.entered():
            r = urllib.request.urlopen(urllib.request.Request(f"{self.gw}/v3/kv/put", data=body),
                                       timeout=10).read()
        return int(json.loads(r)["header"]["revision"])

    def write(self, subs, name: str) -> tuple[float, str]:
        path = os.path.join(self.workdir, name)
        write_jsonl(path, subs)
        t0 = time.monotonic()
        r = subprocess.run(self.etcd_ns.nsenter_argv([
            find_bin("xbngctl"), "sub", "import", "--etcd", self.cluster.endpoint(0), "--node", "n1",
            path]), capture_output=True, text=True, timeout=3600)
        dt = time.monotonic() - t0
        os.unlink(path)
        if r.returncode:
            raise RuntimeError(r.stderr)
        return dt, r.stderr.strip().splitlines()[0]

    def start_and_wait(self, n: int, max_subs: int, config: str | None = None) -> dict:
        rev = self.cluster.revision()
        etcd_pid = self.cluster.procs[0].pid
        e0 = proc_cpu_s(etcd_pid)
        t0 = time.monotonic()
        self.node.start(members=(0,), max_subscribers=max_subs, timeout=600, config=config)
        wait_for(lambda: self.applied() >= rev and
                 self.metrics().get("xbng_fleet_synced") == 1, 600, 0.05, "full apply")
        dt = time.monotonic() - t0
        pid = self.node.daemon.pid
        cpu = {"xbngd_cpu_s": proc_cpu_s(pid), "etcd_cpu_s": proc_cpu_s(etcd_pid) - e0}
        line = next((l for l in self.node.read_log().splitlines() if "full read" in l), "")
        return {"seconds": dt, **phases(line), **cpu,
                "rss_mb": proc_kb(pid, "VmRSS") / 1024, "hwm_mb": proc_kb(pid, "VmHWM") / 1024,
                "log": line.split("fleet: ", 1)[-1]}

    def fresh(self) -> None:
        """Kills the node and removes its pins and state: the next start adopts nothing."""
        if self.node.daemon:
            self.node.kill()
        shutil.rmtree(self.node.bpffs, ignore_errors=True)
        shutil.rmtree(os.path.join("/run/xbng", os.path.basename(self.node.bpffs)),
                      ignore_errors=True)

    def config(self, readers: int) -> str:
        path = os.path.join(self.workdir, f"fleet-{os.getpid()}-r{readers}.toml")
        with open(path, "w") as f:
            f.write(f'[etcd]\nendpoints = ["{self.node.endpoints((0,))}"]\nnode = "n1"\n'
                    f"full_read_readers = {readers}\n")
        return path

    def run_ab(self, n: int, variants: list, rounds: int) -> dict:
        """Fresh starts with N keys in etcd, variants alternated in each round."""
        subs = [plan(i, C_PER_S) for i in range(n)]
        dt, _ = self.write(subs, "load.jsonl")
        del subs
        print(f"N={n:,}: wrote {n:,} keys in {dt:.1f} s; fresh starts, {len(variants)} variants "
              f"alternated, {rounds} rounds (+1 warm-up start, not counted)", flush=True)
        max_subs = max(65536, n + n // 8)
        runs = {v["label"]: [] for v in variants}
        for r in range(rounds + 1):
            for v in variants:
                self.fresh()
                self.node.xbngd = v["xbngd"]
                cfg = self.config(v["readers"]) if v["readers"] else None
                s = self.start_and_wait(n, max_subs, cfg)
                s["load"] = float(open("/proc/loadavg").read().split()[0])
                if r == 0:
                    print(f"  warm-up {v['label']}: {s['seconds']:.2f} s", flush=True)
                    break
                runs[v["label"]].append(s)
                print(f"  round {r} {v['label']:>6}: start -> applied {s['seconds']:6.2f} s | "
                      f"{fmt_phases(s)} | CPU xbngd {s['xbngd_cpu_s']:.2f} s, etcd "
                      f"{s['etcd_cpu_s']:.2f} s | RSS {s['rss_mb']:.0f} MB peak "
                      f"{s['hwm_mb']:.0f} MB | load {s['load']:.1f}", flush=True)
        self.fresh()
        for readers in {v["readers"] for v in variants if v["readers"]}:
            os.unlink(self.config(readers))
        med = {k: {f: statistics.median(x[f] for x in v if x.get(f) is not None)
                   for f in ("seconds", "read_apply_s", "read_s", "decode_s", "apply_s",
                             "hwm_mb", "rss_mb", "xbngd_cpu_s", "etcd_cpu_s")
                   if any(x.get(f) is not None for x in v)}
               for k, v in runs.items()}
        base = variants[0]["label"]
        for k, m in med.items():
            print(f"  median {k:>6}: start -> applied {m['seconds']:.2f} s "
                  f"({m['seconds'] / med[base]['seconds']:.2f}x {base}); read+apply "
                  f"{m.get('read_apply_s', 0):.2f} s, range reads {m.get('read_s', 0):.2f} s, "
                  f"decoding {m.get('decode_s', 0):.2f} s, applying "
                  f"{m.get('apply_s', float('nan')):.2f} s; CPU xbngd {m['xbngd_cpu_s']:.2f} s, "
                  f"etcd {m['etcd_cpu_s']:.2f} s; peak RSS {m['hwm_mb']:.0f} MB", flush=True)
        return {"n": n, "runs": runs, "median": med}

    def run(self, n: int, changes: int) -> dict:
        res = {"n": n}
        subs = [plan(i, C_PER_S) for i in range(n)]
        dt, line = self.write(subs, "load.jsonl")
        res["write_s"], res["write_per_s"] = dt, n / dt
        print(f"N={n:,}: xbngctl wrote {n:,} keys into etcd in {dt:.1f} s ({n / dt:,.0f}/s): {line}",
              flush=True)
        max_subs = max(65536, n + n // 8)
        s = self.start_and_wait(n, max_subs)
        res["start"] = s
        print(f"  start -> {n:,} applied: {s['seconds']:.2f} s ({fmt_phases(s)}); xbngd RSS "
              f"{s['rss_mb']:.0f} MB, peak {s['hwm_mb']:.0f} MB\n    xbngd: {s['log']}", flush=True)
        self.node.kill()  # SIGKILL: the pins stay, the next start adopts them
        s = self.start_and_wait(n, max_subs)
        res["restart"] = s
        print(f"  restart with pins adopted -> applied: {s['seconds']:.2f} s (full read+reconcile "
              f"{s['read_apply_s']} s); RSS {s['rss_mb']:.0f} MB, peak {s['hwm_mb']:.0f} MB\n"
              f"    xbngd: {s['log']}",
              flush=True)
        # Steady-state watch: M changes while the node follows.
        m = min(changes, n)
        upd = [{**plan(i, C_PER_S), "mac": "02:cc:%02x:%02x:%02x:%02x" % tuple(i.to_bytes(4, "big"))}
               for i in range(m)]
        ev0 = self.metrics().get("xbng_fleet_events_total", 0)
        t0 = time.monotonic()
        dt, line = self.write(upd, "changes.jsonl")
        t_written = time.monotonic()
        rev = self.cluster.revision()
        wait_for(lambda: self.applied() >= rev, 600, 0.005, "changes applied")
        t_applied = time.monotonic()
        ev = self.metrics().get("xbng_fleet_events_total", 0) - ev0
        res["watch"] = {"changes": m, "writer_per_s": m / dt, "applied_per_s": m / (t_applied - t0),
                        "lag_after_last_put_ms": 1000 * (t_applied - t_written), "events": ev}
        print(f"  watch: {m:,} changes written at {m / dt:,.0f}/s; applied at "
              f"{m / (t_applied - t0):,.0f}/s over the same window; applied "
              f"{1000 * (t_applied - t_written):.0f} ms after the last put returned "
              f"({int(ev):,} events)", flush=True)
        # Single-change latency.
        lat = []
        for k in range(30):
            s0 = {**plan(k, C_PER_S), "mac": "02:dd:00:00:00:%02x" % k}
            key = f"/xbng/v1/nodes/n1/subscribers/{s0['port']}/{s0['outer_vlan']}/{s0['inner_vlan']}"
            t0 = time.monotonic()
            rev = self.gw_put(key, json.dumps(s0))
            while self.applied() < rev:
                time.sleep(0.001)
            lat.append(1000 * (time.monotonic() - t0))
            time.sleep(0.05)
        lat.sort()
        res["latency_ms"] = {"median": statistics.median(lat), "p90": lat[int(0.9 * len(lat))],
                             "max": lat[-1]}
        print(f"  single change put -> applied in the maps: median {statistics.median(lat):.1f} ms, "
              f"p90 {lat[int(0.9 * len(lat))]:.1f} ms, max {lat[-1]:.1f} ms (30 puts)", flush=True)
        self.node.kill()
        return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="60000,1000000")
    ap.add_argument("--changes", type=int, default=100000)
    ap.add_argument("--json")
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--variants",
                    help="A/B mode: LABEL=BINDIR[:READERS],... (xbngd of BINDIR; READERS sets "
                         "etcd.full_read_readers through a config file, builds that have it only)")
    ap.add_argument("--rounds", type=int, default=3, help="A/B mode: rounds of fresh starts")
    ap.add_argument("--etcd-flag", action="append", default=[],
                    help="one more flag for the etcd member (repeat: --etcd-flag=--enable-pprof)")
    a = ap.parse_args()
    variants = []
    for v in (a.variants or "").split(","):
        if v:
            label, spec = v.split("=", 1)
            d, _, readers = spec.partition(":")
            variants.append({"label": label, "xbngd": os.path.abspath(os.path.join(d, "xbngd")),
                             "readers": int(readers) if readers else 0})
    os.makedirs(a.workdir, exist_ok=True)
    print(f"\n## Fleet mode: xbngd from etcd (one etcd 3.4 member, data on disk; shared, noisy "
          f"machine, load {open('/proc/loadavg').read().split()[0]})", flush=True)
    out = []
    for n in [int(s) for s in a.sizes.split(",")]:
        b = Bench(a.workdir, a.etcd_flag)
        try:
            out.append(b.run_ab(n, variants, a.rounds) if variants else b.run(n, a.changes))
        finally:
            b.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
