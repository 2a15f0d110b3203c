"""DHCPv4 leases per second from Debian's Kea, straight and through xbngd's relay.

One run, one Kea (kea-dhcp4, memfile) in a namespace behind the uplink of a
standard xbng lab (tests/xbnglab), two phases:
  A  straight: perfdhcp (kea-admin) in `net` asks Kea directly, as a relay
     would (unicast to Kea, option 82 link-selection = the access gateway),
     N four-message exchanges at --rate.
  B  relayed: xbng_bench_bringup --v4-only emulates N QinQ CPEs nobody
     provisioned on xbngd's access port (dhcp = "relay"): DORA through the
     punt path, the relay and Kea; xbngd creates each subscriber from its
     ACK. The generator prints sessions/s, time to bound (p50/p99) and
     xbngd's CPU.
Leases are counted in Kea's lease file for both phases (perfdhcp's own
counters are not trusted in relay mode). Prints what it measured; asserts
nothing.

With --family 6, the same for DHCPv6 with one kea-dhcp6 (memfile):
  A6 straight: perfdhcp -6 -A1 (it plays a relay) in `net`, unicast to Kea,
     IA_NA + IA_PD, four-message exchanges; Kea picks a subnet of its own
     by the link-address (net's address toward Kea).
  B6 relayed: xbng_bench_bringup --v6-only: N QinQ CPEs nobody provisioned,
     SOLICIT/ADVERTISE/REQUEST/REPLY (IA_NA + IA_PD) through the punt
     path, xbngd's DHCPv6 relay and Kea (the subnet of the access port's
     link-address); xbngd creates each subscriber from its REPLY.
  The ratio B6/A6 of leases/s is printed.

    PYTHONPATH=tests /usr/bin/python3 bench/relay.py --clients 2000 [--rate 1000] [--family 6]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import time

from xbnglab.kea import Kea4, Kea6
from xbnglab.xbngd import GW4, XbngLab, find_bin


def unique_leases(kea: Kea4, prefix: str) -> int:
    return len({ln["address"] for ln in kea.leases()
                if ln.get("address", "").startswith(prefix) and ln.get("valid_lifetime") != "0"})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=2000)
    ap.add_argument("--rate", type=int, default=1000, help="perfdhcp exchanges started per second")
    ap.add_argument("--window", type=int, default=512, help="CPEs in progress at once (phase B)")
    ap.add_argument("--family", type=int, choices=(4, 6), default=4)
    a = ap.parse_args()
    if a.family == 6:
        return main6(a)
    n = a.clients
    with XbngLab(kind="xbngrelay") as x:
        # Two pools: perfdhcp's clients (A) and the CPEs (B), counted apart.
        kea = Kea4(x.lab, x.net, "kea", 0, [{
            "id": 1, "subnet": "100.64.0.0/10",
            "pools": [{"pool": "100.65.0.0 - 100.65.255.255"},
                      {"pool": "100.66.0.0 - 100.66.255.255"}]}], valid_lifetime=3600)
        kea.start()
        conf = os.path.join(x.lab.rundir, "relay.toml")
        with open(conf, "w") as f:
            f.write('[ports]\naccess = [{ name = "acc0", dhcp = "relay" }]\n'
                    f'[relay]\nservers_v4 = ["{kea.address}"]\n'
                    "[punt]\nsubscriber_rate = 100\nsubscriber_burst = 100\n")
        x.start(max_subscribers=max(4096, 2 * n), extra=["--config", conf])
        x.resolve_uplink_neighbours()

        # A: straight to Kea (the first pool by a client-class-free subnet:
        # perfdhcp's range is what Kea hands out first).
        link_sel = "".join(f"{int(o):02x}" for o in GW4.split("."))
        secs = max(5, n // max(a.rate, 1) + 5)
        print(f"## A: perfdhcp straight to Kea {kea.address}: {n} clients at {a.rate}/s", flush=True)
        before = unique_leases(kea, "100.6")
        t0 = time.monotonic()
        r = subprocess.run(x.net.nsenter_argv(
            ["perfdhcp", "-4", "-r", str(a.rate), "-R", str(n), "-n", str(n), "-p", str(secs),
             "-o", f"82,0504{link_sel}", kea.address]), capture_output=True, text=True)
        dt_a = time.monotonic() - t0
        got_a = unique_leases(kea, "100.6") - before
        print("\n".join(ln for ln in r.stdout.splitlines()
                        if any(k in ln for k in ("sent", "received", "drops", "delay", "rate"))))
        print(f"  Kea's lease file: {got_a} leases in {dt_a:.1f} s of perfdhcp "
              f"({got_a / dt_a:.0f} leases/s over the whole run)", flush=True)

        # B: through xbngd's relay.
        print(f"## B: {n} QinQ CPEs through xbngd's relay (window {a.window})", flush=True)
        before = unique_leases(kea, "100.6")
        gen = find_bin("xbng_bench_bringup")
        t0 = time.monotonic()
        subprocess.run([gen, "--v4-only", "-n", str(n), "--window", str(a.window), "--netns",
                        x.sub.name, "--iface", "s0", "--pid", str(x.daemon.pid),
                        "--timeout", "30"], check=False)
        dt_b = time.monotonic() - t0
        got_b = unique_leases(kea, "100.6") - before
        subs = x.ctl("stats")
        created = {r["reason"]: int(r.get("packets", 0)) for r in subs.get("reasons", [])}
        print(f"  Kea's lease file: {got_b} leases; xbngd: relay4_bound "
              f"{created.get('relay4_bound', 0)}, relay4_ack_refused "
              f"{created.get('relay4_ack_refused', 0)}, relay4_forwarded "
              f"{created.get('relay4_forwarded', 0)} ({dt_b:.1f} s with the generator's start)")
        drops = {k: v for k, v in created.items()
                 if v and any(t in k for t in ("punt", "relay4", "drop_", "rate"))}
        print(f"  xbngd counters: {drops}")
        kea.stop()
    return 0


def unique_leases6(kea: Kea6, prefix: str) -> int:
    """IA_NA leases (lease_type 0) under prefix, live."""
    return len({ln["address"] for ln in kea.leases()
                if ln.get("address", "").startswith(prefix) and ln.get("lease_type") == "0"
                and ln.get("valid_lifetime") != "0"})


def main6(a) -> int:
    n = a.clients
    with XbngLab(kind="xbngrelay6") as x:
        # Two subnets: the relay's (link-address = the access gateway) for
        # the CPEs (B6), net's link toward Kea for perfdhcp (A6).
        kea = Kea6(x.lab, x.net, "kea6", 0, [
            {"id": 1, "subnet": "2001:db8:1000::/48",
             "pools": [{"pool": "2001:db8:1000:1::/80"}],
             "pd-pools": [{"prefix": "2001:db8:2000::", "prefix-len": 36, "delegated-len": 56}]},
            {"id": 2, "subnet": "2001:db8:ffff:60::/64",
             "pools": [{"pool": "2001:db8:ffff:60:1::/80"}],
             "pd-pools": [{"prefix": "2001:db8:3000::", "prefix-len": 36, "delegated-len": 56}]},
        ], valid_lifetime=3600)
        kea.start()
        conf = os.path.join(x.lab.rundir, "relay.toml")
        with open(conf, "w") as f:
            f.write('[ports]\naccess = [{ name = "acc0", dhcp = "relay" }]\n'
                    f'[relay]\nservers_v4 = ["198.51.100.67"]\nservers_v6 = ["{kea.address}"]\n'
                    "[punt]\nsubscriber_rate = 100\nsubscriber_burst = 100\n")
        x.start(max_subscribers=max(4096, 2 * n), extra=["--config", conf])
        x.resolve_uplink_neighbours()

        secs = max(5, n // max(a.rate, 1) + 5)
        print(f"## A6: perfdhcp -6 straight to Kea {kea.address}: {n} clients at {a.rate}/s",
              flush=True)
        before = unique_leases6(kea, "2001:db8:ffff:60:")
        t0 = time.monotonic()
        r = subprocess.run(x.net.nsenter_argv(
            ["perfdhcp", "-6", "-A1", "-e", "address-and-prefix", "-r", str(a.rate),
             "-R", str(n), "-n", str(n), "-p", str(secs), kea.address]),
            capture_output=True, text=True)
        dt_a = time.monotonic() - t0
        got_a = unique_leases6(kea, "2001:db8:ffff:60:") - before
        print("\n".join(ln for ln in (r.stdout + r.stderr).splitlines()
                        if any(k in ln for k in ("sent", "received", "drops", "delay", "rate",
                                                 "rror"))))
        print(f"  Kea's lease file: {got_a} leases in {dt_a:.1f} s of perfdhcp "
              f"({got_a / dt_a:.0f} leases/s over the whole run)", flush=True)

        print(f"## B6: {n} QinQ CPEs through xbngd's DHCPv6 relay (window {a.window})", flush=True)
        before = unique_leases6(kea, "2001:db8:1000:")
        gen = find_bin("xbng_bench_bringup")
        t0 = time.monotonic()
        subprocess.run([gen, "--v6-only", "--no-rapid-commit", "-n", str(n), "--window",
                        str(a.window), "--netns", x.sub.name, "--iface", "s0", "--pid",
                        str(x.daemon.pid), "--timeout", "30"], check=False)
        dt_b = time.monotonic() - t0
        got_b = unique_leases6(kea, "2001:db8:1000:") - before
        st = {r["reason"]: int(r.get("packets", 0)) for r in x.ctl("stats").get("reasons", [])}
        print(f"  Kea's lease file: {got_b} leases; xbngd: relay6_bound {st.get('relay6_bound', 0)}, "
              f"relay6_reply_refused {st.get('relay6_reply_refused', 0)}, relay6_forwarded "
              f"{st.get('relay6_forwarded', 0)} ({dt_b:.1f} s with the generator's start)")
        drops = {k: v for k, v in st.items()
                 if v and any(t in k for t in ("punt", "relay6", "drop_", "rate"))}
        print(f"  xbngd counters: {drops}")
        if got_a and dt_a > 0 and dt_b > 0:
            print(f"## relayed / straight (leases/s over each whole phase): "
                  f"{(got_b / dt_b) / (got_a / dt_a):.2f}")
        kea.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
