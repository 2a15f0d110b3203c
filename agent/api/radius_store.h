// The store side of sessions from the access side: an Access-Accept's
// subscriber is checked exactly as a gRPC UpsertSubscribers of one
// subscriber (field checks of api/convert.h, then the store's claims:
// reserved addresses, overlaps, capacity) and created with ORIGIN_RADIUS,
// never replacing a subscriber another source provisioned meanwhile.
#pragma once

#include "radius/session.h"
#include "store/store.h"

namespace xbng::radius {

// ALREADY_EXISTS when the key was provisioned meanwhile (left as it is);
// the validation's or the store's refusal otherwise. `recorded` (optional)
// is called before the subscriber is written, to keep its session data: a
// crash in between leaves a record without subscriber, dropped at the next
// start, never a RADIUS subscriber without its data.
AccessSessions::CreateFn store_creator(
    agent::SubscriberStore* store,
    std::function<void(const SubscriberSpec&, const SessionData&)> recorded = nullptr);

}  // namespace xbng::radius
