/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Subscriber and route lookups: exact-match hashes first, LPM tries only for
 * the rarer prefix lengths (see docs/design.md "Why hashes first"). */
#ifndef XBNG_BPF_LOOKUP_H
#define XBNG_BPF_LOOKUP_H

#include "lib/common.h"

/* A key inside a declared S-VLAN range: its slot in `direct_subscribers`
 * (the subscriber there, or null when the slot is empty), *in = 1. Else
 * *in = 0: the key is on the hash path. One array lookup (inlined by the
 * verifier) for the table, whose few entries share its lines, then at most
 * one array line. */
XBNG_INLINE struct xbng_subscriber *direct_sub_lookup(const struct xbng_sub_key *key, int *in)
{
	const __u32 zero = 0;
	struct xbng_direct_sub_table *t = bpf_map_lookup_elem(&direct_sub_ranges, &zero);

	*in = 0;
	if (!t)
		return 0;
	for (__u32 i = 0; i < XBNG_DIRECT_SUB_RANGES; i++) {
		struct xbng_subscriber *s;
		__u32 off, slot;

		if (i >= t->n)
			break;
		off = (__u32)key->outer_vid - t->r[i].first_svid;
		if (t->r[i].ifindex != key->ifindex || off >= t->r[i].n_svids)
			continue;
		*in = 1;
		slot = t->r[i].base + off * XBNG_DIRECT_SUB_CVIDS + key->inner_vid;
		s = bpf_map_lookup_elem(&direct_subscribers, &slot);
		return s && (s->flags & XBNG_SUB_F_PRESENT) ? s : 0;
	}
	return 0;
}

/* The subscriber of a key: the direct array inside the declared S-VLAN
 * ranges (an empty slot: unknown), the hash elsewhere. */
XBNG_INLINE struct xbng_subscriber *subscriber_lookup(const struct xbng_sub_key *key)
{
	struct xbng_subscriber *s;
	int in;

	s = direct_sub_lookup(key, &in);
	if (in)
		return s;
	return bpf_map_lookup_elem(&subscribers, key);
}

/* The route of a direct array's line: null for a slot without one (ifindex 0) or
 * no line at all. */
XBNG_INLINE struct xbng_route *direct_route(struct xbng_direct_route *d)
{
	return d && d->r.sub.ifindex ? &d->r : 0;
}

/* An address of a direct pool: its slot in `direct_v4` (the route there,
 * or null when the slot is empty), *in = 1. Else *in = 0: the address is on
 * the hash path. One array lookup (inlined by the verifier) for the table,
 * whose few entries share its lines, then at most one array line. */
XBNG_INLINE struct xbng_route *direct_lookup_v4(__be32 daddr, int *in)
{
	const __u32 zero = 0;
	struct xbng_direct_table *t = bpf_map_lookup_elem(&direct_pools, &zero);
	__u32 a = bpf_ntohl(daddr);

	*in = 0;
	if (!t)
		return 0;
	for (__u32 i = 0; i < XBNG_DIRECT_POOLS; i++) {
		__u32 off, slot;

		if (i >= t->n_v4)
			break;
		off = a - t->v4[i].start;
		if (off >= t->v4[i].size)
			continue;
		*in = 1;
		slot = t->v4[i].base + off;
		return direct_route(bpf_map_lookup_elem(&direct_v4, &slot));
	}
	return 0;
}

/* An address of an IPv6 direct pool: *unit = the pool's unit (64: its slots
 * hold /64s, 128: /128s) and its line in `direct_v6` (not read yet: the
 * caller reads it with direct_route(), and a /64's count of /128s). Else
 * *unit = 0: the address is on the hash path. The table as in
 * direct_lookup_v4; nothing more when it is empty. */
XBNG_INLINE struct xbng_direct_route *direct_lookup_v6(const __u32 *daddr, __u32 *unit)
{
	const __u32 zero = 0;
	struct xbng_direct_table_v6 *t = bpf_map_lookup_elem(&direct_pools_v6, &zero);
	__u64 hi, lo;

	*unit = 0;
	if (!t || !t->n)
		return 0;
	hi = ((__u64)bpf_ntohl(daddr[0]) << 32) | bpf_ntohl(daddr[1]);
	lo = ((__u64)bpf_ntohl(daddr[2]) << 32) | bpf_ntohl(daddr[3]);
	for (__u32 i = 0; i < XBNG_DIRECT_POOLS; i++) {
		struct xbng_direct_pool_v6 *p;
		__u64 off;
		__u32 slot;

		if (i >= t->n)
			break;
		p = &t->pools[i];
		if (p->unit == 128) {
			if (hi != p->hi)
				continue;
			off = lo - p->lo;
		} else {
			off = hi - p->hi;
		}
		if (off >= p->size)
			continue;
		*unit = p->unit;
		slot = p->base + (__u32)off;
		return bpf_map_lookup_elem(&direct_v6, &slot);
	}
	return 0;
}

