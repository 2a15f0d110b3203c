// The value codec of the subscriber store: a SubscriberSpec as the kernel's
// xbng_subscriber, xbng_police and xbng_route values (abi.h), and back. The
// writer encodes with these; adoption decodes with these: one definition of
// the layout, so a round trip gives the same provisioning.
#pragma once

#include <cstdint>

#include "xbng/abi.h"
#include "store/subscriber.h"

namespace xbng::agent {

// The subscriber entry of `s` at police slot `slot` under the policy in
// force `pol` (its own or the port's default). Counters and bucket state
// zero: the writer carries them over from the entry it replaces.
struct xbng_subscriber encode_subscriber(const SubscriberSpec& s, uint32_t slot,
                                         const PolicySpec& pol);

// The police entry of policy `pol`, from `old` (the slot's entry it
// replaces, or null): counters carried over; a changed rate or depth starts
// from a full bucket, an unchanged one keeps its state.
struct xbng_police encode_police(const PolicySpec& pol, const struct xbng_police* old);

// A route of subscriber `k` (slot `slot`) towards `mac` (null: not known yet).
// `credit`: the route may hold prepaid downstream credit (with `policed`; at
// most XBNG_CREDIT_ROUTES routes of a subscriber). The credit starts at 0.
struct xbng_route encode_route(const SubKey& k, uint32_t slot, const Mac* mac, bool policed,
                               bool credit = false);

// The provisioning an entry holds, prefixes excepted (they are the routes
// of the prefix maps). `police`: the entry at v.slot (null: none; the
// policy then reads as unlimited). A MAC the fast path learned is not part
// of the provisioning: has_mac only for a MAC that was provisioned.
SubscriberSpec decode_subscriber(const SubKey& k, const struct xbng_subscriber& v,
                                 const struct xbng_police* police);
// The policy in force of an entry and its police entry.
PolicySpec decode_policy(const struct xbng_subscriber& v, const struct xbng_police& police);

}  // namespace xbng::agent
