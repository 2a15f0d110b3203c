"""DHCPv4 (or DHCPv6) leases per second from Debian's Kea, straight and through xbngd's relay.

One run, one Kea (kea-dhcp4, memfile) in a namespace behind the uplink of a
standard xbng lab (tests/xbnglab), two phases of the same shape: --clients
new clients started at --rate per second (open loop: the rate paces them,
not the answers), each a four-message exchange.
  A  straight: perfdhcp (kea-admin) in `net` asks Kea directly, as a relay
     would (unicast to Kea, option 82 link-selection = the access gateway).
  B  relayed: xbng_bench_bringup --v4-only --rate R --window N emulates the
     QinQ CPEs nobody provisioned on xbngd's access port (dhcp = "relay"),
     no retransmission (perfdhcp makes none):
     DORA through the punt path, the relay and Kea; xbngd creates each
     subscriber from its ACK.
Both phases are measured at the same point, with tcpdump on net's side of
Kea's link (k0): Kea's leases/s = its DHCPACKs over the time from the first
DISCOVER to the last ACK. Phase B is also captured on the CPEs' side (s0)
and on the uplink (n0): for each exchange the relay carried (DISCOVER ->
OFFER, REQUEST -> ACK, first sends only), the time the client waited minus
the time the server took as seen from the uplink is the latency the relay
added (XDP punt, xbngd, the access and uplink veths); its p50/p99/max are
printed. The captures cost CPU too (the machine's load is printed).
Prints what it measured; asserts nothing.

With --family 6, the same for DHCPv6 with one kea-dhcp6 (memfile):
  A6 straight: perfdhcp -6 -A1 (it plays a relay) in `net`, unicast to Kea,
     N clients at R/s,
     IA_NA + IA_PD, four-message exchanges; Kea picks a subnet of its own
     by the link-address (net's address toward Kea).
  B6 relayed: xbng_bench_bringup --v6-only: N QinQ CPEs nobody provisioned at R/s,
     SOLICIT/ADVERTISE/REQUEST/REPLY (IA_NA + IA_PD) through the punt
     path, xbngd's DHCPv6 relay and Kea (the subnet of the access port's
     link-address), no retransmission; xbngd creates each subscriber from
     its REPLY.
  Measured as for DHCPv4: Kea's REPLYs on its link (k60) in both phases, and
  the latency the relay added per SOLICIT -> ADVERTISE and REQUEST -> REPLY
  (the client's messages inside the Relay-Forwards on the uplink).

    PYTHONPATH=tests /usr/bin/python3 bench/relay.py --clients 2000 [--rate 300] [--family 6]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import time

from xbnglab.kea import Kea4, Kea6
from xbnglab.lab import Netns, read_text, wait_for
from xbnglab.xbngd import GW4, XbngLab, find_bin

DISCOVER, OFFER, REQUEST, ACK = 1, 2, 3, 5
SOLICIT, ADVERTISE, REQUEST6, REPLY6 = 1, 2, 3, 7


def rss_kib(pid: int) -> int:
    """VmRSS of a process, KiB."""
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


def print_memory(pid: int, before_kib: int, bound: int) -> None:
    """xbngd's RSS now, and what it grew by per session bound since before_kib."""
    now = rss_kib(pid)
    per = (now - before_kib) * 1024 / bound if bound else 0
    print(f"  xbngd RSS {before_kib / 1024:.1f} -> {now / 1024:.1f} MiB: {per:.0f} B per session "
          f"bound ({bound})", flush=True)


class Capture:
    """tcpdump on ns/iface into a pcap under the lab's run dir, until stop()."""

    def __init__(self, lab, ns: Netns, iface: str, bpf: list[str]):
        self.path = os.path.join(lab.rundir, f"{ns.name}-{iface}-{time.monotonic_ns()}.pcap")
        log = self.path + ".log"
        self.p = lab.spawn(ns.nsenter_argv(["tcpdump", "-i", iface, "-n", "-s", "400", "-U",
                                            "-B", "8192", "-w", self.path, *bpf]), log=log)
        wait_for(lambda: "listening on" in read_text(log), 10, 0.05, f"tcpdump on {iface}")

    def stop(self, family: int = 4) -> list[tuple[float, bytes, int]]:
        """Stops the capture; its DHCP messages of `family` as (time,
        transaction id, message type)."""
        self.stop_only()
        return dhcp4_messages(self.path) if family == 4 else dhcp6_messages(self.path)

    def stop_only(self) -> str:
        """Stops the capture; the pcap's path."""
        self.p.send_signal(signal.SIGINT)
        self.p.wait(10)
        return self.path


