"""What the DHCP relay suites share (test_relay, test_relay6,
test_relay_dualstack, test_radius_relay): acc0 with dhcp = "relay", real
clients behind the tag emulator, and the checks they make on xbngd's
subscribers, the CPEs and the servers (xbnglab.kea)."""
from __future__ import annotations

import ipaddress
import os
import struct
import subprocess

from xbnglab.fixture import BringupSuite
from xbnglab.lab import Netns
from xbnglab.xbngd import CtlError

RELAY_PORT = '{ name = "acc0", subscriber_mtu = 1492, dhcp = "relay" }'


def duid_of(mac: str) -> str:
    """DUID-LL (type 3, hardware type 1) of a MAC, as dhcpcd's duid file holds it."""
    return "00:03:00:01:" + mac


class RelaySuite(BringupSuite):
    """A BringupSuite on a relay port; subclasses set DHCP_TOML ([relay])."""

    ACCESS_PORT = RELAY_PORT

    def get(self, s: dict) -> dict | None:
        """xbngd's subscriber of s, or None when there is none."""
        try:
            return self.x.ctl("sub", "get", "--port", "acc0", "--outer", str(s["outer_vlan"]),
                              "--inner", str(s["inner_vlan"]))["subscriber"]
        except CtlError:
            return None

    def ping(self, ns: Netns, dst: str, ok: bool = True, src: str | None = None) -> None:
        """Two pings from ns to dst (IPv6 when dst is), which must (not) answer."""
        v6 = ":" in dst
        argv = ["ping", *(["-6"] if v6 else []), "-c2", "-i0.2", "-W2",
                *(["-I", src] if src else []), dst]
        r = ns.exec(argv, check=False)
        if ok:
            self.assertEqual(r.returncode, 0, f"ping {dst} from {ns.name}: {r.stdout}{r.stderr}")
        else:
            self.assertNotEqual(r.returncode, 0, f"ping {dst} from {ns.name} went through")

    def na(self, ns: Netns) -> str | None:
        """The CPE's IA_NA address (the /128 on c0), or None."""
        a = [x.split("/")[0] for x in self.b.addrs(ns, "-6") if x.endswith("/128")]
        return a[0] if a else None

    def default6(self, ns: Netns) -> str | None:
        return self.b.default_via(ns, "-6")

    @staticmethod
    def host_in_prefix(ns: Netns, prefix: str) -> str:
        """The delegated prefix's ::1 on the CPE's loopback (a host behind it)."""
        host = str(ipaddress.ip_network(prefix)[1])
        ns.ip("-6", "addr", "replace", f"{host}/128", "dev", "lo")
        return host

    def dhcpcd_with_duid(self, ns: Netns, s: dict, args: list[str],
                         iface_conf: str) -> subprocess.Popen:
        """dhcpcd on the CPE of s with the DUID-LL of its MAC (Kea's
        reservations by DUID name it), written to dhcpcd's state dir first."""
        b = self.b
        ns.ip("link", "set", "lo", "up")
        db = os.path.join(b.client_files(ns, "dhcpcd")["dir"], "db")
        os.makedirs(db, exist_ok=True)
        with open(os.path.join(db, "duid"), "w") as f:
            f.write(duid_of(s["mac"]) + "\n")
        client, _ = b.dhcpcd(ns, args, iface_conf=iface_conf)
        return client


def dhcpv6_options(b: bytes) -> dict:
    """The top-level options of a DHCPv6 (relay) message's option area: {code: data}."""
    out, o = {}, 0
    while o + 4 <= len(b):
        code, n = struct.unpack("!HH", b[o:o + 4])
        out[code] = b[o + 4:o + 4 + n]
        o += 4 + n
    return out
