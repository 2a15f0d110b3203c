/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * xbng kernel/user ABI: every struct a BPF map holds, every constant both
 * sides agree on. Included by bpf/ (clang -target bpf) and by agent/ (C++),
 * and defined nowhere else. Changing a layout here means bumping
 * XBNG_ABI_VERSION: the agent refuses to adopt pins of another version.
 */
#ifndef XBNG_ABI_H
#define XBNG_ABI_H

#include <linux/types.h>

#include "xbng/reasons.h"

/* Bumped on any change of a map's key/value layout, type or semantics. The
 * pin directory is <bpffs>/v<XBNG_ABI_VERSION>/. */
#define XBNG_ABI_VERSION 5

#define XBNG_MAX_PORTS 64 /* access + uplink ports */
#define XBNG_DEFAULT_MAX_SUBSCRIBERS 1000000
#define XBNG_EVENTS_RINGBUF_BYTES (256 * 1024)
#define XBNG_UNKNOWN_SEEN_ENTRIES 16384 /* LRU used to rate-limit unknown-key events */

#define XBNG_VID_MASK 0x0fff
#define XBNG_ETH_P_8021Q 0x8100
#define XBNG_ETH_P_8021AD 0x88a8
#define XBNG_ETH_P_QINQ_9100 0x9100

/* ---- subscriber key: (access port, S-VID, C-VID) ------------------------ */
struct xbng_sub_key {
	__u32 ifindex;	 /* access port */
	__u16 outer_vid; /* S-VLAN, 1..4094, host order */
	__u16 inner_vid; /* C-VLAN, 1..4094, host order */
};

/* xbng_subscriber.flags */
#define XBNG_SUB_F_HAS_IPV4 (1u << 0)	/* ipv4 is valid */
#define XBNG_SUB_F_HAS_IPV6 (1u << 1)	/* ipv6 is valid */
#define XBNG_SUB_F_MAC_VALID (1u << 2)	/* mac is known (provisioned or learned) */
#define XBNG_SUB_F_LEARN_MAC (1u << 3)	/* provisioned without MAC: learn it */
#define XBNG_SUB_F_V4_PREFIX (1u << 4)	/* owns routed IPv4 prefixes */
#define XBNG_SUB_F_V6_PREFIX (1u << 5)	/* owns delegated IPv6 prefixes */
#define XBNG_SUB_F_POLICY_SET (1u << 6) /* own rate plan (else the port's default) */
/* In `direct_subscribers` only: the slot holds a subscriber (an empty slot is
 * all zeros). The agent sets it when it writes a slot and strips it when it
 * reads one: the store never sees it. */
#define XBNG_SUB_F_PRESENT (1u << 7)
/* Bits 8..11: XBNG_SUB_F_MAC_POLICY_* below. */

/* ---- rate plans ------------------------------------------------------- */
/* A token bucket in GCRA form (virtual scheduling): one 64-bit state word,
 * updated with compare-and-swap. The bucket is full when tat_ns <= now; a
 * packet of L bytes conforms when max(tat_ns, now) + cost(L) - now <= the
 * cost of burst_bytes, and then moves tat_ns there. This is RFC 2697's
 * committed bucket (CIR, CBS; color-blind, red dropped) with the token count
 * expressed as the time it takes to refill. See docs/policing.md. */
#define XBNG_POLICE_FP_SHIFT 12 /* byte_ns_fp: ns per byte in 1/4096 ns */
struct xbng_bucket {
	__u64 tat_ns;	   /* theoretical arrival time (bpf_ktime_get_ns clock) */
	__u32 byte_ns_fp;  /* (8e9 / rate_bps) << XBNG_POLICE_FP_SHIFT; 0 = unlimited */
	__u32 burst_bytes; /* bucket depth */
};

/* Value of `subscribers`: everything the upstream path needs in one lookup.
 * up_* counters are updated atomically by XDP; the agent carries them over
 * when it rewrites an entry. */
