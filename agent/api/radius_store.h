// The store side of sessions from the access side: an Access-Accept's
// subscriber is checked exactly as a gRPC UpsertSubscribers of one
// subscriber (field checks of api/convert.h, then the store's claims:
// reserved addresses, overlaps, capacity) and created with ORIGIN_RADIUS,
// never replacing a subscriber another source provisioned meanwhile.
#pragma once

#include "radius/session.h"
#include "radius/session_table.h"
#include "store/store.h"

namespace xbng::radius {

// ALREADY_EXISTS when the key was provisioned meanwhile (left as it is);
// the validation's or the store's refusal otherwise. The session data goes
// into `sessions` (optional) before the subscriber is written, and out again
// when the store refuses it (session_table.h).
AccessSessions::CreateFn store_creator(agent::SubscriberStore* store,
                                       SessionTable* sessions = nullptr);

}  // namespace xbng::radius
