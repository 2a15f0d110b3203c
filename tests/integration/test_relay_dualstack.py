"""The DHCP relay dual stack, with real Kea: acc0 has dhcp = "relay" and
both relay.servers_v4 and relay.servers_v6; Debian's kea-dhcp4 and
kea-dhcp6 run in namespaces of their own behind the uplink (xbnglab.kea).
A real dhcpcd on a QinQ pair nobody provisioned does DHCPv4, IA_NA and
IA_PD at once: the DHCPACK and the REPLY reach xbngd together, from the
two relays' threads, and make one subscriber (origin relay) with the /32,
the /128 and the delegated prefix. Traffic flows both ways for each family,
both renewals reach Kea, and the end of one family's lease (the client's
RELEASE of that family alone, or its expiry) takes only that family's
routes away; the subscriber goes when no family is left (the other's
expiry or RELEASE, or dhcpcd releasing both).

The second suite relays DHCPv6 by multicast (servers_v6 = ["ff02::1:2"]):
kea-dhcp6 is on the uplink's own link, where it listens to
All_DHCP_Relay_Agents_and_Servers, and answers from its link-local address,
which xbngd learns as a server. The third sends to All_DHCP_Servers
(servers_v6 = ["ff05::1:3"]), which Kea does not join: a server of the
test's own in net joins it on the uplink's link, checks what arrives, and
answers.
"""
import contextlib
import ipaddress
import os
import signal
import socket
import struct

from xbnglab.cpe import cpe_sub
from xbnglab.kea import Kea4, Kea6
from xbnglab.lab import wait_for
from xbnglab.relay import RelaySuite, dhcpv6_options
from xbnglab.xbngd import GW4, GW6, UPLINK_DUT6, UPLINK_NET4, UPLINK_NET6

KEA4, KEA6 = "198.51.100.67", "2001:db8:ffff:60::3"  # Kea4(index 0), Kea6(index 0)
POOL4 = "100.64.50.10 - 100.64.50.200"
NA_POOL = "2001:db8:1000:1::/64"
PD_POOL = "2001:db8:2000::/40"
LIFETIME4, PREFERRED, VALID, T1, T2 = 40, 30, 40, 6, 18

CONFIG = f"""
[relay]
servers_v4 = ["{KEA4}"]
servers_v6 = ["{KEA6}"]
"""
CONFIG_MULTICAST = f"""
[relay]
servers_v4 = ["{KEA4}"]
servers_v6 = ["ff02::1:2"]
"""

# dhcpcd: DHCPv4 (no ARP probe of the offered address: nothing else is on
# the link), IA_NA and IA_PD, all at once.
DHCPCD_CONF = "noarp\nia_na 1\nia_pd 2\n"


def subnet4() -> list:
    return [{"id": 1, "subnet": "100.64.0.0/16", "pools": [{"pool": POOL4}],
             "option-data": [{"name": "routers", "data": GW4}]}]


def subnet6() -> list:
    return [{"id": 1, "subnet": "2001:db8:1000::/48",
             "pools": [{"pool": "2001:db8:1000:1::100 - 2001:db8:1000:1::1ff"}],
             "pd-pools": [{"prefix": "2001:db8:2000::", "prefix-len": 40, "delegated-len": 56}]}]


def dhcp_release(ciaddr: str, mac: str, server_id: str, client_id: bytes) -> bytes:
    """A DHCPRELEASE as a client sends it (RFC 2131 4.4.6): unicast, ciaddr
    set, the server identifier it was given and its client identifier."""
    pkt = struct.pack("!BBBBIHH4s4s4s4s16s64s128s", 1, 1, 6, 0, 0x5e1ea5e0, 0, 0,
                      socket.inet_aton(ciaddr), bytes(4), bytes(4), bytes(4),
                      bytes.fromhex(mac.replace(":", "")), b"", b"")
    opts = bytes([99, 130, 83, 99, 53, 1, 7, 54, 4]) + socket.inet_aton(server_id)
    if client_id:
        opts += bytes([61, len(client_id)]) + client_id
    return pkt + opts + bytes([255])


