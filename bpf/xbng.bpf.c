// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xbng fast path: QinQ subscriber termination in XDP.
 *   xdp_access  on access ports: subscriber -> network (docs/design.md "Upstream")
 *   xdp_uplink  on uplinks:      network -> subscriber (docs/design.md "Downstream")
 * Each step below either lets the packet continue or ends it with a counted
 * verdict; the steps live in lib/ by topic.
 */
#include "lib/common.h"
#include "lib/counters.h"
#include "lib/csum.h"
#include "lib/qinq.h"
#include "lib/lookup.h"
#include "lib/events.h"
#include "lib/macpolicy.h"
#include "lib/arp.h"
#include "lib/nd.h"
#include "lib/ip.h"
#include "lib/icmp.h"
#include "lib/mss.h"
#include "lib/forward.h"
#include "lib/police.h"
#include "lib/unknown.h"
#include "lib/ha.h"
#include "lib/benchstop.h"

#define STEP(expr)                         \
	do {                               \
		int __rc = (expr);         \
		if (__rc != XBNG_CONTINUE) \
			return __rc;       \
	} while (0)

/* STEP of a named check (enum xbng_trace_check_id): the trace build records
 * whether the frame passed it. */
#define CHECK(id, expr)                                                              \
	do {                                                                         \
		int __rc = (expr);                                                   \
		XBNG_TRACE_STEP(XBNG_TS_CHECK, XBNG_TC_##id, __rc == XBNG_CONTINUE); \
		if (__rc != XBNG_CONTINUE)                                           \
			return __rc;                                                 \
	} while (0)

static __always_inline int access_ipv4(const struct xbng_pkt *p, struct xbng_subscriber *sub,
				       const struct xbng_sub_key *key)
{
	void *data = pkt_data(p), *end = pkt_end(p);
	struct ethhdr *eth = data;
	struct iphdr *ip = data + XBNG_QINQ_HLEN;
	struct bpf_fib_lookup fib = {};

	if ((void *)(ip + 1) > end)
		return drop(p, XBNG_DROP_TRUNCATED);
	CHECK(IP_HEADER, ipv4_check_header(p, ip, p->len - XBNG_QINQ_HLEN));
	CHECK(DHCP, ipv4_check_dhcp(p, ip, sub, key));
	CHECK(DST_MAC, check_dst_mac(p, eth));
	CHECK(ANTISPOOF, ipv4_check_addresses(p, ip, sub, key));
	BENCH_STOP(XBNG_BSTOP_CHECKS, bench_stop_here(p));
	if (ip->protocol == XBNG_IPPROTO_ICMP)
		CHECK(ICMP_ECHO, access_icmp4(p, ip));
	mac_track(p, sub, key, eth->h_source);
	if (ip->ttl <= 1)
		return icmp_error(p, XBNG_QINQ_HLEN, 1, XBNG_ERR_TIME_EXCEEDED, 0,
				  XBNG_DROP_TTL_EXCEEDED);
	if (ip->protocol == IPPROTO_TCP)
		mss_clamp_v4(p, p->port, ip, XBNG_QINQ_HLEN);

	fib.family = XBNG_AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	STEP(police_up(p, sub, fib.tot_len));
	BENCH_STOP(XBNG_BSTOP_POLICE, bench_stop_here(p));
	return upstream_forward(p, sub, &fib, ip, 1);
}

static __always_inline int access_ipv6(const struct xbng_pkt *p, struct xbng_subscriber *sub,
				       const struct xbng_sub_key *key)
{
	void *data = pkt_data(p), *end = pkt_end(p);
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + XBNG_QINQ_HLEN;
	struct bpf_fib_lookup fib = {};

	if ((void *)(ip6 + 1) > end)
		return drop(p, XBNG_DROP_TRUNCATED);
	CHECK(IP_HEADER, ipv6_check_header(p, ip6, p->len - XBNG_QINQ_HLEN));
	if (ip6->nexthdr == XBNG_IPPROTO_ICMPV6) {
		CHECK(ND, access_icmpv6(p, eth, ip6, key));
		CHECK(ICMP_ECHO, access_icmp6_echo(p, eth, ip6, sub, key));
	}
	CHECK(DHCP, ipv6_check_dhcp(p, ip6, key));
	CHECK(DST_MAC, check_dst_mac(p, eth));
	CHECK(ANTISPOOF, ipv6_check_addresses(p, ip6, sub, key));
	BENCH_STOP(XBNG_BSTOP_CHECKS, bench_stop_here(p));
	mac_track(p, sub, key, eth->h_source);
	if (ip6->hop_limit <= 1)
		return icmp_error(p, XBNG_QINQ_HLEN, 0, XBNG_ERR_TIME_EXCEEDED, 0,
				  XBNG_DROP_TTL_EXCEEDED);
	if (ip6->nexthdr == IPPROTO_TCP)
		mss_clamp_v6(p, p->port, ip6, XBNG_QINQ_HLEN);

	fib.family = XBNG_AF_INET6;
	fib.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
	fib.l4_protocol = ip6->nexthdr;
	fib.tot_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	__builtin_memcpy(fib.ipv6_src, ip6->saddr.in6_u.u6_addr32, 16);
	__builtin_memcpy(fib.ipv6_dst, ip6->daddr.in6_u.u6_addr32, 16);
	STEP(police_up(p, sub, fib.tot_len));
	BENCH_STOP(XBNG_BSTOP_POLICE, bench_stop_here(p));
	return upstream_forward(p, sub, &fib, ip6, 0);
}

SEC("xdp")
int xdp_access(struct xdp_md *ctx)
{
	struct xbng_subscriber *sub;
	struct xbng_sub_key key;
	struct xbng_pkt p;
	struct qinq q;

	if (!pkt_init(&p, ctx, XBNG_ROLE_ACCESS))
		return drop(&p, XBNG_DROP_NO_PORT);
	if (ha_standby(p.port))
		return drop(&p, XBNG_DROP_STANDBY);
	STEP(qinq_parse(&p, &q));
	XBNG_TRACE_STEP(XBNG_TS_QINQ, q.outer_vid, q.inner_vid);
	BENCH_STOP(XBNG_BSTOP_PARSED, bench_stop_here(&p));

	key.ifindex = p.ifindex;
	key.outer_vid = q.outer_vid;
	key.inner_vid = q.inner_vid;
	sub = subscriber_lookup(&key);
	XBNG_TRACE_STEP(XBNG_TS_SUBSCRIBER, sub != 0, sub ? sub->slot : 0);
	XBNG_SHADOW(struct xbng_subscriber, sub);
	if (!sub) {
		struct ethhdr *eth = pkt_data(&p);

		if ((void *)(eth + 1) > pkt_end(&p))
			return drop(&p, XBNG_DROP_INTERNAL);
		STEP(access_unknown(&p, &q, &key));
		report_unknown_subscriber(&key, eth->h_source);
		return drop(&p, XBNG_DROP_UNKNOWN_SUBSCRIBER);
	}
	BENCH_STOP(XBNG_BSTOP_LOOKUP, bench_stop_here(&p));
	{
		struct ethhdr *eth = pkt_data(&p);

		if ((void *)(eth + 1) > pkt_end(&p))
			return drop(&p, XBNG_DROP_INTERNAL);
		STEP(mac_enforce(&p, sub, &key, eth->h_source));
	}
	BENCH_STOP(XBNG_BSTOP_MAC, bench_stop_here(&p));

	switch (q.l3_proto) {
	case bpf_htons(XBNG_ETH_P_ARP):
		return access_arp(&p, sub, &key);
	case bpf_htons(ETH_P_IP):
		return access_ipv4(&p, sub, &key);
	case bpf_htons(ETH_P_IPV6):
		return access_ipv6(&p, sub, &key);
	}
	return drop(&p, XBNG_DROP_UNSUPPORTED_L3);
}

static __always_inline int uplink_ipv4(const struct xbng_pkt *p)
{
	void *data = pkt_data(p), *end = pkt_end(p);
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct xbng_route *route;

	if ((void *)(ip + 1) > end)
		return drop(p, XBNG_DROP_TRUNCATED);
	route = route_lookup_v4(&ip->daddr);
	XBNG_TRACE_STEP(XBNG_TS_ROUTE, route != 0, route ? route->sub.ifindex : 0);
	XBNG_SHADOW(struct xbng_route, route);
	if (!route)
		return uplink_miss_v4(p, ip);
	if (ha_standby(p->port))
		return drop(p, XBNG_DROP_STANDBY);
	CHECK(IP_HEADER, ipv4_check_header(p, ip, p->len - sizeof(struct ethhdr)));
	STEP(police_down(p, route, bpf_ntohs(ip->tot_len)));
	return downstream_forward(p, route, ip, 1, bpf_ntohs(ip->tot_len));
}

static __always_inline int uplink_ipv6(const struct xbng_pkt *p)
{
	void *data = pkt_data(p), *end = pkt_end(p);
	struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
	struct xbng_route *route;

	if ((void *)(ip6 + 1) > end)
		return drop(p, XBNG_DROP_TRUNCATED);
	route = route_lookup_v6(ip6->daddr.in6_u.u6_addr32);
	XBNG_TRACE_STEP(XBNG_TS_ROUTE, route != 0, route ? route->sub.ifindex : 0);
	XBNG_SHADOW(struct xbng_route, route);
	if (!route) {
		STEP(ha_uplink_ns(p, ip6));
		return uplink_miss_v6(p, ip6);
	}
	if (ha_standby(p->port))
		return drop(p, XBNG_DROP_STANDBY);
	CHECK(IP_HEADER, ipv6_check_header(p, ip6, p->len - sizeof(struct ethhdr)));
	STEP(police_down(p, route, sizeof(*ip6) + bpf_ntohs(ip6->payload_len)));
	return downstream_forward(p, route, ip6, 0, sizeof(*ip6) + bpf_ntohs(ip6->payload_len));
}

SEC("xdp")
int xdp_uplink(struct xdp_md *ctx)
{
	struct xbng_pkt p;
	struct ethhdr *eth;

	if (!pkt_init(&p, ctx, XBNG_ROLE_UPLINK))
		return drop(&p, XBNG_DROP_NO_PORT);
	eth = pkt_data(&p);
	if ((void *)(eth + 1) > pkt_end(&p))
		return drop(&p, XBNG_DROP_TRUNCATED);

	switch (eth->h_proto) {
	case bpf_htons(ETH_P_IP):
		return uplink_ipv4(&p);
	case bpf_htons(ETH_P_IPV6):
		return uplink_ipv6(&p);
	case bpf_htons(XBNG_ETH_P_ARP):
		STEP(ha_uplink_arp(&p));
		break;
	}
	return verdict(&p, XBNG_PASS_UPLINK_NON_IP, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
