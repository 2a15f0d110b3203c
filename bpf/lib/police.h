/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Rate plans: a token bucket per subscriber per direction, in
 * GCRA form (include/xbng/abi.h, struct xbng_bucket). Upstream the bucket
 * sits in the subscriber entry the lookup already fetched; downstream every
 * route of a subscriber carries its slot in `police`, whose 64-byte entry
 * holds the one bucket they share; the first routes of a subscriber also hold
 * prepaid credit drawn from it in chunks (lib/credit.h), so most packets
 * never touch that line (docs/policing.md).
 * Unlimited subscribers cost one flag test per packet, no clock read. */
#ifndef XBNG_BPF_POLICE_H
#define XBNG_BPF_POLICE_H

#include "lib/common.h"
#include "lib/counters.h"
#include "lib/bucket.h"
#include "lib/credit.h"

/* Tests only (tests/bpf): set before load, the clock is police_test_now_ns
 * instead of bpf_ktime_get_ns(). Load-time constant: the verifier removes
 * the test branch from a production load. */
const volatile __u8 police_test_clock = 0;
__u64 police_test_now_ns = 0;

XBNG_INLINE __u64 police_now(void)
{
	if (police_test_clock)
		return police_test_now_ns;
	return bpf_ktime_get_ns();
}

XBNG_INLINE void police_count(__u64 *packets, __u64 *bytes, __u32 len)
{
	XBNG_LIVE(__sync_fetch_and_add(packets, 1); __sync_fetch_and_add(bytes, len);)
}

#ifdef XBNG_TRACE
/* What bucket_take would answer, on a copy: 2 no rate plan, 1 admitted,
 * 0 over the rate. The trace's verdict comes from the real call after it. */
XBNG_INLINE __u64 police_traced_take(const struct xbng_bucket *b, __u32 l3_len)
{
	struct xbng_bucket copy = *b;

	if (!copy.byte_ns_fp)
		return 2;
	return bucket_take(&copy, police_now(), l3_len);
}

/* The same for the downstream bucket, whose depth leaves room for the
 * routes' credit: whether the packet alone would be admitted. */
XBNG_INLINE __u64 police_traced_draw(const struct xbng_bucket *b, __u32 l3_len)
{
	struct xbng_bucket copy = *b;

	if (!copy.byte_ns_fp)
		return 2;
	return credit_draw(&copy, 0, police_now(), l3_len);
}
#endif

/* Upstream step: `l3_len` (IP header + payload) is what the plan counts. */
XBNG_INLINE int police_up(const struct xbng_pkt *p, struct xbng_subscriber *sub, __u32 l3_len)
{
	struct xbng_police *pr;

	XBNG_TRACE_STEP(XBNG_TS_POLICE_BUCKET, sub->up.byte_ns_fp, sub->up.burst_bytes);
	XBNG_TRACE_STEP(XBNG_TS_POLICE_UP, police_traced_take(&sub->up, l3_len),
			(__s64)(sub->up.tat_ns - police_now()));
	if (!sub->up.byte_ns_fp || bucket_take(&sub->up, police_now(), l3_len))
		return XBNG_CONTINUE;
	pr = bpf_map_lookup_elem(&police, &sub->slot);
	if (pr)
		police_count(&pr->up_policed_packets, &pr->up_policed_bytes, p->len);
	return drop(p, XBNG_DROP_POLICED_UP);
}

/* Downstream step, shared by every route of the subscriber: the route's
 * prepaid credit first (its line is already here), the shared bucket only
 * when that does not cover the packet. */
XBNG_INLINE int police_down(const struct xbng_pkt *p, struct xbng_route *route, __u32 l3_len)
{
	struct xbng_police *pr;
	int credit = route->flags & XBNG_ROUTE_F_CREDIT;
	__u32 *credit_at;

	if (!(route->flags & XBNG_ROUTE_F_POLICED))
		return XBNG_CONTINUE;
	XBNG_TRACE_STEP(XBNG_TS_POLICE_CREDIT, credit ? route->credit : 0, l3_len);
	if (credit && credit_spend(&route->credit, l3_len))
		return XBNG_CONTINUE;
	/* The shared bucket: credit_draw() tests the credit pointer itself.
	 * Without the barrier the compiler tests the flag instead, which it
	 * may keep on the stack as 32 bits, where older verifiers (6.1) lose
	 * its link to the pointer and see the NULL one dereferenced. */
	credit_at = credit ? &route->credit : 0;
	barrier_var(credit_at);
	pr = bpf_map_lookup_elem(&police, &route->slot);
	XBNG_SHADOW(struct xbng_police, pr);
	if (pr) {
		XBNG_TRACE_STEP(XBNG_TS_POLICE_BUCKET, pr->down.byte_ns_fp, pr->down.burst_bytes);
		XBNG_TRACE_STEP(XBNG_TS_POLICE_DOWN, police_traced_draw(&pr->down, l3_len),
				(__s64)(pr->down.tat_ns - police_now()));
	}
	if (!pr || !pr->down.byte_ns_fp || credit_draw(&pr->down, credit_at, police_now(), l3_len))
		return XBNG_CONTINUE;
	police_count(&pr->down_policed_packets, &pr->down_policed_bytes,
		     p->len + XBNG_QINQ_TAGS_LEN);
	return drop(p, XBNG_DROP_POLICED_DOWN);
}

#endif /* XBNG_BPF_POLICE_H */
