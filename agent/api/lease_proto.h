// Leases as the API shows them: lease_v4/lease_v6 of an xbng.v1.Subscriber.
#pragma once

#include "bringup/lease/lease.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

void lease_to_proto(const Lease& l, xbng::v1::Lease* out);
// Fills lease_v4/lease_v6 of `out` from `t` (the key taken from its port/vlans).
void fill_leases(const LeaseTable& t, xbng::v1::Subscriber* out);

}  // namespace xbng::agent
