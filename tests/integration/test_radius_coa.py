"""Dynamic authorization (RFC 5176) of subscribers RADIUS created: acc0 has
auth = "radius", Debian's FreeRADIUS authorizes two real dhclient CPEs, and
Debian's radclient sends CoA- and Disconnect-Requests to xbngd's CoA port
from the RADIUS server's namespace.

- A CoA-Request whose Filter-Id names another [plans] entry switches the
  plan under traffic: the UDP rate iperf3 measures from 1 s after the
  request is the new plan's (or what the generator reaches, measured on the
  unpoliced second CPE at the same time, as test_police.py does).
- A CoA-Request for a session that does not exist gets a CoA-NAK with
  Error-Cause Session-Context-Not-Found (503).
- A request from an address that is not a coa_client gets no answer at all
  (and is counted), while the same bytes from the client are answered.
- A Disconnect-Request removes the session: the subscriber is gone and the
  CPE loses service.
"""
import hashlib
import socket
import struct
import time

from test_police import MBIT, UDP_GOODPUT, Iperf
from xbnglab import prom
from xbnglab.cpe import cpe_sub
from xbnglab.fixture import BringupSuite
from xbnglab.lab import wait_for
from xbnglab.radius import FreeRadius
from xbnglab.radius import user_name as user
from xbnglab.xbngd import GW4, UPLINK_DUT4, UPLINK_NET4, CtlError

SECRET = "xbng-lab-secret"
COA_SECRET = "xbng-coa-secret"
STRANGER = "192.0.2.3"  # an address of the RADIUS namespace that is no coa_client
METRICS = "127.0.0.1:9469"

SLOW, FAST = 10 * MBIT, 30 * MBIT


def plan_toml(rate: int) -> str:
    burst = rate * 200 // 1000 // 8  # 200 ms, as test_police.py
    return (f"{{ up_rate_bps = {rate}, up_burst_bytes = {burst}, down_rate_bps = {rate}, "
            f"down_burst_bytes = {burst} }}")


CONFIG = f"""
[metrics]
listen = "{METRICS}"

[dhcp]
lease_time = 60
dns = ["192.0.2.53"]

[radius]
servers = [{{ address = "{UPLINK_NET4}", secret = "{SECRET}" }}]
nas_identifier = "xbng-lab"
timeout_ms = 500
retries = 2
reject_hold_s = 3
coa_listen = "[::]:3799"
coa_clients = [{{ address = "{UPLINK_NET4}", secret = "{COA_SECRET}" }}]

[plans]
slow = {plan_toml(SLOW)}
fast = {plan_toml(FAST)}
"""



def signed_request(code: int, ident: int, attrs: list[tuple[int, bytes]], secret: str) -> bytes:
    """A CoA (43) or Disconnect (40) Request as RFC 5176 2.3 signs it."""
    body = b"".join(bytes([t, len(v) + 2]) + v for t, v in attrs)
    head = struct.pack("!BBH", code, ident, 20 + len(body))
    auth = hashlib.md5(head + bytes(16) + body + secret.encode()).digest()
    return head + auth + body


