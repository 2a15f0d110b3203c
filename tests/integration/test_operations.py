"""Operations against a real xbngd in the lab: the Prometheus endpoint agrees
with GetStats, SIGHUP applies what can change live and refuses the rest by
name, per-port settings from the config file reach the data plane."""
import ipaddress
import json
import os
import re
import signal
import subprocess
import time
import unittest
import urllib.error
import urllib.request

from xbnglab import prom
from xbnglab.frames import down_v4, qinq, tags, up_v4, IP, UDP, Raw
from xbnglab.lab import drain, recv_frames, sh, wait_for
from xbnglab.xbngd import UPLINK_NET4, XbngLab, plan


class OpsLab(unittest.TestCase):
    def setUp(self):
        self.x = XbngLab()
        self.addCleanup(self.x.close)

    def scrape(self, listen: str = "127.0.0.1:9469") -> str:
        with self.x.dut.entered():  # the endpoint listens inside dut's namespace
            with urllib.request.urlopen(f"http://{listen}/metrics", timeout=5) as r:
                self.assertEqual(r.status, 200)
                self.assertIn("text/plain; version=0.0.4", r.headers["Content-Type"])
                return r.read().decode()

    def write_config(self, text: str) -> str:
        path = os.path.join(self.x.lab.rundir, "xbngd.toml")
        with open(path, "w") as f:
            f.write(text)
        return path


class MetricsTest(OpsLab):
    def test_scrape_agrees_with_getstats(self):
        self.x.start(max_subscribers=4096)
        subs = [plan(i, c_per_s=10) for i in range(30)]
        out, _ = self.x.import_subs(subs)
        self.assertEqual(int(out["applied"]), 30)
        self.x.resolve_uplink_neighbours()
        tx = self.x.sub.packet_socket("s0")
        acc_mac = self.x.dut.mac("acc0")
        for s in subs[:10]:
            tx.send(bytes(up_v4(s, acc_mac, UPLINK_NET4)))
        tx.send(bytes(qinq(subs[0], acc_mac, svid=999, cvid=999) / IP(src="100.64.9.9", dst=UPLINK_NET4) /
                      UDP(sport=1, dport=9) / Raw(b"x")))
        tx.close()
        # A failing call is counted under its code.
        r = self.x.ctl_raw("sub", "get", "--port", "acc0", "--outer", "4000", "--inner", "1")
        self.assertNotEqual(r.returncode, 0)
        # The frames are counted when the receiving side's softirq runs:
        # soon, later on a busy machine.
        wait_for(lambda: self.x.stats().get("forward_upstream", 0) >= 10
                 and self.x.stats().get("drop_unknown_subscriber", 0) >= 1, 10, 0.1,
                 "the 11 frames to be counted")

        # The kernels in the lab keep talking (ND probes from net are passed
        # to dut's stack and counted): the scrape must lie between two
        # GetStats taken around it, and equal them where nothing moved.
        before = self.x.ctl("stats")
        m = prom.by_key(self.scrape())
        after = {(r["reason"], f): int(r.get(f, 0))
                 for r in self.x.ctl("stats")["reasons"] for f in ("packets", "bytes")}
        for r in before["reasons"]:
            for f in ("packets", "bytes"):
                key = f'xbng_{f}_total{{reason="{r["reason"]}",kind="{r["kind"]}"}}'
                lo, hi = int(r.get(f, 0)), after[(r["reason"], f)]
                self.assertTrue(lo <= m[key] <= hi, f"{key}: {m[key]} not in [{lo}, {hi}]")
        self.assertEqual(m['xbng_packets_total{reason="forward_upstream",kind="forward"}'], 10)
        self.assertEqual(m['xbng_packets_total{reason="drop_unknown_subscriber",kind="drop"}'], 1)
        self.assertGreaterEqual(m['xbng_port_rx_packets_total{port="acc0",role="access"}'], 11)
        self.assertGreaterEqual(m['xbng_port_tx_packets_total{port="upl0",role="uplink"}'], 10)
        self.assertEqual(m["xbng_subscribers"], 30)
        self.assertEqual(m['xbng_map_entries{map="subscribers"}'], 30)
        self.assertEqual(m['xbng_map_max_entries{map="subscribers"}'], 4096)
        self.assertAlmostEqual(m['xbng_map_fill_ratio{map="subscribers"}'], 30 / 4096)
        self.assertEqual(m['xbng_map_entries{map="ports"}'], 2)
        meth = 'method="xbng.v1.Subscribers/'
        self.assertEqual(m[f'xbng_grpc_requests_total{{{meth}StreamSubscribers",code="OK"}}'], 1)
        self.assertEqual(m[f'xbng_grpc_requests_total{{{meth}GetSubscriber",code="NOT_FOUND"}}'], 1)
        self.assertGreaterEqual(m[f'xbng_grpc_requests_total{{{meth}GetStats",code="OK"}}'], 2)
        self.assertEqual(m[f'xbng_grpc_request_duration_seconds_count{{{meth}StreamSubscribers"}}'], 1)
        self.assertEqual(m[f'xbng_grpc_request_duration_seconds_bucket{{{meth}StreamSubscribers",le="+Inf"}}'], 1)
        version = subprocess.run([self.x.xbngd, "--version"], capture_output=True, text=True).stdout
        v = re.match(r"xbngd (\S+) \(ABI (\d+)\)", version)
        self.assertEqual(m[f'xbng_build_info{{version="{v.group(1)}",abi="{v.group(2)}"}}'], 1)
        self.assertLess(abs(m["xbng_start_time_seconds"] - time.time()), 120)


