// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* CPE emulator, receive side for clients that read raw frames (dhclient,
 * dhcpcd use packet sockets, which see a frame before TC ingress runs, with
 * the inner tag still in it): pops both tags in XDP, before anything else
 * sees the frame. Frames with other tags or none pass unchanged. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int cpe_xdp_untag(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u8 *p = data;
	__u32 w0, w1, w2;

	if (data + 22 > end)
		return XDP_PASS;
	if (*(__be16 *)(p + 12) != bpf_htons(ETH_P_8021AD) &&
	    *(__be16 *)(p + 12) != bpf_htons(ETH_P_8021Q))
		return XDP_PASS;
	if (*(__be16 *)(p + 16) != bpf_htons(ETH_P_8021Q))
		return XDP_PASS;
	/* MACs move 8 bytes forward, onto the tags; the head follows. */
	w0 = *(__u32 *)p;
	w1 = *(__u32 *)(p + 4);
	w2 = *(__u32 *)(p + 8);
	*(__u32 *)(p + 8) = w0;
	*(__u32 *)(p + 12) = w1;
	*(__u32 *)(p + 16) = w2;
	if (bpf_xdp_adjust_head(ctx, 8))
		return XDP_DROP;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
