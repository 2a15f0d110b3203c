"""The DHCPv4 relay with real Kea: acc0 has dhcp = "relay"; two Debian
kea-dhcp4 servers run in namespaces of their own behind the uplink, with
memfile leases and a config the test writes: one subnet (picked by the
relay's link-selection sub-option, the port's gateway), a pool each, and a
reservation by circuit-id. Real dhclients on QinQ pairs nobody provisioned
get their leases from Kea through xbngd, which creates their subscribers
(origin relay) from the DHCPACKs.
"""
import ipaddress
import os
import signal
import socket
import time

from xbnglab.cpe import cpe_sub
from xbnglab.kea import Kea4
from xbnglab.lab import read_text, wait_for
from xbnglab.relay import RelaySuite
from xbnglab.xbngd import GW4, UPLINK_DUT4, UPLINK_NET4

KEA1, KEA2 = "198.51.100.67", "198.51.100.75"  # Kea4(index 0 / 1)
RESERVED = "100.64.30.30"
LIFETIME, T1, T2 = 24, 6, 18

CONFIG = f"""
[relay]
servers_v4 = ["{KEA1}", "{KEA2}"]
"""


def subnet(pool: str) -> list:
    return [{
        "id": 1, "subnet": "100.64.0.0/16",
        "pools": [{"pool": pool}],
        "option-data": [{"name": "routers", "data": GW4}],
        "reservations": [{"circuit-id": "'acc0:100:2'", "ip-address": RESERVED}],
    }]


def in_pools(addr: str) -> bool:
    a = ipaddress.ip_address(addr)
    return a in ipaddress.ip_network("100.64.20.0/23")