def dhcpv6_release(client_duid: bytes, server_duid: bytes, na: str, na_iaid: int, prefix: str,
                   pd_iaid: int) -> bytes:
    """A RELEASE of an IA_NA address and an IA_PD prefix as a client sends it
    (RFC 8415 18.2.7): its DUID, the server's, both IAs with lifetimes 0."""
    def opt(code, data):
        return struct.pack("!HH", code, len(data)) + data
    net = ipaddress.ip_network(prefix)
    iaaddr = opt(5, ipaddress.ip_address(na).packed + bytes(8))
    iaprefix = opt(26, bytes(8) + bytes([net.prefixlen]) + net.network_address.packed)
    return (bytes([8, 0x5e, 0x1e, 0xa5]) + opt(1, client_duid) + opt(2, server_duid) +
            opt(3, struct.pack("!III", na_iaid, 0, 0) + iaaddr) +
            opt(25, struct.pack("!III", pd_iaid, 0, 0) + iaprefix))


class DualStackSuite(RelaySuite):
    """Both servers started; the helpers of both suites (no tests)."""
    KEA6_ON_UPLINK = False

    @classmethod
    def setUpLab(cls):
        x = cls.x
        cls.kea4 = Kea4(x.lab, x.net, "kea4", 0, subnet4(), LIFETIME4, T1, T2)
        cls.kea6 = Kea6(x.lab, x.net, "kea6", 0, subnet6(), VALID, PREFERRED, T1, T2,
                        uplink=cls.KEA6_ON_UPLINK)
        assert cls.kea4.address == KEA4
        assert cls.KEA6_ON_UPLINK or cls.kea6.address == KEA6
        for k in (cls.kea4, cls.kea6):
            cls.addClassCleanup(k.stop)
            k.start()
        cls.cpes = {}

    # -- helpers ------------------------------------------------------------------
    def up(self, i):
        """CPE i with one running dhcpcd (DHCPv4, IA_NA 1, IA_PD 2), both
        families bound in xbngd: (ns, client, v4 address, /128, prefix, s)."""
        if i in self.cpes:
            return self.cpes[i]
        b, s = self.b, cpe_sub(i)
        ns = b.cpe(s)
        client = self.dhcpcd_with_duid(ns, s, [], DHCPCD_CONF)
        wait_for(lambda: b.addrs(ns) and self.na(ns), 40, 0.2,
                 f"an IPv4 address and an IA_NA address on {ns.name}")
        v4 = b.addrs(ns)[0].split("/")[0]
        na = self.na(ns)

        def both():
            sub = self.get(s) or {}
            return (sub.get("ipv4") and sub.get("ipv6") and sub.get("ipv6_prefixes") and
                    sub.get("lease_v4", {}).get("bound") and sub.get("lease_v6", {}).get("bound"))
        wait_for(both, 20, 0.2, "both families bound in xbngd")
        prefix = self.get(s)["ipv6_prefixes"][0]
        self.cpes[i] = (ns, client, v4, na, prefix, s)
        return self.cpes[i]

    def lines4(self, addr):
        return [ln for ln in self.kea4.leases() if ln.get("address") == addr]

    def lines6(self, addr):
        return [ln for ln in self.kea6.leases() if ln.get("address") == addr]

    @staticmethod
    def kill(client):
        """SIGKILL to the client's process group: dhcpcd and its privilege
        separation helpers (which would hold its sockets), no RELEASE."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(client.pid, signal.SIGKILL)
        client.wait(10)

    def release4(self, ns, s, v4):
        """The client's DHCPRELEASE of its IPv4 address alone (RFC 2131
        4.4.6: unicast to the server identifier it holds, the gateway), with
        the client identifier Kea bound the lease to."""
        cid = self.lines4(v4)[-1].get("client_id", "")
        release = dhcp_release(v4, s["mac"], GW4, bytes.fromhex(cid.replace(":", "")))
        with ns.entered():
            sk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sk.bind((v4, 68))
            sk.sendto(release, (GW4, 67))
        finally:
            sk.close()

    def release6(self, ns, na, prefix):
        """The client's RELEASE of its /128 and its prefix alone, to
        All_DHCP_Relay_Agents_and_Servers from its link-local address."""
        na_line, pd_line = self.lines6(na)[-1], self.lines6(prefix.split("/")[0])[-1]
        release = dhcpv6_release(bytes.fromhex(na_line["duid"].replace(":", "")),
                                 self.kea6_duid(), na, int(na_line["iaid"]), prefix,
                                 int(pd_line["iaid"]))
        ifindex = ns.ifindex("c0")
        with ns.entered():
            sk = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        def bound():
            try:
                sk.bind(("::", 546, 0, ifindex))
                return True
            except OSError:
                return False
        try:
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # dhcpcd's helpers hold port 546 a moment after they are killed.
            wait_for(bound, 15, 0.2, "port 546 free on the CPE")
            sk.sendto(release, ("ff02::1:2", 547, 0, ifindex))
        finally:
            sk.close()

    def kea6_duid(self) -> bytes:
        """Kea6(index 0)'s server DUID: DUID-EN, enterprise 32473, "kea" 00."""
        return struct.pack("!HI", 2, 32473) + bytes.fromhex("6b656100")

    def routes_up(self, ns, v4, na, prefix):
        """Default routes of both families; traffic both ways for each."""
        b = self.b
        # (Pings only: dhcpcd's routes need no MTU clamp for two tags.)
        wait_for(lambda: b.default_via(ns) == GW4, 10, 0.2, "IPv4 default route via the gateway")
        b.wait_dad(ns)
        wait_for(lambda: self.default6(ns) == "fe80::1", 30, 0.3, "IPv6 default route via fe80::1")
        host = self.host_in_prefix(ns, prefix)
        self.ping(ns, UPLINK_NET4)
        self.ping(self.x.net, v4)
        self.ping(ns, UPLINK_NET6)
        self.ping(self.x.net, na)
        self.ping(self.x.net, host)
        self.ping(ns, UPLINK_NET6, src=host)
        return host



