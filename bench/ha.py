"""Takeover of an HA pair (docs/fleet.md, "High availability"): traffic lost,
time to the new active and the takeover's announcement, with N subscribers.

The lab of tests/integration/test_ha.py (xbnglab.ha): two xbngd members of
one group on one access bridge, one etcd, N subscribers from etcd on both.
Numbered frames both ways (500 per second each way, round robin over the
first --flow-subs subscribers) run through the group while, --rounds times
each:
  kill      kill -9 of the active agent (its data plane forwards until its
            deadline), then the killed member is started again and rejoins
  node      loss of the active node: its agent killed and its access and
            uplink links down at once (its data plane stops with it), then
            the links up and the member started again
  switchover  `xbngctl ha switchover` of the active
Per event: seconds of traffic lost each way (lost frames / rate), seconds
from the event to the other member showing active, and the new active's
announcement (gratuitous ARP + unsolicited NAs on every subscriber VLAN
pair, paced): frames, VLAN pairs and seconds, from its log. Prints each
event and the median and range of each kind; asserts nothing.

    PYTHONPATH=tests /usr/bin/python3 bench/ha.py [--subscribers 60000] [--rounds 5]
        [--kinds kill,node,switchover]
"""
from __future__ import annotations

import argparse
import signal
import statistics
import time

from xbnglab.ha import Flows, build_lab, start_group
from xbnglab.lab import Lab, wait_for
from xbnglab.xbngd import find_pass_obj, plan


def wait_announced(m, before, timeout):
    """The member's announcement after `before` (its count of them)."""
    def done():
        a = m.takeover_announced()
        return a if a and m.announcements() > before else None
    wait_for(done, timeout, 0.2, f"{m.name}'s takeover announcement")
    return m.takeover_announced()


def links(ns, m, state):
    ns["acc"].ip("link", "set", f"a{m.k}", state)
    ns["up"].ip("link", "set", f"u{m.k}", state)


def event(kind, members, ns, subs, n):
    cpe, net = ns["cpe"], ns["net"]
    act = [m for m in members if m.role() == "active"]
    if len(act) != 1:
        raise RuntimeError(f"{len(act)} active members")
    old, new = act[0], members[1 - act[0].k]
    wait_for(lambda: not any(v.get("holding") for v in new.ha().get("members", [])), 60, 0.2,
             "no member holding")
    before = new.announcements()
    with Flows(cpe, net, subs) as flows:
        time.sleep(2)
        t0 = time.monotonic()
        if kind in ("kill", "node"):
            old.daemon.send_signal(signal.SIGKILL)
            old.daemon.wait(10)
            if kind == "node":
                links(ns, old, "down")
        else:
            old.ctl("ha", "switchover")
        wait_for(lambda: new.role() == "active", 60, 0.02, f"{new.name} to take over")
        t_active = time.monotonic() - t0
        time.sleep(3)
    frames, vlans, secs = wait_announced(new, before, 120)
    r = {"kind": kind, "active_s": t_active, "ann_frames": frames, "ann_vlans": vlans,
         "ann_s": secs}
    for d in ("up", "down"):
        r[f"lost_{d}"], r[f"loss_{d}_s"] = flows.loss(d)
    if kind in ("kill", "node"):
        if kind == "node":
            links(ns, old, "up")
        old.start()
        wait_for(lambda: old.role() == "standby", 120, 0.2, f"{old.name} to rejoin")
        wait_for(lambda: old.subscribers() == n, 300, 0.5, f"{old.name} to hold the subscribers")
    return r


def summary(rows, key):
    v = [r[key] for r in rows]
    return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subscribers", type=int, default=60000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--flow-subs", type=int, default=1000,
                    help="subscribers the numbered traffic goes round")
    ap.add_argument("--kinds", default="kill,node,switchover",
                    help="events, comma-separated: kill, node, switchover")
    a = ap.parse_args()
    n = a.subscribers
    kinds = a.kinds.split(",")
    if not kinds or any(k not in ("kill", "node", "switchover") for k in kinds):
        ap.error(f"--kinds {a.kinds}: expected kill, node and/or switchover")
    with Lab("xbngbha") as lab:
        cluster, members, ns = build_lab(lab, find_pass_obj(), max_subscribers=max(4096, n))
        subs = [plan(i) for i in range(n)]
        imported = start_group(lab, cluster, members, subs, timeout=600, role_timeout=60)
        print(f"ha bench: {n} subscribers imported to etcd in {imported:.1f} s; "
              "both members hold them", flush=True)
        wait_announced(members[0], 0, 300)
        flow_subs = subs[:a.flow_subs]
        rows = []
        for i in range(a.rounds):
            for kind in kinds:
                row = event(kind, members, ns, flow_subs, n)
                rows.append(row)
                print(f"ha bench: {kind:10s} round {i + 1}: loss up {row['loss_up_s']:.2f} s "
                      f"down {row['loss_down_s']:.2f} s, active after {row['active_s']:.2f} s, "
                      f"announced {row['ann_frames']} frames on {row['ann_vlans']} VLAN pairs "
                      f"in {row['ann_s']:.2f} s", flush=True)
        print(f"\nha bench: {n} subscribers, {a.rounds} rounds, traffic over {len(flow_subs)} "
              f"subscribers at 500 frames/s each way; median (min-max)")
        for kind in kinds:
            rs = [r for r in rows if r["kind"] == kind]
            print(f"  {kind:10s} loss up {summary(rs, 'loss_up_s')} s, down "
                  f"{summary(rs, 'loss_down_s')} s; active after {summary(rs, 'active_s')} s; "
                  f"announcement {summary(rs, 'ann_s')} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