struct xbng_subscriber {
	__u8 mac[6];
	__u16 flags;   /* XBNG_SUB_F_* */
	__be32 ipv4;   /* network order */
	__u32 slot;    /* this subscriber's entry in `police` */
	__u32 ipv6[4]; /* network order */
	__u64 up_packets;
	__u64 up_bytes;
	struct xbng_bucket up; /* upstream policer (in the line the lookup fetched) */
};

/* Value of every downstream route map (host /32, /128, /64 hashes and the
 * two LPM tries): one lookup yields the whole rewrite (port, tags, MAC).
 * mac is copied from the subscriber entry; when it is not valid yet (MAC to
 * be learned) the fast path fills it from `subscribers` on first use.
 * down_* counters are per route; a subscriber's downstream counters are the
 * sum over its routes. */
struct xbng_route {
	struct xbng_sub_key sub;
	__u8 mac[6];
	__u16 flags;  /* XBNG_ROUTE_F_* */
	__u32 slot;   /* the owner's entry in `police` (with F_POLICED) */
	__u32 credit; /* prepaid downstream bytes (with F_CREDIT): bpf/lib/credit.h */
	__u64 down_packets;
	__u64 down_bytes;
};
#define XBNG_ROUTE_F_MAC_VALID (1u << 0)
#define XBNG_ROUTE_F_POLICED (1u << 1) /* owner has a downstream rate */
/* The route may hold prepaid credit drawn in chunks from the owner's shared
 * downstream bucket. At most XBNG_CREDIT_ROUTES routes of a subscriber carry
 * it (the agent sets it on the first ones it writes); the shared bucket is
 * shallower by what they can hold at most. A route the agent writes starts
 * with credit 0. See bpf/lib/credit.h and docs/policing.md. */
#define XBNG_ROUTE_F_CREDIT (1u << 2)
#define XBNG_CREDIT_ROUTES 3	   /* routes of a subscriber with F_CREDIT, at most */
#define XBNG_CREDIT_CHUNK_SHIFT 7  /* a chunk is burst / 128 */
#define XBNG_CREDIT_CHUNK_MIN 2048 /* smaller chunks: no credit, every packet at the bucket */
#define XBNG_CREDIT_SLACK 2048	   /* a route holds at most a chunk and this leftover */

/* Keys of the downstream maps. */
struct xbng_v6_key {   /* routes_v6: IPv6 /128 */
	__u32 addr[4]; /* network order */
};
struct xbng_v6_64_key { /* routes_v6_64: upper 64 bits of a /64 */
	__u32 addr[2];	/* network order */
};
struct xbng_lpm_v4_key { /* prefixes_v4 (LPM trie) */
	__u32 prefixlen;
	__be32 addr;
};
struct xbng_lpm_v6_key { /* prefixes_v6 (LPM trie) */
	__u32 prefixlen;
	__u32 addr[4];
};

/* ---- direct routes: host routes inside a declared pool ------------------
 * An IPv4 /32 inside a pool the direct table lists lives in `direct_v4` at
 * slot base + (address - pool start), not in `routes_v4`: one array line
 * instead of a hash bucket and its element. Everything outside those pools
 * (and every prefix) stays on the hash and trie path. Pools are laid out by
 * the agent at start, in configuration order, while they fit in the
 * array's size (limits.direct_slots); a pool too big for what is left stays
 * on the hash path. See docs/design.md "Direct routes". */
#define XBNG_DIRECT_POOLS 16 /* pools the table lists, at most */
struct xbng_direct_pool {
	__u32 start; /* first address of the pool, host order */
	__u32 size;  /* addresses in the pool (2^(32 - len)) */
	__u32 base;  /* its first slot in `direct_v4` */
	__u32 pad;
};
/* Value of `direct_pools` (array, 1 entry): the table the downstream lookup
 * scans (n_v4 entries, in the line or four it occupies). */
