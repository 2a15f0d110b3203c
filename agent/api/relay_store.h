// The store side of the DHCP relay's sessions from leases
// (relay::Sessions): a DHCPACK's subscriber is checked exactly as a gRPC
// UpsertSubscribers of one subscriber (api/convert.h, then the store's
// claims: reserved addresses, overlaps, capacity), created with
// ORIGIN_RELAY, and its lease bound in the lease table with the server that
// answered. A subscriber another source provisioned keeps its origin and
// everything else: the ACK gives it its IPv4 address.
// The end of a lease (NAK, RELEASE, DECLINE, expiry) takes the IPv4 address
// away from a relay-created subscriber, and the subscriber when it has
// nothing left.
#pragma once

#include <functional>
#include <mutex>

#include "bringup/lease/lease.h"
#include "relay/relay4.h"
#include "relay/relay6.h"
#include "store/store.h"

namespace xbng::agent {

class RelaySessions : public relay::Sessions, public relay::Sessions6 {
 public:
  using Clock = std::function<uint64_t()>;  // unix seconds
  RelaySessions(SubscriberStore* store, LeaseTable* leases, Clock clock = nullptr);
  absl::Status bound(const SubKey& k, const Mac& mac, uint32_t addr, uint32_t lifetime_s,
                     uint32_t server) override;
  void ended(const SubKey& k, const char* why) override;
  std::optional<uint32_t> lease_server(const SubKey& k) override;
  // A DHCPv6 REPLY: the first IA_NA address becomes the /128, every IA_PD
  // prefix a delegated route to the subscriber (the same validation as
  // above), the IPv6 lease bound with the shortest valid lifetime.
  absl::Status bound6(const SubKey& k, const Mac& mac, const relay::Reply6Leases& l,
                      const Ipv6& server) override;
  void ended6(const SubKey& k, const char* why) override;
  // A lease of family f of k ended by expiry (LeaseTable's expiry hook).
  void expired(const SubKey& k, LeaseFamily f);
  // At start: relay-created subscribers whose IPv4 lease is gone (expired
  // while xbngd was stopped) lose that address. Returns how many changed.
  size_t reconcile();

 private:
  // Takes the IPv4 address from k's subscriber when relay created it.
  void drop_ipv4(const SubKey& k, const char* why);
  // Takes the /128 and the IPv6 prefixes from k's relay-created subscriber.
  void drop_ipv6(const SubKey& k, const char* why);
  // Writes spec back, or removes the subscriber when it has nothing left.
  void shrink(const SubKey& k, SubscriberSpec spec, const char* what, const char* why);
  SubscriberStore* store_;
  LeaseTable* leases_;
  Clock clock_;
  // Each change is a read-modify-write of the whole subscriber, and the
  // DHCPv4 and DHCPv6 relays (and the lease expiry) call from threads of
  // their own: a dual-stack CPE's ACK and REPLY arrive together, and the
  // one written second must not drop (or, both creating, replace) what
  // the first installed. Held across the store's upsert, never taken
  // under the lease table's lock.
  std::mutex mu_;
};

}  // namespace xbng::agent
