"""FreeRADIUS (Debian's freeradius 3.2) in a lab namespace, from a config
directory the test writes under the lab's run dir: a copy of the packaged
/etc/freeradius/3.0 with the test's clients.conf and users file, run as
root (no user switch) with its run and log dirs in the copy, and
Message-Authenticator added to every Access-Accept and Access-Reject
(FreeRADIUS 3.2.1 does not send it unless told to; xbng requires it by
default). Started in the foreground (-X) and stopped by PID; the directory
goes with the lab's run dir."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

from xbnglab.lab import Netns, read_text, wait_for

PACKAGED = "/etc/freeradius/3.0"
MA_REPLY = "\tupdate reply {\n\t\t&Message-Authenticator := 0x00\n\t}\n"


def detail_records(path_glob: str) -> list[dict]:
    """Every request of FreeRADIUS detail files, in order: {attribute: value}."""
    out = []
    for path in sorted(glob.glob(path_glob)):
        for block in read_text(path).split("\n\n"):
            rec = {}
            for line in block.splitlines()[1:]:
                if " = " in line:
                    k, v = line.strip().split(" = ", 1)
                    rec[k] = v.strip('"')
            if rec:
                out.append(rec)
    return out


def octets(rec: dict, direction: str) -> int:
    """Acct-{Input,Output}-Octets of an accounting record, with its Gigawords."""
    return (int(rec.get(f"Acct-{direction}-Gigawords", 0)) << 32) + \
        int(rec.get(f"Acct-{direction}-Octets", 0))


def user_name(s: dict, port: str = "acc0") -> str:
    """xbngd's default User-Name for subscriber plan s: {port}:{svlan}:{cvlan}."""
    return f"{port}:{s['outer_vlan']}:{s['inner_vlan']}"


class FreeRadius:
    def __init__(self, lab, ns: Netns, clients: list[tuple[str, str]], users: str,
                 name: str = "freeradius"):
        """clients: (address, secret) of each NAS; users: the `files`
        module's users file (mods-config/files/authorize)."""
        self.lab, self.ns = lab, ns
        self.dir = os.path.join(lab.rundir, name)
        self.raddb = os.path.join(self.dir, "raddb")
        self.log = os.path.join(self.dir, "radiusd.log")
        self.proc: subprocess.Popen | None = None
        shutil.copytree(PACKAGED, self.raddb, symlinks=False)
        for d in ("run", "log"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        conf = os.path.join(self.raddb, "radiusd.conf")
        text = read_text(conf)
        text = text.replace("\tuser = freerad\n", "").replace("\tgroup = freerad\n", "")
        text = text.replace("run_dir = ${localstatedir}/run/${name}",
                            f"run_dir = {self.dir}/run")
        text = text.replace("logdir = /var/log/freeradius", f"logdir = {self.dir}/log")
        with open(conf, "w") as f:
            f.write(text)
        with open(os.path.join(self.raddb, "clients.conf"), "w") as f:
            for i, (addr, secret) in enumerate(clients):
                f.write(f"client nas{i} {{\n\tipaddr = {addr}\n\tsecret = {secret}\n}}\n")
        self.write_users(users)
        site = os.path.join(self.raddb, "sites-enabled", "default")
        text = read_text(site)
        text = text.replace("post-auth {", "post-auth {\n" + MA_REPLY, 1)
        text = text.replace("Post-Auth-Type REJECT {", "Post-Auth-Type REJECT {\n" + MA_REPLY, 1)
        with open(site, "w") as f:
            f.write(text)

    def write_users(self, users: str) -> None:
        with open(os.path.join(self.raddb, "mods-config", "files", "authorize"), "w") as f:
            f.write(users)

    def start(self, timeout: float = 20) -> None:
        self.proc = self.lab.spawn(self.ns.nsenter_argv(["freeradius", "-X", "-d", self.raddb]),
                                   log=self.log)
        wait_for(lambda: "Ready to process requests" in self.read_log() or
                 self.proc.poll() is not None, timeout=timeout, what="freeradius ready")
        assert self.proc.poll() is None, "freeradius exited:\n" + self.read_log()[-4000:]

    @property
    def detail_glob(self) -> str:
        """The detail files the default site writes each Accounting-Request to."""
        return os.path.join(self.dir, "log", "radacct", "*", "detail-*")

    def accounting(self) -> list[dict]:
        """Every Accounting-Request received so far, in order."""
        return detail_records(self.detail_glob)

    def radclient(self, dst: str, kind: str, secret: str, attrs: str) -> str:
        """Debian's radclient, from this server's namespace, sends one
        request of `kind` (coa, disconnect, ...) to dst (HOST:PORT); its output."""
        r = subprocess.run(self.ns.nsenter_argv(["radclient", "-x", "-r", "1", "-t", "3",
                                                 dst, kind, secret]),
                           input=attrs + "\n", capture_output=True, text=True, timeout=20)
        return r.stdout + r.stderr

    def read_log(self) -> str:
        try:
            return read_text(self.log)
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.lab.stop(self.proc)
        self.proc = None
