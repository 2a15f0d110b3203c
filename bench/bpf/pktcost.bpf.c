// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Benchmark harness programs (per-packet cost and veth forwarding).
 *
 * `wrapper` is a template-restoring XDP program: BPF_PROG_TEST_RUN with
 * repeat > 1 does not restore the frame between repetitions, and a program
 * that pops or pushes tags would otherwise see its own output from the second
 * repetition on. Per repetition the wrapper
 *   1. undoes the head adjustment the previous run left (frame length differs
 *      from the template's by the tags popped or pushed),
 *   2. rewrites the whole frame from `tmpl`,
 *   3. picks a subscriber index (fixed, or bpf_get_prandom_u32() % nkeys) and
 *      writes the keys that index implies (pc_mode),
 *   4. tail-calls the program under test from `progs` (or, as a traffic
 *      generator with live frames, returns `out_action`, e.g. XDP_TX).
 * The reference programs are tail-called the same way, over the same keys.
 * xdp_sink counts and drops (the far end of the veth forwarding benchmark).
 *
 * Configuration lives in .bss: the C++ driver writes it through the
 * skeleton's mmap between runs.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "xbng/abi.h"
#include "lib/bucket.h"
#include "pktcost.h"

/* ---- configuration (written by user space between runs) ------------------ */
__u8 tmpl[PC_TMPL_MAX];
__u32 tmpl_len;
__u32 mode;	   /* enum pc_mode */
__u32 nkeys;	   /* subscribers: the random index is uniform over [0, nkeys) */
__u32 random_keys; /* 0: index = fixed_index; 1: random */
__u32 fixed_index;
__u32 use_tail;	  /* 1: tail-call progs[target]; 0: return out_action */
__u32 target;	  /* enum pc_slot */
__u32 out_action; /* generator mode: XDP_TX */

/* ---- maps -------------------------------------------------------------------- */
/* Programs under test (xbng's entry points, references); filled by the driver. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, PC_SLOT_MAX);
	__type(key, __u32);
	__type(value, __u32);
} progs SEC(".maps");

/* Redirect target of the references: key 0 -> egress ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ref_tx SEC(".maps");

/* Same keys (IPv4 /32 of each subscriber) and value type as xbng's routes_v4;
 * resized to N before load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __be32);
	__type(value, struct xbng_route);
} ref_hash_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct xbng_lpm_v4_key);
	__type(value, struct xbng_route);
} ref_lpm_map SEC(".maps");

/* Rate-plan references, resized to N before load: routes with their own
 * bucket (same keys as ref_hash_map), per-subscriber entries by slot, and
 * subscribers by key with the downstream bucket in the entry. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __be32);
	__type(value, struct pc_route_bkt);
} ref_route_bkt_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct xbng_police);
} ref_police_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct xbng_sub_key);
	__type(value, struct pc_sub_bkt);
} ref_sub_map SEC(".maps");

/* Subscriber-keyed references (--steps; else 1 entry each). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct xbng_sub_key);
	__type(value, struct pc_sub_v40);
} ref_sub40_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct xbng_sub_key);
	__type(value, struct xbng_subscriber);
} ref_sub64_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct xbng_sub_key);
	__type(value, struct pc_sub_v72);
} ref_sub72_map SEC(".maps");

/* [0] reference lookups that missed (must stay 0), [1] sink frames. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

#define PC_CNT_REF_MISS 0
#define PC_CNT_SINK 1

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	if (c)
		*c += 1;
}

/* ---- key writing ------------------------------------------------------------ */
#define OFF_QINQ_OUTER_TCI 14
#define OFF_QINQ_INNER_TCI 18
#define OFF_QINQ_L3 22
#define OFF_L3 14

static __always_inline void put_u16(void *p, __u16 v)
{
	*(__u16 *)p = v;
}
static __always_inline void put_u32(void *p, __u32 v)
{
	*(__u32 *)p = v;
}

/* 02:00:<i> at p (6 bytes). */
static __always_inline void put_mac(__u8 *p, __u32 i)
{
	put_u16(p, bpf_htons(0x0200));
	put_u32(p + 2, bpf_htonl(i));
}

/* IPv4 header checksum over 20 bytes (no options in our templates). */
static __always_inline void ipv4_csum(__u8 *ip)
{
	__u32 s = 0;

	put_u16(ip + 10, 0);
#pragma unroll
	for (int k = 0; k < 10; k++)
		s += *(__u16 *)(ip + 2 * k);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	put_u16(ip + 10, (__u16)~s);
}

static __always_inline void put_tags(__u8 *d, __u32 i)
{
	put_u16(d + OFF_QINQ_OUTER_TCI, bpf_htons(1 + i / PC_CVIDS_PER_SVID));
	put_u16(d + OFF_QINQ_INNER_TCI, bpf_htons(1 + i % PC_CVIDS_PER_SVID));
	put_mac(d + 6, i);
}

/* Returns 0, or -1 when the frame is too short for the mode. */
static __always_inline int write_keys(struct xdp_md *ctx, __u32 i)
{
	__u8 *d = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;

	switch (mode) {
	case PC_MODE_UP_V4: /* QinQ + IPv4: source = subscriber's /32 */
		if (d + OFF_QINQ_L3 + 20 > (__u8 *)end)
			return -1;
		put_tags(d, i);
		put_u32(d + OFF_QINQ_L3 + 12, bpf_htonl(PC_V4_BASE + i));
		ipv4_csum(d + OFF_QINQ_L3);
		return 0;
	case PC_MODE_UP_V6: /* QinQ + IPv6: source = subscriber's /128 */
		if (d + OFF_QINQ_L3 + 40 > (__u8 *)end)
			return -1;
		put_tags(d, i);
		put_u32(d + OFF_QINQ_L3 + 8 + 12, bpf_htonl(PC_V6_HOST_W3_BASE + i));
		return 0;
	case PC_MODE_ARP: /* QinQ ARP request: sender MAC and IP = subscriber's */
		if (d + OFF_QINQ_L3 + 28 > (__u8 *)end)
			return -1;
		put_tags(d, i);
		put_mac(d + OFF_QINQ_L3 + 8, i);
		put_u32(d + OFF_QINQ_L3 + 14, bpf_htonl(PC_V4_BASE + i));
		return 0;
	case PC_MODE_DOWN_V4: /* IPv4: destination = subscriber's /32 */
		if (d + OFF_L3 + 20 > (__u8 *)end)
			return -1;
		put_u32(d + OFF_L3 + 16, bpf_htonl(PC_V4_BASE + i));
		ipv4_csum(d + OFF_L3);
		return 0;
	case PC_MODE_DOWN_V6: /* IPv6: destination = subscriber's /128 */
		if (d + OFF_L3 + 40 > (__u8 *)end)
			return -1;
		put_u32(d + OFF_L3 + 24 + 12, bpf_htonl(PC_V6_HOST_W3_BASE + i));
		return 0;
	case PC_MODE_DOWN_V6_64: /* IPv6: destination inside the subscriber's /64 */
		if (d + OFF_L3 + 40 > (__u8 *)end)
			return -1;
		put_u32(d + OFF_L3 + 24 + 4, bpf_htonl(PC_V6_PFX_W1_BASE + i));
		return 0;
	default:
		return 0;
	}
}

SEC("xdp")
int wrapper(struct xdp_md *ctx)
{
	__u32 len = tmpl_len;
	long cur = (long)ctx->data_end - (long)ctx->data;
	__u32 i;

	if (len < 14 || len > PC_TMPL_MAX)
		return XDP_ABORTED;
	/* Undo the previous repetition's tag pop (+8) or push (-8). */
	if (cur != (long)len && bpf_xdp_adjust_head(ctx, cur - (long)len))
		return XDP_ABORTED;
	if (bpf_xdp_store_bytes(ctx, 0, tmpl, len))
		return XDP_ABORTED;

	i = fixed_index;
	if (random_keys)
		i = bpf_get_prandom_u32() % nkeys;
	if (write_keys(ctx, i))
		return XDP_ABORTED;

	if (!use_tail)
		return out_action;
	bpf_tail_call(ctx, &progs, target);
	return XDP_ABORTED; /* empty slot */
}

/* ---- references (tail-called by the wrapper, same frames, same keys) ------- */

/* Harness alone: the wrapper's work plus one tail call. */
SEC("xdp")
int ref_nop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

/* The floor: nothing but a devmap redirect. */
SEC("xdp")
int ref_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&ref_tx, 0, 0);
}