class RadiusCoaTest(BringupSuite):
    DHCP_TOML = CONFIG
    ACCESS_PORT = '{ name = "acc0", subscriber_mtu = 1492, auth = "radius" }'

    @classmethod
    def setUpLab(cls):
        # a: starts on plan "slow"; b: no plan (unpoliced: the reference).
        cls.a, cls.b_sub = cpe_sub(0, base=50), cpe_sub(1, base=50)
        cls.ip_a, cls.ip_b = "100.64.78.7", "100.64.78.8"
        users = (f'"{user(cls.a)}" Auth-Type := Accept\n'
                 f'\tFramed-IP-Address = {cls.ip_a},\n'
                 f'\tFilter-Id = "slow"\n\n'
                 f'"{user(cls.b_sub)}" Auth-Type := Accept\n'
                 f'\tFramed-IP-Address = {cls.ip_b}\n')
        cls.radius = FreeRadius(cls.x.lab, cls.x.net, [(UPLINK_DUT4, SECRET)], users)
        cls.addClassCleanup(cls.radius.stop)
        cls.radius.start()
        b = cls.b
        cls.ns_a, cls.ns_b = b.cpe(cls.a), b.cpe(cls.b_sub)
        cls.dhclients = {}
        for ns, ip in ((cls.ns_a, cls.ip_a), (cls.ns_b, cls.ip_b)):
            cls.dhclients[ip], _ = b.dhclient(ns)
            b.wait_addr(ns, f"{ip}/32", timeout=30)
            wait_for(lambda ns=ns: b.default_via(ns) == GW4, 10, 0.2, "default route")
        cls.iperf = Iperf(cls.x)
        cls.addClassCleanup(cls.iperf.close)

    def get(self, s):
        try:
            return self.x.ctl("sub", "get", "--port", "acc0", "--outer", str(s["outer_vlan"]),
                              "--inner", str(s["inner_vlan"]))
        except CtlError:
            return None

    def radclient(self, kind: str, attrs: str) -> str:
        """radclient in the RADIUS namespace to xbngd's CoA port; its output."""
        return self.radius.radclient(f"{UPLINK_DUT4}:3799", kind, COA_SECRET, attrs)

    def metrics(self) -> dict:
        import urllib.request
        with self.x.dut.entered():
            with urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=5) as r:
                text = r.read().decode()
        return {s.key: s.value for s in prom.samples(text)}

    def ping_ok(self, ns, dst) -> bool:
        return ns.exec(["ping", "-c2", "-i0.2", "-W1", dst], check=False).returncode == 0

    def test_1_filter_id_switches_the_plan_under_traffic(self):
        g = self.get(self.a)["subscriber"]
        self.assertEqual(g.get("origin"), "ORIGIN_RADIUS", g)
        self.assertEqual(int(g["effective_policy"]["down_rate_bps"]), SLOW)
        offered = 45 * MBIT
        port, ref_port = self.iperf.server(), self.iperf.server()
        self.iperf.wait_for_servers()
        t_start = time.monotonic()
        p = self.iperf.client(self.ns_a, UPLINK_NET4, port, 7, udp_bps=offered, reverse=True,
                              interval=0.25)
        r = self.iperf.client(self.ns_b, UPLINK_NET4, ref_port, 7, udp_bps=offered, reverse=True,
                              interval=0.25)
        time.sleep(3.0)
        t_change = time.monotonic() - t_start
        out = self.radclient("coa", f'User-Name = "{user(self.a)}", Filter-Id = "fast", '
                                    f'Event-Timestamp = {int(time.time())}')
        self.assertIn("CoA-ACK", out, out)
        ivs = Iperf.receiver_intervals(Iperf.result(p), True)
        ref = Iperf.receiver_intervals(Iperf.result(r), True)
        old = Iperf.rate(ivs, 1.0, t_change - 0.5)
        new = Iperf.rate(ivs, t_change + 1.0, 7.0)
        ref_old = Iperf.rate(ref, 1.0, t_change - 0.5)
        ref_new = Iperf.rate(ref, t_change + 1.0, 7.0)
        print(f"\n  plan slow: {old / MBIT:.2f} Mbit/s; from 1 s after the CoA: "
              f"{new / MBIT:.2f} (plan fast {FAST / MBIT:.0f}); unpoliced: "
              f"{ref_old / MBIT:.2f}, {ref_new / MBIT:.2f}")
        self.assertLessEqual(old, 1.05 * SLOW * UDP_GOODPUT)
        self.assertGreaterEqual(old, min(0.95 * SLOW * UDP_GOODPUT, 0.9 * ref_old))
        self.assertGreaterEqual(new, min(0.95 * FAST * UDP_GOODPUT, 0.9 * ref_new))
        window = 7.0 - (t_change + 1.0)
        self.assertLessEqual(new, FAST * UDP_GOODPUT + 8 * (FAST * 200 // 1000 // 8) / window)
        g = self.get(self.a)["subscriber"]
        self.assertEqual(int(g["effective_policy"]["down_rate_bps"]), FAST)
        self.assertEqual(g.get("origin"), "ORIGIN_RADIUS", g)
        m = self.metrics()
        self.assertEqual(m.get('xbng_radius_dynauth_requests_total{type="coa",outcome="ack"}'), 1)

    def test_2_unknown_session_gets_nak_503(self):
        out = self.radclient("coa", 'User-Name = "nobody", Filter-Id = "fast"')
        self.assertIn("CoA-NAK", out, out)
        self.assertIn("Session-Context-Not-Found", out, out)
        m = self.metrics()
        self.assertGreaterEqual(m.get('xbng_radius_dynauth_requests_total{type="coa",'
                                      'outcome="session_context_not_found"}', 0), 1)

    def test_3_unknown_source_gets_no_answer(self):
        n = self.x.net
        n.ip("addr", "add", f"{STRANGER}/24", "dev", "n0")
        self.addCleanup(n.ip, "addr", "del", f"{STRANGER}/24", "dev", "n0")
        pkt = signed_request(40, 77, [(1, b"nobody")], COA_SECRET)

        def ask(src: str) -> bytes | None:
            with n.entered():
                sk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                sk.bind((src, 0))
                sk.settimeout(2.0)
                sk.sendto(pkt, (UPLINK_DUT4, 3799))
                try:
                    return sk.recv(4096)
                except socket.timeout:
                    return None
            finally:
                sk.close()

        before = self.metrics().get('xbng_radius_dynauth_dropped_total{reason="unknown_source"}', 0)
        self.assertIsNone(ask(STRANGER), "a stranger got an answer")
        reply = ask(UPLINK_NET4)  # the same bytes from the client: answered
        self.assertIsNotNone(reply)
        self.assertEqual(reply[0], 42)  # Disconnect-NAK
        after = self.metrics().get('xbng_radius_dynauth_dropped_total{reason="unknown_source"}', 0)
        self.assertEqual(after - before, 1)

    def lease_file_has(self, ip: str) -> bool:
        try:
            with open(self.b.lease_file) as f:
                return f'"{ip}"' in f.read()
        except FileNotFoundError:
            return False

    def test_4_disconnect_ends_the_session(self):
        self.assertTrue(self.ping_ok(self.ns_b, UPLINK_NET4))
        self.assertTrue(self.b.lease(self.b_sub).get("bound"), "no bound lease before")
        wait_for(lambda: self.lease_file_has(self.ip_b), 10, 0.2, "the lease in the lease file")
        # The CPE's dhclient stops first (kill -9: its address stays): its next
        # renewal would be authorized again and bring the session back, as it
        # should, within the checks below.
        dhc = self.dhclients[self.ip_b]
        dhc.kill()
        dhc.wait(10)
        out = self.radclient("disconnect", f"Framed-IP-Address = {self.ip_b}")
        self.assertIn("Disconnect-ACK", out, out)
        self.assertIsNone(self.get(self.b_sub), "the subscriber is still there")
        # A second Disconnect finds no session: NAK.
        out = self.radclient("disconnect", f"Framed-IP-Address = {self.ip_b}")
        self.assertIn("Disconnect-NAK", out, out)
        # Its lease ended with it (the lease file is written within a second).
        wait_for(lambda: not self.lease_file_has(self.ip_b), 10, 0.2, "the lease ended")
        self.assertTrue(self.lease_file_has(self.ip_a), "the other lease went too")
        self.assertFalse(self.ping_ok(self.ns_b, UPLINK_NET4), "the CPE still has service")
        self.assertFalse(self.ping_ok(self.x.net, self.ip_b), "the CPE is still reachable")
        # The other session is untouched.
        self.assertTrue(self.ping_ok(self.ns_a, UPLINK_NET4))


if __name__ == "__main__":
    import unittest
    unittest.main()
