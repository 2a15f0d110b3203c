"""The suite base classes: one lab shared by every test of a TestCase class.

A suite overrides ``setUpLab`` (a classmethod) for what it builds on the lab
(``cls.x``, an XbngLab). The lab is made first and closed after the class's
last test, or as soon as setUpLab (or the lab's own construction) fails: a
class cleanup, which unittest runs on both paths, so a suite has no
try/except of its own and no tearDownClass.
"""
from __future__ import annotations

import unittest

from xbnglab.bringup import ACCESS_PORT, BringupLab
from xbnglab.etcd import EtcdCluster
from xbnglab.xbngd import XbngLab


class LabSuite(unittest.TestCase):
    """cls.x: the standard lab (sub <-> dut <-> net), xbngd not started."""

    @classmethod
    def make_lab(cls):
        """Makes the class's lab, sets its attributes; returns what close() ends."""
        cls.x = XbngLab()
        return cls.x

    @classmethod
    def setUpLab(cls) -> None:
        """What the suite builds on its lab before its first test."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.addClassCleanup(cls.make_lab().close)
        cls.setUpLab()

    # -- what several suites do in setUpLab -----------------------------------------
    @classmethod
    def provision(cls, subs) -> dict:
        """Imports subs through xbngctl; all of them must be applied."""
        subs = list(subs)
        out, _ = cls.x.import_subs(subs)
        assert int(out.get("applied", 0)) == len(subs), out
        return out

    @classmethod
    def open_ports(cls) -> None:
        """cls.acc_mac, upl_mac (dut), n0_mac (net), and packet sockets on the
        access (sub_sock, s0) and uplink (net_sock, n0) sides; the uplink
        neighbours resolved first."""
        x = cls.x
        x.resolve_uplink_neighbours()
        cls.acc_mac = x.dut.mac("acc0")
        cls.upl_mac = x.dut.mac("upl0")
        cls.n0_mac = x.net.mac("n0")
        cls.sub_sock = x.sub.packet_socket("s0")
        cls.net_sock = x.net.packet_socket("n0")

    @classmethod
    def start_etcd(cls, members: int = 3) -> EtcdCluster:
        """cls.cluster: an etcd cluster started in namespace cls.etcd_ns of the
        lab, beside cls.peer (the uplink peers of the fleet nodes)."""
        lab = cls.x.lab
        cls.etcd_ns, cls.peer = lab.netns("etcd"), lab.netns("peer")
        cls.cluster = EtcdCluster(lab, cls.etcd_ns, members=members)
        cls.cluster.start()
        return cls.cluster


class BringupSuite(LabSuite):
    """cls.b: a BringupLab on the xbngd config DHCP_TOML, xbngd started;
    cls.x is its XbngLab."""

    DHCP_TOML = ""
    ACCESS_PORT = ACCESS_PORT  # the [ports] access table of acc0

    @classmethod
    def make_lab(cls):
        cls.b = BringupLab(cls.DHCP_TOML, cls.ACCESS_PORT)
        cls.x = cls.b.x
        return cls.b
