// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* CPE emulator for the integration tests: the kernel here has no 802.1Q
 * module, so a CPE namespace's veth pushes its subscriber's two tags on
 * egress and pops them on ingress with TC BPF. The tags come from the CPE's
 * own (source) MAC address, 02:cc:SS:SS:CC:CC (S-VID, C-VID): no map to fill. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int cpe_egress(struct __sk_buff *skb)
{
	__u8 macs[12];

	if (bpf_skb_load_bytes(skb, 0, macs, sizeof(macs)) < 0 || macs[6] != 0x02 ||
	    macs[7] != 0xcc)
		return TC_ACT_OK;
	__u16 tags[4] = {
		bpf_htons(ETH_P_8021AD),
		bpf_htons(((macs[8] << 8) | macs[9]) & 0x0fff),
		bpf_htons(ETH_P_8021Q),
		bpf_htons(((macs[10] << 8) | macs[11]) & 0x0fff),
	};
	/* Both tags go into the frame itself (bpf_skb_vlan_push would leave the
	 * outer one in skb metadata, invisible to an XDP program downstream). */
	if (bpf_skb_change_head(skb, sizeof(tags), 0) < 0 ||
	    bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0) < 0 ||
	    bpf_skb_store_bytes(skb, sizeof(macs), tags, sizeof(tags), 0) < 0)
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
