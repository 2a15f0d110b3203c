"""A/B of the RADIUS-authorized bring-up storm in one run: two xbngd builds alternated.

    sudo PYTHONPATH=tests /usr/bin/python3 bench/bringup_radius_ab.py OLD_BIN_DIR NEW_BIN_DIR
        [--rounds 3] [-n 60000] [--window 512]
    sudo PYTHONPATH=tests /usr/bin/python3 bench/bringup_radius_ab.py [--rounds 3] \
        -- OLD_BIN_DIR NEW_BIN_DIR --port-rate 100000 --radius-threads 0   # more bringup_radius.py options

Runs bench/bringup_radius.py (a fresh lab, FreeRADIUS and xbngd each time)
with XBNG_BIN=OLD_BIN_DIR and with XBNG_BIN=NEW_BIN_DIR alternately (old
new, new old, ...), --rounds times each; a directory needs only the xbngd
to compare (the other binaries come from build/bin). Prints each run
(sessions/s, time to bound, xbngd's and FreeRADIUS's CPU seconds,
retransmissions, punt drops of the port limit, load average) and, per
build, the medians and ranges of sessions/s and of xbngd's CPU per
session, with new/old. On a shared machine read the ratios of the medians;
a benchmark: it never passes or fails.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys


def one(bin_dir: str, n: int, window: int, extra: list[str]) -> dict:
    env = dict(os.environ, XBNG_BIN=os.path.abspath(bin_dir))
    load = os.getloadavg()[0]
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run(["/usr/bin/python3", os.path.join(here, "bringup_radius.py"), "-n", str(n),
                        "--window", str(window), *extra], env=env, capture_output=True, text=True)
    out = r.stdout
    m = re.search(r"bound (\d+), failed (\d+) in ([\d.]+) s: (\d+) sessions/s", out)
    t = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms", out)
    c = re.search(r"over the storm's ([\d.]+) s: xbngd ([\d.]+).*FreeRADIUS ([\d.]+), generator", out)
    if not (m and t and c):
        sys.exit(f"bringup_radius.py ({bin_dir}) printed no figures:\n{out[-2000:]}{r.stderr[-2000:]}")
    rt = re.search(r"retransmissions (\d+)", out)
    pr = re.search(r"drop_punt_rate_port=(\d+)", out)
    row = {"load": round(load, 1), "bound": int(m[1]), "failed": int(m[2]), "wall_s": float(m[3]),
           "sessions_per_s": int(m[4]), "p50_ms": float(t[1]), "p99_ms": float(t[2]),
           "xbngd_cpu_s": float(c[2]), "freeradius_cpu_s": float(c[3]),
           "retransmits": int(rt[1]) if rt else 0, "punt_port_drops": int(pr[1]) if pr else 0}
    row["xbngd_us_per_session"] = round(1e6 * row["xbngd_cpu_s"] / max(1, row["bound"]), 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--subscribers", "-n", type=int, default=60000)
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("extra", nargs="*", help="more bringup_radius.py options (after --)")
    a = ap.parse_args()
    rows = {"old": [], "new": []}
    for r in range(a.rounds):
        for who in (("old", "new") if r % 2 == 0 else ("new", "old")):
            row = one(a.old if who == "old" else a.new, a.subscribers, a.window, a.extra)
            rows[who].append(row)
            print(f"round {r} {who}: {row}", flush=True)
    med = {}
    for who in ("old", "new"):
        rate = [x["sessions_per_s"] for x in rows[who]]
        us = [x["xbngd_us_per_session"] for x in rows[who]]
        med[who] = (statistics.median(rate), statistics.median(us))
        print(f"{who}: sessions/s median {med[who][0]:,.0f} (range {min(rate):,}-{max(rate):,}); "
              f"xbngd CPU per session median {med[who][1]:.0f} us (range {min(us):.0f}-{max(us):.0f})")
    print(f"new/old: sessions/s {med['new'][0] / med['old'][0]:.3f}, "
          f"xbngd CPU per session {med['new'][1] / med['old'][1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
