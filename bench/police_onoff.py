#!/usr/bin/python3
"""Cost of policing, before and after: bench/police_onoff.py AB_JSON.

Reads the JSON bench/ab.py writes (--json) and prints, for each build (old,
new) and each downstream/upstream case that xbng_bench_pktcost times with
and without rate plans, the ratio policing on / policing off. Each trial of
xbng_bench_pktcost times the unpoliced case and then the policed one in the
same run, so the ratio is taken trial by trial (the i-th policed trial over
the i-th unpoliced one), and the median and range of those ratios are
printed. A benchmark: it prints figures, it never passes or fails.

    sudo bench/ab.py OLD NEW --sizes 1K,60K,1M --json ab.json -- --trials 3
    bench/police_onoff.py ab.json
"""
import json
import statistics
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        ab = json.load(f)
    rows = {(r["case"], r["n"], r["keys"]): r for r in ab["rows"]}
    print(f"Policing on / off, per trial; median [min-max] over the trials of "
          f"{ab['rounds']} alternated rounds per build")
    print(f"{'case':<16} {'N':>8} {'keys':>6} | {'old (before)':>20} | {'new (after)':>20}")
    print("-" * 80)
    for (case, n, keys), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        if not case.endswith("_pol"):
            continue
        base = rows.get((case[:-4], n, keys))
        if not base:
            continue
        cells = []
        for b in ("old", "new"):
            on, off = r[f"{b}_trials"], base[f"{b}_trials"]
            ratios = [a / o for a, o in zip(on, off) if o]
            cells.append(f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
                         if ratios else "-")
        print(f"{case:<16} {n:>8} {keys:>6} | {cells[0]:>20} | {cells[1]:>20}")


if __name__ == "__main__":
    main()
