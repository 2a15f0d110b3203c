"""High availability with preempt on (docs/fleet.md, "Priority and preempt"):
the HA lab of test_ha (xbnglab.ha: two xbngd members on one access bridge and
one uplink bridge, a real etcd), both members configured `preempt = true`,
m0 with the higher priority.

m0 (priority 100) is active. It is killed (kill -9): m1 (99) takes over. m0
comes back (a member that rejoins): it is synced as soon as its reads of the
group's state complete, then preempts, and m1 hands over to it. Through both
takeovers traffic runs both ways for every subscriber (loss printed; under
2 s for the kill, under 1 s for the preemption, which is planned), and two
captures of the access bridge show that one member at most answers each ARP
request for the gateway and each DHCPDISCOVER. m1, lower, never preempts m0.
(Preempt off, the rejoining member staying standby, is test_ha's kill
test.)

Then the loss of the active node (its agent killed and both its links down):
the standby takes over (under 3 s of loss: the lease of 2 s expires first);
the node comes back and preempts.
Then both members are killed and started again: one active (m0, preempt),
one standby, traffic both ways and one answer to each request; a dhclient -6
CPE renews through the new active after a kill; and the active is cut off
from etcd but not from the access: it steps down by itself before its lease
can expire, and the standby takes over.
"""
import signal
import time
import unittest

from xbnglab.cpe import cpe_sub
from xbnglab.ha import PPS, ArpWatch, DhcpWatch, DhclientCpe, Flows, build_lab, start_group
from xbnglab.lab import Lab, wait_for
from xbnglab.xbngd import find_pass_obj, plan

# Traffic runs for every subscriber (round robin at PPS frames a second).
N_SUBS = 1000
# DHCPv6 lifetimes: the CPE renews (to the group's DUID) at T1 = 8 s.
T1 = 8
DHCPV6 = f"[dhcpv6]\npreferred_lifetime = 20\nvalid_lifetime = 40\nt1 = {T1}\nt2 = 14\n"
# The dhclient -6 CPE's subscriber (IA_NA: its /128).
DSUB6 = cpe_sub(0, base=2000)


def lease6(m, s):
    sub = m.sub(s)
    return sub.get("leaseV6") or sub.get("lease_v6") or {}


def bound_unix(lease):
    return int(lease.get("boundUnix", lease.get("bound_unix", 0)))


class HaPreemptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = Lab("xbnghp")
        cls.addClassCleanup(cls.lab.close)
        cls.cluster, cls.m, ns = build_lab(cls.lab, find_pass_obj(), preempt=True, extra=DHCPV6)
        cls.etcd_ns, cls.acc, cls.up, cls.cpe, cls.net = (
            ns[k] for k in ("etcd", "acc", "up", "cpe", "net"))
        cls.subs = [plan(i) for i in range(N_SUBS)]
        start_group(cls.lab, cls.cluster, cls.m, cls.subs + [DSUB6])
        wait_for(lambda: all(v.get("synced") for v in cls.m[0].ha().get("members", [])), 30, 0.2,
                 "both members synced")

    def members_view(self, m):
        return {v["member"]: v for v in m.ha().get("members", [])}

    def report(self, what, flows, arp, dhcp, max_loss_s):
        for d in ("up", "down"):
            lost, secs = flows.loss(d)
            print(f"\nha {what}: {d}stream sent {flows.sent[d]}, lost {lost} = {secs:.2f} s of "
                  f"loss at {PPS} pps", flush=True)
        print(f"ha {what}: {len(arp.rounds)} ARP rounds, {arp.answered()} answered, "
              f"{len(arp.both())} answered by both members; {len(dhcp.rounds)} DHCPDISCOVERs, "
              f"{dhcp.answered()} offered, {len(dhcp.both())} offered by both", flush=True)
        for d in ("up", "down"):
            lost, secs = flows.loss(d)
            self.assertLess(secs, max_loss_s, f"{what}: {d}stream lost {lost} packets")
        self.assertEqual(arp.both(), [], f"{what}: both members answered one ARP request")
        self.assertEqual(dhcp.both(), [], f"{what}: both members offered to one DISCOVER")
        # The watches saw answers (a capture that sees nothing proves nothing).
        self.assertGreater(arp.answered(), len(arp.rounds) // 2)
        self.assertGreater(dhcp.answered(), len(dhcp.rounds) // 2)

    def test_1_rejoining_higher_priority_member_preempts(self):
        m0, m1 = self.m
        self.assertEqual(m0.role(), "active")
        view = self.members_view(m1)
        self.assertTrue(view["m0"]["preempt"])
        self.assertTrue(view["m1"]["preempt"])
        self.assertTrue(view["m1"].get("synced"), view)
        # The lower-priority member, preempt on too, does not take over.
        time.sleep(1)
        self.assertEqual((m0.role(), m1.role()), ("active", "standby"))

        with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                DhcpWatch(self.cpe, self.acc, self.subs[2]) as dhcp, \
                Flows(self.cpe, self.net, self.subs) as flows:
            time.sleep(2)
            t_kill = time.monotonic()
            m0.daemon.send_signal(signal.SIGKILL)
            m0.daemon.wait(10)
            wait_for(lambda: m1.role() == "active", 30, 0.1, "m1 to take over")
            print(f"\nha preempt: m1 active {time.monotonic() - t_kill:.2f} s after the kill",
                  flush=True)
            time.sleep(3)
        self.report("kill -9 of the active (preempt on)", flows, arp, dhcp, 2.0)
        self.assertTrue(m1.has_vip())

        # m0 rejoins over its pinned maps: synced once its reads complete,
        # then it preempts m1.
        with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                DhcpWatch(self.cpe, self.acc, self.subs[2]) as dhcp, \
                Flows(self.cpe, self.net, self.subs) as flows:
            time.sleep(2)
            t_start = time.monotonic()
            m0.start()
            wait_for(lambda: m0.role() == "active", 30, 0.05, "m0 to preempt")
            t_back = time.monotonic()
            time.sleep(3)
        self.report("preemption by the rejoining member", flows, arp, dhcp, 1.0)
        print(f"ha preempt: m0 active {t_back - t_start:.2f} s after its start", flush=True)
        self.assertEqual(m1.role(), "standby")
        self.assertFalse(m1.has_vip())
        self.assertTrue(m0.has_vip())
        cause = m0.ha().get("lastTakeoverCause") or m0.ha().get("last_takeover_cause")
        self.assertIn("preempted by m0 (priority 100 > 99)", cause)
        # m0 said it was synced before it was handed the role (its log).
        with open(m0.log) as f:
            log = f.read().split("\n")
        synced = [i for i, ln in enumerate(log) if "synced (its maps hold the group's state)" in ln]
        won = [i for i, ln in enumerate(log) if "standby -> ACTIVE" in ln]
        self.assertTrue(synced, "m0 never logged that it was synced")
        self.assertTrue(won, "m0 never logged its role change")
        self.assertLess(synced[-1], won[-1])
        # m1 stays standby: lower priority, it never preempts.
        time.sleep(1)
        self.assertEqual((m0.role(), m1.role()), ("active", "standby"))

    def node_down(self, m):
        """The loss of a whole node: its agent killed and both its links
        gone (access and uplink bridge ports down)."""
        m.daemon.send_signal(signal.SIGKILL)
        m.daemon.wait(10)
        self.acc.ip("link", "set", f"a{m.k}", "down")
        self.up.ip("link", "set", f"u{m.k}", "down")

    def node_up(self, m):
        self.acc.ip("link", "set", f"a{m.k}", "up")
        self.up.ip("link", "set", f"u{m.k}", "up")

    def test_2_node_loss_then_back(self):
        """The active node is lost (agent and links): the standby takes over;
        the node comes back and, higher and preempt on, takes over again."""
        m0, m1 = self.m
        wait_for(lambda: m0.role() == "active" and m1.role() == "standby", 30, 0.2,
                 "m0 active, m1 standby")
        wait_for(lambda: all(v.get("synced") and not v.get("holding")
                             for v in m0.ha().get("members", [])), 30, 0.2, "both ready")
        with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                DhcpWatch(self.cpe, self.acc, self.subs[2]) as dhcp, \
                Flows(self.cpe, self.net, self.subs) as flows:
            time.sleep(2)
            t0 = time.monotonic()
            self.addCleanup(self.node_up, m0)  # also on failure: the next test needs it
            self.node_down(m0)
            wait_for(lambda: m1.role() == "active", 30, 0.1, "m1 to take over")
            t1 = time.monotonic()
            time.sleep(3)
        print(f"ha node loss: m1 active {t1 - t0:.2f} s after the node went", flush=True)
        # A dead node's data plane stops at once (a killed agent's runs on
        # to its deadline): the loss is the time its lease takes to expire
        # (up to lease_ttl_s, 2 s here, after its last renewal, plus etcd's
        # expiry check), the standby's next read and the announcement.
        self.report("loss of the active node", flows, arp, dhcp, 3.0)
        self.assertTrue(m1.has_vip())
        self.node_up(m0)
        m0.start()
        wait_for(lambda: m0.role() == "active", 30, 0.1, "m0 back, to preempt")
        wait_for(lambda: m1.role() == "standby", 10, 0.1, "m1 standby again")

    def test_3_both_members_restarted(self):
        """Both agents killed and started again (over their pinned maps):
        one active, the other standby, traffic both ways, one answer each."""
        m0, m1 = self.m
        for m in self.m:
            m.daemon.send_signal(signal.SIGKILL)
            m.daemon.wait(10)
        m1.start()
        m0.start()
        wait_for(lambda: sorted([m0.role(), m1.role()]) == ["active", "standby"], 30, 0.2,
                 "one active, one standby")
        # With preempt on, m0 (higher) ends up active whichever won first.
        wait_for(lambda: m0.role() == "active", 30, 0.2, "m0 active")
        wait_for(lambda: all(v.get("synced") and not v.get("holding")
                             for v in m0.ha().get("members", [])), 30, 0.2, "both ready")
        with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                DhcpWatch(self.cpe, self.acc, self.subs[2]) as dhcp, \
                Flows(self.cpe, self.net, self.subs) as flows:
            time.sleep(3)
        self.report("both members restarted", flows, arp, dhcp, 0.5)
        self.assertEqual(m1.role(), "standby")
        self.assertTrue(m0.has_vip())
        self.assertFalse(m1.has_vip())

    def test_4_dhcpv6_renewal_after_takeover(self):
        """A dhclient -6 CPE binds its /128 through the active; the active is
        killed before T1; the CPE's Renew (to the group's DUID, which every
        member serves with) is answered by the new active: same address,
        no new Solicit, no Rebind."""
        m0, m1 = self.m
        wait_for(lambda: m0.role() == "active", 30, 0.2, "m0 active")
        wait_for(lambda: all(v.get("synced") and not v.get("holding")
                             for v in m0.ha().get("members", [])), 30, 0.2, "both ready")
        cpe = DhclientCpe(self.lab, self.acc, DSUB6, "d6cpe", family=6)
        self.addCleanup(cpe.stop)
        cpe.start()
        try:
            wait_for(lambda: DSUB6["ipv6"] in cpe.addrs(), 40, 0.2, "the CPE's DHCPv6 address")
        except TimeoutError:
            nz = {r["reason"]: r["packets"] for r in m0.ctl("stats")["reasons"]
                  if int(r.get("packets", 0))}
            print(f"dhclient -6 log:\n{cpe.log()}\nm0 counters {nz}\n"
                  f"addresses {cpe.addrs()}", flush=True)
            raise
        wait_for(lambda: lease6(m0, DSUB6).get("bound"), 10, 0.05, "the lease on the active")
        la = lease6(m0, DSUB6)
        bound0 = bound_unix(la)
        wait_for(lambda: bound_unix(lease6(m1, DSUB6)) == bound0, 10, 0.05,
                 "the IPv6 lease replicated to the standby")
        before = cpe.log()
        m0.daemon.send_signal(signal.SIGKILL)
        m0.daemon.wait(10)
        t_kill = time.time()
        wait_for(lambda: m1.role() == "active", 30, 0.1, "m1 to take over")
        self.assertLess(t_kill, bound0 + T1, "the takeover came after T1: test too slow")
        wait_for(lambda: bound_unix(lease6(m1, DSUB6)) > bound0, 3 * T1, 0.2,
                 "the CPE's Renew through the new active")
        ln = lease6(m1, DSUB6)
        self.assertEqual(ln.get("address"), DSUB6["ipv6"])
        after = cpe.log()[len(before):]
        print(f"\nha DHCPv6: renewed through {m1.name} {bound_unix(ln) - bound0} s after the "
              f"bind", flush=True)
        self.assertIn("XMT: Renew", after, after)
        self.assertNotIn("XMT: Solicit", after, after)
        self.assertNotIn("XMT: Rebind", after, after)
        self.assertLess(bound_unix(ln) - bound0, 14, "renewed at T2 or later: a Rebind")
        self.assertIn(DSUB6["ipv6"], cpe.addrs())
        cpe.stop()
        m0.start()
        wait_for(lambda: m0.role() == "active", 30, 0.2, "m0 back (preempt)")

    def test_5_active_cut_off_from_etcd(self):
        """The active loses etcd (its link to etcd down: requests time out,
        nothing refuses them) but not the access: it steps down before its
        lease can expire, its data plane stops at its deadline, and the
        standby takes over once the lease has expired. Never two actives.
        Its etcd link back, it rejoins and preempts."""
        m0, m1 = self.m
        wait_for(lambda: m0.role() == "active" and m1.role() == "standby", 30, 0.2,
                 "m0 active, m1 standby")
        wait_for(lambda: all(v.get("synced") and not v.get("holding")
                             for v in m0.ha().get("members", [])), 30, 0.2, "both ready")

        def link(state):
            self.etcd_ns.ip("link", "set", "e0", state)
        self.addCleanup(link, "up")
        with ArpWatch(self.cpe, self.acc, self.subs[1]) as arp, \
                DhcpWatch(self.cpe, self.acc, self.subs[2]) as dhcp, \
                Flows(self.cpe, self.net, self.subs) as flows:
            time.sleep(2)
            t0 = time.monotonic()
            link("down")
            wait_for(lambda: m1.role() == "active", 30, 0.1, "m1 to take over")
            t1 = time.monotonic()
            time.sleep(3)
        print(f"\nha cut off from etcd: m1 active {t1 - t0:.2f} s after m0's etcd link went",
              flush=True)
        self.report("the active cut off from etcd", flows, arp, dhcp, 3.0)
        self.assertEqual(m0.role(), "standby")
        self.assertFalse(m0.has_vip())
        self.assertTrue(m1.has_vip())
        link("up")
        wait_for(lambda: m0.role() == "active", 30, 0.1, "m0 back on etcd, to preempt")
        wait_for(lambda: m1.role() == "standby", 10, 0.1, "m1 standby again")


if __name__ == "__main__":
    unittest.main()

