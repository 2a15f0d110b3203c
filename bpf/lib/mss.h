/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* TCP MSS clamping on access ports (docs/design.md "MSS clamping"): the MSS
 * option of a SYN or SYN-ACK crossing an access port, either way, is lowered
 * to what the port's subscriber MTU carries (-40 IPv4, -60 IPv6), with an
 * incremental checksum update. A SYN without the option, or with a smaller
 * one, is untouched. The check on ordinary packets is inline (protocol,
 * then the SYN flag); the option walk is a subprogram that only SYNs reach. */
#ifndef XBNG_BPF_MSS_H
#define XBNG_BPF_MSS_H

#include "lib/common.h"
#include "lib/counters.h"
#include "lib/csum.h"

#define XBNG_TCP_FLAG_SYN 0x02
#define XBNG_TCPOPT_EOL 0
#define XBNG_TCPOPT_NOP 1
#define XBNG_TCPOPT_MSS 2
#define XBNG_TCP_MAX_OPTS 40

/* The option bytes, copied out of the packet, and the walk's position. */
struct mss_walk {
	__u8 opts[XBNG_TCP_MAX_OPTS + 4];
	__u32 len;   /* option bytes present */
	__u32 off;   /* next option */
	__s32 found; /* offset of the MSS option, or -1 */
};

/* One option per call (bpf_loop callback: verified once, whatever the
 * number of iterations). */
static long mss_walk_step(__u64 i, void *ctx)
{
	struct mss_walk *w = ctx;
	__u32 off = w->off;
	__u8 kind, len;

	if (off >= w->len || off >= XBNG_TCP_MAX_OPTS)
		return 1;
	kind = w->opts[off];
	if (kind == XBNG_TCPOPT_EOL)
		return 1;
	if (kind == XBNG_TCPOPT_NOP) {
		w->off = off + 1;
		return 0;
	}
	if (off + 1 >= w->len)
		return 1;
	len = w->opts[off + 1];
	if (kind == XBNG_TCPOPT_MSS) {
		if (len == 4 && off + 4 <= w->len)
			w->found = off;
		return 1;
	}
	if (len < 2)
		return 1; /* malformed: stop */
	w->off = off + len;
	return 0;
}

/* `tcp_off`: frame offset of the TCP header of a SYN (its flags byte was
 * checked by the caller); `mss_max` what the subscriber MTU allows. */
static __noinline int mss_clamp(struct xdp_md *ctx, __u32 tcp_off, __u32 mss_max)
{
	struct mss_walk w = {};
	__u8 doff;
	__u16 old, new, check, at;

	if (bpf_xdp_load_bytes(ctx, tcp_off + 12, &doff, 1))
		return 0;
	w.len = (doff >> 4) * 4;
	if (w.len <= 20)
		return 0;
	w.len -= 20;
	if (w.len > XBNG_TCP_MAX_OPTS)
		return 0;
	if (bpf_xdp_load_bytes(ctx, tcp_off + 20, w.opts, w.len))
		return 0; /* options cut short: not ours to fix */
	w.found = -1;
	bpf_loop(XBNG_TCP_MAX_OPTS, mss_walk_step, &w, 0);
	if (w.found < 0 || w.found > XBNG_TCP_MAX_OPTS - 4)
		return 0;
	at = (__u16)w.found;
	old = (__u16)w.opts[at + 2] << 8 | w.opts[at + 3];
	if (old <= mss_max)
		return 0;
	new = (__u16)mss_max;
	if (bpf_xdp_load_bytes(ctx, tcp_off + 16, &check, 2))
		return 0;
	/* The MSS value sits at TCP offset 22 + at: at an odd offset its two
	 * bytes straddle two 16-bit words of the checksum, which is the same
	 * as a byte-swapped word. */
	if (at & 1)
		check = csum_replace16(check, old, new);
	else
		check = csum_replace16(check, bpf_htons(old), bpf_htons(new));
	new = bpf_htons(new);
	if (bpf_xdp_store_bytes(ctx, tcp_off + 20 + at + 2, &new, 2) ||
	    bpf_xdp_store_bytes(ctx, tcp_off + 16, &check, 2))
		return 0;
	count_reason(XBNG_MSS_CLAMPED, 0);
	return 1;
}

/* IPv4: TCP first fragment with SYN set on a port that clamps. `l3_off` is
 * the IPv4 header's frame offset. */
XBNG_INLINE void mss_clamp_v4(const struct xbng_pkt *p, const struct xbng_port *port,
			      struct iphdr *ip, __u32 l3_off)
{
	__u32 ihl = (ip->ihl & 0xf) * 4;
	__u8 *tcp = (void *)ip + ihl;

	if ((void *)(tcp + 14) > pkt_end(p) || !(tcp[13] & XBNG_TCP_FLAG_SYN))
		return;
	if ((ip->frag_off & bpf_htons(0x1fff)) || !(port->flags & XBNG_PORT_F_MSS_CLAMP) ||
	    port->sub_mtu < 128)
		return;
	mss_clamp(p->ctx, l3_off + ihl, port->sub_mtu - 40);
}

/* IPv6: TCP directly after the fixed header (a SYN behind extension headers
 * is left alone). */
XBNG_INLINE void mss_clamp_v6(const struct xbng_pkt *p, const struct xbng_port *port,
			      struct ipv6hdr *ip6, __u32 l3_off)
{
	__u8 *tcp = (void *)(ip6 + 1);

	if ((void *)(tcp + 14) > pkt_end(p) || !(tcp[13] & XBNG_TCP_FLAG_SYN))
		return;
	if (!(port->flags & XBNG_PORT_F_MSS_CLAMP) || port->sub_mtu < 128)
		return;
	mss_clamp(p->ctx, l3_off + sizeof(*ip6), port->sub_mtu - 60);
}

#endif /* XBNG_BPF_MSS_H */
