"""A high-availability lab (docs/fleet.md, "High availability"): two xbngd
members of one group on one access bridge and one uplink bridge, a real
etcd, numbered traffic both ways, and a watch of who answers ARP.

    cpe ns  --c0/cpe0--+                      +--u0-- dut0 upl0 (192.0.2.11, VIP when active)
                       | br0 (acc ns)          |
    dut0 acc0 --a0-----+                br1 (up ns)--n0/eth0-- net ns (192.0.2.2):
    dut1 acc0 --a1-----+                      +--u1-- dut1 upl0    routes to the pools
                                                                   via the VIP 192.0.2.1
    etcd ns: one etcd member; e0/e1 to the members

Used by tests/integration/test_ha.py and bench/ha.py.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import re
import socket
import struct
import threading
import time

from xbnglab.bringup import client_files, dhclient_script, tagged_cpe_link
from xbnglab.etcd import CLIENT_PORTS, EtcdCluster
from xbnglab.frames import arp_request, up_v4
from xbnglab.lab import drain, recv_frames, wait_for
from xbnglab.xbngd import GW4, GW6, Daemon, find_bin

GROUP = "pair1"
VMAC = "02:00:5e:00:01:01"
VIP4 = "192.0.2.1"
NET4 = "192.0.2.2"
PPS = 500  # per direction
MAGIC_UP = b"XBNGHAUP"
MAGIC_DOWN = b"XBNGHADN"
ANNOUNCED = re.compile(r"ha: takeover announced: (\d+) frame\(s\) on (\d+) subscriber VLAN "
                       r"pair\(s\) and the uplink in ([0-9.]+) s")


def magic_filter(sock, magic: bytes) -> None:
    """A classic BPF filter on a packet socket: only frames whose UDP payload
    starts with `magic` (its first 4 bytes at the offset of a frame with no,
    one or two VLAN tags in it). A takeover floods the access L2 with
    180,000 gratuitous ARPs and NAs at 60K subscribers: unfiltered, the
    receiving socket would overflow and count the flood as traffic lost."""
    word = struct.unpack("!I", magic[:4])[0]
    ins = []
    for off in (42, 46, 50):  # Ethernet + IPv4 + UDP, + 4 per tag
        n = len(ins) + 1  # the jeq's index; the accept is instruction 7
        ins += [(0x20, 0, 0, off),              # ld [off]
                (0x15, 7 - n - 1, 0, word)]     # jeq word -> accept, else the next
    ins += [(0x06, 0, 0, 0), (0x06, 0, 0, 0xFFFF)]  # 6: ret 0 (drop); 7: ret 0xffff
    prog = b"".join(struct.pack("HBBI", *i) for i in ins)
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("HL", len(ins), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, 26, fprog)  # SO_ATTACH_FILTER: the kernel copies it


def build_lab(lab, obj, **member_args):
    """The namespaces, bridges, etcd and two (not started) members.
    Returns (cluster, members, ns dict: etcd, acc, up, cpe, net)."""
    ns = {k: lab.netns(k) for k in ("etcd", "acc", "up", "cpe", "net")}
    for n, br in ((ns["acc"], "br0"), (ns["up"], "br1")):
        n.ip("link", "add", br, "type", "bridge", "stp_state", "0", "forward_delay", "0")
        n.ip("link", "set", br, "up")
    lab.veth(ns["cpe"], "c0", ns["acc"], "cpe0")
    ns["acc"].ip("link", "set", "cpe0", "master", "br0")
    ns["cpe"].sysctl("net.ipv6.conf.c0.disable_ipv6", "1")
    lab.veth(ns["net"], "eth0", ns["up"], "n0")
    ns["up"].ip("link", "set", "n0", "master", "br1")
    ns["net"].ip("addr", "add", f"{NET4}/24", "dev", "eth0")
    ns["net"].ip("route", "add", "100.64.0.0/10", "via", VIP4)
    cluster = EtcdCluster(lab, ns["etcd"], members=1)
    cluster.start()
    members = [Member(lab, k, ns["etcd"], ns["acc"], ns["up"], obj, **member_args)
               for k in (0, 1)]
    return cluster, members, ns


def start_group(lab, cluster, members, subs, timeout=60, role_timeout=30):
    """Writes `subs` to etcd as the group's subscribers, starts m0 (priority
    100: it wins the first election), then m1; returns once both hold them
    (within `timeout` s) and m1 is standby. Returns the seconds the import
    to etcd took."""
    from xbnglab.etcd import import_to_etcd
    t = time.monotonic()
    r = import_to_etcd(cluster, GROUP, subs, os.path.join(lab.rundir, "subs.jsonl"))
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    imported = time.monotonic() - t
    members[0].start()
    wait_for(lambda: members[0].role() == "active", role_timeout, 0.2, "m0 to become active")
    members[1].start()
    for m in members:
        wait_for(lambda m=m: m.subscribers() == len(subs), timeout, 0.2,
                 f"{m.name} to apply the group's subscribers")
    wait_for(lambda: members[1].role() == "standby", role_timeout, 0.2, "m1 standby")
    return imported


class Member(Daemon):
    CTL_TIMEOUT = 60

    def __init__(self, lab, k, etcd_ns, acc, up, obj, lease=20, max_subscribers=4096, extra="",
                 preempt=False):
        self.lab, self.k, self.name = lab, k, f"m{k}"
        self.max_subscribers = max_subscribers
        self.ns = lab.netns(f"dut{k}")
        lab.veth(etcd_ns, f"e{k}", self.ns, "etcd0")
        etcd_ns.ip("addr", "add", f"198.51.100.{4 * k + 1}/30", "dev", f"e{k}")
        self.ns.ip("addr", "add", f"198.51.100.{4 * k + 2}/30", "dev", "etcd0")
        self.etcd_host = f"198.51.100.{4 * k + 1}"
        lab.veth(acc, f"a{k}", self.ns, "acc0")
        # The access netdev takes the virtual MAC on every member: its kernel must not speak there.
        self.ns.sysctl("net.ipv6.conf.acc0.disable_ipv6", "1")
        lab.veth(self.ns, "upl0", up, f"u{k}")
        for ns, ifn in ((acc, f"a{k}"), (up, f"u{k}")):
            lab.attach_pass(ns, ifn, obj)
            ns.ip("link", "set", ifn, "master", "br0" if ns is acc else "br1")
        # The bridge moves a frame's outer tag into skb metadata on receive;
        # with TX VLAN offload off, a<k> writes it back into the frame before
        # xbng's XDP program (which sees only frame bytes) gets it.
        acc.exec(["ethtool", "-K", f"a{k}", "txvlan", "off", "tx-vlan-stag-hw-insert", "off"])
        self.ns.ip("addr", "add", f"192.0.2.{11 + k}/24", "dev", "upl0")
        self.ns.ip("addr", "add", f"2001:db8:ffff::{11 + k}/64", "dev", "upl0", "nodad")
        self.bpffs = os.path.join(lab.bpffs, f"{lab.id}-{self.name}")
        self.socket_path = os.path.join(lab.rundir, f"{self.name}.sock")
        self.grpc = f"unix://{self.socket_path}"
        self.log = os.path.join(lab.rundir, f"{self.name}.log")
        self.xbngd, self.xbngctl = find_bin("xbngd"), find_bin("xbngctl")
        self.what = f"xbngd {self.name}"
        self.conf = os.path.join(lab.rundir, f"{self.name}.toml")
        with open(self.conf, "w") as f:
            f.write(f'[ha]\ngroup = "{GROUP}"\nmember = "{self.name}"\npriority = {100 - k}\n'
                    f'preempt = {"true" if preempt else "false"}\n'
                    f'lease_ttl_s = 2\nvirtual_mac = "{VMAC}"\n'
                    f'uplink_vip_v4 = "{VIP4}/24"\nuplink_vip_v6 = "2001:db8:ffff::1/64"\n'
                    f'\n[dhcp]\nlease_time = {lease}\n' + extra)

    def start(self):
        argv = [self.xbngd, "--config", self.conf, "--access", "acc0", "--uplink", "upl0",
                "--gateway-ipv4", GW4, "--gateway-ipv6", GW6, "--grpc", self.grpc,
                "--bpffs", self.bpffs, "--max-subscribers", str(self.max_subscribers), "--metrics-listen", "",
                "--etcd", f"{self.etcd_host}:{CLIENT_PORTS[0]}", "--node", self.name,
                "--lease-file", os.path.join(self.lab.rundir, f"{self.name}-leases.json")]
        self.launch(self.ns.nsenter_argv(argv), 60)

    def ha(self):
        return self.ctl("ha", "status")

    def role(self):
        try:
            return self.ha().get("role")
        except Exception:
            return None

    def subscribers(self):
        return int(self.ctl("stats").get("subscribers", 0))

    def has_vip(self):
        out = self.ns.ip("-o", "addr", "show", "dev", "upl0").stdout
        return f" {VIP4}/24 " in out

    def sub(self, s):
        out = self.ctl("sub", "get", "--port", s["port"], "--outer", str(s["outer_vlan"]),
                       "--inner", str(s["inner_vlan"]))
        return out["subscriber"]

    def lease4(self, s):
        sub = self.sub(s)
        return sub.get("leaseV4") or sub.get("lease_v4") or {}

    def _announced(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log, errors="replace") as f:
            return [(int(m[1]), int(m[2]), float(m[3]))
                    for m in map(ANNOUNCED.search, f) if m]

    def takeover_announced(self):
        """(frames, VLAN pairs, seconds) of this member's last takeover
        announcement, from its log; None before one."""
        a = self._announced()
        return a[-1] if a else None

    def announcements(self):
        return len(self._announced())

    def counter(self, reason):
        for r in self.ctl("stats").get("reasons", []):
            if r["reason"] == reason:
                return int(r.get("packets", 0))
        return 0


class Flows:
    """Numbered traffic both ways; a record of each frame's arrival."""

    def __init__(self, cpe, net, subs):
        self.subs = subs
        self.up_tx = cpe.packet_socket("c0")
        self.down_rx = cpe.packet_socket("c0")
        self.up_rx = net.packet_socket("eth0")
        magic_filter(self.down_rx, MAGIC_DOWN)
        magic_filter(self.up_rx, MAGIC_UP)
        with net.entered():
            self.down_tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for s in (self.down_rx, self.up_rx):
            drain(s)
        self.templates = [bytes(up_v4(s, VMAC, NET4, payload=MAGIC_UP + b"\0" * 8)) for s in subs]
        self.sent = {"up": 0, "down": 0}
        self.seen = {"up": {}, "down": {}}  # seq -> arrival time
        self.t_sent = {"up": [], "down": []}
        self._stop = threading.Event()

    def _send(self):
        interval, seq, t_next = 1.0 / PPS, 0, time.monotonic()
        while not self._stop.is_set():
            s = self.subs[seq % len(self.subs)]
            f = self.templates[seq % len(self.templates)]
            self.up_tx.send(f[:-8] + struct.pack("!Q", seq))
            self.down_tx.sendto(MAGIC_DOWN + struct.pack("!Q", seq), (s["ipv4"], 40000))
            now = time.monotonic()
            self.t_sent["up"].append(now)
            self.t_sent["down"].append(now)
            seq += 1
            t_next += interval
            if t_next > now:
                time.sleep(t_next - now)
        self.sent = {"up": seq, "down": seq}

    def _recv(self, sock, magic, d):
        while not self._stop.is_set():
            for f in recv_frames(sock, 0.2, match=lambda f: magic in f):
                i = f.find(magic) + len(magic)
                self.seen[d][struct.unpack("!Q", f[i:i + 8])[0]] = time.monotonic()

    def __enter__(self):
        self.threads = [threading.Thread(target=self._send),
                        threading.Thread(target=self._recv, args=(self.up_rx, MAGIC_UP, "up")),
                        threading.Thread(target=self._recv,
                                         args=(self.down_rx, MAGIC_DOWN, "down"))]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        time.sleep(1.0)  # the last frames in flight
        self._stop.set()
        for t in self.threads:
            t.join()

    def loss(self, d):
        """(lost, seconds of loss at the send rate)."""
        lost = self.sent[d] - len(self.seen[d])
        return lost, lost / PPS