struct xbng_direct_table {
	__u32 n_v4;
	__u32 pad[3];
	struct xbng_direct_pool v4[XBNG_DIRECT_POOLS];
};
/* IPv6 pools laid out in `direct_v6` (`direct_pools_v6`, the same rule as
 * IPv4, and its own size: limits.direct_slots_v6). A pool /L with L < 64
 * holds delegated /64s (unit 64): slot = base + the /64's offset in the pool,
 * looked up in place of `routes_v6_64`, after the `routes_v6` hash (a /128
 * still wins). A pool with L >= 64 holds /128s (unit 128, dense interface
 * identifiers such as a DHCPv6 range): slot = base + the address's offset,
 * looked up in place of `routes_v6`. Pools never overlap (configuration). */
struct xbng_direct_pool_v6 {
	__u64 hi;   /* unit 64: the pool's first /64; unit 128: the /64 it lies in
		     * (upper 64 bits, host order) */
	__u64 lo;   /* unit 128: its first interface identifier (host order); 0 */
	__u32 size; /* slots: 2^(64 - L) or 2^(128 - L) */
	__u32 base; /* its first slot in `direct_v6` */
	__u32 unit; /* 64 or 128: the prefix length a slot holds */
	__u32 pad;
};
/* Value of `direct_pools_v6` (array, 1 entry). */
struct xbng_direct_table_v6 {
	__u32 n;
	__u32 pad[7];
	struct xbng_direct_pool_v6 pools[XBNG_DIRECT_POOLS];
};
/* Value of `direct_v4` and `direct_v6`: a route padded to one cache line (the map is
 * mmapable so that values start page-aligned). The route is present when
 * r.sub.ifindex != 0 (no port has ifindex 0); a slot without one has it 0.
 * n128, in a slot of a pool of /64s only: how many /128s inside that /64
 * live in the `routes_v6` hash. The downstream lookup reads the hash only
 * when it is not 0, so that a /64 costs its line alone; the agent raises it
 * before it inserts such a /128 and lowers it after it deleted one, so that
 * it is never below the truth (above only for the instant between), and
 * writes it exact at start (before it attaches its programs) and with every
 * layout change. A slot may hold a count and no route (a /128 inside a /64
 * nobody has delegated). 0 in every other slot. */
struct xbng_direct_route {
	struct xbng_route r;
	__u32 n128;
	__u8 pad[20];
};

/* ---- direct subscribers: (port, S-VID, C-VID) inside a declared range ----
 * An access port may declare S-VLAN ranges (`direct_svlans`); a subscriber
 * whose key falls in one lives in `direct_subscribers` at slot
 * base + (S-VID - first) * 4096 + C-VID, not in the `subscribers` hash: one
 * array line instead of a hash bucket and its element. Ranges are laid out
 * by the agent at start, in configuration order, each while it fits in the
 * array's size (limits.direct_subscriber_slots); a range too big for what is
 * left stays on the hash path. See docs/design.md "Direct subscribers". */
#define XBNG_DIRECT_SUB_RANGES 16  /* ranges the table lists, at most */
#define XBNG_DIRECT_SUB_CVIDS 4096 /* slots per S-VLAN: every C-VID 0..4095 */
struct xbng_direct_sub_range {
	__u32 ifindex;	  /* access port */
	__u16 first_svid; /* first S-VID of the range */
	__u16 n_svids;	  /* S-VIDs in the range */
	__u32 base;	  /* slot of (first_svid, C-VID 0) in `direct_subscribers` */
	__u32 pad;
};
/* Value of `direct_sub_ranges` (array, 1 entry): the table the upstream
 * lookup scans (n entries). */
struct xbng_direct_sub_table {
	__u32 n;
	__u32 pad[3];
	struct xbng_direct_sub_range r[XBNG_DIRECT_SUB_RANGES];
};
/* The value of `direct_subscribers` is `struct xbng_subscriber` itself (64
 * bytes: one line in the mmapable array), present with XBNG_SUB_F_PRESENT. */

/* ---- ports ---------------------------------------------------------------- */
enum xbng_port_role {
	XBNG_ROLE_NONE = 0,
	XBNG_ROLE_ACCESS = 1,
	XBNG_ROLE_UPLINK = 2,
};

