"""Bring-up lab: real DHCP/RA clients in CPE namespaces behind the TC tag
push emulator (see test_cpe.py), served by xbngd on their own QinQ pair.

Each CPE namespace's c0 pushes its two tags with TC egress (tags from its
MAC, 02:cc:SS:SS:CC:CC) and pops them in XDP on receive: dhclient and dhcpcd
read raw frames from packet sockets, which see a frame before TC ingress.
Clients run with private config, lease, pid and script files in the lab's
run dir (never the system's), and are stopped by PID.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess

from xbnglab.cpe import make_bridge
from xbnglab.lab import Netns, wait_for
from xbnglab.xbngd import GW4, XbngLab


ACCESS_PORT = '{ name = "acc0", subscriber_mtu = 1492 }'


def tagged_cpe_link(lab, ns: Netns, bridge_ns: Netns, port: str, mac: str,
                    disable_ipv6: bool = False) -> None:
    """c0 in ns, its peer `port` on bridge_ns's br0, with the tag push/pop
    emulator (TC egress pushes the subscriber's tags, XDP pops them) and MAC
    `mac`. The bridge keeps the outer tag of frames in skb metadata; without
    TX VLAN offload `port` writes it back into the frame, where c0's XDP
    program (frame bytes only) pops it."""
    lab.veth(ns, "c0", bridge_ns, port)
    bridge_ns.ip("link", "set", port, "master", "br0")
    bridge_ns.exec(["ethtool", "-K", port, "txvlan", "off", "tx-vlan-stag-hw-insert", "off"])
    if disable_ipv6:
        ns.sysctl("net.ipv6.conf.c0.disable_ipv6", "1")
    ns.ip("link", "set", "c0", "down")
    ns.ip("link", "set", "c0", "address", mac)
    ns.exec(["ethtool", "-K", "c0", "tx", "off"])
    ns.exec(["tc", "qdisc", "add", "dev", "c0", "clsact"])
    ns.exec(["tc", "filter", "add", "dev", "c0", "egress", "bpf", "da", "obj",
             os.environ["XBNG_CPE_EGRESS_OBJ"], "sec", "tc"])
    ns.ip("link", "set", "dev", "c0", "xdpdrv", "obj", os.environ["XBNG_CPE_XDP_UNTAG_OBJ"],
          "sec", "xdp")
    ns.ip("link", "set", "c0", "up")


def client_files(d: str) -> dict:
    """A DHCP client's private files under directory d (created)."""
    os.makedirs(d, exist_ok=True)
    return {"dir": d, "conf": os.path.join(d, "client.conf"),
            "leases": os.path.join(d, "client.leases"), "pid": os.path.join(d, "client.pid"),
            "log": os.path.join(d, "client.log"), "script": os.path.join(d, "client-script")}


def dhclient_script(path: str) -> None:
    """Debian's dhclient-script with make_resolv_conf cut out: the file
    system is shared, /etc/resolv.conf is not ours to write."""
    with open("/sbin/dhclient-script") as f:
        text = f.read()
    text = text.replace("make_resolv_conf() {", "make_resolv_conf() { return 0; }\n"
                        "_unused_make_resolv_conf() {", 1)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def with_punt_transport(toml: str) -> str:
    """`toml` with [punt] transport = $XBNG_PUNT_TRANSPORT when that is set
    (runs a suite on the AF_XDP punt path: XBNG_PUNT_TRANSPORT=af_xdp), unless
    `toml` chooses one itself."""
    t = os.environ.get("XBNG_PUNT_TRANSPORT")
    if not t or "transport =" in toml:
        return toml
    if "[punt]\n" in toml:
        return toml.replace("[punt]\n", f'[punt]\ntransport = "{t}"\n', 1)
    return toml + f'\n[punt]\ntransport = "{t}"\n'


class BringupLab:
    def __init__(self, dhcp_toml: str = "", access_port: str = ACCESS_PORT):
        self.x = x = XbngLab(kind="xbngb")
        self.run = x.lab.rundir
        self.lease_file = os.path.join(self.run, "xbngd-leases.json")
        self.config = os.path.join(self.run, "xbngd.toml")
        with open(self.config, "w") as f:
            # The CPE links stay at 1500 and frames carry two tags: the
            # subscriber MTU (largest L3 packet either way) is 1492, which the RA advertises.
            f.write(f'[ports]\naccess = [{access_port}]\n\n')
            f.write(with_punt_transport(dhcp_toml))
        self.clients: list[subprocess.Popen] = []
        try:
            self.start()
            x.resolve_uplink_neighbours()
            make_bridge(x)
        except BaseException:
            x.close()
            raise
        self.ncpe = 0

    def start(self, wrap: list[str] | None = None) -> None:
        """Starts xbngd, under the command wrap (prlimit, setpriv) when given."""
        self.x.launch([*(wrap or []),
                       *self.x.xbngd_argv(1024, ["--config", self.config, "--lease-file",
                                                 self.lease_file, "--log-level", "debug"])])

    def restart(self) -> None:
        assert self.x.stop(signal.SIGTERM) == 0, self.x.read_log()
        self.start()

    def cpe(self, s: dict) -> Netns:
        """A CPE namespace on the subscriber's tags, no address configured."""
        x = self.x
        i = self.ncpe
        self.ncpe += 1
        ns = x.lab.netns(f"cpe{i}")
        tagged_cpe_link(x.lab, ns, x.sub, f"cpe{i}", s["mac"])
        return ns

    # -- clients ---------------------------------------------------------------
    def client_files(self, ns: Netns, tag: str) -> dict:
        return client_files(os.path.join(self.run, f"{ns.name}-{tag}"))

    def dhclient_script(self, path: str) -> None:
        dhclient_script(path)

    def dhclient(self, ns: Netns, v6: bool = False, extra: list[str] | None = None,
                 tag: str | None = None) -> tuple[subprocess.Popen, dict]:
        f = self.client_files(ns, tag or ("dhclient6" if v6 else "dhclient4"))
        with open(f["conf"], "w") as c:
            c.write("option rfc3442-classless-static-routes code 121 = array of unsigned integer 8;\n"
                    "request subnet-mask, broadcast-address, routers, domain-name-servers, "
                    "rfc3442-classless-static-routes, dhcp6.name-servers;\n")
        self.dhclient_script(f["script"])
        argv = ["dhclient", "-6" if v6 else "-4", "-d", "-v", "-cf", f["conf"], "-lf", f["leases"],
                "-pf", f["pid"], "-sf", f["script"], *(extra or []), "c0"]
        p = self.x.lab.spawn(ns.nsenter_argv(argv), log=f["log"])
        self.clients.append(p)
        return p, f

    def dhclient_release(self, ns: Netns, f: dict, v6: bool = False,
                         extra: list[str] | None = None) -> None:
        ns.exec(["dhclient", "-6" if v6 else "-4", "-r", "-v", "-cf", f["conf"], "-lf", f["leases"],
                 "-pf", f["pid"], "-sf", f["script"], *(extra or []), "c0"], timeout=30)

    def dhcpcd(self, ns: Netns, args: list[str], tag: str = "dhcpcd",
               iface_conf: str = "") -> tuple[subprocess.Popen, dict]:
        """dhcpcd in a private mount namespace: its state (/var/lib/dhcpcd) and
        run (/run/dhcpcd) directories are bind mounts of the lab's run dir, no
        resolv.conf hook. dhcpcd's paths are compiled in, and on a machine
        where it never ran /run/dhcpcd (and without the package's files
        /var/lib/dhcpcd) is absent: the mount points are created first
        (empty directories, as dhcpcd's own first start would leave them)."""
        f = self.client_files(ns, tag)
        db, rn = os.path.join(f["dir"], "db"), os.path.join(f["dir"], "run")
        os.makedirs(db, exist_ok=True)
        os.makedirs(rn, exist_ok=True)
        with open(f["conf"], "w") as c:
            c.write("nohook resolv.conf, timesyncd, ntp.conf, hostname\n"
                    "option rapid_commit, domain_name_servers, classless_static_routes\n"
                    "require dhcp_server_identifier\nslaac private\nnoipv4ll\n"
                    + (f"interface c0\n{iface_conf}" if iface_conf else ""))
        inner = " ".join(["dhcpcd", "-B", "-d", "-f", f["conf"], *args, "c0"])
        script = ("mkdir -p /var/lib/dhcpcd /run/dhcpcd && "
                  f"mount --bind {db} /var/lib/dhcpcd && mount --bind {rn} /run/dhcpcd && "
                  f"exec {' '.join(ns.nsenter_argv([]))} {inner}")
        p = self.x.lab.spawn(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                             log=f["log"])
        self.clients.append(p)
        return p, f

    def stop_client(self, p: subprocess.Popen) -> None:
        self.x.lab.stop(p, signal.SIGTERM, timeout=5)

    # -- checks -------------------------------------------------------------------
    def addrs(self, ns: Netns, fam: str = "-4") -> list[str]:
        out = json.loads(ns.exec(["ip", "-j", fam, "addr", "show", "dev", "c0"]).stdout)
        return [f"{a['local']}/{a['prefixlen']}" for i in out for a in i.get("addr_info", [])
                if a.get("scope") == "global"]

    def default_via(self, ns: Netns, fam: str = "-4") -> str | None:
        out = json.loads(ns.exec(["ip", "-j", fam, "route", "show", "default"]).stdout)
        return out[0].get("gateway") if out else None

    def clamp_v4_route(self, ns: Netns) -> None:
        """Two tags must fit in the access MTU (1500): like test_cpe.py, the
        CPE's IPv4 default route uses 1492 (the link stays at 1500: a veth
        refuses frames over its own MTU + 18, and received frames carry two
        tags). IPv6 gets 1492 from the RA's MTU option."""
        ns.ip("route", "change", "default", "via", GW4, "dev", "c0", "mtu", "1492",
              "advmss", "1452")

    def wait_addr(self, ns: Netns, want: str, fam: str = "-4", timeout: float = 30) -> None:
        wait_for(lambda: want in self.addrs(ns, fam), timeout, 0.2,
                 f"{want} on {ns.name} (has {self.addrs(ns, fam)})")

    def wait_dad(self, ns: Netns, timeout: float = 10) -> None:
        """Until no IPv6 address of c0 is tentative (a tentative source is not used)."""
        wait_for(lambda: not ns.exec(["ip", "-6", "addr", "show", "dev", "c0", "tentative"]).stdout.strip(),
                 timeout, 0.2, f"DAD on {ns.name}")

    def lease(self, s: dict, fam: str = "v4") -> dict:
        out = self.x.ctl("sub", "get", "--port", s["port"], "--outer", str(s["outer_vlan"]),
                         "--inner", str(s["inner_vlan"]))
        return out["subscriber"].get(f"lease{fam.replace('v', '_v')}", {})

    def close(self) -> None:
        for p in self.clients:
            try:
                self.stop_client(p)
            except Exception:
                pass
        self.x.close()
