"""Scenario 6: a steady stream through xbng while xbngd is stopped (SIGTERM,
and separately SIGKILL) and started again: zero frames lost, the subscriber
set intact afterwards."""
import signal
import struct
import threading
import time
import unittest

from frames import up_v4
from lab import drain, recv_frames
from xbng_lab import UPLINK_NET4, XbngLab, plan

MAGIC = b"XBNGSEQ!"


class Stream:
    """Sends numbered upstream frames at a steady rate; counts what net receives."""

    def __init__(self, x: XbngLab, subs, pps: int = 2000):
        self.x, self.subs, self.pps = x, subs, pps
        self.tx = x.sub.packet_socket("s0")
        self.rx = x.net.packet_socket("n0")
        drain(self.rx)
        acc_mac = x.dut.mac("acc0")
        self.templates = [bytes(up_v4(s, acc_mac, UPLINK_NET4, payload=MAGIC + b"\0" * 8)) for s in subs]
        self.sent = 0
        self.seen: set[int] = set()
        self._stop = threading.Event()

    def _send(self):
        interval = 1.0 / self.pps
        t_next = time.monotonic()
        seq = 0
        while not self._stop.is_set():
            f = self.templates[seq % len(self.templates)]
            self.tx.send(f[:-8] + struct.pack("!Q", seq))
            seq += 1
            t_next += interval
            delay = t_next - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.sent = seq

    def _recv(self):
        while not self._stop.is_set() or self._draining:
            frames = recv_frames(self.rx, 0.2, match=lambda f: MAGIC in f)
            for f in frames:
                self.seen.add(struct.unpack("!Q", f[-8:])[0])
            if self._stop.is_set() and not frames:
                break

    def __enter__(self):
        self._draining = True
        self.ts = threading.Thread(target=self._send)
        self.tr = threading.Thread(target=self._recv)
        self.tr.start()
        self.ts.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.ts.join()
        time.sleep(0.5)
        self._draining = False
        self.tr.join()


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
