#!/usr/bin/python3
"""A/B of two checkouts in one run: bench/ab_tree.py --base REV.

Builds REV in a git worktree of its own under --workdir (/tmp/xbng-ab/<rev>/src,
build directory /tmp/xbng-ab/<rev>/build, Release, through ccache; kept between
runs so that the next run only rebuilds what changed; --clean removes it) and
this checkout in its build directory (--new-build, default build/), then
compares the two, each comparison alternated (old new, new old, ...) so that
both builds see the same spread of machine noise:

  pktcost    per-packet cost, xbng_bench_pktcost of each build (bench/ab.py),
             --pkt-rounds runs each at --sizes, --pkt-args passed through;
  provision  --subscribers through StreamSubscribers, the same again with a
             rate plan added (an update of every subscriber), then deleted
             (bench/provision.py's xbng part): wall time and xbngd's CPU time
             of each step, xbngd's peak RSS; --prov-rounds runs each;
  rss        bench/upsert_rss.py: --subscribers streamed, one atomic
             UpsertSubscribers of at most --max-bytes, everything deleted;
             xbngd's peak RSS in each step and over the run; --rss-rounds each.

Each run of provision and rss is a fresh lab (its own namespaces, bpffs and
xbngd) with the xbngd and xbngctl of one build (XBNG_BIN). Prints, for every
figure, the median and range of each build and new/old, the ratio of the
medians: read the ratios. A benchmark: it measures and prints, it never
passes or fails.

    sudo PYTHONPATH=tests bench/ab_tree.py --base a3410fe
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

import ab

try:
    import provision
    import upsert_rss
except ModuleNotFoundError as e:
    sys.exit(f"{e}: run with PYTHONPATH=tests (the xbnglab package)")

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = ["xbngd", "xbngctl", "xbng_bench_pktcost", "xbng_bench_upsert"]


def git(root: str, *args: str) -> str:
    return subprocess.run(["git", "-C", root, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def build(src: str, bdir: str, targets: list[str], tests: bool, jobs: int) -> None:
    env = dict(os.environ, CCACHE_BASEDIR=os.environ.get("CCACHE_BASEDIR", "/work"),
               CCACHE_DIR=os.environ.get("CCACHE_DIR", "/work/.ccache"))
    if not os.path.exists(os.path.join(bdir, "CMakeCache.txt")):
        cmd = ["cmake", "-S", src, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
               "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        if not tests:
            cmd.append("-DXBNG_BUILD_TESTS=OFF")
        print("#", " ".join(cmd), file=sys.stderr, flush=True)
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    cmd = ["cmake", "--build", bdir, f"-j{jobs}", "--target", *targets]
    print("#", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"build of {src} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")


def base_checkout(root: str, rev: str, workdir: str, clean: bool) -> tuple[str, str]:
    """(source, build dir) of REV: a detached worktree of this repository."""
    full = git(root, "rev-parse", "--verify", rev + "^{commit}")
    top = os.path.join(workdir, full[:12])
    src, bdir = os.path.join(top, "src"), os.path.join(top, "build")
    if clean and os.path.exists(top):
        subprocess.run(["git", "-C", root, "worktree", "remove", "--force", src], check=False)
        shutil.rmtree(top, ignore_errors=True)
    if not os.path.exists(os.path.join(src, ".git")):
        os.makedirs(top, exist_ok=True)
        git(root, "worktree", "prune")
        git(root, "worktree", "add", "--detach", src, full)
    elif git(src, "rev-parse", "HEAD") != full:
        sys.exit(f"{src} is not at {full}: remove it or run with --clean")
    return src, bdir


def alternate(rounds: int):
    for r in range(rounds):
        yield from ((r, "old"), (r, "new")) if r % 2 == 0 else ((r, "new"), (r, "old"))


def summary(title: str, runs: dict, figures: list[tuple[str, str, str]]) -> list[dict]:
    """runs: {"old": [dict...], "new": [...]}; figures: (key path, name, format)."""
    def get(d, path):
        for p in path.split("."):
            d = d[p]
        return d
    print(f"\n{title}")
    print(f"{'figure':<26} {'old median':>10} {'old range':>17} | {'new median':>10} "
          f"{'new range':>17} | {'new/old':>7}")
    print("-" * 98)
    rows = []
    for path, name, fmt in figures:
        o = [get(x, path) for x in runs["old"]]
        n = [get(x, path) for x in runs["new"]]
        mo, mn = statistics.median(o), statistics.median(n)
        ratio = mn / mo if mo else None
        rng = lambda v: f"{min(v):{fmt}}-{max(v):{fmt}}"
        print(f"{name:<26} {mo:>10{fmt}} {rng(o):>17} | {mn:>10{fmt}} {rng(n):>17} | "
              f"{'-' if ratio is None else f'{ratio:.3f}':>7}")
        rows.append({"figure": path, "old": o, "new": n, "old_median": mo, "new_median": mn,
                     "new_over_old": ratio})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="revision to compare against (old)")
    ap.add_argument("--new-build", default=os.path.join(HERE, "..", "build"),
                    help="this checkout's build directory (new; configured if absent)")
    ap.add_argument("--workdir", default="/tmp/xbng-ab", help="where REV's worktree is built")
    ap.add_argument("--old-bin", help="REV's binaries, already built (xbngd, xbngctl, "
                    "xbng_bench_*): used instead of building REV")
    ap.add_argument("--clean", action="store_true", help="rebuild REV's worktree from scratch")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="pktcost,provision,rss",
                    help="comma-separated subset of pktcost,provision,rss")
    ap.add_argument("--sizes", default="1K,1M", help="pktcost subscriber counts")
    ap.add_argument("--keys", default="fixed,random", help="pktcost key modes to print")
    ap.add_argument("--pkt-rounds", type=int, default=2)
    ap.add_argument("--pkt-args", default="--repeat 1000000 --trials 2",
                    help="passed to xbng_bench_pktcost")
    ap.add_argument("--subscribers", type=int, default=1_000_000, help="provision and rss")
    ap.add_argument("--prov-rounds", type=int, default=3)
    ap.add_argument("--rss-rounds", type=int, default=2)
    ap.add_argument("--max-bytes", type=int, default=512 << 10,
                    help="rss: largest UpsertSubscribers request (xbngd's default limit)")
    ap.add_argument("--upsert-candidates", type=int, default=20_000,
                    help="rss: subscribers written for the upsert (it takes what fits)")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args()
    only = set(a.only.split(","))
    if only - {"pktcost", "provision", "rss"}:
        sys.exit(f"--only: unknown {sorted(only - {'pktcost', 'provision', 'rss'})}")

    root = git(HERE, "rev-parse", "--show-toplevel")
    new_build = os.path.abspath(a.new_build)
    if a.old_bin:
        old_bin = os.path.abspath(a.old_bin)
    else:
        old_src, old_build = base_checkout(root, a.base, a.workdir, a.clean)
        build(old_src, old_build,
              [t for t in TARGETS if t != "xbng_bench_pktcost" or "pktcost" in only],
              tests=False, jobs=a.jobs)
        old_bin = os.path.join(old_build, "bin")
    # The new build also builds the labs' pass-through XDP object (used for both).
    targets = [t for t in TARGETS if t != "xbng_bench_pktcost" or "pktcost" in only]
    build(root, new_build, targets + ["xbng_xdp_pass_build"], tests=True, jobs=a.jobs)
    bins = {"old": old_bin, "new": os.path.join(new_build, "bin")}
    os.environ["XBNG_XDP_PASS_OBJ"] = os.path.join(
        new_build, "tests", "integration", "xbng_xdp_pass_gen", "xdp_pass.bpf.o")
    head = git(root, "rev-parse", "--short=12", "HEAD")
    dirty = " (with uncommitted changes)" if git(root, "status", "--porcelain", "-uno") else ""
    print(f"old: {a.base} = {git(root, 'rev-parse', '--short=12', a.base)} ({old_bin})\n"
          f"new: {head}{dirty} ({new_build})\n"
          f"load average at the start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}", flush=True)
    out: dict = {"base": a.base, "new": head + dirty, "args": vars(a)}

    if "pktcost" in only:
        figs, labels = ab.collect(os.path.join(bins["old"], "xbng_bench_pktcost"),
                                  os.path.join(bins["new"], "xbng_bench_pktcost"),
                                  a.sizes, a.pkt_rounds, a.pkt_args.split())
        print(f"\n## pktcost: xbng_bench_pktcost --sizes {a.sizes} {a.pkt_args}")
        out["pktcost"] = ab.report(figs, labels, a.pkt_rounds, set(a.keys.split(",")))

    if "provision" in only:
        runs: dict = {"old": [], "new": []}
        os.makedirs(os.path.join(a.workdir, "data"), exist_ok=True)
        for r, which in alternate(a.prov_rounds):
            os.environ["XBNG_BIN"] = bins[which]
            res = provision.bench_xbng(a.subscribers, os.path.join(a.workdir, "data"),
                                       update=True)
            runs[which].append(res)
            print(f"# provision round {r + 1} {which}: load {res['add_s']:.2f} s, update "
                  f"{res['update_s']:.2f} s, delete {res['del_s']:.2f} s, peak RSS "
                  f"{res['agent_rss_peak_mb']:.0f} MB", file=sys.stderr, flush=True)
        out["provision"] = summary(
            f"## provision: {a.subscribers:,} subscribers streamed, streamed again with a rate "
            f"plan added, then deleted; {a.prov_rounds} alternated rounds per build",
            runs, [("add_s", "load (create) s", ".2f"), ("update_s", "update s", ".2f"),
                   ("del_s", "delete s", ".2f"), ("add_cpu_s", "load xbngd CPU s", ".2f"),
                   ("update_cpu_s", "update xbngd CPU s", ".2f"),
                   ("del_cpu_s", "delete xbngd CPU s", ".2f"),
                   ("agent_rss_peak_mb", "peak RSS MB (load)", ".0f"),
                   ("agent_rss_update_peak_mb", "peak RSS MB (update)", ".0f")])
        for which in ("old", "new"):
            u = sorted(x["update_s"] / x["add_s"] for x in runs[which])
            print(f"update/create, {which}: median {statistics.median(u):.2f} "
                  f"(range {u[0]:.2f}-{u[-1]:.2f})")

    if "rss" in only:
        runs = {"old": [], "new": []}
        for r, which in alternate(a.rss_rounds):
            os.environ["XBNG_BIN"] = bins[which]
            res = upsert_rss.run(a.subscribers, "update", a.max_bytes, a.upsert_candidates, 3.0,
                                 os.path.join(a.workdir, "rss"), [])
            if res["total_after_delete"] != 0:
                sys.exit(f"rss: {res['total_after_delete']} subscribers left after the delete")
            runs[which].append(res)
            print(f"# rss round {r + 1} {which}: peak {res['lifetime_peak_mb']:.0f} MB",
                  file=sys.stderr, flush=True)
        out["rss"] = summary(
            f"## rss: {a.subscribers:,} streamed, one UpsertSubscribers (update) of at most "
            f"{a.max_bytes:,} bytes, all deleted; {a.rss_rounds} alternated rounds per build",
            runs, [("stream.seconds", "stream s", ".2f"), ("stream.peak_mb", "stream peak MB", ".0f"),
                   ("upsert.peak_mb", "upsert peak MB", ".0f"),
                   ("delete.peak_mb", "delete peak MB", ".0f"),
                   ("delete.rss_after_mb", "after delete MB", ".0f"),
                   ("lifetime_peak_mb", "peak RSS over the run MB", ".0f")])

    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
