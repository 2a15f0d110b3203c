"""xbngctl's failures in an operator's words: the real xbngctl against no
xbngd, a wrong --server, a socket it may not open (as user nobody), TLS
refusals of either side, an xbngd in fleet mode refusing a write, and values
refused by xbngd or by xbngctl itself. Each case checks the exact line on
stderr, the --json error fields and the exit code (xbngctl(8), EXIT STATUS:
0 ok, 1 a value refused, 2 usage, 3 xbngd unreachable)."""
import json
import os
import signal
import socket
import subprocess
import unittest

from xbnglab.etcd import EtcdCluster, FleetNode
from xbnglab.lab import sh, wait_for
from xbnglab.xbngd import XbngLab, find_pass_obj, plan

START = "start it with systemctl start xbngd, or pass --server"


class CtlErrors(unittest.TestCase):
    def setUp(self):
        self.x = XbngLab()
        self.addCleanup(self.x.close)
        sub = plan(0)
        self.key = ["--port", "acc0", "--outer", str(sub["outer_vlan"]), "--inner",
                    str(sub["inner_vlan"])]
        self.ipv4 = sub["ipv4"]

    def ctl(self, server, *args, ns=None, prefix=()):
        argv = [*prefix, self.x.xbngctl, "--server", server, *args]
        if ns:
            argv = ns.nsenter_argv(argv)
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    def assert_fails(self, r, line, rc, kind=None, **fields):
        self.assertEqual(r.returncode, rc, r.stderr)
        self.assertEqual(r.stderr, f"xbngctl: {line}\n")
        if kind:
            err = json.loads(r.stdout)["error"] if r.stdout else None
            self.assertIsNotNone(err, "no --json error object on stdout")
            self.assertEqual(err["kind"], kind)
            self.assertEqual(err["message"], line)
            self.assertEqual(err["exit_code"], rc)
            for k, v in fields.items():
                self.assertEqual(err[k], v, k)
            return err

    def every_command(self):
        """One invocation of each command that talks to xbngd."""
        f = os.path.join(self.x.lab.rundir, "one.jsonl")
        with open(f, "w") as out:
            out.write(json.dumps(plan(0)) + "\n")
        return [["stats"], ["health"], ["events", "--count", "1"],
                ["sub", "add", *self.key, "--ipv4", self.ipv4], ["sub", "get", *self.key],
                ["sub", "del", *self.key], ["sub", "list"], ["sub", "import", f],
                ["sub", "import", "--atomic", f], ["sub", "del", "--file", f]]

    # -- not running, wrong socket -----------------------------------------------
    def test_not_running_no_such_socket(self):
        srv = f"unix://{self.x.lab.rundir}/absent.sock"
        line = f"xbngd is not running at {srv} (no such socket); {START}"
        for cmd in self.every_command():
            self.assert_fails(self.ctl(srv, *cmd), line, 3)
            self.assert_fails(self.ctl(srv, "--json", *cmd), line, 3, "unreachable", server=srv,
                              cause="no such socket", code="UNAVAILABLE",
                              action=START)

    def test_wrong_socket(self):
        # A regular file at the path.
        path = os.path.join(self.x.lab.rundir, "not-a-socket")
        with open(path, "w") as f:
            f.write("x")
        srv = f"unix://{path}"
        self.assert_fails(self.ctl(srv, "--json", "stats"),
                          f"xbngd is not running at {srv} ({path} is not a socket); pass --server "
                          "with xbngd's socket (its grpc.listen)", 3, "unreachable",
                          cause="not a socket")
        # A stale socket: bound once, nobody listening any more.
        path = os.path.join(self.x.lab.rundir, "stale.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.close()
        srv = f"unix:{path}"
        self.assert_fails(self.ctl(srv, "--json", "sub", "list"),
                          f"xbngd is not running at {srv} (stale socket, nothing listening); {START}",
                          3, "unreachable", cause="stale socket, nothing listening")
        # TCP with nothing listening (in the lab's namespace).
        srv = "127.0.0.1:50999"
        self.assert_fails(self.ctl(srv, "--insecure", "--json", "stats", ns=self.x.dut),
                          f"xbngd cannot be reached at {srv} (connection refused: nothing listens "
                          f"there); start xbngd with grpc.listen {srv}, or pass --server", 3,
                          "unreachable")

    # -- permission, values, usage, deadline on a running xbngd ------------------------
    def test_running_xbngd_permission_values_usage_deadline(self):
        self.x.start()
        srv, path = self.x.grpc, self.x.socket_path
        # Permission: user nobody on the 0600 root socket.
        nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        line = (f"permission denied on {srv} (socket {path} owned by root:root, mode 0600, not "
                "writable by nobody); run as root")
        for cmd in (["stats"], ["sub", "list"], ["health"]):
            self.assert_fails(self.ctl(srv, *cmd, prefix=nobody), line, 3)
        self.assert_fails(self.ctl(srv, "--json", "stats", prefix=nobody), line, 3, "permission",
                          socket_owner="root", socket_group="root", socket_mode="0600",
                          action="run as root")

        # A value refused by xbngd: its message, field and value, without the
        # status name; the code is in the --json fields.
        r = self.ctl(srv, "--json", "sub", "add", *self.key, "--ipv4", "300.1.2.3")
        err = json.loads(r.stdout)["error"]
        self.assertEqual((err["kind"], err["code"], err["exit_code"]),
                         ("invalid_argument", "INVALID_ARGUMENT", 1))
        self.assertIn('field ipv4: "300.1.2.3" is not an IPv4 address', err["server_message"])
        self.assert_fails(r, err["server_message"], 1)
        self.assertNotIn("INVALID_ARGUMENT", r.stderr)
        self.assertNotEqual(self.ctl(srv, "sub", "get", *self.key).returncode, 0)  # nothing stored
        # A value refused by xbngctl's own check: nothing sent.
        self.assert_fails(self.ctl(srv, "--json", "sub", "add", *self.key, "--up-rate", "fast"),
                          '--up-rate "fast": not a number (k/M/G suffixes allowed)', 1,
                          "invalid_value", code=None)
        bad = os.path.join(self.x.lab.rundir, "bad.csv")
        with open(bad, "w") as f:
            f.write("port,outer_vlan,inner_vlan,mac,ipv4,ipv6,ipv6_prefixes,ipv4_prefixes\n"
                    "acc0,x,1,,,,,\n")
        r = self.ctl(srv, "sub", "import", "--atomic", bad)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.splitlines()[0], "xbngctl: 1 unreadable lines: nothing sent")
        # A refused precondition (not found): the server's message alone.
        r = self.ctl(srv, "sub", "get", *self.key)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"^xbngctl: [^\n]*acc0/\d+/\d+[^\n]*\n$")
        self.assertNotIn("NOT_FOUND", r.stderr)

        # Usage: an unknown flag, a missing argument, a missing key -> 2.
        for argv in (["stats", "--bogus"], ["sub", "get", "--port", "acc0"], ["sub", "del"],
                     ["sub", "import"], []):
            r = self.ctl(srv, *argv)
            self.assertEqual(r.returncode, 2, (argv, r.stderr))
        r = self.ctl(srv, "sub", "del", "--port", "acc0")
        self.assertEqual(r.stderr, "xbngctl: sub del: give --port, --outer and --inner, or --file\n")

        # A deadline: xbngd stopped (the kernel still accepts connections).
        self.x.daemon.send_signal(signal.SIGSTOP)
        try:
            self.assert_fails(self.ctl(srv, "--json", "health", "--timeout-ms", "700"),
                              f"xbngd at {srv} did not answer within 700 ms (deadline exceeded); "
                              "check it with systemctl status xbngd, or allow more time "
                              "(--timeout-ms)", 3, "deadline", code="DEADLINE_EXCEEDED")
        finally:
            self.x.daemon.send_signal(signal.SIGCONT)
        # Successful output unchanged.
        r = self.ctl(srv, "health")
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, f"{srv}: SERVING\n", ""))

    # -- TLS -------------------------------------------------------------------------
    def make_pki(self):
        d = os.path.join(self.x.lab.rundir, "pki")
        os.makedirs(d)

        def ossl(*a):
            sh(["openssl", *a], timeout=60)
        for ca in ("ca", "other-ca"):
            ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", f"{d}/{ca}.key", "-out", f"{d}/{ca}.pem", "-subj", f"/CN=xbng {ca}",
                 "-days", "1")
        for name, ca, ext in (("server", "ca", "subjectAltName=IP:127.0.0.1"),
                              ("client", "ca", "extendedKeyUsage=clientAuth"),
                              ("stranger", "other-ca", "extendedKeyUsage=clientAuth")):
            ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr", "-subj", f"/CN={name}")
            with open(f"{d}/{name}.ext", "w") as f:
                f.write(ext + "\n")
            ossl("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/{ca}.pem", "-CAkey",
                 f"{d}/{ca}.key", "-CAcreateserial", "-out", f"{d}/{name}.pem", "-days", "1",
                 "-extfile", f"{d}/{name}.ext")
        return d

    def test_tls_refusals(self):
        p = self.make_pki()
        srv = "127.0.0.1:50051"
        base = self.x.xbngd_argv()
        base[base.index("--grpc") + 1] = srv
        tls = ["--tls-cert", f"{p}/server.pem", "--tls-key", f"{p}/server.key",
               "--tls-client-ca", f"{p}/ca.pem"]
        self.x.daemon = self.x.lab.spawn(base + tls, log=self.x.log)
        ca = ["--tls-ca", f"{p}/ca.pem"]
        me = ["--tls-cert", f"{p}/client.pem", "--tls-key", f"{p}/client.key"]

        def tcp(*args, server=srv):
            return self.ctl(server, *args, ns=self.x.dut)
        wait_for(lambda: tcp(*ca, *me, "health").returncode == 0, 30, 0.2, "TLS xbngd")
        client_action = ("pass --tls-cert and --tls-key with a certificate signed by the CA of "
                         "xbngd's grpc.tls_client_ca")
        # xbngd refuses: no client certificate, one of another CA.
        self.assert_fails(
            tcp(*ca, "--json", "stats"),
            f"TLS: xbngd at {srv} requires a client certificate and xbngctl gave none; "
            f"{client_action}", 3, "tls", refused_by="xbngd", cause="no client certificate")
        self.assert_fails(
            tcp(*ca, "--tls-cert", f"{p}/stranger.pem", "--tls-key", f"{p}/stranger.key",
                "--json", "sub", "add", *self.key, "--ipv4", self.ipv4),
            f"TLS: xbngd at {srv} refused xbngctl's client certificate {p}/stranger.pem (not "
            f"signed by the CA of its grpc.tls_client_ca, or expired); {client_action}", 3,
            "tls", refused_by="xbngd", cause="client certificate refused")
        # xbngctl refuses: a server certificate of another CA, a name it lacks.
        r = tcp("--tls-ca", f"{p}/other-ca.pem", *me, "--json", "stats")
        why = json.loads(r.stdout)["error"]["verify_error"]  # OpenSSL's words
        self.assertIn(why, ("unable to get local issuer certificate",
                            "self-signed certificate in certificate chain"))
        self.assert_fails(
            r, f"TLS: xbngctl refused the certificate of xbngd at {srv} (unknown CA: {why}); pass "
               f"--tls-ca with the CA that signed xbngd's grpc.tls_cert ({p}/other-ca.pem did "
               "not)", 3, "tls", refused_by="xbngctl")
        self.assert_fails(  # the certificate names IP 127.0.0.1 only
            tcp(*ca, *me, "--json", "stats", server="localhost:50051"),
            "TLS: xbngctl refused the certificate of xbngd at localhost:50051 (hostname mismatch: "
            "it does not name localhost); connect with a name the certificate holds in its "
            "subjectAltName, or reissue it for localhost", 3, "tls", refused_by="xbngctl")
        # A plaintext client at a TLS server.
        self.assert_fails(
            tcp("--insecure", "--json", "stats"),
            f"TLS: xbngd at {srv} expects TLS and xbngctl spoke plaintext (--insecure); drop "
            "--insecure and pass --tls-ca (and --tls-cert, --tls-key)", 3, "tls")
        # With a good certificate it works, output unchanged.
        r = tcp(*ca, *me, "health")
        self.assertEqual((r.returncode, r.stdout), (0, f"{srv}: SERVING\n"))
        # A TLS client at a plaintext server.
        self.x.stop()
        self.x.daemon = self.x.lab.spawn(base + ["--insecure-tcp"], log=self.x.log)
        wait_for(lambda: tcp("--insecure", "health").returncode == 0, 30, 0.2, "plaintext xbngd")
        self.assert_fails(
            tcp(*ca, *me, "--json", "stats"),
            f"TLS: xbngd at {srv} speaks plaintext (started with --insecure-tcp) and xbngctl spoke "
            "TLS; pass --insecure, or give xbngd grpc.tls_cert and grpc.tls_key", 3, "tls")

    # -- fleet mode --------------------------------------------------------------------
    def test_fleet_mode_refuses_writes(self):
        lab = self.x.lab
        etcd_ns, peer = lab.netns("etcd"), lab.netns("peer")
        cluster = EtcdCluster(lab, etcd_ns, members=1)
        cluster.start()
        n1 = FleetNode(lab, 1, etcd_ns, peer, find_pass_obj())
        n1.start(members=(0,))
        prefix = "/xbng/v1/nodes/n1/subscribers/"
        line = (f"xbngd at {n1.grpc} is in fleet mode (driven from etcd, node n1) and takes no "
                f"writes over gRPC; change the subscriber in etcd instead, under {prefix} "
                "(xbngctl sub import --etcd ENDPOINTS --node n1 FILE)")
        f = os.path.join(lab.rundir, "one.jsonl")
        with open(f, "w") as out:
            out.write(json.dumps(plan(0)) + "\n")
        for cmd in (["sub", "add", *self.key, "--ipv4", self.ipv4], ["sub", "del", *self.key],
                    ["sub", "import", f], ["sub", "import", "--atomic", f],
                    ["sub", "del", "--file", f]):
            self.assert_fails(self.ctl(n1.grpc, *cmd), line, 1)
        self.assert_fails(self.ctl(n1.grpc, "--json", "sub", "add", *self.key, "--ipv4", self.ipv4),
                          line, 1, "fleet_read_only", code="FAILED_PRECONDITION",
                          fleet_node="n1", etcd_prefix=prefix)
        # Reads still work.
        self.assertEqual(self.ctl(n1.grpc, "stats").returncode, 0)


if __name__ == "__main__":
    unittest.main()
