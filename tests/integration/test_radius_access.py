"""Subscribers created by RADIUS when their CPE first asks: acc0 has
auth = "radius"; Debian's FreeRADIUS runs in the network namespace behind
the uplink with a users file the test writes. A real dhclient on a QinQ
pair nobody provisioned gets exactly the users file's Framed-IP-Address and
moves traffic both ways; a CPE the server rejects gets nothing, and its key
is held back.
"""
import time

from xbnglab.cpe import cpe_sub
from xbnglab.fixture import BringupSuite
from xbnglab.lab import wait_for
from xbnglab.radius import FreeRadius
from xbnglab.radius import user_name as user
from xbnglab.xbngd import GW4, UPLINK_DUT4, UPLINK_NET4, CtlError

SECRET = "xbng-lab-secret"

CONFIG = f"""
[dhcp]
lease_time = 60
dns = ["192.0.2.53"]

[radius]
servers = [{{ address = "{UPLINK_NET4}", secret = "{SECRET}" }}]
nas_identifier = "xbng-lab"
timeout_ms = 500
retries = 2
reject_hold_s = 3
coa_listen = ""
"""



def ping(tc, ns, dst):
    r = ns.exec(["ping", "-c2", "-i0.2", "-W2", dst], check=False)
    tc.assertEqual(r.returncode, 0, f"ping {dst} from {ns.name}: {r.stdout}{r.stderr}")


class RadiusAccessTest(BringupSuite):
    DHCP_TOML = CONFIG
    ACCESS_PORT = '{ name = "acc0", subscriber_mtu = 1492, auth = "radius" }'

    @classmethod
    def setUpLab(cls):
        cls.accepted, cls.rejected = cpe_sub(0, base=40), cpe_sub(1, base=40)
        # An address of the users file's, not the plan's: it can only come
        # from the Access-Accept.
        cls.framed_ip = "100.64.77.7"
        users = (f'"{user(cls.accepted)}" Auth-Type := Accept\n'
                 f'\tFramed-IP-Address = {cls.framed_ip},\n'
                 f'\tClass = "lab-class"\n\n'
                 f'"{user(cls.rejected)}" Auth-Type := Reject\n'
                 f'\tReply-Message = "not a customer"\n')
        cls.radius = FreeRadius(cls.x.lab, cls.x.net, [(UPLINK_DUT4, SECRET)], users)
        cls.addClassCleanup(cls.radius.stop)
        cls.radius.start()

    def get(self, s):
        """The subscriber of s (xbngctl sub get), or None when there is none."""
        try:
            return self.x.ctl("sub", "get", "--port", "acc0", "--outer", str(s["outer_vlan"]),
                              "--inner", str(s["inner_vlan"]))
        except CtlError:
            return None

    def test_1_accepted_cpe_gets_the_framed_ip_and_traffic_flows(self):
        b, s = self.b, self.accepted
        ns = b.cpe(s)
        client, _ = b.dhclient(ns)
        b.wait_addr(ns, f"{self.framed_ip}/32", timeout=30)
        wait_for(lambda: b.default_via(ns) == GW4, 10, 0.2, "default route via the gateway")
        self.assertEqual(b.addrs(ns), [f"{self.framed_ip}/32"])
        got = self.get(s)["subscriber"]
        self.assertEqual(got["ipv4"], self.framed_ip)
        self.assertEqual(got.get("origin"), "ORIGIN_RADIUS", got)
        ping(self, ns, UPLINK_NET4)
        ping(self, b.x.net, self.framed_ip)
        st = b.x.stats()
        self.assertEqual(st.get("auth_accepted", 0), 1, st)
        self.assertGreater(st.get("punt_unknown_dhcpv4", 0), 0)
        log = self.radius.read_log()
        self.assertIn(f'User-Name = "{user(s)}"', log)
        self.assertIn(f'NAS-Port-Id = "acc0:{s["outer_vlan"]}.{s["inner_vlan"]}"', log)
        b.stop_client(client)

    def test_2_rejected_cpe_gets_nothing(self):
        b, s = self.b, self.rejected
        ns = b.cpe(s)
        client, _ = b.dhclient(ns)
        wait_for(lambda: b.x.stats().get("auth_rejected", 0) >= 1, 20, 0.2, "the reject")
        # dhclient goes on asking: held back (dropped, counted), then asked
        # and rejected again; never an address.
        time.sleep(5)
        self.assertEqual(b.addrs(ns), [])
        r = self.get(s)
        self.assertIsNone(r, "no subscriber for a rejected CPE")
        st = b.x.stats()
        self.assertEqual(st.get("auth_accepted", 0), 1, st)  # the first test's only
        self.assertGreater(st.get("auth_held_back_dropped", 0), 0, st)
        self.assertGreaterEqual(st.get("auth_rejected", 0), 1, st)
        self.assertIn("Reply-Message", self.radius.read_log())
        b.stop_client(client)


if __name__ == "__main__":
    import unittest
    unittest.main()
