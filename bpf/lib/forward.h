/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The last step of each direction: upstream through the kernel FIB and the
 * uplink, downstream to the subscriber's access port. */
#ifndef XBNG_BPF_FORWARD_H
#define XBNG_BPF_FORWARD_H

#include "lib/common.h"
#include "lib/counters.h"
#include "lib/csum.h"
#include "lib/qinq.h"
#include "lib/icmp.h"
#include "lib/mss.h"
#include "lib/tohost.h"
#include "lib/ha.h"
#include "lib/lookup.h"
#include "lib/benchstop.h"

/* Frames the kernel is to handle leave untagged, MACs and TTL untouched
 * (the kernel decrements the TTL when it forwards). */
XBNG_INLINE int upstream_pass(const struct xbng_pkt *p, __u32 reason)
{
	if (qinq_pop_keep_macs(p->ctx))
		return drop(p, XBNG_DROP_INTERNAL);
	return verdict(p, reason, XDP_PASS);
}

XBNG_INLINE void subscriber_count_up(struct xbng_subscriber *sub, __u32 bytes)
{
	XBNG_LIVE(__sync_fetch_and_add(&sub->up_packets, 1);
		  __sync_fetch_and_add(&sub->up_bytes, bytes);)
}

/* bpf_fib_lookup in the ingress port's context, then: SUCCESS -> TTL
 * decremented, tags popped, MACs rewritten, redirected; NO_NEIGH,
 * FRAG_NEEDED, FWD_DISABLED -> popped and passed to the kernel; NOT_FWDED
 * (for the host itself) -> passed only to allowed services, else dropped;
 * blackhole/unreachable/prohibit -> dropped. `l3` is the validated IPv4 or
 * IPv6 header (`is_v4` says which); `fib` holds the lookup inputs. */
XBNG_INLINE int upstream_forward(const struct xbng_pkt *p, struct xbng_subscriber *sub,
				 struct bpf_fib_lookup *fib, void *l3, int is_v4)
{
	struct xbng_port *egress_port;
	__u32 egress;
	long rc;

	fib->ifindex = p->ifindex;
	rc = bpf_fib_lookup(p->ctx, fib, sizeof(*fib), 0);
	XBNG_TRACE_STEP(XBNG_TS_FIB, rc, fib->ifindex);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		break;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		subscriber_count_up(sub, p->len);
		return upstream_pass(p, XBNG_PASS_NO_NEIGH);
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		/* Without DF the kernel fragments it; else the sender is told. */
		if (is_v4 && !(((struct iphdr *)l3)->frag_off & bpf_htons(XBNG_IP_DF)))
			return upstream_pass(p, XBNG_PASS_FRAG_NEEDED);
		return icmp_error(p, XBNG_QINQ_HLEN, is_v4, XBNG_ERR_TOO_BIG, fib->mtu_result,
				  XBNG_DROP_TOO_BIG);
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return upstream_pass(p, XBNG_PASS_FWD_DISABLED);
	case BPF_FIB_LKUP_RET_NOT_FWDED: {
		/* For the host itself: only the services allowed (security.allow_to_host). */
		int rc = to_host_allowed(p, l3, is_v4);

		if (rc != XBNG_CONTINUE)
			return rc;
		return upstream_pass(p, XBNG_PASS_FIB_LOCAL);
	}
	case BPF_FIB_LKUP_RET_UNSUPP_LWT:
		return upstream_pass(p, XBNG_PASS_FIB_LOCAL);
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
		return drop(p, XBNG_DROP_FIB_UNREACHABLE);
	default:
		return drop(p, XBNG_DROP_INTERNAL);
	}

	BENCH_STOP(XBNG_BSTOP_FIB, bench_stop_here(p));
	egress = fib->ifindex;
	XBNG_TRACE_STEP(XBNG_TS_REDIRECT, egress, 0);
	if (bpf_redirect_map(&tx_ports, egress, XDP_DROP) != XDP_REDIRECT)
		return drop(p, XBNG_DROP_NO_EGRESS_PORT);
	if (is_v4)
		ipv4_decrement_ttl(l3);
	else
		((struct ipv6hdr *)l3)->hop_limit--;
	if (qinq_pop(p->ctx, fib->dmac, fib->smac))
		return drop(p, XBNG_DROP_INTERNAL);
	BENCH_STOP(XBNG_BSTOP_POP, verdict(p, XBNG_FWD_UPSTREAM, XDP_REDIRECT));

	subscriber_count_up(sub, p->len);
	egress_port = bpf_map_lookup_elem(&ports, &egress);
	if (egress_port)
		port_tx(egress_port->slot, p->len - XBNG_QINQ_TAGS_LEN);
	return verdict(p, XBNG_FWD_UPSTREAM, XDP_REDIRECT);
}

/* A learned MAC reaches the route on first use: one subscriber lookup, then
 * the route carries it (the agent copies it on later rewrites). */
XBNG_INLINE int route_resolve_mac(struct xbng_route *route)
{
	struct xbng_subscriber *sub;

	if (route->flags & XBNG_ROUTE_F_MAC_VALID)
		return 1;
	sub = subscriber_lookup(&route->sub);
	if (!sub || !(sub->flags & XBNG_SUB_F_MAC_VALID))
		return 0;
	mac_copy(route->mac, sub->mac);
	barrier();
	route->flags |= XBNG_ROUTE_F_MAC_VALID;
	return 1;
}

