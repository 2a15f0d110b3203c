/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Shared between bench/bpf/pktcost.bpf.c and the C++ drivers: what the
 * template-restoring wrapper writes into each frame, and the slots of its
 * PROG_ARRAY. Benchmark-private (not part of the xbng ABI). */
#ifndef XBNG_BENCH_PKTCOST_H
#define XBNG_BENCH_PKTCOST_H

/* Largest template frame the wrapper restores. */
#define PC_TMPL_MAX 128

/* Which keys the wrapper writes for subscriber index i (see pktcost.bpf.c). */
enum pc_mode {
  PC_MODE_NONE = 0,       /* template only, nothing rewritten */
  PC_MODE_UP_V4 = 1,      /* QinQ: S/C-VID, source MAC, IPv4 source (+ IPv4 checksum) */
  PC_MODE_UP_V6 = 2,      /* QinQ: S/C-VID, source MAC, IPv6 source */
  PC_MODE_ARP = 3,        /* QinQ: S/C-VID, source MAC, ARP sender MAC and IP */
  PC_MODE_DOWN_V4 = 4,    /* untagged: IPv4 destination (+ IPv4 checksum) */
  PC_MODE_DOWN_V6 = 5,    /* untagged: IPv6 destination /128 */
  PC_MODE_DOWN_V6_64 = 6, /* untagged: IPv6 destination inside the i-th /64 */
};

/* PROG_ARRAY `progs` slots the wrapper tail-calls. */
enum pc_slot {
  PC_SLOT_XDP_ACCESS = 0,
  PC_SLOT_XDP_UPLINK = 1,
  PC_SLOT_REF_NOP = 2,      /* harness alone: returns XDP_DROP */
  PC_SLOT_REF_REDIRECT = 3, /* floor: bpf_redirect_map only */
  PC_SLOT_REF_HASH = 4,     /* one hash lookup of the IPv4 destination */
  PC_SLOT_REF_LPM = 5,      /* one LPM-trie lookup of the IPv4 destination */
  PC_SLOT_REF_FIB = 6,      /* one bpf_fib_lookup (what upstream pays per packet) */
  /* Rate plans: where the downstream bucket lives (ref_hash + a bucket). */
  PC_SLOT_REF_POL_ROUTE = 7,   /* in the route value (per route: NOT shared; the floor) */
  PC_SLOT_REF_POL_ARRAY = 8,   /* slot in the route -> array of per-subscriber entries */
  PC_SLOT_REF_POL_SUBHASH = 9, /* owner key in the route -> subscriber hash lookup */
  /* The benchmark build of xdp_access ending at stop k (include/xbng/benchstop.h). */
  PC_SLOT_UP_STOP0 = 10, /* ... PC_SLOT_UP_STOP0 + XBNG_BSTOP_COUNT - 1 */
  /* One subscriber-keyed hash lookup (QinQ frame), value sizes that make a
   * kernel element of 96, 120 (xbng's) and 128 bytes (--steps only). */
  PC_SLOT_REF_SUB40 = 18,
  PC_SLOT_REF_SUB64 = 19,
  PC_SLOT_REF_SUB72 = 20,
  PC_SLOT_REF_FIB6 = 21, /* one bpf_fib_lookup of an upstream IPv6 frame */
  PC_SLOT_MAX = 24,
};

/* Subscriber addressing shared by the wrapper and the map fill:
 * i -> S-VID 1 + i / 4000, C-VID 1 + i % 4000, IPv4 100.64.0.16 + i,
 * IPv6 2001:db8:1000::16 + i, /64 = i-th /64 of 2001:db8:2000::/36,
 * MAC 02:00:<i, 4 bytes big endian>. */
#define PC_CVIDS_PER_SVID 4000
#define PC_V4_BASE 0x64400010u    /* 100.64.0.16 */
#define PC_V6_HOST_W0 0x20010db8u /* 2001:db8:1000::16 + i: words 0..3 */
#define PC_V6_HOST_W1 0x10000000u
#define PC_V6_HOST_W3_BASE 0x16u
#define PC_V6_PFX_W0 0x20010db8u /* 2001:db8:2000::/36, i-th /64: word 1 += i */
#define PC_V6_PFX_W1_BASE 0x20000000u

#ifdef __cplusplus
#include "xbng/abi.h"
#endif
/* Rate-plan references: a route value with its own bucket, and a subscriber
 * value with the downstream bucket in it. */
struct pc_route_bkt {
  struct xbng_route r;
  struct xbng_bucket down;
};
struct pc_sub_bkt {
  struct xbng_subscriber s;
  struct xbng_bucket down;
};

/* Values of the subscriber-keyed references: the flags where
 * xbng_subscriber has them, padded to 40 and 72 bytes. */
struct pc_sub_v40 {
  __u8 mac[6];
  __u16 flags;
  __u8 pad[32];
};
struct pc_sub_v72 {
  __u8 mac[6];
  __u16 flags;
  __u8 pad[64];
};

#endif /* XBNG_BENCH_PKTCOST_H */
