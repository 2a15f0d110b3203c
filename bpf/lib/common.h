/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Shared definitions of the fast path: protocol constants, the per-packet
 * state every step receives, and the step-return convention. */
#ifndef XBNG_BPF_COMMON_H
#define XBNG_BPF_COMMON_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "lib/maps.h"
#include "lib/trace.h"

#define XBNG_INLINE static __always_inline

/* A step returns XBNG_CONTINUE to let the next step run, or the XDP action
 * the packet ends with (already counted). */
#define XBNG_CONTINUE (-1)

#define XBNG_QINQ_HLEN 22 /* Ethernet + two tags, up to the inner ethertype */
#define XBNG_QINQ_TAGS_LEN 8

#define XBNG_ETH_P_ARP 0x0806
#define XBNG_IPPROTO_ICMPV6 58
#define XBNG_AF_INET 2	 /* AF_INET: no libc socket headers in BPF */
#define XBNG_AF_INET6 10 /* AF_INET6 */

/* ICMPv6 types handled on the access side (RFC 4861). */
#define XBNG_ND_ROUTER_SOLICIT 133
#define XBNG_ND_ROUTER_ADVERT 134
#define XBNG_ND_NEIGH_SOLICIT 135
#define XBNG_ND_NEIGH_ADVERT 136
#define XBNG_ND_REDIRECT 137

struct vlan_tag {
	__be16 tci;
	__be16 next_proto; /* TPID of the next tag or the ethertype */
};

/* Per-packet state, on the stack of the entry program. */
struct xbng_pkt {
	struct xdp_md *ctx;
	struct xbng_port *port; /* ingress port configuration */
	__u32 len;		/* frame length as received */
	__u32 ifindex;		/* ingress ifindex */
};

XBNG_INLINE void *pkt_data(const struct xbng_pkt *p)
{
	return (void *)(long)p->ctx->data;
}

XBNG_INLINE void *pkt_end(const struct xbng_pkt *p)
{
	return (void *)(long)p->ctx->data_end;
}

/* 6-byte MAC compare/copy as three 16-bit words: every MAC we touch sits at
 * an even offset (packet, map value or stack), and the verifier requires
 * aligned stack accesses. */
XBNG_INLINE int mac_equal(const __u8 *a, const __u8 *b)
{
	const __u16 *x = (const __u16 *)a, *y = (const __u16 *)b;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2])) == 0;
}

XBNG_INLINE void mac_copy(__u8 *dst, const __u8 *src)
{
	__u16 *d = (__u16 *)dst;
	const __u16 *s = (const __u16 *)src;

	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
}

XBNG_INLINE int sub_key_equal(const struct xbng_sub_key *a, const struct xbng_sub_key *b)
{
	return a->ifindex == b->ifindex && a->outer_vid == b->outer_vid &&
	       a->inner_vid == b->inner_vid;
}

XBNG_INLINE int ipv6_equal(const __u32 *a, const __u32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

#endif /* XBNG_BPF_COMMON_H */
