"""RADIUS and the DHCP relay on one port: acc0 has auth = "radius" and
dhcp = "relay", the deployment where the ISP's AAA authorizes a subscriber
and gives its rate plan, and its own DHCP server (Debian's kea-dhcp4 here)
gives its address. Real dhclients on QinQ pairs nobody provisioned:

- an accepted CPE (its users-file entry has a Filter-Id and no address) is
  created by the Accept with that plan, then gets its address from Kea
  through the relay; the subscriber has both, traffic flows both ways, and
  its accounting Start carries the address Kea gave;
- a rejected CPE gets nothing: no subscriber, and Kea never hears of it;
- the accepted CPE's release ends it all: the address, the subscriber
  (nothing left) and its RADIUS session (a Stop).
"""
import ipaddress
import time

from xbnglab.cpe import cpe_sub
from xbnglab.kea import Kea4
from xbnglab.lab import wait_for
from xbnglab.radius import FreeRadius
from xbnglab.radius import user_name as user
from xbnglab.relay import RelaySuite
from xbnglab.xbngd import GW4, UPLINK_DUT4, UPLINK_NET4

SECRET = "xbng-lab-secret"
KEA = "198.51.100.67"  # Kea4(index 0)
POOL = "100.64.40.10 - 100.64.40.200"
RATE = 20_000_000

CONFIG = f"""
[relay]
servers_v4 = ["{KEA}"]

[radius]
servers = [{{ address = "{UPLINK_NET4}", secret = "{SECRET}" }}]
nas_identifier = "xbng-radius-relay"
timeout_ms = 500
retries = 2
reject_hold_s = 30
coa_listen = ""

[plans]
silver = {{ up_rate_bps = {RATE}, up_burst_bytes = 500000, down_rate_bps = {RATE}, down_burst_bytes = 500000 }}
"""


class RadiusRelayTest(RelaySuite):
    DHCP_TOML = CONFIG
    ACCESS_PORT = ('{ name = "acc0", subscriber_mtu = 1492, auth = "radius", '
                   'dhcp = "relay" }')

    @classmethod
    def setUpLab(cls):
        x = cls.x
        cls.ok, cls.bad = cpe_sub(0, base=70), cpe_sub(1, base=70)
        users = (f'"{user(cls.ok)}" Auth-Type := Accept\n'
                 f'\tFilter-Id = "silver",\n'
                 f'\tClass = "rr-class"\n\n'
                 f'"{user(cls.bad)}" Auth-Type := Reject\n')
        cls.radius = FreeRadius(x.lab, x.net, [(UPLINK_DUT4, SECRET)], users)
        cls.addClassCleanup(cls.radius.stop)
        cls.radius.start()
        cls.kea = Kea4(x.lab, x.net, "kea", 0, [{
            "id": 1, "subnet": "100.64.0.0/16", "pools": [{"pool": POOL}],
            "option-data": [{"name": "routers", "data": GW4}]}], 120, 60, 105)
        assert cls.kea.address == KEA
        cls.addClassCleanup(cls.kea.stop)
        cls.kea.start()

    def test_1_radius_authorizes_kea_addresses(self):
        b = self.b
        ns = b.cpe(self.ok)
        client, files = b.dhclient(ns)
        type(self).ok_cpe = (ns, client, files)
        wait_for(lambda: b.addrs(ns), 40, 0.2, f"an address on {ns.name}")
        addr = b.addrs(ns)[0].split("/")[0]
        lo, hi = (ipaddress.ip_address(a.strip()) for a in POOL.split("-"))
        self.assertTrue(lo <= ipaddress.ip_address(addr) <= hi, f"{addr} is not from Kea's pool")
        sub = self.get(self.ok)
        self.assertIsNotNone(sub)
        # RADIUS created it (first), the relay's ACK gave it its address.
        self.assertEqual(sub.get("origin"), "ORIGIN_RADIUS", sub)
        self.assertEqual(sub["ipv4"], addr)
        self.assertEqual(int(sub["effective_policy"]["down_rate_bps"]), RATE, sub)
        self.assertEqual(int(sub["effective_policy"]["up_rate_bps"]), RATE, sub)
        self.assertEqual(sub.get("lease_v4", {}).get("server"), KEA, sub)
        self.assertTrue([ln for ln in self.kea.leases() if ln.get("address") == addr],
                        "Kea's lease file has the lease")
        wait_for(lambda: b.default_via(ns) == GW4, 10, 0.2, "default route via the gateway")
        b.clamp_v4_route(ns)
        for src, dst in ((ns, UPLINK_NET4), (self.x.net, addr)):
            r = src.exec(["ping", "-c2", "-i0.2", "-W2", dst], check=False)
            self.assertEqual(r.returncode, 0, f"ping {dst}: {r.stdout}{r.stderr}")
        # The Start names the address Kea gave, and RADIUS's Class.
        starts = []
        wait_for(lambda: starts.extend(
            r for r in self.radius.accounting()
            if r.get("User-Name") == user(self.ok) and r.get("Acct-Status-Type") == "Start")
            or starts, 15, 0.3, "the accounting Start")
        self.assertEqual(starts[0].get("Framed-IP-Address"), addr, starts[0])
        self.assertEqual(starts[0].get("Class"), "0x" + b"rr-class".hex(), starts[0])
        type(self).ok_addr = addr

    def test_2_rejected_cpe_gets_nothing_and_kea_never_sees_it(self):
        b = self.b
        ns = b.cpe(self.bad)
        client, _ = b.dhclient(ns)
        wait_for(lambda: self.x.stats().get("auth_rejected", 0) >= 1, 20, 0.2, "the reject")
        # dhclient goes on asking (held back, then rejected): never an address.
        time.sleep(4)
        self.assertEqual(b.addrs(ns), [])
        self.assertIsNone(self.get(self.bad))
        st = self.x.stats()
        self.assertGreater(st.get("auth_held_back_dropped", 0), 0, st)
        # Kea never saw the rejected key's circuit-id (it logs it in hex).
        cid = f"acc0:{self.bad['outer_vlan']}:{self.bad['inner_vlan']}"
        self.assertNotIn("circuit-id=" + cid.encode().hex().upper(), self.kea.read_log())
        self.assertIn("circuit-id=" + f"acc0:{self.ok['outer_vlan']}:{self.ok['inner_vlan']}"
                      .encode().hex().upper(), self.kea.read_log())
        b.stop_client(client)

    def test_3_release_ends_the_session(self):
        """The lease released: the address the lease gave goes, and with it the
        subscriber (nothing left) and its RADIUS session (a Stop)."""
        ns, client, files = self.ok_cpe
        b = self.b
        b.stop_client(client)
        b.dhclient_release(ns, files)
        wait_for(lambda: self.get(self.ok) is None, 15, 0.2, "the subscriber to go")
        stops = []
        wait_for(lambda: stops.extend(
            r for r in self.radius.accounting()
            if r.get("User-Name") == user(self.ok) and r.get("Acct-Status-Type") == "Stop")
            or stops, 15, 0.3, "the accounting Stop")
        self.assertEqual(stops[0].get("Framed-IP-Address"), self.ok_addr, stops[0])
        r = self.x.net.exec(["ping", "-c1", "-W1", self.ok_addr], check=False)
        self.assertNotEqual(r.returncode, 0, "the released address still answers")
