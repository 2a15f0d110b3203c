"""Hardening of subscribers, end to end with the real xbngd:
  - the router's own and infrastructure addresses are refused as subscriber
     addresses (FAILED_PRECONDITION naming the conflict), and a conflict that
     appears later (an address added to the uplink) is reported in GetStats;
  - MAC policy "follow": a CPE swap moves the subscriber (MAC_CHANGED) and
     downstream frames go to the new MAC; an upsert without MAC re-learns;
     "enforce" drops frames from another MAC;
  - a subscriber's frames to the host's own services are dropped unless the
     service is allowed (security.allow_to_host, applied live on SIGHUP)."""
import json
import os
import signal
import socket
import subprocess
import time
import unittest

from xbnglab.fixture import LabSuite
from xbnglab.frames import down_v4, qinq, up_v4
from xbnglab.lab import drain, recv_frames, wait_for
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw
from xbnglab.xbngd import GW4, UPLINK_DUT4, UPLINK_NET4, CtlError, plan, subscribed


def tags_to(mac):
    m = bytes.fromhex(mac.replace(":", ""))
    return lambda f: f[0:6] == m and f[12:14] == b"\x88\xa8" and b"xbng-down" in f


class HardeningTest(LabSuite):
    @classmethod
    def setUpLab(cls):
        cls.config = os.path.join(cls.x.lab.rundir, "xbngd.toml")
        cls.write_config(allow=[])
        cls.x.start(max_subscribers=4096, extra=["--config", cls.config])
        cls.open_ports()

    @classmethod
    def write_config(cls, allow):
        with open(cls.config, "w") as f:
            f.write("[security]\nreserved = [\"203.0.113.0/24\"]\n")
            f.write("allow_to_host = [%s]\n" % ", ".join(f'"{a}"' for a in allow))

    @staticmethod
    def key(s):
        return ["--port", s["port"], "--outer", str(s["outer_vlan"]), "--inner", str(s["inner_vlan"])]

    def import_one(self, sub):
        out, _ = self.x.import_subs([sub])
        return out

    # -- reserved addresses ------------------------------------------------------
    def test_reserved_addresses_are_refused_by_name(self):
        s = plan(900, c_per_s=10)
        key = self.key(s)
        cases = [
            (["--ipv4", UPLINK_DUT4], "upl0"),                      # the uplink's own address
            (["--ipv4", UPLINK_NET4], "connected subnet of uplink upl0"),  # the next hop
            (["--ipv4", "192.0.2.255"], "connected subnet of uplink upl0"),  # its broadcast
            (["--ipv4", GW4], "gateway"),
            (["--ipv4", s["ipv4"], "--ipv4-prefix", "100.64.0.0/24"], "gateway"),  # covers it
            (["--ipv4", s["ipv4"], "--ipv4-prefix", "192.0.0.0/16"], "upl0"),  # covers the subnet
            (["--ipv4", s["ipv4"], "--ipv4-prefix", "203.0.113.64/26"], "security.reserved"),
            (["--ipv6", "2001:db8:ffff::2"], "connected subnet of uplink upl0"),
            (["--ipv6", "2001:db8:1000::1"], "gateway"),
        ]
        for args, needle in cases:
            r = self.x.ctl_raw("sub", "add", *key, *args)
            self.assertEqual(r.returncode, 1, args)  # a value refused (FAILED_PRECONDITION)
            self.assertIn("reserved", r.stderr, args)
            self.assertIn(needle, r.stderr, args)
        self.assertNotEqual(self.x.ctl_raw("sub", "get", *key).returncode, 0)

    def test_a_later_uplink_address_is_reported_as_a_conflict(self):
        s = plan(901, c_per_s=10)
        self.assertEqual(int(self.import_one(s)["applied"]), 1)
        try:
            self.x.dut.ip("addr", "add", s["ipv4"] + "/32", "dev", "upl0")

            def reported():
                st = self.x.ctl("stats")
                return int(st.get("reserved_conflict_count", 0)) >= 1 and st
            try:
                st = wait_for(reported, 10, 0.2, "the conflict in GetStats")
            except TimeoutError:
                self.fail("no conflict reported:\n" + self.x.read_log()[-3000:])
            c = st["reserved_conflicts"][0]
            self.assertEqual((c["field"], c["value"]), ("ipv4", s["ipv4"]))
            self.assertIn("upl0", c["reserved"])
            self.assertIn("reserved address conflict", self.x.read_log())
        finally:
            self.x.dut.ip("addr", "del", s["ipv4"] + "/32", "dev", "upl0", check=False)
            self.x.ctl("sub", "del", *self.key(s))
        wait_for(lambda: int(self.x.ctl("stats").get("reserved_conflict_count", 0)) == 0, 10, 0.2,
                 "the conflict to clear")

    # -- host services -----------------------------------------------------------
    def test_host_services_are_closed_unless_allowed(self):
        s = plan(902, c_per_s=10)
        self.assertEqual(int(self.import_one(s)["applied"]), 1)
        with self.x.dut.entered():
            svc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        svc.bind((UPLINK_DUT4, 5353))
        svc.settimeout(1.0)
        self.addCleanup(svc.close)
        frame = bytes(qinq(s, self.acc_mac) / IP(src=s["ipv4"], dst=UPLINK_DUT4) /
                      UDP(sport=40000, dport=5353) / Raw(b"hello host"))
        before = self.x.stats()
        self.sub_sock.send(frame)
        with self.assertRaises(socket.timeout):
            svc.recvfrom(100)
        after = self.x.stats()
        self.assertEqual(after["drop_to_host"] - before["drop_to_host"], 1)
        # Allowed live: SIGHUP with security.allow_to_host = ["udp/5353"].
        type(self).write_config(allow=["udp/5353"])
        self.x.daemon.send_signal(signal.SIGHUP)
        wait_for(lambda: "security.allow_to_host" in self.x.read_log(), 10, 0.1, "the reload")
        self.sub_sock.send(frame)
        data, _ = svc.recvfrom(100)
        self.assertEqual(data, b"hello host")
        type(self).write_config(allow=[])
        self.x.daemon.send_signal(signal.SIGHUP)

    # -- MAC policies ------------------------------------------------------------
    def events(self, n):
        p = subprocess.Popen([self.x.xbngctl, "--server", self.x.grpc, "--json", "events",
                              "--count", str(n)], stdout=subprocess.PIPE, text=True)
        self.addCleanup(p.kill)
        return p

    def test_follow_moves_the_subscriber_to_the_new_cpe(self):
        s = plan(903, c_per_s=10)
        del s["mac"]
        s["mac_policy"] = "MAC_POLICY_FOLLOW"
        self.assertEqual(int(self.import_one(s)["applied"]), 1)
        old, new = dict(s, mac="02:00:00:aa:00:01"), dict(s, mac="02:00:00:aa:00:02")
        ev = self.events(3)  # AGENT_STARTED, MAC_LEARNED, MAC_CHANGED
        first = json.loads(subscribed(ev))
        self.sub_sock.send(bytes(up_v4(old, self.acc_mac, UPLINK_NET4)))
        self.expect_down(s, old["mac"])
        time.sleep(1.1)  # one move per subscriber per second
        self.sub_sock.send(bytes(up_v4(new, self.acc_mac, UPLINK_NET4)))
        lines = [first] + [json.loads(ev.stdout.readline()) for _ in range(2)]
        self.assertEqual([e["type"] for e in lines], ["AGENT_STARTED", "MAC_LEARNED", "MAC_CHANGED"])
        self.assertEqual(lines[2]["mac"], new["mac"])
        wait_for(lambda: "route(s) follow it" in self.x.read_log(), 5, 0.1, "the routes to follow")
        self.expect_down(s, new["mac"])
        got = self.x.ctl("sub", "get", *self.key(s))
        sub = got.get("subscriber", got)
        self.assertEqual(sub.get("mac_policy"), "MAC_POLICY_FOLLOW")
        self.assertEqual(sub.get("mac"), new["mac"])
        # An upsert without MAC under follow: learn again.
        self.assertEqual(int(self.import_one(s)["applied"]), 1)
        got = self.x.ctl("sub", "get", *self.key(s))
        self.assertFalse(got.get("subscriber", got).get("mac_learned", False))

    def test_enforce_drops_another_mac(self):
        s = plan(904, c_per_s=10)
        s["mac_policy"] = "MAC_POLICY_ENFORCE"
        self.assertEqual(int(self.import_one(s)["applied"]), 1)
        intruder = dict(s, mac="02:00:00:bb:00:01")
        before = self.x.stats()
        self.sub_sock.send(bytes(up_v4(intruder, self.acc_mac, UPLINK_NET4)))
        wait_for(lambda: self.x.stats()["drop_mac_mismatch"] > before["drop_mac_mismatch"], 10, 0.1,
                 "the intruder's frame to be counted")
        after = self.x.stats()
        self.assertEqual(after["drop_mac_mismatch"] - before["drop_mac_mismatch"], 1)
        self.assertEqual(after["forward_upstream"] - before["forward_upstream"], 0)

    def expect_down(self, s, mac):
        drain(self.sub_sock)
        self.net_sock.send(bytes(down_v4(self.n0_mac, self.upl_mac, UPLINK_NET4, s["ipv4"])))
        got = recv_frames(self.sub_sock, 2.0, want=1, match=tags_to(mac))
        self.assertEqual(len(got), 1, f"downstream frame to {mac}")


if __name__ == "__main__":
    unittest.main()