class ReloadTest(OpsLab):
    BASE = '[limits]\nevents_per_sec = 1000\n[metrics]\nlisten = "127.0.0.1:9469"\n[log]\nlevel = "info"\n'

    def hup(self, text: str, needle: str):
        """Writes the config, sends SIGHUP, waits for one more log line containing needle."""
        self.write_config(text)
        seen = self.x.read_log().count(needle)
        os.kill(self.x.daemon.pid, signal.SIGHUP)
        wait_for(lambda: self.x.read_log().count(needle) > seen, 10, 0.05, f"log line {needle!r}")
        self.assertIsNone(self.x.daemon.poll(), self.x.read_log())

    def reload_ok(self, listen: str) -> float:
        return prom.by_key(self.scrape(listen))["xbng_config_last_reload_successful"]

    def test_sighup_applies_live_settings_and_refuses_the_rest(self):
        path = self.write_config(self.BASE)
        self.x.start(extra=["--config", path])
        self.assertEqual(self.reload_ok("127.0.0.1:9469"), 1)

        # Live: log level and metrics address. Not live: events_per_sec (a
        # const volatile of the loaded program) and the outer TPID (ports map).
        self.hup('[limits]\nevents_per_sec = 5\n[ports]\nouter_tpid = "0x8100"\n'
                 '[metrics]\nlisten = "127.0.0.1:9470"\n[log]\nlevel = "debug"\n',
                 "reload: refused limits.events_per_sec")
        log = self.x.read_log()
        self.assertIn("reload: applied log.level: info -> debug", log)
        self.assertIn('reload: applied metrics.listen: "127.0.0.1:9469" -> "127.0.0.1:9470"', log)
        self.assertRegex(log, r"reload: refused limits.events_per_sec: 1000 -> 5: cannot change "
                              r"live \(a `const volatile`.*\); restart xbngd")
        self.assertIn("reload: refused ports.outer_tpid: 0x88a8 -> 0x8100: cannot change live", log)
        self.assertEqual(self.reload_ok("127.0.0.1:9470"), 0)
        with self.assertRaises(urllib.error.URLError):
            self.scrape("127.0.0.1:9469")
        self.assertEqual(self.x.ctl_raw("stats").returncode, 0)

        # The file now says what runs (the refused settings were not applied).
        running = self.BASE.replace("9469", "9470").replace("info", "debug")
        self.hup(running, "re-read: no change")
        self.assertEqual(self.reload_ok("127.0.0.1:9470"), 1)

        # A broken file changes nothing.
        self.hup('[log]\nlevel = "loud"\n', "rejected, nothing changed")
        self.assertIn("log.level (--log-level) loud", self.x.read_log())
        self.assertEqual(self.reload_ok("127.0.0.1:9470"), 0)
        self.hup(running, "re-read: no change")
        self.hup('[log\n', "; nothing changed")
        self.assertEqual(self.reload_ok("127.0.0.1:9470"), 0)

        # Metrics off.
        self.hup(running.replace('"127.0.0.1:9470"', '""'),
                 "metrics endpoint 127.0.0.1:9470 closed")
        with self.assertRaises(urllib.error.URLError):
            self.scrape("127.0.0.1:9470")
        self.assertEqual(self.x.stop(), 0, self.x.read_log())