/* Value of `ports`, keyed by ifindex. Written by the agent at start. */
struct xbng_port {
	__u32 ifindex;
	__u16 role;	  /* enum xbng_port_role */
	__u16 outer_tpid; /* host order: 0x88a8 (default), 0x8100 or 0x9100 */
	/* High availability: the node acts active while bpf_ktime_get_ns() <
	 * ha_deadline_ns; 0 means no HA group (always active). Next to `role`,
	 * which every packet already reads, so the check costs no new line. */
	__u64 ha_deadline_ns;
	__u8 mac[6]; /* answers ARP/ND, source of downstream frames */
	__u16 mtu;   /* L3 MTU: untagged payload + 8 must fit on access */
	__u32 slot;  /* index into port_stats */
	/* access: the unnumbered gateway (fe80::1 is implicit for IPv6);
	 * uplink: the HA group's uplink VIPs, which the kernel owns and answers
	 * for; XDP drops ARP requests and neighbour solicitations for them while
	 * the node is not active. Network order, 0 / :: = none. */
	__be32 gw_ipv4;
	__u32 gw_ipv6[4];
	/* ---- router correctness ---- */
	__u16 sub_mtu;	    /* access: largest L3 packet to/from a subscriber */
	__u16 flags;	    /* XBNG_PORT_F_* */
	__be32 icmp_src4;   /* uplink: source of ICMPv4 errors sent from XDP (0: none sent) */
	__u32 icmp_src6[4]; /* uplink: source of ICMPv6 errors (::: none sent) */
	__u8 mac_policy;    /* enum xbng_mac_policy of subscribers without their own */
	__u8 pad14[7];
};
/* xbng_port.ha_deadline_ns: no HA group, and a standby (any past instant). */
#define XBNG_HA_ALWAYS_ACTIVE 0ull
#define XBNG_HA_STANDBY 1ull
#define XBNG_PORT_F_MSS_CLAMP (1u << 0) /* access: clamp TCP MSS of SYNs to sub_mtu */
/* access: the first DHCPv4 DISCOVER/REQUEST, DHCPv6 client message or Router
 * Solicitation of an unprovisioned key is punted (not only reported), so
 * that xbngd can authorize it (RADIUS) and create the subscriber. Other
 * frames of unknown keys are dropped as on every port. */
#define XBNG_PORT_F_PUNT_UNKNOWN (1u << 1)
/* access: DHCPv4 is relayed to the ISP's servers (dhcp = "relay" with IPv4
 * servers): a subscriber without an IPv4 address still has its DHCPv4
 * punted, since the relayed lease is what gives it one (one RADIUS
 * authorized without an address, or one the DHCPv6 relay created). */
#define XBNG_PORT_F_RELAY4 (1u << 2)

/* Value of `port_stats` (per-CPU array indexed by xbng_port.slot). */
struct xbng_port_stats {
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 tx_packets;
	__u64 tx_bytes;
};

/* Value of `stats` (per-CPU array indexed by enum xbng_reason). */
struct xbng_counter {
	__u64 packets;
	__u64 bytes;
};

/* ---- events: BPF ring buffer `events` -------------------------------------- */
enum xbng_event_type {
	XBNG_EVENT_UNKNOWN_SUBSCRIBER = 1, /* frame on an unprovisioned key */
	XBNG_EVENT_MAC_LEARNED = 2,	   /* first valid frame of a LEARN_MAC subscriber */
	XBNG_EVENT_MAC_CHANGED = 3,	   /* MAC policy "follow" took a new source MAC */
	XBNG_EVENT_MAC_CONFLICT = 4,	   /* another source MAC, not followed */
};

struct xbng_event {
	__u32 type; /* enum xbng_event_type */
	__u32 ifindex;
	__u16 outer_vid;
	__u16 inner_vid;
	__u8 mac[6];
	__u16 pad;
	__u32 reserved;
	__u64 timestamp_ns; /* bpf_ktime_get_ns() */
};

