/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The step log of a traced frame: what the trace build of the fast path
 * (bpf/xbng.bpf.c compiled with -DXBNG_TRACE) records, and xbngd reads back
 * after BPF_PROG_TEST_RUN. The live build has no log (see bpf/lib/trace.h).
 * XBNG_TRACE_STEPS(X) expands to X(ENUM_SUFFIX, "name") for each step; the
 * meaning of the values a and b is given per step, and xbngd formats them.
 */
#ifndef XBNG_TRACE_H
#define XBNG_TRACE_H

#include <linux/types.h>

#define XBNG_TRACE_STEPS(X)                                                                \
	X(PORT, "port")				/* a ifindex, b role */                    \
	X(QINQ, "qinq")				/* a S-VID, b C-VID */                     \
	X(SUBSCRIBER, "subscriber")		/* a found, b policer slot */              \
	X(MAC_POLICY, "mac_policy")		/* a policy, b source MAC matches */       \
	X(CHECK, "check")			/* a check id (below), b passed */         \
	X(MAC_LEARN, "mac_learn")		/* would learn the source MAC */           \
	X(EVENT, "event")			/* a event type (would be sent) */         \
	X(EVENT_SUPPRESSED, "event_suppressed") /* rate limit of events */                 \
	X(PUNT, "punt")				/* a punt kind */                          \
	X(PUNT_REFUSED, "punt_refused")		/* a 1 subscriber, 2 port limit */         \
	X(POLICE_UP, "police_up")		/* a admitted, b tat - now (ns, signed) */ \
	X(POLICE_DOWN, "police_down")		/* a admitted, b tat - now (ns, signed) */ \
	X(POLICE_BUCKET, "police_bucket")	/* a byte_ns_fp, b burst bytes */          \
	X(POLICE_CREDIT, "police_credit")	/* a route's prepaid bytes, b packet's */  \
	X(FIB, "fib")				/* a bpf_fib_lookup rc, b ifindex */       \
	X(ROUTE, "route")			/* a found, b access ifindex */            \
	X(REDIRECT, "redirect")			/* a devmap key, b accepted */             \
	X(ICMP, "icmp")				/* a kind (enum xbng_icmp_err), b MTU */   \
	X(ICMP_RATE, "icmp_rate")		/* a token taken */                        \
	X(VERDICT, "verdict")			/* a reason, b XDP action */

#define XBNG_TRACE_ENUM(name, str) XBNG_TS_##name,
enum xbng_trace_step_id { XBNG_TRACE_STEPS(XBNG_TRACE_ENUM) XBNG_TS_MAX };
#undef XBNG_TRACE_ENUM

/* Check ids of XBNG_TS_CHECK: the named checks of the access path. */
#define XBNG_TRACE_CHECKS(X)          \
	X(IP_HEADER, "ip_header")     \
	X(DHCP, "dhcp")               \
	X(DST_MAC, "dst_mac")         \
	X(ANTISPOOF, "anti_spoofing") \
	X(ICMP_ECHO, "icmp_echo")     \
	X(ND, "nd")

#define XBNG_TRACE_ENUM(name, str) XBNG_TC_##name,
enum xbng_trace_check_id { XBNG_TRACE_CHECKS(XBNG_TRACE_ENUM) XBNG_TC_MAX };
#undef XBNG_TRACE_ENUM

#define XBNG_TRACE_MAX_STEPS 32

struct xbng_trace_step {
	__u32 id; /* enum xbng_trace_step_id */
	__u32 pad;
	__u64 a;
	__u64 b;
};

/* One traced frame; reset by xbngd before each run. `n` may exceed
 * XBNG_TRACE_MAX_STEPS: the steps beyond were not recorded. */
struct xbng_trace_log {
	__u32 n;
	__u32 pad;
	struct xbng_trace_step steps[XBNG_TRACE_MAX_STEPS];
};

#endif /* XBNG_TRACE_H */
