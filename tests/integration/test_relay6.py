"""The DHCPv6 relay with real Kea: acc0 has dhcp = "relay" and
relay.servers_v6; Debian's kea-dhcp6 runs in a namespace of its own behind
the uplink, with memfile leases and a config the test writes: one subnet
(picked by the Relay-Forward's link-address, the port's IPv6 gateway), an
IA_NA pool, an IA_PD pool, and a reservation by DUID. Real dhcpcds (IA_NA +
IA_PD) on QinQ pairs nobody provisioned get their leases from Kea through
xbngd, which creates their subscribers (origin relay) from the REPLYs.

Both are in servers_v6, with a second kea-dhcp6 serving the same subnet
from pools of its own. It stays stopped until the last test, so every test
runs with one of the two servers silent; the last test stops the first and
starts the second: new clients get their leases from it, and xbngd counts
the stopped server's misses and marks it down. (Both never run at once:
dhcpcd takes the first ADVERTISE, so which server a lease came from would
be chance.)
"""
import ipaddress
import signal
import socket

from xbnglab.cpe import cpe_sub
from xbnglab.kea import Kea6
from xbnglab.lab import wait_for
from xbnglab.relay import RelaySuite, duid_of
from xbnglab.xbngd import GW6, UPLINK_DUT6, UPLINK_NET6

KEA6 = "2001:db8:ffff:60::3"  # Kea6(index 0)
KEA6B = "2001:db8:ffff:61::3"  # Kea6(index 1)
NA_POOL = "2001:db8:1000:1::/64"
PD_POOL = "2001:db8:2000::/40"
RESERVED_NA, RESERVED_PD = "2001:db8:1000:1::77", "2001:db8:2000:7700::/56"
PREFERRED, VALID, T1, T2 = 30, 40, 6, 18

# No servers_v4: acc0 relays DHCPv6 only (its DHCPv4 would be xbngd's own).
CONFIG = f"""
[relay]
servers_v6 = ["{KEA6}", "{KEA6B}"]
"""


def subnet() -> list:
    return [{
        "id": 1, "subnet": "2001:db8:1000::/48",
        "pools": [{"pool": "2001:db8:1000:1::100 - 2001:db8:1000:1::1ff"}],
        "pd-pools": [{"prefix": "2001:db8:2000::", "prefix-len": 40, "delegated-len": 56}],
        "reservations": [{"duid": duid_of(cpe_sub(1)["mac"]), "ip-addresses": [RESERVED_NA],
                          "prefixes": [RESERVED_PD]}],
    }]


NA_POOL_B = "2001:db8:1000:1::200/120"
PD_POOL_B = "2001:db8:2100::/40"


def subnet_b() -> list:
    """The second server: the same subnet (by link-address), pools of its own."""
    return [{
        "id": 1, "subnet": "2001:db8:1000::/48",
        "pools": [{"pool": "2001:db8:1000:1::200 - 2001:db8:1000:1::2ff"}],
        "pd-pools": [{"prefix": "2001:db8:2100::", "prefix-len": 40, "delegated-len": 56}],
    }]


