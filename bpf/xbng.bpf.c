// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Placeholder entry points (issue #3 replaces them with the fast path). */
#include "lib/maps.h"

SEC("xdp")
int xdp_access(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int xdp_uplink(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