class RelayTest(RelaySuite):
    DHCP_TOML = CONFIG

    @classmethod
    def setUpLab(cls):
        x = cls.x
        cls.kea = [Kea4(x.lab, x.net, "kea1", 0, subnet("100.64.20.10 - 100.64.20.200"),
                        LIFETIME, T1, T2),
                   Kea4(x.lab, x.net, "kea2", 1, subnet("100.64.21.10 - 100.64.21.200"),
                        LIFETIME, T1, T2)]
        assert [k.address for k in cls.kea] == [KEA1, KEA2]
        for k in cls.kea:
            cls.addClassCleanup(k.stop)
            k.start()
        cls.cpes = {}

    # -- helpers ------------------------------------------------------------------
    def up(self, i):
        """CPE i with a running dhclient and its address: (ns, files, address)."""
        if i in self.cpes:
            return self.cpes[i]
        b, s = self.b, cpe_sub(i)
        ns = b.cpe(s)
        client, files = b.dhclient(ns)
        wait_for(lambda: b.addrs(ns), 40, 0.2, f"an address on {ns.name}")
        addr = b.addrs(ns)[0].split("/")[0]
        self.cpes[i] = (ns, files, addr, client, s)
        return self.cpes[i]

    def kea_lines(self, addr):
        return [ln for k in self.kea for ln in k.leases() if ln.get("address") == addr]

    # -- tests --------------------------------------------------------------------
    def test_1_lease_from_kea_becomes_a_subscriber_and_traffic_flows(self):
        ns, files, addr, _, s = self.up(0)
        self.assertTrue(in_pools(addr), addr)
        sub = self.get(s)
        self.assertIsNotNone(sub)
        self.assertEqual(sub.get("origin"), "ORIGIN_RELAY", sub)
        self.assertEqual(sub["ipv4"], addr)
        lease = sub.get("lease_v4", {})
        self.assertTrue(lease.get("bound"), sub)
        self.assertIn(lease.get("server"), (KEA1, KEA2))
        self.assertGreater(int(lease.get("expires_unix", 0)), time.time())
        self.assertTrue(self.kea_lines(addr), "Kea's lease file has the lease")
        # The client sees the gateway as its server (its renewals come to
        # xbngd), and never an option 82.
        text = read_text(files["leases"])
        self.assertIn(f"dhcp-server-identifier {GW4}", text)
        self.assertNotIn("agent", text)
        self.assertNotIn("unknown-82", text)
        wait_for(lambda: self.b.default_via(ns) == GW4, 10, 0.2, "default route via the gateway")
        self.b.clamp_v4_route(ns)
        self.ping(ns, UPLINK_NET4)
        self.ping(self.x.net, addr)
        # Kea picked its subnet by the link-selection sub-option (the giaddr,
        # 192.0.2.1, is in none of its subnets) and saw the circuit-id (its
        # log writes it in hex); the server whose offer was not taken saw
        # the other's identifier restored in the REQUEST.
        logs = "".join(k.read_log() for k in self.kea)
        self.assertIn("circuit-id=" + b"acc0:100:1".hex().upper(), logs)
        self.assertIn("foreign server identifier", logs)
        st = self.x.stats()
        self.assertGreaterEqual(st.get("relay4_bound", 0), 1, st)
        self.assertGreater(st.get("punt_unknown_dhcpv4", 0), 0, st)
        self.assertEqual(st.get("relay4_ack_refused", 0), 0, st)

    def test_2_reserved_cpe_gets_its_reserved_address(self):
        ns, _, addr, _, s = self.up(1)
        self.assertEqual(addr, RESERVED)
        self.assertEqual(self.get(s)["ipv4"], RESERVED)
        self.b.clamp_v4_route(ns)
        self.ping(ns, UPLINK_NET4)

    def test_3_renewal_reaches_kea_and_extends_the_lease(self):
        ns, _, addr, _, s = self.up(0)
        first = self.get(s)["lease_v4"]
        n = len(self.kea_lines(addr))
        # T1 is a few seconds: the renewal is unicast to the gateway, relayed
        # by xbngd to the server holding the lease.
        wait_for(lambda: len(self.kea_lines(addr)) > n, 3 * T1, 0.5, "a renewal in Kea's file")
        wait_for(lambda: int(self.get(s)["lease_v4"]["bound_unix"]) > int(first["bound_unix"]),
                 3 * T1, 0.5, "xbngd's lease renewed")
        later = self.get(s)["lease_v4"]
        self.assertGreater(int(later["expires_unix"]), int(first["expires_unix"]))
        self.assertEqual(self.get(s)["ipv4"], addr)

    def test_4_spoofed_source_is_dropped(self):
        ns, _, addr, _, s = self.up(0)
        before = self.x.stats().get("drop_spoofed_ipv4", 0)
        ns.ip("addr", "add", "100.64.99.99/32", "dev", "c0")
        try:
            r = ns.exec(["ping", "-c2", "-i0.2", "-W1", "-I", "100.64.99.99", UPLINK_NET4],
                        check=False)
            self.assertNotEqual(r.returncode, 0)
        finally:
            ns.ip("addr", "del", "100.64.99.99/32", "dev", "c0")
        self.assertGreaterEqual(self.x.stats().get("drop_spoofed_ipv4", 0), before + 2)

    def test_5_reply_from_a_host_that_is_no_server_is_dropped(self):
        self.up(0)
        before = self.x.stats().get("relay4_reply_unknown_server", 0)
        with self.x.net.entered():
            sk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sk.bind((UPLINK_NET4, 67))
            # A DHCPACK-shaped BOOTREPLY to the relay address.
            pkt = bytes([2, 1, 6, 0]) + b"\x12\x34\x56\x78" + bytes(228) + \
                bytes([0x63, 0x82, 0x53, 0x63, 53, 1, 5, 255])
            sk.sendto(pkt, (UPLINK_DUT4, 67))
        finally:
            sk.close()
        wait_for(lambda: self.x.stats().get("relay4_reply_unknown_server", 0) > before, 10, 0.2,
                 "relay4_reply_unknown_server")

    def test_6_restart_mid_lease_keeps_the_session_and_relays_the_renewal(self):
        ns, _, addr, _, s = self.up(0)
        self.b.restart()
        sub = self.get(s)
        self.assertIsNotNone(sub, "the subscriber survived the restart")
        self.assertEqual(sub["ipv4"], addr)
        self.assertEqual(sub.get("origin"), "ORIGIN_RELAY")
        self.assertTrue(sub["lease_v4"].get("bound"), sub)
        n = len(self.kea_lines(addr))
        wait_for(lambda: self.x.stats().get("relay4_bound", 0) >= 1, 3 * T1, 0.5,
                 "a renewal relayed by the new xbngd")
        wait_for(lambda: len(self.kea_lines(addr)) > n, 3 * T1, 0.5, "the renewal in Kea's file")
        self.ping(ns, UPLINK_NET4)

    def test_7_release_removes_the_subscriber_and_its_routes(self):
        ns, files, addr, client, s = self.up(0)
        self.ping(self.x.net, addr)
        self.b.stop_client(client)
        self.b.dhclient_release(ns, files)
        wait_for(lambda: self.get(s) is None, 15, 0.2, "the subscriber removed on RELEASE")
        self.ping(self.x.net, addr, ok=False)
        del self.cpes[0]

    def test_8_expiry_without_renewal_removes_the_subscriber(self):
        ns, files, addr, client, s = self.up(1)
        # Killed: no RELEASE, no renewal.
        self.x.lab.stop(client, signal.SIGKILL)
        wait_for(lambda: self.get(s) is None, LIFETIME + 15, 0.5, "the subscriber removed on expiry")
        self.ping(self.x.net, addr, ok=False)
        del self.cpes[1]

    def test_9_one_of_two_servers_stopped_leases_still_work(self):
        self.kea[1].stop()
        ns, _, addr, _, s = self.up(2)
        self.assertTrue(ipaddress.ip_address(addr) in ipaddress.ip_network("100.64.20.0/24"), addr)
        self.assertEqual(self.get(s)["lease_v4"]["server"], KEA1)
        self.b.clamp_v4_route(ns)
        self.ping(ns, UPLINK_NET4)

    def thread_policies(self) -> dict:
        """{thread name: (policy, priority)} of xbngd's control-frame threads."""
        pid, out = self.x.daemon.pid, {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            name = read_text(f"/proc/{pid}/task/{tid}/comm").strip()
            if name in ("xbng-punt", "xbng-relay4"):
                out[name] = (os.sched_getscheduler(int(tid)),
                             os.sched_getparam(int(tid)).sched_priority)
        return out

    def test_10_relay_threads_run_sched_fifo_unless_the_kernel_refuses(self):
        # punt.realtime_priority unset on a relaying host: SCHED_FIFO 10.
        fifo = (os.SCHED_FIFO, 10)
        self.assertEqual(self.thread_policies(), {"xbng-punt": fifo, "xbng-relay4": fifo})
        # Without CAP_SYS_NICE and with RLIMIT_RTPRIO 0 the kernel refuses:
        # a warning, the default policy, and the relay still serves.
        assert self.x.stop(signal.SIGTERM) == 0, self.x.read_log()
        self.b.start(wrap=["prlimit", "--rtprio=0:0", "setpriv", "--bounding-set", "-sys_nice",
                           "--"])
        try:
            other = (os.SCHED_OTHER, 0)
            self.assertEqual(self.thread_policies(), {"xbng-punt": other, "xbng-relay4": other})
            self.assertIn("stay(s) at the default policy: SCHED_FIFO 10 refused",
                          self.x.read_log())
            ns, _, addr, _, s = self.up(3)
            self.assertEqual(self.get(s)["ipv4"], addr)
            self.b.clamp_v4_route(ns)
            self.ping(ns, UPLINK_NET4)
        finally:
            assert self.x.stop(signal.SIGTERM) == 0, self.x.read_log()
            self.b.start()


if __name__ == "__main__":
    import unittest
    unittest.main()
