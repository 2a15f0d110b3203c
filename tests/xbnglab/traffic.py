"""Steady numbered traffic through xbng with exact loss accounting, for the
tests that change things while frames flow (restart, re-address, upgrade)."""
import struct
import threading
import time

from xbnglab.frames import up_v4
from xbnglab.lab import drain, recv_frames
from xbnglab.xbngd import UPLINK_NET4, XbngLab

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
        self.tx.close()
        self.rx.close()
