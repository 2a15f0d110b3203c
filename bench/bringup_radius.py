"""Bring-up storm of RADIUS-authorized dual-stack sessions against the real xbngd.

The lab of bench/bringup.py (sub <-> dut <-> net), but nobody provisions the
storm CPEs: acc0 has auth = "radius", and Debian's FreeRADIUS runs in net
(foreground, not debug: -f) with a users file of N entries giving each CPE
bench/README.md's addresses (Framed-IP-Address, Framed-IPv6-Address,
Delegated-IPv6-Prefix). xbng_bench_bringup then emulates the N CPEs (DORA +
SOLICIT/REPLY + RS/RA, window-limited): each CPE's first DISCOVER makes xbngd
send an Access-Request, the Accept creates the subscriber, and the kept
frames are answered. Prints the generator's figures (sessions/s, p50/p99
time to bound, xbngd CPU and RSS), the CPU seconds of FreeRADIUS, of the
generator and of xbngd's busiest threads during the storm, xbngd's context
switches (per session and by thread), and xbngd's counters; asserts nothing.

FreeRADIUS runs a lean virtual server of its own (`--freeradius stock`: the
packaged one): authorize { files } (rlm_files keeps the users file hashed
by User-Name), no detail or auth logging, accounting answered at once, the
Message-Authenticator every reply needs, a thread pool started at its
maximum, max_requests large enough for cleanup_delay seconds of the storm
(the packaged 16384 would refuse requests beyond ~3,000/s), and a 4 MB
receive buffer (recv_buff; the default ~200 KB overflows when a burst of
a thousand requests arrives at once: the requests are lost until the NAS
retransmits). The bench prints the UDP receive-buffer drops of both ends.

--alone first measures FreeRADIUS by itself in the same lab: radius_probe
(tests/integration: xbngd's RADIUS client and nothing else), in xbngd's
namespace, sends the same N Access-Requests (the storm's User-Names,
Message-Authenticator included) with the storm's window outstanding; the
ratio of the two rates says how close the bring-up gets to what the server
alone answers on this machine. (radclient is no yardstick here: it answers
~600 requests/s whatever the server does.)

    PYTHONPATH=tests /usr/bin/python3 bench/bringup_radius.py --subscribers 60000 [--alone]
        [--perf DIR] [--freeradius lean|stock] [--port-rate R]

--port-rate R raises xbngd's per-port punt limit ([punt] port_rate, 20,000
frames/s per CPU by default): a storm of 5,000 sessions/s punts 20,000
frames/s (DISCOVER, REQUEST, SOLICIT, RS each), and its bursts trip the
default limit (drop_punt_rate_port; the CPEs retransmit after 1 s).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

from xbnglab.lab import wait_for
from xbnglab.radius import FreeRadius, user_name
from xbnglab.xbngd import UPLINK_DUT4, UPLINK_NET4, XbngLab, bench_plan, find_bin

SECRET = "xbng-bench-secret"

LEAN_SITE = """server bench {
	listen {
		type = auth
		ipaddr = *
		port = 1812
		recv_buff = 4194304
	}
	listen {
		type = acct
		ipaddr = *
		port = 1813
		recv_buff = 4194304
	}
	authorize {
		files
	}
	authenticate {
	}
	post-auth {
		update reply {
			&Message-Authenticator := 0x00
		}
		Post-Auth-Type REJECT {
			update reply {
				&Message-Authenticator := 0x00
			}
		}
	}
	preacct {
	}
	accounting {
		ok
	}
}
"""


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
    ready once it listens on 1812; `lean`: the bench's own virtual server."""

    def __init__(self, *a, lean: bool = True, threads: int = 8, **kw):
        super().__init__(*a, **kw)
        self.threads = threads
        if not lean:
            return
        sites = os.path.join(self.raddb, "sites-enabled")
        for f in os.listdir(sites):
            os.unlink(os.path.join(sites, f))
        with open(os.path.join(sites, "bench"), "w") as f:
            f.write(LEAN_SITE)
        # EAP refuses to load without a site that authenticates with it.
        os.unlink(os.path.join(self.raddb, "mods-enabled", "eap"))
        conf = os.path.join(self.raddb, "radiusd.conf")
        with open(conf) as f:
            text = f.read()
        text = re.sub(r"\nmax_requests = \d+\n", "\nmax_requests = 1048576\n", text)
        for k, v in (("start_servers", threads), ("max_servers", threads),
                     ("min_spare_servers", 0), ("max_spare_servers", threads)):
            text = re.sub(rf"(\n\t{k} = )\d+", rf"\g<1>{v}", text, count=1)
        text = re.sub(r"(\n\tauth = )yes", r"\1no", text)
        with open(conf, "w") as f:
            f.write(text)

    def start(self, timeout: float = 120) -> None:
        # threads 0: single server mode (-s), each request answered on the
        # thread that read it, no hand-over to a pool thread.
        mode = ["-s"] if self.threads == 0 else ["-f"]
        self.proc = self.lab.spawn(self.ns.nsenter_argv(["freeradius", *mode, "-d", self.raddb]),
                                   log=self.log)

        def listening() -> bool:
            r = self.ns.exec(["ss", "-lunH", "sport = :1812"], check=False)
            return bool(r.stdout.strip()) or self.proc.poll() is not None
        wait_for(listening, timeout=timeout, what="freeradius listening")
        assert self.proc.poll() is None, "freeradius exited:\n" + self.read_log()[-4000:]


