"""The store's write-ahead journal: an Upsert or a Delete killed at any stage of its map
writes leaves every subscriber exactly as last acknowledged or exactly as
requested, never a mix, and the restart says what it rolled back or forward.

xbngd is started with XBNG_TEST_CRASH_AT=<op>:<stage> (a test hook: the agent
SIGKILLs itself when a change reaches that stage), the request is sent, the
agent dies mid-write, a plain agent adopts the maps. The listing (xbngd's
index) and the pinned maps read directly (every subscriber entry, every route
of the five route maps, with its owner) must equal exactly the state before
the request (upsert: rolled back) or the state it asked for (delete: rolled
forward). A second test kills an agent from outside at random moments during
a large atomic upsert: whatever the moment, the whole batch is there or none
of it.
"""
import ipaddress
import json
import os
import random
import signal
import subprocess
import time
import unittest

from xbnglab.fixture import LabSuite
from xbnglab.xbngd import P64_BASE, V4_BASE, plan, write_jsonl

N = 3000  # baseline subscribers; the upsert touches 3,000 entries (> kParallelApply)
C_PER_S = 1000


def baseline(i: int) -> dict:
    s = plan(i, c_per_s=C_PER_S)
    if i % 10 == 0:  # framed IPv4 and a shorter IPv6 prefix (the LPM maps)
        s["ipv4_prefixes"] = [f"{ipaddress.IPv4Address(int(ipaddress.IPv4Address('100.65.0.0')) + 2 * i)}/31"]
        s["ipv6_prefixes"] = s["ipv6_prefixes"] + [f"2001:db8:3{i >> 8:03x}:{i & 0xff:02x}00::/56"]
    return s


def updated(i: int) -> dict:
    """The request's version of existing subscriber i (0 <= i < 1500)."""
    s = plan(i, c_per_s=C_PER_S)
    s["ipv4"] = str(ipaddress.IPv4Address(V4_BASE + 100000 + i))
    s["ipv6_prefixes"] = [f"{ipaddress.IPv6Address(P64_BASE + ((100000 + i) << 64))}/64"]
    if i % 10 == 0:
        s["ipv6_prefixes"].append(f"2001:db8:3{0x800 + (i >> 8):03x}:{i & 0xff:02x}00::/56")
    return s


def upsert_request() -> list[dict]:
    req = [updated(i) for i in range(1500)]
    a, b = baseline(1500), baseline(1501)  # two subscribers swap their IPv4 addresses
    a["ipv4"], b["ipv4"] = b["ipv4"], a["ipv4"]
    req += [a, b]
    req += [baseline(i) for i in range(1502, 2000)]  # unchanged
    req += [plan(N + j, c_per_s=C_PER_S) for j in range(1000)]  # created
    return req


def key(s: dict) -> tuple:
    return (s["port"], int(s["outer_vlan"]), int(s["inner_vlan"]))


def norm(s: dict) -> tuple:
    """What a subscriber is provisioned with, comparable."""
    def nets(ps):
        return tuple(sorted(str(ipaddress.ip_network(p)) for p in ps))
    return (s.get("mac", "").lower(), s.get("ipv4", ""), s.get("ipv6", ""),
            nets(s.get("ipv6_prefixes", [])), nets(s.get("ipv4_prefixes", [])))


def routes_of(subs: dict) -> set:
    """Every route the maps must hold for `subs`: (map, destination, owner)."""
    out = set()
    for k, s in subs.items():
        owner = f"{k[0]}/{k[1]}/{k[2]}"
        if s.get("ipv4"):
            out.add(("routes_v4", f"{s['ipv4']}/32", owner))
        if s.get("ipv6"):
            out.add(("routes_v6", str(ipaddress.ip_network(s["ipv6"] + "/128")), owner))
        for p in s.get("ipv6_prefixes", []):
            n = ipaddress.ip_network(p)
            out.add(("routes_v6_64" if n.prefixlen == 64 else "prefixes_v6", str(n), owner))
        for p in s.get("ipv4_prefixes", []):
            out.add(("prefixes_v4", str(ipaddress.ip_network(p)), owner))
    return out


