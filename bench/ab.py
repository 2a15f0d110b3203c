#!/usr/bin/python3
"""A/B per-packet cost of two builds in one run: bench/ab.py OLD_PKTCOST NEW_PKTCOST.

Runs the two xbng_bench_pktcost binaries (e.g. main's, built in another
build directory, and this tree's) alternately (old new, new old, ...),
--rounds times each, with the same arguments, and prints for every case both
builds time the median ns/packet of each over all its trials, the range of
those trials and the ratio of the medians (new / old). Interleaving puts both
under the same spread of machine noise; compare the ratios, not the absolute
figures. A benchmark: it measures and prints, it never passes or fails.
bench/ab_tree.py builds a revision and runs this with the other comparisons.

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


def collect(old, new, sizes, rounds, extra):
    """Runs both binaries alternately; returns (trials by build and case, case labels)."""
    figs = {"old": {}, "new": {}}
    labels = {}
    binaries = {"old": old, "new": new}
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            for which in (("old", "new") if r % 2 == 0 else ("new", "old")):
                res = run(binaries[which], sizes, extra, os.path.join(d, f"{which}{r}.json"))
                for e in res["results"]:
                    k = (e["case"], e["n"], e["keys"])
                    labels[e["case"]] = e["label"]
                    figs[which].setdefault(k, []).extend(e["ns_trials"])
    return figs, labels


def report(figs, labels, rounds, keys=None):
    """Prints the table; returns its rows. keys: only these key modes (e.g. {"random"})."""
    rows = []
    print(f"\nPer-packet cost, ns: median and range of all trials over {rounds} alternated rounds "
          "per build; new/old (ratio of the medians) is the figure to read")
    print(f"{'case':<42} {'N':>7} {'keys':>6} | {'old':>6} {'old range':>11} | {'new':>6} "
          f"{'new range':>11} | {'new/old':>7}")
    print("-" * 108)
    f = lambda v, p=0: "-" if v is None else f"{v:.{p}f}"
    rng = lambda t: f"{min(t):.0f}-{max(t):.0f}" if t else "-"
    for k in sorted(set(figs["old"]) | set(figs["new"]), key=lambda k: (k[1], k[2], k[0])):
        if keys and k[2] not in keys:
            continue
        to, tn = figs["old"].get(k, []), figs["new"].get(k, [])
        o = statistics.median(to) if to else None
        n = statistics.median(tn) if tn else None
        ratio = n / o if o and n else None
        rows.append({"case": k[0], "n": k[1], "keys": k[2], "old_ns": o, "new_ns": n,
                     "old_trials": to, "new_trials": tn, "new_over_old": ratio})
        print(f"{labels[k[0]]:<42} {k[1]:>7} {k[2]:>6} | {f(o):>6} {rng(to):>11} | {f(n):>6} "
              f"{rng(tn):>11} | {f(ratio, 3):>7}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--sizes", default="1K,1M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    a, extra = ap.parse_known_args()  # the rest goes to xbng_bench_pktcost
    a.extra = [e for e in extra if e != "--"]
    figs, labels = collect(a.old, a.new, a.sizes, a.rounds, a.extra)
    rows = report(figs, labels, a.rounds)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"old": a.old, "new": a.new, "sizes": a.sizes, "rounds": a.rounds, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
