/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Punt of control frames (DHCPv4, DHCPv6, Router Solicitations) of
 * provisioned subscribers to xbngd, rate-limited per subscriber and protocol
 * (three GCRAs in one `punt_limit` entry) and per port (per-CPU window in
 * `punt_port_budget`). Only control frames reach this file: data frames pay
 * nothing for it. */
#ifndef XBNG_BPF_PUNT_H
#define XBNG_BPF_PUNT_H

#include "lib/common.h"
#include "lib/counters.h"

#define XBNG_PUNT_NSEC_PER_SEC 1000000000ull

/* GCRA (virtual scheduling) of protocol `i` (enum xbng_punt_kind - 1): allowed
 * while its theoretical arrival time is at most `tolerance` ahead of now.
 * Each protocol has its own budget (the same rate and burst): a flood of one
 * leaves the others of the subscriber alone. Two CPUs racing on one
 * subscriber may both pass: the bound is loose by a frame, never unbounded. */
XBNG_INLINE int punt_sub_allowed(const struct xbng_sub_key *key, __u32 i, __u64 now)
{
	struct xbng_punt_gcra *g, fresh = {};
	__u64 tat;

	if (i >= XBNG_PUNT_KINDS)
		return 0;
	g = bpf_map_lookup_elem(&punt_limit, key);
	XBNG_SHADOW(struct xbng_punt_gcra, g);
	if (!g) {
		fresh.tat_ns[i] = now + punt_sub_interval_ns;
		XBNG_LIVE(bpf_map_update_elem(&punt_limit, key, &fresh, BPF_ANY));
		return 1;
	}
	tat = g->tat_ns[i] > now ? g->tat_ns[i] : now;
	if (tat - now > punt_sub_tolerance_ns)
		return 0;
	g->tat_ns[i] = tat + punt_sub_interval_ns;
	return 1;
}

XBNG_INLINE int punt_port_allowed(__u32 slot, __u64 now)
{
	struct xbng_punt_window *w = bpf_map_lookup_elem(&punt_port_budget, &slot);
	XBNG_SHADOW(struct xbng_punt_window, w);

	if (!w)
		return 0;
	if (now - w->window_start_ns >= XBNG_PUNT_NSEC_PER_SEC) {
		w->window_start_ns = now;
		w->used = 0;
	}
	if (w->used >= punt_port_per_sec)
		return 0;
	w->used++;
	return 1;
}

/* AF_XDP transport: the frame itself to xbngd's socket of this port and RX
 * queue, its punt header in the XDP metadata just before it. 1 when the
 * redirect is set; 0 when this queue has no socket (or the driver keeps no
 * metadata): the caller then copies into the ring buffer. A socket whose RX
 * ring is full drops in the kernel (xbngd reads those from the socket's
 * XDP_STATISTICS). */
XBNG_INLINE int punt_to_xsk(const struct xbng_pkt *p, const struct xbng_sub_key *key, __u32 kind,
			    __u64 now)
{
	struct xbng_punt_meta *m;
	struct xdp_md *ctx = p->ctx;
	__u32 q = ctx->rx_queue_index, idx;

	if (q >= XBNG_PUNT_XSK_QUEUES)
		return 0;
	idx = p->port->slot * XBNG_PUNT_XSK_QUEUES + q;
	/* No socket, no metadata: bpf_redirect_map() below would fail too, but
	 * the metadata is better not written for nothing. */
	if (!bpf_map_lookup_elem(&punt_xsks, &idx))
		return 0;
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*m)))
		return 0;
	m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > (void *)(long)ctx->data)
		return 0;
	m->kind = kind;
	m->outer_vid = key->outer_vid;
	m->inner_vid = key->inner_vid;
	m->timestamp_ns = now;
	return bpf_redirect_map(&punt_xsks, idx, 0) == XDP_REDIRECT;
}

/* Hands the whole frame (tags included) to xbngd: redirected to its AF_XDP
 * socket (punt_xsk), else copied into `punt` and dropped. The port limit is
 * checked after the subscriber's, so one noisy subscriber cannot spend the
 * port's budget beyond its own share. */
XBNG_INLINE int punt_frame(const struct xbng_pkt *p, const struct xbng_sub_key *key, __u32 kind,
			   __u32 reason)
{
	struct xbng_punt_record *r;
	__u64 now = bpf_ktime_get_ns();
	__u32 len = p->len;
	__u32 proto = kind - XBNG_PUNT_KIND_DHCPV4; /* budget index; a constant once inlined */

	if (len > XBNG_PUNT_MAX_FRAME)
		return drop(p, XBNG_DROP_PUNT_TOO_BIG);
	if (proto >= XBNG_PUNT_KINDS)
		return drop(p, XBNG_DROP_INTERNAL);
	if (!punt_sub_allowed(key, proto, now)) {
		count_reason(XBNG_PUNT_RATE_SUB_DHCPV4 + proto, 0); /* which budget */
		return drop(p, XBNG_DROP_PUNT_RATE_SUBSCRIBER);
	}
	if (!punt_port_allowed(p->port->slot, now))
		return drop(p, XBNG_DROP_PUNT_RATE_PORT);
	XBNG_TRACE_STEP(XBNG_TS_PUNT, kind, len);
#ifndef XBNG_TRACE /* the punt itself: live build only (lib/trace.h) */
	if (punt_xsk && punt_to_xsk(p, key, kind, now))
		return verdict(p, reason, XDP_REDIRECT);
	r = bpf_ringbuf_reserve(&punt, sizeof(*r), 0);
	if (!r)
		return drop(p, XBNG_DROP_PUNT_RING_FULL);
	r->kind = kind;
	r->ifindex = key->ifindex;
	r->outer_vid = key->outer_vid;
	r->inner_vid = key->inner_vid;
	r->timestamp_ns = now;
	/* A punted frame holds at least its Ethernet header; testing that
	 * (not len == 0) gives older verifiers (6.1) the lower bound the
	 * helper's size needs. */
	if (len < sizeof(struct ethhdr) || bpf_xdp_load_bytes(p->ctx, 0, r->frame, len)) {
		bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP);
		return drop(p, XBNG_DROP_INTERNAL);
	}
	r->len = len;
	bpf_ringbuf_submit(r, 0);
#endif
	return verdict(p, reason, XDP_DROP);
}

#endif /* XBNG_BPF_PUNT_H */