/* Value of `unknown_seen` (LRU hash keyed by xbng_sub_key): last report time,
 * so that one unknown VLAN produces at most one event per
 * xbng_config.unknown_event_interval_ns. */
struct xbng_unknown_seen {
	__u64 last_ns;
};

/* Value of `event_budget` (per-CPU array, 1 entry): a token window bounding
 * events per CPU per second whatever the number of distinct unknown keys. */
struct xbng_event_budget {
	__u64 window_start_ns;
	__u64 used;
};

/* ---- value of `police` (array indexed by subscriber slot) ---------------- */
/* One 64-byte line per subscriber: the downstream bucket every route of the
 * subscriber shares, the configured rates (the agent's record: buckets hold
 * a rounded cost), and the policed counters (written only by drops). */
struct xbng_police {
	struct xbng_bucket down;
	__u64 up_rate_bps;
	__u64 down_rate_bps;
	__u64 up_policed_packets;
	__u64 up_policed_bytes;
	__u64 down_policed_packets;
	__u64 down_policed_bytes;
};

/* ---- hardening -------------------------------------------------------------- */
/* MAC policy of a subscriber: xbng_subscriber.flags bits 8..9 (0 = its
 * port's xbng_port.mac_policy; a port's 0 means LEARN_ONCE). A frame whose
 * source MAC differs from a valid MAC in the entry is
 *   LEARN_ONCE: accepted, MAC unchanged, MAC_CONFLICT event (the default);
 *   FOLLOW:     anti-spoof-clean frames move the MAC (MAC_CHANGED event);
 *   ENFORCE:    dropped (DROP_MAC_MISMATCH), MAC_CONFLICT event.
 * Events are rate-limited per subscriber (`mac_seen`) and per CPU. */
enum xbng_mac_policy {
	XBNG_MAC_POLICY_DEFAULT = 0,
	XBNG_MAC_POLICY_LEARN_ONCE = 1,
	XBNG_MAC_POLICY_FOLLOW = 2,
	XBNG_MAC_POLICY_ENFORCE = 3,
};
#define XBNG_SUB_F_MAC_POLICY_SHIFT 8
#define XBNG_SUB_F_MAC_POLICY_MASK (3u << XBNG_SUB_F_MAC_POLICY_SHIFT)
/* bits 10..11: unused, must be 0 */
/* Bits 12..14: the subscriber's origin (xbng.v1.Origin: 1 API, 2 etcd,
 * 3 RADIUS, 4 DHCP relay; 0 unknown). The fast path ignores it; it lives in
 * the entry so that it is written in the same map update as the subscriber
 * and is adopted with it after a restart. */
#define XBNG_SUB_F_ORIGIN_SHIFT 12
#define XBNG_SUB_F_ORIGIN_MASK (7u << XBNG_SUB_F_ORIGIN_SHIFT)
#define XBNG_MAC_SEEN_ENTRIES 16384 /* LRU rate-limiting MAC events and moves */

/* Key of `local_allow`: a service on the host's own addresses that
 * subscribers may reach. Frames from access ports that the FIB says are for
 * the host itself (NOT_FWDED) are dropped (DROP_TO_HOST) unless their
 * (protocol, destination port) or (protocol, 0) is in the map. */
struct xbng_local_svc {
	__u8 proto; /* IPPROTO_*: 6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6, ... */
	__u8 pad;
	__u16 port; /* destination port, host order; 0 = every port (and non-first fragments) */
};
#define XBNG_LOCAL_ALLOW_ENTRIES 256

#define XBNG_DEFAULT_EVENTS_PER_SEC 1000
#define XBNG_DEFAULT_UNKNOWN_INTERVAL_NS 1000000000ull

/* ---- ICMP errors from XDP, subscriber pools ----------------------------------- */
/* Per-CPU token bucket of ICMP errors (like the kernel's icmp_msgs_per_sec /
 * icmp_msgs_burst): value of `icmp_budget` (per-CPU array, 1 entry). One
 * token costs 1e9 / rate ns of credit; credit is capped at burst tokens. */
