"""Bring-up hardening, end to end with the real xbngd:
  - a lease belongs to one subscriber: deleting the subscriber ends its
    leases (LEASE_RELEASED on WatchEvents, gone from the lease file), a new
    subscriber on the same key starts without any, an upsert that takes an
    address away ends the lease of that address, and at start the leases of
    subscribers that no longer exist are dropped (and logged);
  - the per-subscriber punt budget is per protocol: with every CPE flooding
    DHCPv4 DISCOVERs (the bench generator, bench/bringup.cpp), the CPEs'
    IPv6 sessions (DHCPv6 + RS/RA) still come up."""
import json
import os
import signal
import subprocess
import time
import unittest

from xbnglab.fixture import BringupSuite
from xbnglab.lab import wait_for
from xbnglab.xbngd import XbngLab, bench_plan, find_bin, write_jsonl


CONFIG = """
[dhcp]
lease_time = 600

[dhcpv6]
preferred_lifetime = 600
valid_lifetime = 1200
t1 = 300
t2 = 480
"""

# The tracker's example: key 100/31, its CPE's MAC as the tag emulator wants it.
OLD = {"port": "acc0", "outer_vlan": 100, "inner_vlan": 31, "mac": "02:cc:00:64:00:1f",
       "ipv4": "100.64.1.31", "ipv6": "2001:db8:ff00::1:31"}
NEW = {"port": "acc0", "outer_vlan": 100, "inner_vlan": 31, "mac": "02:00:00:00:99:31",
       "ipv4": "100.64.1.231"}


def key_args(s):
    return ["--port", s["port"], "--outer", str(s["outer_vlan"]), "--inner", str(s["inner_vlan"])]


