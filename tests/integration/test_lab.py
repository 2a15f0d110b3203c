"""The lab harness itself: namespaces and veths come and go, redirected-frame
reception works, the outer VLAN tag survives AF_PACKET reception, stale labs
are swept."""
import os
import subprocess
import sys
import unittest

from xbnglab.lab import Lab, recv_frames, sh, sweep_stale

from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.inet import IP, UDP


class LabTest(unittest.TestCase):
    def test_qinq_frame_crosses_veth_with_both_tags(self):
        with Lab() as lab:
            a, b = lab.netns("a"), lab.netns("b")
            lab.veth(a, "va", b, "vb")
            lab.attach_pass(b, "vb", os.environ["XBNG_XDP_PASS_OBJ"])
            tx, rx = a.packet_socket("va"), b.packet_socket("vb")
            frame = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                          / Dot1AD(vlan=100) / Dot1Q(vlan=200)
                          / IP(src="100.64.0.2", dst="198.51.100.1") / UDP(sport=1, dport=2))
            tx.send(frame)
            got = recv_frames(rx, 2.0, want=1, match=lambda f: f[12:14] == b"\x88\xa8")
            self.assertEqual(len(got), 1)
            self.assertEqual(got[0][:len(frame)], frame)
            names = [ns.name for ns in lab.namespaces.values()]
        listed = sh(["ip", "netns", "list"]).stdout
        for n in names:
            self.assertNotIn(n, listed)

    def test_killed_lab_is_swept(self):
        # A child builds a lab and is SIGKILLed: nothing of it may survive the sweep.
        code = ("import os,time; from xbnglab.lab import Lab; "
                "l=Lab(); l.netns('x'); os.makedirs(l.bpffs); print(l.id, flush=True); time.sleep(60)")
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        lab_id = p.stdout.readline().strip()
        self.assertTrue(lab_id.startswith("xbngt-"))
        self.assertIn(lab_id, sh(["ip", "netns", "list"]).stdout)
        p.kill()
        p.wait()
        removed = sweep_stale()
        self.assertIn(f"{lab_id}-x", removed)
        self.assertNotIn(lab_id, sh(["ip", "netns", "list"]).stdout)
        self.assertFalse(os.path.exists(f"/sys/fs/bpf/{lab_id}"))


if __name__ == "__main__":
    unittest.main()
