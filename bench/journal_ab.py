#!/usr/bin/python3
"""A/B cost of the store's write-ahead journal in one run:
bench/journal_ab.py OLD_BIN_DIR NEW_BIN_DIR [--n 1000000] [--rounds 2].

OLD_BIN_DIR holds an xbngd/xbngctl without the journal (main before it, built
in another build directory), NEW_BIN_DIR this tree's. Alternately, --rounds
times each, in a fresh lab: N subscribers loaded through StreamSubscribers
(`xbngctl sub import`: every key new, the journal records keys only), the
same N updated (a new /64 each: the journal records every previous spec),
then deleted (`xbngctl sub del --file`). Prints each phase's median wall time
per build and the ratio new / old; interleaving puts both under the same
machine noise, so compare the ratios. A benchmark: it measures and prints,
it never passes or fails.
"""
import argparse
import ipaddress
import os
import statistics
import tempfile
import time

from xbnglab.xbngd import P64_BASE, XbngLab, plan, write_jsonl


def one(bin_dir: str, n: int, add: str, upd: str) -> dict:
    os.environ["XBNG_BIN"] = bin_dir
    with XbngLab(kind="xbngjab") as x:
        # Room for one stream batch of new /64s before the old ones go.
        x.start(max_subscribers=n + 65536)
        out = {}
        for phase, args in (("add", ["sub", "import", add]), ("update", ["sub", "import", upd]),
                            ("delete", ["sub", "del", "--file", add])):
            t0 = time.monotonic()
            r = x.ctl(*args)
            out[phase] = time.monotonic() - t0
            if phase != "delete":
                assert int(r["applied"]) == n, r
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="xbng-jab-") as d:
        add, upd = os.path.join(d, "add.jsonl"), os.path.join(d, "upd.jsonl")
        write_jsonl(add, (plan(i, c_per_s=4000) for i in range(a.n)))

        def changed(i):
            s = plan(i, c_per_s=4000)
            s["ipv6_prefixes"] = [f"{ipaddress.IPv6Address(P64_BASE + ((a.n + i) << 64))}/64"]
            return s
        write_jsonl(upd, (changed(i) for i in range(a.n)))
        runs = {"old": [], "new": []}
        for r in range(a.rounds):
            for which in ("old", "new"):
                res = one(os.path.abspath(getattr(a, which)), a.n, add, upd)
                runs[which].append(res)
                print(f"round {r} {which}: " + ", ".join(f"{k} {v:.2f} s" for k, v in res.items()),
                      flush=True)
    print(f"\n{a.n} subscribers, median of {a.rounds} rounds")
    print(f"{'phase':8} {'old s':>8} {'new s':>8} {'new/old':>8}")
    for phase in ("add", "update", "delete"):
        o = statistics.median(x[phase] for x in runs["old"])
        nw = statistics.median(x[phase] for x in runs["new"])
        print(f"{phase:8} {o:8.2f} {nw:8.2f} {nw / o:8.3f}")


if __name__ == "__main__":
    main()
