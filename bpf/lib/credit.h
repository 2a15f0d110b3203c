/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Prepaid downstream credit: a route (the hash entry the downstream lookup
 * has just fetched) holds bytes drawn in chunks from its owner's shared
 * bucket, so that the bucket's line (a second random cache miss) is touched
 * once per chunk instead of once per packet. No maps, no packet: the fast
 * path (lib/police.h) and the C++ unit tests (tests/unit/credit_test.cpp)
 * compile this same code.
 *
 * Why the plan still holds (docs/policing.md has the long form). Count
 * tokens in bytes: the bucket holds B <= depth, each route with
 * XBNG_ROUTE_F_CREDIT holds its credit P_i <= cap. A draw moves tokens from
 * the bucket to a route, a refund moves them back (capped at depth: excess
 * is lost), spending takes them from a route, the clock adds them to the
 * bucket only. So B + sum(P_i) <= depth + XBNG_CREDIT_ROUTES * cap = burst
 * at every instant, and the bytes admitted over any window of length T are
 * at most what was there at its start plus what the clock added:
 * burst + rate * T, summed over all the subscriber's routes, whichever CPUs
 * admitted them. Every step that can fail loses tokens, never creates them. */
#ifndef XBNG_BPF_CREDIT_H
#define XBNG_BPF_CREDIT_H

#include "lib/bucket.h"

/* Bytes a route draws at once: burst / 128, or 0 (no credit: every packet
 * charges the bucket, as without credit) when that is under
 * XBNG_CREDIT_CHUNK_MIN. */
static __always_inline __u32 credit_chunk(__u32 burst)
{
	__u32 chunk = burst >> XBNG_CREDIT_CHUNK_SHIFT;

	return chunk >= XBNG_CREDIT_CHUNK_MIN ? chunk : 0;
}

/* Most a route's credit may hold: one chunk plus the leftover a route has
 * when it draws (less than the packet that made it draw; a leftover over
 * XBNG_CREDIT_SLACK, only after jumbo frames, makes the deposit refused and
 * the packet charged alone). A deposit that would pass it is refused. Kept
 * small because what routes may hold is taken from the bucket's depth, and
 * a single busy route (one TCP flow) sees depth + cap as its burst. 0 with
 * no credit. */
static __always_inline __u32 credit_cap(__u32 chunk)
{
	return chunk ? chunk + XBNG_CREDIT_SLACK : 0;
}

/* Depth of the shared bucket: the plan's burst less what the routes with
 * credit may hold (3 x (burst / 128 + 2 KiB)). */
static __always_inline __u32 credit_depth(__u32 burst)
{
	return burst - XBNG_CREDIT_ROUTES * credit_cap(credit_chunk(burst));
}

/* Fast step: takes `bytes` from the route's credit. 1 when it covered them
 * (nothing else to do), 0 when the shared bucket must be asked. */
static __always_inline int credit_spend(__u32 *credit, __u32 bytes)
{
	__u32 c = *(volatile __u32 *)credit;

	for (int i = 0; i < XBNG_POLICE_CAS_TRIES; i++) {
		__u32 seen;

		if (c < bytes)
			return 0;
		seen = __sync_val_compare_and_swap(credit, c, c - bytes);
		if (seen == c)
			return 1;
		c = seen;
	}
	return 0;
}

/* Adds a drawn chunk to the route's credit unless that would pass the cap
 * (another CPU deposited first). 0: not deposited, the caller refunds. */
static __always_inline int credit_deposit(__u32 *credit, __u32 chunk)
{
	__u32 cap = credit_cap(chunk);
	__u32 c = *(volatile __u32 *)credit;

	for (int i = 0; i < XBNG_POLICE_CAS_TRIES; i++) {
		__u32 seen;

		if (c > cap - chunk)
			return 0;
		seen = __sync_val_compare_and_swap(credit, c, c + chunk);
		if (seen == c)
			return 1;
		c = seen;
	}
	return 0;
}

/* Slow step, at the shared bucket `b` (depth credit_depth(burst)): a route
 * with credit (`credit` non-null) draws the packet and a chunk at once and
 * keeps the chunk; when the bucket cannot give both, or the route has no
 * credit, the packet alone is charged, exactly as a plain bucket would.
 * 1 admitted, 0 over the rate (nothing charged). */
static __always_inline int credit_draw(struct xbng_bucket *b, __u32 *credit, __u64 now, __u32 bytes)
{
	__u32 burst = *(volatile __u32 *)&b->burst_bytes;
	__u32 chunk = credit ? credit_chunk(burst) : 0;
	__u32 depth = credit_depth(burst);

	if (chunk && bucket_take_depth(b, now, bytes + chunk, depth)) {
		if (!credit_deposit(credit, chunk))
			bucket_refund(b, chunk);
		return 1;
	}
	return bucket_take_depth(b, now, bytes, depth);
}

#endif /* XBNG_BPF_CREDIT_H */
