"""Fleet mode (docs/fleet.md): two xbngd nodes driven from a real 3-member etcd
cluster. 60K subscribers split across the nodes, each converging to exactly
its own set (gRPC listing and the pinned map); updates and deletes; faults:
an etcd member killed mid-load, xbngd SIGKILLed while keys change, a watch
forced past a compaction, a node's prefix deleted; bad values refused and
listed in the status while the rest applies; gRPC writes refused.

The tests run in order and share the cluster and the nodes (setUpClass)."""
import json
import os
import signal
import sys
import time
import unittest

from xbnglab.etcd import FleetNode, import_to_etcd
from xbnglab.fixture import LabSuite
from xbnglab.lab import wait_for
from xbnglab.xbngd import find_pass_obj, plan

N = 60_000
HALF = N // 2
C_PER_S = 3_000


def key_of(s):
    return (s["port"], s["outer_vlan"], s["inner_vlan"])


def etcd_key(node, s):
    return f"/xbng/v1/nodes/{node}/subscribers/{s['port']}/{s['outer_vlan']}/{s['inner_vlan']}"


class FleetTest(LabSuite):
    @classmethod
    def setUpLab(cls):
        lab = cls.x.lab  # owns every namespace, process and pin below
        cls.start_etcd(members=3)
        obj = find_pass_obj()
        cls.n1 = FleetNode(lab, 1, cls.etcd_ns, cls.peer, obj)
        cls.n2 = FleetNode(lab, 2, cls.etcd_ns, cls.peer, obj)
        # n1 from a config file ([etcd] section, a short status lease),
        # member 2 first (the one killed mid-load); n2 reaches member 1 only.
        cls.n1_conf = os.path.join(lab.rundir, "n1.toml")
        with open(cls.n1_conf, "w") as f:
            f.write('[etcd]\nendpoints = [%s]\nnode = "n1"\nstatus_ttl = 3\n' %
                    ", ".join(f'"{cls.n1.etcd_host}:{p}"' for p in (22379, 2379, 12379)))
        cls.n1.start(config=cls.n1_conf)
        cls.n2.start(members=(1,))
        cls.want = {"n1": {key_of(s): s for s in (plan(i, C_PER_S) for i in range(HALF))},
                    "n2": {key_of(s): s for s in (plan(i, C_PER_S) for i in range(HALF, N))}}

    # -- helpers ------------------------------------------------------------------
    def node(self, name):
        return self.n1 if name == "n1" else self.n2

    def status(self, name):
        v = self.cluster.get(f"/xbng/v1/status/{name}")
        return json.loads(v) if v else None

    def wait_applied(self, name, rev=None, timeout=60):
        rev = rev or self.cluster.revision()

        def ok():
            st = self.status(name)
            return st and st["synced"] and st["revision"] >= rev and st
        return wait_for(ok, timeout, 0.2, f"{name} to apply revision {rev}")

    def assert_converged(self, name, pinned=True):
        n = self.node(name)
        want = set(self.want[name])
        listed = n.listed()
        self.assertEqual(len(listed), len(want))
        self.assertEqual(set(listed), want)
        for k in list(want)[:: max(1, len(want) // 200)]:  # spot-check values
            self.assertEqual(listed[k]["ipv4"], self.want[name][k]["ipv4"], k)
        if pinned:
            self.assertEqual(n.pinned_keys(), want)

    def put_subs(self, name, subs):
        # etcdctl txn is bounded by --max-txn-ops (128): one put per call is
        # too slow, so use batches through the interactive txn syntax.
        rev = 0
        subs = list(subs)
        for i in range(0, len(subs), 100):
            ops = "".join(f"put {etcd_key(name, s)} {json.dumps(json.dumps(s))}\n" for s in subs[i:i + 100])
            r = self.cluster.ctl("txn", "-w", "json", input=f"\n{ops}\n\n")
            rev = int(json.loads(r.stdout)["header"]["revision"])
        return rev

    def del_subs(self, name, subs):
        subs = list(subs)
        for i in range(0, len(subs), 100):
            ops = "".join(f"del {etcd_key(name, s)}\n" for s in subs[i:i + 100])
            self.cluster.ctl("txn", input=f"\n{ops}\n\n")

    # -- scenarios ------------------------------------------------------------------
    def test_1_split_60k_member_killed_mid_load(self):
        path1 = os.path.join(self.x.lab.rundir, "n1.jsonl")
        path2 = os.path.join(self.x.lab.rundir, "n2.jsonl")
        t0 = time.monotonic()
        p = import_to_etcd(self.cluster, "n1", self.want["n1"].values(), path1,
                           members=(2, 0, 1), background=True)
        time.sleep(0.7)
        self.cluster.kill_member(2)  # n1's first endpoint and the import's
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        r = import_to_etcd(self.cluster, "n2", self.want["n2"].values(), path2, members=(0, 1))
        self.assertEqual(r.returncode, 0, r.stderr)
        print(f"\nwrote {N} subscribers into etcd in {time.monotonic() - t0:.1f} s (member m2 "
              f"killed during the first half): {err.strip().splitlines()[0]}", file=sys.stderr)
        st1, st2 = self.wait_applied("n1"), self.wait_applied("n2")
        print(f"converged {time.monotonic() - t0:.1f} s after the first put", file=sys.stderr)
        self.assertEqual((st1["subscribers"], st2["subscribers"]), (HALF, HALF))
        self.assertEqual((st1["refused_count"], st2["refused_count"]), (0, 0))
        self.assert_converged("n1")
        self.assert_converged("n2")
        self.cluster.start_member(2, existing=True)
        self.cluster.wait_healthy()

    def test_2_grpc_writes_refused_reads_work(self):
        r = self.n1.ctl_raw("sub", "add", "--port", "acc0", "--outer", "99", "--inner", "1",
                            "--ipv4", "100.127.0.1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("is in fleet mode", r.stderr)
        self.assertIn("etcd", r.stderr)
        s = self.n1.ctl("sub", "get", "--port", "acc0", "--outer", "100", "--inner", "1")
        self.assertEqual(s["subscriber"]["ipv4"], plan(0, C_PER_S)["ipv4"])
        self.assertEqual(int(self.n1.ctl("stats")["subscribers"]), HALF)

    def test_3_updates_and_deletes(self):
        subs = [dict(plan(i, C_PER_S)) for i in range(10)]
        for s in subs:
            s["ipv4"] = f"100.127.0.{10 + subs.index(s)}"
        self.put_subs("n1", subs)
        for s in subs:
            self.want["n1"][key_of(s)] = s
        gone = [plan(i, C_PER_S) for i in range(100, 150)]
        for s in gone:
            self.cluster.delete(etcd_key("n1", s))
            del self.want["n1"][key_of(s)]
        rev = self.cluster.put(etcd_key("n1", plan(200, C_PER_S)),
                               json.dumps({**plan(200, C_PER_S), "mac": "02:aa:00:00:00:01"}))
        self.want["n1"][key_of(plan(200, C_PER_S))]["mac"] = "02:aa:00:00:00:01"
        self.wait_applied("n1", rev)
        self.assert_converged("n1", pinned=False)
        s = self.n1.ctl("sub", "get", "--port", "acc0", "--outer", "100", "--inner", "201")
        self.assertEqual(s["subscriber"]["mac"], "02:aa:00:00:00:01")

    def test_4_bad_values_refused_and_listed(self):
        base = "/xbng/v1/nodes/n1/subscribers/acc0"
        good = plan(HALF + 7000, C_PER_S)  # a fresh VLAN pair, addresses of n2's range
        good = {**good, "outer_vlan": 999, "inner_vlan": 1}
        self.cluster.put(f"{base}/999/2", "{not json")
        self.cluster.put(f"{base}/999/3", json.dumps({**good, "inner_vlan": 4}))
        self.cluster.put(f"{base}/999/5", json.dumps({**good, "inner_vlan": 5, "ipv4": "300.1.1.1"}))
        self.cluster.put(f"{base}/0999/6", json.dumps({**good, "inner_vlan": 6}))
        rev = self.cluster.put(f"{base}/999/1", json.dumps(good))
        st = self.wait_applied("n1", rev)
        refused = {r["key"]: r["reason"] for r in st["refused"]}
        self.assertEqual(st["refused_count"], 4, refused)
        self.assertIn("JSON", refused[f"{base}/999/2"])
        self.assertIn("but the key says", refused[f"{base}/999/3"])
        self.assertIn("ipv4", refused[f"{base}/999/5"])
        self.assertIn("leading zero", refused[f"{base}/0999/6"])
        self.want["n1"][key_of(good)] = good
        self.assert_converged("n1", pinned=False)
        # Fixing or deleting a refused key clears it.
        self.cluster.delete(f"{base}/999/2")
        self.cluster.delete(f"{base}/0999/6")
        self.cluster.delete(f"{base}/999/3")
        rev = self.cluster.delete(f"{base}/999/5")
        st = self.wait_applied("n1", rev)
        self.assertEqual(st["refused_count"], 0, st["refused"])
        self.assertEqual(self.n1.metrics()["xbng_fleet_refused_keys"], 0)

    def test_5_sigkill_while_keys_change_then_restart(self):
        boot = self.status("n1")["boot_id"]
        self.n1.kill(signal.SIGKILL)
        # The status lease (3 s) expires with the node.
        wait_for(lambda: self.status("n1") is None, 15, 0.2, "n1's status to expire")
        gone = [plan(i, C_PER_S) for i in range(1000, 2000)]
        for s in gone:
            del self.want["n1"][key_of(s)]
        self.del_subs("n1", gone)
        upd = [{**plan(i, C_PER_S), "mac": "02:bb:00:00:%02x:%02x" % (i >> 8 & 255, i & 255)}
               for i in range(3000, 3100)]
        new = [{**plan(i, C_PER_S), "outer_vlan": 998} for i in range(HALF + 8000, HALF + 8500)]
        self.put_subs("n1", upd + new)
        for s in upd + new:
            self.want["n1"][key_of(s)] = s
        self.n1.start(config=self.n1_conf)
        st = self.wait_applied("n1")
        self.assertNotEqual(st["boot_id"], boot)
        self.assertIn("adopt", self.n1.read_log())
        self.assert_converged("n1")

    def test_6_watch_past_compaction_recovers(self):
        before = self.status("n2")["etcd"]["compactions"]
        self.cluster.kill_member(1)  # n2's only endpoint
        self.cluster.wait_healthy()
        gone = [plan(i, C_PER_S) for i in range(HALF, HALF + 500)]
        for s in gone:
            del self.want["n2"][key_of(s)]
        self.del_subs("n2", gone)
        new = [{**plan(i, C_PER_S), "outer_vlan": 997} for i in range(N + 1000, N + 1300)]
        self.put_subs("n2", new)
        for s in new:
            self.want["n2"][key_of(s)] = s
        # n2 shows the outage in its metrics while it retries.
        wait_for(lambda: self.n2.metrics()["xbng_fleet_etcd_up"] == 0, 30, 0.2, "n2 etcd_up 0")
        self.assertEqual(len(self.n2.listed_keys()), HALF)  # the last applied state stays
        self.cluster.compact(self.cluster.revision())
        self.cluster.start_member(1, existing=True)
        self.cluster.wait_healthy()
        st = self.wait_applied("n2", timeout=90)
        self.assertGreater(st["etcd"]["compactions"], before)
        self.assertGreaterEqual(st["etcd"]["outages"], 1)
        self.assert_converged("n2")
        self.assertEqual(self.n2.metrics()["xbng_fleet_etcd_up"], 1)

    def test_7_prefix_deleted_maps_empty(self):
        rev = self.cluster.delete("/xbng/v1/nodes/n2/", prefix=True)
        st = self.wait_applied("n2", rev)
        self.assertEqual(st["subscribers"], 0)
        self.want["n2"] = {}
        self.assert_converged("n2")
        self.assertEqual(self.status("n1")["subscribers"], len(self.want["n1"]))


if __name__ == "__main__":
    unittest.main()