struct xbng_icmp_budget {
	__u64 last_ns;	 /* bpf_ktime_get_ns() of the last refill */
	__u64 credit_ns; /* accumulated credit, in ns */
};
#define XBNG_DEFAULT_ICMP_RATE 1000 /* errors per second per CPU */
#define XBNG_DEFAULT_ICMP_BURST 50

/* Value of `pools_v4` / `pools_v6` (LPM tries of the subscriber pools the
 * operator declares per access port): traffic from the uplink to a pool
 * address no subscriber holds is dropped (never handed to the kernel, which
 * would route it back upstream) and answered with a rate-limited ICMP
 * unreachable. */
struct xbng_pool {
	__u32 ifindex; /* access port that owns the pool */
};
#define XBNG_MAX_POOLS 4096

/* Value of `icmp_scratch` (per-CPU array, 1 entry): the ICMP message being
 * built is copied here to be checksummed (bpf_csum_diff). */
#define XBNG_ICMP_SCRATCH_LEN 2048
struct xbng_icmp_scratch {
	__u8 buf[XBNG_ICMP_SCRATCH_LEN];
};

#define XBNG_DEFAULT_SUBSCRIBER_MTU 1500
#define XBNG_QINQ_TAGS_BYTES 8	/* two VLAN tags: access netdev MTU >= subscriber_mtu + 8 */
#define XBNG_ICMP4_MAX_LEN 576	/* RFC 792/1812: error datagram, IP header included */
#define XBNG_ICMP6_MAX_LEN 1280 /* RFC 4443: error packet, IPv6 header included */

/* ---- subscriber bring-up (punt of control frames) -------------------------
 * xdp_access copies DHCPv4/DHCPv6 client->server frames and Router
 * Solicitations of provisioned subscribers into the `punt` ring buffer (one
 * record per frame: this header, then the frame as received, both tags
 * kept) and drops them; xbngd answers on the access port. Rate limits: per
 * subscriber and protocol a GCRA (`punt_limit`, LRU keyed by subscriber,
 * touched only by control frames) and per port a per-CPU window
 * (`punt_port_budget`). */
#define XBNG_PUNT_RINGBUF_BYTES (4 * 1024 * 1024)
#define XBNG_PUNT_MAX_FRAME 1536      /* larger control frames are dropped (oversized) */
#define XBNG_PUNT_LIMIT_ENTRIES 65536 /* LRU of subscribers that sent control frames lately */

enum xbng_punt_kind {
	XBNG_PUNT_KIND_DHCPV4 = 1,
	XBNG_PUNT_KIND_DHCPV6 = 2,
	XBNG_PUNT_KIND_RS = 3,
};
#define XBNG_PUNT_KINDS 3

/* One record of `punt`: fixed size (the frame occupies `len` bytes). */
struct xbng_punt_record {
	__u32 kind;    /* enum xbng_punt_kind */
	__u32 ifindex; /* access port */
	__u16 outer_vid;
	__u16 inner_vid;
	__u32 len;	    /* bytes of frame[] that are valid */
	__u64 timestamp_ns; /* bpf_ktime_get_ns() */
	__u8 frame[XBNG_PUNT_MAX_FRAME];
};

/* Value of `punt_limit`: per protocol (index kind - 1) a GCRA theoretical
 * arrival time (ns, monotonic). One budget per protocol, so that a storm of
 * one (say DHCPv4) cannot starve the others of the same subscriber; the
 * three share the 24 bytes one lookup brings in. */
struct xbng_punt_gcra {
	__u64 tat_ns[XBNG_PUNT_KINDS];
};

/* Value of `punt_port_budget` (per-CPU array indexed by port slot). */
struct xbng_punt_window {
	__u64 window_start_ns;
	__u64 used;
};

