/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The token bucket of a rate plan, on its own: no maps, no
 * packet, so that the benchmark's layout references (bench/bpf) charge
 * exactly the same code as the fast path (lib/police.h), and the C++ unit
 * tests (tests/unit/credit_test.cpp) run it too. */
#ifndef XBNG_BPF_BUCKET_H
#define XBNG_BPF_BUCKET_H

#include <linux/types.h>
#include "xbng/abi.h"

#ifndef __always_inline /* C++ (the unit tests): GCC's spelling */
#define __always_inline inline __attribute__((always_inline))
#endif

/* Compare-and-swap attempts before a packet is treated as over the rate. A
 * failed CAS means another CPU charged the same bucket in between. */
#ifndef XBNG_POLICE_CAS_TRIES /* test_upgrade's "next build" compiles another value */
#define XBNG_POLICE_CAS_TRIES 4
#endif

/* Charges `bytes` to `b` at time `now`, in a bucket `depth` bytes deep.
 * Returns 1 when the packet conforms (charged), 0 when it is over the rate
 * (nothing charged). Times compare as signed differences: correct across a
 * wrap of the clock. Every charge is a successful CAS from the value it was
 * computed on, so concurrent CPUs are serialised: the admitted bytes never
 * exceed depth + rate x time, and no charge is lost. */
static __always_inline int bucket_take_depth(struct xbng_bucket *b, __u64 now, __u32 bytes,
					     __u32 depth)
{
	__u64 fp = *(volatile __u32 *)&b->byte_ns_fp;
	__u64 cost = ((__u64)bytes * fp) >> XBNG_POLICE_FP_SHIFT;
	__u64 tau = ((__u64)depth * fp) >> XBNG_POLICE_FP_SHIFT;
	__u64 tat = *(volatile __u64 *)&b->tat_ns;

	for (int i = 0; i < XBNG_POLICE_CAS_TRIES; i++) {
		__u64 base = (__s64)(tat - now) > 0 ? tat : now;
		__u64 next = base + cost;
		__u64 seen;

		if ((__s64)(next - now) > (__s64)tau)
			return 0;
		seen = __sync_val_compare_and_swap(&b->tat_ns, tat, next);
		if (seen == tat)
			return 1;
		tat = seen;
	}
	return 0;
}

/* The bucket at its configured depth (burst_bytes). */
static __always_inline int bucket_take(struct xbng_bucket *b, __u64 now, __u32 bytes)
{
	return bucket_take_depth(b, now, bytes, *(volatile __u32 *)&b->burst_bytes);
}

/* Gives back `bytes` charged earlier and not used: tat moves back by their
 * cost (rounded down, so a refund never exceeds what the charge of the same
 * bytes took). In token terms the bucket gains them, capped at its depth (a
 * tat in the past is a full bucket), so a refund never lets more through
 * than the bucket could hold. A refund that loses its CAS race
 * XBNG_POLICE_CAS_TRIES times is dropped: tokens lost, never excess. */
static __always_inline void bucket_refund(struct xbng_bucket *b, __u32 bytes)
{
	__u64 fp = *(volatile __u32 *)&b->byte_ns_fp;
	__u64 cost = ((__u64)bytes * fp) >> XBNG_POLICE_FP_SHIFT;
	__u64 tat = *(volatile __u64 *)&b->tat_ns;

	for (int i = 0; i < XBNG_POLICE_CAS_TRIES; i++) {
		__u64 seen = __sync_val_compare_and_swap(&b->tat_ns, tat, tat - cost);

		if (seen == tat)
			return;
		tat = seen;
	}
}

#endif /* XBNG_BPF_BUCKET_H */
