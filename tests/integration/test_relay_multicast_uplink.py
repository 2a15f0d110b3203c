"""relay.multicast_uplink: with two uplinks and servers_v6 = ["ff05::1:3"]
(All_DHCP_Servers), the DHCPv6 relay sends its Relay-Forwards out of the
uplink the setting names, the second one here (upl1), not the first (upl0).
A listener of the test's own joins the group behind each uplink: the one
behind upl1 (namespace `far`) gets the Relay-Forward of a CPE's SOLICIT,
from upl1's address, and answers; the ADVERTISE reaches the CPE on its tags.
The one behind upl0 (`net`) gets nothing, and the same answer sent from
there, by the other uplink, is dropped (relay6_reply_unknown_server).
"""
import ipaddress
import os
import select
import socket
import struct

from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from xbnglab.cpe import cpe_sub
from xbnglab.fixture import LabSuite
from xbnglab.frames import qinq, tags
from xbnglab.lab import recv_frames, wait_for
from xbnglab.relay import dhcpv6_options
from xbnglab.xbngd import GW6, UPLINK_DUT6, find_pass_obj

UPL1_DUT6, UPL1_FAR6 = "2001:db8:ffff:71::1", "2001:db8:ffff:71::2"
GROUP = "ff05::1:3"
CONFIG = f"""[ports]
access = [{{ name = "acc0", dhcp = "relay" }}]
[relay]
servers_v6 = ["{GROUP}"]
multicast_uplink = "upl1"
"""
CPE_LL = "fe80::cc:1"
SOLICIT = bytes.fromhex("01 5a5a5a 0008 0002 0000 0001 000a 00030001 02cc00640001"
                        .replace(" ", ""))


def group_listener(ns, ifname: str) -> socket.socket:
    """A UDP socket on port 547 in ns that joined GROUP on ifname."""
    with ns.entered():
        sk = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sk.bind(("::", 547))
    sk.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP,
                  socket.inet_pton(socket.AF_INET6, GROUP) + struct.pack("@I", ns.ifindex(ifname)))
    return sk


class RelayMulticastUplinkTest(LabSuite):
    @classmethod
    def setUpLab(cls):
        x = cls.x
        lab = x.lab
        # The second uplink, and the namespace behind it.
        cls.far = far = lab.netns("far")
        lab.veth(x.dut, "upl1", far, "n1")
        lab.attach_pass(far, "n1", find_pass_obj())
        far.exec(["ethtool", "-K", "n1", "tx", "off"])
        x.dut.ip("-6", "addr", "add", f"{UPL1_DUT6}/64", "dev", "upl1", "nodad")
        far.ip("-6", "addr", "add", f"{UPL1_FAR6}/64", "dev", "n1", "nodad")
        conf = os.path.join(lab.rundir, "relay.toml")
        with open(conf, "w") as f:
            f.write(CONFIG)
        x.start(max_subscribers=1024, extra=["--uplink", "upl1", "--config", conf])
        x.resolve_uplink_neighbours()
        cls.near_sk = group_listener(x.net, "n0")
        cls.far_sk = group_listener(far, "n1")
        cls.addClassCleanup(cls.near_sk.close)
        cls.addClassCleanup(cls.far_sk.close)
        cls.sub_sock = x.sub.packet_socket("s0")
        cls.addClassCleanup(cls.sub_sock.close)

    def solicit(self, s: dict) -> None:
        """The CPE's SOLICIT, on its tags, from its link-local address to
        All_DHCP_Relay_Agents_and_Servers."""
        f = (qinq(s, "33:33:00:01:00:02") / IPv6(src=CPE_LL, dst="ff02::1:2", hlim=1) /
             UDP(sport=546, dport=547) / Raw(SOLICIT))
        self.sub_sock.send(bytes(f))

    def advertise_on_s0(self, s: dict, timeout: float = 10):
        """The ADVERTISE xbngd sends the CPE (UDP 547 -> 546 on its tags), or None."""
        def match(frame):
            if tags(frame) != [(0x88A8, s["outer_vlan"]), (0x8100, s["inner_vlan"])]:
                return False
            p = Ether(frame)
            return p.haslayer(UDP) and p[UDP].sport == 547 and p[UDP].dport == 546
        got = recv_frames(self.sub_sock, timeout, want=1, match=match)
        return Ether(got[0]) if got else None

    def test_1_relay_forward_leaves_by_the_named_uplink_only(self):
        x, s = self.x, cpe_sub(0)
        self.solicit(s)
        self.far_sk.settimeout(15)
        data, src = self.far_sk.recvfrom(4096)
        # A Relay-Forward from upl1's global address (the group is site
        # scoped), for the CPE's port and tags, the SOLICIT inside.
        self.assertEqual(data[0], 12, data.hex())
        self.assertEqual(src[0], UPL1_DUT6)
        self.assertEqual(ipaddress.ip_address(data[2:18]), ipaddress.ip_address(GW6))
        self.assertEqual(ipaddress.ip_address(data[18:34]), ipaddress.ip_address(CPE_LL))
        opts = dhcpv6_options(data[34:])
        self.assertEqual(opts.get(18), f"acc0:{s['outer_vlan']}:{s['inner_vlan']}".encode())
        self.assertEqual(opts[9], SOLICIT)
        # Nothing by the first uplink.
        r, _, _ = select.select([self.near_sk], [], [], 1.0)
        self.assertEqual(r, [], "a Relay-Forward reached the listener behind upl0")

        advertise = bytes([2]) + SOLICIT[1:]
        reply = (bytes([13, 0]) + data[2:34] + struct.pack("!HH", 18, len(opts[18])) + opts[18] +
                 struct.pack("!HH", 9, len(advertise)) + advertise)
        # The answer from behind the other uplink is not taken.
        before = x.stats()
        self.near_sk.sendto(reply, (UPLINK_DUT6, 547))
        wait_for(lambda: x.stats().get("relay6_reply_unknown_server", 0) >
                 before.get("relay6_reply_unknown_server", 0), 10, 0.2,
                 "the answer by upl0 dropped as from an unknown server")
        self.assertIsNone(self.advertise_on_s0(s, timeout=0.5))
        # From behind upl1: forwarded to the CPE, the server learned.
        self.far_sk.sendto(reply, (src[0], 547))
        adv = self.advertise_on_s0(s)
        self.assertIsNotNone(adv, "no ADVERTISE reached the CPE")
        self.assertEqual(bytes(adv[UDP].payload), advertise)
        self.assertEqual(adv[IPv6].dst, CPE_LL)
        st = x.stats()
        self.assertEqual(st.get("relay6_replies_forwarded", 0),
                         before.get("relay6_replies_forwarded", 0) + 1, st)
        self.assertEqual(st.get("relay6_reply_unknown_client", 0),
                         before.get("relay6_reply_unknown_client", 0))
        wait_for(lambda: f"relay6: server {UPL1_FAR6} answers" in x.read_log(), 5, 0.2,
                 "the server behind upl1 learned")
        self.assertIn("multicast out of upl1", x.read_log())


if __name__ == "__main__":
    import unittest
    unittest.main()
