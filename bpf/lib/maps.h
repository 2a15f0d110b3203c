/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every map of the fast path. Names are part of the ABI (pinned by name). */
#ifndef XBNG_BPF_MAPS_H
#define XBNG_BPF_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xbng/abi.h"

/* Load-time configuration (set by the agent before load). */
const volatile __u64 events_per_sec = XBNG_DEFAULT_EVENTS_PER_SEC;
const volatile __u64 unknown_interval_ns = XBNG_DEFAULT_UNKNOWN_INTERVAL_NS;
/* Bring-up: punt control frames to xbngd (0: drop them, counted),
 * GCRA per subscriber and protocol (emission interval, burst tolerance: the
 * same for each protocol) and a per-CPU window per access port. */
const volatile __u32 punt_enabled = 1;
const volatile __u64 punt_sub_interval_ns = 1000000000ull / XBNG_DEFAULT_PUNT_SUB_RATE;
const volatile __u64 punt_sub_tolerance_ns =
	(XBNG_DEFAULT_PUNT_SUB_BURST - 1) * (1000000000ull / XBNG_DEFAULT_PUNT_SUB_RATE);
const volatile __u64 punt_port_per_sec = XBNG_DEFAULT_PUNT_PORT_RATE;
/* 1: punted frames go to xbngd's AF_XDP sockets (`punt_xsks`), 0: the
 * `punt` ring buffer only. */
const volatile __u32 punt_xsk = 0;

/* Subscribers by (access ifindex, S-VID, C-VID); written by the agent, the
 * fast path writes learned MACs and upstream counters. Resized at load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XBNG_DEFAULT_MAX_SUBSCRIBERS);
	__type(key, struct xbng_sub_key);
	__type(value, struct xbng_subscriber);
} subscribers SEC(".maps");

/* Subscriber IPv4 /32 host routes; written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XBNG_DEFAULT_MAX_SUBSCRIBERS);
	__type(key, __be32);
	__type(value, struct xbng_route);
} routes_v4 SEC(".maps");

/* Subscriber IPv6 /128 host routes; written by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XBNG_DEFAULT_MAX_SUBSCRIBERS);
	__type(key, struct xbng_v6_key);
	__type(value, struct xbng_route);
} routes_v6 SEC(".maps");

/* Delegated IPv6 /64 prefixes (exact match on the upper 64 bits); agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XBNG_DEFAULT_MAX_SUBSCRIBERS);
	__type(key, struct xbng_v6_64_key);
	__type(value, struct xbng_route);
} routes_v6_64 SEC(".maps");

/* Routed IPv4 prefixes /8../31 (framed routes); agent. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, XBNG_DEFAULT_MAX_SUBSCRIBERS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct xbng_lpm_v4_key);
	__type(value, struct xbng_route);
} prefixes_v4 SEC(".maps");

/* Delegated IPv6 prefixes other than /64 (/40../63); agent. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, XBNG_DEFAULT_MAX_SUBSCRIBERS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct xbng_lpm_v6_key);
	__type(value, struct xbng_route);
} prefixes_v6 SEC(".maps");

/* Port configuration by ifindex; agent at start. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XBNG_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct xbng_port);
} ports SEC(".maps");

/* Redirect targets (every access and uplink port); agent at start. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, XBNG_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

/* Verdict counters by enum xbng_reason; fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XBNG_REASON_MAX);
	__type(key, __u32);
	__type(value, struct xbng_counter);
} stats SEC(".maps");

/* Per-port rx/tx counters by xbng_port.slot; fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XBNG_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct xbng_port_stats);
} port_stats SEC(".maps");

/* Events to the agent (unknown subscriber, MAC learned); fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, XBNG_EVENTS_RINGBUF_BYTES);
} events SEC(".maps");

/* Last event time per unknown key (rate limit); fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XBNG_UNKNOWN_SEEN_ENTRIES);
	__type(key, struct xbng_sub_key);
	__type(value, struct xbng_unknown_seen);
} unknown_seen SEC(".maps");

/* Per-CPU event budget window (rate limit); fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbng_event_budget);
} event_budget SEC(".maps");

/* ---- router correctness: ICMP errors, subscriber pools ----------------------------- */
/* ICMP error token bucket (load-time; defaults: 1000/s, burst 50 per CPU). */
const volatile __u64 icmp_token_ns = 1000000000ull / XBNG_DEFAULT_ICMP_RATE;
const volatile __u64 icmp_burst_ns =
	XBNG_DEFAULT_ICMP_BURST * (1000000000ull / XBNG_DEFAULT_ICMP_RATE);

