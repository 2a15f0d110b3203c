"""CPE emulators on an XbngLab: each CPE is a namespace whose veth pushes and
pops its subscriber's two tags with TC BPF (cpe_egress/cpe_ingress.bpf.c; the
kernel has no VLAN module), bridged onto the access veth s0 in `sub`. The
CPE kernels resolve the gateway with real ARP and ND (answered by xbng)."""
import hashlib
import os
import socket
import threading

from xbnglab.xbngd import GW4, UPLINK_NET4, UPLINK_NET6, XbngLab, plan


def cpe_sub(i: int, base: int = 0) -> dict:
    """Subscriber base + i of the plan (two C-VIDs per S-VID), with the MAC
    the CPE emulator derives its tags from (02:cc:SS:SS:CC:CC)."""
    s = plan(base + i, c_per_s=2)
    s["mac"] = "02:cc:%02x:%02x:%02x:%02x" % (s["outer_vlan"] >> 8, s["outer_vlan"] & 0xFF,
                                               s["inner_vlan"] >> 8, s["inner_vlan"] & 0xFF)
    return s


def make_bridge(x: XbngLab, link_mtu: int | None = None) -> None:
    """br0 in `sub` with s0 in it. link_mtu raises s0 (the CPE side of the
    access link: baby giants, as a real access network carries)."""
    if link_mtu:
        x.sub.ip("link", "set", "dev", "s0", "mtu", str(link_mtu))
    x.sub.ip("link", "add", "br0", "type", "bridge")
    x.sub.ip("link", "set", "s0", "master", "br0")
    x.sub.ip("link", "set", "br0", "up")
    x.sub.sysctl("net.ipv6.conf.br0.disable_ipv6", "1")
    # The bridge moves a frame's outer tag into skb metadata on receive;
    # with TX VLAN offload off, s0 writes it back into the frame before
    # xbng's XDP program (which sees only frame bytes) gets it.
    x.sub.exec(["ethtool", "-K", "s0", "txvlan", "off", "tx-vlan-stag-hw-insert", "off"])


def add_cpe(x: XbngLab, i: int, s: dict, ip_mtu: int, link_mtu: int | None = None):
    """CPE namespace cpe<i> for subscriber s: its IP routes use ip_mtu; its
    veth (both ends) link_mtu when given (ip_mtu + 8 carries the tags)."""
    ns = x.lab.netns(f"cpe{i}")
    x.lab.veth(ns, "c0", x.sub, f"cpe{i}", mtu=link_mtu)
    x.sub.ip("link", "set", f"cpe{i}", "master", "br0")
    ns.ip("link", "set", "c0", "address", s["mac"])
    # veth hands TCP/UDP to its peer with the checksum still to be filled in
    # (CHECKSUM_PARTIAL); XDP forwards frame bytes and that promise is lost
    # on the way. Real NICs fill it; here the kernels must.
    ns.exec(["ethtool", "-K", "c0", "tx", "off"])
    ns.exec(["tc", "qdisc", "add", "dev", "c0", "clsact"])
    ns.exec(["tc", "filter", "add", "dev", "c0", "egress", "bpf", "da", "obj",
             os.environ["XBNG_CPE_EGRESS_OBJ"], "sec", "tc"])
    ns.exec(["tc", "filter", "add", "dev", "c0", "ingress", "bpf", "da", "obj",
             os.environ["XBNG_CPE_INGRESS_OBJ"], "sec", "tc"])
    ns.ip("addr", "add", f"{s['ipv4']}/32", "dev", "c0")
    ns.ip("route", "add", GW4, "dev", "c0", "mtu", str(ip_mtu))
    ns.ip("route", "add", "default", "via", GW4, "dev", "c0", "mtu", str(ip_mtu),
          "advmss", str(ip_mtu - 40))
    ns.ip("-6", "addr", "add", f"{s['ipv6']}/128", "dev", "c0", "nodad")
    # replace, not add: an RA of xbng's may have installed the default
    # route already (the link is up), sooner or later as the machine allows.
    ns.ip("-6", "route", "replace", "default", "via", "fe80::1", "dev", "c0", "mtu", str(ip_mtu),
          "advmss", str(ip_mtu - 60))
    return ns


def make_cpes(x: XbngLab, subs, ip_mtu: int = 1492) -> list:
    """br0 and one CPE namespace per subscriber (cpe<i>); returns the namespaces."""
    make_bridge(x)
    return [add_cpe(x, i, s, ip_mtu) for i, s in enumerate(subs)]


def warm(cpes) -> None:
    """One ping from each CPE to net, IPv4 and IPv6: the gateway's ARP/ND
    entries made and the path through xbng warm before anything is timed."""
    for ns in cpes:
        ns.exec(["ping", "-c1", "-W2", UPLINK_NET4], check=False)
        ns.exec(["ping", "-6", "-c1", "-W2", UPLINK_NET6], check=False)


def tcp_transfer(test, server_ns, client_ns, server_addr, family, size=4 << 20):
    """Moves `size` random bytes client -> server over TCP; asserts they arrive intact."""
    data = os.urandom(size)
    with server_ns.entered():
        srv = socket.socket(family, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((server_addr, 0))
        srv.listen(1)
    port = srv.getsockname()[1]
    received = hashlib.sha256()
    count = [0]

    def serve():
        srv.settimeout(20)
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            return
        conn.settimeout(20)
        while True:
            try:
                chunk = conn.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            received.update(chunk)
            count[0] += len(chunk)
        conn.close()
    t = threading.Thread(target=serve)
    t.start()
    with client_ns.entered():
        cli = socket.socket(family, socket.SOCK_STREAM)
    cli.settimeout(20)
    try:
        cli.connect((server_addr, port))
        cli.sendall(data)
    finally:
        cli.close()
        t.join(30)
        srv.close()
    test.assertEqual(count[0], size)
    test.assertEqual(received.hexdigest(), hashlib.sha256(data).hexdigest())
