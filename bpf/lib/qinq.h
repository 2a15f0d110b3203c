/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Double-tag (QinQ) parsing with classified drops, tag pop and push. */
#ifndef XBNG_BPF_QINQ_H
#define XBNG_BPF_QINQ_H

#include "lib/common.h"
#include "lib/counters.h"

struct qinq {
	__u16 outer_vid; /* host order */
	__u16 inner_vid; /* host order */
	__be16 l3_proto; /* ethertype after the inner tag */
};

XBNG_INLINE int is_vlan_tpid(__be16 proto)
{
	return proto == bpf_htons(XBNG_ETH_P_8021AD) || proto == bpf_htons(XBNG_ETH_P_8021Q) ||
	       proto == bpf_htons(XBNG_ETH_P_QINQ_9100);
}

/* Accepts exactly two tags: outer TPID = the port's, inner 0x8100. Tags are
 * counted first (any of the three TPIDs is a tag), then the TPIDs checked, so
 * a frame is "single tag" or "too many tags" whatever its TPIDs. */
XBNG_INLINE int qinq_parse(const struct xbng_pkt *p, struct qinq *q)
{
	void *data = pkt_data(p), *end = pkt_end(p);
	struct ethhdr *eth = data;
	struct vlan_tag *outer, *inner;

	if ((void *)(eth + 1) > end)
		return drop(p, XBNG_DROP_TRUNCATED);
	if (!is_vlan_tpid(eth->h_proto))
		return drop(p, XBNG_DROP_UNTAGGED);
	outer = (void *)(eth + 1);
	if ((void *)(outer + 1) > end)
		return drop(p, XBNG_DROP_TRUNCATED);
	if (!is_vlan_tpid(outer->next_proto))
		return drop(p, XBNG_DROP_SINGLE_TAG);
	inner = outer + 1;
	if ((void *)(inner + 1) > end)
		return drop(p, XBNG_DROP_TRUNCATED);
	if (is_vlan_tpid(inner->next_proto))
		return drop(p, XBNG_DROP_TOO_MANY_TAGS);
	if (eth->h_proto != bpf_htons(p->port->outer_tpid))
		return drop(p, XBNG_DROP_WRONG_OUTER_TPID);
	if (outer->next_proto != bpf_htons(XBNG_ETH_P_8021Q))
		return drop(p, XBNG_DROP_WRONG_INNER_TPID);

	q->outer_vid = bpf_ntohs(outer->tci) & XBNG_VID_MASK;
	q->inner_vid = bpf_ntohs(inner->tci) & XBNG_VID_MASK;
	q->l3_proto = inner->next_proto;
	return XBNG_CONTINUE;
}

/* Removes both tags. The new Ethernet header is written over the last 12
 * bytes before the inner ethertype (offset 8), then the head moves by 8:
 * no byte of the payload moves. dmac/smac must not point into the packet. */
XBNG_INLINE int qinq_pop(struct xdp_md *ctx, const __u8 *dmac, const __u8 *smac)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u8 *hdr = data;

	if (data + XBNG_QINQ_HLEN > end)
		return -1;
	mac_copy(hdr + 8, dmac);
	mac_copy(hdr + 14, smac);
	return bpf_xdp_adjust_head(ctx, XBNG_QINQ_TAGS_LEN) ? -1 : 0;
}

/* Removes both tags and keeps the MAC addresses (frame handed to the kernel). */
XBNG_INLINE int qinq_pop_keep_macs(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u32 w0, w1, w2;

	if (data + XBNG_QINQ_HLEN > end)
		return -1;
	w0 = *(__u32 *)data;
	w1 = *(__u32 *)(data + 4);
	w2 = *(__u32 *)(data + 8);
	*(__u32 *)(data + 8) = w0;
	*(__u32 *)(data + 12) = w1;
	*(__u32 *)(data + 16) = w2;
	return bpf_xdp_adjust_head(ctx, XBNG_QINQ_TAGS_LEN) ? -1 : 0;
}

/* Prepends both tags to an untagged frame and writes the MACs: the old
 * ethertype (old offset 12) becomes the inner tag's ethertype (offset 20). */
XBNG_INLINE int qinq_push(struct xdp_md *ctx, const __u8 *dmac, const __u8 *smac, __u16 outer_tpid,
			  __u16 outer_vid, __u16 inner_vid)
{
	void *data, *end;
	struct ethhdr *eth;
	struct vlan_tag *tags;

	if (bpf_xdp_adjust_head(ctx, -XBNG_QINQ_TAGS_LEN))
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + XBNG_QINQ_HLEN > end)
		return -1;
	eth = data;
	tags = (void *)(eth + 1);
	mac_copy(eth->h_dest, dmac);
	mac_copy(eth->h_source, smac);
	eth->h_proto = bpf_htons(outer_tpid);
	tags[0].tci = bpf_htons(outer_vid);
	tags[0].next_proto = bpf_htons(XBNG_ETH_P_8021Q);
	tags[1].tci = bpf_htons(inner_vid);
	return 0;
}

#endif /* XBNG_BPF_QINQ_H */
