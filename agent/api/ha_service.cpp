// GetHaStatus / HaSwitchover: the HA member's view translated to xbng.v1.
#include <chrono>

#include "api/service.h"
#include "ha/ha.h"

namespace xbng::agent {

namespace v1 = xbng::v1;
using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

namespace {
const char* const kNoGroup =
    "xbngd has no [ha] group: high availability is configured in the [ha] section (fleet mode)";
}

Status SubscribersService::GetHaStatus(ServerContext* ctx, const v1::GetHaStatusRequest*,
                                       v1::GetHaStatusResponse* resp) {
  ctx->AddInitialMetadata("xbng-boot-id", boot_id_);
  resp->set_boot_id(boot_id_);
  if (!ha_) return Status(StatusCode::FAILED_PRECONDITION, kNoGroup);
  const HaStatus s = ha_->status();
  resp->set_group(s.group);
  resp->set_member(s.member);
  resp->set_role(s.role);
  resp->set_role_since_unix(s.role_since);
  resp->set_active_member(s.active_member);
  resp->set_active_since_unix(s.active_since);
  resp->set_last_takeover_member(s.last_takeover_member);
  resp->set_last_takeover_cause(s.last_takeover_cause);
  resp->set_last_takeover_unix(s.last_takeover_at);
  for (const auto& m : s.members) {
    auto* o = resp->add_members();
    o->set_member(m.member);
    o->set_node(m.node);
    o->set_role(m.role);
    o->set_priority(m.priority);
    o->set_preempt(m.preempt);
    o->set_holding(m.holding);
    o->set_ports_down(m.ports_down);
    o->set_synced(m.synced);
  }
  resp->set_etcd_ok(s.etcd_ok);
  resp->set_last_error(s.last_error);
  resp->set_takeovers(s.takeovers);
  resp->set_step_downs(s.step_downs);
  return Status::OK;
}

Status SubscribersService::HaSwitchover(ServerContext* ctx, const v1::HaSwitchoverRequest*,
                                        v1::HaSwitchoverResponse* resp) {
  ctx->AddInitialMetadata("xbng-boot-id", boot_id_);
  resp->set_boot_id(boot_id_);
  if (!ha_) return Status(StatusCode::FAILED_PRECONDITION, kNoGroup);
  if (!ha_->active()) return Status(StatusCode::FAILED_PRECONDITION, "this member is not active");
  const std::string why =
      ha_->switchover("switchover requested (xbngctl ha switchover)", std::chrono::seconds(5));
  if (!why.empty())
    return Status(why == "the switchover did not complete in time"
                      ? StatusCode::DEADLINE_EXCEEDED
                      : StatusCode::FAILED_PRECONDITION,
                  why);
  const HaStatus s = ha_->status();
  resp->set_active_member(s.active_member == s.member ? "" : s.active_member);
  return Status::OK;
}

}  // namespace xbng::agent
