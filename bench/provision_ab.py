#!/usr/bin/python3
"""A/B provisioning of two builds in one run: bench/provision_ab.py OLD_BIN_DIR NEW_BIN_DIR.

Runs bench/provision.py's xbng part (N subscribers through StreamSubscribers,
then deleted) alternately with the xbngd/xbngctl of each directory (old new,
new old, ...), --rounds times each, and prints per build the median and range of the load
time, the delete time and xbngd's peak RSS, and the new/old ratio of the
medians. With --update, each round also imports the same N again with a
rate plan added (every subscriber changed) before the delete, and the
figures add the update's time, each import's CPU seconds of xbngd and of
xbngctl, and update/create of each round. Interleaving puts both under the same machine noise; compare the
ratios. A benchmark: it measures and prints, it never passes or fails.

    sudo PYTHONPATH=tests bench/provision_ab.py /tmp/base/build/bin build/bin \
        --subscribers 1000000 --rounds 3

bench/ab_tree.py builds the old side from a revision and runs this comparison
with the per-packet and memory ones.
"""
import argparse
import json
import os
import statistics


import provision  # bench/provision.py, beside this script (it imports xbnglab: PYTHONPATH=tests)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--subscribers", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/xbng-bench-ab")
    ap.add_argument("--update", action="store_true",
                    help="also the same N again with a rate plan (update/create)")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    runs = {"old": [], "new": []}
    for r in range(a.rounds):
        for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
            os.environ["XBNG_BIN"] = os.path.abspath(getattr(a, which))
            load = os.getloadavg()[0]
            res = provision.bench_xbng(a.subscribers, a.workdir, update=a.update)
            res["load"] = load
            if a.update:
                res["update_over_create"] = res["update_s"] / res["add_s"]
            runs[which].append(res)
            extra = (f", update {res['update_s']:.2f} s ({res['update_over_create']:.3f} x)"
                     if a.update else "")
            print(f"# round {r + 1} {which} (load {load:.2f}): add {res['add_s']:.2f} s{extra}, "
                  f"del {res['del_s']:.2f} s, peak RSS {res['agent_rss_peak_mb']:.0f} MB", flush=True)
    print(f"\n{a.subscribers:,} subscribers, {a.rounds} rounds each, alternated")
    print(f"{'figure':<14} {'old median':>10} {'old range':>15} {'new median':>10} {'new range':>15} "
          f"{'new/old':>7}")
    rows = [("add_s", "load s"), ("del_s", "delete s"), ("agent_rss_peak_mb", "peak RSS MB")]
    if a.update:
        rows[1:1] = [("update_s", "update s"), ("update_over_create", "update/create"),
                     ("add_cpu_s", "xbngd CPU load"), ("update_cpu_s", "xbngd CPU upd"),
                     ("add_ctl_cpu_s", "ctl CPU load"), ("update_ctl_cpu_s", "ctl CPU upd")]
    for key, name in rows:
        o = [x[key] for x in runs["old"]]
        n = [x[key] for x in runs["new"]]
        print(f"{name:<14} {statistics.median(o):>10.2f} {min(o):>7.2f}-{max(o):<7.2f} "
              f"{statistics.median(n):>10.2f} {min(n):>7.2f}-{max(n):<7.2f} "
              f"{statistics.median(n) / statistics.median(o):>7.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=2)


if __name__ == "__main__":
    main()
