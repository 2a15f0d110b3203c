"""Fleet-mode lab: a real etcd cluster (Debian's /usr/bin/etcd) and several
xbngd nodes, all in namespaces of one Lab.

    etcd ns: members m0..m2 (clients on :2379/:12379/:22379 of every address
             of the namespace, peers on its loopback); one veth per node:
             198.51.100.(4k+1)/30 here, .(4k+2) in the node's namespace
    node k:  its own dut namespace (acc0 access, upl0 uplink, peers in ns
             "peer"), xbngd --etcd ... --node n<k>, its own bpffs pins

Everything listens inside the lab's namespaces only: no port in the root
namespace, no collision with other etcd instances on the machine. The data
dirs live under the lab's run directory (tmpfs) and go with it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request

from xbnglab import prom
from xbnglab.lab import Lab, Netns, wait_for
from xbnglab.xbngd import GW4, GW6, Daemon, find_bin, write_jsonl

ETCD = "/usr/bin/etcd"
ETCDCTL = "/usr/bin/etcdctl"
CLIENT_PORTS = (2379, 12379, 22379)
PEER_PORTS = (2380, 12380, 22380)


class EtcdCluster:
    def __init__(self, lab: Lab, ns: Netns, members: int = 3):
        self.lab, self.ns, self.n = lab, ns, members
        self.dir = os.path.join(lab.rundir, "etcd")
        self.procs: dict[int, object] = {}
        self.token = f"xbng-{os.getpid()}-{time.monotonic_ns()}"
        self.initial = ",".join(f"m{i}=http://127.0.0.1:{PEER_PORTS[i]}" for i in range(members))
        self.extra_args: list[str] = []  # more etcd flags (a benchmark's)

    def endpoint(self, i: int, host: str = "127.0.0.1") -> str:
        return f"{host}:{CLIENT_PORTS[i]}"

    def endpoints(self) -> str:
        return ",".join(self.endpoint(i) for i in range(self.n) if i in self.procs)

    def start_member(self, i: int, existing: bool = False) -> None:
        data = os.path.join(self.dir, f"m{i}")
        os.makedirs(data, exist_ok=True)
        argv = [ETCD, "--name", f"m{i}", "--data-dir", data,
                "--listen-client-urls", f"http://0.0.0.0:{CLIENT_PORTS[i]}",
                "--advertise-client-urls", f"http://127.0.0.1:{CLIENT_PORTS[i]}",
                "--listen-peer-urls", f"http://127.0.0.1:{PEER_PORTS[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{PEER_PORTS[i]}",
                "--initial-cluster", self.initial, "--initial-cluster-token", self.token,
                "--initial-cluster-state", "existing" if existing else "new",
                "--heartbeat-interval", "50", "--election-timeout", "500",
                "--log-level", "warn", "--logger", "zap", *self.extra_args]
        self.procs[i] = self.lab.spawn(self.ns.nsenter_argv(argv),
                                       log=os.path.join(self.dir, f"m{i}.log"))

    def start(self) -> None:
        for i in range(self.n):
            self.start_member(i)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 30) -> None:
        """Every running member healthy (answers a quorum read)."""
        wait_for(lambda: self.ctl("endpoint", "health", check=False).returncode == 0,
                 timeout, 0.2, f"etcd members {sorted(self.procs)} to be healthy")

    def kill_member(self, i: int) -> None:
        p = self.procs.pop(i)
        self.lab.stop(p, signal.SIGKILL)

    def ctl(self, *args: str, check: bool = True, endpoints: str | None = None,
            input: str | None = None) -> subprocess.CompletedProcess:
        """etcdctl ARGS inside the etcd namespace (retried while an election runs)."""
        argv = self.ns.nsenter_argv([ETCDCTL, "--endpoints", endpoints or self.endpoints(),
                                     "--command-timeout", "10s", *args])
        for attempt in range(5):  # an election after a member is killed: retry
            r = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=60,
                               env={**os.environ, "ETCDCTL_API": "3"})
            if r.returncode == 0 or "timed out" not in r.stderr or not check:
                break
            time.sleep(0.5)
        if check and r.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {r.stderr.strip()}")
        return r

    def put(self, key: str, value: str) -> int:
        out = json.loads(self.ctl("put", key, value, "-w", "json").stdout)
        return int(out["header"]["revision"])

    def delete(self, key: str, prefix: bool = False) -> int:
        out = json.loads(self.ctl("del", key, *(["--prefix"] if prefix else []), "-w", "json").stdout)
        return int(out["header"]["revision"])

    def get(self, key: str):
        out = json.loads(self.ctl("get", key, "-w", "json").stdout)
        kvs = out.get("kvs") or []
        import base64
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def revision(self) -> int:
        out = json.loads(self.ctl("get", "/xbng-none", "-w", "json").stdout)
        return int(out["header"]["revision"])

    def compact(self, rev: int) -> None:
        self.ctl("compact", str(rev), "--physical")


class FleetNode(Daemon):
    """One xbngd in its own namespace, driven from etcd."""

    CTL_TIMEOUT = 300

    def __init__(self, lab: Lab, k: int, etcd_ns: Netns, peer: Netns, pass_obj: str):
        self.lab, self.k, self.name = lab, k, f"n{k}"
        self.ns = lab.netns(f"dut{k}")
        # Link to the etcd namespace.
        lab.veth(etcd_ns, f"e{k}", self.ns, "etcd0")
        etcd_ns.ip("addr", "add", f"198.51.100.{4 * k + 1}/30", "dev", f"e{k}")
        self.ns.ip("addr", "add", f"198.51.100.{4 * k + 2}/30", "dev", "etcd0")
        self.etcd_host = f"198.51.100.{4 * k + 1}"
        lab.veth(peer, f"s{k}", self.ns, "acc0")
        lab.veth(self.ns, "upl0", peer, f"u{k}")
        peer.sysctl(f"net.ipv6.conf.s{k}.disable_ipv6", "1")
        lab.attach_pass(peer, f"s{k}", pass_obj)
        lab.attach_pass(peer, f"u{k}", pass_obj)
        # Its own basename: xbngd keeps its state in /run/xbng/<basename>.
        self.bpffs = os.path.join(lab.bpffs, f"{lab.id}-{self.name}")
        self.socket_path = os.path.join(lab.rundir, f"{self.name}.sock")
        self.grpc = f"unix://{self.socket_path}"
        self.log = os.path.join(lab.rundir, f"{self.name}.log")
        self.xbngd, self.xbngctl = find_bin("xbngd"), find_bin("xbngctl")
        self.what = f"xbngd {self.name}"
        self.daemon = None

    def endpoints(self, members) -> str:
        return ",".join(f"{self.etcd_host}:{CLIENT_PORTS[i]}" for i in members)

    def start(self, members=(0, 1, 2), config: str | None = None, max_subscribers: int = 65536,
              extra: list[str] | None = None, timeout: float = 30):
        argv = [self.xbngd, "--access", "acc0", "--uplink", "upl0", "--gateway-ipv4", GW4,
                "--gateway-ipv6", GW6, "--grpc", self.grpc, "--bpffs", self.bpffs,
                "--max-subscribers", str(max_subscribers), "--metrics-listen", "127.0.0.1:9469"]
        if config:
            argv += ["--config", config]
        else:
            argv += ["--etcd", self.endpoints(members), "--node", self.name]
        argv += extra or []
        self.launch(self.ns.nsenter_argv(argv), timeout)

    def kill(self, sig=signal.SIGKILL) -> None:
        self.lab.stop(self.daemon, sig)

    def listed_keys(self) -> set:
        out = self.ctl("sub", "list", "--all", "--page-size", "10000")
        rows = out["subscribers"] if isinstance(out, dict) else out
        return {(r["port"], int(r["outer_vlan"]), int(r["inner_vlan"])) for r in rows}

    def listed(self) -> dict:
        out = self.ctl("sub", "list", "--all", "--page-size", "10000")
        rows = out["subscribers"] if isinstance(out, dict) else out
        return {(r["port"], int(r["outer_vlan"]), int(r["inner_vlan"])): r for r in rows}

    def pinned_keys(self) -> set:
        """Keys of the pinned subscriber map (read directly, not through xbngd)."""
        r = subprocess.run(self.ns.nsenter_argv([self.xbngctl, "--json", "bpf", "dump", "--bpffs",
                                                 self.bpffs]),
                           capture_output=True, text=True, timeout=300, check=True)
        keys = set()
        for line in r.stdout.splitlines():
            o = json.loads(line)
            if o["map"] == "subscribers":
                port, outer, inner = o["key"].split("/")
                keys.add((port, int(outer), int(inner)))
        return keys

    def scrape(self, timeout: float = 5) -> str:
        """The node's /metrics (it listens inside its namespace)."""
        with self.ns.entered():
            with urllib.request.urlopen("http://127.0.0.1:9469/metrics", timeout=timeout) as r:
                return r.read().decode()

    def metrics(self) -> dict:
        """The node's xbng_fleet_* metrics: name -> value."""
        return prom.values(self.scrape(), "xbng_fleet_")


def import_to_etcd(cluster: EtcdCluster, node: str, subs, path: str, members=None,
                   background: bool = False):
    write_jsonl(path, subs)
    eps = ",".join(cluster.endpoint(i) for i in (members or sorted(cluster.procs)))
    argv = cluster.ns.nsenter_argv([find_bin("xbngctl"), "sub", "import", "--etcd", eps,
                                    "--node", node, path])
    if background:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)
