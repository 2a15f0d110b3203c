"""`xbngctl trace`: the fast path's verdict for one frame, against the live
maps, in the veth lab (xbng_lab.py) with the real xbngd.

Cases: upstream IPv4 and IPv6 from a provisioned subscriber (redirect to
the uplink, the FIB's next hop), a spoofed source (dropped, named), an
unknown VLAN, a DHCP DISCOVER given as a hex frame file (punt), a subscriber
over its rate plan (policed, with the bucket's state) and under it,
downstream to a /32, a /128 and a delegated /64 (both tags in the output),
TTL 1 (ICMP time exceeded, the ICMP frame shown), and a pcap frame file.

The point of the design is that tracing changes nothing: every pinned map
(counters, per-port stats, police buckets, subscribers with their learned
MACs and counters, routes with theirs, unknown_seen, mac_seen, event and
ICMP budgets, punt limits, the ICMP scratch buffer) is dumped with bpftool
before and after the traces and must be byte-for-byte equal; no event
reaches a WatchEvents stream; xbngd receives no punted frame and its lease
state does not change. A learn-MAC subscriber without a MAC is traced too:
the live program would learn and report it.
"""
import ipaddress
import json
import os
import subprocess
import time
import unittest

from scapy.layers.dhcp import BOOTP, DHCP
from scapy.utils import wrpcap

from xbnglab.fixture import LabSuite
from xbnglab.frames import IP, UDP, Dot1AD, Dot1Q, Ether, Raw
from xbnglab.lab import drain, recv_frames
from xbnglab.xbngd import GW4, UPLINK_DUT4, UPLINK_DUT6, UPLINK_NET4, UPLINK_NET6, plan

BPFTOOL = next((p for p in ("/usr/sbin/bpftool", "/sbin/bpftool") if os.path.exists(p)), "bpftool")
RINGBUFS = {"events", "punt"}  # not dumpable; covered by the event stream and the punt counters

# The policed subscriber: the lowest plan the API takes, one maximum-size packet of burst (the port MTU, 1508),
# so that one live frame spends the bucket for about a second and a half.
POLICED_RATE, POLICED_BURST = 8000, 1508


