"""Scenario 3, real transport: real kernel stacks on both ends.

Each emulated CPE is a namespace whose veth pushes and pops its subscriber's
two tags with TC BPF (cpe_egress/cpe_ingress.bpf.c; the kernel has no VLAN
module); the CPEs are bridged onto the access veth in `sub`. The CPE kernels
resolve the gateway with real ARP and ND (answered by xbng in XDP), then ping
both ways and move a TCP stream whose bytes are checked end to end.
"""
import socket
import unittest

from xbnglab.cpe import add_cpe, cpe_sub, make_bridge, tcp_transfer
from xbnglab.fixture import LabSuite
from xbnglab.xbngd import UPLINK_NET4, UPLINK_NET6

# The access veths stay at 1500 here: the CPEs use 1492 (as PPPoE would).
CPE_MTU = 1492


class CpeTest(LabSuite):
    @classmethod
    def setUpLab(cls):
        x = cls.x
        x.start(max_subscribers=1024)
        cls.subs = [cpe_sub(i) for i in range(3)]
        cls.provision(cls.subs)
        x.resolve_uplink_neighbours()
        make_bridge(x)
        cls.cpes = []
        for i, s in enumerate(cls.subs):
            ns = add_cpe(x, i, s, CPE_MTU)
            cls.cpes.append(ns)

    def ping(self, ns, dst, v6=False):
        r = ns.exec(["ping", *(["-6"] if v6 else []), "-c3", "-i0.2", "-W2", dst], check=False)
        self.assertEqual(r.returncode, 0, f"ping {dst} from {ns.name}: {r.stdout}{r.stderr}")

    def test_ping_both_ways_v4_and_v6(self):
        for ns, s in zip(self.cpes, self.subs):
            self.ping(ns, UPLINK_NET4)
            self.ping(ns, UPLINK_NET6, v6=True)
            self.ping(self.x.net, s["ipv4"])
            self.ping(self.x.net, s["ipv6"], v6=True)
        st = self.x.stats()
        self.assertGreater(st.get("arp_reply", 0), 0)
        self.assertGreater(st.get("neighbour_advert", 0), 0)

    def tcp_transfer(self, server_ns, client_ns, server_addr, family, size=4 << 20):
        tcp_transfer(self, server_ns, client_ns, server_addr, family, size)

    def test_tcp_transfer_through_xbng(self):
        # CPE -> world and world -> CPE, IPv4 and IPv6
        self.tcp_transfer(self.x.net, self.cpes[0], UPLINK_NET4, socket.AF_INET)
        self.tcp_transfer(self.cpes[1], self.x.net, self.subs[1]["ipv4"], socket.AF_INET)
        self.tcp_transfer(self.x.net, self.cpes[2], UPLINK_NET6, socket.AF_INET6)
        st = self.x.stats()
        self.assertGreater(st.get("forward_upstream", 0), 1000)
        self.assertGreater(st.get("forward_downstream", 0), 1000)


if __name__ == "__main__":
    unittest.main()
