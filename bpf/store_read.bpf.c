// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The store's reads of many values in one system call (xbng/store_read.h).
 *
 * Not part of the fast path: a syscall program the agent runs with
 * BPF_PROG_TEST_RUN on the store's own maps. The map definitions below only
 * name the maps and their key and value types: the agent replaces each with
 * the running map (bpf_map__reuse_fd) before loading, so nothing is created
 * but `read_scratch`.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "xbng/abi.h"
#include "xbng/store_read.h"

_Static_assert(sizeof(struct xbng_subscriber) <= XBNG_READ_VALUE_MAX &&
		       sizeof(struct xbng_police) <= XBNG_READ_VALUE_MAX &&
		       sizeof(struct xbng_route) <= XBNG_READ_VALUE_MAX &&
		       sizeof(struct xbng_v6_key) <= XBNG_READ_KEY_MAX,
	       "xbng_read_scratch holds every key and value read_many copies");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct xbng_sub_key);
	__type(value, struct xbng_subscriber);
} subscribers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct xbng_police);
} police SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __be32);
	__type(value, struct xbng_route);
} routes_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct xbng_v6_key);
	__type(value, struct xbng_route);
} routes_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct xbng_v6_64_key);
	__type(value, struct xbng_route);
} routes_v6_64 SEC(".maps");

/* One chunk per reader at once; mmapped by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XBNG_READ_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct xbng_read_scratch);
} read_scratch SEC(".maps");

/* The maps both programs serve, by their xbng_read_map number: the cases
 * of a switch on it, each OP(map, key type, value type, merge function). */
#define READ_MAP_CASES(OP)                                                                    \
	case XBNG_READ_SUBSCRIBERS:                                                           \
		OP(subscribers, struct xbng_sub_key, struct xbng_subscriber,                  \
		   xbng_merge_subscriber);                                                    \
		break;                                                                        \
	case XBNG_READ_POLICE:                                                                \
		OP(police, __u32, struct xbng_police, xbng_merge_police);                     \
		break;                                                                        \
	case XBNG_READ_ROUTES_V4:                                                             \
		OP(routes_v4, __be32, struct xbng_route, xbng_merge_route);                   \
		break;                                                                        \
	case XBNG_READ_ROUTES_V6:                                                             \
		OP(routes_v6, struct xbng_v6_key, struct xbng_route, xbng_merge_route);       \
		break;                                                                        \
	case XBNG_READ_ROUTES_V6_64:                                                          \
		OP(routes_v6_64, struct xbng_v6_64_key, struct xbng_route, xbng_merge_route); \
		break;

/* A run's scratch for key i of its chunk, or null (the loop then stops). */
static __always_inline struct xbng_read_scratch *scratch(__u32 slot, __u64 i)
{
	if (i >= XBNG_READ_CHUNK)
		return 0;
	return bpf_map_lookup_elem(&read_scratch, &slot);
}

struct read_ctx {
	__u32 map;
	__u32 slot;
};

/* Key i of the chunk looked up in `m`; its value, if found, copied to
 * value i (a read merges nothing: `merge` unused). */
#define READ_ONE(m, ktype, vtype, merge)                                          \
	do {                                                                      \
		vtype *v = bpf_map_lookup_elem(&m, sc->keys + i * sizeof(ktype)); \
		if (v)                                                            \
			*(vtype *)(sc->vals + i * sizeof(vtype)) = *v;            \
		sc->found[i] = v != 0;                                            \
	} while (0)

static long read_one(__u64 i, struct read_ctx *c)
{
	struct xbng_read_scratch *sc = scratch(c->slot, i);

	if (!sc)
		return 1;
	switch (c->map) {
		READ_MAP_CASES(READ_ONE)
	default:
		return 1;
	}
	return 0;
}

/* A program's arguments in range: a map it knows, a scratch slot, a chunk. */
static __always_inline int args_ok(__u32 map, __u32 slot, __u32 n)
{
	return map <= XBNG_READ_ROUTES_V6_64 && slot < XBNG_READ_SLOTS && n <= XBNG_READ_CHUNK;
}

/* Returns the number of keys read (a->n), or -1 for arguments out of range. */
SEC("syscall")
int read_many(struct xbng_read_args *a)
{
	struct read_ctx c = {.map = a->map, .slot = a->slot};
	__u32 n = a->n;

	if (!args_ok(c.map, c.slot, n))
		return -1;
	return bpf_loop(n, read_one, &c, 0);
}

struct swap_ctx {
	__u32 map;
	__u32 slot;
	__u32 done;
	__s32 err;
};

/* Key i of the chunk in `m`: the value it holds copied out over value i
 * (kept on the stack: the new one), the new one merged with that copy and
 * written unless the merge says nothing changes. A refused write stops
 * the loop with its error. */
#define SWAP_ONE(m, ktype, vtype, merge)                                     \
	do {                                                                 \
		void *k = sc->keys + i * sizeof(ktype);                      \
		vtype *io = (vtype *)(sc->vals + i * sizeof(vtype));         \
		vtype nv = *io;                                              \
		vtype *cur = bpf_map_lookup_elem(&m, k);                     \
		__u8 in = sc->found[i], out = 0;                             \
		int write = 1;                                               \
		if (cur) {                                                   \
			*io = *cur;                                          \
			out = XBNG_SWAP_FOUND;                               \
			write = merge(&nv, io, in);                          \
		}                                                            \
		if (write) {                                                 \
			long err = bpf_map_update_elem(&m, k, &nv, BPF_ANY); \
			if (err) {                                           \
				sc->found[i] = out;                          \
				c->err = (__s32)err;                         \
				return 1;                                    \
			}                                                    \
			out |= XBNG_SWAP_WRITTEN;                            \
		}                                                            \
		sc->found[i] = out;                                          \
	} while (0)

static long swap_one(__u64 i, struct swap_ctx *c)
{
	struct xbng_read_scratch *sc = scratch(c->slot, i);

	if (!sc)
		return 1;
	switch (c->map) {
		READ_MAP_CASES(SWAP_ONE)
	default:
		return 1;
	}
	c->done = i + 1;
	return 0;
}

/* Sets a->done and a->err (xbng/store_read.h); returns -1 for arguments out
 * of range, else 0. */
SEC("syscall")
int swap_many(struct xbng_swap_args *a)
{
	struct swap_ctx c = {.map = a->map, .slot = a->slot};
	__u32 n = a->n;

	if (!args_ok(c.map, c.slot, n))
		return -1;
	bpf_loop(n, swap_one, &c, 0);
	a->done = c.done;
	a->err = c.err;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