/* The AF_XDP punt transport ([punt] transport = "af_xdp"): the control
 * frame itself goes to an AF_XDP socket of xbngd through `punt_xsks`
 * (XDP_REDIRECT, no copy in the program), indexed by the access port's slot
 * and the RX queue; the frame is preceded in its XDP metadata by this header
 * (what the ring buffer's record says besides the port). A queue without a
 * socket (or one past XBNG_PUNT_XSK_QUEUES) falls back to the ring buffer. */
#define XBNG_PUNT_XSK_QUEUES 16 /* RX queues per access port with a socket */
#define XBNG_PUNT_XSK_ENTRIES (XBNG_MAX_PORTS * XBNG_PUNT_XSK_QUEUES)

struct xbng_punt_meta {
	__u32 kind; /* enum xbng_punt_kind */
	__u16 outer_vid;
	__u16 inner_vid;
	__u64 timestamp_ns; /* bpf_ktime_get_ns() */
};

#define XBNG_DEFAULT_PUNT_SUB_RATE 10  /* control frames/s per subscriber and protocol, sustained */
#define XBNG_DEFAULT_PUNT_SUB_BURST 20 /* ... and in a burst */
#define XBNG_DEFAULT_PUNT_PORT_RATE 20000 /* control frames/s per access port per CPU */

/* Every struct above, sized once: the BPF programs (C) and the agent (C++)
 * must agree on each layout byte for byte. XBNG_ABI_SIZE(type, n) states that
 * `struct type` is n bytes, in either language. */
#ifdef __cplusplus
#define XBNG_ABI_SIZE(type, n) static_assert(sizeof(struct type) == (n), "ABI: size of " #type)
#else
#define XBNG_ABI_SIZE(type, n) _Static_assert(sizeof(struct type) == (n), "ABI: size of " #type)
#endif

XBNG_ABI_SIZE(xbng_sub_key, 8);
XBNG_ABI_SIZE(xbng_bucket, 16);
XBNG_ABI_SIZE(xbng_subscriber, 64);
XBNG_ABI_SIZE(xbng_route, 40);
XBNG_ABI_SIZE(xbng_v6_key, 16);
XBNG_ABI_SIZE(xbng_v6_64_key, 8);
XBNG_ABI_SIZE(xbng_lpm_v4_key, 8);
XBNG_ABI_SIZE(xbng_lpm_v6_key, 20);
XBNG_ABI_SIZE(xbng_port, 80);
XBNG_ABI_SIZE(xbng_port_stats, 32);
XBNG_ABI_SIZE(xbng_counter, 16);
XBNG_ABI_SIZE(xbng_event, 32);
XBNG_ABI_SIZE(xbng_unknown_seen, 8);
XBNG_ABI_SIZE(xbng_event_budget, 16);
XBNG_ABI_SIZE(xbng_police, 64);
XBNG_ABI_SIZE(xbng_local_svc, 4);
XBNG_ABI_SIZE(xbng_icmp_budget, 16);
XBNG_ABI_SIZE(xbng_pool, 4);
XBNG_ABI_SIZE(xbng_icmp_scratch, XBNG_ICMP_SCRATCH_LEN);
XBNG_ABI_SIZE(xbng_punt_record, 24 + XBNG_PUNT_MAX_FRAME);
XBNG_ABI_SIZE(xbng_punt_gcra, 24);
XBNG_ABI_SIZE(xbng_punt_window, 16);
XBNG_ABI_SIZE(xbng_direct_pool, 16);
XBNG_ABI_SIZE(xbng_direct_table, 16 + 16 * XBNG_DIRECT_POOLS);
XBNG_ABI_SIZE(xbng_direct_pool_v6, 32);
XBNG_ABI_SIZE(xbng_direct_table_v6, 32 + 32 * XBNG_DIRECT_POOLS);
XBNG_ABI_SIZE(xbng_direct_route, 64);
XBNG_ABI_SIZE(xbng_direct_sub_range, 16);
XBNG_ABI_SIZE(xbng_direct_sub_table, 16 + 16 * XBNG_DIRECT_SUB_RANGES);
XBNG_ABI_SIZE(xbng_punt_meta, 16);

#endif /* XBNG_ABI_H */
