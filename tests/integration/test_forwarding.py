"""Scenarios 1, 2 and 5 of the integration suite: both directions, control
frames and abuse, change and delete — real xbngd, real gRPC (xbngctl), real
frames through veths in throwaway namespaces."""
import ipaddress
import os
import subprocess
import time
import unittest

from xbnglab.frames import (ARP, Dot1AD, ICMPv6ND_NA, ICMPv6NDOptDstLLAddr, IP, UDP, Dot1Q, Ether, IPv6,
                            arp_request, checksums_ok, down_v4, down_v6, neighbour_solicit, qinq,
                            tags, up_v4, up_v6)
from xbnglab.lab import drain, recv_frames
from xbnglab.fixture import LabSuite
from xbnglab.traffic import Stream
from xbnglab.xbngd import GW4, GW6, UPLINK_NET4, UPLINK_NET6, CtlError, plan, subscribed

ETH_P_8021AD = 0x88A8
ETH_P_8021Q = 0x8100


def is_ipv4_to(dst):
    return lambda f: f[12:14] == b"\x08\x00" and f[30:34] == ipaddress.IPv4Address(dst).packed


def is_ipv6_to(dst):
    return lambda f: f[12:14] == b"\x86\xdd" and f[38:54] == ipaddress.IPv6Address(dst).packed


def from_subscriber_space(f):
    if f[12:14] == b"\x08\x00":
        return f[26] == 100
    if f[12:14] == b"\x86\xdd":
        return f[22:28] == bytes.fromhex("20010db81000")
    return False


def qinq_to_mac(mac, marker=b"xbng-down"):
    """Double-tagged frames to mac carrying our payload marker (not, say, the
    ICMP errors net's kernel sends back for our probes)."""
    m = bytes.fromhex(mac.replace(":", ""))
    return lambda f: f[0:6] == m and len(tags(f)) == 2 and (marker is None or marker in f)


