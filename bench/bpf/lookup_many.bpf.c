// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Reading many values of a hash map in one system call (bench/lookup_many.cpp).
 *
 * `lookup_many` is a syscall program run by BPF_PROG_TEST_RUN: it looks up
 * the first `n` keys user space wrote into `scratch` (a mmapable array, one
 * value of LM_CHUNK keys, their values and found flags) and copies each
 * value found next to its key, on a map of the routes' value type: the
 * measurement that led the store to read the values an update replaces
 * that way (bpf/store_read.bpf.c) instead of one bpf_map_lookup_elem
 * system call per value.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "xbng/abi.h"

#define LM_CHUNK 2048

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 21);
	__type(key, __u32);
	__type(value, struct xbng_route);
} lm_routes SEC(".maps");

struct lm_scratch {
	__u32 keys[LM_CHUNK];
	struct xbng_route vals[LM_CHUNK];
	__u8 found[LM_CHUNK];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct lm_scratch);
} lm_scratch SEC(".maps");

struct lm_args {
	__u32 n;
};

static long lookup_one(__u64 i, void *unused)
{
	__u32 zero = 0;
	struct lm_scratch *sc = bpf_map_lookup_elem(&lm_scratch, &zero);

	if (!sc || i >= LM_CHUNK)
		return 1;
	struct xbng_route *v = bpf_map_lookup_elem(&lm_routes, &sc->keys[i]);

	if (v)
		sc->vals[i] = *v;
	sc->found[i] = v != 0;
	return 0;
}

SEC("syscall")
int lookup_many(struct lm_args *a)
{
	bpf_loop(a->n, lookup_one, 0, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