/* Larger than the subscriber MTU: IPv6 and IPv4 with DF get "packet too
 * big" / "fragmentation needed" with that MTU. IPv4 without DF is dropped
 * and counted (drop_too_big_not_df): XDP cannot fragment, and the kernel
 * has no route to subscribers (docs/design.md "MTU"). */
static __noinline int downstream_too_big(const struct xbng_pkt *p, const struct xbng_port *port,
					 void *l3, int is_v4)
{
	if (is_v4 && !(((struct iphdr *)l3)->frag_off & bpf_htons(XBNG_IP_DF)))
		return drop(p, XBNG_DROP_TOO_BIG_NO_DF);
	return icmp_error(p, sizeof(struct ethhdr), is_v4, XBNG_ERR_TOO_BIG, port->sub_mtu,
			  XBNG_DROP_TOO_BIG);
}

/* Not a subscriber: an address of a declared pool that nobody holds is
 * dropped with an unreachable (the kernel would route it back upstream and
 * loop); anything else is the host's. */
XBNG_INLINE int uplink_miss_v4(const struct xbng_pkt *p, struct iphdr *ip)
{
	struct xbng_lpm_v4_key k = {.prefixlen = 32, .addr = ip->daddr};

	if (!bpf_map_lookup_elem(&pools_v4, &k))
		return verdict(p, XBNG_PASS_NOT_SUBSCRIBER, XDP_PASS);
	if (ha_standby(p->port))
		return drop(p, XBNG_DROP_STANDBY); /* not active: no ICMP for the pools */
	if (ipv4_check_header(p, ip, p->len - sizeof(struct ethhdr)) != XBNG_CONTINUE)
		return XDP_DROP;
	return icmp_error(p, sizeof(struct ethhdr), 1, XBNG_ERR_UNREACHABLE, 0,
			  XBNG_DROP_POOL_UNASSIGNED);
}

XBNG_INLINE int uplink_miss_v6(const struct xbng_pkt *p, struct ipv6hdr *ip6)
{
	struct xbng_lpm_v6_key k = {.prefixlen = 128};

	__builtin_memcpy(k.addr, ip6->daddr.in6_u.u6_addr32, 16);
	if (!bpf_map_lookup_elem(&pools_v6, &k))
		return verdict(p, XBNG_PASS_NOT_SUBSCRIBER, XDP_PASS);
	if (ha_standby(p->port))
		return drop(p, XBNG_DROP_STANDBY); /* not active: no ICMP for the pools */
	if (ipv6_check_header(p, ip6, p->len - sizeof(struct ethhdr)) != XBNG_CONTINUE)
		return XDP_DROP;
	return icmp_error(p, sizeof(struct ethhdr), 0, XBNG_ERR_UNREACHABLE, 0,
			  XBNG_DROP_POOL_UNASSIGNED);
}

/* Route found: MAC, access port, MTU, TTL; then push the tags and redirect.
 * `l3` is the IPv4 or IPv6 header (`is_v4` says which), `l3_len` its
 * validated length. The route's counters sit in the value the lookup just
 * brought in: atomic adds, no further lookup. */
XBNG_INLINE int downstream_forward(const struct xbng_pkt *p, struct xbng_route *route, void *l3,
				   int is_v4, __u32 l3_len)
{
	struct xbng_port *port;
	__u32 out_len = p->len + XBNG_QINQ_TAGS_LEN;
	__u8 ttl = is_v4 ? ((struct iphdr *)l3)->ttl : ((struct ipv6hdr *)l3)->hop_limit;

	if (!route_resolve_mac(route))
		return drop(p, XBNG_DROP_MAC_UNKNOWN);
	port = bpf_map_lookup_elem(&ports, &route->sub.ifindex);
	if (!port || port->role != XBNG_ROLE_ACCESS)
		return drop(p, XBNG_DROP_NO_EGRESS_PORT);
	if (ttl <= 1)
		return icmp_error(p, sizeof(struct ethhdr), is_v4, XBNG_ERR_TIME_EXCEEDED, 0,
				  XBNG_DROP_TTL_EXCEEDED);
	if (l3_len > port->sub_mtu)
		return downstream_too_big(p, port, l3, is_v4);
	XBNG_TRACE_STEP(XBNG_TS_REDIRECT, route->sub.ifindex, 0);
	if (bpf_redirect_map(&tx_ports, route->sub.ifindex, XDP_DROP) != XDP_REDIRECT)
		return drop(p, XBNG_DROP_NO_EGRESS_PORT);

	if (is_v4) {
		if (((struct iphdr *)l3)->protocol == IPPROTO_TCP)
			mss_clamp_v4(p, port, l3, sizeof(struct ethhdr));
		ipv4_decrement_ttl(l3);
	} else {
		if (((struct ipv6hdr *)l3)->nexthdr == IPPROTO_TCP)
			mss_clamp_v6(p, port, l3, sizeof(struct ethhdr));
		((struct ipv6hdr *)l3)->hop_limit--;
	}
	if (qinq_push(p->ctx, route->mac, port->mac, port->outer_tpid, route->sub.outer_vid,
		      route->sub.inner_vid))
		return drop(p, XBNG_DROP_INTERNAL);

	XBNG_LIVE(__sync_fetch_and_add(&route->down_packets, 1);
		  __sync_fetch_and_add(&route->down_bytes, out_len);)
	port_tx(port->slot, out_len);
	return verdict(p, XBNG_FWD_DOWNSTREAM, XDP_REDIRECT);
}

#endif /* XBNG_BPF_FORWARD_H */
