/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every verdict the fast path counts, once. XBNG_REASONS(X) expands to
 * X(ENUM_SUFFIX, "metric_name", kind) for each reason; the BPF programs use
 * the enum, the agent the enum and the names. Index into the `stats` map.
 * Append only (the numbering is part of the ABI).
 */
#ifndef XBNG_REASONS_H
#define XBNG_REASONS_H

#define XBNG_KIND_FORWARD 0 /* redirected to another port */
#define XBNG_KIND_TX 1	    /* answered on the same port (XDP_TX) */
#define XBNG_KIND_PASS 2    /* handed to the kernel (XDP_PASS) */
#define XBNG_KIND_DROP 3    /* dropped (XDP_DROP) */
#define XBNG_KIND_INFO 4    /* not a verdict: an event-side counter */
#define XBNG_KIND_PUNT 5    /* copied to xbngd (punt ring buffer), then dropped */

#define XBNG_REASONS(X)                                                                 \
	X(FWD_UPSTREAM, "forward_upstream", XBNG_KIND_FORWARD)                          \
	X(FWD_DOWNSTREAM, "forward_downstream", XBNG_KIND_FORWARD)                      \
	X(TX_ARP_REPLY, "arp_reply", XBNG_KIND_TX)                                      \
	X(TX_NEIGH_ADVERT, "neighbour_advert", XBNG_KIND_TX)                            \
	X(PASS_NO_NEIGH, "pass_no_neighbour", XBNG_KIND_PASS)                           \
	X(PASS_FIB_LOCAL, "pass_fib_not_forwarded", XBNG_KIND_PASS)                     \
	X(PASS_FRAG_NEEDED, "pass_frag_needed", XBNG_KIND_PASS)                         \
	X(PASS_FWD_DISABLED, "pass_forwarding_disabled", XBNG_KIND_PASS)                \
	X(PASS_NOT_SUBSCRIBER, "pass_not_subscriber", XBNG_KIND_PASS)                   \
	X(PASS_UPLINK_NON_IP, "pass_uplink_non_ip", XBNG_KIND_PASS)                     \
	X(DROP_UNTAGGED, "drop_untagged", XBNG_KIND_DROP)                               \
	X(DROP_SINGLE_TAG, "drop_single_tag", XBNG_KIND_DROP)                           \
	X(DROP_TOO_MANY_TAGS, "drop_too_many_tags", XBNG_KIND_DROP)                     \
	X(DROP_WRONG_OUTER_TPID, "drop_wrong_outer_tpid", XBNG_KIND_DROP)               \
	X(DROP_WRONG_INNER_TPID, "drop_wrong_inner_tpid", XBNG_KIND_DROP)               \
	X(DROP_TRUNCATED, "drop_truncated", XBNG_KIND_DROP)                             \
	X(DROP_NO_PORT, "drop_unconfigured_port", XBNG_KIND_DROP)                       \
	X(DROP_UNKNOWN_SUBSCRIBER, "drop_unknown_subscriber", XBNG_KIND_DROP)           \
	X(DROP_NOT_OUR_MAC, "drop_not_our_mac", XBNG_KIND_DROP)                         \
	X(DROP_SPOOFED_V4, "drop_spoofed_ipv4", XBNG_KIND_DROP)                         \
	X(DROP_SPOOFED_V6, "drop_spoofed_ipv6", XBNG_KIND_DROP)                         \
	X(DROP_LINK_LOCAL_SRC, "drop_link_local_source", XBNG_KIND_DROP)                \
	X(DROP_MULTICAST_DST, "drop_multicast_destination", XBNG_KIND_DROP)             \
	X(DROP_BAD_IP_HEADER, "drop_bad_ip_header", XBNG_KIND_DROP)                     \
	X(DROP_TTL_EXCEEDED, "drop_ttl_exceeded", XBNG_KIND_DROP)                       \
	X(DROP_FIB_UNREACHABLE, "drop_fib_unreachable", XBNG_KIND_DROP)                 \
	X(DROP_NO_EGRESS_PORT, "drop_no_egress_port", XBNG_KIND_DROP)                   \
	X(DROP_ARP_SPOOFED, "drop_arp_spoofed_sender", XBNG_KIND_DROP)                  \
	X(DROP_ARP_OWN_ADDRESS, "drop_arp_own_address", XBNG_KIND_DROP)                 \
	X(DROP_ARP_OTHER, "drop_arp_other", XBNG_KIND_DROP)                             \
	X(DROP_ND_OTHER, "drop_nd_other", XBNG_KIND_DROP)                               \
	X(DROP_ROUTER_SOLICIT, "drop_router_solicitation", XBNG_KIND_DROP)              \
	X(DROP_DHCPV4, "drop_dhcpv4", XBNG_KIND_DROP)                                   \
	X(DROP_DHCPV6, "drop_dhcpv6", XBNG_KIND_DROP)                                   \
	X(DROP_UNSUPPORTED_L3, "drop_unsupported_ethertype", XBNG_KIND_DROP)            \
	X(DROP_MAC_UNKNOWN, "drop_mac_unknown", XBNG_KIND_DROP)                         \
	X(DROP_TOO_BIG, "drop_too_big", XBNG_KIND_DROP)                                 \
	X(DROP_INTERNAL, "drop_internal_error", XBNG_KIND_DROP)                         \
	X(EVENT_SENT, "event_sent", XBNG_KIND_INFO)                                     \
	X(EVENT_SUPPRESSED, "event_rate_limited", XBNG_KIND_INFO)                       \
	X(EVENT_RINGBUF_FULL, "event_ringbuf_full", XBNG_KIND_INFO)                     \
	X(TX_ICMP_TIME_EXCEEDED, "icmp_time_exceeded", XBNG_KIND_TX)                    \
	X(TX_ICMP_TOO_BIG, "icmp_too_big", XBNG_KIND_TX)                                \
	X(TX_ICMP_UNREACHABLE, "icmp_unreachable", XBNG_KIND_TX)                        \
	X(TX_ECHO_REPLY, "echo_reply", XBNG_KIND_TX)                                    \
	X(DROP_TOO_BIG_NO_DF, "drop_too_big_not_df", XBNG_KIND_DROP)                    \
	X(DROP_POOL_UNASSIGNED, "drop_pool_unassigned", XBNG_KIND_DROP)                 \
	X(ICMP_RATE_LIMITED, "icmp_rate_limited", XBNG_KIND_INFO)                       \
	X(MSS_CLAMPED, "mss_clamped", XBNG_KIND_INFO)                                   \
	X(DROP_POLICED_UP, "drop_policed_upstream", XBNG_KIND_DROP)                     \
	X(DROP_POLICED_DOWN, "drop_policed_downstream", XBNG_KIND_DROP)                 \
	/* hardening */                                                                 \
	X(DROP_TO_HOST, "drop_to_host", XBNG_KIND_DROP)                                 \
	X(DROP_MAC_MISMATCH, "drop_mac_mismatch", XBNG_KIND_DROP)                       \
	/* bring-up */                                                                  \
	X(PUNT_DHCPV4, "punt_dhcpv4", XBNG_KIND_PUNT)                                   \
	X(PUNT_DHCPV6, "punt_dhcpv6", XBNG_KIND_PUNT)                                   \
	X(PUNT_ROUTER_SOLICIT, "punt_router_solicitation", XBNG_KIND_PUNT)              \
	X(DROP_PUNT_RATE_SUBSCRIBER, "drop_punt_rate_subscriber", XBNG_KIND_DROP)       \
	X(DROP_PUNT_RATE_PORT, "drop_punt_rate_port", XBNG_KIND_DROP)                   \
	X(DROP_PUNT_RING_FULL, "drop_punt_ring_full", XBNG_KIND_DROP)                   \
	X(DROP_PUNT_TOO_BIG, "drop_punt_oversized", XBNG_KIND_DROP)                     \
	X(DROP_DHCPV4_NO_IPV4, "drop_dhcpv4_no_ipv4", XBNG_KIND_DROP)                   \
	/* which protocol's budget refused a drop_punt_rate_subscriber */               \
	X(PUNT_RATE_SUB_DHCPV4, "punt_rate_subscriber_dhcpv4", XBNG_KIND_INFO)          \
	X(PUNT_RATE_SUB_DHCPV6, "punt_rate_subscriber_dhcpv6", XBNG_KIND_INFO)          \
	X(PUNT_RATE_SUB_RS, "punt_rate_subscriber_router_solicitation", XBNG_KIND_INFO) \
	/* control frames of unknown keys on ports with XBNG_PORT_F_PUNT_UNKNOWN */     \
	X(PUNT_UNKNOWN_DHCPV4, "punt_unknown_dhcpv4", XBNG_KIND_PUNT)                   \
	X(PUNT_UNKNOWN_DHCPV6, "punt_unknown_dhcpv6", XBNG_KIND_PUNT)                   \
	X(PUNT_UNKNOWN_RS, "punt_unknown_router_solicitation", XBNG_KIND_PUNT)          \
	/* high availability: a standby (or an active past its deadline) */             \
	X(DROP_STANDBY, "drop_standby", XBNG_KIND_DROP)

#define XBNG_REASON_ENUM_(name, str, kind) XBNG_##name,
enum xbng_reason { XBNG_REASONS(XBNG_REASON_ENUM_) XBNG_REASON_MAX };
#undef XBNG_REASON_ENUM_

#endif /* XBNG_REASONS_H */
