"""RADIUS accounting of subscribers RADIUS created, into Debian's FreeRADIUS
(its default site writes every Accounting-Request to a detail file under
its log directory). acc0 has auth = "radius"; real dhclients on QinQ pairs
nobody provisioned. Checked from the detail file: Accounting-On at the cold
start; Start when the lease is bound; Interim-Updates every
Acct-Interim-Interval of the users file (2 s: radius.interim_min_s = 1);
a restart of xbngd in the middle sends no second Start (nor
Accounting-On), the interims go on and no counter goes backwards; the
release gives a Stop (User-Request) whose octets match what the CPE sent;
Session-Timeout and Idle-Timeout end their sessions on time; a session
whose CPE only sent a Router Solicitation (no lease ever bound) gets its
Start 10 s after its creation and ends on its Session-Timeout;
`xbngd --teardown` sends Accounting-Off.
"""
import signal
import time

from xbnglab.cpe import cpe_sub
from xbnglab.fixture import BringupSuite
from xbnglab.lab import sh, wait_for
from xbnglab.radius import FreeRadius, octets
from xbnglab.radius import user_name as user
from xbnglab.xbngd import GW4, UPLINK_DUT4, UPLINK_NET4, CtlError

SECRET = "xbng-lab-secret"

# One Router Solicitation from the CPE's MAC (scapy), nothing else.
SEND_RS = ("from scapy.all import Ether, IPv6, ICMPv6ND_RS, ICMPv6NDOptSrcLLAddr, sendp\n"
           "sendp(Ether(src='{mac}', dst='33:33:00:00:00:02') / "
           "IPv6(src='fe80::cc:1', dst='ff02::2', hlim=255) / ICMPv6ND_RS() / "
           "ICMPv6NDOptSrcLLAddr(lladdr='{mac}'), iface='c0', verbose=False)\n")

CONFIG = f"""
[dhcp]
lease_time = 120
dns = ["192.0.2.53"]

[radius]
servers = [{{ address = "{UPLINK_NET4}", secret = "{SECRET}" }}]
nas_identifier = "xbng-acct"
timeout_ms = 500
retries = 2
reject_hold_s = 1
interim_min_s = 1
coa_listen = ""
"""



