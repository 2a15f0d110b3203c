"""Subscriber bring-up with real Debian clients: each CPE gets
exactly its provisioned binding from xbngd on its own QinQ pair, then moves
traffic; renew, release, re-provisioning (NAK, then the new address) and a
restart of xbngd in the middle of leases.
"""
import ipaddress
import json
import os
import socket
import subprocess
import threading
import time
import unittest

from xbnglab.cpe import cpe_sub
from xbnglab.fixture import BringupSuite
from xbnglab.lab import wait_for
from xbnglab.xbngd import GW4, UPLINK_NET4, UPLINK_NET6, subscribed

LEASE = 20  # seconds: T1 = 10 s, so renewals happen within the test

CONFIG = f"""
[dhcp]
lease_time = {LEASE}
dns = ["192.0.2.53"]

[dhcpv6]
preferred_lifetime = {LEASE}
valid_lifetime = {2 * LEASE}
t1 = {LEASE // 2}
t2 = {LEASE * 3 // 4}
dns = ["2001:db8:ffff::53"]

[ra]
router_lifetime = 1800
unsolicited_interval = 600
"""


def ping(tc, ns, dst, v6=False):
    r = ns.exec(["ping", *(["-6"] if v6 else []), "-c2", "-i0.2", "-W2", dst], check=False)
    tc.assertEqual(r.returncode, 0, f"ping {dst} from {ns.name}: {r.stdout}{r.stderr}")


def tcp_both_ways(tc, lab, ns, addr, family=socket.AF_INET):
    """A 256 KiB stream each way between the CPE and the network side."""
    up = UPLINK_NET4 if family == socket.AF_INET else UPLINK_NET6
    for server, client, where in ((lab.x.net, ns, up), (ns, lab.x.net, addr)):
        data = os.urandom(256 << 10)
        with server.entered():
            srv = socket.socket(family, socket.SOCK_STREAM)
        srv.bind((where, 0))
        srv.listen(1)
        srv.settimeout(20)
        got = bytearray()

        def serve():
            conn, _ = srv.accept()
            conn.settimeout(20)
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got.extend(chunk)
            conn.close()
        t = threading.Thread(target=serve)
        t.start()
        with client.entered():
            cli = socket.socket(family, socket.SOCK_STREAM)
        cli.settimeout(20)
        cli.connect((where, srv.getsockname()[1]))
        cli.sendall(data)
        cli.close()
        t.join(30)
        srv.close()
        tc.assertEqual(bytes(got), data, f"TCP {client.name} -> {server.name} {where}")


