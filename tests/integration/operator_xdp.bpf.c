// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* An operator's own XDP program, for test_xdp_dispatch: loaded with
 * xdp-loader into libxdp's dispatcher before xbng's program. It counts every
 * frame it sees and drops the frames whose source MAC the test wrote into
 * op_drop_mac; everything else it passes on (XDP_PASS, its chain-call
 * action: xbng's program runs next). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

/* 0: frames seen, 1: frames dropped. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME); /* under xdp-loader's --pin-path */
} op_counts SEC(".maps");

/* The source MAC to drop, in the first 6 bytes; all zero: none. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} op_drop_mac SEC(".maps");

static __always_inline void count(__u32 i)
{
	__u64 *c = bpf_map_lookup_elem(&op_counts, &i);

	if (c)
		__sync_fetch_and_add(c, 1);
}

SEC("xdp")
int op_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 zero = 0;
	__u64 *drop;

	count(0);
	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	drop = bpf_map_lookup_elem(&op_drop_mac, &zero);
	if (!drop || !*drop)
		return XDP_PASS;
#pragma unroll
	for (int i = 0; i < ETH_ALEN; i++)
		if (eth->h_source[i] != ((const __u8 *)drop)[i])
			return XDP_PASS;
	count(1);
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
