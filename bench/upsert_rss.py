"""Agent memory of a maximal atomic UpsertSubscribers on top of a full store.

`[api] max_request_bytes` (16 MiB by default) bounds one unary request; bulk
loads are meant for StreamSubscribers, but one atomic UpsertSubscribers of
the largest size the API takes is what an operator's script may send. In the
standard lab (tests/xbnglab/xbngd.py, its own namespaces and bpffs),
with subscriber i of the shared addressing plan:

  (a) N subscribers through StreamSubscribers (`xbngctl sub import`);
  (b) one UpsertSubscribers (bench/upsert.cpp, xbng_bench_upsert) packed
      with as many subscribers as fit in --max-bytes of request:
        --mode update (default): subscribers 0, 1, ... again, each moved to
          the addresses of subscriber N + i (old routes released, new ones
          claimed): the store stays at N subscribers;
        --mode create: new subscribers N, N + 1, ... (the store grows);
  (c) every subscriber deleted (`xbngctl sub del --file`).

After each step: xbngd's peak RSS during the step (VmHWM, reset before the
step through /proc/PID/clear_refs) and its RSS --settle seconds later
(VmRSS, once malloc_trim has run). Prints figures, asserts nothing.

    sudo PYTHONPATH=tests python3 bench/upsert_rss.py [--subscribers 1000000] [--max-bytes 16777216]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

from xbnglab.xbngd import XbngLab, find_bin, plan, write_jsonl

C_PER_S = 4000  # C-VIDs per S-VID, as bench/provision.py


def status_mb(pid: int, key: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def reset_peak(pid: int) -> None:
    """VmHWM := VmRSS (Linux >= 4.0: '5' to clear_refs resets the peak RSS)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def step(pid: int, settle: float, what, *args) -> dict:
    reset_peak(pid)
    before = status_mb(pid, "VmRSS")
    t0 = time.monotonic()
    out = what(*args)
    secs = time.monotonic() - t0
    peak = status_mb(pid, "VmHWM")
    time.sleep(settle)
    return {"seconds": secs, "rss_before_mb": before, "peak_mb": peak,
            "rss_after_mb": status_mb(pid, "VmRSS"), "out": out}


def moved(i: int, n: int) -> dict:
    """Subscriber i (its key and MAC) on the addresses of subscriber n + i."""
    s, a = plan(i, c_per_s=C_PER_S), plan(n + i, c_per_s=C_PER_S)
    return {**s, "ipv4": a["ipv4"], "ipv6": a["ipv6"], "ipv6_prefixes": a["ipv6_prefixes"]}


def run(n: int, mode: str, max_bytes: int, upsert_candidates: int, settle: float, workdir: str,
        extra: list[str]) -> dict:
    os.makedirs(workdir, exist_ok=True)
    stream_file = os.path.join(workdir, f"stream-{n}.jsonl")
    upsert_file = os.path.join(workdir, f"upsert-{n}.jsonl")
    write_jsonl(stream_file, (plan(i, c_per_s=C_PER_S) for i in range(n)))
    if mode == "create":
        write_jsonl(upsert_file, (plan(i, c_per_s=C_PER_S) for i in range(n, n + upsert_candidates)))
    else:
        write_jsonl(upsert_file, (moved(i, n) for i in range(min(n, upsert_candidates))))
    upsert_bin = find_bin("xbng_bench_upsert")
    res: dict = {"subscribers": n, "mode": mode, "max_request_bytes": max_bytes}
    try:
        with XbngLab(kind="xbngrss") as x:
            # Room for N + the upsert in every map: a move claims its new
            # routes before it releases the old ones (atomic).
            x.start(max_subscribers=n + upsert_candidates, extra=extra)
            pid = x.daemon.pid
            with open(f"/proc/{pid}/comm") as f:
                assert f.read().strip() == "xbngd", "the spawned process is not xbngd itself"
            time.sleep(settle)
            res["idle_rss_mb"] = status_mb(pid, "VmRSS")

            res["stream"] = step(pid, settle, x.ctl, "sub", "import", stream_file)

            def upsert():
                r = subprocess.run([upsert_bin, "--server", x.grpc, "--file", upsert_file,
                                    "--max-bytes", str(max_bytes)],
                                   capture_output=True, text=True, timeout=600)
                if r.returncode != 0:
                    raise RuntimeError(f"xbng_bench_upsert: {r.stderr.strip()}")
                return json.loads(r.stdout)
            res["upsert"] = step(pid, settle, upsert)
            res["total_after_upsert"] = int(x.ctl("sub", "list", "--page-size", "1")["total_count"])

            def delete():
                files = (upsert_file, stream_file) if mode == "create" else (stream_file,)
                return [x.ctl("sub", "del", "--file", f) for f in files]
            res["delete"] = step(pid, settle, delete)
            res["total_after_delete"] = int(
                x.ctl("sub", "list", "--page-size", "1").get("total_count", 0))
            res["lifetime_peak_mb"] = max(res[k]["peak_mb"] for k in ("stream", "upsert", "delete"))
    finally:
        for f in (stream_file, upsert_file):
            if os.path.exists(f):
                os.unlink(f)
        if not os.listdir(workdir):
            os.rmdir(workdir)
    return res


def report(r: dict) -> None:
    u = r["upsert"]["out"]
    print(f"\n## Atomic UpsertSubscribers ({r['mode']}) at {r['subscribers']:,} subscribers, "
          f"request of at most {r['max_request_bytes']:,} bytes")
    print(f"idle RSS {r['idle_rss_mb']:.0f} MB")
    print(f"{'step':<34} {'seconds':>8} {'RSS before':>10} {'peak RSS':>9} {'RSS after':>9}")
    rows = (("stream", f"(a) StreamSubscribers {r['subscribers']:,}"),
            ("upsert", f"(b) one Upsert of {u['subscribers']:,} ({u['request_bytes'] / 2**20:.2f} MiB)"),
            ("delete", "(c) delete everything"))
    for k, label in rows:
        s = r[k]
        print(f"{label:<34} {s['seconds']:>8.2f} {s['rss_before_mb']:>10.0f} {s['peak_mb']:>9.0f} "
              f"{s['rss_after_mb']:>9.0f}")
    print(f"upsert answer: code {u['code']} created {u['created']} updated {u['updated']} "
          f"unchanged {u['unchanged']} in {u['seconds']:.2f} s {u['message'][:120]}")
    print(f"subscribers after the upsert {r['total_after_upsert']:,}, after the delete "
          f"{r['total_after_delete']:,}; agent peak RSS over the run {r['lifetime_peak_mb']:.0f} MB")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--subscribers", type=int, default=1_000_000)
    ap.add_argument("--mode", choices=("update", "create"), default="update")
    ap.add_argument("--max-bytes", type=int, default=16 << 20,
                    help="largest request the client sends (xbngd's limit is its own config)")
    ap.add_argument("--upsert-candidates", type=int, default=250_000,
                    help="new subscribers written for the upsert (it takes what fits)")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds before VmRSS is read")
    ap.add_argument("--workdir", default="/tmp/xbng-bench-rss")
    ap.add_argument("--json")
    ap.add_argument("xbngd_args", nargs="*", help="after --: extra xbngd arguments")
    a = ap.parse_args()
    res = run(a.subscribers, a.mode, a.max_bytes, a.upsert_candidates, a.settle, a.workdir, a.xbngd_args)
    report(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
