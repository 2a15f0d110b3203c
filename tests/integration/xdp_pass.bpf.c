// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Pass-through XDP program for the veth ends of test labs: with native XDP
 * attached the veth gets NAPI and accepts frames redirected into its peer. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
