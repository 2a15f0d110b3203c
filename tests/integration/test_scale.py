"""Scenario 4, the seed report's scale: 60,000 QinQ subscribers (20 S-VLANs x
3,000 C-VLANs) with IPv4, IPv6 and a /64 each, provisioned through gRPC; a
random sample of 500 verified end to end in both directions; the listing
returns exactly 60,000; the provisioning time printed."""
import ipaddress
import random
import sys
import time
import unittest

from xbnglab.frames import down_v4, down_v6, tags, up_v4, up_v6
from xbnglab.lab import drain, recv_frames
from xbnglab.xbngd import UPLINK_NET4, UPLINK_NET6, XbngLab, plan

N, C_PER_S, SAMPLE = 60_000, 3_000, 500


class ScaleTest(unittest.TestCase):
    def test_60k_subscribers(self):
        with XbngLab() as x:
            x.start(max_subscribers=65536)
            subs = [plan(i, c_per_s=C_PER_S) for i in range(N)]
            out, dt = x.import_subs(subs)
            print(f"\nprovisioned {N} subscribers through StreamSubscribers in {dt:.2f} s "
                  f"({N / dt:,.0f}/s, xbngctl import wall time)", file=sys.stderr)
            self.assertEqual(int(out["applied"]), N)
            self.assertEqual(int(out.get("failed", 0)), 0)

            listed = x.ctl("sub", "list", "--all")
            rows = listed["subscribers"] if isinstance(listed, dict) else listed
            self.assertEqual(len(rows), N)
            self.assertEqual(len({(r["outer_vlan"], r["inner_vlan"]) for r in rows}), N)
            page = x.ctl("sub", "list", "--outer", "105", "--page-size", "10")
            self.assertEqual(int(page["total_count"]), C_PER_S)

            x.resolve_uplink_neighbours()
            acc, upl, n0 = x.dut.mac("acc0"), x.dut.mac("upl0"), x.net.mac("n0")
            sub_sock, net_sock = x.sub.packet_socket("s0"), x.net.packet_socket("n0")
            sample = random.Random(4242).sample(subs, SAMPLE)

            # upstream: IPv4 from every sampled subscriber, IPv6 from a /64 address
            drain(net_sock)
            # Paced: a veth's NAPI ring holds 256 frames; a burst from one
            # Python loop can overrun it before xbng runs.
            for k, s in enumerate(sample):
                if k % 32 == 0:
                    time.sleep(0.002)
                sub_sock.send(bytes(up_v4(s, acc, UPLINK_NET4)))
                src6 = str(ipaddress.IPv6Network(s["ipv6_prefixes"][0])[9])
                sub_sock.send(bytes(up_v6(s, acc, UPLINK_NET6, src=src6)))
            got = recv_frames(net_sock, 5.0, want=2 * SAMPLE,
                              match=lambda f: f[12:14] in (b"\x08\x00", b"\x86\xdd") and b"xbng-up" in f)
            srcs4 = {bytes(f[26:30]) for f in got if f[12:14] == b"\x08\x00"}
            srcs6 = {bytes(f[22:38]) for f in got if f[12:14] == b"\x86\xdd"}
            self.assertEqual(srcs4, {ipaddress.IPv4Address(s["ipv4"]).packed for s in sample})
            self.assertEqual(len(srcs6), SAMPLE)

            # downstream: to each sampled subscriber's IPv4 and /128
            drain(sub_sock)
            for k, s in enumerate(sample):
                if k % 32 == 0:
                    time.sleep(0.002)
                net_sock.send(bytes(down_v4(n0, upl, UPLINK_NET4, s["ipv4"])))
                net_sock.send(bytes(down_v6(n0, upl, UPLINK_NET6, s["ipv6"])))
            got = recv_frames(sub_sock, 5.0, want=2 * SAMPLE, match=lambda f: b"xbng-down" in f)
            self.assertEqual(len(got), 2 * SAMPLE)
            by_mac = {bytes.fromhex(s["mac"].replace(":", "")): s for s in sample}
            for f in got:
                s = by_mac[f[0:6]]
                self.assertEqual(tags(f), [(0x88A8, s["outer_vlan"]), (0x8100, s["inner_vlan"])])
                self.assertEqual(f[6:12], bytes.fromhex(acc.replace(":", "")))


if __name__ == "__main__":
    unittest.main()