def udp_payloads(path: str, ethertype: int):
    """(time, frame, offset of the UDP payload) of a pcap's UDP packets of
    ethertype (Ethernet, any number of VLAN tags; IPv6 without extension
    headers)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        return
    magic = struct.unpack("<I", data[:4])[0]
    scale = 1e-9 if magic == 0xA1B23C4D else 1e-6
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        p, et = 14, int.from_bytes(pkt[12:14], "big")
        while et in (0x8100, 0x88A8) and len(pkt) >= p + 4:
            et, p = int.from_bytes(pkt[p + 2:p + 4], "big"), p + 4
        if et != ethertype:
            continue
        if et == 0x0800 and len(pkt) >= p + 20 and pkt[p + 9] == 17:
            yield sec + frac * scale, pkt, p + (pkt[p] & 0xF) * 4 + 8
        elif et == 0x86DD and len(pkt) >= p + 48 and pkt[p + 6] == 17:
            yield sec + frac * scale, pkt, p + 48


def dhcp6_messages(path: str) -> list[tuple[float, bytes, int]]:
    """The DHCPv6 client and server messages of a pcap; those inside a
    Relay-Forward or Relay-Reply (one level) as themselves."""
    out = []
    for t, pkt, b in udp_payloads(path, 0x86DD):
        m = pkt[b:]
        if len(m) >= 34 and m[0] in (12, 13):
            o, inner = 34, b""
            while o + 4 <= len(m):
                code, n = struct.unpack("!HH", m[o:o + 4])
                if code == 9:
                    inner = m[o + 4:o + 4 + n]
                    break
                o += 4 + n
            m = inner
        if len(m) >= 4:
            out.append((t, m[1:4], m[0]))
    return out


def dhcp4_messages(path: str) -> list[tuple[float, bytes, int]]:
    """The DHCPv4 messages of a pcap."""
    out = []
    for t, pkt, b in udp_payloads(path, 0x0800):  # b: the BOOTP message
        if len(pkt) < b + 244 or pkt[b + 236:b + 240] != b"\x63\x82\x53\x63":
            continue
        o, mtype = b + 240, 0
        while o + 2 <= len(pkt) and pkt[o] != 255:
            if pkt[o] == 0:
                o += 1
                continue
            if pkt[o] == 53:
                mtype = pkt[o + 2]
                break
            o += 2 + pkt[o + 1]
        out.append((t, pkt[b + 4:b + 8], mtype))
    return out


def first_times(msgs) -> tuple[dict, dict]:
    """{(xid, type): time of its first send}, {(xid, type): how many}."""
    first, n = {}, {}
    for t, xid, m in msgs:
        first.setdefault((xid, m), t)
        n[(xid, m)] = n.get((xid, m), 0) + 1
    return first, n


def kea_rate(msgs, first=DISCOVER, last=ACK) -> tuple[int, float]:
    """Kea's DHCPACKs (REPLYs) and the time from the first DISCOVER
    (SOLICIT) to the last of them."""
    acks = [t for t, _, m in msgs if m == last]
    disc = [t for t, _, m in msgs if m == first]
    if not acks or not disc:
        return 0, 0.0
    return len(acks), max(acks) - min(disc)


def added_latency(cpe, uplink, kinds=((DISCOVER, OFFER), (REQUEST, ACK))) -> list[float]:
    """Per exchange carried once (no retransmission on either side): the
    client's wait minus the server's, both first sends, in ms."""
    c, cn = first_times(cpe)
    u, un = first_times(uplink)
    out = []
    for ask, answer in kinds:
        for (xid, m), t0 in c.items():
            if m != ask or cn[(xid, m)] != 1 or un.get((xid, m)) != 1:
                continue
            if (xid, answer) not in c or (xid, answer) not in u:
                continue
            out.append(((c[(xid, answer)] - t0) - (u[(xid, answer)] - u[(xid, m)])) * 1e3)
    return sorted(out)


def pct(v: list[float], q: float) -> float:
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def realtime(x: XbngLab, prio: int) -> None:
    """With --rt: every thread of xbngd SCHED_FIFO at prio, so that the
    other jobs of a shared machine do not delay it (a diagnostic: does the
    added latency's tail come from the relay or from waiting for a CPU?)."""
    if prio:
        subprocess.run(["chrt", "-a", "-f", "-p", str(prio), str(x.daemon.pid)], check=True,
                       capture_output=True)
        print(f"# xbngd's threads SCHED_FIFO {prio}", flush=True)


def set_slice(pid: int, slice_us: int) -> None:
    """With --slice-us: every thread of xbngd SCHED_OTHER with that EEVDF
    slice (sched_setattr's sched_runtime, Linux 6.12 and later; a diagnostic
    like --rt, still the default policy: a shorter slice than the other
    tasks' lets a waking thread preempt them sooner)."""
    if not slice_us:
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    # struct sched_attr (SCHED_ATTR_SIZE_VER1): size, policy, flags, nice,
    # priority, runtime, deadline, period, util_min, util_max.
    attr = struct.pack("=IIQiIQQQII", 56, 0, 0, 0, 0, slice_us * 1000, 0, 0, 0, 0)
    buf = ctypes.create_string_buffer(attr, 56)
    for tid in os.listdir(f"/proc/{pid}/task"):
        if libc.syscall(314, int(tid), buf, 0) != 0:  # SYS_sched_setattr (x86-64)
            raise OSError(ctypes.get_errno(), f"sched_setattr {tid}")
    print(f"# xbngd's threads SCHED_OTHER, slice {slice_us} us", flush=True)


def set_nice(pid: int, nice: int) -> None:
    """The nice variant: every thread of xbngd at that nice value (still
    SCHED_OTHER; a diagnostic like --rt)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), nice)
    print(f"# xbngd's threads SCHED_OTHER, nice {nice}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=2000)
    ap.add_argument("--rate", type=int, default=300,
                    help="new clients started per second, both phases")
    ap.add_argument("--window", type=int, default=0,
                    help="generator: CPEs in progress at once (default: --clients, so that "
                         "the rate alone paces both phases)")
    ap.add_argument("--family", type=int, choices=(4, 6, 46), default=4,
                    help="46: dual stack (each CPE DHCPv4 + IA_NA + IA_PD, kea-dhcp4 and "
                         "kea-dhcp6 at once)")
    ap.add_argument("--rt", type=int, default=0,
                    help="run xbngd's threads SCHED_FIFO at this priority (diagnostic)")
    ap.add_argument("--slice-us", type=int, default=0,
                    help="run xbngd's threads SCHED_OTHER with this EEVDF slice (diagnostic)")
    ap.add_argument("--variants", default="default",
                    help="--family 46: the relayed phase once per variant, each on a freshly "
                         "started xbngd and CPEs of its own, in this order (comma-separated): "
                         "default, prio:N (config punt.realtime_priority = N), rt:N (chrt "
                         "from outside), slice:US (--slice-us from outside), nice:N (every "
                         "thread's nice value, from outside); any of them @NAME: with the "
                         "xbngd of --xbngd NAME=PATH (another checkout's, A/B in one run)")
    ap.add_argument("--xbngd", action="append", default=[], metavar="NAME=PATH",
                    help="--family 46: an xbngd binary the variants name with @NAME")
    ap.add_argument("--no-straight", action="store_true",
                    help="--family 46: skip the straight phase")
    ap.add_argument("--timeout", type=float, default=10,
                    help="generator: a CPE not bound after S s has failed")
    ap.add_argument("--retransmit", type=float, default=30,
                    help="generator: first retransmission after S s (default 30: none)")
    ap.add_argument("--gen-fifo", type=int, default=0,
                    help="--family 46: run the generator (the emulated CPEs) at SCHED_FIFO of "
                         "this priority, below xbngd's (a diagnostic: at the default policy on "
                         "a loaded host it stalls, then starts the CPEs it owes at once)")
    ap.add_argument("--keep", default="",
                    help="--family 46: copy each relayed phase's captures of the CPEs' side "
                         "and the uplink (pcap) into this directory")
    a = ap.parse_args()
    a.window = a.window or a.clients
    print(f"# load: {open('/proc/loadavg').read().strip()}", flush=True)
    if a.family == 6:
        return main6(a)
    if a.family == 46:
        return main46(a)
    n = a.clients
    with XbngLab(kind="xbngrelay") as x:
        # Two pools: perfdhcp's clients (A) and the CPEs (B), counted apart.
        kea = Kea4(x.lab, x.net, "kea", 0, [{
            "id": 1, "subnet": "100.64.0.0/10",
            "pools": [{"pool": "100.65.0.0 - 100.65.255.255"},
                      {"pool": "100.66.0.0 - 100.66.255.255"}]}], valid_lifetime=3600)
        # Kea's debug log (the lab's default) would be its bottleneck: INFO
        # (one line per lease, and the start line the lab waits for).
        with open(kea.conf) as f:
            cfg = json.load(f)
        cfg["Dhcp4"]["loggers"][0].update({"severity": "INFO", "debuglevel": 0})
        with open(kea.conf, "w") as f:
            json.dump(cfg, f)
        kea.start()
        conf = os.path.join(x.lab.rundir, "relay.toml")
        with open(conf, "w") as f:
            f.write('[ports]\naccess = [{ name = "acc0", dhcp = "relay" }]\n'
                    f'[relay]\nservers_v4 = ["{kea.address}"]\n'
                    "[punt]\nsubscriber_rate = 100\nsubscriber_burst = 100\n")
        x.start(max_subscribers=max(4096, 2 * n), extra=["--config", conf])
        realtime(x, a.rt)
        x.resolve_uplink_neighbours()
        port67 = ["udp", "port", "67"]

        # A: straight to Kea.
        link_sel = "".join(f"{int(o):02x}" for o in GW4.split("."))
        secs = max(5, n // max(a.rate, 1) + 5)
        print(f"## A: perfdhcp straight to Kea {kea.address}: {n} clients at {a.rate}/s", flush=True)
        cap = Capture(x.lab, x.net, "k0", port67)
        r = subprocess.run(x.net.nsenter_argv(
            ["perfdhcp", "-4", "-r", str(a.rate), "-R", str(n), "-n", str(n), "-p", str(secs),
             "-o", f"82,0504{link_sel}", kea.address]), capture_output=True, text=True)
        acks_a, dt_a = kea_rate(cap.stop())
        print("\n".join("  " + ln.strip() for ln in r.stdout.splitlines()
                        if any(k in ln for k in ("sent", "received", "drops", "delay"))))
        rate_a = acks_a / dt_a if dt_a else 0
        print(f"  at Kea (k0): {acks_a} ACKs in {dt_a:.2f} s: {rate_a:.0f} leases/s", flush=True)

        # B: the same load through xbngd's relay.
        print(f"## B: {n} QinQ CPEs at {a.rate}/s through xbngd's relay (window {a.window})",
              flush=True)
        caps = [Capture(x.lab, x.net, "k0", port67), Capture(x.lab, x.sub, "s0", []),
                Capture(x.lab, x.net, "n0", port67)]
        gen = find_bin("xbng_bench_bringup")
        out = os.path.join(x.lab.rundir, "gen.json")
        rss0 = rss_kib(x.daemon.pid)
        # No retransmission (the first one after the timeout), as perfdhcp.
        subprocess.run([gen, "--v4-only", "-n", str(n), "--rate", str(a.rate), "--window",
                        str(a.window), "--netns", x.sub.name, "--iface", "s0", "--pid",
                        str(x.daemon.pid), "--timeout", "10", "--retransmit", "30", "--json",
                        out], check=False)
        kea_msgs, cpe_msgs, upl_msgs = (c.stop() for c in caps)
        acks_b, dt_b = kea_rate(kea_msgs)
        rate_b = acks_b / dt_b if dt_b else 0
        print(f"  at Kea (k0): {acks_b} ACKs in {dt_b:.2f} s: {rate_b:.0f} leases/s")
        st = {r["reason"]: int(r.get("packets", 0)) for r in x.ctl("stats").get("reasons", [])}
        print(f"  xbngd: relay4_bound {st.get('relay4_bound', 0)}, relay4_ack_refused "
              f"{st.get('relay4_ack_refused', 0)}, relay4_forwarded {st.get('relay4_forwarded', 0)}")
        print_memory(x.daemon.pid, rss0, st.get("relay4_bound", 0))
        drops = {k: v for k, v in st.items()
                 if v and any(t in k for t in ("punt", "relay4", "drop_", "rate"))}
        print(f"  xbngd counters: {drops}")
        print(f"## relayed / straight, Kea's leases/s at the same load: "
              f"{rate_b / rate_a if rate_a else float('nan'):.3f}")
        # DISCOVER -> OFFER is relaying alone; REQUEST -> ACK also creates the
        # subscriber (store, maps, journal) before the ACK goes on.
        for what, kinds in (("every exchange", ((DISCOVER, OFFER), (REQUEST, ACK))),
                            ("DISCOVER -> OFFER", ((DISCOVER, OFFER),)),
                            ("REQUEST -> ACK", ((REQUEST, ACK),))):
            added = added_latency(cpe_msgs, upl_msgs, kinds)
            print(f"## latency the relay added, {what} ({len(added)} sent once): "
                  f"p50 {pct(added, 0.5):.3f} ms, p99 {pct(added, 0.99):.3f} ms, "
                  f"max {pct(added, 1.0):.3f} ms")
        print(f"# load: {open('/proc/loadavg').read().strip()}", flush=True)
        kea.stop()
    return 0


# kea-dhcp6's subnets: the relay's (link-address = the access gateway) for
# the CPEs, and net's link toward Kea for perfdhcp.
KEA6_SUBNETS = [
    {"id": 1, "subnet": "2001:db8:1000::/48",
     "pools": [{"pool": "2001:db8:1000:1::/80"}],
     "pd-pools": [{"prefix": "2001:db8:2000::", "prefix-len": 36, "delegated-len": 56}]},
    {"id": 2, "subnet": "2001:db8:ffff:60::/64",
     "pools": [{"pool": "2001:db8:ffff:60:1::/80"}],
     "pd-pools": [{"prefix": "2001:db8:3000::", "prefix-len": 36, "delegated-len": 56}]},
]


def main6(a) -> int:
    n = a.clients
    with XbngLab(kind="xbngrelay6") as x:
        # Two subnets: the relay's (link-address = the access gateway) for
        # the CPEs (B6), net's link toward Kea for perfdhcp (A6).
        kea = Kea6(x.lab, x.net, "kea6", 0, KEA6_SUBNETS, valid_lifetime=3600)
        with open(kea.conf) as f:
            cfg = json.load(f)
        cfg["Dhcp6"]["loggers"][0].update({"severity": "INFO", "debuglevel": 0})
        with open(kea.conf, "w") as f:
            json.dump(cfg, f)
        kea.start()
        conf = os.path.join(x.lab.rundir, "relay.toml")
        with open(conf, "w") as f:
            f.write('[ports]\naccess = [{ name = "acc0", dhcp = "relay" }]\n'
                    f'[relay]\nservers_v4 = ["198.51.100.67"]\nservers_v6 = ["{kea.address}"]\n'
                    "[punt]\nsubscriber_rate = 100\nsubscriber_burst = 100\n")
        x.start(max_subscribers=max(4096, 2 * n), extra=["--config", conf])
        realtime(x, a.rt)
        x.resolve_uplink_neighbours()
        port547 = ["udp", "port", "547", "or", "udp", "port", "546"]

        secs = max(5, n // max(a.rate, 1) + 5)
        print(f"## A6: perfdhcp -6 straight to Kea {kea.address}: {n} clients at {a.rate}/s",
              flush=True)
        cap = Capture(x.lab, x.net, "k60", port547)
        r = subprocess.run(x.net.nsenter_argv(
            ["perfdhcp", "-6", "-A1", "-e", "address-and-prefix", "-r", str(a.rate),
             "-R", str(n), "-n", str(n), "-p", str(secs), kea.address]),
            capture_output=True, text=True)
        replies_a, dt_a = kea_rate(cap.stop(6), SOLICIT, REPLY6)
        print("\n".join("  " + ln.strip() for ln in (r.stdout + r.stderr).splitlines()
                        if any(k in ln for k in ("sent", "received", "drops", "delay", "rror"))))
        rate_a = replies_a / dt_a if dt_a else 0
        print(f"  at Kea (k60): {replies_a} REPLYs in {dt_a:.2f} s: {rate_a:.0f} leases/s",
              flush=True)

        print(f"## B6: {n} QinQ CPEs at {a.rate}/s through xbngd's DHCPv6 relay "
              f"(window {a.window})", flush=True)
        caps = [Capture(x.lab, x.net, "k60", port547), Capture(x.lab, x.sub, "s0", []),
                Capture(x.lab, x.net, "n0", port547)]
        gen = find_bin("xbng_bench_bringup")
        rss0 = rss_kib(x.daemon.pid)
        subprocess.run([gen, "--v6-only", "--no-rapid-commit", "-n", str(n), "--rate",
                        str(a.rate), "--window", str(a.window), "--netns", x.sub.name,
                        "--iface", "s0", "--pid", str(x.daemon.pid), "--timeout", "10",
                        "--retransmit", "30"], check=False)
        kea_msgs, cpe_msgs, upl_msgs = (c.stop(6) for c in caps)
        replies_b, dt_b = kea_rate(kea_msgs, SOLICIT, REPLY6)
        rate_b = replies_b / dt_b if dt_b else 0
        print(f"  at Kea (k60): {replies_b} REPLYs in {dt_b:.2f} s: {rate_b:.0f} leases/s")
        st = {r["reason"]: int(r.get("packets", 0)) for r in x.ctl("stats").get("reasons", [])}
        print(f"  xbngd: relay6_bound {st.get('relay6_bound', 0)}, relay6_reply_refused "
              f"{st.get('relay6_reply_refused', 0)}, relay6_forwarded "
              f"{st.get('relay6_forwarded', 0)}")
        print_memory(x.daemon.pid, rss0, st.get("relay6_bound", 0))
        drops = {k: v for k, v in st.items()
                 if v and any(t in k for t in ("punt", "relay6", "drop_", "rate"))}
        print(f"  xbngd counters: {drops}")
        print(f"## relayed / straight, Kea's leases/s at the same load: "
              f"{rate_b / rate_a if rate_a else float('nan'):.3f}")
        for what, kinds in (("every exchange", ((SOLICIT, ADVERTISE), (REQUEST6, REPLY6))),
                            ("SOLICIT -> ADVERTISE", ((SOLICIT, ADVERTISE),)),
                            ("REQUEST -> REPLY", ((REQUEST6, REPLY6),))):
            added = added_latency(cpe_msgs, upl_msgs, kinds)
            print(f"## latency the relay added, {what} ({len(added)} sent once): "
                  f"p50 {pct(added, 0.5):.3f} ms, p99 {pct(added, 0.99):.3f} ms, "
                  f"max {pct(added, 1.0):.3f} ms")
        print(f"# load: {open('/proc/loadavg').read().strip()}", flush=True)
        kea.stop()
    return 0


def print_latency(cpe_msgs, upl_msgs, what, kinds) -> list[float]:
    added = added_latency(cpe_msgs, upl_msgs, kinds)
    print(f"## latency the relay added, {what} ({len(added)} sent once): "
          f"p50 {pct(added, 0.5):.3f} ms, p99 {pct(added, 0.99):.3f} ms, "
          f"p99.9 {pct(added, 0.999):.3f} ms, max {pct(added, 1.0):.3f} ms; "
          f"over 1 / 4 ms: {sum(v > 1 for v in added)} / {sum(v > 4 for v in added)}",
          flush=True)
    return added


def main46(a) -> int:
    """Dual stack: kea-dhcp4 and kea-dhcp6 at once. Straight (perfdhcp -4
    and perfdhcp -6 -A1 side by side, N clients each at R/s), then relayed:
    N dual-stack QinQ CPEs at R/s (xbng_bench_bringup --relayed: each CPE's
    DISCOVER and SOLICIT at once, IA_NA + IA_PD), once per --variants entry
    (xbngd restarted, the next N CPEs), so that scheduling variants compare
    within one run at the same load."""
    n = a.clients
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    binaries = dict(b.split("=", 1) for b in a.xbngd)
    for v in variants:
        v, _, binary = v.partition("@")
        if binary and binary not in binaries:
            raise SystemExit(f"--variants: @{binary}: no --xbngd {binary}=PATH")
        kind, _, arg = v.partition(":")
        if (kind not in ("default", "prio", "rt", "slice", "nice") or
                (kind != "default") != arg.lstrip("-").isdigit()):
            raise SystemExit(f"--variants: {v}: expected default, prio:N, rt:N, slice:US or "
                             "nice:N")
    with XbngLab(kind="xbngrelay46") as x:
        kea4 = Kea4(x.lab, x.net, "kea4", 0, [{
            "id": 1, "subnet": "100.64.0.0/10",
            "pools": [{"pool": "100.65.0.0 - 100.72.255.255"}]}], valid_lifetime=3600)
        kea6 = Kea6(x.lab, x.net, "kea6", 0, KEA6_SUBNETS, valid_lifetime=3600)
        for k, key in ((kea4, "Dhcp4"), (kea6, "Dhcp6")):
            with open(k.conf) as f:
                cfg = json.load(f)
            cfg[key]["loggers"][0].update({"severity": "INFO", "debuglevel": 0})
            with open(k.conf, "w") as f:
                json.dump(cfg, f)
            k.start()
        conf = os.path.join(x.lab.rundir, "relay.toml")
        port67 = ["udp", "port", "67"]
        port547 = ["udp", "port", "547", "or", "udp", "port", "546"]
        secs = max(5, n // max(a.rate, 1) + 5)
        rates_a = {}

        default_xbngd = x.xbngd

        def start(variant: str) -> None:
            variant, _, binary = variant.partition("@")
            kind, _, arg = variant.partition(":")
            with open(conf, "w") as f:
                f.write('[ports]\naccess = [{ name = "acc0", dhcp = "relay" }]\n'
                        f'[relay]\nservers_v4 = ["{kea4.address}"]\n'
                        f'servers_v6 = ["{kea6.address}"]\n'
                        "[punt]\nsubscriber_rate = 100\nsubscriber_burst = 100\n" +
                        (f"realtime_priority = {arg}\n" if kind == "prio" else ""))
            if x.daemon is not None and x.daemon.poll() is None:
                x.stop()
            x.xbngd = binaries[binary] if binary else default_xbngd
            x.start(max_subscribers=max(4096, n * (len(variants) + 1)), extra=["--config", conf])
            realtime(x, int(arg) if kind == "rt" else a.rt)
            set_slice(x.daemon.pid, int(arg) if kind == "slice" else a.slice_us)
            if kind == "nice":
                set_nice(x.daemon.pid, int(arg))
            x.resolve_uplink_neighbours()

        start(variants[0])
        if not a.no_straight:
            link_sel = "".join(f"{int(o):02x}" for o in GW4.split("."))
            print(f"## A46: perfdhcp -4 and perfdhcp -6 at once, straight to Kea: {n} clients "
                  f"each at {a.rate}/s", flush=True)
            caps = [Capture(x.lab, x.net, "k0", port67), Capture(x.lab, x.net, "k60", port547)]
            pp = [subprocess.Popen(x.net.nsenter_argv(
                      ["perfdhcp", "-4", "-r", str(a.rate), "-R", str(n), "-n", str(n), "-p",
                       str(secs), "-o", f"82,0504{link_sel}", kea4.address]),
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
                  subprocess.Popen(x.net.nsenter_argv(
                      ["perfdhcp", "-6", "-A1", "-e", "address-and-prefix", "-r", str(a.rate),
                       "-R", str(n), "-n", str(n), "-p", str(secs), kea6.address]),
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
            outs = [p.communicate()[0] for p in pp]
            m4, m6 = caps[0].stop(4), caps[1].stop(6)
            for fam, out in zip((4, 6), outs):
                print("\n".join(f"  perfdhcp -{fam}: " + ln.strip() for ln in out.splitlines()
                                if any(k in ln for k in ("sent", "received", "drops", "rror"))))
            for fam, msgs, ends in ((4, m4, (DISCOVER, ACK)), (6, m6, (SOLICIT, REPLY6))):
                got, dt = kea_rate(msgs, *ends)
                rates_a[fam] = got / dt if dt else 0
                print(f"  DHCPv{fam} at Kea: {got} leases in {dt:.2f} s: {rates_a[fam]:.0f} "
                      f"leases/s", flush=True)

        gen = find_bin("xbng_bench_bringup")
        summary = []
        for r, variant in enumerate(variants):
            if r:
                start(variant)
            print(f"## B46 [{variant}]: {n} dual-stack QinQ CPEs (#{r * n}..) at {a.rate}/s "
                  f"through xbngd's relays (window {a.window})", flush=True)
            caps = [Capture(x.lab, x.net, "k0", port67), Capture(x.lab, x.net, "k60", port547),
                    Capture(x.lab, x.sub, "s0", []),
                    Capture(x.lab, x.net, "n0", port67 + ["or"] + port547)]
            out = os.path.join(x.lab.rundir, f"gen{r}.json")
            st0 = x.stats()
            rss0 = rss_kib(x.daemon.pid)
            fifo = ["chrt", "-f", str(a.gen_fifo)] if a.gen_fifo else []
            subprocess.run([*fifo, gen, "--relayed", "--no-rapid-commit", "-n", str(n), "--first",
                            str(r * n), "--rate", str(a.rate), "--window", str(a.window),
                            "--netns", x.sub.name, "--iface", "s0", "--pid", str(x.daemon.pid),
                            "--timeout", str(a.timeout), "--retransmit", str(a.retransmit),
                            "--json", out],
                           check=False)
            rss1 = rss_kib(x.daemon.pid)
            k4, k6, cpe, upl = (c.stop_only() for c in caps)
            if a.keep:
                os.makedirs(a.keep, exist_ok=True)
                for side, path in (("cpe", cpe), ("uplink", upl)):
                    shutil.copy(path, os.path.join(a.keep, f"{r}-{variant}-{side}.pcap"))
            st = x.stats()
            with open(out) as f:
                g = json.load(f)
            res = g["results"]
            row = {"variant": variant}
            for fam, path, ends in ((4, k4, (DISCOVER, ACK)), (6, k6, (SOLICIT, REPLY6))):
                got, dt = kea_rate(dhcp4_messages(path) if fam == 4 else dhcp6_messages(path),
                                   *ends)
                rb = got / dt if dt else 0
                ra = rates_a.get(fam)
                print(f"  DHCPv{fam} at Kea: {got} leases in {dt:.2f} s: {rb:.0f} leases/s"
                      + (f"; relayed / straight {rb / ra:.3f}" if ra else ""))
                row[f"ratio{fam}"] = rb / ra if ra else float("nan")
            bound = {f: st.get(f"relay{f}_bound", 0) - st0.get(f"relay{f}_bound", 0)
                     for f in (4, 6)}
            print(f"  xbngd: relay4_bound {bound[4]}, relay6_bound {bound[6]}, refused "
                  f"{st.get('relay4_ack_refused', 0)} / {st.get('relay6_reply_refused', 0)}")
            drops = {k: v for k, v in st.items() if k != "_raw" and v and
                     any(t in k for t in ("punt", "relay", "drop_", "rate"))}
            print(f"  xbngd counters (cumulative): {drops}")
            per = (rss1 - rss0) * 1024 / res["bound"] if res["bound"] else 0
            print(f"  xbngd RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB: {per:.0f} B per "
                  f"dual-stack session bound ({res['bound']})")
            proc = g.get("process", {})
            print(f"  dual-stack CPEs bound {res['bound']} of {n} in {res['wall_s']:.1f} s: "
                  f"{res['sessions_per_s']:.0f} sessions/s; xbngd CPU "
                  f"{proc.get('cpu_pct_avg', float('nan')):.0f}% avg, "
                  f"{proc.get('cpu_pct_peak', float('nan')):.0f}% peak")
            c4, u4 = dhcp4_messages(cpe), dhcp4_messages(upl)
            c6, u6 = dhcp6_messages(cpe), dhcp6_messages(upl)
            l4 = print_latency(c4, u4, "DHCPv4 (DISCOVER -> OFFER, REQUEST -> ACK)",
                               ((DISCOVER, OFFER), (REQUEST, ACK)))
            l6 = print_latency(c6, u6, "DHCPv6 (SOLICIT -> ADVERTISE, REQUEST -> REPLY)",
                               ((SOLICIT, ADVERTISE), (REQUEST6, REPLY6)))
            # DISCOVER -> OFFER and SOLICIT -> ADVERTISE are relaying alone;
            # REQUEST -> ACK and REQUEST -> REPLY also create the subscriber
            # (store, maps, journal, lease) before the answer goes on.
            for fam, c, u, kind in ((4, c4, u4, (DISCOVER, OFFER)), (4, c4, u4, (REQUEST, ACK)),
                                    (6, c6, u6, (SOLICIT, ADVERTISE)),
                                    (6, c6, u6, (REQUEST6, REPLY6))):
                names = {4: {DISCOVER: "DISCOVER", OFFER: "OFFER", REQUEST: "REQUEST",
                             ACK: "ACK"},
                         6: {SOLICIT: "SOLICIT", ADVERTISE: "ADVERTISE", REQUEST6: "REQUEST",
                             REPLY6: "REPLY"}}[fam]
                print_latency(c, u, f"  DHCPv{fam} {names[kind[0]]} -> {names[kind[1]]}",
                              (kind,))
            both = sorted(l4 + l6)
            print(f"## latency the relay added, both families ({len(both)}): p50 "
                  f"{pct(both, 0.5):.3f} ms, p99 {pct(both, 0.99):.3f} ms, p99.9 "
                  f"{pct(both, 0.999):.3f} ms, max {pct(both, 1.0):.3f} ms; over 1 / 4 ms: "
                  f"{sum(v > 1 for v in both)} / {sum(v > 4 for v in both)}", flush=True)
            row.update(bound=res["bound"], wall=res["wall_s"], rate=res["sessions_per_s"],
                       p50_4=pct(l4, 0.5), p99_4=pct(l4, 0.99), p50_6=pct(l6, 0.5),
                       p99_6=pct(l6, 0.99), p99=pct(both, 0.99), p999=pct(both, 0.999),
                       mx=pct(both, 1.0),
                       cpu=proc.get("cpu_pct_avg", float("nan")), per=per)
            summary.append(row)
            print(f"# load: {open('/proc/loadavg').read().strip()}", flush=True)
        print("## summary: variant | bound | s | sessions/s | added p50/p99 v4 | p50/p99 v6 | "
              "p99 / p99.9 / max both | xbngd CPU | B/session")
        for w in summary:
            print(f"  {w['variant']:10s} | {w['bound']} | {w['wall']:.1f} | {w['rate']:.0f} | "
                  f"{w['p50_4']:.3f}/{w['p99_4']:.3f} | {w['p50_6']:.3f}/{w['p99_6']:.3f} | "
                  f"{w['p99']:.3f} / {w['p999']:.3f} / {w['mx']:.1f} | {w['cpu']:.0f}% | "
                  f"{w['per']:.0f}")
        kea4.stop()
        kea6.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
