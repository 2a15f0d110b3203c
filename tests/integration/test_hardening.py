"""Hardening: a real xbngd driven past
its limits as a hostile operator would. Each test failed on the code before
the fix: descriptors exhausted, a second agent on the same pins, a private
bpffs, TLS without client certificates, silent watchers, the socket's
permissions window, a regular file at the socket path, a teardown that says
"done" after failing, slow HTTP clients in front of every scrape."""
import contextlib
import ctypes
import json
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import threading
import time
import unittest
import urllib.error
import urllib.request

from xbnglab import prom
from xbnglab.lab import PIN_VERSION_DIR, sh, wait_for
from xbnglab.xbngd import XbngLab, plan


class Hardening(unittest.TestCase):
    def setUp(self):
        # The test holds more sockets than the default 1024.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
        self.x = XbngLab()
        self.addCleanup(self.x.close)

    def spawn_xbngd(self, argv, log=None, **kw):
        return self.x.lab.spawn(argv, log=log or self.x.log, **kw)

    def wait_serving(self, proc=None):
        proc = proc or self.x.daemon

        def ready():
            if proc.poll() is not None:
                raise RuntimeError(f"xbngd exited {proc.returncode}:\n{self.x.read_log()}")
            return os.path.exists(self.x.socket_path) and self.x.ctl_raw("stats", timeout=10).returncode == 0
        wait_for(ready, 30, 0.1, "xbngd to serve gRPC")

    def http(self, path: str, timeout: float = 5):
        with self.x.dut.entered():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:9469{path}", timeout=timeout) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

    # -- descriptor exhaustion ---------------------------------------------------
    def test_fd_exhaustion_is_refused_and_recovers(self):
        """Under a 1024-descriptor limit, 1,100 held connections and then a
        burst of 5,000 connect/close leave the API serving: the surplus is
        refused, /healthz and `xbngctl health` fail while it is full, and
        everything answers again once the clients go."""
        self.x.daemon = self.spawn_xbngd(["prlimit", "--nofile=1024", "--"] + self.x.xbngd_argv())
        self.wait_serving()
        conns = []
        for _ in range(1100):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.x.socket_path)
            conns.append(s)
        # The agent accepts them as fast as the machine lets it: until then
        # /healthz may still answer 200.
        wait_for(lambda: self.http("/healthz")[0] == 503, 30, 0.2,
                 "/healthz to report the connection limit")
        code, body = self.http("/healthz")
        self.assertEqual(code, 503, body)
        self.assertIn("api.max_connections", body)
        h = self.x.ctl_raw("health", timeout=20)
        self.assertNotEqual(h.returncode, 0, h.stdout)
        self.assertEqual(self.x.daemon.poll(), None)
        for s in conns:
            s.close()
        for _ in range(5000):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with contextlib.suppress(OSError):
                s.connect(self.x.socket_path)
            s.close()

        def serving():
            return self.x.ctl_raw("stats", timeout=10).returncode == 0
        wait_for(serving, 20, 0.5, "the API to recover")
        h = self.x.ctl_raw("health", timeout=20)
        self.assertEqual(h.returncode, 0, h.stderr)
        self.assertIn("SERVING", h.stdout)
        code, body = self.http("/healthz")
        self.assertEqual(code, 200, body)
        stats = self.x.ctl("stats")
        self.assertEqual(int(stats["grpc_max_connections"]), 768)  # (1024 - 256 reserved) / 1
        self.assertGreaterEqual(int(stats["grpc_connections_refused"]), 1100 - 768)
        self.assertNotIn("Failed accept4", self.x.read_log())

    # -- one agent per pins, the socket path, teardown ---------------------------
    def link_prog_ids(self):
        out = {}
        for port in ("acc0", "upl0"):
            path = f"{self.x.lab.bpffs}/{PIN_VERSION_DIR}/links/{port}"
            info = json.loads(sh(["bpftool", "-j", "link", "show", "pinned", path]).stdout)
            out[port] = (os.stat(path).st_ino, info["prog_id"])
        return out

    def test_second_agent_refuses_and_touches_nothing(self):
        first = self.x.start()
        before = self.link_prog_ids()
        sock_ino = os.stat(self.x.socket_path).st_ino
        # Same config (same socket), then another socket and metrics port:
        # both refuse, naming the first agent's PID.
        for extra in ([], ["--grpc", f"unix://{self.x.lab.rundir}/second.sock",
                           "--metrics-listen", "127.0.0.1:9470"]):
            log = os.path.join(self.x.lab.rundir, "second.log")
            argv = self.x.xbngd_argv()
            if extra:
                argv[argv.index("--grpc") + 1] = extra[1]
                argv += extra[2:]
            second = self.spawn_xbngd(argv, log=log)
            rc = second.wait(30)
            with open(log) as f:
                text = f.read()
            self.assertNotEqual(rc, 0, text)
            self.assertIn(f"PID {first.pid}", text)
            self.assertIn("nothing was touched", text)
            self.assertEqual(self.link_prog_ids(), before)
            self.assertEqual(os.stat(self.x.socket_path).st_ino, sock_ino)
            self.assertFalse(os.path.exists(f"{self.x.lab.rundir}/second.sock"))
            self.assertEqual(self.x.ctl_raw("stats").returncode, 0)
        # Teardown respects the lock too.
        r = sh(self.x.dut.nsenter_argv([self.x.xbngd, "--teardown", "--bpffs", self.x.lab.bpffs]),
               check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"PID {first.pid}", r.stderr + r.stdout)
        self.assertEqual(self.link_prog_ids(), before)

    def test_regular_file_or_live_socket_at_the_path_is_never_removed(self):
        with open(self.x.socket_path, "w") as f:
            f.write("precious\n")
        self.x.daemon = self.spawn_xbngd(self.x.xbngd_argv())
        rc = self.x.daemon.wait(30)
        self.assertNotEqual(rc, 0)
        self.assertIn("is not a socket: refusing to remove it", self.x.read_log())
        with open(self.x.socket_path) as f:
            self.assertEqual(f.read(), "precious\n")
        os.unlink(self.x.socket_path)
        # Someone else serving there: refused too, their socket kept.
        other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        other.bind(self.x.socket_path)
        other.listen(4)
        self.addCleanup(other.close)
        ino = os.stat(self.x.socket_path).st_ino
        self.x.daemon = self.spawn_xbngd(self.x.xbngd_argv())
        self.assertNotEqual(self.x.daemon.wait(30), 0)
        self.assertIn("another process is serving on this socket", self.x.read_log())
        self.assertEqual(os.stat(self.x.socket_path).st_ino, ino)
        # The links this attempt must not have left behind: it stopped
        # before loading anything? No: the socket comes after the data plane;
        # what matters is the lock was held while looking at the path.

    def test_teardown_reports_failures_and_nothing_to_remove(self):
        xbngd = self.x.xbngd
        missing = self.x.lab.bpffs + "-missing"
        r = sh([xbngd, "--teardown", "--bpffs", missing], check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("nothing to remove", r.stdout + r.stderr)
        self.x.start()
        self.x.stop()
        # Unprivileged: every pin is out of reach; exit non-zero, no "done".
        r = sh(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                xbngd, "--teardown", "--bpffs", self.x.lab.bpffs], check=False)
        self.assertNotEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("FAILED", r.stdout + r.stderr)
        self.assertNotIn("done", r.stdout + r.stderr)
        self.assertTrue(os.path.exists(f"{self.x.lab.bpffs}/{PIN_VERSION_DIR}/links/acc0"))
        r = sh(self.x.dut.nsenter_argv([xbngd, "--teardown", "--bpffs", self.x.lab.bpffs]),
               check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done", r.stdout + r.stderr)
        self.assertFalse(os.path.exists(self.x.lab.bpffs))

    # -- private bpffs -----------------------------------------------------------
    def test_private_bpffs_is_refused(self):
        """xbngd in a private mount namespace with a bpffs of its own: the
        pins would die with it. It must refuse and attach nothing."""
        argv = ["unshare", "--mount", "--propagation", "private", "--",
                "sh", "-c", 'mount -t bpf bpf /sys/fs/bpf && exec "$@"', "sh",
                *self.x.xbngd_argv()]
        self.x.daemon = self.spawn_xbngd(argv)
        rc = self.x.daemon.wait(30)
        self.assertNotEqual(rc, 0, self.x.read_log())
        self.assertIn("not on the host's bpf filesystem", self.x.read_log())
        r = self.x.dut.exec(["ip", "-d", "link", "show", "acc0"])
        self.assertNotIn("xdp", r.stdout.split("link/ether")[0])

    # -- TLS client certificates -------------------------------------------------
    def make_pki(self):
        d = os.path.join(self.x.lab.rundir, "pki")
        os.makedirs(d)
        def ossl(*a):
            sh(["openssl", *a], timeout=60)
        ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem", "-subj", "/CN=xbng test CA", "-days", "1")
        for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
            ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr", "-subj", f"/CN={name}")
            with open(f"{d}/{name}.ext", "w") as f:
                f.write(ext + "\n")
            ossl("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
                 "-CAcreateserial", "-out", f"{d}/{name}.pem", "-days", "1", "-extfile", f"{d}/{name}.ext")
        return d

    def ctl_tcp(self, *args, certs=None):
        argv = [self.x.xbngctl, "--server", "127.0.0.1:50051", "--tls-ca", f"{self.pki}/ca.pem"]
        if certs:
            argv += ["--tls-cert", f"{self.pki}/client.pem", "--tls-key", f"{self.pki}/client.key"]
        return subprocess.run(self.x.dut.nsenter_argv(argv + list(args)), capture_output=True,
                              text=True, timeout=60)

    def test_tls_requires_client_certificates(self):
        self.pki = p = self.make_pki()
        base = self.x.xbngd_argv()
        i = base.index("--grpc")
        base[i + 1] = "127.0.0.1:50051"
        tls = ["--tls-cert", f"{p}/server.pem", "--tls-key", f"{p}/server.key"]
        # TLS without a client CA: refused at start (exit 2: configuration).
        self.x.daemon = self.spawn_xbngd(base + tls)
        self.assertEqual(self.x.daemon.wait(30), 2, self.x.read_log())
        self.assertIn("--tls-no-client-auth", self.x.read_log())
        # With a client CA: a client without a certificate gets nothing done,
        # one with a certificate works (through the accept-limited relay).
        self.x.daemon = self.spawn_xbngd(base + tls + ["--tls-client-ca", f"{p}/ca.pem"])
        wait_for(lambda: self.ctl_tcp("health", certs=True).returncode == 0, 30, 0.2, "TLS xbngd")
        sub = plan(0)
        add = ["sub", "add", "--port", "acc0", "--outer", str(sub["outer_vlan"]),
               "--inner", str(sub["inner_vlan"]), "--ipv4", sub["ipv4"]]
        r = self.ctl_tcp(*add)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertEqual(self.ctl_tcp("--json", "stats", certs=True).returncode, 0)
        r = self.ctl_tcp(*add, certs=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.x.stop()
        # Explicitly without client certificates: allowed, with a warning.
        self.x.daemon = self.spawn_xbngd(base + tls + ["--tls-no-client-auth"])
        wait_for(lambda: self.ctl_tcp("health").returncode == 0, 30, 0.2, "TLS xbngd")
        self.assertIn("WITHOUT client certificates", self.x.read_log())

    # -- silent watchers ---------------------------------------------------------
    @staticmethod
    def end_all(procs):
        for p in procs:
            p.kill()
            p.wait()
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()

    def proc_status(self, pid: int) -> dict:
        with open(f"/proc/{pid}/status") as f:
            return {k: v.split()[0] for k, _, v in (line.partition(":") for line in f) if v.strip()}

    def test_silent_watchers_are_bounded_and_disconnected(self):
        cfg = os.path.join(self.x.lab.rundir, "xbngd.toml")
        with open(cfg, "w") as f:
            f.write("[api]\nmax_watchers = 16\nwatcher_queue = 512\n")
        self.x.start(extra=["--config", cfg])
        pid = self.x.daemon.pid
        conns = int(self.x.ctl("stats").get("grpc_connections", 0))
        before = self.proc_status(pid)
        watchers = []
        for _ in range(100):
            w = subprocess.Popen([self.x.xbngctl, "--server", self.x.grpc, "events"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            watchers.append(w)
        self.addCleanup(self.end_all, watchers)

        def settled():
            st = self.x.ctl("stats")
            return int(st.get("watchers", 0)) == 16 and int(st.get("watchers_refused", 0)) == 84
        wait_for(settled, 60, 0.5, "16 watchers open, 84 refused")
        # The agent counts a refusal when it answers it; the refused client
        # exits after reading the answer, when the machine gets to it. Until
        # all 84 have exited, a stop below would count one as silent.
        wait_for(lambda: sum(w.poll() is not None for w in watchers) >= 84, 60, 0.2,
                 "the 84 refused clients to exit")
        for w in watchers:
            if w.poll() is None:
                os.kill(w.pid, signal.SIGSTOP)  # silent: never reads again
        refused = [w for w in watchers if w.poll() is not None]
        self.assertEqual(len(refused), 84)
        # xbngd's RESOURCE_EXHAUSTED, in xbngctl's words: the limit and what to do.
        self.assertIn("the maximum (api.max_watchers): retry later",
                      refused[0].stderr.read().decode())
        self.assertEqual(refused[0].returncode, 1)
        silent = [w for w in watchers if w.poll() is None]
        self.assertEqual(len(silent), 16)
        watching = self.proc_status(pid)
        out, _ = self.x.import_subs([plan(i, c_per_s=1000) for i in range(5000)])
        self.assertEqual(int(out["applied"]), 5000)

        # Each overflowed: within a few seconds, with its client still
        # stopped (it never reads again), its stream is ended and counted, its
        # slot is free and no thread stays behind for it.
        t0 = time.monotonic()

        def released():
            st = self.x.ctl("stats")
            return (int(st.get("watchers_disconnected", 0)) == 16
                    and int(st.get("watchers", 0)) == 0)
        try:
            wait_for(released, 8, 0.2, "")
        except TimeoutError:
            st = self.x.ctl("stats")
            self.fail(f"8 s after the import, with the 16 silent watchers stopped: "
                      f"{st.get('watchers', 0)} watchers open, "
                      f"{st.get('watchers_disconnected', 0)} disconnected; threads "
                      f"{before['Threads']} before them, {self.proc_status(pid)['Threads']} now")
        released_s = time.monotonic() - t0
        after = self.proc_status(pid)
        print(f"\nsilent watchers: threads {before['Threads']} before, {watching['Threads']} with 16 "
              f"open, {after['Threads']} after the overflow; RSS {before['VmRSS']} / "
              f"{watching['VmRSS']} / {after['VmRSS']} kB; released {released_s:.1f} s after the "
              f"import")
        self.assertLess(int(after["Threads"]) - int(before["Threads"]), 8,
                        "threads held for silent watchers")
        self.assertTrue(all(w.poll() is None for w in silent))
        self.assertIn("stopped reading", self.x.read_log())
        m = self.http("/metrics")[1]
        self.assertEqual(prom.value(m, "xbng_watchers"), 0)
        self.assertEqual(prom.value(m, "xbng_watchers_disconnected_total"), 16)
        # Their calls end too, with the clients still stopped: cancelled, or
        # when a write is stuck in the socket itself, their connections shut
        # down.
        wait_for(lambda: self.x.read_log().count("after its queue overflowed") == 16, 10, 0.2,
                 "the silent watchers' calls to end")
        log = self.x.read_log()
        closed = self.proc_status(pid)
        print(f"silent watchers' calls ended {time.monotonic() - t0:.1f} s after the import "
              f"({log.count('cancelled: its client')} cancelled, "
              f"{log.count('closing the connection')} connections shut down, "
              f"{int(self.x.ctl('stats').get('grpc_connections', 0)) - conns} still open): "
              f"threads {closed['Threads']}, RSS {closed['VmRSS']} kB")
        # The slots are free again while the silent clients stay stopped.
        fresh = [subprocess.Popen([self.x.xbngctl, "--server", self.x.grpc, "events"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for _ in range(16)]
        self.addCleanup(self.end_all, fresh)
        wait_for(lambda: int(self.x.ctl("stats").get("watchers", 0)) == 16, 30, 0.2,
                 "16 new watchers beside the 16 stopped ones")
        self.assertTrue(all(w.poll() is None for w in fresh))
        self.end_all(fresh + silent)
        wait_for(lambda: int(self.x.ctl("stats").get("watchers", 0)) == 0, 30, 0.5,
                 "the watchers' slots to come back")
        r = subprocess.run([self.x.xbngctl, "--server", self.x.grpc, "events", "--count", "1"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)

    # -- socket permissions ------------------------------------------------------
    def test_socket_never_exists_with_loose_permissions(self):
        """Under umask 000 the socket must never be reachable at its path
        before it is 0600: it appears there by rename, already restricted
        (inotify sees IN_MOVED_TO, never IN_CREATE of the socket)."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK)
        self.assertGreaterEqual(fd, 0)
        self.addCleanup(os.close, fd)
        IN_CREATE, IN_MOVED_TO = 0x100, 0x80
        self.assertGreaterEqual(libc.inotify_add_watch(fd, self.x.lab.rundir.encode(),
                                                       IN_CREATE | IN_MOVED_TO), 0)
        self.x.daemon = self.spawn_xbngd(self.x.xbngd_argv(), preexec_fn=lambda: os.umask(0))
        self.wait_serving()
        events, buf = [], b""
        with contextlib.suppress(BlockingIOError):
            while True:
                buf += os.read(fd, 65536)
        while buf:
            _wd, mask, _cookie, ln = struct.unpack_from("iIII", buf)
            name = buf[16:16 + ln].rstrip(b"\0").decode()
            events.append((mask & (IN_CREATE | IN_MOVED_TO), name))
            buf = buf[16 + ln:]
        self.assertIn((IN_MOVED_TO, "xbngd.sock"), events)
        self.assertNotIn((IN_CREATE, "xbngd.sock"), events)
        self.assertEqual(os.stat(self.x.socket_path).st_mode & 0o777, 0o600)

    # -- slow HTTP clients -------------------------------------------------------
    def test_slow_http_clients_do_not_block_scrapes(self):
        self.x.start()
        stop = threading.Event()
        slow = []
        with self.x.dut.entered():
            for _ in range(8):
                s = socket.create_connection(("127.0.0.1", 9469))
                s.sendall(b"GET /metrics HTTP/1.1\r\n")
                slow.append(s)

        def trickle():
            while not stop.is_set():
                for s in slow:
                    with contextlib.suppress(OSError):
                        s.sendall(b"X")
                stop.wait(0.5)
        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        self.addCleanup(lambda: (stop.set(), t.join(), [s.close() for s in slow]))
        for _ in range(10):
            t0 = time.monotonic()
            code, body = self.http("/metrics", timeout=4)
            self.assertEqual(code, 200)
            self.assertIn("xbng_subscribers", body)
            self.assertLess(time.monotonic() - t0, 2.0)
            time.sleep(0.3)


if __name__ == "__main__":
    unittest.main()
