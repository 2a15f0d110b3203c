#include "api/lease_proto.h"

namespace xbng::agent {

void lease_to_proto(const Lease& l, xbng::v1::Lease* out) {
  out->set_bound(l.bound);
  out->set_expires_unix(l.bound ? l.expires_unix : 0);
  out->set_address(l.address);
  for (const auto& p : l.prefixes) out->add_prefixes(p);
  out->set_bound_unix(l.bound_unix);
  out->set_server(l.server);
}

void fill_leases(const LeaseTable& t, xbng::v1::Subscriber* out) {
  if (auto l = t.get(out->port(), out->outer_vlan(), out->inner_vlan(), LeaseFamily::kV4))
    lease_to_proto(*l, out->mutable_lease_v4());
  if (auto l = t.get(out->port(), out->outer_vlan(), out->inner_vlan(), LeaseFamily::kV6))
    lease_to_proto(*l, out->mutable_lease_v6());
}

}  // namespace xbng::agent
