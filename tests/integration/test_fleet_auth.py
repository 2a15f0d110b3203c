"""Fleet mode with etcd authentication: username/password are
passed through to etcd by xbngd and by `xbngctl sub import --etcd`; a wrong
password keeps the node out (status absent, outage in the metrics) while the
data plane runs."""
import json
import os
import unittest

from xbnglab.etcd import EtcdCluster, FleetNode
from xbnglab.lab import wait_for
from xbnglab.xbngd import XbngLab, find_bin, find_pass_obj, plan, write_jsonl


class FleetAuthTest(unittest.TestCase):
    def test_username_password(self):
        with XbngLab() as x:
            lab = x.lab
            etcd_ns, peer = lab.netns("etcd"), lab.netns("peer")
            c = EtcdCluster(lab, etcd_ns, members=1)
            c.start()
            c.ctl("user", "add", "root:rootpw")
            c.ctl("role", "add", "xbng-n1")
            c.ctl("role", "grant-permission", "xbng-n1", "--prefix=true", "readwrite", "/xbng/v1/")
            c.ctl("user", "add", "n1:n1pw")
            c.ctl("user", "grant-role", "n1", "xbng-n1")
            c.ctl("auth", "enable")
            root = ["--user", "root:rootpw"]
            n = FleetNode(lab, 1, etcd_ns, peer, find_pass_obj())
            pw = os.path.join(lab.rundir, "pw")
            with open(pw, "w") as f:
                f.write("n1pw\n")
            subs = [plan(i) for i in range(50)]
            path = os.path.join(lab.rundir, "s.jsonl")
            write_jsonl(path, subs)
            import subprocess
            r = subprocess.run(etcd_ns.nsenter_argv([
                find_bin("xbngctl"), "sub", "import", "--etcd", c.endpoint(0), "--node", "n1",
                "--etcd-username", "n1", "--etcd-password-file", pw, path]),
                capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            # Without credentials etcd refuses the import.
            r = subprocess.run(etcd_ns.nsenter_argv([
                find_bin("xbngctl"), "sub", "import", "--etcd", c.endpoint(0), "--node", "n1", path]),
                capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0)

            n.start(members=(0,))
            # The node above has no credentials: it stays out, forwarding runs.
            wait_for(lambda: n.metrics().get("xbng_fleet_etcd_up") == 0 and
                     n.metrics().get("xbng_fleet_etcd_outages_total", 0) >= 1, 20, 0.2,
                     "the unauthenticated node to report the outage")
            self.assertEqual(int(n.ctl("stats")["subscribers"]), 0)
            n.kill()
            # With them, it converges.
            argv_extra = ["--etcd-username", "n1", "--etcd-password-file", pw]
            n.start(members=(0,), extra=argv_extra)

            def status():
                out = c.ctl("get", "/xbng/v1/status/n1", "--print-value-only", *root).stdout.strip()
                return json.loads(out) if out else None
            wait_for(lambda: (status() or {}).get("subscribers") == 50, 30, 0.2, "n1 to apply 50")
            self.assertEqual(len(n.listed_keys()), 50)


if __name__ == "__main__":
    unittest.main()