class Watch:
    """`xbngctl --json events` in the background; events() stops it and parses."""

    def __init__(self, x):
        self.p = subprocess.Popen([x.xbngctl, "--server", x.grpc, "--json", "events"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # the stream is open before anything happens

    def events(self, key):
        time.sleep(0.5)
        self.p.terminate()
        out, _ = self.p.communicate(timeout=10)
        evs = [json.loads(l) for l in out.splitlines() if l.strip()]
        return [e for e in evs if int(e.get("key", {}).get("outer_vlan", 0)) == key["outer_vlan"]
                and int(e.get("key", {}).get("inner_vlan", 0)) == key["inner_vlan"]]


class LeaseOwnershipTest(BringupSuite):
    DHCP_TOML = CONFIG

    def bind_both(self, s):
        """dhclient -4 and dhclient -6 -N on s's CPE until xbngd holds both leases; the
        clients are then stopped without releasing (the CPE simply goes away)."""
        b = self.b
        ns = b.cpe(s)
        c4, _ = b.dhclient(ns)
        # dhclient -6 binds to the link-local address: once the kernel's RS got its RA.
        wait_for(lambda: b.default_via(ns, "-6") == "fe80::1", 30, 0.3, "IPv6 default route via fe80::1")
        b.wait_dad(ns)
        c6, _ = b.dhclient(ns, v6=True, extra=["-N"])
        wait_for(lambda: b.lease(s).get("bound") and b.lease(s, "v6").get("bound"), 40, 0.3,
                 f"v4 and v6 leases of {s['outer_vlan']}/{s['inner_vlan']} in xbngd")
        self.assertEqual(b.lease(s)["address"], s["ipv4"])
        self.assertEqual(b.lease(s, "v6")["address"], s["ipv6"])
        for c in (c4, c6):
            b.x.lab.stop(c, signal.SIGKILL, timeout=5)  # SIGKILL: no RELEASE is sent
        return ns

    def assert_no_lease(self, s, what):
        got = self.b.x.ctl("sub", "get", *key_args(s))["subscriber"]
        for fam in ("lease_v4", "lease_v6"):
            lease = got.get(fam, {})
            self.assertFalse(lease.get("bound"), f"{what}: {fam} {lease}")
            self.assertNotIn(lease.get("address"), (OLD["ipv4"], OLD["ipv6"]), f"{what}: {fam} {lease}")

    def test_1_delete_then_other_subscriber_on_the_key(self):
        b = self.b
        out, _ = b.x.import_subs([OLD])
        self.assertEqual(int(out["applied"]), 1, out)
        self.bind_both(OLD)
        w = Watch(b.x)
        b.x.ctl("sub", "del", *key_args(OLD))
        out, _ = b.x.import_subs([NEW])
        self.assertEqual(int(out["applied"]), 1, out)
        self.assert_no_lease(NEW, "after delete + upsert")
        evs = w.events(OLD)
        released = sorted(e.get("lease_family") for e in evs if e["type"] == "LEASE_RELEASED")
        self.assertEqual(released, ["ipv4", "ipv6"], evs)
        # Persisted: the lease file does not bring them back.
        b.restart()
        self.assert_no_lease(NEW, "after delete + upsert + restart")

    def test_2_upsert_that_takes_an_address_away(self):
        b = self.b
        s = {"port": "acc0", "outer_vlan": 100, "inner_vlan": 32, "mac": "02:cc:00:64:00:20",
             "ipv4": "100.64.1.32", "ipv6": "2001:db8:ff00::1:32"}
        out, _ = b.x.import_subs([s])
        self.assertEqual(int(out["applied"]), 1, out)
        self.bind_both(s)
        w = Watch(b.x)
        moved = dict(s, ipv4="100.64.1.232")  # same subscriber, another IPv4, same IPv6
        out, _ = b.x.import_subs([moved])
        self.assertEqual(int(out["applied"]), 1, out)
        self.assertFalse(b.lease(moved).get("bound"), b.lease(moved))
        self.assertTrue(b.lease(moved, "v6").get("bound"), b.lease(moved, "v6"))
        evs = w.events(s)
        self.assertEqual([e.get("lease_family") for e in evs if e["type"] == "LEASE_RELEASED"],
                         ["ipv4"], evs)

    def test_3_start_drops_leases_of_subscribers_gone(self):
        b = self.b
        s = {"port": "acc0", "outer_vlan": 100, "inner_vlan": 33, "mac": "02:cc:00:64:00:21",
             "ipv4": "100.64.1.33", "ipv6": "2001:db8:ff00::1:33"}
        out, _ = b.x.import_subs([s])
        self.assertEqual(int(out["applied"]), 1, out)
        self.bind_both(s)
        # xbngd stops with the lease in its file; the maps are torn down (every
        # subscriber gone), then it starts again on the same lease file.
        self.assertEqual(b.x.stop(signal.SIGTERM), 0, b.x.read_log())
        with open(b.lease_file) as f:
            self.assertIn(s["ipv4"], f.read())
        b.x.teardown_dataplane()
        b.start()
        log = b.x.read_log()
        self.assertIn(f"dropped the ipv4 lease {s['ipv4']}", log, log[-3000:])
        self.assertIn(f"dropped the ipv6 lease {s['ipv6']}", log, log[-3000:])
        out, _ = b.x.import_subs([dict(s, mac="02:00:00:00:99:33")])
        self.assertEqual(int(out["applied"]), 1, out)
        got = b.x.ctl("sub", "get", *key_args(s))["subscriber"]
        self.assertFalse(got.get("lease_v4", {}).get("bound"), got)
        self.assertFalse(got.get("lease_v6", {}).get("bound"), got)


class PuntFairnessTest(unittest.TestCase):
    """Every CPE floods DHCPv4 at ~10x its punt budget while the generator brings up
    DHCPv4 + DHCPv6 + RS/RA sessions: the IPv6 half still binds."""

    N = 300
    FLOOD_PPS = 30000  # 100 DISCOVERs/s per CPE: 10x the default 10/s budget

    def test_ipv6_binds_under_a_dhcpv4_flood(self):
        gen = find_bin("xbng_bench_bringup")
        with XbngLab(kind="xbngt") as x:
            x.start(max_subscribers=4096)
            path = os.path.join(x.lab.rundir, "storm.jsonl")
            write_jsonl(path, (bench_plan(i) for i in range(self.N)))
            out = x.ctl("sub", "import", path)
            self.assertEqual(int(out["applied"]), self.N, out)
            x.resolve_uplink_neighbours()
            res = os.path.join(x.lab.rundir, "storm.json")
            r = subprocess.run([gen, "-n", str(self.N), "--window", str(self.N), "--netns", x.sub.name,
                                "--iface", "s0", "--pid", str(x.daemon.pid), "--timeout", "20",
                                "--flood-dhcpv4", str(self.FLOOD_PPS), "--flood-lead", "2",
                                "--json", res], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(res) as f:
                got = json.load(f)["results"]
            st = x.stats()
            report = (f"{r.stdout}\nflood sent {got.get('flood_sent')}; xbngd: "
                      + ", ".join(f"{k}={st.get(k, 0)}" for k in (
                          "punt_dhcpv4", "punt_dhcpv6", "punt_router_solicitation",
                          "drop_punt_rate_subscriber", "drop_punt_rate_port", "drop_punt_ring_full")))
            # The flood really ran over the budget ...
            self.assertGreater(int(got["flood_sent"]), self.FLOOD_PPS * 5, report)
            self.assertGreater(st.get("drop_punt_rate_subscriber", 0), self.FLOOD_PPS * 3, report)
            # ... and IPv6 came up for (nearly) every CPE.
            self.assertGreaterEqual(int(got["bound_v6"]), int(self.N * 0.95), report)
            self.assertEqual(int(got["wrong_bindings"]), 0, report)


if __name__ == "__main__":
    unittest.main()
