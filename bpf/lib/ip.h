/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* IPv4/IPv6 header checks and classification of upstream data frames:
 * header sanity, DHCP, destination MAC and address, link-local sources,
 * anti-spoofing. Each returns XBNG_CONTINUE or the counted verdict. */
#ifndef XBNG_BPF_IP_H
#define XBNG_BPF_IP_H

#include "lib/common.h"
#include "lib/counters.h"
#include "lib/lookup.h"
#include "lib/punt.h"

#define XBNG_DHCPV4_SERVER_PORT 67
#define XBNG_DHCPV4_CLIENT_PORT 68
#define XBNG_DHCPV6_CLIENT_PORT 546
#define XBNG_DHCPV6_SERVER_PORT 547
#define XBNG_IP_OFFSET_MASK 0x1fff

/* Version, IHL, total length against the bytes present after `ip`. */
XBNG_INLINE int ipv4_check_header(const struct xbng_pkt *p, struct iphdr *ip, __u32 l3_avail)
{
	__u32 ihl_bytes = ip->ihl * 4;
	__u32 tot_len = bpf_ntohs(ip->tot_len);

	if (ip->version != 4 || ihl_bytes < sizeof(*ip) || tot_len < ihl_bytes)
		return drop(p, XBNG_DROP_BAD_IP_HEADER);
	if (tot_len > l3_avail)
		return drop(p, XBNG_DROP_TRUNCATED);
	return XBNG_CONTINUE;
}

XBNG_INLINE int ipv6_check_header(const struct xbng_pkt *p, struct ipv6hdr *ip6, __u32 l3_avail)
{
	if (ip6->version != 6)
		return drop(p, XBNG_DROP_BAD_IP_HEADER);
	if (sizeof(*ip6) + bpf_ntohs(ip6->payload_len) > l3_avail)
		return drop(p, XBNG_DROP_TRUNCATED);
	return XBNG_CONTINUE;
}

/* DHCPv4 (UDP to port 67 or 68) is the control plane's. Client -> server
 * frames (port 67) broadcast or unicast to the port's gateway are punted to
 * xbngd when bring-up is on; the rest is dropped and counted. Only first
 * fragments carry the UDP header. */
XBNG_INLINE int ipv4_check_dhcp(const struct xbng_pkt *p, struct iphdr *ip,
				const struct xbng_subscriber *sub, const struct xbng_sub_key *key)
{
	struct udphdr *udp;

	if (ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(XBNG_IP_OFFSET_MASK)))
		return XBNG_CONTINUE;
	udp = (void *)ip + (ip->ihl & 0xf) * 4;
	if ((void *)(udp + 1) > pkt_end(p))
		return drop(p, XBNG_DROP_TRUNCATED);
	if (udp->dest == bpf_htons(XBNG_DHCPV4_SERVER_PORT)) {
		if (!punt_enabled)
			return drop(p, XBNG_DROP_DHCPV4);
		if (ip->daddr != 0xffffffff && (!p->port->gw_ipv4 || ip->daddr != p->port->gw_ipv4))
			return drop(p, XBNG_DROP_DHCPV4);
		if (!(sub->flags & XBNG_SUB_F_HAS_IPV4) && !(p->port->flags & XBNG_PORT_F_RELAY4))
			return drop(p, XBNG_DROP_DHCPV4_NO_IPV4);
		return punt_frame(p, key, XBNG_PUNT_KIND_DHCPV4, XBNG_PUNT_DHCPV4);
	}
	if (udp->dest == bpf_htons(XBNG_DHCPV4_CLIENT_PORT))
		return drop(p, XBNG_DROP_DHCPV4);
	return XBNG_CONTINUE;
}

XBNG_INLINE int ipv6_is_dhcp_servers(const __u32 *a) /* ff02::1:2 */
{
	return a[0] == bpf_htonl(0xff020000) && a[1] == 0 && a[2] == 0 &&
	       a[3] == bpf_htonl(0x00010002);
}

/* DHCPv6 (UDP to port 546 or 547, directly after the fixed header): client
 * -> server frames to All_DHCP_Relay_Agents_and_Servers or to the gateway
 * are punted when bring-up is on. */
XBNG_INLINE int ipv6_check_dhcp(const struct xbng_pkt *p, struct ipv6hdr *ip6,
				const struct xbng_sub_key *key)
{
	struct udphdr *udp = (void *)(ip6 + 1);
	const __u32 *dst = ip6->daddr.in6_u.u6_addr32;

	if (ip6->nexthdr != IPPROTO_UDP)
		return XBNG_CONTINUE;
	if ((void *)(udp + 1) > pkt_end(p))
		return drop(p, XBNG_DROP_TRUNCATED);
	if (udp->dest == bpf_htons(XBNG_DHCPV6_SERVER_PORT)) {
		if (!punt_enabled)
			return drop(p, XBNG_DROP_DHCPV6);
		if (!ipv6_is_dhcp_servers(dst) && !ipv6_equal(dst, p->port->gw_ipv6))
			return drop(p, XBNG_DROP_DHCPV6);
		return punt_frame(p, key, XBNG_PUNT_KIND_DHCPV6, XBNG_PUNT_DHCPV6);
	}
	if (udp->dest == bpf_htons(XBNG_DHCPV6_CLIENT_PORT))
		return drop(p, XBNG_DROP_DHCPV6);
	return XBNG_CONTINUE;
}

/* Data frames are routed: they must be addressed to the port (gateway) MAC. */
XBNG_INLINE int check_dst_mac(const struct xbng_pkt *p, struct ethhdr *eth)
{
	if (!mac_equal(eth->h_dest, p->port->mac))
		return drop(p, XBNG_DROP_NOT_OUR_MAC);
	return XBNG_CONTINUE;
}

XBNG_INLINE int ipv4_check_addresses(const struct xbng_pkt *p, struct iphdr *ip,
				     const struct xbng_subscriber *sub,
				     const struct xbng_sub_key *key)
{
	/* 224.0.0.0/4 multicast, 255.255.255.255 limited broadcast. */
	if ((ip->daddr & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000) || ip->daddr == 0xffffffff)
		return drop(p, XBNG_DROP_MULTICAST_DST);
	if (!source_allowed_v4(sub, key, ip->saddr))
		return drop(p, XBNG_DROP_SPOOFED_V4);
	return XBNG_CONTINUE;
}

XBNG_INLINE int ipv6_check_addresses(const struct xbng_pkt *p, struct ipv6hdr *ip6,
				     const struct xbng_subscriber *sub,
				     const struct xbng_sub_key *key)
{
	const __u32 *src = ip6->saddr.in6_u.u6_addr32;

	/* fe80::/10: link-local sources are for ND, never forwarded. */
	if ((src[0] & bpf_htonl(0xffc00000)) == bpf_htonl(0xfe800000))
		return drop(p, XBNG_DROP_LINK_LOCAL_SRC);
	if (ip6->daddr.in6_u.u6_addr8[0] == 0xff)
		return drop(p, XBNG_DROP_MULTICAST_DST);
	if (!source_allowed_v6(sub, key, src))
		return drop(p, XBNG_DROP_SPOOFED_V6);
	return XBNG_CONTINUE;
}

#endif /* XBNG_BPF_IP_H */