def cpu_s(pid: int) -> float:
    """utime + stime of a process (or /proc/PID/task/TID) in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switches(pid: int) -> dict[int, int]:
    """Context switches (voluntary + involuntary) of each thread of a process so far: its wake-ups."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                out[int(tid)] = sum(int(ln.split()[1]) for ln in f if "ctxt_switches:" in ln)
        except (OSError, ValueError):
            continue
    return out


def res_n(json_out: str) -> int:
    """Sessions bound by the storm (its --json results)."""
    try:
        with open(json_out) as f:
            return int(json.load(f)["results"].get("bound", 0))
    except (OSError, ValueError, KeyError):
        return 0


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        out[int(tid)] = (comm, cpu_s(f"{pid}/task/{tid}"))
    return out


def udp_errors(ns) -> int:
    """UDP datagrams a namespace dropped for a full receive buffer."""
    lines = [ln.split() for ln in ns.exec(["cat", "/proc/net/snmp"]).stdout.splitlines()
             if ln.startswith("Udp:")]
    return int(dict(zip(lines[0][1:], lines[1][1:])).get("RcvbufErrors", 0))


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def alone(x: XbngLab, n: int, window: int) -> float:
    """FreeRADIUS by itself: radius_probe (xbngd's RADIUS client, nothing
    else) sends the storm's N Access-Requests from xbngd's namespace (the
    client FreeRADIUS knows), `window` outstanding at once. Requests/s."""
    path = os.path.join(x.lab.rundir, "users.txt")
    with open(path, "w") as f:
        for i in range(n):
            f.write(user_name(bench_plan(i)) + "\n")
    c0 = children_cpu()
    r = x.dut.exec([find_bin("radius_probe"), "--server", f"{UPLINK_NET4},1812,1813,{SECRET}",
                    "--timeout-ms", "2000", "--users", path, "--window", str(window)],
                   timeout=600)
    cpu = children_cpu() - c0
    out = json.loads(r.stdout.strip().splitlines()[-1])  # after the client's log lines
    print(f"## FreeRADIUS alone (radius_probe, window {window}): {n:,} Access-Requests in "
          f"{out['seconds']:.2f} s: {out['per_s']:,.0f} requests/s; {out['totals']}; "
          f"retransmits {out['counters']['retransmits']}; probe CPU {cpu:.2f} s", flush=True)
    return out["per_s"]


