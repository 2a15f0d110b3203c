/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* ICMPv6 on the access side: Neighbour Solicitations for the gateway
 * (fe80::1 or the port's global address) are answered with a Neighbour
 * Advertisement; the rest of ND is dropped and counted by kind. */
#ifndef XBNG_BPF_ND_H
#define XBNG_BPF_ND_H

#include "lib/common.h"
#include "lib/counters.h"
#include "lib/csum.h"
#include "lib/punt.h"

struct nd_solicit {
	__u8 type;
	__u8 code;
	__be16 csum;
	__be32 reserved;
	__u32 target[4];
};

/* The advertisement we send: one option, target link-layer address. */
struct nd_advert {
	__u8 type;
	__u8 code;
	__be16 csum;
	__be32 flags;
	__u32 target[4];
	__u8 opt_type;
	__u8 opt_len; /* units of 8 bytes */
	__u8 opt_mac[6];
};

#define XBNG_NA_ROUTER 0x80000000u
#define XBNG_NA_SOLICITED 0x40000000u
#define XBNG_NA_OVERRIDE 0x20000000u
#define XBNG_ND_OPT_TARGET_LLADDR 2
#define XBNG_NA_FRAME_LEN (XBNG_QINQ_HLEN + sizeof(struct ipv6hdr) + sizeof(struct nd_advert))

XBNG_INLINE int ipv6_is_unspecified(const __u32 *a)
{
	return (a[0] | a[1] | a[2] | a[3]) == 0;
}

/* fe80::1, or the port's global gateway when it has one. */
XBNG_INLINE int nd_target_is_gateway(const struct xbng_port *port, const __u32 *t)
{
	if (t[0] == bpf_htonl(0xfe800000) && t[1] == 0 && t[2] == 0 && t[3] == bpf_htonl(1))
		return 1;
	return !ipv6_is_unspecified(port->gw_ipv6) && ipv6_equal(t, port->gw_ipv6);
}

/* Rewrites the solicitation into the advertisement, in place, tags kept. The
 * frame is resized to exactly the advertisement (the solicitation may have
 * had no option, or more than one). */
XBNG_INLINE int nd_answer_solicit(const struct xbng_pkt *p, struct ethhdr *eth, struct ipv6hdr *ip6)
{
	void *data, *end = pkt_end(p);
	struct nd_solicit *ns = (void *)(ip6 + 1);
	struct nd_advert *na;
	__u32 target[4], solicitor[4];
	__u16 solicitor_mac[3];
	__u64 sum;
	__u32 *w;

	if ((void *)(ns + 1) > end)
		return drop(p, XBNG_DROP_TRUNCATED);
	/* RFC 4861 7.1.1: hop limit 255, code 0. Solicitations from the
	 * unspecified address are DAD probes: the gateway address is not
	 * defended on a subscriber's VLAN. */
	if (ip6->hop_limit != 255 || ns->code != 0)
		return drop(p, XBNG_DROP_ND_OTHER);
	if (ipv6_is_unspecified(ip6->saddr.in6_u.u6_addr32))
		return drop(p, XBNG_DROP_ND_OTHER);
	if (!nd_target_is_gateway(p->port, ns->target))
		return drop(p, XBNG_DROP_ND_OTHER);

	__builtin_memcpy(target, ns->target, 16);
	__builtin_memcpy(solicitor, ip6->saddr.in6_u.u6_addr32, 16);
	mac_copy((__u8 *)solicitor_mac, eth->h_source);

	if (bpf_xdp_adjust_tail(p->ctx, (int)XBNG_NA_FRAME_LEN - (int)p->len))
		return drop(p, XBNG_DROP_INTERNAL);
	data = (void *)(long)p->ctx->data;
	end = (void *)(long)p->ctx->data_end;
	if (data + XBNG_NA_FRAME_LEN > end)
		return drop(p, XBNG_DROP_INTERNAL);

	eth = data;
	mac_copy(eth->h_dest, (__u8 *)solicitor_mac);
	mac_copy(eth->h_source, p->port->mac);

	ip6 = data + XBNG_QINQ_HLEN;
	*(__be32 *)ip6 = bpf_htonl(0x60000000); /* version 6, class 0, flow 0 */
	ip6->payload_len = bpf_htons(sizeof(struct nd_advert));
	ip6->nexthdr = XBNG_IPPROTO_ICMPV6;
	ip6->hop_limit = 255;
	__builtin_memcpy(ip6->saddr.in6_u.u6_addr32, target, 16);
	__builtin_memcpy(ip6->daddr.in6_u.u6_addr32, solicitor, 16);

	na = (void *)(ip6 + 1);
	na->type = XBNG_ND_NEIGH_ADVERT;
	na->code = 0;
	na->csum = 0;
	na->flags = bpf_htonl(XBNG_NA_ROUTER | XBNG_NA_SOLICITED | XBNG_NA_OVERRIDE);
	__builtin_memcpy(na->target, target, 16);
	na->opt_type = XBNG_ND_OPT_TARGET_LLADDR;
	na->opt_len = 1;
	mac_copy(na->opt_mac, p->port->mac);

	/* Pseudo-header (addresses, upper-layer length, next header) + body. */
	sum = csum_add_ipv6(0, target);
	sum = csum_add_ipv6(sum, solicitor);
	sum += bpf_htonl(sizeof(struct nd_advert)) + bpf_htonl(XBNG_IPPROTO_ICMPV6);
	w = (__u32 *)na;
	sum += (__u64)w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + w[6] + w[7];
	na->csum = csum_fold(sum);

	port_tx(p->port->slot, XBNG_NA_FRAME_LEN);
	return verdict(p, XBNG_TX_NEIGH_ADVERT, XDP_TX);
}

/* Neighbour Discovery and Router Solicitations end here; other ICMPv6
 * (echo, errors) continues as data. */
XBNG_INLINE int access_icmpv6(const struct xbng_pkt *p, struct ethhdr *eth, struct ipv6hdr *ip6,
			      const struct xbng_sub_key *key)
{
	__u8 *icmp = (void *)(ip6 + 1);

	if ((void *)(icmp + 4) > pkt_end(p))
		return drop(p, XBNG_DROP_TRUNCATED);
	switch (icmp[0]) {
	case XBNG_ND_ROUTER_SOLICIT:
		/* xbngd validates the RS (hop limit, options) and answers. */
		if (!punt_enabled)
			return drop(p, XBNG_DROP_ROUTER_SOLICIT);
		return punt_frame(p, key, XBNG_PUNT_KIND_RS, XBNG_PUNT_ROUTER_SOLICIT);
	case XBNG_ND_NEIGH_SOLICIT:
		return nd_answer_solicit(p, eth, ip6);
	case XBNG_ND_ROUTER_ADVERT:
	case XBNG_ND_NEIGH_ADVERT:
	case XBNG_ND_REDIRECT:
		return drop(p, XBNG_DROP_ND_OTHER);
	}
	return XBNG_CONTINUE;
}

#endif /* XBNG_BPF_ND_H */
