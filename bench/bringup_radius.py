"""Bring-up storm of RADIUS-authorized dual-stack sessions against the real xbngd.

The lab of bench/bringup.py (sub <-> dut <-> net), but nobody provisions the
storm CPEs: acc0 has auth = "radius", and Debian's FreeRADIUS runs in net
(foreground, not debug: -f) with a users file of N entries giving each CPE
bench/README.md's addresses (Framed-IP-Address, Framed-IPv6-Address,
Delegated-IPv6-Prefix). xbng_bench_bringup then emulates the N CPEs (DORA +
SOLICIT/REPLY + RS/RA, window-limited): each CPE's first DISCOVER makes xbngd
send an Access-Request, the Accept creates the subscriber, and the kept
frames are answered. Prints the generator's figures (sessions/s, p50/p99
time to bound, xbngd CPU and RSS) and xbngd's counters; asserts nothing.

    PYTHONPATH=tests /usr/bin/python3 bench/bringup_radius.py --subscribers 60000
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from xbnglab.lab import wait_for
from xbnglab.radius import FreeRadius
from xbnglab.xbngd import UPLINK_DUT4, UPLINK_NET4, XbngLab, bench_plan, find_bin

SECRET = "xbng-bench-secret"


def users_file(n: int) -> str:
    out = []
    for i in range(n):
        p = bench_plan(i)
        out.append(f'"{p["port"]}:{p["outer_vlan"]}:{p["inner_vlan"]}" Auth-Type := Accept\n'
                   f'\tFramed-IP-Address = {p["ipv4"]},\n'
                   f'\tFramed-IPv6-Address = {p["ipv6"]},\n'
                   f'\tDelegated-IPv6-Prefix = {p["ipv6_prefixes"][0]}\n')
    return "\n".join(out)


class FastFreeRadius(FreeRadius):
    """FreeRADIUS without debug output (-f: foreground, its thread pool),
    ready once it listens on 1812."""

    def start(self, timeout: float = 120) -> None:
        self.proc = self.lab.spawn(self.ns.nsenter_argv(["freeradius", "-f", "-d", self.raddb]),
                                   log=self.log)

        def listening() -> bool:
            r = self.ns.exec(["ss", "-lunH", "sport = :1812"], check=False)
            return bool(r.stdout.strip()) or self.proc.poll() is not None
        wait_for(listening, timeout=timeout, what="freeradius listening")
        assert self.proc.poll() is None, "freeradius exited:\n" + self.read_log()[-4000:]


def run(n: int, window: int, extra: list[str], json_out: str | None) -> int:
    gen = find_bin("xbng_bench_bringup")
    with XbngLab(kind="xbngbr") as x:
        t0 = time.monotonic()
        radius = FastFreeRadius(x.lab, x.net, [(UPLINK_DUT4, SECRET)], users_file(n))
        try:
            radius.start()
            print(f"## FreeRADIUS up with {n:,} users in {time.monotonic() - t0:.1f} s", flush=True)
            conf = os.path.join(x.lab.rundir, "radius.toml")
            with open(conf, "w") as f:
                f.write('[ports]\naccess = [{ name = "acc0", auth = "radius" }]\n\n'
                        f'[radius]\nservers = [{{ address = "{UPLINK_NET4}", secret = "{SECRET}" }}]\n'
                        'timeout_ms = 2000\nretries = 3\ncoa_listen = ""\n')
            x.start(max_subscribers=max(1024, n + 1024),
                    extra=["--config", conf, "--lease-file",
                           os.path.join(x.lab.rundir, "leases.json")])
            x.resolve_uplink_neighbours()
            argv = [gen, "-n", str(n), "--first", "0", "--window", str(window),
                    "--netns", x.sub.name, "--iface", "s0", "--pid", str(x.daemon.pid), *extra]
            if json_out:
                argv += ["--json", json_out]
            print("## Storm against xbngd, every session authorized by FreeRADIUS:",
                  " ".join(a if a != gen else "xbng_bench_bringup" for a in argv), flush=True)
            rc = subprocess.run(argv, check=False).returncode
            st = x.stats()
            moved = {k: v for k, v in st.items() if k != "_raw" and v and
                     any(w in k for w in ("auth", "dhcp", "punt", "rate", "lease"))}
            if moved:
                print("  xbngd counters:", ", ".join(f"{k}={v}" for k, v in sorted(moved.items())))
            return rc
        finally:
            radius.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscribers", "-n", type=int, default=60000)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--json")
    ap.add_argument("extra", nargs="*", help="more xbng_bench_bringup options (after --)")
    a = ap.parse_args()
    return run(a.subscribers, a.window, a.extra, a.json)


if __name__ == "__main__":
    sys.exit(main())