class RelayDualStackTest(DualStackSuite):
    DHCP_TOML = CONFIG

    def test_1_one_subscriber_with_both_families_and_traffic(self):
        ns, _, v4, na, prefix, s = self.up(0)
        sub = self.get(s)
        self.assertEqual(sub.get("origin"), "ORIGIN_RELAY", sub)
        self.assertEqual(sub["ipv4"], v4)
        self.assertEqual(sub["ipv6"], na)
        self.assertEqual(sub["ipv6_prefixes"], [prefix])
        lo, hi = (ipaddress.ip_address(a) for a in POOL4.split(" - "))
        self.assertTrue(lo <= ipaddress.ip_address(v4) <= hi, v4)
        self.assertIn(ipaddress.ip_address(na), ipaddress.ip_network(NA_POOL))
        self.assertTrue(ipaddress.ip_network(prefix).subnet_of(ipaddress.ip_network(PD_POOL)))
        self.assertEqual(sub["lease_v4"].get("server"), KEA4, sub)
        self.assertEqual(sub["lease_v6"].get("server"), KEA6, sub)
        self.assertIn(prefix, sub["lease_v6"].get("prefixes", []))
        self.assertTrue(self.lines4(v4), "kea-dhcp4's lease file has the /32")
        self.assertTrue(self.lines6(na), "kea-dhcp6's lease file has the /128")
        self.assertTrue(self.lines6(prefix.split("/")[0]), "kea-dhcp6's lease file has the prefix")
        self.routes_up(ns, v4, na, prefix)
        st = self.x.stats()
        for r in ("relay4_bound", "relay6_bound"):
            self.assertGreaterEqual(st.get(r, 0), 1, r)
        for r in ("relay4_ack_refused", "relay6_reply_refused"):
            self.assertEqual(st.get(r, 0), 0, r)

    def test_2_renewals_of_both_reach_kea_and_extend_both_leases(self):
        ns, _, v4, na, prefix, s = self.up(0)
        first = self.get(s)
        n4, n6 = len(self.lines4(v4)), len(self.lines6(na))
        wait_for(lambda: len(self.lines4(v4)) > n4, 3 * T1, 0.5, "a DHCPv4 renewal in Kea's file")
        wait_for(lambda: len(self.lines6(na)) > n6, 3 * T1, 0.5, "a DHCPv6 renewal in Kea's file")

        def renewed(fam):
            return int(self.get(s)[fam]["bound_unix"]) > int(first[fam]["bound_unix"])
        wait_for(lambda: renewed("lease_v4") and renewed("lease_v6"), 3 * T1, 0.5,
                 "both of xbngd's leases renewed")
        later = self.get(s)
        for fam in ("lease_v4", "lease_v6"):
            self.assertGreater(int(later[fam]["expires_unix"]), int(first[fam]["expires_unix"]))
        self.assertEqual((later["ipv4"], later["ipv6"], later["ipv6_prefixes"]),
                         (v4, na, [prefix]))

    def test_3_release_of_ipv4_keeps_ipv6_until_its_lease_ends(self):
        ns, client, v4, na, prefix, s = self.up(0)
        host = self.host_in_prefix(ns, prefix)
        # Killed: no renewal of either family from now on. The client's
        # DHCPRELEASE of its IPv4 address alone (RFC 2131 4.4.6: unicast to
        # the server identifier it holds, the gateway), with the client
        # identifier Kea bound the lease to.
        self.kill(client)
        self.release4(ns, s, v4)
        wait_for(lambda: not (self.get(s) or {}).get("ipv4"), 15, 0.2, "the /32 removed on RELEASE")
        sub = self.get(s)
        self.assertIsNotNone(sub, "the subscriber stays: its IPv6 lease is bound")
        self.assertEqual((sub.get("ipv6"), sub.get("ipv6_prefixes")), (na, [prefix]))
        self.assertFalse(sub.get("lease_v4", {}).get("bound"), sub)
        self.assertTrue(sub["lease_v6"].get("bound"), sub)
        wait_for(lambda: "DHCP4_RELEASE" in self.kea4.read_log(), 10, 0.2, "Kea saw the RELEASE")
        self.ping(self.x.net, v4, ok=False)
        self.ping(self.x.net, na)
        self.ping(self.x.net, host)
        self.ping(ns, UPLINK_NET6, src=host)
        # The IPv6 lease ends unrenewed: no family is left, the subscriber goes.
        wait_for(lambda: self.get(s) is None, VALID + 15, 0.5, "the subscriber removed on expiry")
        self.ping(self.x.net, na, ok=False)
        self.ping(self.x.net, host, ok=False)
        del self.cpes[0]

    def test_4_release_of_both_removes_the_subscriber(self):
        ns, client, v4, na, prefix, s = self.up(1)
        host = self.routes_up(ns, v4, na, prefix)
        before4 = self.x.stats().get("relay4_ended", 0)
        before6 = self.x.stats().get("relay6_ended", 0)
        logged4 = self.kea4.read_log().count("DHCP4_RELEASE")
        logged6 = self.kea6.read_log().count("DHCP6_RELEASE")
        # SIGALRM: dhcpcd releases every lease (both relayed) and exits.
        client.send_signal(signal.SIGALRM)
        wait_for(lambda: self.get(s) is None, 15, 0.2, "the subscriber removed on RELEASE")
        st = self.x.stats()
        self.assertGreater(st.get("relay4_ended", 0), before4)
        self.assertGreater(st.get("relay6_ended", 0), before6)
        for dst in (v4, na, host):
            self.ping(self.x.net, dst, ok=False)
        wait_for(lambda: self.kea4.read_log().count("DHCP4_RELEASE") > logged4, 10, 0.2,
                 "kea-dhcp4 saw the RELEASE")
        wait_for(lambda: self.kea6.read_log().count("DHCP6_RELEASE") > logged6, 10, 0.2,
                 "kea-dhcp6 saw the RELEASE")
        del self.cpes[1]

    def test_5_release_of_ipv6_keeps_ipv4_then_ipv4_release_removes_it(self):
        ns, client, v4, na, prefix, s = self.up(2)
        host = self.routes_up(ns, v4, na, prefix)
        # Killed (no renewal, no RELEASE of its own); the client's RELEASE
        # of its /128 and prefix alone.
        self.kill(client)
        logged6 = self.kea6.read_log().count("DHCP6_RELEASE")
        self.release6(ns, na, prefix)
        wait_for(lambda: not (self.get(s) or {}).get("ipv6"), 15, 0.2,
                 "the /128 removed on RELEASE")
        sub = self.get(s)
        self.assertIsNotNone(sub, "the subscriber stays: its IPv4 lease is bound")
        self.assertFalse(sub.get("ipv6_prefixes"), sub)
        self.assertEqual(sub.get("ipv4"), v4)
        self.assertTrue(sub["lease_v4"].get("bound"), sub)
        self.assertFalse(sub.get("lease_v6", {}).get("bound"), sub)
        wait_for(lambda: self.kea6.read_log().count("DHCP6_RELEASE") > logged6, 10, 0.2,
                 "kea-dhcp6 released them")
        for dst in (na, host):
            self.ping(self.x.net, dst, ok=False)
        self.ping(self.x.net, v4)
        self.ping(ns, UPLINK_NET4)
        # The IPv4 RELEASE leaves nothing: the subscriber goes at once.
        self.release4(ns, s, v4)
        wait_for(lambda: self.get(s) is None, 15, 0.2, "the subscriber removed on RELEASE")
        self.ping(self.x.net, v4, ok=False)
        del self.cpes[2]