class Relay6Test(RelaySuite):
    DHCP_TOML = CONFIG

    @classmethod
    def setUpLab(cls):
        x = cls.x
        cls.kea = Kea6(x.lab, x.net, "kea6", 0, subnet(), VALID, PREFERRED, T1, T2)
        assert cls.kea.address == KEA6
        cls.addClassCleanup(cls.kea.stop)
        cls.kea.start()
        cls.kea_b = Kea6(x.lab, x.net, "kea6b", 1, subnet_b(), VALID, PREFERRED, T1, T2)
        assert cls.kea_b.address == KEA6B
        cls.addClassCleanup(cls.kea_b.stop)  # started by the last test
        cls.cpes = {}

    # -- helpers ------------------------------------------------------------------
    def up(self, i):
        """CPE i with a running dhcpcd (IA_NA 1, IA_PD 2), its /128 and its
        delegated prefix: (ns, client, address, prefix, s)."""
        if i in self.cpes:
            return self.cpes[i]
        b, s = self.b, cpe_sub(i)
        ns = b.cpe(s)
        client = self.dhcpcd_with_duid(ns, s, ["-6"], "ia_na 1\nia_pd 2\n")
        wait_for(lambda: self.na(ns), 40, 0.2, f"an IA_NA address on {ns.name}")
        addr = self.na(ns)
        wait_for(lambda: (self.get(s) or {}).get("ipv6_prefixes"), 20, 0.2,
                 "the delegated prefix in xbngd")
        prefix = self.get(s)["ipv6_prefixes"][0]
        self.cpes[i] = (ns, client, addr, prefix, s)
        return self.cpes[i]

    def kea_lines(self, addr):
        return [ln for ln in self.kea.leases() if ln.get("address") == addr]

    # -- tests --------------------------------------------------------------------
    def test_1_lease_from_kea_becomes_a_subscriber_and_traffic_flows(self):
        ns, _, addr, prefix, s = self.up(0)
        self.assertIn(ipaddress.ip_address(addr), ipaddress.ip_network(NA_POOL))
        self.assertTrue(ipaddress.ip_network(prefix).subnet_of(ipaddress.ip_network(PD_POOL)),
                        prefix)
        self.assertEqual(ipaddress.ip_network(prefix).prefixlen, 56)
        sub = self.get(s)
        self.assertEqual(sub.get("origin"), "ORIGIN_RELAY", sub)
        self.assertEqual(sub["ipv6"], addr)
        lease = sub.get("lease_v6", {})
        self.assertTrue(lease.get("bound"), sub)
        self.assertEqual(lease.get("server"), KEA6)
        self.assertIn(prefix, lease.get("prefixes", []))
        self.assertTrue(self.kea_lines(addr), "Kea's lease file has the address")
        self.assertTrue(self.kea_lines(prefix.split("/")[0]), "Kea's lease file has the prefix")
        # Kea picked its subnet by the link-address (the port's gateway) and
        # saw the Interface-ID of the CPE's port and tags.
        log = self.kea.read_log().lower()
        iid = b"acc0:100:1"
        self.assertTrue(iid.hex() in log or iid.hex(":") in log, "Interface-ID in Kea's log")
        # The CPE hears RAs now that it is a subscriber: its default route.
        self.b.wait_dad(ns)
        wait_for(lambda: self.default6(ns) == "fe80::1", 30, 0.3, "IPv6 default route via fe80::1")
        self.ping(ns, UPLINK_NET6)
        self.ping(self.x.net, addr)
        host = self.host_in_prefix(ns, prefix)
        self.ping(self.x.net, host)
        self.ping(ns, UPLINK_NET6, src=host)
        st = self.x.stats()
        self.assertGreaterEqual(st.get("relay6_bound", 0), 1, st)
        self.assertGreater(st.get("punt_unknown_dhcpv6", 0), 0, st)
        self.assertEqual(st.get("relay6_reply_refused", 0), 0, st)
        # The second server is stopped: the SOLICIT it left unanswered is a miss.
        wait_for(lambda: self.x.stats().get("relay6_server_misses", 0) >= 1, 10, 0.3,
                 "relay6_server_misses")

    def test_2_reserved_cpe_gets_its_reserved_address_and_prefix(self):
        ns, _, addr, prefix, s = self.up(1)
        self.assertEqual(addr, RESERVED_NA)
        self.assertEqual(prefix, RESERVED_PD)
        self.assertEqual(self.get(s)["ipv6"], RESERVED_NA)
        self.b.wait_dad(ns)
        wait_for(lambda: self.default6(ns) == "fe80::1", 30, 0.3, "IPv6 default route via fe80::1")
        self.ping(ns, UPLINK_NET6)
        self.ping(self.x.net, self.host_in_prefix(ns, prefix))

    def test_3_renewal_reaches_kea_and_extends_the_lease(self):
        ns, _, addr, _, s = self.up(0)
        first = self.get(s)["lease_v6"]
        n = len(self.kea_lines(addr))
        # T1 is a few seconds: the RENEW is relayed by xbngd to Kea.
        wait_for(lambda: len(self.kea_lines(addr)) > n, 3 * T1, 0.5, "a renewal in Kea's file")
        wait_for(lambda: int(self.get(s)["lease_v6"]["bound_unix"]) > int(first["bound_unix"]),
                 3 * T1, 0.5, "xbngd's lease renewed")
        later = self.get(s)["lease_v6"]
        self.assertGreater(int(later["expires_unix"]), int(first["expires_unix"]))
        self.assertEqual(self.get(s)["ipv6"], addr)

    def test_4_reply_from_a_host_that_is_no_server_is_dropped(self):
        ns, _, addr, _, s = self.up(0)
        before = self.x.stats().get("relay6_reply_unknown_server", 0)
        with self.x.net.entered():
            sk = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        try:
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sk.bind((UPLINK_NET6, 547))
            # A Relay-Reply naming acc0:100:1 around a REPLY with no options.
            iid = b"acc0:100:1"
            inner = bytes([7, 0x12, 0x34, 0x56])
            pkt = (bytes([13, 0]) + ipaddress.ip_address(GW6).packed + bytes(16) +
                   bytes([0, 18, 0, len(iid)]) + iid + bytes([0, 9, 0, len(inner)]) + inner)
            sk.sendto(pkt, (UPLINK_DUT6, 547))
        finally:
            sk.close()
        wait_for(lambda: self.x.stats().get("relay6_reply_unknown_server", 0) > before, 10, 0.2,
                 "relay6_reply_unknown_server")
        self.assertEqual(self.get(s)["ipv6"], addr, "the forged reply changed nothing")

    def test_4b_spoofed_source_is_dropped(self):
        ns, _, addr, _, s = self.up(0)
        before = self.x.stats().get("drop_spoofed_ipv6", 0)
        spoof = "2001:db8:1000:1::9999"  # in Kea's pool, never leased to this CPE
        ns.ip("-6", "addr", "add", f"{spoof}/128", "dev", "c0", "nodad")
        try:
            self.ping(ns, UPLINK_NET6, ok=False, src=spoof)
        finally:
            ns.ip("-6", "addr", "del", f"{spoof}/128", "dev", "c0")
        self.assertGreaterEqual(self.x.stats().get("drop_spoofed_ipv6", 0), before + 2)

    def test_5_restart_mid_lease_keeps_the_session_and_relays_the_renewal(self):
        ns, _, addr, prefix, s = self.up(0)
        self.b.restart()
        sub = self.get(s)
        self.assertIsNotNone(sub, "the subscriber survived the restart")
        self.assertEqual(sub["ipv6"], addr)
        self.assertEqual(sub.get("origin"), "ORIGIN_RELAY")
        self.assertIn(prefix, sub.get("ipv6_prefixes", []))
        self.assertTrue(sub["lease_v6"].get("bound"), sub)
        n = len(self.kea_lines(addr))
        wait_for(lambda: self.x.stats().get("relay6_bound", 0) >= 1, 3 * T1, 0.5,
                 "a renewal relayed by the new xbngd")
        wait_for(lambda: len(self.kea_lines(addr)) > n, 3 * T1, 0.5, "the renewal in Kea's file")
        self.ping(ns, UPLINK_NET6)
        self.ping(self.x.net, self.host_in_prefix(ns, prefix))

    def test_6_release_removes_the_subscriber_and_its_routes(self):
        ns, client, addr, prefix, s = self.up(0)
        host = self.host_in_prefix(ns, prefix)
        self.ping(self.x.net, addr)
        before = self.x.stats().get("relay6_ended", 0)
        # SIGALRM: dhcpcd releases its leases (RELEASE, relayed) and exits.
        client.send_signal(signal.SIGALRM)
        wait_for(lambda: self.get(s) is None, 15, 0.2, "the subscriber removed on RELEASE")
        self.assertGreater(self.x.stats().get("relay6_ended", 0), before)
        self.ping(self.x.net, addr, ok=False)
        self.ping(self.x.net, host, ok=False)
        wait_for(lambda: "RELEASE" in self.kea.read_log(), 10, 0.2, "Kea saw the RELEASE")
        del self.cpes[0]

    def test_7_expiry_without_renewal_removes_the_subscriber(self):
        ns, client, addr, prefix, s = self.up(1)
        host = self.host_in_prefix(ns, prefix)
        # Killed: no RELEASE, no renewal; xbngd ends the lease at its valid lifetime.
        self.x.lab.stop(client, signal.SIGKILL)
        wait_for(lambda: self.get(s) is None, VALID + 15, 0.5, "the subscriber removed on expiry")
        self.ping(self.x.net, addr, ok=False)
        self.ping(self.x.net, host, ok=False)
        del self.cpes[1]

    def test_8_with_one_server_stopped_leases_still_work(self):
        # Runs last: the first server stays stopped.
        self.kea.stop()
        self.kea_b.start()
        for i in (2, 3, 4):
            ns, _, addr, prefix, s = self.up(i)
            self.assertIn(ipaddress.ip_address(addr), ipaddress.ip_network(NA_POOL_B))
            self.assertTrue(
                ipaddress.ip_network(prefix).subnet_of(ipaddress.ip_network(PD_POOL_B)), prefix)
            sub = self.get(s)
            self.assertEqual(sub.get("origin"), "ORIGIN_RELAY", sub)
            self.assertEqual(sub["lease_v6"].get("server"), KEA6B, sub)
            self.assertTrue([ln for ln in self.kea_b.leases() if ln.get("address") == addr])
        self.b.wait_dad(ns)
        wait_for(lambda: self.default6(ns) == "fe80::1", 30, 0.3, "IPv6 default route via fe80::1")
        self.ping(ns, UPLINK_NET6)
        self.ping(self.x.net, addr)
        # Three SOLICITs the stopped server left unanswered: three misses in a
        # row, and it is marked down.
        wait_for(lambda: self.x.stats().get("relay6_server_down", 0) >= 1, 10, 0.3,
                 "relay6_server_down")
        self.assertGreaterEqual(self.x.stats().get("relay6_server_misses", 0), 3)


if __name__ == "__main__":
    import unittest
    unittest.main()
