#!/usr/bin/python3
"""A/B per-packet cost of two builds in one run: bench/ab.py OLD_PKTCOST NEW_PKTCOST.

Runs the two xbng_bench_pktcost binaries (e.g. main's, built in another
build directory, and this tree's) alternately, --rounds times each, with the
same arguments, and prints for every case both builds time the median ns/packet
of each and their ratio (new / old). Interleaving puts both under the same
spread of machine noise; compare the ratios, not the absolute figures. A
benchmark: it measures and prints, it never passes or fails.

    sudo bench/ab.py /tmp/base/build/bin/xbng_bench_pktcost build/bin/xbng_bench_pktcost \\
        --sizes 1K,1M --rounds 3 -- --repeat 2000000 --trials 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(binary, sizes, extra, out):
    cmd = [binary, "--sizes", sizes, "--json", out, *extra]
    print("#", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode not in (0, 3):
        sys.exit(f"{binary} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--sizes", default="1K,1M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    a, extra = ap.parse_known_args()  # the rest goes to xbng_bench_pktcost
    a.extra = [e for e in extra if e != "--"]
    figs = {"old": {}, "new": {}}
    labels = {}
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
                res = run(getattr(a, which), a.sizes, a.extra, os.path.join(d, f"{which}{r}.json"))
                for e in res["results"]:
                    k = (e["case"], e["n"], e["keys"])
                    labels[e["case"]] = e["label"]
                    figs[which].setdefault(k, []).extend(e["ns_trials"])
    rows = []
    print(f"\nPer-packet cost, ns (median of all trials over {a.rounds} interleaved rounds); "
          "new/old is the figure to read")
    print(f"{'case':<42} {'N':>7} {'keys':>6} | {'old':>7} {'new':>7} | {'new/old':>7}")
    print("-" * 86)
    for k in sorted(set(figs["old"]) | set(figs["new"]), key=lambda k: (k[1], k[0], k[2])):
        o = statistics.median(figs["old"][k]) if k in figs["old"] else None
        n = statistics.median(figs["new"][k]) if k in figs["new"] else None
        ratio = n / o if o and n else None
        rows.append({"case": k[0], "n": k[1], "keys": k[2], "old_ns": o, "new_ns": n, "new_over_old": ratio})
        f = lambda v, p=0: "-" if v is None else f"{v:.{p}f}"
        print(f"{labels[k[0]]:<42} {k[1]:>7} {k[2]:>6} | {f(o):>7} {f(n):>7} | {f(ratio, 3):>7}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"old": a.old, "new": a.new, "sizes": a.sizes, "rounds": a.rounds, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
