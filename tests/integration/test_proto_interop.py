"""Real DHCPv6 and ND clients against xbng's bring-up libraries.

xbng_proto_responder serves one subscriber binding (the /128, two delegated
prefixes, DNS) with the pure DHCPv6 server, RS parser and RA builder that
xbngd uses, over plain sockets on an untagged veth: what is tested here is
that dhclient (isc-dhcp-client), dhcpcd (dhcpcd5) and rdisc6 (ndisc6) accept
exactly the bytes xbng sends, and that SOLICIT/REQUEST/RENEW/RELEASE and
rapid commit run to completion with them. The QinQ punt path and xbngd's
own wiring are tested by the bring-up integration tests.

    cli ns: c0 ===== r0 :rsp ns (xbng_proto_responder)
"""
from __future__ import annotations

import os
import re
import subprocess
import time
import unittest

from xbnglab.lab import Lab, read_text, wait_for
from xbnglab.xbngd import find_bin

ADDR = "2001:db8:1000::16"
PFX1, PFX2 = "2001:db8:2000::/56", "2001:db8:4000::/48"
DNS = "2001:db8::53"


class ProtoInterop(unittest.TestCase):
    def setUp(self):
        self.lab = Lab("xbngpi")
        lab = self.lab
        try:
            self.cli, self.rsp = lab.netns("cli"), lab.netns("rsp")
            for ns, ifn in ((self.cli, "c0"), (self.rsp, "r0")):
                ns.sysctl("net.ipv6.conf.default.accept_dad", "0")
            lab.veth(self.cli, "c0", self.rsp, "r0")
            self.rsp.sysctl("net.ipv6.conf.all.forwarding", "1")
            self.cli.sysctl("net.ipv6.conf.c0.accept_ra", "0")  # dhcpcd does RA itself; kernel stays out
            self.dir = lab.rundir
            self.out = os.path.join(self.dir, "responder.out")
            wait_for(lambda: "fe80" in self.rsp.ip("-6", "addr", "show", "dev", "r0").stdout, 10, 0.1,
                     "r0 link-local address")
        except BaseException:
            lab.close()
            raise

    def tearDown(self):
        self.lab.close()

    def start_responder(self, *extra: str) -> subprocess.Popen:
        argv = self.rsp.nsenter_argv([find_bin("xbng_proto_responder"), "--iface", "r0",
                                      "--address", ADDR, "--prefix", PFX1, "--prefix", PFX2,
                                      "--dns", DNS, "--duid-file", os.path.join(self.dir, "duid"),
                                      *extra])
        p = self.lab.spawn(argv, log=self.out)
        wait_for(lambda: "ready" in self.responder_log(), 10, 0.05, "the responder")
        return p

    def responder_log(self) -> str:
        return read_text(self.out)

    def wait_log(self, needle: str, timeout: float, what: str) -> None:
        wait_for(lambda: needle in self.responder_log(), timeout, 0.1,
                 f"{what} (responder log:\n{self.responder_log()})")

    def test_dhclient_na_pd_renew_release(self):
        """dhclient -6 -N -P: SOLICIT/ADVERTISE/REQUEST/REPLY, RENEW at T1, RELEASE."""
        self.start_responder("--t1", "3", "--t2", "5", "--preferred", "30", "--valid", "60")
        lease = os.path.join(self.dir, "dhclient6.leases")
        argv = ["ip", "netns", "exec", self.cli.name, "dhclient", "-6", "-N", "-P", "-d", "-v",
                "-lf", lease, "-pf", os.path.join(self.dir, "dhclient6.pid"), "-sf", "/bin/true", "c0"]
        client = self.lab.spawn(argv, log=os.path.join(self.dir, "dhclient6.log"))

        def leased():
            try:
                with open(lease) as f:
                    text = f.read()
            except FileNotFoundError:
                return False
            return ADDR in text and "2001:db8:2000::/56" in text and "2001:db8:4000::/48" in text
        wait_for(leased, 20, 0.2, "dhclient's lease with the address and both prefixes")
        log = self.responder_log()
        self.assertIn("dhcpv6 solicit answered_advertise", log)
        self.assertIn("dhcpv6 request answered_reply_request", log)
        with open(lease) as f:
            text = f.read()
        self.assertRegex(text, r"option dhcp6\.name-servers 2001:db8::53")
        # T1 = 3 s: dhclient renews with our server identifier.
        self.wait_log("dhcpv6 renew answered_reply_renew", 15, "a RENEW answered")
        self.lab.stop(client)
        # dhclient -r: RELEASE of what the lease file holds.
        rel = subprocess.run(["ip", "netns", "exec", self.cli.name, "dhclient", "-6", "-r", "-v",
                              "-lf", lease, "-pf", os.path.join(self.dir, "dhclient6r.pid"),
                              "-sf", "/bin/true", "c0"], capture_output=True, text=True, timeout=30)
        self.assertEqual(rel.returncode, 0, rel.stderr)
        self.wait_log("dhcpv6 release answered_reply_release", 10, "a RELEASE answered")
        self.assertNotIn("malformed", self.responder_log())

    def test_dhcpcd_ra_then_rapid_commit(self):
        """dhcpcd: RS -> RA (M flag starts DHCPv6), SOLICIT with rapid commit -> REPLY."""
        self.start_responder()
        conf = os.path.join(self.dir, "dhcpcd.conf")
        with open(conf, "w") as f:
            f.write("ipv6only\nia_na 1\nia_pd 2 -\noption rapid_commit\nduid\n")
        # dhcpcd keeps its DUID and sockets under /var/lib/dhcpcd and /run/dhcpcd:
        # private tmpfs mounts (ip netns exec runs in its own mount namespace),
        # so nothing of the host's is read or written. The mount points are
        # created first: on a machine where dhcpcd never ran they are absent.
        # -c /bin/true: no hooks.
        script = ("mkdir -p /var/lib/dhcpcd /run/dhcpcd && mount -t tmpfs tmpfs /var/lib/dhcpcd && mount -t tmpfs tmpfs /run/dhcpcd && "
                  f"exec dhcpcd -B -d -f {conf} -c /bin/true -6 c0")
        dlog = os.path.join(self.dir, "dhcpcd.log")
        client = self.lab.spawn(["ip", "netns", "exec", self.cli.name, "sh", "-c", script], log=dlog)

        def configured():
            out = self.cli.ip("-6", "addr", "show", "dev", "c0").stdout
            return f"{ADDR}/128" in out
        try:
            wait_for(configured, 30, 0.2, "dhcpcd to add the /128")
            wait_for(lambda: "default" in self.cli.ip("-6", "route", "show").stdout, 10, 0.2,
                     "dhcpcd's default route from the RA")
            with open(dlog) as f:
                text = f.read()
            self.assertRegex(text, r"2001:db8:2000::/56")
            self.assertRegex(text, r"2001:db8:4000::/48")
            route = self.cli.ip("-6", "route", "show", "default").stdout
            self.assertIn("via fe80::", route)
            log = self.responder_log()
            self.assertIn("rs ok", log)
            self.assertIn("dhcpv6 solicit answered_reply_rapid_commit", log)
            self.assertNotIn("answered_advertise", log)
        finally:
            self.lab.stop(client)  # SIGTERM: dhcpcd stops its privsep helpers
        self.assertNotIn("malformed", self.responder_log())

    def test_rdisc6_reads_the_ra(self):
        """rdisc6: M and O flags, router lifetime, MTU, RDNSS, source link-layer address."""
        self.start_responder()
        r = self.cli.exec(["rdisc6", "-1", "-w", "2000", "c0"], check=False, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = r.stdout
        self.assertRegex(out, r"Stateful address conf\.\s*:\s*Yes")
        self.assertRegex(out, r"Stateful other conf\.\s*:\s*Yes")
        self.assertRegex(out, r"Router lifetime\s*:\s*1800")
        self.assertRegex(out, r"MTU\s*:\s*1500")
        self.assertRegex(out, r"Recursive DNS server\s*:\s*2001:db8::53")
        mac = self.rsp.mac("r0")
        self.assertRegex(out.lower(), r"source link-layer address\s*:\s*" + re.escape(mac))
        self.assertIn("rs ok", self.responder_log())

    def test_duid_survives_a_restart(self):
        """The server DUID is the same after a restart (state file)."""
        p = self.start_responder()
        first = re.search(r"ready duid (\S+)", self.responder_log()).group(1)
        self.lab.stop(p)
        os.unlink(self.out)
        self.start_responder()
        again = re.search(r"ready duid (\S+)", self.responder_log()).group(1)
        self.assertEqual(first, again)
        self.assertTrue(first.startswith("00:04:"), first)


if __name__ == "__main__":
    unittest.main()
