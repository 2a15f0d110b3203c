"""Scenario 3, real transport: real kernel stacks on both ends.

Each emulated CPE is a namespace whose veth pushes and pops its subscriber's
two tags with TC BPF (cpe_egress/cpe_ingress.bpf.c; the kernel has no VLAN
module); the CPEs are bridged onto the access veth in `sub`. The CPE kernels
resolve the gateway with real ARP and ND (answered by xbng in XDP), then ping
both ways and move a TCP stream whose bytes are checked end to end.
"""
import hashlib
import os
import socket
import threading
import unittest

from xbng_lab import GW4, UPLINK_NET4, UPLINK_NET6, XbngLab, plan

# Access MTU is 1500 and two tags must fit: the CPEs use 1492 (as PPPoE would).
CPE_MTU = 1492


def cpe_sub(i: int) -> dict:
    s = plan(i, c_per_s=2)
    s["mac"] = "02:cc:%02x:%02x:%02x:%02x" % (s["outer_vlan"] >> 8, s["outer_vlan"] & 0xFF,
                                               s["inner_vlan"] >> 8, s["inner_vlan"] & 0xFF)
    return s


def make_cpes(x: XbngLab, subs) -> list:
    """One CPE namespace per subscriber, bridged onto the access link: a veth
    whose TC programs push/pop the subscriber's tags, its addresses, default
    routes via the gateway. Returns the namespaces (x's lab removes them)."""
    x.sub.ip("link", "add", "br0", "type", "bridge")
    x.sub.ip("link", "set", "s0", "master", "br0")
    x.sub.ip("link", "set", "br0", "up")
    x.sub.sysctl("net.ipv6.conf.br0.disable_ipv6", "1")
    # The bridge moves a frame's outer tag into skb metadata on receive;
    # with TX VLAN offload off, s0 writes it back into the frame before
    # xbng's XDP program (which sees only frame bytes) gets it.
    x.sub.exec(["ethtool", "-K", "s0", "txvlan", "off", "tx-vlan-stag-hw-insert", "off"])
    cpes = []
    for i, s in enumerate(subs):
        ns = x.lab.netns(f"cpe{i}")
        x.lab.veth(ns, "c0", x.sub, f"cpe{i}")
        x.sub.ip("link", "set", f"cpe{i}", "master", "br0")
        ns.ip("link", "set", "c0", "address", s["mac"])
        # veth hands TCP/UDP to its peer with the checksum still to be
        # filled in (CHECKSUM_PARTIAL); XDP forwards frame bytes and
        # that promise is lost on the way. Real NICs fill it; here the
        # kernels must.
        ns.exec(["ethtool", "-K", "c0", "tx", "off"])
        ns.exec(["tc", "qdisc", "add", "dev", "c0", "clsact"])
        ns.exec(["tc", "filter", "add", "dev", "c0", "egress", "bpf", "da", "obj",
                 os.environ["XBNG_CPE_EGRESS_OBJ"], "sec", "tc"])
        ns.exec(["tc", "filter", "add", "dev", "c0", "ingress", "bpf", "da", "obj",
                 os.environ["XBNG_CPE_INGRESS_OBJ"], "sec", "tc"])
        ns.ip("addr", "add", f"{s['ipv4']}/32", "dev", "c0")
        ns.ip("route", "add", GW4, "dev", "c0")
        ns.ip("route", "add", "default", "via", GW4, "dev", "c0", "mtu", str(CPE_MTU),
              "advmss", str(CPE_MTU - 40))
        ns.ip("-6", "addr", "add", f"{s['ipv6']}/128", "dev", "c0", "nodad")
        ns.ip("-6", "route", "add", "default", "via", "fe80::1", "dev", "c0", "mtu",
              str(CPE_MTU), "advmss", str(CPE_MTU - 60))
        cpes.append(ns)
    return cpes


class CpeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.x = x = XbngLab()
        try:
            x.start(max_subscribers=1024)
            cls.subs = [cpe_sub(i) for i in range(3)]
            out, _ = x.import_subs(cls.subs)
            assert int(out["applied"]) == 3, out
            x.resolve_uplink_neighbours()
            cls.cpes = make_cpes(x, cls.subs)
        except BaseException:
            x.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.x.close()

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
        data = os.urandom(size)
        with server_ns.entered():
            srv = socket.socket(family, socket.SOCK_STREAM)
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind((server_addr, 0))
            srv.listen(1)
        port = srv.getsockname()[1]
        received = hashlib.sha256()
        count = [0]

        def serve():
            srv.settimeout(20)
            conn, _ = srv.accept()
            conn.settimeout(20)
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                received.update(chunk)
                count[0] += len(chunk)
            conn.close()
        t = threading.Thread(target=serve)
        t.start()
        with client_ns.entered():
            cli = socket.socket(family, socket.SOCK_STREAM)
        cli.settimeout(20)
        cli.connect((server_addr, port))
        cli.sendall(data)
        cli.close()
        t.join(30)
        srv.close()
        self.assertEqual(count[0], size)
        self.assertEqual(received.hexdigest(), hashlib.sha256(data).hexdigest())

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