class CrashAtomicityTest(LabSuite):
    @classmethod
    def setUpLab(cls):
        cls.x.start(max_subscribers=65536)
        cls.base = {key(s): s for s in (baseline(i) for i in range(N))}
        cls.provision(cls.base.values())

    # -- state -------------------------------------------------------------------
    def listed(self) -> dict:
        out = self.x.ctl("sub", "list", "--all", "--page-size", "10000")
        rows = out.get("subscribers", []) if isinstance(out, dict) else (out or [])
        return {key(r): norm(r) for r in rows}

    def pinned(self) -> tuple[dict, set]:
        """The maps themselves: subscriber entries (key -> (ipv4, ipv6)) and routes."""
        r = subprocess.run(self.x.dut.nsenter_argv([self.x.xbngctl, "--json", "bpf", "dump",
                                                    "--bpffs", self.x.lab.bpffs]),
                           capture_output=True, text=True, timeout=120, check=True)
        subs, routes = {}, set()
        for line in r.stdout.splitlines():
            o = json.loads(line)
            if o["map"] == "subscribers":
                port, outer, inner = o["key"].split("/")
                subs[(port, int(outer), int(inner))] = (
                    "" if o["ipv4"] == "-" else o["ipv4"], "" if o["ipv6"] == "-" else o["ipv6"])
            else:
                routes.add((o["map"], str(ipaddress.ip_network(o["destination"])), o["owner"]))
        return subs, routes

    def assert_state(self, want: dict, what: str):
        listed = self.listed()
        self.assertEqual(len(listed), len(want), what)
        bad = [k for k, s in want.items() if listed.get(k) != norm(s)]
        self.assertFalse(bad, f"{what}: {len(bad)} subscribers differ from the expected "
                              f"provisioning, e.g. {bad[:1]}: listed {listed.get(bad[0]) if bad else None}, "
                              f"want {norm(want[bad[0]]) if bad else None}")
        subs, routes = self.pinned()
        self.assertEqual(set(subs), set(want), f"{what}: subscriber map keys")
        for k, s in want.items():
            self.assertEqual(subs[k], (s.get("ipv4", ""), s.get("ipv6", "")), f"{what}: entry {k}")
        want_routes = routes_of(want)
        self.assertEqual(len(routes - want_routes), 0,
                         f"{what}: routes not in the expected state: {sorted(routes - want_routes)[:3]}")
        self.assertEqual(len(want_routes - routes), 0,
                         f"{what}: expected routes missing: {sorted(want_routes - routes)[:3]}")

    # -- agent control ------------------------------------------------------------
    def start_with_hook(self, at: str):
        self.x.stop()
        os.environ["XBNG_TEST_CRASH_AT"] = at
        try:
            self.x.start(max_subscribers=65536)
        finally:
            del os.environ["XBNG_TEST_CRASH_AT"]

    def crashed_log(self) -> str:
        self.x.daemon.wait(30)
        log = self.x.read_log()
        self.assertEqual(self.x.daemon.returncode, -signal.SIGKILL, log[-2000:])
        return log

    def restart(self) -> str:
        self.x.start(max_subscribers=65536)
        return self.x.read_log()

    def write(self, subs, name: str) -> str:
        path = os.path.join(self.x.lab.rundir, name)
        write_jsonl(path, subs)
        return path

    # -- tests ------------------------------------------------------------------
    def test_upsert_killed_at_every_stage_is_rolled_back(self):
        req = upsert_request()
        path = self.write(req, "upsert.jsonl")
        requested = dict(self.base)
        requested.update({key(s): s for s in req})
        for stage in ("journal", "police", "subscribers", "routes-partial", "routes",
                      "old-routes"):
            with self.subTest(stage=stage):
                self.start_with_hook(f"upsert:{stage}")
                r = self.x.ctl_raw("sub", "import", "--atomic", path)
                self.assertNotEqual(r.returncode, 0, "the request must not be acknowledged")
                log = self.crashed_log()
                self.assertIn(f"XBNG_TEST_CRASH_AT=upsert:{stage}", log)
                log = self.restart()
                # 2,502 touched: 1,502 updated (1,500 + the two swapping
                # addresses), 1,000 created; the 498 unchanged are not.
                self.assert_state(self.base, f"after a kill at upsert:{stage}")
                self.assertRegex(log, r"journal: an interrupted upsert of 2502 subscribers was "
                                      r"rolled back: 1502 restored to their previous "
                                      r"provisioning, \d+ it had created removed")
        # And without a crash the same request applies whole.
        r = self.x.ctl_raw("sub", "import", "--atomic", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_state(requested, "after the same request, not interrupted")
        # Back to the baseline for the other tests.
        dels = [plan(N + j, c_per_s=C_PER_S) for j in range(1000)]
        self.x.ctl("sub", "del", "--file", self.write(dels, "dels.jsonl"))
        self.x.ctl("sub", "import", "--atomic", self.write(self.base.values(), "base.jsonl"))
        self.assert_state(self.base, "baseline restored")

    def test_delete_killed_at_every_stage_is_rolled_forward(self):
        gone = [s for i, s in enumerate(self.base.values()) if i % 2 == 0]
        path = self.write(gone, "delete.jsonl")
        want = {k: s for k, s in self.base.items() if k not in {key(g) for g in gone}}
        for stage in ("journal", "routes-partial", "routes", "subscribers"):
            with self.subTest(stage=stage):
                self.start_with_hook(f"delete:{stage}")
                self.x.ctl_raw("sub", "del", "--file", path)
                log = self.crashed_log()
                self.assertIn(f"XBNG_TEST_CRASH_AT=delete:{stage}", log)
                log = self.restart()
                self.assert_state(want, f"after a kill at delete:{stage}")
                self.assertRegex(log, r"journal: an interrupted delete of 1500 subscribers was "
                                      r"rolled forward: \d+ removed now")
                out, _ = self.x.import_subs(gone)
                self.assertEqual(int(out["applied"]), len(gone))
        self.assert_state(self.base, "baseline restored")

    def test_random_kills_during_a_large_atomic_upsert(self):
        """No hook: SIGKILL from outside at random moments of a 5,000-entry
        atomic upsert (~480 KB: within api.max_request_bytes, 512 KiB). Every
        time, all of it or none of it."""
        rng = random.Random(14)
        req = [baseline(i) | {"ipv4": str(ipaddress.IPv4Address(V4_BASE + 200000 + i))}
               for i in range(N)]
        req += [plan(N + j, c_per_s=C_PER_S) for j in range(2000)]
        path = self.write(req, "big.jsonl")
        requested = dict(self.base)
        requested.update({key(s): s for s in req})
        # How long the request takes here, to aim the kills inside it.
        t0 = time.monotonic()
        r = self.x.ctl_raw("sub", "import", "--atomic", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        took = time.monotonic() - t0
        self.assert_state(requested, "uninterrupted")
        undo = self.write([plan(N + j, c_per_s=C_PER_S) for j in range(2000)], "undo.jsonl")
        outcomes = []
        for n in range(4):
            self.x.ctl("sub", "del", "--file", undo)
            self.x.ctl("sub", "import", "--atomic", self.write(self.base.values(), "base.jsonl"))
            p = subprocess.Popen([self.x.xbngctl, "--server", self.x.grpc, "sub", "import",
                                  "--atomic", path], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.3, 1.0) * took)
            self.x.stop(signal.SIGKILL)
            p.wait(60)
            log = self.restart()
            listed = self.listed()
            state = "requested" if len(listed) == len(requested) else "baseline"
            outcomes.append(state + (" (rolled back)" if "was rolled back" in log else ""))
            self.assert_state(requested if state == "requested" else self.base,
                              f"kill {n} ({time.monotonic() - t0:.1f} s)")
        print(f"\nrandom kills: request {took:.2f} s, outcomes {outcomes}")
        self.x.ctl("sub", "del", "--file", undo)
        self.x.ctl("sub", "import", "--atomic", self.write(self.base.values(), "base.jsonl"))


if __name__ == "__main__":
    unittest.main()