/* One exact-match lookup of the IPv4 destination (read in place, as xbng does),
 * the value used, then the redirect. */
SEC("xdp")
int ref_hash(struct xdp_md *ctx)
{
	void *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct xbng_route *r;

	if (d + OFF_L3 + 20 > end)
		return XDP_ABORTED;
	r = bpf_map_lookup_elem(&ref_hash_map, d + OFF_L3 + 16);
	if (!r || !(r->flags & XBNG_ROUTE_F_MAC_VALID)) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	return bpf_redirect_map(&ref_tx, 0, 0);
}

/* Rate plans: ref_hash plus a bucket charged, the bucket in three places. A
 * policed packet counts as a miss (the plans are set far above what the
 * harness can send). */
static __always_inline int ref_charge(struct xbng_bucket *b, struct xdp_md *ctx)
{
	void *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = d + OFF_L3;

	if ((void *)(ip + 1) > end)
		return XDP_ABORTED;
	if (!bucket_take(b, bpf_ktime_get_ns(), bpf_ntohs(ip->tot_len))) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	return bpf_redirect_map(&ref_tx, 0, 0);
}

/* In the route value: no extra line, but one bucket per route. */
SEC("xdp")
int ref_pol_route(struct xdp_md *ctx)
{
	void *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct pc_route_bkt *r;

	if (d + OFF_L3 + 20 > end)
		return XDP_ABORTED;
	r = bpf_map_lookup_elem(&ref_route_bkt_map, d + OFF_L3 + 16);
	if (!r || !(r->r.flags & XBNG_ROUTE_F_MAC_VALID)) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	return ref_charge(&r->down, ctx);
}