class AnswerWatch:
    """Requests from one CPE, round after round, and how many answers each
    member sent to each (captured on the bridge ports a0 and a1 of the
    access L2). A subclass sends a round's request and says which frames
    answer it (`_round`)."""

    def __init__(self, cpe, acc):
        self.tx = cpe.packet_socket("c0")
        self.rx = [acc.packet_socket("a0"), acc.packet_socket("a1")]
        for s in self.rx:
            drain(s)
        self.rounds = []  # (time, answers from m0, answers from m1)
        self._stop = threading.Event()

    def _counts(self, timeout, match):
        """Answers matching `match` on each bridge port, `timeout` each."""
        counts = []
        for s in self.rx:
            try:
                fr = recv_frames(s, timeout, match=match)
            except OSError:  # the bridge port is down (a test took the link away)
                fr = []
                time.sleep(timeout)
            counts.append(len(fr))
        return counts

    def _run(self):
        while not self._stop.is_set():
            t = time.monotonic()
            counts = self._round()
            self.rounds.append((t, counts[0], counts[1]))

    def __enter__(self):
        self.t = threading.Thread(target=self._run)
        self.t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.t.join()

    def both(self):
        return [r for r in self.rounds if r[1] and r[2]]

    def answered(self):
        return sum(1 for r in self.rounds if r[1] or r[2])


