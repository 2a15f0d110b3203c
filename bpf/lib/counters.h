/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-CPU counters: `stats` by reason, `port_stats` by port slot. Every
 * verdict goes through verdict(), so every packet is counted exactly once. */
#ifndef XBNG_BPF_COUNTERS_H
#define XBNG_BPF_COUNTERS_H

#include "lib/common.h"

XBNG_INLINE void count_reason(__u32 reason, __u32 bytes)
{
	XBNG_LIVE(struct xbng_counter *c = bpf_map_lookup_elem(&stats, &reason);

		  if (c) {
			  c->packets++;
			  c->bytes += bytes;
		  })
}

/* Counts the packet (bytes = frame length as received) under `reason` and
 * returns `action`, for `return verdict(...)` at the end of a path. */
XBNG_INLINE int verdict(const struct xbng_pkt *p, __u32 reason, int action)
{
	XBNG_TRACE_STEP(XBNG_TS_VERDICT, reason, action);
	count_reason(reason, p->len);
	return action;
}

XBNG_INLINE int drop(const struct xbng_pkt *p, __u32 reason)
{
	return verdict(p, reason, XDP_DROP);
}

XBNG_INLINE void port_rx(__u32 slot, __u32 bytes)
{
	XBNG_LIVE(struct xbng_port_stats *s = bpf_map_lookup_elem(&port_stats, &slot);

		  if (s) {
			  s->rx_packets++;
			  s->rx_bytes += bytes;
		  })
}

XBNG_INLINE void port_tx(__u32 slot, __u32 bytes)
{
	XBNG_LIVE(struct xbng_port_stats *s = bpf_map_lookup_elem(&port_stats, &slot);

		  if (s) {
			  s->tx_packets++;
			  s->tx_bytes += bytes;
		  })
}

/* Looks up the ingress port and counts rx on it. Returns 0 when the port is
 * not configured with `role` (the caller drops with DROP_NO_PORT). */
XBNG_INLINE int pkt_init(struct xbng_pkt *p, struct xdp_md *ctx, __u16 role)
{
	p->ctx = ctx;
	p->len = ctx->data_end - ctx->data;
	p->ifindex = ctx->ingress_ifindex;
	p->port = bpf_map_lookup_elem(&ports, &p->ifindex);
	XBNG_TRACE_STEP(XBNG_TS_PORT, p->ifindex, p->port ? p->port->role : 0);
	if (!p->port || p->port->role != role)
		return 0;
	port_rx(p->port->slot, p->len);
	return 1;
}

#endif /* XBNG_BPF_COUNTERS_H */