class RelayDualStackMulticastTest(DualStackSuite):
    DHCP_TOML = CONFIG_MULTICAST
    KEA6_ON_UPLINK = True

    def test_1_relay_forwards_multicast_on_the_uplink_reach_kea(self):
        before = self.x.stats().get("relay6_forwarded", 0)
        ns, _, v4, na, prefix, s = self.up(0)
        sub = self.get(s)
        self.assertEqual(sub.get("origin"), "ORIGIN_RELAY", sub)
        self.assertEqual((sub["ipv4"], sub["ipv6"], sub["ipv6_prefixes"]), (v4, na, [prefix]))
        self.assertIn(ipaddress.ip_address(na), ipaddress.ip_network(NA_POOL))
        # The server is the one that answered: Kea, from its link-local address.
        self.assertEqual(sub["lease_v6"].get("server"), self.kea6.link_local(), sub)
        self.assertEqual(sub["lease_v4"].get("server"), KEA4, sub)
        self.assertTrue(self.lines6(na), "kea-dhcp6's lease file has the /128")
        # Kea got them on the group, from the uplink's link-local address.
        log = self.kea6.read_log()
        self.assertIn("ff02::1:2", log)
        self.routes_up(ns, v4, na, prefix)
        st = self.x.stats()
        # One Relay-Forward per client message (SOLICIT, REQUEST at least),
        # every one answered: no server missed one.
        self.assertGreaterEqual(st.get("relay6_forwarded", 0) - before, 2, st)
        self.assertEqual(st.get("relay6_reply_unknown_server", 0), 0, st)
        self.assertEqual(st.get("relay6_server_misses", 0), 0, st)
        # A renewal goes the same way.
        n6 = len(self.lines6(na))
        wait_for(lambda: len(self.lines6(na)) > n6, 3 * T1, 0.5, "a DHCPv6 renewal in Kea's file")