class DhclientV4Test(BringupSuite):
    DHCP_TOML = CONFIG

    @classmethod
    def setUpLab(cls):
        cls.subs = [cpe_sub(i) for i in range(3)]
        subs = [dict(s) for s in cls.subs]
        del subs[1]["mac"]  # provisioned without MAC: learned from DHCP
        cls.provision(subs)

    def test_1_bind_traffic_renew_restart_release(self):
        b, s = self.b, self.subs[0]
        ns = b.cpe(s)
        client, files = b.dhclient(ns)
        b.wait_addr(ns, f"{s['ipv4']}/32")
        wait_for(lambda: b.default_via(ns) == GW4, 10, 0.2, "default route via the gateway")
        self.assertEqual(b.addrs(ns), [f"{s['ipv4']}/32"])
        lease = b.lease(s)
        self.assertTrue(lease.get("bound"), lease)
        self.assertEqual(lease["address"], s["ipv4"])
        ping(self, ns, UPLINK_NET4)
        ping(self, b.x.net, s["ipv4"])
        b.clamp_v4_route(ns)
        tcp_both_ways(self, b, ns, s["ipv4"])

        # Renew (T1 = LEASE/2): the lease is extended, the address kept.
        first = int(lease["expires_unix"])
        wait_for(lambda: int(b.lease(s).get("expires_unix", 0)) > first, LEASE, 0.5,
                 "a renewal (expiry moves)")

        # xbngd restarts in the middle of the lease: nothing lost.
        before = b.lease(s)
        b.restart()
        after = b.lease(s)
        self.assertTrue(after.get("bound"), after)
        self.assertEqual(after["address"], before["address"])
        self.assertGreaterEqual(int(after["expires_unix"]), int(before["expires_unix"]))
        # ... and the next renewal is answered by the new process (ACK, no NAK),
        # reported on WatchEvents, as is the release.
        watch = subprocess.Popen([b.x.xbngctl, "--server", b.x.grpc, "--json", "events"],
                                 stdout=subprocess.PIPE, text=True)
        lines = [subscribed(watch)]
        reader = threading.Thread(target=lambda: lines.extend(watch.stdout), daemon=True)
        reader.start()

        def mine() -> list[str]:
            events = [json.loads(l) for l in list(lines) if l.strip()]
            return [e["type"] for e in events if e.get("lease_family") == "ipv4"
                    and int(e.get("key", {}).get("inner_vlan", 0)) == s["inner_vlan"]
                    and int(e.get("key", {}).get("outer_vlan", 0)) == s["outer_vlan"]]
        t = int(after["expires_unix"])
        wait_for(lambda: int(b.lease(s).get("expires_unix", 0)) > t, LEASE, 0.5,
                 "a renewal after the restart")
        self.assertEqual(b.addrs(ns), [f"{s['ipv4']}/32"])
        ping(self, ns, UPLINK_NET4)

        # Release: the lease is given back.
        b.dhclient_release(ns, files)
        wait_for(lambda: not b.lease(s).get("bound"), 10, 0.2, "the release")
        wait_for(lambda: "LEASE_RELEASED" in mine(), 10, 0.2, "LEASE_RELEASED on WatchEvents")
        watch.terminate()
        watch.wait(10)
        reader.join(10)
        self.assertIn("LEASE_RENEWED", mine(), lines)
        self.assertEqual(mine()[-1], "LEASE_RELEASED", lines)
        st = b.x.stats()
        # punt_* are the fast path's (pinned, they survive the restart); the
        # agent's counters start again at 0 with the new process.
        for r in ("punt_dhcpv4", "dhcpv4_acked", "dhcpv4_released"):
            self.assertGreater(st.get(r, 0), 0, r)
        b.stop_client(client)

    def test_2_mac_learned_from_dhcp(self):
        b, s = self.b, self.subs[1]
        ns = b.cpe(s)
        client, _ = b.dhclient(ns)
        b.wait_addr(ns, f"{s['ipv4']}/32")
        got = b.x.ctl("sub", "get", "--port", s["port"], "--outer", str(s["outer_vlan"]),
                      "--inner", str(s["inner_vlan"]))["subscriber"]
        self.assertEqual(got["mac"], s["mac"])
        self.assertTrue(got["mac_learned"])
        ping(self, ns, UPLINK_NET4)
        ping(self, b.x.net, s["ipv4"])
        b.stop_client(client)

    def test_3_reprovisioned_address_taken_at_next_renew(self):
        b, s = self.b, dict(self.subs[2])
        ns = b.cpe(s)
        client, _ = b.dhclient(ns)
        b.wait_addr(ns, f"{s['ipv4']}/32")
        # dhclient-script adds the address, then the route: wait for both.
        wait_for(lambda: b.default_via(ns) == GW4, 10, 0.2, "default route via the gateway")
        # Traffic resolves the gateway's MAC while the address is still valid:
        # once re-provisioned, ARP from the old address is refused as spoofed
        # (drop_arp_spoofed_sender), so a renewal can only go out on a cached entry.
        ping(self, ns, UPLINK_NET4)
        naks = b.x.stats().get("dhcpv4_naked", 0)
        s["ipv4"] = str(ipaddress.IPv4Address(s["ipv4"]) + 1000)
        out, _ = b.x.import_subs([s])
        self.assertEqual(int(out["applied"]), 1, out)
        # Next renewal: NAK (the old address is not the binding), then
        # DISCOVER/REQUEST for the new one.
        b.wait_addr(ns, f"{s['ipv4']}/32", timeout=LEASE + 10)
        wait_for(lambda: b.addrs(ns) == [f"{s['ipv4']}/32"], 10, 0.2, "the old address gone")
        wait_for(lambda: b.default_via(ns) == GW4, 10, 0.2, "default route via the gateway")
        log = "\n".join(l for l in b.x.read_log().splitlines() if "dhcpv4" in l)
        self.assertGreater(b.x.stats().get("dhcpv4_naked", 0), naks, log)
        self.assertEqual(b.lease(s)["address"], s["ipv4"])
        ping(self, ns, UPLINK_NET4)
        b.stop_client(client)


