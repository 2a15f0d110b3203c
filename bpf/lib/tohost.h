/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Frames from subscribers for the host itself. bpf_fib_lookup
 * answers NOT_FWDED for a destination the kernel would deliver locally (an
 * address of the host, a subnet broadcast): those reach the host's own
 * services (SSH, BGP, the metrics port) only when the operator allowed
 * them in `local_allow` by protocol and destination port; the rest is
 * dropped as DROP_TO_HOST. What xbng answers itself (ARP, ND) never gets
 * this far. */
#ifndef XBNG_BPF_TOHOST_H
#define XBNG_BPF_TOHOST_H

#include "lib/common.h"
#include "lib/counters.h"
#include "lib/ip.h"

#define XBNG_IPPROTO_TCP 6
#define XBNG_IPPROTO_UDP 17
#define XBNG_IPPROTO_SCTP 132

XBNG_INLINE int l4_has_ports(__u8 proto)
{
	return proto == XBNG_IPPROTO_TCP || proto == XBNG_IPPROTO_UDP || proto == XBNG_IPPROTO_SCTP;
}

/* Returns XBNG_CONTINUE when `local_allow` lets the frame through, else
 * the counted drop. `l3` is the validated IPv4 or IPv6 header. IPv6
 * extension headers are not walked: the next header is the protocol. */
XBNG_INLINE int to_host_allowed(const struct xbng_pkt *p, void *l3, int is_v4)
{
	struct xbng_local_svc k = {};
	void *l4;

	if (is_v4) {
		struct iphdr *ip = l3;

		k.proto = ip->protocol;
		l4 = l3 + (ip->ihl & 0xf) * 4;
		if (ip->frag_off & bpf_htons(XBNG_IP_OFFSET_MASK))
			l4 = NULL; /* no L4 header in a later fragment */
	} else {
		k.proto = ((struct ipv6hdr *)l3)->nexthdr;
		l4 = l3 + sizeof(struct ipv6hdr);
	}
	if (l4 && l4_has_ports(k.proto)) {
		__be16 *ports = l4;

		if ((void *)(ports + 2) > pkt_end(p))
			return drop(p, XBNG_DROP_TRUNCATED);
		k.port = bpf_ntohs(ports[1]);
		if (bpf_map_lookup_elem(&local_allow, &k))
			return XBNG_CONTINUE;
		k.port = 0;
	}
	if (bpf_map_lookup_elem(&local_allow, &k))
		return XBNG_CONTINUE;
	return drop(p, XBNG_DROP_TO_HOST);
}

#endif /* XBNG_BPF_TOHOST_H */
