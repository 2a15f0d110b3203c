"""Upgrade without loss: a different build of xbngd replaces the running one
while traffic flows. `xbngd-next` (built by tests/integration/CMakeLists.txt)
is the same agent with the fast path compiled with another policer retry
bound (XBNG_POLICE_CAS_TRIES), so its programs have other instructions and
another tag. The new programs must be
swapped into the pinned XDP links (same link ids), every pinned map kept (same
map ids), zero frames lost, and the old build must come back the same way.
A pinned map whose layout differs from the build's is refused with a message
naming the map and both layouts, and forwarding is left untouched."""
import glob
import json
import os
import signal
import subprocess
import time
import unittest

from xbnglab.lab import sh
from xbnglab.traffic import Stream
from xbnglab.xbngd import XbngLab, find_bin, plan

MAPS = ("subscribers", "routes_v4", "routes_v6", "routes_v6_64", "prefixes_v4", "prefixes_v6",
        "ports", "tx_ports", "stats", "port_stats", "events", "unknown_seen", "event_budget",
        "icmp_budget", "icmp_scratch", "pools_v4", "pools_v6",
        "police",
        "local_allow", "mac_seen",
        "punt", "punt_limit", "punt_port_budget",
        "direct_pools", "direct_v4", "direct_pools_v6", "direct_v6", "direct_sub_ranges",
        "direct_subscribers",
        )
PORTS = ("acc0", "upl0")


def bpftool(*args: str):
    return json.loads(sh(["bpftool", "-j", *args]).stdout)


class UpgradeTest(unittest.TestCase):
    def setUp(self):
        self.x = XbngLab()
        self.addCleanup(self.x.close)
        self.old_bin = self.x.xbngd
        self.new_bin = find_bin("xbngd-next")
        self.x.start(max_subscribers=4096)
        self.subs = [plan(i, c_per_s=10) for i in range(50)]
        out, _ = self.x.import_subs(self.subs)
        self.assertEqual(int(out["applied"]), 50)
        self.x.resolve_uplink_neighbours()

    def pins(self) -> str:
        # The running ABI's directory (<bpffs>/v<ABI>), as xbnglab.xbngd.pinned_map finds it.
        return os.path.dirname(os.path.dirname(self.x.pinned_map("ports")))

    def dataplane(self) -> dict:
        """Link id, program id and program tag per port; map id per map."""
        d = {}
        for port in PORTS:
            link = bpftool("link", "show", "pinned", f"{self.pins()}/links/{port}")
            prog = bpftool("prog", "show", "id", str(link["prog_id"]))
            d[port] = (link["id"], link["prog_id"], prog["tag"])
        for m in MAPS:
            d[m] = bpftool("map", "show", "pinned", f"{self.pins()}/maps/{m}")["id"]
        return d

    def listing(self):
        out = self.x.ctl("sub", "list", "--all")
        subs = out["subscribers"] if isinstance(out, dict) else out
        return sorted((s["port"], int(s["outer_vlan"]), int(s["inner_vlan"]), s.get("ipv4", ""),
                       s.get("ipv6", "")) for s in subs)

    def switch_to(self, binary: str):
        self.assertEqual(self.x.stop(signal.SIGTERM), 0, self.x.read_log())
        self.x.xbngd = binary
        self.x.start(max_subscribers=4096)

    def test_new_build_swaps_in_and_back_without_loss(self):
        before = self.listing()
        old = self.dataplane()
        with Stream(self.x, self.subs[:10]) as st:
            time.sleep(1.0)
            self.switch_to(self.new_bin)
            upgraded = self.dataplane()
            upgrade_log = self.x.read_log()
            time.sleep(1.0)
            self.switch_to(self.old_bin)
            time.sleep(1.0)
        downgraded = self.dataplane()

        self.assertGreater(st.sent, 4000)
        lost = st.sent - len(st.seen)
        self.assertEqual(lost, 0, f"{lost} of {st.sent} frames lost across upgrade and downgrade")
        for port in PORTS:
            link_id, prog_id, tag = old[port]
            # The same link (never detached), a new program of another build.
            self.assertEqual(upgraded[port][0], link_id, port)
            self.assertNotEqual(upgraded[port][1], prog_id, port)
            self.assertNotEqual(upgraded[port][2], tag, f"{port}: xbngd-next loaded the same code")
            self.assertEqual(downgraded[port][0], link_id, port)
            self.assertEqual(downgraded[port][2], tag, f"{port}: the old build is back")
        for m in MAPS:
            self.assertEqual(upgraded[m], old[m], f"map {m} was replaced by the upgrade")
            self.assertEqual(downgraded[m], old[m], f"map {m} was replaced by the downgrade")
        self.assertEqual(self.listing(), before)
        self.assertIn("swapped into the pinned XDP link (no detach)", upgrade_log)
        self.assertIn("50 subscribers and", upgrade_log)

    def test_map_layout_change_is_refused_and_forwarding_continues(self):
        self.assertEqual(self.x.stop(signal.SIGTERM), 0, self.x.read_log())
        # Pretend the pins come from a build whose `ports` value grew by 8 bytes.
        path = f"{self.pins()}/maps/ports"
        real = bpftool("map", "show", "pinned", path)
        os.unlink(path)
        size = int(real["bytes_value"])  # sizeof(struct xbng_port) of this build
        sh(["bpftool", "map", "create", path, "type", "hash", "key", "4", "value", str(size + 8),
            "entries", "64", "name", "ports"])
        try:
            with Stream(self.x, self.subs[:10]) as st:
                time.sleep(0.5)
                log = os.path.join(self.x.lab.rundir, "refused.log")
                p = self.x.lab.spawn(self.x.xbngd_argv(4096), log=log)
                rc = p.wait(30)
                time.sleep(0.5)
            with open(log) as f:
                msg = f.read()
            self.assertEqual(rc, 1, msg)
            self.assertIn(f"{path}: pinned map does not match this build", msg)
            self.assertIn(f"pinned: hash key 4 value {size + 8}", msg)
            self.assertIn(f"expected: hash key 4 value {size}", msg)
            self.assertIn(f"xbngd --teardown --bpffs {self.x.lab.bpffs}", msg)
            self.assertIn("No migration exists", msg)
            lost = st.sent - len(st.seen)
            self.assertGreater(st.sent, 1000)
            self.assertEqual(lost, 0, f"{lost} of {st.sent} frames lost around the refused start")
        finally:
            # Put the real map back under its pin: the next start adopts everything.
            os.unlink(path)
            sh(["bpftool", "map", "pin", "id", str(real["id"]), path])
        self.x.start(max_subscribers=4096)
        self.assertEqual(len(self.listing()), 50)


if __name__ == "__main__":
    unittest.main()
