/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Where the benchmark build of the fast path (bpf/xbng.bpf.c compiled with
 * -DXBNG_BENCH, bench/pktcost.cpp) can end the upstream path early, to time
 * it step by step. Shared by that build (bpf/lib/benchstop.h) and the
 * benchmark driver. The live build has no stop points.
 */
#ifndef XBNG_BENCHSTOP_H
#define XBNG_BENCHSTOP_H

enum xbng_bench_stop {
	XBNG_BSTOP_NONE = 0,   /* the whole path, as the live build */
	XBNG_BSTOP_PARSED = 1, /* port, HA state and QinQ parsed; no subscriber lookup */
	XBNG_BSTOP_LOOKUP = 2, /* + subscriber lookup (hash bucket, key), value not read */
	XBNG_BSTOP_MAC = 3,    /* + MAC policy check (MAC and flags of the value) */
	XBNG_BSTOP_CHECKS = 4, /* + IP header, DHCP, destination MAC, anti-spoof checks */
	XBNG_BSTOP_POLICE = 5, /* + MAC tracking, TTL, MSS, upstream policer test */
	XBNG_BSTOP_FIB = 6,    /* + bpf_fib_lookup */
	XBNG_BSTOP_POP = 7,    /* + redirect, TTL decrement, tags popped; no counters */
	XBNG_BSTOP_COUNT = 8,
};

#endif /* XBNG_BENCHSTOP_H */
