// The store side of sessions from the access side: an Access-Accept's
// subscriber created through the store's validated upsert path, exactly as a
// gRPC UpsertSubscribers of one subscriber (reserved addresses, overlaps,
// capacity), never replacing a subscriber provisioned by another source.
#pragma once

#include "radius/session.h"
#include "store/store.h"

namespace xbng::radius {

// ALREADY_EXISTS when the key was provisioned meanwhile (left as it is);
// the store's refusal otherwise.
AccessSessions::CreateFn store_creator(agent::SubscriberStore* store);

}  // namespace xbng::radius