class ArpWatch(AnswerWatch):
    """ARP requests for the gateway from one CPE every 50 ms, and which member
    answered each."""

    def __init__(self, cpe, acc, sub):
        super().__init__(cpe, acc)
        self.req = bytes(arp_request(sub, GW4))

    def _round(self):
        # An ARP reply carries nothing of its request: one left queued
        # (late, or behind a bridge port taken down, whose socket then
        # fails a round) would count in a later round. Each round starts
        # empty.
        for s in self.rx:
            try:
                drain(s)
            except OSError:
                pass
        self.tx.send(self.req)
        return self._counts(0.025, lambda f: f[20:22] == b"\x08\x06" and
                            f[22 + 6:22 + 8] == b"\x00\x02")


class DhcpWatch(AnswerWatch):
    """A DHCPDISCOVER from one CPE every 100 ms (its subscriber's punt rate),
    each with its own xid, and how many OFFERs for that xid each member sent:
    one member answers each, never both."""

    def __init__(self, cpe, acc, sub):
        from scapy.all import BOOTP, DHCP, IP, UDP, Dot1AD, Dot1Q, Ether
        super().__init__(cpe, acc)
        mac = bytes.fromhex(sub["mac"].replace(":", ""))
        self.frame = bytearray(bytes(
            Ether(src=sub["mac"], dst="ff:ff:ff:ff:ff:ff") / Dot1AD(vlan=sub["outer_vlan"]) /
            Dot1Q(vlan=sub["inner_vlan"]) / IP(src="0.0.0.0", dst="255.255.255.255") /
            UDP(sport=68, dport=67) / BOOTP(chaddr=mac, xid=0) /
            DHCP(options=[("message-type", "discover"), "end"])))
        # The xid's offset: Ethernet + two tags (22) + IPv4 (20) + UDP (8) + 4.
        self.xid_at = 22 + 20 + 8 + 4
        self.xid = 0x5a000000

    def _offer_for(self, xid: bytes):
        # A reply from a server (UDP source port 67) on two tags with this xid.
        at = self.xid_at
        return lambda f: (len(f) > at + 4 and f[12:14] == b"\x88\xa8" and f[20:22] == b"\x08\x00"
                          and f[42:44] == b"\x00\x43" and f[at:at + 4] == xid)

    def _round(self):
        self.xid += 1
        x = struct.pack("!I", self.xid)
        self.frame[self.xid_at:self.xid_at + 4] = x
        # UDP checksum 0: none (valid over IPv4), so the xid can change.
        self.frame[22 + 20 + 6:22 + 20 + 8] = b"\x00\x00"
        self.tx.send(bytes(self.frame))
        return self._counts(0.05, self._offer_for(x))


