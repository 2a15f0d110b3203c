"""Scenario 6: a steady stream through xbng while xbngd is stopped (SIGTERM,
and separately SIGKILL) and started again: zero frames lost, the subscriber
set intact afterwards."""
import signal
import time
import unittest

from xbnglab.traffic import Stream
from xbnglab.xbngd import XbngLab, plan

class RestartTest(unittest.TestCase):
    def setUp(self):
        self.x = XbngLab()
        self.addCleanup(self.x.close)
        self.x.start(max_subscribers=4096)
        self.subs = [plan(i, c_per_s=10) for i in range(50)]
        out, _ = self.x.import_subs(self.subs)
        self.assertEqual(int(out["applied"]), 50)
        self.x.resolve_uplink_neighbours()

    def listing(self):
        out = self.x.ctl("sub", "list", "--all")
        subs = out["subscribers"] if isinstance(out, dict) else out
        return sorted((s["port"], int(s["outer_vlan"]), int(s["inner_vlan"]), s.get("ipv4", ""),
                       s.get("ipv6", ""), tuple(s.get("ipv6_prefixes", []))) for s in subs)

    def restart_under_traffic(self, sig):
        before = self.listing()
        self.assertEqual(len(before), 50)
        with Stream(self.x, self.subs[:10]) as st:
            time.sleep(1.0)
            rc = self.x.stop(sig)
            if sig == signal.SIGTERM:
                self.assertEqual(rc, 0, self.x.read_log())
            time.sleep(1.0)  # nobody home: the pinned program keeps forwarding
            self.x.start(max_subscribers=4096)
            time.sleep(1.0)
        self.assertGreater(st.sent, 4000)
        lost = st.sent - len(st.seen)
        self.assertEqual(lost, 0, f"{lost} of {st.sent} frames lost across the restart")
        self.assertEqual(self.listing(), before)
        log = self.x.read_log()
        self.assertRegex(log, "(?i)adopt")

    def test_sigterm_restart_loses_nothing(self):
        self.restart_under_traffic(signal.SIGTERM)

    def test_sigkill_restart_loses_nothing(self):
        self.restart_under_traffic(signal.SIGKILL)


if __name__ == "__main__":
    unittest.main()
