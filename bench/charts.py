"""Charts from a bench/run output directory (PNG, matplotlib)."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CASES = [("up_v4", "xbng upstream IPv4"), ("down_v4", "xbng downstream IPv4"),
         ("down_v6", "xbng downstream IPv6 /128"), ("down_v6_64", "xbng downstream IPv6 /64"),
         ("ref_hash", "ref: bare hash lookup"), ("ref_lpm", "ref: bare LPM-trie lookup"),
         ("ref_redirect", "ref: redirect only (floor)")]


def load(out, name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None


def pktcost_chart(out, d):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, keys in zip(axes, ("fixed", "random")):
        for case, label in CASES:
            pts = sorted((r["n"], r["ns"]) for r in d["results"] if r["case"] == case and r["keys"] == keys)
            if pts:
                style = "--" if case.startswith("ref") else "-"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=label)
        ax.set_xscale("log")
        ax.set_xlabel("subscribers")
        ax.set_title(f"{keys} destinations")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("ns / packet (BPF_PROG_TEST_RUN)")
    axes[1].legend(fontsize=8)
    fig.suptitle("Per-packet cost vs subscribers")
    fig.tight_layout()
    path = os.path.join(out, "pktcost.png")
    fig.savefig(path, dpi=110)
    return path


def provision_chart(out, d):
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    xs = [r["n"] for r in d["xbng"]]
    ax.plot(xs, [r["add_s"] for r in d["xbng"]], marker="o", label="xbng StreamSubscribers (add)")
    ax.plot(xs, [r["del_s"] for r in d["xbng"]], marker="o", linestyle="--", label="xbng (delete)")
    ks = [r["n"] for r in d["ip_batch"]]
    ax.plot(ks, [r["add_s"] for r in d["ip_batch"]], marker="s", label="kernel routes, ip -batch (add)")
    ax.plot(ks, [r["del_s"] for r in d["ip_batch"]], marker="s", linestyle="--", label="ip -batch (delete)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("subscribers (IPv4 /32 + IPv6 /128 + /64 each)")
    ax.set_ylabel("seconds")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Provisioning time vs count")
    fig.tight_layout()
    path = os.path.join(out, "provision.png")
    fig.savefig(path, dpi=110)
    return path


def fwd_chart(out, d):
    paths = []
    for r in d["results"]:
        if r["path"] not in paths:
            paths.append(r["path"])
    sizes = sorted({r["n"] for r in d["results"]})
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.5 * len(sizes), 4.5), sharey=True, squeeze=False)
    for ax, n in zip(axes[0], sizes):
        labels, fixed, rnd = [], [], []
        for p in paths:
            rs = {r["keys"]: r["mpps"] for r in d["results"] if r["path"] == p and r["n"] == n}
            labels.append(p)
            fixed.append(rs.get("fixed", 0))
            rnd.append(rs.get("random", 0))
        xs = range(len(labels))
        ax.bar([x - 0.2 for x in xs], fixed, 0.4, label="fixed")
        ax.bar([x + 0.2 for x in xs], rnd, 0.4, label="random")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{n:,} subscribers / routes")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("Mpps at the sink")
    axes[0][0].legend()
    fig.suptitle("Forwarding through veth (one core)")
    fig.tight_layout()
    path = os.path.join(out, "fwd.png")
    fig.savefig(path, dpi=110)
    return path


def main(out):
    made = []
    for name, fn in (("pktcost.json", pktcost_chart), ("provision.json", provision_chart), ("fwd.json", fwd_chart)):
        d = load(out, name)
        if d:
            made.append(fn(out, d))
    print("charts: " + ", ".join(made))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/bench")