def run(a) -> int:
    n, window = a.subscribers, a.window
    gen = find_bin("xbng_bench_bringup")
    with XbngLab(kind="xbngbr") as x:
        t0 = time.monotonic()
        radius = FastFreeRadius(x.lab, x.net, [(UPLINK_DUT4, SECRET)], users_file(n),
                                lean=a.freeradius == "lean", threads=a.radius_threads)
        try:
            radius.start()
            print(f"## FreeRADIUS ({a.freeradius}) up with {n:,} users in "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
            alone_rate = alone(x, n, window) if a.alone else None
            conf = os.path.join(x.lab.rundir, "radius.toml")
            with open(conf, "w") as f:
                f.write('[ports]\naccess = [{ name = "acc0", auth = "radius" }]\n\n'
                        f'[radius]\nservers = [{{ address = "{UPLINK_NET4}", secret = "{SECRET}" }}]\n'
                        'timeout_ms = 2000\nretries = 3\ncoa_listen = ""\n')
                if a.port_rate is not None:  # xbngd's per-port punt limit, frames/s per CPU
                    f.write(f"\n[punt]\nport_rate = {a.port_rate}\n")
            x.start(max_subscribers=max(1024, n + 1024),
                    extra=["--config", conf, "--lease-file",
                           os.path.join(x.lab.rundir, "leases.json")])
            x.resolve_uplink_neighbours()
            argv = [gen, "-n", str(n), "--first", "0", "--window", str(window),
                    "--netns", x.sub.name, "--iface", "s0", "--pid", str(x.daemon.pid), *a.extra]
            json_out = a.json or os.path.join(x.lab.rundir, "storm.json")
            argv += ["--json", json_out]
            print("## Storm against xbngd, every session authorized by FreeRADIUS:",
                  " ".join(arg if arg != gen else "xbng_bench_bringup" for arg in argv), flush=True)
            perf = []
            if a.perf:
                os.makedirs(a.perf, exist_ok=True)
                for who, pid in (("xbngd", x.daemon.pid), ("freeradius", radius.proc.pid)):
                    perf.append(subprocess.Popen(
                        ["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,16384", "-p", str(pid), "-o",
                         os.path.join(a.perf, f"{who}.data")],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            threads0, rad0, gen0 = thread_cpu(x.daemon.pid), cpu_s(radius.proc.pid), children_cpu()
            sw0 = switches(x.daemon.pid)
            t0 = time.monotonic()
            if a.perf:  # the generator too, as a child of perf (its CPU then includes perf's)
                argv = ["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,16384", "-o",
                        os.path.join(a.perf, "generator.data"), "--", *argv]
            rc = subprocess.run(argv, check=False).returncode
            wall = time.monotonic() - t0
            rad, gcpu = cpu_s(radius.proc.pid) - rad0, children_cpu() - gen0
            threads1 = thread_cpu(x.daemon.pid)
            sw1 = switches(x.daemon.pid)
            sw_by = sorted(((n - sw0.get(t, 0), t) for t, n in sw1.items()), reverse=True)
            sw = sum(n for n, _ in sw_by)
            unknown = ("?", 0.0)
            for p in perf:
                p.send_signal(2)
                p.wait(60)
            busy = sorted(((c - threads0.get(t, ("", 0.0))[1], t, comm)
                           for t, (comm, c) in threads1.items()), reverse=True)
            total = sum(b[0] for b in busy)
            print(f"  CPU seconds over the storm's {wall:.2f} s: xbngd {total:.2f} "
                  f"(busiest threads: {', '.join(f'{comm}/{tid} {c:.2f}' for c, tid, comm in busy[:8] if c > 0)}), "
                  f"FreeRADIUS {rad:.2f}, generator {gcpu:.2f}")
            print(f"  xbngd context switches over the storm: {sw:,} "
                  f"({sw / max(1, res_n(json_out)):.2f} per session; by thread: "
                  f"{', '.join(f'{threads1.get(t, unknown)[0]}/{t} {n:,}' for n, t in sw_by[:6] if n)})")
            with open(json_out) as f:
                res = json.load(f)["results"]
            if alone_rate and res.get("sessions_per_s"):
                print(f"  ratio: sessions/s through xbngd / Access-Requests/s of FreeRADIUS alone = "
                      f"{res['sessions_per_s']:,.0f} / {alone_rate:,.0f} = "
                      f"{res['sessions_per_s'] / alone_rate:.2f}")
            print(f"  load average (1 min) after the storm: {os.getloadavg()[0]:.2f} "
                  f"on {os.cpu_count()} CPUs (other jobs share the machine)")
            udp = {ns.name.rsplit("-", 1)[1]: udp_errors(ns) for ns in (x.dut, x.net)}
            print("  UDP receive errors (buffer full):",
                  ", ".join(f"{k} {v}" for k, v in udp.items()))
            m = x.dut.exec(["curl", "-s", "http://127.0.0.1:9469/metrics"], check=False).stdout
            rad = [ln for ln in m.splitlines() if ln.startswith("xbng_radius_") and
                   not ln.endswith(" 0") and "acct" not in ln]
            if rad:
                print("  xbngd RADIUS client:", ", ".join(rad))
            st = x.stats()
            moved = {k: v for k, v in st.items() if k != "_raw" and v and
                     any(w in k for w in ("auth", "dhcp", "punt", "rate", "lease", "acct"))}
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
    ap.add_argument("--alone", action="store_true",
                    help="first measure FreeRADIUS alone (radius_probe, same users, same window)")
    ap.add_argument("--freeradius", choices=("lean", "stock"), default="lean",
                    help="FreeRADIUS's virtual server: the bench's lean one or the packaged default")
    ap.add_argument("--radius-threads", type=int, default=8,
                    help="FreeRADIUS thread pool (start_servers = max_servers; lean only); "
                         "0: single server mode (-s), no pool")
    ap.add_argument("--port-rate", type=int,
                    help="xbngd's [punt] port_rate (frames/s per CPU; default: xbngd's own, 20,000)")
    ap.add_argument("--perf", metavar="DIR",
                    help="perf record -g xbngd, FreeRADIUS and the generator during the storm into DIR")
    ap.add_argument("extra", nargs="*", help="more xbng_bench_bringup options (after --)")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
