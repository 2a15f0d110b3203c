"""Fleet mode against a real single-member etcd: bytes that are not UTF-8 in
keys and values are refused and listed escaped (the node stays up, across a
restart too); the refused count is exact past the store's report limit (2,000
refused keys, then deleted: 0); etcd wiped and restored (the same cluster
token, so the same cluster id: a revision that went backwards, and a new
history that already overtook the old revision) or replaced by another
cluster: the node reads everything again, converges to exactly the new keys
and logs why.

The tests run in order and share one etcd and one node (setUpClass)."""
import json
import os
import shutil
import signal
import subprocess
import time
import unittest

from xbnglab.etcd import ETCDCTL, FleetNode
from xbnglab.fixture import LabSuite
from xbnglab.lab import wait_for
from xbnglab.xbngd import find_pass_obj, plan

NODE = "n1"
PREFIX = f"/xbng/v1/nodes/{NODE}/subscribers/"


def etcd_key(s):
    return f"{PREFIX}{s['port']}/{s['outer_vlan']}/{s['inner_vlan']}"


class FleetHardeningTest(LabSuite):
    @classmethod
    def setUpLab(cls):
        cls.start_etcd(members=1)
        cls.n = FleetNode(cls.x.lab, 1, cls.etcd_ns, cls.peer, find_pass_obj())
        cls.n.start(members=(0,))

    # -- helpers ------------------------------------------------------------------
    def status(self):
        v = self.cluster.get(f"/xbng/v1/status/{NODE}")
        return json.loads(v) if v else None

    def wait_status(self, pred, what, timeout=30):
        last = []

        def ok():
            self.assert_alive()
            st = self.status()
            last[:] = [st]
            return st and pred(st) and st
        try:
            return wait_for(ok, timeout, 0.2, what)
        except TimeoutError as e:
            st = dict(last[0] or {})
            st["refused"] = st.get("refused", [])[:3]
            raise AssertionError(f"{e}; last status {st}; metrics {self.n.metrics()}; log:\n{self.n.read_log()[-2000:]}")

    def assert_alive(self):
        rc = self.n.daemon.poll()
        if rc is not None:
            raise AssertionError(f"xbngd exited {rc}:\n{self.n.read_log()[-3000:]}")

    def put_raw(self, key: bytes, value: bytes) -> None:
        """etcdctl put with arbitrary bytes (argv carries them unchanged)."""
        argv = self.etcd_ns.nsenter_argv([ETCDCTL, "--endpoints", self.cluster.endpoints()])
        r = subprocess.run(argv + ["put", key, value], capture_output=True, timeout=30,
                           env={**os.environ, "ETCDCTL_API": "3"})
        self.assertEqual(r.returncode, 0, r.stderr)

    def txn(self, ops: list[str]) -> int:
        rev = 0
        for i in range(0, len(ops), 100):
            r = self.cluster.ctl("txn", "-w", "json", input="\n" + "".join(ops[i:i + 100]) + "\n\n")
            rev = int(json.loads(r.stdout)["header"]["revision"])
        return rev

    def put_subs(self, subs) -> int:
        return self.txn([f"put {etcd_key(s)} {json.dumps(json.dumps(s))}\n" for s in subs])

    def del_subs(self, subs) -> int:
        return self.txn([f"del {etcd_key(s)}\n" for s in subs])

    def restart_node(self):
        self.n.kill(signal.SIGTERM)
        self.n.start(members=(0,))

    # -- scenarios ------------------------------------------------------------------
    def test_1_invalid_utf8_key_and_value(self):
        good = plan(0, port="acc0")
        self.put_subs([good])
        bad_value = (b'{"port":"acc0","outerVlan":102,"innerVlan":1,"ipv4":"100.64.4.1",'
                     b'"mac":"\xff\xfe\xfd"}')
        self.put_raw(PREFIX.encode() + b"acc0/102/1", bad_value)
        self.put_raw(PREFIX.encode() + b"acc0/102/2\xff", json.dumps(plan(5)).encode())
        # A key whose port is not UTF-8 (its value can never match it).
        self.put_raw(PREFIX.encode() + b"acc\xc3(/103/1", b"{}")
        want_keys = {PREFIX + "acc0/102/1", PREFIX + "acc0/102/2\\xff", PREFIX + "acc\\xc3(/103/1"}

        def listed(st):
            return {r["key"]: r["reason"] for r in st["refused"]}
        st = self.wait_status(lambda st: st["refused_count"] == 3 and st["synced"],
                              "the 3 keys that are not UTF-8 to be refused")
        self.assertEqual(set(listed(st)), want_keys, st)
        self.assertIn("not valid UTF-8", listed(st)[PREFIX + "acc0/102/1"])
        self.assertIn("\\xff", listed(st)[PREFIX + "acc0/102/1"])
        self.assertIn("not valid UTF-8", listed(st)[PREFIX + "acc0/102/2\\xff"])
        self.assertEqual(self.n.listed_keys(), {("acc0", good["outer_vlan"], good["inner_vlan"])})
        # The full read of a restart refuses them the same way, and stays up.
        self.restart_node()
        st = self.wait_status(lambda st: st["refused_count"] == 3 and st["synced"],
                              "the restarted node to refuse the same 3 keys")
        self.assertEqual(set(listed(st)), want_keys, st)
        time.sleep(1.5)  # the crash came ~0.6 s after the full read
        self.assert_alive()
        self.assertEqual(self.n.listed_keys(), {("acc0", good["outer_vlan"], good["inner_vlan"])})
        # Deleted, they are no longer refused.
        self.cluster.delete(PREFIX + "acc0/102/1")
        argv = self.etcd_ns.nsenter_argv([ETCDCTL, "--endpoints", self.cluster.endpoints()])
        for k in (PREFIX.encode() + b"acc0/102/2\xff", PREFIX.encode() + b"acc\xc3(/103/1"):
            subprocess.run(argv + ["del", k], check=True, capture_output=True, timeout=30,
                           env={**os.environ, "ETCDCTL_API": "3"})
        self.wait_status(lambda st: st["refused_count"] == 0 and st["refused"] == [],
                         "no refusals once the keys are deleted")
        self.cluster.delete(PREFIX, prefix=True)
        self.wait_status(lambda st: st["subscribers"] == 0, "the prefix emptied")

    def test_2_refused_count_exact_past_the_report_limit(self):
        # 2,000 keys on a port that is not an access port: refused by the store.
        subs = [plan(i, port="nope0") for i in range(2000)]
        self.put_subs(subs)
        self.wait_status(lambda st: st["refused_count"] == 2000, "2,000 refusals (watch)")
        # A full read refuses them in one store call (past its 1,000 report limit).
        self.restart_node()
        st = self.wait_status(lambda st: st["refused_count"] == 2000,
                              "2,000 refusals after the full read")
        self.assertEqual(len(st["refused"]), 100)  # the listing is bounded
        self.assertIn("nope0", st["refused"][0]["reason"])
        self.del_subs(subs)
        st = self.wait_status(lambda st: st["refused_count"] == 0,
                              "refused_count back to 0 once the keys are deleted")
        self.assertEqual(st["refused"], [])
        self.assertEqual(self.n.metrics()["xbng_fleet_refused_keys"], 0)

    def wipe_and_restart_etcd(self, token: str | None = None):
        self.cluster.kill_member(0)  # by PID (the lab's process)
        shutil.rmtree(os.path.join(self.cluster.dir, "m0"))
        if token:
            self.cluster.token = token
        self.cluster.start_member(0)
        self.cluster.wait_healthy()

    def converge_after_wipe(self, old_count, new, reason, stop_node=False, token=None):
        """The node synced with `old_count` keys; etcd is wiped and gets `new`:
        the node must hold exactly `new`, say synced at etcd's revision, and
        log why."""
        old_rev = self.cluster.revision()
        self.wait_status(lambda st: st["synced"] and st["revision"] >= old_rev and
                         st["subscribers"] == old_count, f"the node to sync {old_count} keys")
        log_before = len(self.n.read_log())
        if stop_node:  # the node sees nothing until the new history overtook the old one
            os.kill(self.n.daemon.pid, signal.SIGSTOP)
        try:
            self.wipe_and_restart_etcd(token)
            if stop_node:
                new_rev = 0
                for s in new:  # one revision each: the new history overtakes the old
                    new_rev = self.cluster.put(etcd_key(s), json.dumps(s))
                while new_rev <= old_rev + 5:
                    new_rev = self.cluster.put("/xbng-pad", str(new_rev))
                self.assertGreater(new_rev, old_rev)
            else:
                new_rev = self.put_subs(new)
                self.assertLess(new_rev, old_rev)
        finally:
            if stop_node:
                os.kill(self.n.daemon.pid, signal.SIGCONT)
        t0 = time.monotonic()
        want = {(s["port"], s["outer_vlan"], s["inner_vlan"]) for s in new}
        wait_for(lambda: self.assert_alive() or self.n.listed_keys() == want, 30, 0.2,
                 f"the node to hold exactly the {len(new)} new keys")
        st = self.wait_status(lambda st: st["synced"] and st["revision"] >= new_rev,
                              "the status to say synced at the new revision")
        print(f"\nconverged to the {len(new)} new keys {time.monotonic() - t0:.1f} s after the "
              f"writes (old revision {old_rev}, new {new_rev})")
        self.assertEqual(st["subscribers"], len(new))
        self.assertEqual(self.n.pinned_keys(), want)
        log = self.n.read_log()[log_before:]
        self.assertIn(reason, log)
        self.assertIn("reading everything again", log)
        return st

    def test_3_wiped_etcd_revision_went_backwards(self):
        # ~98K subscribers in the report; a few thousand here, over 46+ revisions.
        old = [plan(i) for i in range(3000)]
        for i in range(0, 3000, 60):
            self.put_subs(old[i:i + 60])  # 50 revisions
        new = [plan(10_000 + i) for i in range(60)]
        self.converge_after_wipe(len(old), new, "went backwards")
        self.del_subs(new)

    def test_4_wiped_etcd_overtook_old_revision(self):
        # The node sees the new etcd only after its revision passed the old one.
        old = [plan(20_000 + i) for i in range(500)]
        new = [plan(30_000 + i) for i in range(60)]
        self.put_subs(old)
        self.converge_after_wipe(len(old), new, "history changed", stop_node=True)
        self.del_subs(new)

    def test_5_other_cluster(self):
        old = [plan(40_000 + i) for i in range(500)]
        new = [plan(50_000 + i) for i in range(60)]
        self.put_subs(old)
        self.converge_after_wipe(len(old), new, "cluster id changed",
                                 token=f"xbng-other-{os.getpid()}-{time.monotonic_ns()}")


if __name__ == "__main__":
    unittest.main()
