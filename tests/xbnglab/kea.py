"""ISC Kea (Debian's kea-dhcp4-server and kea-dhcp6-server 2.2) in a lab
namespace of its own, behind the uplink: the namespace is joined to `net`
by a veth (Kea4: on a /29 of 198.51.100.0/24, more specific than net's
route of that /24 towards the DUT; Kea6: on a /64 of 2001:db8:ffff::/48
beside the uplink's), and reaches the DUT through net; or (Kea6 with
uplink=True) on the uplink's own link, a macvlan of net's n0, for a relay
that multicasts its Relay-Forwards. The config (memfile
leases, logs, pid and lock files) is written by the test under the lab's
run dir; Kea runs in the foreground and is stopped by PID."""
from __future__ import annotations

import json
import os
import subprocess

from xbnglab.lab import Netns, read_text, wait_for


class _Kea:
    """What both servers share: start (in the foreground, until its log says
    started), the log, the memfile and stop."""
    name: str
    dir: str
    log: str
    conf: str
    lease_file: str
    BINARY = ""
    STARTED = ""

    def start(self, timeout: float = 30) -> None:
        env = dict(os.environ, KEA_PIDFILE_DIR=self.dir, KEA_LOCKFILE_DIR=self.dir)
        self.proc = self.lab.spawn(self.ns.nsenter_argv([self.BINARY, "-c", self.conf]),
                                   log=os.path.join(self.dir, "stdout.log"), env=env)
        wait_for(lambda: self.STARTED in self.read_log() or self.proc.poll() is not None,
                 timeout, 0.1, f"{self.name} started")
        assert self.proc.poll() is None, f"{self.name} exited:\n" + self.read_log()[-4000:]

    def read_log(self) -> str:
        try:
            return read_text(self.log)
        except OSError:
            return ""

    def leases(self) -> list[dict]:
        """Every line of the memfile (one per lease change), as dicts."""
        try:
            lines = read_text(self.lease_file).splitlines()
        except OSError:
            return []
        if not lines:
            return []
        head = lines[0].split(",")
        return [dict(zip(head, ln.split(","))) for ln in lines[1:] if ln]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.lab.stop(self.proc)
        self.proc = None