class V6Test(BringupSuite):
    """RS -> RA (kernel and rdisc6), dhclient -6 -N -P (IA_NA + IA_PD), dhcpcd."""

    DHCP_TOML = CONFIG

    @classmethod
    def setUpLab(cls):
        cls.subs = [cpe_sub(i, base=10) for i in range(3)]
        cls.provision(cls.subs)

    def default6(self, ns):
        return self.b.default_via(ns, "-6")

    def test_1_rs_ra_and_dhclient6_na_pd(self):
        b, s = self.b, self.subs[0]
        ns = b.cpe(s)
        # The CPE kernel's own RS gets an RA: default route via fe80::1.
        wait_for(lambda: self.default6(ns) == "fe80::1", 20, 0.3, "IPv6 default route via fe80::1")
        # rdisc6 sees the flags, lifetime, MTU and RDNSS.
        r = ns.exec(["rdisc6", "-1", "-r", "3", "-w", "1500", "c0"], check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for want in (r"Stateful address conf\.\s+:\s+Yes", r"Stateful other conf\.\s+:\s+Yes",
                     r"Router lifetime\s+:\s+1800 ", r"MTU\s+:\s+1492 bytes",
                     r"Recursive DNS server\s+:\s+2001:db8:ffff::53", r"from fe80::1\b"):
            self.assertRegex(r.stdout, want)
        client, files = b.dhclient(ns, v6=True, extra=["-N", "-P"])
        b.wait_addr(ns, f"{s['ipv6']}/128", "-6", timeout=30)
        b.wait_dad(ns)
        pfx = s["ipv6_prefixes"][0]
        wait_for(lambda: b.lease(s, "v6").get("bound") and pfx in b.lease(s, "v6").get("prefixes", []),
                 15, 0.3, "IA_NA + IA_PD lease in xbngd")
        lease = b.lease(s, "v6")
        self.assertEqual(lease["address"], s["ipv6"])
        with open(files["leases"]) as f:
            text = f.read()
        self.assertIn(pfx.split("/")[0], text, "IA_PD prefix in dhclient's lease")
        wait_for(lambda: self.default6(ns) == "fe80::1", 20, 0.3, "IPv6 default route (RA)")
        ping(self, ns, UPLINK_NET6, v6=True)
        ping(self, b.x.net, s["ipv6"], v6=True)
        wait_for(lambda: ns.exec(["sysctl", "-n", "net.ipv6.conf.c0.mtu"]).stdout.strip() == "1492",
                 5, 0.2, "the RA's MTU option (1492) on c0")
        tcp_both_ways(self, b, ns, s["ipv6"], socket.AF_INET6)
        b.dhclient_release(ns, files, v6=True, extra=["-N", "-P"])
        wait_for(lambda: not b.lease(s, "v6").get("bound"), 10, 0.2, "the v6 release")
        st = b.x.stats()
        for r in ("punt_router_solicitation", "ra_solicited", "punt_dhcpv6",
                  "dhcpv6_answered_reply_request", "dhcpv6_answered_reply_release"):
            self.assertGreater(st.get(r, 0), 0, r)
        b.stop_client(client)

    def test_2_dhcpcd_dual_stack(self):
        b, s = self.b, self.subs[1]
        ns = b.cpe(s)
        client, f = b.dhcpcd(ns, [], iface_conf="ia_na 1\nia_pd 2\n")
        b.wait_addr(ns, f"{s['ipv4']}/32", timeout=40)
        wait_for(lambda: b.default_via(ns) == GW4, 10, 0.2, "IPv4 default route (dhcpcd)")
        b.wait_addr(ns, f"{s['ipv6']}/128", "-6", timeout=40)
        b.wait_dad(ns)
        wait_for(lambda: self.default6(ns) == "fe80::1", 20, 0.3, "IPv6 default route (dhcpcd)")
        wait_for(lambda: b.lease(s, "v6").get("bound") and b.lease(s).get("bound"), 15, 0.3,
                 "both leases in xbngd")
        self.assertIn(s["ipv6_prefixes"][0], b.lease(s, "v6").get("prefixes", []))
        ping(self, ns, UPLINK_NET4)
        ping(self, ns, UPLINK_NET6, v6=True)
        ping(self, b.x.net, s["ipv4"])
        ping(self, b.x.net, s["ipv6"], v6=True)
        b.stop_client(client)


class AfXdpTest(BringupSuite):
    """[punt] transport = "af_xdp": the same bring-up through xbngd's AF_XDP
    sockets (libxdp) instead of the BPF ring buffer."""

    DHCP_TOML = CONFIG + '\n[punt]\ntransport = "af_xdp"\n'

    @classmethod
    def setUpLab(cls):
        cls.subs = [cpe_sub(i, base=20) for i in range(2)]
        cls.provision(cls.subs)

    def test_1_dual_stack_through_af_xdp(self):
        b, s = self.b, self.subs[0]
        self.assertIn("AF_XDP socket on acc0 queue 0", b.x.read_log())
        before = b.x.stats()
        ns = b.cpe(s)
        v4, _ = b.dhclient(ns)
        b.wait_addr(ns, f"{s['ipv4']}/32")
        wait_for(lambda: b.default_via(ns) == GW4, 10, 0.2, "default route via the gateway")
        # The CPE kernel's RS first (its link-local address is usable then).
        wait_for(lambda: b.default_via(ns, "-6") == "fe80::1", 20, 0.3, "IPv6 default route (RA)")
        v6, _ = b.dhclient(ns, v6=True, extra=["-N", "-P"])
        b.wait_addr(ns, f"{s['ipv6']}/128", "-6", timeout=30)
        wait_for(lambda: b.lease(s, "v6").get("bound") and b.lease(s).get("bound"), 15, 0.3,
                 "both leases in xbngd")
        b.wait_dad(ns)
        ping(self, ns, UPLINK_NET4)
        ping(self, ns, UPLINK_NET6, v6=True)
        st = b.x.stats()
        moved = {k: st.get(k, 0) - before.get(k, 0)
                 for k in ("punt_received", "punt_received_af_xdp", "punt_dhcpv4", "punt_dhcpv6",
                           "punt_router_solicitation", "punt_tx", "drop_punt_ring_full")}
        # Every punted frame came through the sockets, none through the ring.
        self.assertGreater(moved["punt_received_af_xdp"], 0, moved)
        self.assertEqual(moved["punt_received_af_xdp"], moved["punt_received"], moved)
        self.assertGreaterEqual(moved["punt_received"], moved["punt_dhcpv4"] + moved["punt_dhcpv6"], moved)
        self.assertGreater(moved["punt_tx"], 0, moved)
        self.assertEqual(st.get("punt_af_xdp_dropped", 0), 0, st)
        b.stop_client(v4)
        b.stop_client(v6)


if __name__ == "__main__":
    unittest.main()