/* The route carries the subscriber's slot: one array entry (one line). */
SEC("xdp")
int ref_pol_array(struct xdp_md *ctx)
{
	void *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct xbng_police *pol;
	struct xbng_route *r;

	if (d + OFF_L3 + 20 > end)
		return XDP_ABORTED;
	r = bpf_map_lookup_elem(&ref_hash_map, d + OFF_L3 + 16);
	if (!r || !(r->flags & XBNG_ROUTE_F_MAC_VALID)) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	pol = bpf_map_lookup_elem(&ref_police_map, &r->slot);
	if (!pol) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	return ref_charge(&pol->down, ctx);
}

/* The route carries the owner's key: a second hash lookup. */
SEC("xdp")
int ref_pol_subhash(struct xdp_md *ctx)
{
	void *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct pc_sub_bkt *s;
	struct xbng_route *r;

	if (d + OFF_L3 + 20 > end)
		return XDP_ABORTED;
	r = bpf_map_lookup_elem(&ref_hash_map, d + OFF_L3 + 16);
	if (!r || !(r->flags & XBNG_ROUTE_F_MAC_VALID)) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	s = bpf_map_lookup_elem(&ref_sub_map, &r->sub);
	if (!s) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	return ref_charge(&s->down, ctx);
}

/* One lookup of the frame's subscriber key (ingress ifindex, S-VID, C-VID)
 * in `map`, its flags tested, then redirect: xbng's subscriber lookup
 * without the rest of the path, at three element sizes. */
