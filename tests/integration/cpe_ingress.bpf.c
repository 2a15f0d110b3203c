// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* CPE emulator for the integration tests: the kernel here has no 802.1Q
 * module, so a CPE namespace's veth pushes its subscriber's two tags on
 * egress (cpe_egress.bpf.c) and pops them on ingress (this file) with TC BPF. The tags come from the CPE's
 * own (source) MAC address, 02:cc:SS:SS:CC:CC (S-VID, C-VID): no map to fill. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int cpe_ingress(struct __sk_buff *skb)
{
	/* Outer tag (in skb metadata after the stack's untag), then the inner. */
	if (bpf_skb_vlan_pop(skb) < 0 || bpf_skb_vlan_pop(skb) < 0)
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
