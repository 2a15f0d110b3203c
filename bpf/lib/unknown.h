/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Frames of unprovisioned keys on a port with XBNG_PORT_F_PUNT_UNKNOWN (an
 * access port whose subscribers are authorized on demand, e.g. by RADIUS):
 * the client -> server control frames a CPE starts with (DHCPv4 to port 67,
 * DHCPv6 to port 547 at ff02::1:2 or the gateway, Router Solicitations) are
 * punted to xbngd under the same limits as every punt (per key GCRA in
 * `punt_limit`, per port window); everything else goes on to the
 * unknown-subscriber report and drop. */
#ifndef XBNG_BPF_UNKNOWN_H
#define XBNG_BPF_UNKNOWN_H

#include "lib/common.h"
#include "lib/counters.h"
#include "lib/ip.h"
#include "lib/punt.h"
#include "lib/qinq.h"

XBNG_INLINE int unknown_ipv4(const struct xbng_pkt *p, const struct xbng_sub_key *key)
{
	struct iphdr *ip = pkt_data(p) + XBNG_QINQ_HLEN;
	struct udphdr *udp;

	if ((void *)(ip + 1) > pkt_end(p))
		return XBNG_CONTINUE;
	if (ip->version != 4 || ip->ihl < 5 || ip->protocol != IPPROTO_UDP ||
	    (ip->frag_off & bpf_htons(XBNG_IP_OFFSET_MASK)))
		return XBNG_CONTINUE;
	udp = (void *)ip + (ip->ihl & 0xf) * 4;
	if ((void *)(udp + 1) > pkt_end(p))
		return XBNG_CONTINUE;
	if (udp->dest != bpf_htons(XBNG_DHCPV4_SERVER_PORT) ||
	    udp->source != bpf_htons(XBNG_DHCPV4_CLIENT_PORT))
		return XBNG_CONTINUE;
	if (ip->daddr != 0xffffffff && (!p->port->gw_ipv4 || ip->daddr != p->port->gw_ipv4))
		return XBNG_CONTINUE;
	return punt_frame(p, key, XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_UNKNOWN_DHCPV4);
}

XBNG_INLINE int unknown_ipv6(const struct xbng_pkt *p, const struct xbng_sub_key *key)
{
	struct ipv6hdr *ip6 = pkt_data(p) + XBNG_QINQ_HLEN;
	const __u32 *dst;

	if ((void *)(ip6 + 1) > pkt_end(p) || ip6->version != 6)
		return XBNG_CONTINUE;
	dst = ip6->daddr.in6_u.u6_addr32;
	if (ip6->nexthdr == IPPROTO_UDP) {
		struct udphdr *udp = (void *)(ip6 + 1);

		if ((void *)(udp + 1) > pkt_end(p) ||
		    udp->dest != bpf_htons(XBNG_DHCPV6_SERVER_PORT))
			return XBNG_CONTINUE;
		if (!ipv6_is_dhcp_servers(dst) && !ipv6_equal(dst, p->port->gw_ipv6))
			return XBNG_CONTINUE;
		return punt_frame(p, key, XBNG_PUNT_KIND_DHCPV6, XBNG_PUNT_UNKNOWN_DHCPV6);
	}
	if (ip6->nexthdr == XBNG_IPPROTO_ICMPV6) {
		__u8 *icmp = (void *)(ip6 + 1);

		if ((void *)(icmp + 4) > pkt_end(p) || icmp[0] != XBNG_ND_ROUTER_SOLICIT)
			return XBNG_CONTINUE;
		return punt_frame(p, key, XBNG_PUNT_KIND_RS, XBNG_PUNT_UNKNOWN_RS);
	}
	return XBNG_CONTINUE;
}

/* XBNG_CONTINUE: not a punt (report and drop as unknown). */
XBNG_INLINE int access_unknown(const struct xbng_pkt *p, const struct qinq *q,
			       const struct xbng_sub_key *key)
{
	if (!punt_enabled || !(p->port->flags & XBNG_PORT_F_PUNT_UNKNOWN))
		return XBNG_CONTINUE;
	if (q->l3_proto == bpf_htons(ETH_P_IP))
		return unknown_ipv4(p, key);
	if (q->l3_proto == bpf_htons(ETH_P_IPV6))
		return unknown_ipv6(p, key);
	return XBNG_CONTINUE;
}

#endif /* XBNG_BPF_UNKNOWN_H */