class PortSettingsTest(OpsLab):
    def test_per_port_tpid_and_mtu_from_the_config_file(self):
        path = self.write_config('[ports]\naccess = [{ name = "acc0", outer_tpid = "0x8100", '
                                 'mtu = 1400 }]\n')
        check = subprocess.run([self.x.xbngd, "--check-config", path], capture_output=True,
                               text=True)
        self.assertEqual(check.returncode, 1)  # no uplink, no gateway in the file alone
        self.assertIn("no uplink port", check.stderr)
        self.x.start(max_subscribers=4096, extra=["--config", path])
        self.assertIn("port acc0 (ifindex", self.x.read_log())
        self.assertIn("mtu 1400, outer tpid 0x8100", self.x.read_log())
        ports = sh(["bpftool", "-j", "map", "dump", "pinned",
                    self.x.pinned_map("ports")]).stdout
        by_role = {e["formatted"]["value"]["role"]: e["formatted"]["value"] for e in json.loads(ports)}
        self.assertEqual(by_role[1]["outer_tpid"], 0x8100)
        self.assertEqual(by_role[1]["mtu"], 1400)

        s = plan(0)
        out, _ = self.x.import_subs([s])
        self.assertEqual(int(out["applied"]), 1)
        self.x.resolve_uplink_neighbours()
        sub_sock = self.x.sub.packet_socket("s0")
        net_sock = self.x.net.packet_socket("n0")
        self.addCleanup(sub_sock.close)
        self.addCleanup(net_sock.close)
        acc_mac, upl_mac, n0_mac = self.x.dut.mac("acc0"), self.x.dut.mac("upl0"), self.x.net.mac("n0")
        before = self.x.stats()
        # Upstream: 0x8100 outside is this port's TPID now; 0x88a8 is wrong.
        sub_sock.send(bytes(qinq(s, acc_mac, outer_tpid=0x8100) / IP(src=s["ipv4"], dst=UPLINK_NET4) /
                            UDP(sport=40000, dport=9) / Raw(b"xbng-tpid")))
        sub_sock.send(bytes(up_v4(s, acc_mac, UPLINK_NET4)))
        got = recv_frames(net_sock, 2.0, want=1, match=lambda f: b"xbng-tpid" in f)
        self.assertEqual(len(got), 1)
        # Downstream: IP length + 8 must fit in 1400 (`mtu` is the older form of
        # subscriber_mtu + 8); without DF the larger one is dropped.
        m = bytes.fromhex(s["mac"].replace(":", ""))
        for size, marker in ((1392, b"xbng-fits"), (1393, b"xbng-toobig")):
            p = down_v4(n0_mac, upl_mac, UPLINK_NET4, s["ipv4"], payload=marker)
            p = p / Raw(b"\0" * (size - len(p[IP])))
            net_sock.send(bytes(p))
        fits = recv_frames(sub_sock, 2.0, want=1, match=lambda f: f[:6] == m and b"xbng-fits" in f)
        self.assertEqual(len(fits), 1)
        self.assertEqual([t[0] for t in tags(fits[0])], [0x8100, 0x8100])
        self.assertEqual(recv_frames(sub_sock, 0.5, match=lambda f: b"xbng-toobig" in f), [])
        after = self.x.stats()
        self.assertEqual(after["drop_wrong_outer_tpid"] - before.get("drop_wrong_outer_tpid", 0), 1)
        self.assertEqual(after["drop_too_big_not_df"] - before.get("drop_too_big_not_df", 0), 1)


if __name__ == "__main__":
    unittest.main()