class RadiusAcctTest(BringupSuite):
    DHCP_TOML = CONFIG
    ACCESS_PORT = '{ name = "acc0", subscriber_mtu = 1492, auth = "radius" }'

    @classmethod
    def setUpLab(cls):
        cls.acct, cls.timed, cls.idle = cpe_sub(0, base=60), cpe_sub(1, base=60), cpe_sub(2, base=60)
        cls.rs_only = cpe_sub(3, base=60)
        cls.ip = {"acct": "100.64.78.7", "timed": "100.64.78.8", "idle": "100.64.78.9",
                  "rs_only": "100.64.78.10"}
        users = (f'"{user(cls.acct)}" Auth-Type := Accept\n'
                 f'\tFramed-IP-Address = {cls.ip["acct"]},\n'
                 f'\tAcct-Interim-Interval = 2,\n'
                 f'\tClass = "acct-class"\n\n'
                 f'"{user(cls.timed)}" Auth-Type := Accept\n'
                 f'\tFramed-IP-Address = {cls.ip["timed"]},\n'
                 f'\tSession-Timeout = 6\n\n'
                 f'"{user(cls.idle)}" Auth-Type := Accept\n'
                 f'\tFramed-IP-Address = {cls.ip["idle"]},\n'
                 f'\tIdle-Timeout = 5\n\n'
                 f'"{user(cls.rs_only)}" Auth-Type := Accept\n'
                 f'\tFramed-IP-Address = {cls.ip["rs_only"]},\n'
                 f'\tSession-Timeout = 16\n')
        cls.radius = FreeRadius(cls.x.lab, cls.x.net, [(UPLINK_DUT4, SECRET)], users)
        cls.addClassCleanup(cls.radius.stop)
        cls.radius.start()

    def recs(self, s=None, status=None) -> list[dict]:
        out = self.radius.accounting()
        if s is not None:
            out = [r for r in out if r.get("User-Name") == user(s)]
        if status is not None:
            out = [r for r in out if r.get("Acct-Status-Type") == status]
        return out

    def get(self, s):
        try:
            return self.x.ctl("sub", "get", "--port", "acc0", "--outer", str(s["outer_vlan"]),
                              "--inner", str(s["inner_vlan"]))
        except CtlError:
            return None

    def bring_up(self, s, ip):
        b = self.b
        ns = b.cpe(s)
        client, files = b.dhclient(ns)
        b.wait_addr(ns, f"{ip}/32", timeout=30)
        wait_for(lambda: b.default_via(ns) == GW4, 10, 0.2, "default route via the gateway")
        wait_for(lambda: self.recs(s, "Start"), 10, 0.2, "the Start in the detail file")
        return ns, client, files

    def test_1_start_interims_restart_and_stop(self):
        b, s = self.b, self.acct
        # xbngd started before FreeRADIUS: the On waited in the queue.
        wait_for(lambda: self.recs(status="Accounting-On"), 30, 0.2, "Accounting-On")
        self.assertEqual(len(self.recs(status="Accounting-On")), 1, "Accounting-On at the cold start")
        ns, client, files = self.bring_up(s, self.ip["acct"])
        start = self.recs(s, "Start")[0]
        sid = start["Acct-Session-Id"]
        self.assertEqual(start["NAS-Port-Id"], f"acc0:{s['outer_vlan']}.{s['inner_vlan']}")
        self.assertEqual(start["Framed-IP-Address"], self.ip["acct"])
        self.assertEqual(start["Class"], "0x" + b"acct-class".hex())
        # Known traffic from the CPE: 40 echo requests of 1000 octets of data.
        r = ns.exec(["ping", "-c40", "-i0.05", "-s1000", "-W2", UPLINK_NET4], check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_for(lambda: len(self.recs(s, "Interim-Update")) >= 2, 15, 0.2, "two interims")
        # A restart in the middle: no second Start, no Accounting-On.
        before = len(self.recs(s, "Interim-Update"))
        b.restart()
        wait_for(lambda: len(self.recs(s, "Interim-Update")) >= before + 2, 20, 0.2,
                 "interims after the restart")
        self.assertEqual(len(self.recs(s, "Start")), 1, "no second Start")
        self.assertEqual(len(self.recs(status="Accounting-On")), 1, "no Accounting-On")
        # The release ends the session: Stop, User-Request.
        b.stop_client(client)
        b.dhclient_release(ns, files)
        wait_for(lambda: self.recs(s, "Stop"), 15, 0.2, "the Stop")
        wait_for(lambda: self.get(s) is None, 5, 0.2, "the subscriber gone")
        stop = self.recs(s, "Stop")[0]
        self.assertEqual(stop["Acct-Session-Id"], sid)
        self.assertEqual(stop["Acct-Terminate-Cause"], "User-Request")
        self.assertEqual(stop["Class"], "0x" + b"acct-class".hex())
        # Up (Acct-Input): 40 × (1000 data + 8 ICMP + 20 IP) at least, plus
        # per frame at most 14 Ethernet + 8 tags + 4 slack, and a few small
        # frames (DHCP, ARP) of at most 600 octets each.
        ip_octets = 40 * 1028
        self.assertGreaterEqual(octets(stop, "Input"), ip_octets, stop)
        self.assertLessEqual(octets(stop, "Input"), ip_octets + 40 * 26 + 10 * 600, stop)
        self.assertGreaterEqual(octets(stop, "Output"), ip_octets, stop)
        self.assertLessEqual(octets(stop, "Output"), ip_octets + 40 * 26 + 10 * 600, stop)
        self.assertGreaterEqual(int(stop["Acct-Input-Packets"]), 40)
        # Counters never go backwards, restart included.
        seq = [r for r in self.recs(s) if r["Acct-Status-Type"] in ("Interim-Update", "Stop")]
        for a, c in zip(seq, seq[1:]):
            for k in ("Input", "Output"):
                self.assertLessEqual(octets(a, k), octets(c, k), (a, c))
            self.assertLessEqual(int(a["Acct-Session-Time"]), int(c["Acct-Session-Time"]))
        st = b.x.stats()
        self.assertGreater(st.get("acct_acked", 0), 0, st)
        self.assertGreater(st.get("acct_interim", 0), 0, st)

    def test_2_session_timeout(self):
        s = self.timed
        self.bring_up(s, self.ip["timed"])
        wait_for(lambda: self.recs(s, "Stop"), 20, 0.2, "the Stop")
        stop = self.recs(s, "Stop")[0]
        self.assertEqual(stop["Acct-Terminate-Cause"], "Session-Timeout")
        # Counted from the Accept, in whole seconds: 6, or 7 with a tick late.
        self.assertGreaterEqual(int(stop["Acct-Session-Time"]), 6)
        self.assertLessEqual(int(stop["Acct-Session-Time"]), 9)
        wait_for(lambda: self.get(s) is None, 5, 0.2, "the subscriber gone")

    def test_3_idle_timeout(self):
        s = self.idle
        ns, _, _ = self.bring_up(s, self.ip["idle"])
        # Traffic for 7 s keeps it up past its Idle-Timeout of 5 s.
        r = ns.exec(["ping", "-c28", "-i0.25", "-W2", UPLINK_NET4], check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        last_traffic = time.time()
        self.assertIsNotNone(self.get(s), "traffic keeps the session")
        wait_for(lambda: self.recs(s, "Stop"), 20, 0.2, "the Stop")
        stop = self.recs(s, "Stop")[0]
        self.assertEqual(stop["Acct-Terminate-Cause"], "Idle-Timeout")
        ended = int(stop["Timestamp"])  # when FreeRADIUS received it
        # Never before 5 s of silence (seconds granular: 1 s slack).
        self.assertGreaterEqual(ended, int(last_traffic) + 5 - 1, stop)
        wait_for(lambda: self.get(s) is None, 5, 0.2, "the subscriber gone")

    def test_3b_a_session_without_a_lease_starts_after_the_grace(self):
        s = self.rs_only
        ns = self.b.cpe(s)
        t0 = time.time()
        r = ns.exec(["/usr/bin/python3", "-c", SEND_RS.format(mac=s["mac"])], check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_for(lambda: self.get(s) is not None, 10, 0.2, "the subscriber RADIUS created")
        wait_for(lambda: self.recs(s, "Start"), 20, 0.2, "the Start without a lease")
        start = self.recs(s, "Start")[0]
        # Created at once, started 10 s later (the grace; whole seconds).
        self.assertGreaterEqual(int(start["Timestamp"]), int(t0) + 10 - 1, start)
        self.assertEqual(start["Framed-IP-Address"], self.ip["rs_only"])
        # Its Session-Timeout counts from its creation: the Stop ~16 s in.
        wait_for(lambda: self.recs(s, "Stop"), 20, 0.2, "the Stop")
        stop = self.recs(s, "Stop")[0]
        self.assertEqual(stop["Acct-Terminate-Cause"], "Session-Timeout")
        self.assertGreaterEqual(int(stop["Acct-Session-Time"]), 16)
        self.assertLessEqual(int(stop["Acct-Session-Time"]), 19)
        wait_for(lambda: self.get(s) is None, 5, 0.2, "the subscriber gone")

    def test_4_teardown_sends_accounting_off(self):
        x = self.b.x
        self.assertEqual(self.recs(status="Accounting-Off"), [])
        self.assertEqual(x.stop(signal.SIGTERM), 0, x.read_log())
        r = sh(x.dut.nsenter_argv([x.xbngd, "--teardown", "--config", self.b.config,
                                   "--bpffs", x.lab.bpffs]), check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Accounting-Off acknowledged", r.stdout + r.stderr)
        offs = self.recs(status="Accounting-Off")
        self.assertEqual(len(offs), 1)
        self.assertEqual(offs[0]["NAS-Identifier"], "xbng-acct")


if __name__ == "__main__":
    import unittest
    unittest.main()