/* Downstream IPv4: host /32 (the direct array inside its pools, the hash
 * elsewhere), then routed prefixes. `daddr` may point into the packet (hash
 * keys are read in place, no copy). */
XBNG_INLINE struct xbng_route *route_lookup_v4(const __be32 *daddr)
{
	struct xbng_lpm_v4_key k;
	struct xbng_route *r;
	int in;

	r = direct_lookup_v4(*daddr, &in);
	if (r)
		return r;
	if (!in) {
		r = bpf_map_lookup_elem(&routes_v4, daddr);
		if (r)
			return r;
	}
	k.prefixlen = 32;
	k.addr = *daddr;
	return bpf_map_lookup_elem(&prefixes_v4, &k);
}

/* Downstream IPv6: host /128, then delegated /64, then other delegations.
 * Inside a direct pool of /128s its slot stands for the /128 hash, inside a
 * pool of /64s its slot for the /64 hash, after the /128 hash (a /128 still
 * wins) only when the slot counts /128s of its /64 there (n128): otherwise
 * the line alone. An empty slot goes on to the next step. */
XBNG_INLINE struct xbng_route *route_lookup_v6(const __u32 *daddr)
{
	struct xbng_lpm_v6_key k;
	struct xbng_direct_route *d;
	struct xbng_route *r;
	__u32 unit;

	d = direct_lookup_v6(daddr, &unit);
	if (unit == 128)
		r = direct_route(d);
	else if (unit == 64 && d && !d->n128)
		r = 0;
	else
		r = bpf_map_lookup_elem(&routes_v6, daddr);
	if (r)
		return r;
	if (unit == 64)
		r = direct_route(d);
	else
		r = bpf_map_lookup_elem(&routes_v6_64, daddr); /* key = upper 64 bits */
	if (r)
		return r;
	k.prefixlen = 128;
	k.addr[0] = daddr[0];
	k.addr[1] = daddr[1];
	k.addr[2] = daddr[2];
	k.addr[3] = daddr[3];
	return bpf_map_lookup_elem(&prefixes_v6, &k);
}

/* Anti-spoofing, IPv4: the subscriber's address, or inside one of its routed
 * prefixes (the trie is only consulted for subscribers that own some). */
XBNG_INLINE int source_allowed_v4(const struct xbng_subscriber *sub, const struct xbng_sub_key *key,
				  __be32 saddr)
{
	struct xbng_lpm_v4_key k;
	struct xbng_route *r;

	if ((sub->flags & XBNG_SUB_F_HAS_IPV4) && saddr == sub->ipv4)
		return 1;
	if (!(sub->flags & XBNG_SUB_F_V4_PREFIX))
		return 0;
	k.prefixlen = 32;
	k.addr = saddr;
	r = bpf_map_lookup_elem(&prefixes_v4, &k);
	return r && sub_key_equal(&r->sub, key);
}

/* Anti-spoofing, IPv6: its /128, or inside one of its delegated prefixes
 * (/64: its slot inside a direct pool of /64s, else the hash; then the trie
 * for the other lengths). */
XBNG_INLINE int source_allowed_v6(const struct xbng_subscriber *sub, const struct xbng_sub_key *key,
				  const __u32 *saddr)
{
	struct xbng_lpm_v6_key k;
	struct xbng_direct_route *d;
	struct xbng_route *r;
	__u32 unit;

	if ((sub->flags & XBNG_SUB_F_HAS_IPV6) && ipv6_equal(saddr, sub->ipv6))
		return 1;
	if (!(sub->flags & XBNG_SUB_F_V6_PREFIX))
		return 0;
	d = direct_lookup_v6(saddr, &unit);
	if (unit == 64)
		r = direct_route(d);
	else
		r = bpf_map_lookup_elem(&routes_v6_64, saddr);
	if (r)
		return sub_key_equal(&r->sub, key);
	k.prefixlen = 128;
	k.addr[0] = saddr[0];
	k.addr[1] = saddr[1];
	k.addr[2] = saddr[2];
	k.addr[3] = saddr[3];
	r = bpf_map_lookup_elem(&prefixes_v6, &k);
	return r && sub_key_equal(&r->sub, key);
}

#endif /* XBNG_BPF_LOOKUP_H */