/* Per-CPU ICMP error token bucket; fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbng_icmp_budget);
} icmp_budget SEC(".maps");

/* Per-CPU scratch buffer of the ICMP builders (checksum input); fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbng_icmp_scratch);
} icmp_scratch SEC(".maps");

/* Subscriber pools (IPv4) declared per access port; agent at start. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, XBNG_MAX_POOLS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct xbng_lpm_v4_key);
	__type(value, struct xbng_pool);
} pools_v4 SEC(".maps");

/* Subscriber pools (IPv6); agent at start. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, XBNG_MAX_POOLS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct xbng_lpm_v6_key);
	__type(value, struct xbng_pool);
} pools_v6 SEC(".maps");
/* Rate plans: per-subscriber policer state by xbng_subscriber.slot (the
 * downstream bucket, configured rates, policed counters); written by the
 * agent, buckets and policed counters by the fast path. Mmapable so that
 * its values start page-aligned: each 64-byte entry is one cache line. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XBNG_DEFAULT_MAX_SUBSCRIBERS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct xbng_police);
} police SEC(".maps");
/* Control frames of provisioned subscribers for xbngd (struct
 * xbng_punt_record); fast path writes, xbngd reads. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, XBNG_PUNT_RINGBUF_BYTES);
} punt SEC(".maps");

/* AF_XDP sockets of xbngd for punted frames (punt_xsk = 1), at
 * slot * XBNG_PUNT_XSK_QUEUES + RX queue; written by the agent, the fast
 * path redirects into it. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XBNG_PUNT_XSK_ENTRIES);
	__type(key, __u32);
	__type(value, __u32);
} punt_xsks SEC(".maps");

/* Per-subscriber punt rate limits (a GCRA state per protocol), touched only
 * by control frames; fast path. Kept out of `subscribers` on purpose. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XBNG_PUNT_LIMIT_ENTRIES);
	__type(key, struct xbng_sub_key);
	__type(value, struct xbng_punt_gcra);
} punt_limit SEC(".maps");

/* Per-CPU punt budget window per access port (by xbng_port.slot); fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XBNG_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct xbng_punt_window);
} punt_port_budget SEC(".maps");

/* Hardening. Services on the host's own addresses that subscribers may
 * reach (everything else addressed to the host is dropped); agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XBNG_LOCAL_ALLOW_ENTRIES);
	__type(key, struct xbng_local_svc);
	__type(value, __u8);
} local_allow SEC(".maps");

/* Hardening. Last MAC event (changed/conflict) per subscriber key: rate
 * limit of those events and of MAC moves under "follow"; fast path. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XBNG_MAC_SEEN_ENTRIES);
	__type(key, struct xbng_sub_key);
	__type(value, struct xbng_unknown_seen);
} mac_seen SEC(".maps");

/* Direct routes (abi.h "direct routes"): the pools laid out in `direct_v4`;
 * agent at start. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbng_direct_table);
} direct_pools SEC(".maps");

/* IPv4 /32 host routes inside the direct pools, by slot; written by the
 * agent (the fast path writes the counters and a learned MAC, as in
 * `routes_v4`). Resized at load (limits.direct_slots). Mmapable so that
 * each 64-byte value is one cache line. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct xbng_direct_route);
} direct_v4 SEC(".maps");

/* The IPv6 pools laid out in `direct_v6` (abi.h); agent at start. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbng_direct_table_v6);
} direct_pools_v6 SEC(".maps");

/* IPv6 /64 and /128 routes inside the IPv6 direct pools, by slot, as
 * `direct_v4` (limits.direct_slots_v6). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct xbng_direct_route);
} direct_v6 SEC(".maps");

/* Direct subscribers (abi.h "direct subscribers"): the S-VLAN ranges laid
 * out in `direct_subscribers`; agent at start. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbng_direct_sub_table);
} direct_sub_ranges SEC(".maps");

/* Subscribers inside the declared S-VLAN ranges, by slot; written by the
 * agent (the fast path writes learned MACs, upstream counters and the
 * upstream bucket, as in `subscribers`). Resized at load
 * (limits.direct_subscriber_slots). Mmapable so that each 64-byte value is
 * one cache line. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct xbng_subscriber);
} direct_subscribers SEC(".maps");

#endif /* XBNG_BPF_MAPS_H */
