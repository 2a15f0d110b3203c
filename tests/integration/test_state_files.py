"""The agent's state files (the store journal, the lease file, the DHCPv6
server DUID) damaged in every shape, against the real xbngd: one row per
shape. Each row starts from the state a clean stop left (5 subscribers
created by one journaled upsert), damages one file, starts xbngd and checks:

- the outcome: the start refused, or the damage reported and the agent
  serving, with a message naming the file (and the entry at fault);
- the start never hangs (a FIFO) and SIGTERM ends it;
- the pinned maps are exactly as before (dumped with `xbngctl bpf dump`);
- no file outside the state directory changed (the file a planted link
  points to, its content and its mtime).
"""
import os
import shutil
import signal
import struct
import subprocess
import time
import unittest

from xbnglab.fixture import LabSuite
from xbnglab.xbngd import plan

JOURNAL_MAGIC_LEN = {b"XBNGJRN1": 40, b"XBNGJRN2": 48}  # header offset of the body length


class StateFilesTest(LabSuite):
    @classmethod
    def setUpLab(cls):
        x = cls.x
        cls.state = os.path.join("/run/xbng", x.lab.id)
        cls.journal = os.path.join(cls.state, "store.journal")
        cls.leases = os.path.join(cls.state, "leases.json")
        cls.duid = os.path.join(cls.state, "dhcpv6-server-duid")
        x.start(max_subscribers=4096)
        cls.provision([plan(i, c_per_s=10) for i in range(5)])
        assert x.stop() == 0, x.read_log()
        cls.good = os.path.join(x.lab.rundir, "good-state")
        shutil.copytree(cls.state, cls.good)
        cls.maps = cls.dump()
        assert len([m for m in cls.maps if '"subscribers"' in m]) == 5, cls.maps
        cls.outside = os.path.join(x.lab.rundir, "outside")

    @classmethod
    def dump(cls) -> set:
        r = subprocess.run(cls.x.dut.nsenter_argv([cls.x.xbngctl, "--json", "bpf", "dump",
                                                   "--bpffs", cls.x.lab.bpffs]),
                           capture_output=True, text=True, timeout=60, check=True)
        return set(r.stdout.splitlines())

    def setUp(self):
        shutil.rmtree(self.state, ignore_errors=True)
        shutil.copytree(self.good, self.state)
        with open(self.outside, "w") as f:
            f.write("a file outside the state directory\n")
        os.utime(self.outside, (1_000_000_000, 1_000_000_000))

    def tearDown(self):
        if self.x.daemon and self.x.daemon.poll() is None:
            self.x.stop()
        self.assertEqual(self.dump(), self.maps, "the pinned maps changed")
        st = os.lstat(self.outside)
        with open(self.outside) as f:
            self.assertEqual(f.read(), "a file outside the state directory\n",
                             "a file outside the state directory was written")
        self.assertEqual(st.st_mtime, 1_000_000_000, "a file outside the state directory changed")

    # -- helpers -------------------------------------------------------------------
    def start_refused(self, *says: str) -> str:
        """Starts xbngd; it must exit by itself within 20 s, non-zero, saying `says`."""
        x = self.x
        x.daemon = x.lab.spawn(x.xbngd_argv(4096), log=x.log)
        try:
            rc = x.daemon.wait(20)
        except subprocess.TimeoutExpired:
            # Still running (it accepted the file, or hangs): SIGTERM must end it.
            x.daemon.send_signal(signal.SIGTERM)
            try:
                x.daemon.wait(5)
                self.fail(f"xbngd did not refuse the start (ended by SIGTERM):\n{x.read_log()[-2000:]}")
            except subprocess.TimeoutExpired:
                x.daemon.kill()
                x.daemon.wait(5)
                self.fail(f"xbngd did not refuse the start, and ignored SIGTERM:\n{x.read_log()[-2000:]}")
        log = x.read_log()
        self.assertNotEqual(rc, 0, log)
        for s in says:
            self.assertIn(s, log)
        return log

    def start_serving(self) -> str:
        self.x.start(max_subscribers=4096)
        self.assertEqual(self.x.stop(), 0)
        return self.x.read_log()

    def journal_poke(self, off: int, data: bytes):
        with open(self.journal, "r+b") as f:
            f.seek(off)
            f.write(data)

    def journal_body_len_offset(self) -> int:
        with open(self.journal, "rb") as f:
            return JOURNAL_MAGIC_LEN[f.read(8)]

    def link_to_outside(self, path: str):
        os.unlink(path) if os.path.lexists(path) else None
        os.symlink(self.outside, path)

    # -- the store journal -------------------------------------------------------
    def test_journal_cleared_state_flipped_to_pending(self):
        # The change that created the 5 subscribers completed; its state word
        # damaged back to "pending" must not roll it back.
        self.journal_poke(8, b"\x01")
        log = self.start_serving()
        self.assertIn(f"store journal {self.journal}: damaged", log)
        self.assertIn("no pending change resolved", log)
        self.assertNotIn("rolled back", log)
        self.assertTrue(os.path.exists(self.journal + ".damaged"), "kept for inspection")

    def test_journal_huge_lengths(self):
        for length in (1 << 62, 1 << 30):
            with self.subTest(length=length):
                self.setUp()
                self.journal_poke(8, b"\x01")
                self.journal_poke(self.journal_body_len_offset(), struct.pack("<Q", length))
                log = self.start_serving()
                self.assertIn(f"store journal {self.journal}: damaged", log)
                self.assertIn("the file holds", log)
                self.assertNotIn("bad_alloc", log)
                self.tearDown()

    def test_journal_not_a_regular_file(self):
        rows = [("symlink", lambda p: self.link_to_outside(p), "symbolic link"),
                ("FIFO", lambda p: (os.unlink(p), os.mkfifo(p)), "a FIFO"),
                ("directory", lambda p: (os.unlink(p), os.mkdir(p)), "a directory"),
                ("hard link", lambda p: (os.unlink(p), os.link(self.outside, p)), "hard links")]
        for name, make, says in rows:
            with self.subTest(name):
                self.setUp()
                make(self.journal)
                self.start_refused(f"store journal {self.journal}: ", says)
                self.tearDown()

    # -- the lease file ---------------------------------------------------------------
    def write_leases(self, text: str):
        with open(self.leases, "w") as f:
            f.write(text)

    def lease(self, **over) -> dict:
        e = {"port": "acc0", "outer_vlan": 100, "inner_vlan": 1, "family": "ipv4",
             "address": "100.64.0.16", "prefixes": [], "bound_unix": int(time.time()),
             "expires_unix": int(time.time()) + 3600}
        e.update(over)
        return e

    def test_lease_file_damage(self):
        import json
        ok = self.lease()
        rows = [
            ("outer_vlan 65636", {"version": 1, "leases": [ok, self.lease(inner_vlan=2, outer_vlan=65636)]},
             'entry 1: "outer_vlan" 65636 is outside 1..4094'),
            ("outer_vlan a string", {"version": 1, "leases": [{"port": "acc0", "outer_vlan": "x"}]},
             'entry 0: "outer_vlan" is string "x", not an integer'),
            ("not an object", [1, 2, 3], "is array, not an object"),
            ("family unknown", {"version": 1, "leases": [self.lease(family="ipx")]},
             'entry 0: "family" "ipx"'),
            ("address not IPv4", {"version": 1, "leases": [self.lease(address="999.1.1.1")]},
             'entry 0: "address" "999.1.1.1"'),
            ("duplicate", {"version": 1, "leases": [ok, ok]}, "entry 1: a second ipv4 lease"),
        ]
        for name, doc, says in rows:
            with self.subTest(name):
                self.setUp()
                self.write_leases(json.dumps(doc))
                log = self.start_refused(f"lease state {self.leases}: ", says)
                self.assertNotIn("error xbngd: [json.exception", log)
                self.tearDown()

    def test_lease_file_not_a_regular_file(self):
        rows = [("FIFO", lambda p: os.mkfifo(p), "a FIFO"),
                ("symlink", lambda p: self.link_to_outside(p), "symbolic link"),
                ("directory", lambda p: os.mkdir(p), "a directory")]
        for name, make, says in rows:
            with self.subTest(name):
                self.setUp()
                make(self.leases)
                self.start_refused(f"lease state {self.leases}: ", says)
                self.tearDown()

    def test_lease_writer_does_not_follow_a_planted_link(self):
        # A lease already expired makes the table dirty: the agent rewrites
        # the file (at its first flush, and at the stop).
        import json
        self.write_leases(json.dumps({"version": 1, "leases": [
            self.lease(bound_unix=1_000_000_000, expires_unix=1_000_003_600)]}))
        self.link_to_outside(self.leases + ".tmp")
        log = self.start_serving()
        self.assertIn("1 expired while stopped", log)
        st = os.lstat(self.leases)
        self.assertTrue(os.path.isfile(self.leases) and not os.path.islink(self.leases),
                        f"leases.json is {st}")
        with open(self.leases) as f:
            self.assertEqual(json.load(f), {"version": 1, "leases": []})

    # -- signals during the start ------------------------------------------------------
    def test_sigterm_at_any_moment_of_the_start_stops_it(self):
        # From the first instructions to serving: SIGTERM ends xbngd within
        # seconds, and the maps are as they were (tearDown).
        x = self.x
        for delay in (0.05, 0.2, 0.4, 0.8):
            with self.subTest(delay=delay):
                x.daemon = x.lab.spawn(x.xbngd_argv(4096), log=x.log)
                time.sleep(delay)
                x.daemon.send_signal(signal.SIGTERM)
                try:
                    rc = x.daemon.wait(5)
                except subprocess.TimeoutExpired:
                    x.daemon.kill()
                    x.daemon.wait(5)
                    self.fail(f"SIGTERM {delay} s into the start was ignored:\n{x.read_log()[-2000:]}")
                # Killed by it before the agent takes signals, exits 143 during
                # the start, 0 once serving.
                self.assertIn(rc, (0, -signal.SIGTERM, 128 + signal.SIGTERM), x.read_log())

    # -- the DHCPv6 server DUID -----------------------------------------------------------
    def test_duid_file_damage(self):
        rows = [("symlink", lambda p: self.link_to_outside(p), "symbolic link"),
                ("FIFO", lambda p: (os.unlink(p), os.mkfifo(p)), "a FIFO"),
                ("unknown DUID type", lambda p: open(p, "w").write("00:09:01:02:03\n"), "DUID type 9")]
        for name, make, says in rows:
            with self.subTest(name):
                self.setUp()
                make(self.duid)
                self.start_refused(f"DHCPv6 server DUID: {self.duid}: ", says)
                self.tearDown()


if __name__ == "__main__":
    unittest.main()
