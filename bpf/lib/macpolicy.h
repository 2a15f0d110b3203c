/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What a source MAC other than the subscriber's means, by MAC
 * policy (learn once, follow, enforce; see enum xbng_mac_policy). The
 * common case, a frame from the MAC in the entry, costs one flag test and
 * one 6-byte compare of data the subscriber lookup already brought in. */
#ifndef XBNG_BPF_MACPOLICY_H
#define XBNG_BPF_MACPOLICY_H

#include "lib/common.h"
#include "lib/counters.h"
#include "lib/events.h"

/* The subscriber's own policy, else its port's, else learn once. */
XBNG_INLINE __u32 mac_policy_of(const struct xbng_pkt *p, const struct xbng_subscriber *sub)
{
	__u32 pol = (sub->flags & XBNG_SUB_F_MAC_POLICY_MASK) >> XBNG_SUB_F_MAC_POLICY_SHIFT;

	if (pol == XBNG_MAC_POLICY_DEFAULT)
		pol = p->port->mac_policy;
	return pol == XBNG_MAC_POLICY_DEFAULT ? XBNG_MAC_POLICY_LEARN_ONCE : pol;
}

/* Rate limit of MAC events (and of moves under "follow"): at most one per
 * subscriber per unknown_interval_ns (`mac_seen`) and events_per_sec per
 * CPU. Returns 1 and takes the slot, or 0 (counted as suppressed). */
XBNG_INLINE int mac_event_slot(const struct xbng_sub_key *key, __u64 now)
{
	return event_key_slot(&mac_seen, key, now);
}

/* First step after the subscriber lookup, for every frame (control frames
 * included): under ENFORCE, a source MAC other than the entry's valid MAC
 * is dropped and reported (MAC_CONFLICT). */
XBNG_INLINE int mac_enforce(const struct xbng_pkt *p, const struct xbng_subscriber *sub,
			    const struct xbng_sub_key *key, const __u8 *smac)
{
	__u64 now;

	XBNG_TRACE_STEP(XBNG_TS_MAC_POLICY, mac_policy_of(p, sub),
			!(sub->flags & XBNG_SUB_F_MAC_VALID) ? 2 : mac_equal(sub->mac, smac));
	if (!(sub->flags & XBNG_SUB_F_MAC_VALID) || mac_equal(sub->mac, smac))
		return XBNG_CONTINUE;
	if (mac_policy_of(p, sub) != XBNG_MAC_POLICY_ENFORCE)
		return XBNG_CONTINUE;
	now = bpf_ktime_get_ns();
	if (mac_event_slot(key, now))
		event_send(XBNG_EVENT_MAC_CONFLICT, key, smac, now);
	return drop(p, XBNG_DROP_MAC_MISMATCH);
}

/* On a valid frame (anti-spoof-clean IP, or an ARP request from the
 * subscriber's address): learn a MAC not known yet (LEARN_MAC), move to the
 * new one under FOLLOW (MAC_CHANGED), or report it (MAC_CONFLICT). A move
 * happens only once its event is on the ring: the agent rewrites the MAC
 * copies in the subscriber's routes from that event. */
XBNG_INLINE void mac_track(const struct xbng_pkt *p, struct xbng_subscriber *sub,
			   const struct xbng_sub_key *key, const __u8 *smac)
{
	__u64 now;

	if (!(sub->flags & XBNG_SUB_F_MAC_VALID)) {
		learn_mac(sub, key, smac);
		return;
	}
	if (mac_equal(sub->mac, smac))
		return;
	now = bpf_ktime_get_ns();
	if (!mac_event_slot(key, now))
		return;
	if (mac_policy_of(p, sub) != XBNG_MAC_POLICY_FOLLOW) {
		event_send(XBNG_EVENT_MAC_CONFLICT, key, smac, now);
		return;
	}
	if (event_send(XBNG_EVENT_MAC_CHANGED, key, smac, now))
		return;
	mac_copy(sub->mac, smac);
}

#endif /* XBNG_BPF_MACPOLICY_H */
