/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The store's reads of many values in one system call (bpf/store_read.bpf.c,
 * agent/store/map_ops.cpp): user space writes up to XBNG_READ_CHUNK keys of
 * one map into its slot of the mmapable `read_scratch` array and runs the
 * syscall program `read_many` once (BPF_PROG_TEST_RUN); the program looks
 * every key up and copies each value found next to it. An update of every
 * subscriber reads the values it replaces (counters, learned MACs, policer
 * state, the rollback's "before"): one program run per chunk instead of one
 * bpf_map_lookup_elem system call per key.
 *
 * Keys are packed at the map's key size, values at its value size (the
 * largest: 16-byte keys, 64-byte values). The LPM prefix maps are not read
 * here: sleepable programs may not use tries.
 *
 * The second program, `swap_many`, reads and writes in one pass: each key's
 * new value (vals, in) is merged with the value it replaces (the kernel's
 * counters, policer state and a learned MAC carried over: the functions
 * below, the store's one definition of that merge) and written, and the
 * replaced value comes back in its place (vals, out) for the rollback. An
 * update of every subscriber then walks each hash bucket in one program
 * run, and its writes skip the batch system call's copies from user space.
 */
#ifndef XBNG_STORE_READ_H
#define XBNG_STORE_READ_H

#include <linux/types.h>

#include "xbng/abi.h"

#define XBNG_READ_CHUNK 2048
#define XBNG_READ_KEY_MAX 16
#define XBNG_READ_VALUE_MAX 64
/* Slots of `read_scratch`: readers at once (the store reads from two
 * threads; a reader that finds none free reads one system call a key). */
#define XBNG_READ_SLOTS 4

/* The maps read_many reads (read_args.map). */
enum xbng_read_map {
	XBNG_READ_SUBSCRIBERS = 0,
	XBNG_READ_POLICE = 1,
	XBNG_READ_ROUTES_V4 = 2,
	XBNG_READ_ROUTES_V6 = 3,
	XBNG_READ_ROUTES_V6_64 = 4,
};

struct xbng_read_scratch {
	__u8 keys[XBNG_READ_CHUNK * XBNG_READ_KEY_MAX];
	__u8 vals[XBNG_READ_CHUNK * XBNG_READ_VALUE_MAX];
	__u8 found[XBNG_READ_CHUNK];
};

/* The program's context (ctx_in): which map, how many keys, which slot. */
struct xbng_read_args {
	__u32 map;
	__u32 n;
	__u32 slot;
};

/* swap_many's per-key byte (xbng_read_scratch.found). In: what the merge
 * may do; out: what happened. */
#define XBNG_SWAP_KEEP_MAC 1u /* in, subscribers: a learned MAC is kept */
#define XBNG_SWAP_REWRITE 2u  /* in, routes: written even if unchanged (a new bucket) */
#define XBNG_SWAP_FOUND 1u    /* out: the key was present; vals holds what it was */
#define XBNG_SWAP_WRITTEN 2u  /* out: the merged value was written */

/* swap_many's context, in and out: keys 0..done-1 were processed; err is
 * the refused write's error (key `done`), 0 if none. */
struct xbng_swap_args {
	__u32 map; /* any xbng_read_map */
	__u32 n;
	__u32 slot;
	__u32 done;
	__s32 err;
};

/* A subscriber entry rewritten over `old`: the fast path's counters carried
 * over, the upstream policer's state while its rate and depth stay, and
 * the MAC the fast path learned when `in` allows it (the request asks to
 * learn, not under "follow"). Always written. */
static inline __attribute__((always_inline)) int
xbng_merge_subscriber(struct xbng_subscriber *nv, const struct xbng_subscriber *old, __u8 in)
{
	nv->up_packets = old->up_packets;
	nv->up_bytes = old->up_bytes;
	if (old->up.byte_ns_fp == nv->up.byte_ns_fp && old->up.burst_bytes == nv->up.burst_bytes)
		nv->up.tat_ns = old->up.tat_ns;
	if ((in & XBNG_SWAP_KEEP_MAC) && (old->flags & XBNG_SUB_F_MAC_VALID)) {
		nv->flags |= XBNG_SUB_F_MAC_VALID;
		__builtin_memcpy(nv->mac, old->mac, 6);
	}
	return 1;
}

/* A police slot rewritten over `old`: the policed counters carried over,
 * and the downstream bucket's state while its rate and depth stay. Always
 * written. */
static inline __attribute__((always_inline)) int
xbng_merge_police(struct xbng_police *nv, const struct xbng_police *old, __u8 in)
{
	(void)in;
	nv->up_policed_packets = old->up_policed_packets;
	nv->up_policed_bytes = old->up_policed_bytes;
	nv->down_policed_packets = old->down_policed_packets;
	nv->down_policed_bytes = old->down_policed_bytes;
	if (old->down.byte_ns_fp == nv->down.byte_ns_fp &&
	    old->down.burst_bytes == nv->down.burst_bytes)
		nv->down.tat_ns = old->down.tat_ns;
	return 1;
}

/* A route rewritten over `old`: when it stays its subscriber's, its
 * counters carried over, and not written at all (0) if nothing else would
 * change, unless `in` asks (a new downstream bucket: no credit drawn under
 * the old plan is spent under the new one; a write starts at credit 0). */
static inline __attribute__((always_inline)) int
xbng_merge_route(struct xbng_route *nv, const struct xbng_route *old, __u8 in)
{
	if (old->sub.ifindex != nv->sub.ifindex || old->sub.outer_vid != nv->sub.outer_vid ||
	    old->sub.inner_vid != nv->sub.inner_vid)
		return 1;
	nv->down_packets = old->down_packets;
	nv->down_bytes = old->down_bytes;
	return (in & XBNG_SWAP_REWRITE) || old->mac[0] != nv->mac[0] || old->mac[1] != nv->mac[1] ||
	       old->mac[2] != nv->mac[2] || old->mac[3] != nv->mac[3] ||
	       old->mac[4] != nv->mac[4] || old->mac[5] != nv->mac[5] || old->flags != nv->flags ||
	       old->slot != nv->slot;
}

#endif /* XBNG_STORE_READ_H */
