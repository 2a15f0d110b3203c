/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The store's reads of many values in one system call (bpf/store_read.bpf.c,
 * agent/store/map_ops.cpp): user space writes up to XBNG_READ_CHUNK keys of
 * one map into its slot of the mmapable `read_scratch` array and runs the
 * syscall program `read_many` once (BPF_PROG_TEST_RUN); the program looks
 * every key up and copies each value found next to it. An update of every
 * subscriber reads the values it replaces (counters, learned MACs, policer
 * state, the rollback's "before"): one program run per chunk instead of one
 * bpf_map_lookup_elem system call per key.
 *
 * Keys are packed at the map's key size, values at its value size (the
 * largest: 16-byte keys, 64-byte values). The LPM prefix maps are not read
 * here: sleepable programs may not use tries.
 */
#ifndef XBNG_STORE_READ_H
#define XBNG_STORE_READ_H

#include <linux/types.h>

#define XBNG_READ_CHUNK 2048
#define XBNG_READ_KEY_MAX 16
#define XBNG_READ_VALUE_MAX 64
/* Slots of `read_scratch`: readers at once (the store reads from two
 * threads; a reader that finds none free reads one system call a key). */
#define XBNG_READ_SLOTS 4

/* The maps read_many reads (read_args.map). */
enum xbng_read_map {
	XBNG_READ_SUBSCRIBERS = 0,
	XBNG_READ_POLICE = 1,
	XBNG_READ_ROUTES_V4 = 2,
	XBNG_READ_ROUTES_V6 = 3,
	XBNG_READ_ROUTES_V6_64 = 4,
};

struct xbng_read_scratch {
	__u8 keys[XBNG_READ_CHUNK * XBNG_READ_KEY_MAX];
	__u8 vals[XBNG_READ_CHUNK * XBNG_READ_VALUE_MAX];
	__u8 found[XBNG_READ_CHUNK];
};

/* The program's context (ctx_in): which map, how many keys, which slot. */
struct xbng_read_args {
	__u32 map;
	__u32 n;
	__u32 slot;
};

#endif /* XBNG_STORE_READ_H */