class ForwardingTest(LabSuite):
    @classmethod
    def start_xbngd(cls):
        cls.x.start(max_subscribers=4096)

    @classmethod
    def setUpLab(cls):
        cls.start_xbngd()
        # 3 S-VLANs x 4 C-VLANs; every subscriber gets IPv4, IPv6 and a /64.
        cls.subs = [plan(i, c_per_s=4) for i in range(12)]
        # One business line with a routed IPv4 prefix and a /56.
        cls.subs[5]["ipv4_prefixes"] = ["198.51.100.0/28"]
        cls.subs[5]["ipv6_prefixes"] = ["2001:db8:3000:100::/56"]
        cls.provision(cls.subs)
        cls.open_ports()

    def setUp(self):
        drain(self.sub_sock)
        drain(self.net_sock)

    # -- helpers ---------------------------------------------------------------
    def send_up(self, pkt):
        self.sub_sock.send(bytes(pkt))

    def send_down(self, pkt):
        self.net_sock.send(bytes(pkt))

    def expect_at_net(self, match, n=1, timeout=2.0):
        got = recv_frames(self.net_sock, timeout, want=n, match=match)
        self.assertEqual(len(got), n, f"expected {n} frame(s) at net, got {len(got)}")
        return [Ether(f) for f in got]

    def expect_at_sub(self, match, n=1, timeout=2.0):
        got = recv_frames(self.sub_sock, timeout, want=n, match=match)
        self.assertEqual(len(got), n, f"expected {n} frame(s) at sub, got {len(got)}")
        return got

    def expect_nothing_at_net(self, match, timeout=0.5):
        self.assertEqual(recv_frames(self.net_sock, timeout, match=match), [])

    def stats_delta(self, before, after, reason):
        return after.get(reason, 0) - before.get(reason, 0)

    # -- scenario 1: both directions -------------------------------------------
    def test_upstream_ipv4(self):
        for s in self.subs[:6]:
            self.send_up(up_v4(s, self.acc_mac, UPLINK_NET4, ttl=64))
            (p,) = self.expect_at_net(lambda f: is_ipv4_to(UPLINK_NET4)(f) and
                                      f[26:30] == ipaddress.IPv4Address(s["ipv4"]).packed)
            self.assertFalse(p.haslayer(Dot1Q))
            self.assertEqual(p.dst, self.n0_mac)
            self.assertEqual(p.src, self.upl_mac)
            self.assertEqual(p[IP].ttl, 63)
            self.assertTrue(checksums_ok(p))
            self.assertEqual(bytes(p[UDP].payload), b"xbng-up-v4")

    def test_upstream_ipv6_host_and_delegated_prefix(self):
        s = self.subs[2]
        net64 = ipaddress.IPv6Network(s["ipv6_prefixes"][0])
        for src in (s["ipv6"], str(net64[0x1234])):
            self.send_up(up_v6(s, self.acc_mac, UPLINK_NET6, src=src, hlim=64))
            (p,) = self.expect_at_net(lambda f: is_ipv6_to(UPLINK_NET6)(f) and
                                      f[22:38] == ipaddress.IPv6Address(src).packed)
            self.assertEqual((p.dst, p.src), (self.n0_mac, self.upl_mac))
            self.assertEqual(p[IPv6].hlim, 63)
            self.assertTrue(checksums_ok(p))

    def test_upstream_from_routed_prefixes(self):
        s = self.subs[5]
        self.send_up(up_v4(s, self.acc_mac, UPLINK_NET4, src="198.51.100.9"))
        self.expect_at_net(lambda f: is_ipv4_to(UPLINK_NET4)(f) and f[26:30] == bytes([198, 51, 100, 9]))
        self.send_up(up_v6(s, self.acc_mac, UPLINK_NET6, src="2001:db8:3000:1ab::5"))
        self.expect_at_net(is_ipv6_to(UPLINK_NET6))

    def check_down(self, s, frame: bytes, ttl_field: str):
        self.assertEqual(tags(frame), [(ETH_P_8021AD, s["outer_vlan"]), (ETH_P_8021Q, s["inner_vlan"])])
        p = Ether(frame)
        self.assertEqual((p.dst, p.src), (s["mac"], self.acc_mac))
        self.assertTrue(checksums_ok(p))
        if ttl_field == "ttl":
            self.assertEqual(p[IP].ttl, 63)
        else:
            self.assertEqual(p[IPv6].hlim, 63)

    def test_downstream_ipv4_ipv6_prefixes(self):
        for s in self.subs:
            self.send_down(down_v4(self.n0_mac, self.upl_mac, UPLINK_NET4, s["ipv4"]))
            (f,) = self.expect_at_sub(qinq_to_mac(s["mac"]))
            self.check_down(s, f, "ttl")
            self.send_down(down_v6(self.n0_mac, self.upl_mac, UPLINK_NET6, s["ipv6"]))
            (f,) = self.expect_at_sub(qinq_to_mac(s["mac"]))
            self.check_down(s, f, "hlim")
            dst = str(ipaddress.IPv6Network(s["ipv6_prefixes"][0])[77])
            self.send_down(down_v6(self.n0_mac, self.upl_mac, UPLINK_NET6, dst))
            (f,) = self.expect_at_sub(qinq_to_mac(s["mac"]))
            self.check_down(s, f, "hlim")
        biz = self.subs[5]
        self.send_down(down_v4(self.n0_mac, self.upl_mac, UPLINK_NET4, "198.51.100.14"))
        self.check_down(biz, self.expect_at_sub(qinq_to_mac(biz["mac"]))[0], "ttl")
        self.send_down(down_v6(self.n0_mac, self.upl_mac, UPLINK_NET6, "2001:db8:3000:1ff::1"))
        self.check_down(biz, self.expect_at_sub(qinq_to_mac(biz["mac"]))[0], "hlim")

    def test_downstream_not_a_subscriber_is_left_to_the_kernel(self):
        before = self.x.stats()
        self.send_down(down_v4(self.n0_mac, self.upl_mac, UPLINK_NET4, "100.64.200.200"))
        self.assertEqual(recv_frames(self.sub_sock, 0.5, match=lambda f: len(tags(f)) == 2), [])
        after = self.x.stats()
        self.assertGreaterEqual(self.stats_delta(before, after, "pass_not_subscriber"), 1)

    def test_kernel_stacks_ping_the_gateway_side(self):
        # net's real kernel stack reaches a subscriber: the echo request arrives tagged.
        s = self.subs[7]
        subprocess.run(["ip", "netns", "exec", self.x.net.name, "ping", "-c1", "-W1", s["ipv4"]],
                       capture_output=True)
        got = recv_frames(self.sub_sock, 2.0, want=1, match=qinq_to_mac(s["mac"], None))
        self.assertEqual(len(got), 1)
        self.assertEqual(tags(got[0])[0][1], s["outer_vlan"])

    # -- scenario 2: control frames and abuse -----------------------------------
    def test_arp_for_the_gateway_is_answered_with_tags_kept(self):
        s = self.subs[3]
        before = self.x.stats()
        for target in (GW4, "100.64.3.3"):
            self.send_up(arp_request(s, target))
            (f,) = self.expect_at_sub(lambda f: qinq_to_mac(s["mac"], None)(f) and Ether(f).haslayer(ARP))
            self.assertEqual(tags(f), [(ETH_P_8021AD, s["outer_vlan"]), (ETH_P_8021Q, s["inner_vlan"])])
            a = Ether(f)[ARP]
            self.assertEqual((a.op, a.hwsrc, a.psrc, a.hwdst, a.pdst),
                             (2, self.acc_mac, target, s["mac"], s["ipv4"]))
        self.send_up(arp_request(s, GW4, sender_ip="100.64.9.9"))  # wrong sender
        self.assertEqual(recv_frames(self.sub_sock, 0.5, match=lambda f: Ether(f).haslayer(ARP)), [])
        after = self.x.stats()
        self.assertEqual(self.stats_delta(before, after, "arp_reply"), 2)
        self.assertEqual(self.stats_delta(before, after, "drop_arp_spoofed_sender"), 1)

    def test_neighbour_solicitations_for_the_gateway(self):
        s = self.subs[4]
        for target in ("fe80::1", GW6):
            self.send_up(neighbour_solicit(s, target))
            (f,) = self.expect_at_sub(lambda f: qinq_to_mac(s["mac"], None)(f) and Ether(f).haslayer(ICMPv6ND_NA))
            self.assertEqual(tags(f), [(ETH_P_8021AD, s["outer_vlan"]), (ETH_P_8021Q, s["inner_vlan"])])
            p = Ether(f)
            self.assertEqual(p[ICMPv6ND_NA].tgt, target)
            self.assertEqual(p[ICMPv6NDOptDstLLAddr].lladdr, self.acc_mac)
            self.assertEqual(p[IPv6].src, target)
            self.assertTrue(checksums_ok(p), "NA checksum")

    def test_abuse_is_dropped_and_counted_by_reason(self):
        s = self.subs[0]
        watch = subprocess.Popen([self.x.xbngctl, "--server", self.x.grpc, "--json", "events",
                                  "--count", "2"], stdout=subprocess.PIPE, text=True)
        first = subscribed(watch)
        before = self.x.stats()
        self.send_up(up_v4(s, self.acc_mac, UPLINK_NET4, src="100.64.77.77"))       # spoofed v4
        self.send_up(up_v6(s, self.acc_mac, UPLINK_NET6, src="2001:db8:1000::dead"))  # spoofed v6
        unknown = dict(s, outer_vlan=999, inner_vlan=42)
        self.send_up(up_v4(unknown, self.acc_mac, UPLINK_NET4))                     # unknown VLAN
        single_q = Ether(src=s["mac"], dst=self.acc_mac) / Dot1Q(vlan=100) / IP(src=s["ipv4"], dst=UPLINK_NET4) / UDP()
        self.send_up(single_q)                                                       # one 0x8100 tag
        single_ad = Ether(src=s["mac"], dst=self.acc_mac) / Dot1AD(vlan=s["outer_vlan"]) / IP(src=s["ipv4"], dst=UPLINK_NET4) / UDP()
        self.send_up(single_ad)                                                      # one 0x88a8 tag
        triple = qinq(s, self.acc_mac) / Dot1Q(vlan=7) / IP(src=s["ipv4"], dst=UPLINK_NET4) / UDP()
        self.send_up(triple)                                                         # three tags
        wrong = qinq(s, self.acc_mac, outer_tpid=0x9100) / IP(src=s["ipv4"], dst=UPLINK_NET4) / UDP()
        self.send_up(wrong)                                                          # 0x9100+0x8100 on a 0x88a8 port
        untagged = Ether(src=s["mac"], dst=self.acc_mac) / IP(src=s["ipv4"], dst=UPLINK_NET4) / UDP()
        self.send_up(untagged)
        self.send_up(up_v4(s, self.acc_mac, UPLINK_NET4, ttl=1))                    # TTL 1: time exceeded back to s
        self.expect_nothing_at_net(from_subscriber_space)
        after = self.x.stats()
        expected = {"drop_spoofed_ipv4": 1, "drop_spoofed_ipv6": 1, "drop_unknown_subscriber": 1,
                    "drop_wrong_outer_tpid": 1, "drop_single_tag": 2, "drop_too_many_tags": 1,
                    "drop_untagged": 1, "icmp_time_exceeded": 1, "forward_upstream": 0}
        got = {r: self.stats_delta(before, after, r) for r in expected}
        self.assertEqual(got, expected)
        out, _ = watch.communicate(timeout=10)
        out = first + out
        events = [e for e in out.splitlines() if e.strip()]
        self.assertTrue(any("UNKNOWN_SUBSCRIBER" in e and "999" in e and "42" in e for e in events), out)

    # -- scenario 5: change and delete ----------------------------------------
    def test_readdress_then_delete(self):
        s = dict(self.subs[9])
        old_v4 = s["ipv4"]
        s["ipv4"] = "100.64.250.9"
        # Re-address while other subscribers' traffic flows: none of it is lost.
        with Stream(self.x, [self.subs[i] for i in (0, 3, 6, 10)], pps=1000) as st:
            time.sleep(0.5)
            self.x.ctl("sub", "add", "--port", s["port"], "--outer", str(s["outer_vlan"]),
                       "--inner", str(s["inner_vlan"]), "--mac", s["mac"], "--ipv4", s["ipv4"],
                       "--ipv6", s["ipv6"], "--ipv6-prefix", s["ipv6_prefixes"][0])
            time.sleep(0.5)
        self.assertGreater(st.sent, 500)
        self.assertEqual(st.sent - len(st.seen), 0, "frames lost while re-addressing")
        drain(self.sub_sock)
        drain(self.net_sock)
        self.send_down(down_v4(self.n0_mac, self.upl_mac, UPLINK_NET4, s["ipv4"]))
        self.check_down(s, self.expect_at_sub(qinq_to_mac(s["mac"]))[0], "ttl")
        self.send_down(down_v4(self.n0_mac, self.upl_mac, UPLINK_NET4, old_v4))
        self.assertEqual(recv_frames(self.sub_sock, 0.5, match=qinq_to_mac(s["mac"])), [])
        self.send_up(up_v4(s, self.acc_mac, UPLINK_NET4))
        self.expect_at_net(lambda f: is_ipv4_to(UPLINK_NET4)(f) and f[26:30] == bytes([100, 64, 250, 9]))
        # delete: its frames are dropped and counted
        self.x.ctl("sub", "del", "--port", s["port"], "--outer", str(s["outer_vlan"]),
                   "--inner", str(s["inner_vlan"]))
        before = self.x.stats()
        self.send_up(up_v4(s, self.acc_mac, UPLINK_NET4))
        self.expect_nothing_at_net(is_ipv4_to(UPLINK_NET4))
        self.send_down(down_v4(self.n0_mac, self.upl_mac, UPLINK_NET4, s["ipv4"]))
        self.assertEqual(recv_frames(self.sub_sock, 0.5, match=qinq_to_mac(s["mac"])), [])
        after = self.x.stats()
        self.assertEqual(self.stats_delta(before, after, "drop_unknown_subscriber"), 1)
        # >= : net's own kernel traffic to dut (ND probes) is passed too.
        self.assertGreaterEqual(self.stats_delta(before, after, "pass_not_subscriber"), 1)


