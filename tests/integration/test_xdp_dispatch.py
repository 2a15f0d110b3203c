"""xbngd beside an operator's own XDP program, through libxdp's dispatcher
(`--xdp-attach libxdp`): the operator's program, loaded with xdp-loader at a
lower priority number, runs first on the access port; what it passes goes on
to xbng, what it drops never reaches xbng. A restart of xbngd swaps xbng's
program without losing a frame and leaves the operator's program in place;
the teardown takes only xbng's out. A port holding an XDP program attached
without libxdp is refused, with nothing changed."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
import unittest

from xbnglab.frames import up_v4
from xbnglab.lab import PIN_VERSION_DIR, sh
from xbnglab.traffic import Stream
from xbnglab.xbngd import UPLINK_NET4, XbngLab, find_pass_obj, plan


def operator_obj() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.environ.get("XBNG_OPERATOR_XDP_OBJ"),
              os.path.join(here, "..", "..", "build", "tests", "integration",
                           "xbng_operator_xdp_gen", "operator_xdp.bpf.o")):
        if p and os.path.exists(p):
            return os.path.abspath(p)
    raise FileNotFoundError("operator_xdp.bpf.o not built (set XBNG_OPERATOR_XDP_OBJ)")


OPERATOR_PRIO = 10
XBNG_PRIO = 100


class XdpDispatchTest(unittest.TestCase):
    def setUp(self):
        self.x = XbngLab("xbngd")
        self.addCleanup(self.x.close)
        # The operator's pins beside xbng's pin directory, not in it (the
        # teardown removes that one whole).
        self.op_pins = self.x.lab.bpffs + "-operator"
        os.makedirs(self.op_pins)
        self.addCleanup(shutil.rmtree, self.op_pins, ignore_errors=True)

    def loader(self, *args: str, check: bool = True) -> str:
        """xdp-loader in the dut namespace, with the host's bpffs (libxdp's pins)."""
        r = subprocess.run(self.x.dut.nsenter_argv(["xdp-loader", *args]), capture_output=True,
                           text=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"xdp-loader {' '.join(args)}: {r.stderr or r.stdout}")
        return r.stdout + r.stderr

    def unload_all(self):
        self.loader("unload", "--all", "acc0", check=False)

    def programs(self) -> list[tuple[str, int]]:
        """(name, priority) of each program of acc0's dispatcher, in run order."""
        out = self.loader("status", "acc0")
        return [(m.group(2), int(m.group(1))) for m in re.finditer(r"=>\s+(\d+)\s+(\w+)", out)]

    def op_counts(self) -> tuple[int, int]:
        """The operator program's (frames seen, frames dropped)."""
        out = sh(["bpftool", "-j", "map", "dump", "pinned", f"{self.op_pins}/op_counts"])
        def num(v):  # an int (BTF formatted) or a list of hex bytes, little-endian
            return v if isinstance(v, int) else int.from_bytes(bytes(int(b, 16) for b in v), "little")
        vals = {num(e["key"]): num(e["value"]) for e in json.loads(out.stdout)}
        return vals[0], vals[1]

    def refused_freplace(self, argv) -> bool:
        """Starts xbngd; on a kernel that refuses freplace programs checks the
        refusal (xbngd exits, the operator's program stays the port's only
        one) and returns True."""
        p = self.x.lab.spawn(self.x.xbngd_argv(4096, argv), log=self.x.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and p.poll() is None:
            if os.path.exists(self.x.socket_path) and self.x.ctl_raw("stats").returncode == 0:
                self.x.daemon = p
                return False
            time.sleep(0.1)
        self.x.daemon = p
        self.assertIsNotNone(p.poll(), "xbngd neither served nor exited")
        log = self.x.read_log()
        self.assertNotEqual(p.returncode, 0)
        self.assertRegex(log, r"this kernel refuses freplace \(BPF_PROG_TYPE_EXT\) programs")
        self.assertRegex(log, "nothing was changed")
        link = self.x.dut.ip("-d", "link", "show", "dev", "acc0").stdout
        self.assertRegex(link, r"prog/xdp id \d+ name op_filter")
        self.assertNotRegex(link, "xdp_access|xdp_dispatcher")
        return True

    def up_packets(self, s: dict) -> int:
        got = self.x.ctl("sub", "get", "--port", s["port"], "--outer", str(s["outer_vlan"]),
                         "--inner", str(s["inner_vlan"]))["subscriber"]
        return int(got.get("counters", {}).get("up_packets", 0))

    def test_1_operator_program_first_kept_across_restart(self):
        x = self.x
        self.addCleanup(self.unload_all)
        self.loader("load", "-m", "native", "-P", str(OPERATOR_PRIO), "-A", "XDP_PASS",
                    "-p", self.op_pins, "acc0", operator_obj())
        subs = [plan(i, c_per_s=10) for i in range(2)]
        kept, dropped = subs
        # The operator drops every frame of the second subscriber's MAC.
        mac = bytes(int(b, 16) for b in dropped["mac"].split(":")) + b"\0\0"
        sh(["bpftool", "map", "update", "pinned", f"{self.op_pins}/op_drop_mac",
            "key", "0", "0", "0", "0", "value", *[str(b) for b in mac]])
        argv = ["--xdp-attach", "libxdp"]
        if self.refused_freplace(argv):
            self.skipTest("this kernel refuses freplace programs (checked: xbngd refuses clearly "
                          "and changes nothing); the dispatcher scenario needs a kernel that "
                          "loads them")
        self.assertEqual([p for p in self.programs()],
                         [("op_filter", OPERATOR_PRIO), ("xdp_access", XBNG_PRIO)])
        out, _ = x.import_subs(subs)
        self.assertEqual(int(out["applied"]), 2)
        x.resolve_uplink_neighbours()

        seen0, _ = self.op_counts()
        with Stream(x, [kept]) as st:
            time.sleep(1.0)
            self.assertEqual(x.stop(signal.SIGTERM), 0, x.read_log())
            time.sleep(0.5)
            x.start(max_subscribers=4096, extra=argv)
            time.sleep(1.0)
        self.assertGreater(st.sent, 2000)
        lost = st.sent - len(st.seen)
        self.assertEqual(lost, 0, f"{lost} of {st.sent} frames lost across the restart")
        seen1, dropped1 = self.op_counts()
        self.assertGreaterEqual(seen1 - seen0, st.sent)  # every frame met the operator first
        self.assertEqual(dropped1, 0)
        self.assertRegex(x.read_log(), "in place of xbng's previous program")
        self.assertEqual(self.programs(), [("op_filter", OPERATOR_PRIO), ("xdp_access", XBNG_PRIO)])
        self.assertGreaterEqual(self.up_packets(kept), st.sent)

        # The operator's drop: counted by it, never seen by xbng.
        tx = x.sub.packet_socket("s0")
        frame = bytes(up_v4(dropped, x.dut.mac("acc0"), UPLINK_NET4))
        for _ in range(50):
            tx.send(frame)
        tx.close()
        time.sleep(0.5)
        _, dropped2 = self.op_counts()
        self.assertEqual(dropped2, 50)
        self.assertEqual(self.up_packets(dropped), 0)

        # The teardown takes xbng's program out and leaves the operator's.
        x.stop(signal.SIGTERM)
        x.teardown_dataplane()
        self.assertEqual(self.programs(), [("op_filter", OPERATOR_PRIO)])

    def test_2_program_without_libxdp_is_refused(self):
        x = self.x
        x.dut.ip("link", "set", "dev", "acc0", "xdpdrv", "obj", find_pass_obj(), "sec", "xdp")
        x.daemon = x.lab.spawn(x.xbngd_argv(4096, ["--xdp-attach", "libxdp"]), log=x.log)
        self.assertNotEqual(x.daemon.wait(timeout=30), 0)
        log = x.read_log()
        # Either refusal leaves the port as it was: the freplace probe comes
        # first on a kernel without freplace, the port check on others.
        self.assertRegex(log, r"acc0: XDP program xdp_pass \(id \d+\) is attached without "
                              r"libxdp's dispatcher|this kernel refuses freplace")
        self.assertRegex(log, "nothing was changed")
        link = x.dut.ip("-d", "link", "show", "dev", "acc0").stdout
        self.assertRegex(link, r"prog/xdp id \d+ name xdp_pass")
        self.assertEqual(os.listdir(f"{x.lab.bpffs}/{PIN_VERSION_DIR}/maps"), [])


if __name__ == "__main__":
    unittest.main()