class Kea4(_Kea):
    BINARY = "kea-dhcp4"
    STARTED = "DHCP4_STARTED"

    def __init__(self, lab, net: Netns, name: str, index: int, subnet4: list[dict],
                 valid_lifetime: int = 60, renew_timer: int | None = None,
                 rebind_timer: int | None = None):
        """A server at 198.51.100.(64 + 8*index + 3)/29 (net's side: + 1);
        subnet4: Kea's subnet4 list (pools, reservations, option-data)."""
        self.lab, self.net, self.name = lab, net, name
        base = 64 + 8 * index
        self.address = f"198.51.100.{base + 3}"
        self.gateway = f"198.51.100.{base + 1}"
        self.ns = lab.netns(name)
        peer = f"k{index}"
        lab.veth(self.ns, "e0", net, peer)
        net.ip("addr", "add", f"{self.gateway}/29", "dev", peer)
        self.ns.ip("addr", "add", f"{self.address}/29", "dev", "e0")
        self.ns.ip("route", "add", "default", "via", self.gateway)
        self.dir = os.path.join(lab.rundir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.lease_file = os.path.join(self.dir, "leases4.csv")
        self.log = os.path.join(self.dir, "kea.log")
        self.conf = os.path.join(self.dir, "kea-dhcp4.conf")
        cfg = {"Dhcp4": {
            "interfaces-config": {"interfaces": [f"e0/{self.address}"], "dhcp-socket-type": "udp"},
            "lease-database": {"type": "memfile", "persist": True, "name": self.lease_file,
                               "lfc-interval": 0},
            "valid-lifetime": valid_lifetime,
            "host-reservation-identifiers": ["circuit-id", "hw-address"],
            "subnet4": subnet4,
            "loggers": [{"name": "kea-dhcp4", "severity": "DEBUG", "debuglevel": 40,
                         "output_options": [{"output": self.log}]}],
        }}
        if renew_timer is not None:
            cfg["Dhcp4"]["renew-timer"] = renew_timer
        if rebind_timer is not None:
            cfg["Dhcp4"]["rebind-timer"] = rebind_timer
        with open(self.conf, "w") as f:
            json.dump(cfg, f, indent=1)
        self.proc: subprocess.Popen | None = None


class Kea6(_Kea):
    BINARY = "kea-dhcp6"
    STARTED = "DHCP6_STARTED"

    def __init__(self, lab, net: Netns, name: str, index: int, subnet6: list[dict],
                 valid_lifetime: int = 60, preferred_lifetime: int | None = None,
                 renew_timer: int | None = None, rebind_timer: int | None = None,
                 uplink: bool = False):
        """A server at 2001:db8:ffff:(0x60 + index)::3/64 (net's side: ::1),
        listening on that unicast address (relays send to it); subnet6:
        Kea's subnet6 list (pools, pd-pools, reservations by DUID).
        uplink: instead on the uplink's link (a macvlan of net's n0) at
        2001:db8:ffff::5:(index), listening on the interface: its link-local
        address and All_DHCP_Relay_Agents_and_Servers (ff02::1:2), where Kea
        receives multicast (it joins no other group)."""
        self.lab, self.net, self.name = lab, net, name
        self.ns = lab.netns(name)
        if uplink:
            self.address = f"2001:db8:ffff::5:{index:x}"
            self.gateway = None
            mv = f"km6{index}"
            net.ip("link", "add", "link", "n0", "name", mv, "type", "macvlan", "mode", "bridge")
            net.ip("link", "set", mv, "netns", self.ns.name)
            self.ns.ip("link", "set", mv, "name", "e0")
            self.ns.ip("link", "set", "e0", "up")
            self.ns.ip("-6", "addr", "add", f"{self.address}/64", "dev", "e0", "nodad")
            listen = "e0"
        else:
            base = f"2001:db8:ffff:{0x60 + index:x}"
            self.address = f"{base}::3"
            self.gateway = f"{base}::1"
            peer = f"k6{index}"
            lab.veth(self.ns, "e0", net, peer)
            net.ip("-6", "addr", "add", f"{self.gateway}/64", "dev", peer, "nodad")
            self.ns.ip("-6", "addr", "add", f"{self.address}/64", "dev", "e0", "nodad")
            self.ns.ip("-6", "route", "add", "default", "via", self.gateway)
            listen = f"e0/{self.address}"
        self.dir = os.path.join(lab.rundir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.lease_file = os.path.join(self.dir, "leases6.csv")
        self.log = os.path.join(self.dir, "kea.log")
        self.conf = os.path.join(self.dir, "kea-dhcp6.conf")
        cfg = {"Dhcp6": {
            "interfaces-config": {"interfaces": [listen]},
            "lease-database": {"type": "memfile", "persist": True, "name": self.lease_file,
                               "lfc-interval": 0},
            # The DUID is not written to Kea's data directory (not the lab's).
            "server-id": {"type": "EN", "enterprise-id": 32473,
                          "identifier": f"6b6561{index:02x}", "persist": False},
            "valid-lifetime": valid_lifetime,
            "host-reservation-identifiers": ["duid"],
            "subnet6": subnet6,
            "loggers": [{"name": "kea-dhcp6", "severity": "DEBUG", "debuglevel": 40,
                         "output_options": [{"output": self.log}]}],
        }}
        for key, v in (("preferred-lifetime", preferred_lifetime), ("renew-timer", renew_timer),
                       ("rebind-timer", rebind_timer)):
            if v is not None:
                cfg["Dhcp6"][key] = v
        with open(self.conf, "w") as f:
            json.dump(cfg, f, indent=1)
        self.proc: subprocess.Popen | None = None

    def link_local(self) -> str:
        """e0's link-local address: the source of Kea's answers on the uplink."""
        out = json.loads(self.ns.exec(["ip", "-j", "-6", "addr", "show", "dev", "e0"]).stdout)
        return [a["local"] for i in out for a in i.get("addr_info", [])
                if a.get("scope") == "link"][0]

    def start(self, timeout: float = 30) -> None:
        # Kea opens its sockets on e0's addresses: the link-local one must be
        # past DAD first.
        wait_for(lambda: not self.ns.exec(["ip", "-6", "addr", "show", "dev", "e0",
                                           "tentative"]).stdout.strip(),
                 10, 0.1, f"DAD on {self.name}")
        super().start(timeout)
