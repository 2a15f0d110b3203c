"""High availability (docs/fleet.md, "High availability"): two xbngd members of
one group, elected through a real etcd, serving the same subscribers.

    cpe ns  --c0/cpe0--+                      +--u0-- dut0 upl0 (192.0.2.11, VIP when active)
                       | br0 (acc ns)          |
    dut0 acc0 --a0-----+                br1 (up ns)--n0/eth0-- net ns (192.0.2.2):
    dut1 acc0 --a1-----+                      +--u1-- dut1 upl0    routes to the pools
                                                                   via the VIP 192.0.2.1
    etcd ns: one etcd member; e0/e1 to the members

Continuous traffic both ways for some subscribers (numbered UDP frames up
from the CPE side to the virtual MAC, numbered datagrams down from net routed
via the VIP); the active agent is killed (kill -9), the standby takes over;
the loss in each direction (lost packets / rate) is printed, and a capture on
the access bridge (ARP requests for the gateway every 50 ms) shows that the
two members never both answer one of them; each way loses under 2 s. Then a
planned switchover (under 1 s), SIGSTOP of the active, and the active's
access link going down (it hands over to the member with every port up).

State replication: a real dhclient CPE (dcpe ns, the TC tag emulator, its
subscriber provisioned without MAC) binds through the active; the standby
gets the lease and the learned MAC through etcd; after a kill -9 of the
active the CPE's unicast renewal at T1 is accepted by the new active with the
same address, and the killed member rejoins with the renewed lease. etcd
stopped entirely: both members keep their roles and traffic keeps flowing.

Sessions: acc0 has auth = "radius" (a real FreeRADIUS in the net namespace,
its detail file read back): a dhclient CPE on a pair nobody provisioned is
authorized on the active; the session reaches the standby (origin radius);
after a kill -9 of the active the new active forwards for it with no new
Access-Request, sends no second Start, and its Interim-Updates carry the
same Acct-Session-Id and Class with counters that never go backwards; the
killed member rejoins with the session. A second lab relays DHCPv4 to a
real Kea (dhcp = "relay"): the relay's session (origin relay, its lease)
reaches the standby, and after a kill -9 of the active the CPE's renewal is
relayed by the new active, same address, no new DISCOVER."""
import signal
import socket
import time
import unittest

from xbnglab.cpe import cpe_sub
from xbnglab.frames import arp_request, up_v4
from xbnglab.ha import (GROUP, MAGIC_DOWN, MAGIC_UP, NET4, PPS, VMAC, ArpWatch, DhclientCpe,
                        Flows, build_lab, start_group)
from xbnglab.kea import Kea4
from xbnglab.lab import Lab, recv_frames, wait_for
from xbnglab.radius import FreeRadius, octets
from xbnglab.radius import user_name as radius_user
from xbnglab.xbngd import GW4, CtlError, find_pass_obj, plan

N_SUBS = 20
LEASE = 20  # DHCPv4 lease time: T1 = 10 s, T2 = 17.5 s
# The dhclient CPE's subscriber, provisioned without MAC (learned from DHCP).
DSUB = cpe_sub(0, base=100)
# A pair nobody provisioned: RADIUS authorizes it (acc0 has auth = "radius").
RSUB = cpe_sub(1, base=100)
RSUB_IP = "100.64.78.7"
SECRET = "xbng-lab-secret"
RADIUS_TOML = f"""
[ports]
access = [{{ name = "acc0", auth = "radius" }}]

[radius]
servers = [{{ address = "{NET4}", secret = "{SECRET}" }}]
nas_identifier = "xbng-ha"
timeout_ms = 500
retries = 2
reject_hold_s = 1
interim_min_s = 1
coa_listen = ""
"""


def DhcpCpe(lab, acc, sub=DSUB, name="dcpe"):
    """A dhclient -4 CPE on a subscriber's tags (DSUB's by default)."""
    return DhclientCpe(lab, acc, sub, name)


class HaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = Lab("xbngha")
        cls.addClassCleanup(cls.lab.close)
        cls.cluster, cls.m, ns = build_lab(cls.lab, find_pass_obj(), lease=LEASE,
                                           extra=RADIUS_TOML)
        cls.etcd_ns, cls.acc, cls.up, cls.cpe, cls.net = (
            ns[k] for k in ("etcd", "acc", "up", "cpe", "net"))
        # The RADIUS server of both members (each speaks from its own
        # uplink address; the VIP is the active's too).
        users = (f'"{radius_user(RSUB)}" Auth-Type := Accept\n'
                 f'\tFramed-IP-Address = {RSUB_IP},\n'
                 f'\tAcct-Interim-Interval = 2,\n'
                 f'\tClass = "ha-class"\n')
        cls.radius = FreeRadius(cls.lab, cls.net, [(a, SECRET) for a in
                                                   ("192.0.2.1", "192.0.2.11", "192.0.2.12")],
                                users)
        cls.addClassCleanup(cls.radius.stop)
        cls.radius.start()
        cls.subs = [plan(i) for i in range(N_SUBS)]
        dsub = {k: v for k, v in DSUB.items() if k != "mac"}
        start_group(cls.lab, cls.cluster, cls.m, cls.subs + [dsub])

    def active_member(self):
        roles = [m.role() for m in self.m]
        return [m for m, r in zip(self.m, roles) if r == "active"]

    def warm(self):
        """Until traffic flows both ways (neighbours resolved)."""
        net_rx = self.net.packet_socket("eth0")
        with self.net.entered():
            tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        cpe_tx = self.cpe.packet_socket("c0")
        cpe_rx = self.cpe.packet_socket("c0")

        seen = {"up": 0, "down": 0}

        def flows():
            for s in self.subs[:2]:
                cpe_tx.send(bytes(up_v4(s, VMAC, NET4, payload=MAGIC_UP + b"warm0000")))
                tx.sendto(MAGIC_DOWN + b"warm0000", (s["ipv4"], 40000))
            up = recv_frames(net_rx, 0.3, match=lambda f: MAGIC_UP in f)
            down = recv_frames(cpe_rx, 0.3, match=lambda f: MAGIC_DOWN in f)
            seen["up"] += len(up)
            seen["down"] += len(down)
            return up and down
        try:
            wait_for(flows, 30, 0.1, "traffic both ways")
        except TimeoutError:
            for m in self.m:
                try:
                    nz = {r["reason"]: r["packets"] for r in m.ctl("stats")["reasons"]
                          if int(r.get("packets", 0))}
                except Exception as e:
                    nz = str(e)
                print(f"{m.name} role {m.role()} counters {nz}", flush=True)
            print(f"seen {seen}", flush=True)
            raise

    def report(self, what, flows, arp, max_loss_s):
        """Prints the loss each way and the ARP rounds; asserts the loss is
        under max_loss_s each way (a takeover's bound, not a benchmark: the
        figures are printed)."""
        for d in ("up", "down"):
            lost, secs = flows.loss(d)
            print(f"\nha {what}: {d}stream sent {flows.sent[d]}, lost {lost} = {secs:.2f} s of "
                  f"loss at {PPS} pps", flush=True)
        print(f"ha {what}: {len(arp.rounds)} ARP rounds, {arp.answered()} answered, "
              f"{len(arp.both())} answered by both members", flush=True)
        for d in ("up", "down"):
            lost, secs = flows.loss(d)
            self.assertLess(secs, max_loss_s, f"{what}: {d}stream lost {lost} packets")

    def test_1_one_active_standby_drops(self):
        self.assertEqual(len(self.active_member()), 1)
        self.assertEqual(self.m[0].role(), "active")
        self.assertTrue(self.m[0].has_vip())
        self.assertFalse(self.m[1].has_vip())
        st = self.m[1].ha()
        self.assertEqual(st["group"], GROUP)
        self.assertEqual(st["activeMember"] if "activeMember" in st else st["active_member"], "m0")
        self.warm()
        # The standby sees the CPE's frames (flooded by the bridge) and drops them.
        before = self.m[1].counter("drop_standby")
        cpe_tx = self.cpe.packet_socket("c0")
        cpe_tx.send(bytes(arp_request(self.subs[0], GW4)))
        wait_for(lambda: self.m[1].counter("drop_standby") > before, 10, 0.1,
                 "the standby to drop the broadcast ARP")

    def test_2_kill_active(self):
        self.warm()
        act = self.active_member()
        self.assertEqual(len(act), 1)
        old = act[0]
        new = self.m[1 - old.k]
        with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                Flows(self.cpe, self.net, self.subs) as flows:
            time.sleep(2)
            t_kill = time.monotonic()
            old.daemon.send_signal(signal.SIGKILL)
            old.daemon.wait(10)
            wait_for(lambda: new.role() == "active", 30, 0.1, f"{new.name} to take over")
            t_active = time.monotonic()
            time.sleep(4)
        self.report("kill -9 of the active agent", flows, arp, 2.0)
        print(f"ha kill -9: {new.name} active {t_active - t_kill:.2f} s after the kill",
              flush=True)
        self.assertEqual(arp.both(), [], "both members answered one ARP request")
        self.assertTrue(new.has_vip())
        st = new.ha()
        cause = st.get("lastTakeoverCause") or st.get("last_takeover_cause")
        self.assertIn(old.name, cause)
        # Traffic came back both ways after the takeover.
        for d in ("up", "down"):
            late = [t for t in flows.seen[d].values() if t > t_active + 1]
            self.assertTrue(late, f"no {d}stream traffic after the takeover")
        # The killed agent's data plane stopped acting active by itself.
        # Restart it: it joins as standby and removes its VIP.
        old.start()
        wait_for(lambda: old.role() == "standby", 30, 0.2, f"{old.name} to rejoin as standby")
        wait_for(lambda: not old.has_vip(), 10, 0.1, f"{old.name} to drop the VIP")

    def test_3_switchover(self):
        self.warm()
        act = self.active_member()
        self.assertEqual(len(act), 1)
        old = act[0]
        new = self.m[1 - old.k]
        wait_for(lambda: not any(m.get("holding") for m in old.ha().get("members", [])), 30, 0.2,
                 "no member holding")
        with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                Flows(self.cpe, self.net, self.subs) as flows:
            time.sleep(2)
            t0 = time.monotonic()
            r = old.ctl("ha", "switchover")
            wait_for(lambda: new.role() == "active", 30, 0.05, f"{new.name} to take over")
            t1 = time.monotonic()
            time.sleep(3)
        self.report("planned switchover", flows, arp, 1.0)
        print(f"ha switchover: {new.name} active {t1 - t0:.2f} s after the request ({r})",
              flush=True)
        self.assertEqual(arp.both(), [])
        self.assertEqual(old.role(), "standby")
        self.assertFalse(old.has_vip())

    def test_4_sigstop_active(self):
        self.warm()
        act = self.active_member()
        self.assertEqual(len(act), 1)
        old = act[0]
        new = self.m[1 - old.k]
        wait_for(lambda: not any(m.get("holding") for m in new.ha().get("members", [])), 30, 0.2,
                 "no member holding")
        with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                Flows(self.cpe, self.net, self.subs) as flows:
            time.sleep(2)
            t0 = time.monotonic()
            old.daemon.send_signal(signal.SIGSTOP)
            try:
                wait_for(lambda: new.role() == "active", 30, 0.1, f"{new.name} to take over")
                t1 = time.monotonic()
                time.sleep(3)
            finally:
                old.daemon.send_signal(signal.SIGCONT)
        self.report("SIGSTOP of the active agent", flows, arp, 2.0)
        print(f"ha SIGSTOP: {new.name} active {t1 - t0:.2f} s after the stop", flush=True)
        self.assertEqual(arp.both(), [])
        # Resumed, the frozen member finds its lease gone and stays standby.
        wait_for(lambda: old.role() == "standby", 30, 0.2, f"{old.name} to step down")
        wait_for(lambda: not old.has_vip(), 10, 0.1, f"{old.name} to drop the VIP")
        self.assertEqual(len(self.active_member()), 1)

    def test_4b_access_port_down_hands_over(self):
        """The active's access link goes down (its bridge port, as a pulled
        cable or a dead switch port would): it hands over to the standby,
        whose ports are all up; the link back, it stays standby."""
        self.warm()
        act = self.active_member()
        self.assertEqual(len(act), 1)
        old = act[0]
        new = self.m[1 - old.k]
        for m in self.m:
            wait_for(lambda m=m: not any(v.get("holding") for v in m.ha().get("members", [])),
                     30, 0.2, "no member holding")
        link = f"a{old.k}"
        with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                Flows(self.cpe, self.net, self.subs) as flows:
            time.sleep(2)
            t0 = time.monotonic()
            self.acc.ip("link", "set", link, "down")
            try:
                wait_for(lambda: new.role() == "active", 30, 0.05, f"{new.name} to take over")
                t1 = time.monotonic()
                down = {v["member"]: v.get("portsDown", v.get("ports_down", ""))
                        for v in new.ha().get("members", [])}
                time.sleep(3)
            finally:
                self.acc.ip("link", "set", link, "up")
        self.report("access port of the active down", flows, arp, 2.0)
        print(f"ha port down: {new.name} active {t1 - t0:.2f} s after the link went down",
              flush=True)
        self.assertEqual(arp.both(), [])
        self.assertEqual(down.get(old.name), "access acc0 has no carrier", down)
        cause = new.ha().get("lastTakeoverCause") or new.ha().get("last_takeover_cause")
        self.assertIn("ports down: access acc0 has no carrier", cause)
        self.assertEqual(old.role(), "standby")
        self.assertFalse(old.has_vip())
        self.assertTrue(new.has_vip())
        # The link back up: the member says so, and stays standby.
        wait_for(lambda: not any(v.get("portsDown", v.get("ports_down"))
                                 for v in new.ha().get("members", [])),
                 10, 0.1, f"{old.name}'s ports up again")
        self.assertEqual(old.role(), "standby")
        self.assertEqual(new.role(), "active")

    def test_5_lease_replicated_renewal_after_takeover(self):
        """A dhclient lease bound through the active reaches the standby (lease
        and learned MAC); after kill -9 of the active, the CPE's renewal at T1
        is accepted by the new active with the same address; the killed
        member rejoins with the renewed lease."""
        act = self.active_member()
        self.assertEqual(len(act), 1)
        old = act[0]
        new = self.m[1 - old.k]
        wait_for(lambda: not any(m.get("holding") for m in old.ha().get("members", [])), 30, 0.2,
                 "no member holding")
        # Both members serve DHCPv6 with the group's DUID.
        duids = []
        for m in self.m:
            with open(m.log) as f:
                line = [ln for ln in f.read().splitlines() if "DHCPv6 server DUID" in ln][-1]
            duids.append(line.split("DHCPv6 server DUID ")[1].split()[0])
            self.assertIn(f"the HA group {GROUP}", line)
        self.assertEqual(duids[0], duids[1])
        cpe = DhcpCpe(self.lab, self.acc)
        self.addCleanup(cpe.stop)
        cpe.start()
        wait_for(lambda: DSUB["ipv4"] in cpe.addrs(), 40, 0.2, "the CPE's DHCPv4 address")
        wait_for(lambda: old.lease4(DSUB).get("bound"), 10, 0.05, "the lease on the active")
        t_seen = time.monotonic()
        la = old.lease4(DSUB)
        wait_for(lambda: new.lease4(DSUB).get("boundUnix", new.lease4(DSUB).get("bound_unix"))
                 == la.get("boundUnix", la.get("bound_unix")), 10, 0.02,
                 "the lease replicated to the standby")
        print(f"\nha replication: the standby had the lease {time.monotonic() - t_seen:.2f} s "
              "after the active showed it", flush=True)
        lb = new.lease4(DSUB)
        self.assertEqual(lb.get("address"), DSUB["ipv4"])
        self.assertEqual(lb.get("expiresUnix", lb.get("expires_unix")),
                         la.get("expiresUnix", la.get("expires_unix")))
        sub = new.sub(DSUB)
        self.assertEqual(sub.get("mac", "").lower(), DSUB["mac"])
        self.assertTrue(sub.get("macLearned", sub.get("mac_learned")))
        bound0 = int(la.get("boundUnix", la.get("bound_unix")))
        # kill -9 of the active before the CPE's T1.
        old.daemon.send_signal(signal.SIGKILL)
        old.daemon.wait(10)
        t_kill = time.time()
        wait_for(lambda: new.role() == "active", 30, 0.1, f"{new.name} to take over")
        self.assertLess(t_kill, bound0 + LEASE / 2, "the takeover came after T1: test too slow")

        def renewed():
            lease = new.lease4(DSUB)
            return int(lease.get("boundUnix", lease.get("bound_unix", 0))) > bound0
        wait_for(renewed, LEASE, 0.2, "the CPE's renewal through the new active")
        ln = new.lease4(DSUB)
        bound1 = int(ln.get("boundUnix", ln.get("bound_unix")))
        self.assertEqual(ln.get("address"), DSUB["ipv4"])
        # A renewal (unicast at T1), not a rebind at T2 nor a new DISCOVER.
        self.assertLess(bound1 - bound0, LEASE * 7 / 8, f"renewed {bound1 - bound0} s after bind")
        self.assertEqual(cpe.log().count("DHCPDISCOVER"), 1, cpe.log())
        self.assertIn(DSUB["ipv4"], cpe.addrs())
        # The killed member rejoins as standby and gets the renewed lease.
        old.start()
        wait_for(lambda: old.role() == "standby", 30, 0.2, f"{old.name} to rejoin as standby")
        wait_for(lambda: int(old.lease4(DSUB).get("boundUnix", old.lease4(DSUB).get(
            "bound_unix", 0))) >= bound1, 20, 0.2, "the rejoined member to have the renewal")
        cpe.stop()

    def test_6_etcd_down_roles_kept(self):
        """etcd stopped entirely: no takeover, the active goes on forwarding;
        etcd back: the same roles."""
        self.warm()
        act = self.active_member()
        self.assertEqual(len(act), 1)
        active = act[0]
        standby = self.m[1 - active.k]
        wait_for(lambda: not any(m.get("holding") for m in active.ha().get("members", [])), 30,
                 0.2, "no member holding")
        try:
            with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                    Flows(self.cpe, self.net, self.subs) as flows:
                time.sleep(1)
                self.cluster.kill_member(0)
                t_down = time.monotonic()
                roles = []
                while time.monotonic() - t_down < 8:  # four TTLs
                    roles.append((active.role(), standby.role()))
                    time.sleep(0.25)
                self.cluster.start_member(0)
                self.cluster.wait_healthy()
                t_up = time.monotonic()
                while time.monotonic() - t_up < 6:
                    roles.append((active.role(), standby.role()))
                    time.sleep(0.25)
        finally:
            if 0 not in self.cluster.procs:
                self.cluster.start_member(0)
        self.report("etcd down entirely", flows, arp, 0.5)
        self.assertEqual(set(roles), {("active", "standby")}, roles)
        self.assertEqual(arp.both(), [])
        for d in ("up", "down"):
            late = [t for t in flows.seen[d].values() if t > t_down + 4]
            self.assertTrue(late, f"no {d}stream traffic with etcd down")
        self.assertTrue(active.has_vip())
        self.assertFalse(standby.has_vip())
        with open(active.log) as f:
            self.assertIn("etcd is down entirely", f.read())
        wait_for(lambda: active.ha().get("etcdOk", active.ha().get("etcd_ok")), 20, 0.2,
                 "the active to reach etcd again")

    def test_7_radius_session_replicated_accounting_goes_on(self):
        """A RADIUS session authorized on the active reaches the standby;
        after kill -9 of the active the new active forwards for it with no
        new Access-Request and goes on accounting it: no second Start, the
        same Acct-Session-Id and Class, counters never backwards."""
        act = self.active_member()
        self.assertEqual(len(act), 1)
        old = act[0]
        new = self.m[1 - old.k]
        wait_for(lambda: not any(m.get("holding") for m in old.ha().get("members", [])), 30, 0.2,
                 "no member holding")
        user = radius_user(RSUB)

        def recs(status=None):
            # Each member's requests go to a detail file of its own address:
            # in the order FreeRADIUS received them (whole seconds, then the
            # session's time).
            out = [r for r in self.radius.accounting() if r.get("User-Name") == user and
                   (status is None or r.get("Acct-Status-Type") == status)]
            return sorted(out, key=lambda r: (int(r.get("Timestamp", 0)),
                                              int(r.get("Acct-Session-Time", 0))))

        def requests():
            return self.radius.read_log().count("Received Access-Request")

        def origin(m):
            try:
                return m.sub(RSUB).get("origin")
            except CtlError:  # not (yet) there
                return None

        cpe = DhcpCpe(self.lab, self.acc, RSUB, "rcpe")
        self.addCleanup(cpe.stop)
        cpe.start()
        wait_for(lambda: RSUB_IP in cpe.addrs(), 40, 0.2, "the CPE's address from RADIUS")
        wait_for(lambda: recs("Start"), 15, 0.2, "the Start in the detail file")
        start = recs("Start")[0]
        sid = start["Acct-Session-Id"]
        self.assertEqual(start["Class"], "0x" + b"ha-class".hex())
        self.assertGreaterEqual(old.counter("auth_requests"), 1)
        # The standby has the session, as RADIUS's.
        wait_for(lambda: origin(new), 10, 0.1, "the session on the standby")
        sub = new.sub(RSUB)
        self.assertEqual(sub.get("origin"), "ORIGIN_RADIUS", sub)
        self.assertEqual(sub.get("ipv4"), RSUB_IP)
        # Traffic through the active, then an interim carrying it (replicated).
        r = cpe.ns.exec(["ping", "-c20", "-i0.05", "-s1000", "-W2", NET4], check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_for(lambda: any(octets(x, "Input") >= 20 * 1028 for x in recs("Interim-Update")),
                 15, 0.2, "an interim with the traffic")
        time.sleep(1)  # that interim's counts reach etcd (200 ms) and the standby
        asked = requests()
        self.assertEqual(new.counter("auth_requests"), 0)
        before = {tuple(sorted(x.items())) for x in recs()}
        old.daemon.send_signal(signal.SIGKILL)
        old.daemon.wait(10)
        t_kill = time.time()
        wait_for(lambda: new.role() == "active", 30, 0.1, f"{new.name} to take over")
        # The new active forwards for the session.
        wait_for(lambda: cpe.ns.exec(["ping", "-c1", "-W1", NET4], check=False).returncode == 0,
                 20, 0.2, "traffic through the new active")
        r = cpe.ns.exec(["ping", "-c10", "-i0.05", "-s1000", "-W2", NET4], check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_for(lambda: len([x for x in recs("Interim-Update")
                              if int(x.get("Timestamp", 0)) > t_kill + 1]) >= 2,
                 20, 0.2, "interims from the new active")
        after = [x for x in recs() if tuple(sorted(x.items())) not in before]
        print(f"\nha radius: {old.name} -> {new.name}: {len(after)} accounting record(s) after "
              "the takeover: "
              + ", ".join(f"{x['Acct-Status-Type']} in={octets(x, 'Input')}" for x in after),
              flush=True)
        self.assertEqual(len(recs("Start")), 1, "a second Start")
        self.assertEqual([x for x in self.radius.accounting()
                          if x.get("Acct-Status-Type") in ("Accounting-On", "Accounting-Off")],
                         [], "Accounting-On/Off in an HA group")
        self.assertEqual(requests(), asked, "a new Access-Request after the takeover")
        self.assertEqual(new.counter("auth_requests"), 0)
        for x in after:
            self.assertEqual(x["Acct-Session-Id"], sid)
            self.assertEqual(x["Class"], "0x" + b"ha-class".hex())
        # Only the active accounts: every request before the kill came from
        # the old active's address, every one after from the new active's.
        self.assertEqual({dict(x).get("NAS-IP-Address") for x in before},
                         {f"192.0.2.{11 + old.k}"})
        self.assertEqual({x.get("NAS-IP-Address") for x in after}, {f"192.0.2.{11 + new.k}"})
        seq = recs("Interim-Update")
        for a, c in zip(seq, seq[1:]):
            for k in ("Input", "Output"):
                self.assertLessEqual(octets(a, k), octets(c, k), (a, c))
            self.assertLessEqual(int(a["Acct-Session-Time"]), int(c["Acct-Session-Time"]))
        # The new active's own traffic on top of the replicated base.
        self.assertGreaterEqual(octets(seq[-1], "Input"), 30 * 1028, seq[-1])
        # The killed member rejoins as standby and reads the session back.
        old.start()
        wait_for(lambda: old.role() == "standby", 30, 0.2, f"{old.name} to rejoin as standby")
        wait_for(lambda: origin(old) == "ORIGIN_RADIUS", 20, 0.2,
                 "the session on the rejoined member")
        self.assertEqual(len(recs("Start")), 1, "a Start from the rejoined standby")
        cpe.stop()


# The relay variant: acc0 relays DHCPv4 to a real Kea behind the uplink
# (dhcp = "relay"); the relay's subscribers (origin relay) are sessions.
LSUB = cpe_sub(2, base=100)
KEA = "198.51.100.67"  # Kea4(index 0)
RELAY_LIFETIME, RELAY_T1, RELAY_T2 = 30, 6, 24
RELAY_TOML = f"""
[ports]
access = [{{ name = "acc0", dhcp = "relay" }}]

[relay]
servers_v4 = ["{KEA}"]
"""


class HaRelayTest(unittest.TestCase):
    """A lease relayed from Kea through the active becomes a relay session on
    both members (the subscriber with origin relay, and its lease); after
    kill -9 of the active the CPE's renewal is relayed by the new active, the
    same address, no new DISCOVER."""

    @classmethod
    def setUpClass(cls):
        cls.lab = Lab("xbnghr")
        cls.addClassCleanup(cls.lab.close)
        cls.cluster, cls.m, ns = build_lab(cls.lab, find_pass_obj(), lease=LEASE,
                                           extra=RELAY_TOML)
        cls.acc, cls.net = ns["acc"], ns["net"]
        # Each member relays from its own uplink address; Kea is behind net.
        cls.net.sysctl("net.ipv4.ip_forward", "1")
        for m in cls.m:
            m.ns.ip("route", "add", "198.51.100.64/29", "via", NET4)
        cls.kea = Kea4(cls.lab, cls.net, "kea1", 0,
                       [{"id": 1, "subnet": "100.64.0.0/16",
                         "pools": [{"pool": "100.64.20.10 - 100.64.20.200"}],
                         "option-data": [{"name": "routers", "data": GW4}]}],
                       RELAY_LIFETIME, RELAY_T1, RELAY_T2)
        assert cls.kea.address == KEA
        cls.addClassCleanup(cls.kea.stop)
        cls.kea.start()
        cls.m[0].start()
        wait_for(lambda: cls.m[0].role() == "active", 30, 0.2, "m0 to become active")
        cls.m[1].start()
        wait_for(lambda: cls.m[1].role() == "standby", 30, 0.2, "m1 standby")

    def sub(self, m):
        try:
            return m.sub(LSUB)
        except CtlError:  # not (yet) there
            return {}

    def bound(self, m):
        lease = m.lease4(LSUB) if self.sub(m) else {}
        return int(lease.get("boundUnix", lease.get("bound_unix", 0)))

    def test_1_relay_session_replicated_renewed_after_takeover(self):
        old, new = self.m
        cpe = DhcpCpe(self.lab, self.acc, LSUB, "lcpe")
        self.addCleanup(cpe.stop)
        cpe.start()
        wait_for(lambda: cpe.addrs(), 40, 0.2, "the CPE's address from Kea")
        addr = cpe.addrs()[0]
        wait_for(lambda: self.sub(old).get("origin") == "ORIGIN_RELAY", 10, 0.1,
                 "the relay session on the active")
        wait_for(lambda: self.sub(new).get("origin") == "ORIGIN_RELAY", 10, 0.1,
                 "the relay session on the standby")
        self.assertEqual(self.sub(new).get("ipv4"), addr)
        wait_for(lambda: self.bound(new) and self.bound(new) == self.bound(old), 10, 0.1,
                 "the lease on the standby")
        lb = new.lease4(LSUB)
        self.assertEqual(lb.get("address"), addr)
        self.assertEqual(lb.get("server"), KEA)
        old.daemon.send_signal(signal.SIGKILL)
        old.daemon.wait(10)
        t_kill = int(time.time())
        wait_for(lambda: new.role() == "active", 30, 0.1, f"{new.name} to take over")
        # Forwarding for the session, then its renewal relayed by the new active.
        wait_for(lambda: cpe.ns.exec(["ping", "-c1", "-W1", NET4], check=False).returncode == 0,
                 20, 0.2, "traffic through the new active")
        wait_for(lambda: self.bound(new) > t_kill, 3 * RELAY_T1, 0.2,
                 "a renewal relayed by the new active")
        self.assertEqual(new.lease4(LSUB).get("address"), addr)
        self.assertEqual(self.sub(new).get("origin"), "ORIGIN_RELAY")
        self.assertEqual(cpe.addrs(), [addr])
        self.assertEqual(cpe.log().count("DHCPDISCOVER"), 1, cpe.log())
        kea = [ln for ln in self.kea.leases() if ln.get("address") == addr]
        self.assertGreaterEqual(len(kea), 2, "the renewal in Kea's lease file")
        cpe.stop()


if __name__ == "__main__":
    unittest.main()