class ForwardingDirectTest(ForwardingTest):
    """The same scenarios with the subscribers' host routes in the direct
    arrays: their IPv4 /32s (pool 100.64.0.0/24, limits.direct_slots), their
    IPv6 /128s (pool 2001:db8:1000::/120 of /128s) and delegated /64s (pool
    2001:db8:2000::/56 of /64s, limits.direct_slots_v6), and the subscribers
    of S-VLANs 101-102 in the direct subscriber array (direct_svlans,
    limits.direct_subscriber_slots; S-VLAN 100 stays in the hash): what
    forwards, counts, checks the source of, re-addresses (out of the pool:
    from the array into the hash) and deletes through the hashes does the
    same through the arrays. The business line's /56 stays in the trie."""

    @classmethod
    def start_xbngd(cls):
        path = os.path.join(cls.x.lab.rundir, "xbngd.toml")
        with open(path, "w") as f:
            f.write('[ports]\naccess = [{ name = "acc0", pools = ["100.64.0.0/24", '
                    '"2001:db8:1000::/120", "2001:db8:2000::/56"], '
                    'direct_svlans = ["101-102"] }]\n'
                    "[limits]\ndirect_slots = 256\ndirect_slots_v6 = 512\n"
                    "direct_subscriber_slots = 8192\n")
        cls.x.start(max_subscribers=4096, extra=["--config", path])

    def bpf_dump(self):
        out = subprocess.run(self.x.dut.nsenter_argv([self.x.xbngctl, "bpf", "dump", "--bpffs",
                                                      self.x.lab.bpffs]),
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout

    def test_subscribers_live_in_the_array_inside_their_range(self):
        text = self.bpf_dump()
        hashed = text[text.index("# subscribers"):text.index("# direct_subscribers")]
        direct = text[text.index("# direct_subscribers"):text.index("# routes_v4")]
        for s in self.subs:
            key = f"acc0/{s['outer_vlan']}/{s['inner_vlan']} "
            if s is self.subs[9]:  # deleted by test_readdress_then_delete (in the array)
                self.assertNotIn(key, text)
            elif s["outer_vlan"] >= 101:
                self.assertIn(key, direct)
                self.assertNotIn(key, hashed)
            else:
                self.assertIn(key, hashed)
                self.assertNotIn(key, direct)
        # Counters of a subscriber in the array reach the API.
        s = self.subs[5]

        def up_packets():
            got = self.x.ctl("sub", "get", "--port", "acc0", "--outer", str(s["outer_vlan"]),
                             "--inner", str(s["inner_vlan"]))["subscriber"]
            return int(got.get("counters", {}).get("up_packets", 0))

        before = up_packets()
        self.send_up(up_v4(s, self.acc_mac, UPLINK_NET4))
        self.expect_at_net(lambda f: is_ipv4_to(UPLINK_NET4)(f) and
                           f[26:30] == ipaddress.IPv4Address(s["ipv4"]).packed)
        self.assertEqual(up_packets() - before, 1)

    def test_host_routes_live_in_the_array(self):
        text = self.bpf_dump()
        direct4 = text[text.index("# direct_v4"):text.index("# direct_v6")]
        direct6 = text[text.index("# direct_v6"):]
        hashed4 = text[text.index("# routes_v4"):text.index("# routes_v6")]
        hashed6 = text[text.index("# routes_v6"):text.index("# prefixes_v4")]
        self.assertIn("# direct_v6 (2 pools, 512 slots)", direct6)
        for s in self.subs:
            net = s["ipv6_prefixes"][0]
            if net.endswith("/64"):  # the business line's /56: the trie
                self.assertIn(f"{net} ", direct6)
                self.assertNotIn(f"{net} ", hashed6)
            self.assertIn(f"{s['ipv6']}/128 ", direct6)
            self.assertNotIn(f"{s['ipv6']}/128 ", hashed6)
            if s["ipv4"] == "100.64.250.9":  # re-addressed by another test: outside the pool
                continue
            self.assertIn(f"{s['ipv4']}/32", direct4)
            self.assertNotIn(f"{s['ipv4']}/32 ", hashed4)

    def test_host_128_inside_a_pool_64(self):
        # A /128 inside a /64 of the pool of /64s lives in the routes_v6 hash,
        # counted in the /64's line (read only when it counts some): one
        # inside its owner's own delegated /64 (another owner's is refused),
        # one inside a /64 nobody delegated (found through the count alone),
        # and so across a restart (the counts rewritten before the attach).
        own = dict(plan(200, c_per_s=4), outer_vlan=110, inner_vlan=1, ipv4="100.64.0.201",
                   ipv6="2001:db8:2000:90::5", ipv6_prefixes=["2001:db8:2000:90::/64"])
        lone = dict(plan(201, c_per_s=4), outer_vlan=110, inner_vlan=2, ipv4="100.64.0.202",
                    ipv6="2001:db8:2000:80::1", ipv6_prefixes=[])
        for s in (own, lone):
            args = ["sub", "add", "--port", s["port"], "--outer", str(s["outer_vlan"]), "--inner",
                    str(s["inner_vlan"]), "--mac", s["mac"], "--ipv4", s["ipv4"], "--ipv6", s["ipv6"]]
            for p in s["ipv6_prefixes"]:
                args += ["--ipv6-prefix", p]
            self.x.ctl(*args)

        def reaches(dst, s):
            drain(self.sub_sock)
            self.send_down(down_v6(self.n0_mac, self.upl_mac, UPLINK_NET6, dst))
            self.check_down(s, self.expect_at_sub(qinq_to_mac(s["mac"]))[0], "hlim")

        def check():
            for dst, s in ((own["ipv6"], own), ("2001:db8:2000:90::6", own), (lone["ipv6"], lone)):
                reaches(dst, s)
            text = self.bpf_dump()
            hashed6 = text[text.index("# routes_v6"):text.index("# prefixes_v4")]
            direct6 = text[text.index("# direct_v6"):]
            self.assertIn(f"{own['ipv6']}/128 ", hashed6)
            self.assertIn(f"{lone['ipv6']}/128 ", hashed6)
            self.assertIn("2001:db8:2000:90::/64 ", direct6)

        check()
        self.x.stop()
        type(self).start_xbngd()
        check()
        with self.assertRaises(CtlError):  # inside another owner's /64
            self.x.ctl("sub", "add", "--port", "acc0", "--outer", "110", "--inner", "3", "--mac",
                       "02:00:00:00:00:cb", "--ipv4", "100.64.0.203", "--ipv6", "2001:db8:2000:90::7")
        for s in (own, lone):
            self.x.ctl("sub", "del", "--port", s["port"], "--outer", str(s["outer_vlan"]),
                       "--inner", str(s["inner_vlan"]))
            drain(self.sub_sock)
            self.send_down(down_v6(self.n0_mac, self.upl_mac, UPLINK_NET6, s["ipv6"]))
            self.assertEqual(recv_frames(self.sub_sock, 0.5, match=qinq_to_mac(s["mac"])), [])

if __name__ == "__main__":
    unittest.main()
