"""ISC Kea (Debian's kea-dhcp4-server 2.2) in a lab namespace of its own,
behind the uplink: the namespace is joined to `net` by a veth on a /29 of
198.51.100.0/24 (more specific than net's route of that /24 towards the
DUT), and reaches the DUT through net. The config (memfile leases, logs,
pid and lock files) is written by the test under the lab's run dir; Kea runs
in the foreground and is stopped by PID."""
from __future__ import annotations

import json
import os
import subprocess

from xbnglab.lab import Netns, read_text, wait_for


class Kea4:
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

    def start(self, timeout: float = 30) -> None:
        env = dict(os.environ, KEA_PIDFILE_DIR=self.dir, KEA_LOCKFILE_DIR=self.dir)
        self.proc = self.lab.spawn(self.ns.nsenter_argv(["kea-dhcp4", "-c", self.conf]),
                                   log=os.path.join(self.dir, "stdout.log"), env=env)
        wait_for(lambda: "DHCP4_STARTED" in self.read_log() or self.proc.poll() is not None,
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
