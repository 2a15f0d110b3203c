"""Frames for the integration tests, built and dissected with scapy, which
serves as the independent dissector: it recomputes every checksum itself."""
from __future__ import annotations

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import (ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr,
                                ICMPv6NDOptSrcLLAddr, IPv6)
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

ETH_P_8021AD = 0x88A8
ETH_P_8021Q = 0x8100


def qinq(sub: dict, dst_mac: str, svid: int | None = None, cvid: int | None = None,
         outer_tpid: int = ETH_P_8021AD):
    eth = Ether(src=sub["mac"], dst=dst_mac)
    outer = (Dot1AD if outer_tpid == ETH_P_8021AD else Dot1Q)(vlan=svid or sub["outer_vlan"])
    if outer_tpid not in (ETH_P_8021AD, ETH_P_8021Q):
        eth.type = outer_tpid
    return eth / outer / Dot1Q(vlan=cvid or sub["inner_vlan"])


def up_v4(sub, port_mac, dst, src=None, ttl=64, payload=b"xbng-up-v4", sport=40000, dport=9):
    return qinq(sub, port_mac) / IP(src=src or sub["ipv4"], dst=dst, ttl=ttl) / \
        UDP(sport=sport, dport=dport) / Raw(payload)


def up_v6(sub, port_mac, dst, src=None, hlim=64, payload=b"xbng-up-v6", sport=40000, dport=9):
    return qinq(sub, port_mac) / IPv6(src=src or sub["ipv6"], dst=dst, hlim=hlim) / \
        UDP(sport=sport, dport=dport) / Raw(payload)


def down_v4(src_mac, dst_mac, src, dst, ttl=64, payload=b"xbng-down-v4", size=None):
    p = Ether(src=src_mac, dst=dst_mac) / IP(src=src, dst=dst, ttl=ttl) / UDP(sport=9, dport=40000)
    if size:
        payload = b"\0" * (size - len(p) + 14)
    return p / Raw(payload)


def down_v6(src_mac, dst_mac, src, dst, hlim=64, payload=b"xbng-down-v6"):
    return Ether(src=src_mac, dst=dst_mac) / IPv6(src=src, dst=dst, hlim=hlim) / \
        UDP(sport=9, dport=40000) / Raw(payload)


def arp_request(sub, target_ip, sender_ip=None):
    return qinq(sub, "ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=sub["mac"], psrc=sender_ip or sub["ipv4"],
                                                 hwdst="00:00:00:00:00:00", pdst=target_ip)


def solicited_node(addr: str) -> tuple[str, str]:
    import ipaddress
    a = ipaddress.IPv6Address(addr).packed
    mcast = ipaddress.IPv6Address(b"\xff\x02" + b"\0" * 9 + b"\x01\xff" + a[13:16])
    mac = "33:33:ff:" + ":".join(f"{b:02x}" for b in a[13:16])
    return str(mcast), mac


def neighbour_solicit(sub, target: str, src: str | None = None):
    dst_ip, dst_mac = solicited_node(target)
    return qinq(sub, dst_mac) / IPv6(src=src or "fe80::ff:fe00:1", dst=dst_ip, hlim=255) / \
        ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr=sub["mac"])


def checksums_ok(pkt) -> bool:
    """True when every checksum scapy knows in pkt equals a fresh computation."""
    fresh = pkt.__class__(bytes(pkt))
    rebuilt = fresh.copy()
    for layer_cls, field in ((IP, "chksum"), (UDP, "chksum"), (ICMP, "chksum"),
                             (ICMPv6ND_NA, "cksum"), (ICMPv6ND_NS, "cksum")):
        if rebuilt.haslayer(layer_cls):
            setattr(rebuilt[layer_cls], field, None)
    return bytes(rebuilt.__class__(bytes(rebuilt))) == bytes(fresh)


def tags(frame: bytes) -> list[tuple[int, int]]:
    """[(tpid, vid), ...] of the VLAN tags at the head of a frame."""
    out, off = [], 12
    while int.from_bytes(frame[off:off + 2], "big") in (0x8100, 0x88A8, 0x9100):
        out.append((int.from_bytes(frame[off:off + 2], "big"),
                    int.from_bytes(frame[off + 2:off + 4], "big") & 0x0FFF))
        off += 4
    return out


__all__ = ["Ether", "Dot1AD", "Dot1Q", "IP", "IPv6", "UDP", "ICMP", "ARP", "Raw",
           "ICMPv6ND_NA", "ICMPv6ND_NS", "ICMPv6NDOptDstLLAddr", "qinq", "up_v4", "up_v6",
           "down_v4", "down_v6", "arp_request", "neighbour_solicit", "checksums_ok", "tags",
           "solicited_node"]
