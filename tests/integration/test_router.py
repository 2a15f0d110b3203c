"""Router correctness with real stacks on both ends: traceroute,
tracepath, ping -M do and TCP through xbng, on veths that all start at MTU
1500 (xbngd raises its access port; the lab raises the CPE side, as a real
access network carries baby giants).

    cpe0..2 == br0/s0 (sub) ==== acc0 [xbngd] upl0 ==== n0 (net)
"""
import os
import re
import socket
import subprocess
import unittest

from xbnglab.cpe import add_cpe, cpe_sub, make_bridge, tcp_transfer, warm
from xbnglab.fixture import LabSuite
from xbnglab.lab import PIN_VERSION_DIR
from xbnglab.xbngd import GW4, GW6, UPLINK_DUT4, UPLINK_DUT6, UPLINK_NET4, UPLINK_NET6

POOLS = '["100.64.0.0/16", "2001:db8:1000::/36", "2001:db8:2000::/36"]'


def hops(out: str) -> dict:
    """traceroute -n output -> {hop number: first address}."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+([0-9a-f.:]+)\s", line)
        if m:
            got[int(m.group(1))] = m.group(2)
    return got


class RouterLab(LabSuite):
    SUB_MTU = None        # subscriber_mtu in the config (None: the default, 1500)
    CPE_IP_MTU = 1500     # what the CPEs believe
    CLAMP = True

    @classmethod
    def config(cls) -> str:
        opts = [f"pools = {POOLS}"]
        if cls.SUB_MTU:
            opts.append(f"subscriber_mtu = {cls.SUB_MTU}")
        if not cls.CLAMP:
            opts.append("mss_clamp = false")
        return '[ports]\naccess = [{ name = "acc0", ' + ", ".join(opts) + " }]\n"

    @classmethod
    def start_xbngd(cls):
        path = os.path.join(cls.x.lab.rundir, "xbngd.toml")
        with open(path, "w") as f:
            f.write(cls.config())
        cls.x.start(max_subscribers=1024, extra=["--config", path])

    @classmethod
    def setUpLab(cls):
        x = cls.x
        cls.start_xbngd()
        cls.subs = [cpe_sub(i) for i in range(3)]
        cls.provision(cls.subs)
        x.resolve_uplink_neighbours()
        make_bridge(x, link_mtu=1508)
        cls.cpes = [add_cpe(x, i, s, cls.CPE_IP_MTU, link_mtu=1508)
                    for i, s in enumerate(cls.subs)]
        warm(cls.cpes)

    def delta(self, before, after, reason):
        return after.get(reason, 0) - before.get(reason, 0)


class DefaultMtuTest(RouterLab):
    """Defaults: subscriber MTU 1500 on veths that started at 1500."""

    def test_xbngd_raised_the_access_mtu(self):
        self.assertIn("acc0: MTU raised from 1500 to 1508", self.x.read_log())
        self.assertIn("mtu 1508", self.x.dut.ip("link", "show", "dev", "acc0").stdout)

    def test_1500_byte_packets_both_ways(self):
        s = self.subs[0]
        for ns, dst in ((self.cpes[0], UPLINK_NET4), (self.x.net, s["ipv4"])):
            r = ns.exec(["ping", "-M", "do", "-s", "1472", "-c2", "-i0.2", "-W2", dst], check=False)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for ns, dst in ((self.cpes[0], UPLINK_NET6), (self.x.net, s["ipv6"])):
            r = ns.exec(["ping", "-6", "-M", "do", "-s", "1452", "-c2", "-i0.2", "-W2", dst],
                        check=False)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_tcp_4mib_each_way(self):
        before = self.x.stats()
        tcp_transfer(self, self.x.net, self.cpes[0], UPLINK_NET4, socket.AF_INET)
        tcp_transfer(self, self.cpes[1], self.x.net, self.subs[1]["ipv4"], socket.AF_INET)
        tcp_transfer(self, self.x.net, self.cpes[2], UPLINK_NET6, socket.AF_INET6)
        tcp_transfer(self, self.cpes[2], self.x.net, self.subs[2]["ipv6"], socket.AF_INET6)
        after = self.x.stats()
        self.assertEqual(self.delta(before, after, "drop_too_big"), 0)
        self.assertEqual(self.delta(before, after, "icmp_too_big"), 0)

    def test_traceroute_from_a_cpe_shows_the_gateway(self):
        r = self.cpes[0].exec(["traceroute", "-n", "-q1", "-w2", "-m3", UPLINK_NET4], check=False)
        self.assertEqual(hops(r.stdout).get(1), GW4, r.stdout + r.stderr)
        self.assertEqual(hops(r.stdout).get(2), UPLINK_NET4, r.stdout)
        r = self.cpes[0].exec(["traceroute6", "-n", "-q1", "-w2", "-m3", UPLINK_NET6], check=False)
        self.assertEqual(hops(r.stdout).get(1), GW6, r.stdout + r.stderr)
        self.assertEqual(hops(r.stdout).get(2), UPLINK_NET6, r.stdout)

    def test_traceroute_from_the_network_shows_the_uplink(self):
        s = self.subs[1]
        r = self.x.net.exec(["traceroute", "-n", "-q1", "-w2", "-m3", s["ipv4"]], check=False)
        self.assertEqual(hops(r.stdout).get(1), UPLINK_DUT4, r.stdout + r.stderr)
        self.assertEqual(hops(r.stdout).get(2), s["ipv4"], r.stdout)
        r = self.x.net.exec(["traceroute6", "-n", "-q1", "-w2", "-m3", s["ipv6"]], check=False)
        self.assertEqual(hops(r.stdout).get(1), UPLINK_DUT6, r.stdout + r.stderr)
        self.assertEqual(hops(r.stdout).get(2), s["ipv6"], r.stdout)

    def test_cpe_pings_its_gateway_answered_once(self):
        before = self.x.stats()
        for args in ([GW4], ["-6", GW6], ["-6", "fe80::1%c0"]):
            r = self.cpes[0].exec(["ping", *args[:-1], "-c2", "-i0.2", "-W2", args[-1]], check=False)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("DUP", r.stdout)
        after = self.x.stats()
        self.assertEqual(self.delta(before, after, "echo_reply"), 6)

    def test_unassigned_pool_address_does_not_loop(self):
        before = self.x.stats()
        r = self.x.net.exec(["ping", "-c1", "-W2", "100.64.9.9"], check=False)
        self.assertIn("Destination Host Unreachable", r.stdout)
        r = self.cpes[0].exec(["ping", "-c1", "-W2", "100.64.9.9"], check=False)
        self.assertNotEqual(r.returncode, 0)
        after = self.x.stats()
        # One unreachable each: no copy came back around.
        self.assertEqual(self.delta(before, after, "icmp_unreachable"), 2)
        self.assertEqual(self.delta(before, after, "drop_pool_unassigned"), 0)


class RefusedStartTest(LabSuite):
    """What xbngd refuses at start, before loading anything."""

    def start_fails(self, config: str) -> str:
        path = os.path.join(self.x.lab.rundir, "refused.toml")
        with open(path, "w") as f:
            f.write(config)
        r = subprocess.run(self.x.xbngd_argv(extra=["--config", path]), capture_output=True,
                           text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(os.path.exists(f"{self.x.lab.bpffs}/{PIN_VERSION_DIR}/maps/subscribers"),
                         "something was loaded and pinned")
        return r.stdout + r.stderr

    def test_pool_overlapping_the_uplink_subnet(self):
        out = self.start_fails('[ports]\naccess = [{ name = "acc0", pools = ["192.0.2.0/25"] }]\n')
        self.assertIn("pool 192.0.2.0/25 overlaps uplink upl0's subnet 192.0.2.0/24", out)

    def test_mtu_the_driver_refuses(self):
        # s0's XDP program caps what acc0 (its veth peer) may be set to.
        out = self.start_fails('[ports]\naccess = [{ name = "acc0", subscriber_mtu = 9000 }]\n')
        self.assertRegex(out, r"port acc0: needs MTU 9008 .*refused")
        self.assertIn("mtu 1500", self.x.dut.ip("link", "show", "dev", "acc0").stdout)


class Mtu1400Test(RouterLab):
    """Subscriber MTU 1400, CPEs that believe 1500 (the clamp's job)."""
    SUB_MTU = 1400

    def test_tracepath_finds_1400(self):
        for dst in (self.subs[0]["ipv4"], self.subs[0]["ipv6"]):
            r = self.x.net.exec(["tracepath", "-n", "-m3", dst], check=False, timeout=60)
            self.assertRegex(r.stdout, r"pmtu 1400", r.stdout + r.stderr)

    def test_ping_df_1472_gets_frag_needed_1400(self):
        before = self.x.stats()
        r = self.x.net.exec(["ping", "-M", "do", "-s", "1472", "-c1", "-W2", self.subs[1]["ipv4"]],
                            check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertRegex(r.stdout + r.stderr, r"From 192\.0\.2\.1 .*mtu = 1400")
        self.assertEqual(self.delta(before, self.x.stats(), "icmp_too_big"), 1)

    def test_tcp_works_because_of_the_clamp(self):
        before = self.x.stats()
        tcp_transfer(self, self.cpes[2], self.x.net, self.subs[2]["ipv4"], socket.AF_INET)
        tcp_transfer(self, self.x.net, self.cpes[2], UPLINK_NET4, socket.AF_INET)
        after = self.x.stats()
        self.assertGreaterEqual(self.delta(before, after, "mss_clamped"), 4)
        # Nothing was too big: the MSS did it, not PMTUD.
        self.assertEqual(self.delta(before, after, "icmp_too_big"), 0)
        self.assertEqual(self.delta(before, after, "drop_too_big_not_df"), 0)


class Mtu1400NoClampTest(RouterLab):
    """Subscriber MTU 1400, clamping off: IPv6 finds the path MTU from PTB."""
    SUB_MTU = 1400
    CLAMP = False

    def test_ipv6_tcp_works_because_of_ptb(self):
        before = self.x.stats()
        tcp_transfer(self, self.cpes[0], self.x.net, self.subs[0]["ipv6"], socket.AF_INET6)
        after = self.x.stats()
        self.assertEqual(self.delta(before, after, "mss_clamped"), 0)
        self.assertGreaterEqual(self.delta(before, after, "icmp_too_big"), 1)


if __name__ == "__main__":
    unittest.main()
