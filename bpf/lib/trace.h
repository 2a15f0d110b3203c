/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Two builds of one program (docs/design.md "Tracing"). The live build is
 * the fast path; the trace build (-DXBNG_TRACE) is the same code run by
 * xbngd with BPF_PROG_TEST_RUN over the pinned maps to answer "what would
 * the box do with this frame". The difference between the two is only in
 * these macros:
 *   XBNG_TRACE_STEP(id, a, b)  records a step (include/xbng/trace.h) in the
 *                              trace build; nothing in the live build.
 *   XBNG_LIVE(...)             the statements inside are side effects on
 *                              shared state (counters, ring buffers, map
 *                              updates): kept in the live build, gone from
 *                              the trace build. (A long block, the punt's
 *                              ring-buffer write, is in #ifndef XBNG_TRACE
 *                              instead, to leave its lines as they are.)
 *   XBNG_SHADOW(type, ptr)     after a lookup of a map value that the
 *                              program writes (subscriber, route, bucket,
 *                              rate-limit window): in the trace build, ptr
 *                              is repointed to a private copy (a static of
 *                              the trace object's .bss), so the program
 *                              reads the live state and writes only its
 *                              copy; nothing in the live build.
 * The live build pays nothing per packet for the trace: the macros expand
 * to nothing there (the object's instruction count is unchanged).
 */
#ifndef XBNG_BPF_TRACE_H
#define XBNG_BPF_TRACE_H

#include <linux/bpf.h>
#include "xbng/trace.h"

#ifdef XBNG_TRACE

/* The log of the frame being traced: in the trace object's .bss, private
 * to it (xbngd zeroes it before a run and reads it after). xbngd runs one
 * trace at a time. */
struct xbng_trace_log trace_log;
_Static_assert((XBNG_TRACE_MAX_STEPS & (XBNG_TRACE_MAX_STEPS - 1)) == 0,
	       "the step index is masked: a power of two");

static __always_inline void xbng_trace_step(__u32 id, __u64 a, __u64 b)
{
	__u32 n = trace_log.n;

	/* The mask repeats the check for older verifiers (6.1), which lose it
	 * when the compiler copies n through a 32-bit move; the barrier keeps
	 * the compiler from dropping the mask as redundant. */
	if (n < XBNG_TRACE_MAX_STEPS) {
		__u32 i = n;

		barrier_var(i);
		i &= XBNG_TRACE_MAX_STEPS - 1;

		trace_log.steps[i].id = id;
		trace_log.steps[i].a = a;
		trace_log.steps[i].b = b;
	}
	trace_log.n = n + 1;
}

#define XBNG_TRACE_STEP(id, a, b) xbng_trace_step((id), (__u64)(a), (__u64)(b))
#define XBNG_LIVE(...)
#define XBNG_SHADOW(type, ptr)                                          \
	static type __shadow_##ptr;                                     \
	if (ptr) {                                                      \
		__builtin_memcpy(&__shadow_##ptr, (ptr), sizeof(type)); \
		(ptr) = &__shadow_##ptr;                                \
	}

#else /* live build */

#define XBNG_TRACE_STEP(id, a, b) ((void)0)
#define XBNG_LIVE(...) __VA_ARGS__
#define XBNG_SHADOW(type, ptr)

#endif

#endif /* XBNG_BPF_TRACE_H */