class TraceTest(LabSuite):
    maxDiff = None

    @classmethod
    def setUpLab(cls):
        x = cls.x
        x.start(max_subscribers=1024)
        cls.subs = [plan(i, c_per_s=4) for i in range(3)]
        # Subscriber 1: rate plan. Subscriber 2: learns its MAC.
        cls.subs[1]["policy"] = {"up_rate_bps": POLICED_RATE, "up_burst_bytes": POLICED_BURST,
                                 "down_rate_bps": 0, "down_burst_bytes": 0}
        del cls.subs[2]["mac"]
        cls.provision(cls.subs)
        cls.acc_mac = x.dut.mac("acc0")
        cls.upl_mac = x.dut.mac("upl0")
        cls.n0_mac = x.net.mac("n0")
        # Permanent neighbours both ways on the uplink: no ARP/ND probe
        # (neighbour reachability confirmation) crosses xbng while the
        # maps are compared.
        for ns, dev, peers, mac in ((x.dut, "upl0", (UPLINK_NET4, UPLINK_NET6), cls.n0_mac),
                                    (x.net, "n0", (UPLINK_DUT4, UPLINK_DUT6), cls.upl_mac)):
            for addr in peers:
                ns.ip("neigh", "replace", addr, "lladdr", mac, "dev", dev, "nud", "permanent")
        cls.sub_sock = x.sub.packet_socket("s0")
        cls.addClassCleanup(cls.sub_sock.close)

    # -- helpers ----------------------------------------------------------------
    def trace(self, *args: str) -> dict:
        return self.x.ctl("trace", *args, timeout=30)

    def step(self, r: dict, name: str) -> str:
        for s in r["steps"]:
            if s["name"] == name:
                return s["detail"]
        self.fail(f"no step {name!r} in {[(s['name'], s['detail']) for s in r['steps']]}")

    def assert_no_step(self, r: dict, name: str) -> None:
        self.assertNotIn(name, [s["name"] for s in r["steps"]], r["steps"])

    def tags(self, d: dict) -> list[tuple[int, int]]:
        return [(int(t["tpid"]), int(t["vid"])) for t in d.get("tags", [])]

    def snapshot(self) -> dict:
        """Every pinned map but the ring buffers, as bpftool dumps it (all
        CPUs of the per-CPU maps), in one bpftool process."""
        import glob
        maps = sorted(p for p in glob.glob(f"{self.x.lab.bpffs}/v*/maps/*")
                      if os.path.basename(p) not in RINGBUFS)
        self.assertGreater(len(maps), 15, maps)
        batch = os.path.join(self.x.lab.rundir, "dump.batch")
        with open(batch, "w") as f:
            for p in maps:
                f.write(f"map dump pinned {p}\n")
        r = subprocess.run([BPFTOOL, "-j", "batch", "file", batch], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        docs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        if len(docs) == 1 and isinstance(docs[0], list) and len(docs[0]) == len(maps):
            docs = docs[0]
        self.assertEqual(len(docs), len(maps), r.stdout[:500])
        snap = {}
        for p, d in zip(maps, docs):
            # bpftool batch -j: {"command": [...], "output": [entries]}
            entries = d["output"] if isinstance(d, dict) else d
            self.assertIsInstance(entries, list, f"{p}: {str(d)[:300]}")
            snap[os.path.basename(p)] = sorted(json.dumps(e, sort_keys=True) for e in entries)
        return snap

    def quiet_snapshot(self, quiet_s: float = 3.0, timeout_s: float = 40.0) -> dict:
        """A snapshot that has not changed for quiet_s: nothing live (the
        lab's own kernels) is moving the counters. The net side's kernel
        sends MLDv2 reports when it joins groups, repeated within the
        unsolicited-report interval (1 s), so a single half-second pause
        is not proof of silence: the window covers several intervals."""
        deadline = time.monotonic() + timeout_s
        prev, since = self.snapshot(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            cur = self.snapshot()
            if cur != prev:
                prev, since = cur, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return cur
        self.fail("the lab never went quiet: live traffic keeps changing the maps")

    def assert_same(self, before: dict, after: dict) -> None:
        changed = {}
        for name in before:
            if before[name] != after[name]:
                old, new = set(before[name]), set(after[name])
                show = lambda es: [json.loads(e).get("formatted", e) for e in sorted(es)]
                changed[name] = {"before": show(old - new), "after": show(new - old)}
        self.assertEqual(changed, {}, "pinned maps changed by tracing")

    def leases(self) -> list:
        return [self.x.ctl("sub", "get", "--port", "acc0", "--outer", str(s["outer_vlan"]),
                           "--inner", str(s["inner_vlan"])) for s in self.subs]

    def dhcp_replies_at_sub(self) -> list:
        """DHCP replies xbngd sent to the subscriber side: a punted DISCOVER
        would have drawn an OFFER."""
        def is_dhcp_reply(f: bytes) -> bool:
            p = Ether(f)
            return p.haslayer(UDP) and p[UDP].sport == 67
        return recv_frames(self.sub_sock, 1.0, match=is_dhcp_reply)

    # -- the cases ---------------------------------------------------------------
    def cases(self):
        s0, s2 = self.subs[0], self.subs[2]
        key0 = ["--port", "acc0", "--outer", str(s0["outer_vlan"]), "--inner", str(s0["inner_vlan"])]

        with self.subTest("upstream ipv4"):
            r = self.trace(*key0, "--src", s0["ipv4"], "--dst", UPLINK_NET4, "--proto", "udp",
                           "--sport", "40000", "--dport", "9")
            self.assertEqual(r["verdict"], "XDP_REDIRECT")
            self.assertEqual(r["reason"], "forward_upstream")
            self.assertEqual(r["egress_port"], "upl0")
            self.assertIn("found", self.step(r, "subscriber"))
            self.assertEqual(self.step(r, "anti_spoofing"), "pass")
            self.assertIn("no rate plan", self.step(r, "police_up"))
            self.assertIn("success: egress upl0", self.step(r, "fib"))
            self.assertIn("upl0", self.step(r, "redirect"))
            o = r["output"]
            self.assertEqual(self.tags(r["input"]), [(0x88A8, s0["outer_vlan"]), (0x8100, s0["inner_vlan"])])
            self.assertEqual(self.tags(o), [])
            self.assertEqual(o["dst_mac"], self.n0_mac)  # the FIB's next hop
            self.assertEqual(o["src_mac"], self.upl_mac)
            self.assertEqual((o["src"], o["dst"], o["ttl"]), (s0["ipv4"], UPLINK_NET4, 63))
            self.assertEqual((o["proto"], o["sport"], o["dport"]), ("udp", 40000, 9))

        with self.subTest("upstream ipv6"):
            r = self.trace(*key0, "--src", s0["ipv6"], "--dst", UPLINK_NET6, "--proto", "tcp",
                           "--dport", "443")
            self.assertEqual((r["verdict"], r["reason"], r["egress_port"]),
                             ("XDP_REDIRECT", "forward_upstream", "upl0"))
            o = r["output"]
            self.assertEqual(o["dst_mac"], self.n0_mac)
            self.assertEqual((o["dst"], o["ttl"], o["proto"], o["dport"]), (UPLINK_NET6, 63, "tcp", 443))

        with self.subTest("spoofed source"):
            r = self.trace(*key0, "--src", "100.64.9.9", "--dst", UPLINK_NET4)
            self.assertEqual((r["verdict"], r["reason"]), ("XDP_DROP", "drop_spoofed_ipv4"))
            self.assertEqual(self.step(r, "anti_spoofing"), "stopped here: drop_spoofed_ipv4")
            names = [s["name"] for s in r["steps"]]
            self.assertEqual(names[-2:], ["anti_spoofing", "verdict"])
            self.assert_no_step(r, "fib")
            self.assertEqual(r["egress_port"], "")
            self.assertEqual(r.get("output_frame", ""), "")

        with self.subTest("unknown vlan"):
            r = self.trace("--port", "acc0", "--outer", "777", "--inner", "7", "--src", "100.64.7.7",
                           "--dst", UPLINK_NET4)
            self.assertEqual((r["verdict"], r["reason"]), ("XDP_DROP", "drop_unknown_subscriber"))
            self.assertIn("not found", self.step(r, "subscriber"))
            self.assertEqual(self.step(r, "qinq"), "S-VID 777 C-VID 7")
            # The live program would report the key; the trace only says so.
            self.assertIn("unknown_subscriber", self.step(r, "event"))

        with self.subTest("dhcp discover (hex frame file)"):
            f = (Ether(src=s0["mac"], dst="ff:ff:ff:ff:ff:ff") / Dot1AD(vlan=s0["outer_vlan"]) /
                 Dot1Q(vlan=s0["inner_vlan"]) / IP(src="0.0.0.0", dst="255.255.255.255") /
                 UDP(sport=68, dport=67) /
                 BOOTP(chaddr=bytes.fromhex(s0["mac"].replace(":", "")), xid=0x1234) /
                 DHCP(options=[("message-type", "discover"), "end"]))
            self.discover = bytes(f)
            path = os.path.join(self.x.lab.rundir, "discover.hex")
            with open(path, "w") as fh:
                hx = bytes(f).hex()
                fh.write("\n".join(hx[i:i + 32] for i in range(0, len(hx), 32)) + "\n")
            r = self.trace("--port", "acc0", "--frame", path)
            self.assertEqual((r["verdict"], r["reason"]), ("XDP_DROP", "punt_dhcpv4"))
            self.assertIn("dhcpv4", self.step(r, "punt"))
            self.assertEqual(self.step(r, "dhcp"), "stopped here: punt_dhcpv4")
            self.assertEqual(self.tags(r["input"]), [(0x88A8, s0["outer_vlan"]), (0x8100, s0["inner_vlan"])])

        p64 = ipaddress.IPv6Network(s0["ipv6_prefixes"][0])
        for name, dst, src in (("downstream /32", s0["ipv4"], UPLINK_NET4),
                               ("downstream /128", s0["ipv6"], UPLINK_NET6),
                               ("downstream delegated /64", str(p64.network_address + 0x99), UPLINK_NET6)):
            with self.subTest(name):
                r = self.trace("--uplink", "upl0", "--src", src, "--dst", dst, "--src-mac", self.n0_mac)
                self.assertEqual((r["verdict"], r["reason"], r["egress_port"]),
                                 ("XDP_REDIRECT", "forward_downstream", "acc0"))
                self.assertIn("found: subscriber on acc0", self.step(r, "route"))
                o = r["output"]
                self.assertEqual(self.tags(o), [(0x88A8, s0["outer_vlan"]), (0x8100, s0["inner_vlan"])])
                self.assertEqual(o["dst_mac"], s0["mac"])
                self.assertEqual(o["src_mac"], self.acc_mac)
                self.assertEqual((o["dst"], o["ttl"]), (dst, 63))

        with self.subTest("ttl 1: icmp time exceeded"):
            r = self.trace(*key0, "--src", s0["ipv4"], "--dst", UPLINK_NET4, "--ttl", "1")
            self.assertEqual((r["verdict"], r["reason"], r["egress_port"]),
                             ("XDP_TX", "icmp_time_exceeded", "acc0"))
            self.assertIn("time exceeded", self.step(r, "icmp"))
            self.assertEqual(self.step(r, "icmp_rate"), "token taken")
            o = r["output"]
            self.assertEqual(self.tags(o), [(0x88A8, s0["outer_vlan"]), (0x8100, s0["inner_vlan"])])
            self.assertEqual((o["proto"], o["icmp_type"], o["icmp_code"]), ("icmp", 11, 0))
            self.assertEqual((o["src"], o["dst"], o["dst_mac"]), (GW4, s0["ipv4"], s0["mac"]))
            self.assertIn(f"{s0['ipv4']} > {UPLINK_NET4}", o["inner"])  # the quoted packet

        with self.subTest("pcap frame file, mac learning"):
            f = (Ether(src="02:00:00:00:77:77", dst=self.acc_mac) / Dot1AD(vlan=s2["outer_vlan"]) /
                 Dot1Q(vlan=s2["inner_vlan"]) / IP(src=s2["ipv4"], dst=UPLINK_NET4) /
                 UDP(sport=1, dport=9) / Raw(b"x" * 10))
            path = os.path.join(self.x.lab.rundir, "learn.pcap")
            wrpcap(path, [f])
            r = self.trace("--port", "acc0", "--frame", path)
            self.assertEqual((r["verdict"], r["reason"]), ("XDP_REDIRECT", "forward_upstream"))
            self.assertIn("no MAC known yet", self.step(r, "mac_policy"))
            self.assertIn("would learn", self.step(r, "mac_learn"))
            self.assertIn("mac_learned", self.step(r, "event"))

        with self.subTest("table output"):
            t = self.x.ctl_raw("trace", *key0, "--src", "100.64.9.9", "--dst", UPLINK_NET4)
            self.assertEqual(t.returncode, 0, t.stderr)
            self.assertIn("verdict: XDP_DROP (drop_spoofed_ipv4)", t.stdout)
            self.assertIn("anti_spoofing", t.stdout)

        with self.subTest("bad requests"):
            t = self.x.ctl_raw("trace", "--port", "nope0", "--outer", "1", "--inner", "1",
                               "--src", "100.64.0.1", "--dst", UPLINK_NET4)
            # Refused by xbngd (INVALID_ARGUMENT): its message alone, exit 1.
            self.assertEqual(t.returncode, 1, t.stderr)
            self.assertIn('port "nope0": not a port of this xbngd', t.stderr)
            t = self.x.ctl_raw("trace", *key0, "--src", s0["ipv4"], "--dst", UPLINK_NET6)
            self.assertEqual(t.returncode, 1, t.stderr)
            self.assertTrue(t.stderr.startswith("xbngctl: "), t.stderr)
            self.assertNotIn("INVALID_ARGUMENT", t.stderr)

    def police_cases(self):
        s1 = self.subs[1]
        key1 = ["--port", "acc0", "--outer", str(s1["outer_vlan"]), "--inner", str(s1["inner_vlan"])]
        with self.subTest("under the rate plan (bucket full)"):
            r = self.trace(*key1, "--src", s1["ipv4"], "--dst", UPLINK_NET4, "--dport", "9",
                           "--length", "1000")
            self.assertIn("admit", self.step(r, "police_up"))
            self.assertIn("bucket full", self.step(r, "police_up"))
            self.assertIn(f"rate {POLICED_RATE} bit/s, burst {POLICED_BURST} bytes",
                          self.step(r, "police_bucket"))
            self.assertEqual(r["verdict"], "XDP_REDIRECT")
        return key1

    def test_trace_changes_nothing(self):
        x = self.x
        key1 = self.police_cases()
        s1 = self.subs[1]
        events = subprocess.Popen([x.xbngctl, "--server", x.grpc, "--json", "events"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            time.sleep(0.5)
            leases0 = self.leases()
            before = self.quiet_snapshot()
            drain(self.sub_sock)
            self.cases()
            after = self.snapshot()
            self.assert_same(before, after)
            self.assertEqual(self.leases(), leases0)
            self.assertEqual(self.dhcp_replies_at_sub(), [])

            # Over the plan: one live frame spends the bucket (tat about 1.4 s
            # ahead); a trace within that time is refused, and the bucket it
            # read is left as the live frame left it.
            for attempt in range(3):
                pre = self.snapshot()
                live = (Ether(src=s1["mac"], dst=self.acc_mac) / Dot1AD(vlan=s1["outer_vlan"]) /
                        Dot1Q(vlan=s1["inner_vlan"]) / IP(src=s1["ipv4"], dst=UPLINK_NET4) /
                        UDP(sport=40000, dport=9) / Raw(b"\0" * 1372))
                self.sub_sock.send(bytes(live))
                t0 = time.monotonic()
                time.sleep(0.05)
                before = self.snapshot()
                r = self.trace(*key1, "--src", s1["ipv4"], "--dst", UPLINK_NET4, "--dport", "9",
                               "--length", "1400")
                elapsed = time.monotonic() - t0
                after = self.snapshot()
                self.assert_same(before, after)
                # ... while the snapshot does see what one live frame changes.
                self.assertNotEqual(pre["subscribers"], before["subscribers"])
                self.assertNotEqual(pre["stats"], before["stats"])
                if elapsed < 1.2:
                    break
                time.sleep(2)  # too slow a machine to land inside the window: again
            else:
                self.skipTest("could not trace within 1.2 s of the live frame")
            with self.subTest("over the rate plan"):
                self.assertEqual((r["verdict"], r["reason"]), ("XDP_DROP", "drop_policed_upstream"), r["steps"])
                self.assertIn("refuse: over the rate", self.step(r, "police_up"))
                self.assertIn("ns ahead of now", self.step(r, "police_up"))
                self.assert_no_step(r, "fib")

            # The check of "no punt" can fail: the same DISCOVER sent live
            # draws xbngd's OFFER.
            drain(self.sub_sock)
            self.sub_sock.send(self.discover)
            self.assertTrue(self.dhcp_replies_at_sub(), "a live DISCOVER drew no OFFER")
        finally:
            events.terminate()
            out, _ = events.communicate(timeout=10)
        types = [json.loads(line).get("type") for line in out.splitlines() if line.strip()]
        self.assertFalse([t for t in types if t in ("UNKNOWN_SUBSCRIBER", "MAC_LEARNED",
                                                    "MAC_CHANGED", "MAC_CONFLICT")], types)


if __name__ == "__main__":
    unittest.main()
