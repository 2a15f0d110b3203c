// The store side of sessions from the access side: an Access-Accept's
// subscriber is checked exactly as a gRPC UpsertSubscribers of one
// subscriber (field checks of api/convert.h, then the store's claims:
// reserved addresses, overlaps, capacity) and created with ORIGIN_RADIUS,
// never replacing a subscriber another source provisioned meanwhile.
//
// StoreDynAuthBackend: dynamic authorization (radius/dynauth.h) on the same
// store and session table. A new rate plan is the same subscriber upserted
// with a new policy, through that validated path: the fast path sees only
// its policer entry rewritten in place (routes, leases and counters stay),
// so no packet is lost. A Disconnect deletes the subscriber through the
// store's normal delete path (routes removed, leases ended) after noting
// Acct-Terminate-Cause Admin-Reset for the accounting that sees it go.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "radius/dynauth.h"
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
// The same for a batch of Accepts: their session records are made durable
// with one write (SessionTable::record_many), then each subscriber is
// created; one status per Accept, in order.
AccessSessions::CreateManyFn store_creator_many(agent::SubscriberStore* store,
                                                SessionTable* sessions = nullptr);

class StoreDynAuthBackend final : public DynAuthBackend {
 public:
  using WallClock = std::function<uint64_t()>;  // unix seconds
  StoreDynAuthBackend(agent::SubscriberStore* store, SessionTable* sessions,
                      std::map<std::string, PolicySpec> plans, WallClock wall = nullptr);

  std::vector<SubKey> by_session_id(std::string_view id) override;
  std::vector<SubKey> by_user_name(std::string_view name) override;
  // "{port}:{svlan}.{cvlan}", as the Access-Request's NAS-Port-Id.
  std::optional<SubKey> by_nas_port_id(std::string_view id) override;
  std::optional<SubKey> by_framed_ip(uint32_t be) override;
  // Filter-Id: the [plans] entry; WISPr: the rate given (burst_for), the
  // other direction as it was. Session-Timeout counts from now (the session
  // data keeps it from the session's start: elapsed + new); 0 removes a
  // timer. 407 for a plan unknown or out of range, 503 when the session
  // went meanwhile, 506 when the store or the state file refuses.
  uint32_t change(const SubKey& k, const DynAuthChange& c, std::string* why) override;
  uint32_t disconnect(const SubKey& k, std::string* why) override;
  // Called after a CoA changed a session's timers (Accounting::timers_changed
  // in the agent), so that the new values count at once.
  void set_timers_changed(std::function<void(const SubKey&)> f) { timers_changed_ = std::move(f); }

 private:
  uint32_t policy_of_change(const SubKey& k, const SubscriberSpec& spec, const DynAuthChange& c,
                            std::optional<PolicySpec>* policy, std::string* why) const;
  bool is_radius(const SubKey& k, SubscriberSpec* spec) const;
  std::vector<SubKey> only_radius(std::vector<SubKey> ks) const;

  agent::SubscriberStore* store_;
  SessionTable* sessions_;
  std::map<std::string, PolicySpec> plans_;
  WallClock wall_;
  std::function<void(const SubKey&)> timers_changed_;
};

}  // namespace xbng::radius