#define REF_SUB(name, map)                                                                   \
	SEC("xdp")                                                                           \
	int name(struct xdp_md *ctx)                                                         \
	{                                                                                    \
		void *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;       \
		struct xbng_sub_key k;                                                       \
		__u16 *flags;                                                                \
                                                                                             \
		if (d + OFF_QINQ_L3 > end)                                                   \
			return XDP_ABORTED;                                                  \
		k.ifindex = ctx->ingress_ifindex;                                            \
		k.outer_vid = bpf_ntohs(*(__u16 *)(d + OFF_QINQ_OUTER_TCI)) & XBNG_VID_MASK; \
		k.inner_vid = bpf_ntohs(*(__u16 *)(d + OFF_QINQ_INNER_TCI)) & XBNG_VID_MASK; \
		flags = bpf_map_lookup_elem(&map, &k);                                       \
		if (!flags || !(flags[3] & XBNG_SUB_F_MAC_VALID)) {                          \
			count(PC_CNT_REF_MISS);                                              \
			return XDP_DROP;                                                     \
		}                                                                            \
		return bpf_redirect_map(&ref_tx, 0, 0);                                      \
	}
REF_SUB(ref_sub40, ref_sub40_map)
REF_SUB(ref_sub64, ref_sub64_map)
REF_SUB(ref_sub72, ref_sub72_map)

/* One LPM-trie lookup (/32 entries) of the IPv4 destination, then redirect:
 * the design that keeps every route in a trie. */
SEC("xdp")
int ref_lpm(struct xdp_md *ctx)
{
	void *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct xbng_lpm_v4_key k;
	struct xbng_route *r;

	if (d + OFF_L3 + 20 > end)
		return XDP_ABORTED;
	k.prefixlen = 32;
	k.addr = *(__be32 *)(d + OFF_L3 + 16);
	r = bpf_map_lookup_elem(&ref_lpm_map, &k);
	if (!r || !(r->flags & XBNG_ROUTE_F_MAC_VALID)) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	return bpf_redirect_map(&ref_tx, 0, 0);
}

/* One kernel FIB lookup of the IPv4 destination (bpf_fib_lookup, as xbng's
 * upstream path does), then redirect: explains the upstream figures. */
SEC("xdp")
int ref_fib(struct xdp_md *ctx)
{
	void *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = d + OFF_L3;
	struct bpf_fib_lookup f = {};

	if ((void *)(ip + 1) > end)
		return XDP_ABORTED;
	f.family = 2; /* AF_INET */
	f.tos = ip->tos;
	f.l4_protocol = ip->protocol;
	f.tot_len = bpf_ntohs(ip->tot_len);
	f.ipv4_src = ip->saddr;
	f.ipv4_dst = ip->daddr;
	f.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &f, sizeof(f), 0) != BPF_FIB_LKUP_RET_SUCCESS) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	return bpf_redirect_map(&ref_tx, 0, 0);
}

/* One kernel FIB lookup of an upstream IPv6 frame (QinQ, from the access
 * port: the lookup xbng's upstream IPv6 path makes), then redirect: what
 * IPv6 costs in the FIB beyond IPv4 (ref_fib). */
SEC("xdp")
int ref_fib6(struct xdp_md *ctx)
{
	void *d = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = d + OFF_QINQ_L3;
	struct bpf_fib_lookup f = {};

	if ((void *)(ip6 + 1) > end)
		return XDP_ABORTED;
	f.family = 10; /* AF_INET6 */
	f.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
	f.l4_protocol = ip6->nexthdr;
	f.tot_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	__builtin_memcpy(f.ipv6_src, &ip6->saddr, 16);
	__builtin_memcpy(f.ipv6_dst, &ip6->daddr, 16);
	f.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &f, sizeof(f), 0) != BPF_FIB_LKUP_RET_SUCCESS) {
		count(PC_CNT_REF_MISS);
		return XDP_DROP;
	}
	return bpf_redirect_map(&ref_tx, 0, 0);
}

/* ---- veth forwarding helpers -------------------------------------------------- */

/* The sink: counts every frame and drops it. */
SEC("xdp")
int xdp_sink(struct xdp_md *ctx)
{
	count(PC_CNT_SINK);
	return XDP_DROP;
}

/* Pass-through: gives a veth NAPI (needed to receive redirected frames). */
SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
