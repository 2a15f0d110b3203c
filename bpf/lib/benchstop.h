/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Stop points of the benchmark build (include/xbng/benchstop.h). With
 * -DXBNG_BENCH the upstream path ends at the stop `bench_stop` names (set
 * before load: the verifier removes the other stops' branches), mostly
 * with a counted redirect back to the ingress port (bench_stop_here), so that the benchmark times
 * the path up to each stop. In the live and trace builds BENCH_STOP()
 * expands to nothing: no instruction, no map.
 */
#ifndef XBNG_BPF_BENCHSTOP_H
#define XBNG_BPF_BENCHSTOP_H

#include "lib/common.h"
#include "lib/counters.h"

#ifdef XBNG_BENCH
#include "xbng/benchstop.h"

const volatile __u32 bench_stop = XBNG_BSTOP_NONE;

/* What every stop ends with: the verdict the whole path counts, and a
 * redirect (to the ingress port: the egress one is not known before the FIB). */
XBNG_INLINE int bench_stop_here(const struct xbng_pkt *p)
{
	return verdict(p, XBNG_FWD_UPSTREAM, bpf_redirect_map(&tx_ports, p->ifindex, XDP_DROP));
}

/* At stop `at`, return `ret` (evaluated only there). */
#define BENCH_STOP(at, ret)             \
	do {                            \
		if (bench_stop == (at)) \
			return (ret);   \
	} while (0)
#else
#define BENCH_STOP(at, ret) ((void)0)
#endif

#endif /* XBNG_BPF_BENCHSTOP_H */
