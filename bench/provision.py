"""Provisioning benchmark: subscriber add/update/delete rates and agent memory.

xbng: N subscribers (IPv4 + IPv6 + one /64 each) through the real gRPC
StreamSubscribers (`xbngctl sub import`), client file to maps; then (with
update=True) the same N imported again with a rate plan added (every
subscriber changed: what an ISP that reprices a tier does); then deleted
(`xbngctl sub del --file`): wall time of each step, subscribers/s, agent
peak RSS, kernel map memory per subscriber (bpftool's per-map figure).

The kernel's own way, side by side in a scratch namespace: the same count of
/32, /128 and /64 routes added and deleted with `ip -batch` (time, slab
memory). Prints figures, returns a dict; asserts nothing.
"""
from __future__ import annotations

import ipaddress
import json
import os
import resource
import subprocess
import time

from xbnglab.lab import Lab, sh
from xbnglab.xbngd import XbngLab, plan, write_jsonl

XBNG_MAPS = ("subscribers", "routes_v4", "routes_v6", "routes_v6_64", "prefixes_v4", "prefixes_v6")


def meminfo_kb(key: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def proc_status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU seconds of the children waited for so far (each xbngctl run)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def map_memory(bpffs_dir: str) -> dict[str, int]:
    """bytes per pinned xbng map, from bpftool (bytes_memlock is the map's memory on 6.x)."""
    out = {}
    for name in XBNG_MAPS:
        matches = [os.path.join(r, name) for r, _d, files in os.walk(bpffs_dir) if name in files]
        if not matches:
            continue
        info = json.loads(sh(["bpftool", "-j", "map", "show", "pinned", matches[0]]).stdout)
        out[name] = int(info.get("bytes_memlock", 0))
    return out


# The rate plan the update step adds to every subscriber (25/50 Mbit/s).
UPDATE_POLICY = {"up_rate_bps": 25_000_000, "up_burst_bytes": 312_500,
                 "down_rate_bps": 50_000_000, "down_burst_bytes": 625_000}


def bench_xbng(n: int, workdir: str, update: bool = False) -> dict:
    with XbngLab(kind="xbngbench") as x:
        x.start(max_subscribers=max(n, 1024))
        pid = x.daemon.pid
        rss_idle = proc_status_kb(pid, "VmRSS")
        mem0 = map_memory(x.lab.bpffs)
        path = os.path.join(workdir, f"subs-{n}.jsonl")
        write_jsonl(path, (plan(i, c_per_s=4000) for i in range(n)))
        t0, c0, k0 = time.monotonic(), cpu_s(pid), children_cpu_s()
        out = x.ctl("sub", "import", path)
        t_add, c_add = time.monotonic() - t0, cpu_s(pid) - c0
        k_add = children_cpu_s() - k0
        assert int(out["applied"]) == n, out
        rss_peak = proc_status_kb(pid, "VmHWM")
        rss_loaded = proc_status_kb(pid, "VmRSS")
        mem1 = map_memory(x.lab.bpffs)
        listed = x.ctl("sub", "list", "--page-size", "1")
        t_upd = c_upd = k_upd = rss_upd_peak = None
        if update:
            upath = os.path.join(workdir, f"subs-{n}-policy.jsonl")
            write_jsonl(upath, ({**plan(i, c_per_s=4000), "policy": UPDATE_POLICY}
                                for i in range(n)))
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")  # VmHWM := VmRSS: the update's own peak
            t0, c0, k0 = time.monotonic(), cpu_s(pid), children_cpu_s()
            out = x.ctl("sub", "import", upath)
            t_upd, c_upd = time.monotonic() - t0, cpu_s(pid) - c0
            k_upd = children_cpu_s() - k0
            os.unlink(upath)
            assert int(out["applied"]) == n, out
            rss_upd_peak = proc_status_kb(pid, "VmHWM") / 1024
            got = x.ctl("sub", "get", "--port", "acc0", "--outer", "100", "--inner", "1")["subscriber"]
            assert int(got["policy"]["down_rate_bps"]) == UPDATE_POLICY["down_rate_bps"], got
        t0, c0 = time.monotonic(), cpu_s(pid)
        x.ctl("sub", "del", "--file", path)
        t_del, c_del = time.monotonic() - t0, cpu_s(pid) - c0
        after = x.ctl("sub", "list", "--page-size", "1")
        os.unlink(path)
        return {
            "n": n,
            "add_s": t_add, "add_per_s": n / t_add,
            "del_s": t_del, "del_per_s": n / t_del,
            "add_cpu_s": c_add, "del_cpu_s": c_del, "update_cpu_s": c_upd,
            "add_ctl_cpu_s": k_add, "update_ctl_cpu_s": k_upd,
            "update_s": t_upd, "update_per_s": n / t_upd if t_upd else None,
            "agent_rss_update_peak_mb": rss_upd_peak,
            "listed_total": int(listed["total_count"]),
            "remaining_after_delete": int(after.get("total_count", 0)),
            "agent_rss_idle_mb": rss_idle / 1024, "agent_rss_loaded_mb": rss_loaded / 1024,
            "agent_rss_peak_mb": rss_peak / 1024,
            "map_bytes": mem1, "map_bytes_empty": mem0,
            "map_bytes_per_subscriber": sum(mem1.values()) / n,
        }


def bench_ip_batch(n: int, workdir: str) -> dict:
    """The same routes in the kernel FIB of a scratch namespace, with ip -batch."""
    with Lab(kind="xbngbench") as lab:
        ns = lab.netns("fib")
        ns.ip("link", "add", "r0", "type", "veth", "peer", "name", "r1")
        ns.ip("link", "set", "r0", "up")
        ns.ip("link", "set", "r1", "up")
        add = os.path.join(workdir, f"routes-{n}.add")
        dele = os.path.join(workdir, f"routes-{n}.del")
        with open(add, "w") as fa, open(dele, "w") as fd:
            for i in range(n):
                p = plan(i)
                for dst in (p["ipv4"] + "/32", p["ipv6"] + "/128", p["ipv6_prefixes"][0]):
                    fa.write(f"route add {dst} dev r0\n")
                    fd.write(f"route del {dst} dev r0\n")
        slab0 = meminfo_kb("Slab")
        t0 = time.monotonic()
        r = subprocess.run(["/usr/bin/time", "-f", "%M", "ip", "-n", ns.name, "-batch", add],
                           capture_output=True, text=True)
        t_add = time.monotonic() - t0
        ip_rss_kb = int(r.stderr.strip().splitlines()[-1]) if r.stderr.strip() else 0
        if r.returncode != 0:
            raise RuntimeError(f"ip -batch add failed: {r.stderr[-500:]}")
        slab1 = meminfo_kb("Slab")
        t0 = time.monotonic()
        sh(["ip", "-n", ns.name, "-batch", dele], timeout=3600)
        t_del = time.monotonic() - t0
        os.unlink(add)
        os.unlink(dele)
        return {"n": n, "routes": 3 * n, "add_s": t_add, "add_per_s": n / t_add,
                "del_s": t_del, "del_per_s": n / t_del,
                "slab_delta_mb": (slab1 - slab0) / 1024, "ip_peak_rss_mb": ip_rss_kb / 1024}


def run(sizes: list[int], workdir: str) -> dict:
    os.makedirs(workdir, exist_ok=True)
    results = {"xbng": [], "ip_batch": []}
    print("\n## Provisioning: xbng StreamSubscribers vs kernel routes with ip -batch")
    print(f"{'subscribers':>11} | {'xbng add s':>10} {'subs/s':>10} {'del s':>7} {'peak RSS MB':>11} "
          f"{'map B/sub':>9} | {'ip -batch add s':>15} {'del s':>7} {'slab MB':>8} | {'ip/xbng':>7}")
    for n in sizes:
        xr = bench_xbng(n, workdir)
        kr = bench_ip_batch(n, workdir)
        results["xbng"].append(xr)
        results["ip_batch"].append(kr)
        print(f"{n:>11,} | {xr['add_s']:>10.2f} {xr['add_per_s']:>10,.0f} {xr['del_s']:>7.2f} "
              f"{xr['agent_rss_peak_mb']:>11.0f} {xr['map_bytes_per_subscriber']:>9.0f} | "
              f"{kr['add_s']:>15.2f} {kr['del_s']:>7.2f} {kr['slab_delta_mb']:>8.0f} | "
              f"{kr['add_s'] / xr['add_s']:>6.1f}x", flush=True)
    return results


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="60000,1000000")
    ap.add_argument("--workdir", default="/tmp/xbng-bench")
    ap.add_argument("--json")
    a = ap.parse_args()
    res = run([int(s) for s in a.sizes.split(",")], a.workdir)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