class DhclientCpe:
    """A CPE namespace `name` on subscriber `sub`'s tags (the TC tag emulator
    on c0, as in xbnglab.bringup) on the access bridge, running Debian's
    dhclient (-4, or -6 for IA_NA) with private files in the lab's run dir."""

    def __init__(self, lab, acc, sub, name, family=4):
        self.lab, self.family = lab, family
        self.ns = lab.netns(name)
        tagged_cpe_link(lab, self.ns, acc, f"{name}0", sub["mac"], disable_ipv6=family == 4)
        self.f = client_files(os.path.join(lab.rundir, f"{name}-dhclient"))
        with open(self.f["conf"], "w") as c:
            c.write("request subnet-mask, broadcast-address, routers;\n" if family == 4 else "")
        dhclient_script(self.f["script"])
        self.p = None

    def start(self):
        if self.family == 6:
            # dhclient -6 binds to c0's link-local address: after its DAD.
            def link_local_ready():
                out = self.ns.exec(["ip", "-6", "addr", "show", "dev", "c0", "scope",
                                    "link"]).stdout
                return "fe80::" in out and "tentative" not in out
            wait_for(link_local_ready, 10, 0.1, "c0's link-local address")
        f = self.f
        argv = ["dhclient", f"-{self.family}", "-d", "-v", "-cf", f["conf"], "-lf", f["leases"],
                "-pf", f["pid"], "-sf", f["script"], "c0"]
        self.p = self.lab.spawn(self.ns.nsenter_argv(argv), log=f["log"])

    def stop(self):
        if self.p:
            self.lab.stop(self.p, signal.SIGTERM, timeout=5)
            self.p = None

    def addrs(self):
        out = json.loads(self.ns.exec(["ip", "-j", f"-{self.family}", "addr", "show", "dev",
                                       "c0"]).stdout)
        return [a["local"] for i in out for a in i.get("addr_info", [])
                if a.get("scope") == "global"]

    def log(self):
        with open(self.f["log"]) as f:
            return f.read()
