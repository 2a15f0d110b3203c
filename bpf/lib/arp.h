/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Proxy ARP for the unnumbered gateway: a subscriber's request for any
 * address but its own is answered with the port MAC, on the same VLANs. */
#ifndef XBNG_BPF_ARP_H
#define XBNG_BPF_ARP_H

#include "lib/common.h"
#include "lib/counters.h"
#include "lib/macpolicy.h"

#define XBNG_ARPHRD_ETHER 1
#define XBNG_ARPOP_REQUEST 1
#define XBNG_ARPOP_REPLY 2

/* ARP for Ethernet/IPv4 (RFC 826), as on the wire. */
struct arp_eth_ipv4 {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[6];
	__be32 spa;
	__u8 tha[6];
	__be32 tpa;
} __attribute__((packed));

XBNG_INLINE int access_arp(const struct xbng_pkt *p, struct xbng_subscriber *sub,
			   const struct xbng_sub_key *key)
{
	void *data = pkt_data(p), *end = pkt_end(p);
	struct ethhdr *eth = data;
	struct arp_eth_ipv4 *arp = data + XBNG_QINQ_HLEN;
	__u16 requester_mac[3];
	__be32 requester_ip, target_ip;

	if ((void *)(arp + 1) > end)
		return drop(p, XBNG_DROP_TRUNCATED);
	if (arp->htype != bpf_htons(XBNG_ARPHRD_ETHER) || arp->ptype != bpf_htons(ETH_P_IP) ||
	    arp->hlen != 6 || arp->plen != 4 || arp->op != bpf_htons(XBNG_ARPOP_REQUEST))
		return drop(p, XBNG_DROP_ARP_OTHER);

	requester_ip = arp->spa;
	target_ip = arp->tpa;
	if (!(sub->flags & XBNG_SUB_F_HAS_IPV4) || requester_ip != sub->ipv4)
		return drop(p, XBNG_DROP_ARP_SPOOFED);
	mac_track(p, sub, key, eth->h_source);
	if (target_ip == sub->ipv4)
		return drop(p, XBNG_DROP_ARP_OWN_ADDRESS);

	/* Reply in place: tags and any padding stay as received. */
	mac_copy((__u8 *)requester_mac, arp->sha);
	mac_copy(eth->h_dest, eth->h_source);
	mac_copy(eth->h_source, p->port->mac);
	arp->op = bpf_htons(XBNG_ARPOP_REPLY);
	mac_copy(arp->tha, (__u8 *)requester_mac);
	arp->tpa = requester_ip;
	mac_copy(arp->sha, p->port->mac);
	arp->spa = target_ip;

	port_tx(p->port->slot, p->len);
	return verdict(p, XBNG_TX_ARP_REPLY, XDP_TX);
}

#endif /* XBNG_BPF_ARP_H */
