/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Ring-buffer events to the agent, and the two-level rate limit of
 * unknown-subscriber reports (per key: `unknown_seen`; per CPU:
 * `event_budget`, `events_per_sec`). */
#ifndef XBNG_BPF_EVENTS_H
#define XBNG_BPF_EVENTS_H

#include "lib/common.h"
#include "lib/counters.h"

#define XBNG_NSEC_PER_SEC 1000000000ull

/* Returns 0 when the event is on the ring, -1 when the ring was full. */
XBNG_INLINE int event_send(__u32 type, const struct xbng_sub_key *key, const __u8 *mac, __u64 now)
{
	XBNG_TRACE_STEP(XBNG_TS_EVENT, type, 0);
	XBNG_LIVE(struct xbng_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

		  if (!e) {
			  count_reason(XBNG_EVENT_RINGBUF_FULL, 0);
			  return -1;
		  } e->type = type;
		  e->ifindex = key->ifindex; e->outer_vid = key->outer_vid;
		  e->inner_vid = key->inner_vid; __builtin_memcpy(e->mac, mac, 6); e->pad = 0;
		  e->reserved = 0; e->timestamp_ns = now; bpf_ringbuf_submit(e, 0);
		  count_reason(XBNG_EVENT_SENT, 0);)
	return 0;
}

/* This CPU's event window, or NULL when its budget of events_per_sec is
 * spent (the caller increments `used` once it does send). */
XBNG_INLINE struct xbng_event_budget *event_budget_window(__u64 now)
{
	struct xbng_event_budget *budget;
	__u32 zero = 0;

	budget = bpf_map_lookup_elem(&event_budget, &zero);
	XBNG_SHADOW(struct xbng_event_budget, budget);
	if (!budget)
		return NULL;
	if (now - budget->window_start_ns >= XBNG_NSEC_PER_SEC) {
		budget->window_start_ns = now;
		budget->used = 0;
	}
	if (budget->used >= events_per_sec)
		return NULL;
	return budget;
}

/* The gate of every per-key event: at most once per key per
 * unknown_interval_ns (`seen_map`, an LRU of struct xbng_unknown_seen keyed
 * by subscriber key) and at most events_per_sec per CPU. The budget is
 * checked before the key is marked, so a key refused for lack of budget is
 * reported on a later frame. Returns 1 and takes the slot, or 0 (counted as
 * suppressed). */
XBNG_INLINE int event_key_slot(void *seen_map, const struct xbng_sub_key *key, __u64 now)
{
	struct xbng_unknown_seen *seen, fresh;
	struct xbng_event_budget *budget;

	seen = bpf_map_lookup_elem(seen_map, key);
	XBNG_SHADOW(struct xbng_unknown_seen, seen);
	if (seen && now - seen->last_ns < unknown_interval_ns)
		goto suppressed;
	budget = event_budget_window(now);
	if (!budget)
		goto suppressed;
	if (seen) {
		seen->last_ns = now;
	} else {
		/* NOEXIST: of two CPUs seeing a new key at once, one reports. */
		fresh.last_ns = now;
		XBNG_LIVE(if (bpf_map_update_elem(seen_map, key, &fresh,
						  BPF_NOEXIST)) goto suppressed;)
	}
	budget->used++;
	return 1;

suppressed:
	XBNG_TRACE_STEP(XBNG_TS_EVENT_SUPPRESSED, 0, 0);
	count_reason(XBNG_EVENT_SUPPRESSED, 0);
	return 0;
}

/* Reports an unknown key (rate limits: event_key_slot). */
XBNG_INLINE void report_unknown_subscriber(const struct xbng_sub_key *key, const __u8 *smac)
{
	__u64 now = bpf_ktime_get_ns();

	if (event_key_slot(&unknown_seen, key, now))
		event_send(XBNG_EVENT_UNKNOWN_SUBSCRIBER, key, smac, now);
}

/* MAC learning: a LEARN_MAC subscriber without a valid MAC takes the source
 * MAC of its first valid frame. Runs once per subscriber (the flag is set in
 * the same step), so the event needs no rate limit. */
XBNG_INLINE void learn_mac(struct xbng_subscriber *sub, const struct xbng_sub_key *key,
			   const __u8 *smac)
{
	if ((sub->flags & (XBNG_SUB_F_LEARN_MAC | XBNG_SUB_F_MAC_VALID)) != XBNG_SUB_F_LEARN_MAC)
		return;
	XBNG_TRACE_STEP(XBNG_TS_MAC_LEARN, 0, 0);
	mac_copy(sub->mac, smac);
	barrier(); /* MAC bytes before the flag that validates them */
	sub->flags |= XBNG_SUB_F_MAC_VALID;
	event_send(XBNG_EVENT_MAC_LEARNED, key, sub->mac, bpf_ktime_get_ns());
}

#endif /* XBNG_BPF_EVENTS_H */