class RelayAllDhcpServersTest(RelaySuite):
    """servers_v6 = ["ff05::1:3"]; DHCPv4 is xbngd's own (no servers_v4)."""
    DHCP_TOML = '[relay]\nservers_v6 = ["ff05::1:3"]\n'

    def test_1_relay_forward_to_all_dhcp_servers_by_the_uplink(self):
        x = self.x
        with x.net.entered():
            sk = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        try:
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sk.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
            sk.bind(("::", 547))
            sk.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP,
                          socket.inet_pton(socket.AF_INET6, "ff05::1:3") +
                          struct.pack("@I", x.net.ifindex("n0")))
            sk.settimeout(30)
            s = cpe_sub(0)
            ns = self.b.cpe(s)
            self.dhcpcd_with_duid(ns, s, ["-6"], "ia_na 1\n")
            data, anc, _, src = sk.recvmsg(4096, socket.CMSG_SPACE(4))
            hops = [struct.unpack("@i", d)[0] for lvl, typ, d in anc
                    if lvl == socket.IPPROTO_IPV6 and typ == socket.IPV6_HOPLIMIT]
            # A Relay-Forward from the uplink's global address (site scope),
            # hop limit 8, for the CPE's port and tags.
            self.assertEqual(data[0], 12, data.hex())
            self.assertEqual(src[0], UPLINK_DUT6)
            self.assertEqual(hops, [8])
            self.assertEqual(ipaddress.ip_address(data[2:18]), ipaddress.ip_address(GW6))
            opts = dhcpv6_options(data[34:])
            self.assertEqual(opts.get(18), b"acc0:100:1")
            inner = opts[9]
            self.assertEqual(inner[0], 1, "a SOLICIT inside")
            # Answered from net's address (no configured server): accepted by
            # the uplink, its ADVERTISE forwarded to the CPE, the server learned.
            before = x.stats()
            adv = bytes([2]) + inner[1:4]
            reply = (bytes([13, 0]) + data[2:34] + struct.pack("!HH", 18, len(opts[18])) +
                     opts[18] + struct.pack("!HH", 9, len(adv)) + adv)
            sk.sendto(reply, (src[0], 547))
            wait_for(lambda: x.stats().get("relay6_replies_forwarded", 0) >
                     before.get("relay6_replies_forwarded", 0), 10, 0.2,
                     "the ADVERTISE forwarded to the CPE")
            st = x.stats()
            for r in ("relay6_reply_unknown_server", "relay6_reply_unknown_client"):
                self.assertEqual(st.get(r, 0), before.get(r, 0), r)
            wait_for(lambda: f"relay6: server {UPLINK_NET6} answers" in x.read_log(), 5, 0.2,
                     "the answering server learned")
        finally:
            sk.close()


if __name__ == "__main__":
    import unittest
    unittest.main()
