/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Internet checksum helpers (RFC 1071/1624). Sums are over words loaded in
 * host order from network-order bytes; the one's complement sum is byte-order
 * independent, so the folded result is stored back as loaded. */
#ifndef XBNG_BPF_CSUM_H
#define XBNG_BPF_CSUM_H

#include "lib/common.h"

XBNG_INLINE __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Adds the four 32-bit words of an IPv6 address. */
XBNG_INLINE __u64 csum_add_ipv6(__u64 sum, const __u32 *a)
{
	return sum + a[0] + a[1] + a[2] + a[3];
}

/* Decrements the IPv4 TTL and patches the header checksum incrementally
 * (the TTL is the high byte of the 16-bit word it shares with protocol). */
XBNG_INLINE void ipv4_decrement_ttl(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__u16)(check + (check >= 0xffff));
	ip->ttl--;
}

/* RFC 1624 eqn. 3: the checksum `check` after one 16-bit word of the data
 * it covers changes from `from` to `to` (all three as loaded from memory). */
XBNG_INLINE __u16 csum_replace16(__u16 check, __u16 from, __u16 to)
{
	__u32 sum = (__u16)~check + (__u16)~from + (__u32)to;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

#endif /* XBNG_BPF_CSUM_H */
