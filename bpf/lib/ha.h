/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* High availability: a member of a group acts active only while its agent
 * keeps the deadline in the port entry (xbng_port.ha_deadline_ns) in the
 * future. A standby, or an active whose agent died or froze, drops
 * subscriber traffic both ways (DROP_STANDBY) and answers nothing on the
 * access side; on the uplink it lets the kernel's own traffic through but
 * not ARP/ND for the group's VIPs, so that the kernel of a dead agent's node
 * stops claiming them. See docs/fleet.md "High availability". */
#ifndef XBNG_BPF_HA_H
#define XBNG_BPF_HA_H

#include "lib/common.h"
#include "lib/counters.h"

/* True when the node must not act active. Without an HA group the deadline
 * is 0: one test of a field in the line that `role` was read from. */
XBNG_INLINE int ha_standby(const struct xbng_port *port)
{
	__u64 deadline = port->ha_deadline_ns;

	return deadline != XBNG_HA_ALWAYS_ACTIVE && bpf_ktime_get_ns() >= deadline;
}

struct ha_arp_ipv4 {
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

/* Uplink, not active: an ARP request for the IPv4 VIP is dropped. */
XBNG_INLINE int ha_uplink_arp(const struct xbng_pkt *p)
{
	struct ha_arp_ipv4 *arp = pkt_data(p) + sizeof(struct ethhdr);

	if ((void *)(arp + 1) > pkt_end(p))
		return XBNG_CONTINUE;
	if (p->port->gw_ipv4 && arp->tpa == p->port->gw_ipv4 && ha_standby(p->port))
		return drop(p, XBNG_DROP_STANDBY);
	return XBNG_CONTINUE;
}

/* Uplink, not active: a neighbour solicitation for the IPv6 VIP is dropped
 * (`ip6` is addressed to the host, not a subscriber). */
XBNG_INLINE int ha_uplink_ns(const struct xbng_pkt *p, struct ipv6hdr *ip6)
{
	__u8 *icmp = (__u8 *)(ip6 + 1);
	__u32 *target = (__u32 *)(icmp + 8);
	const __u32 *vip = p->port->gw_ipv6;

	if (ip6->nexthdr != XBNG_IPPROTO_ICMPV6 || (void *)(target + 4) > pkt_end(p))
		return XBNG_CONTINUE;
	if (icmp[0] != XBNG_ND_NEIGH_SOLICIT || !(vip[0] | vip[1] | vip[2] | vip[3]))
		return XBNG_CONTINUE;
	if (ipv6_equal(target, vip) && ha_standby(p->port))
		return drop(p, XBNG_DROP_STANDBY);
	return XBNG_CONTINUE;
}

#endif /* XBNG_BPF_HA_H */
