#include "api/radius_store.h"

#include "api/convert.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::radius {

AccessSessions::CreateFn store_creator(agent::SubscriberStore* store, SessionTable* sessions) {
  return [store, sessions](const SubscriberSpec& spec, const SessionData& data) -> absl::Status {
    SubscriberSpec existing;
    std::optional<Mac> learned;
    if (store->binding(spec.key, &existing, &learned))
      return absl::AlreadyExistsError("provisioned meanwhile");
    // The same checks as a gRPC request: the Accept's values as a message.
    xbng::v1::Subscriber m;
    agent::spec_to_proto(spec, store->ports(), &m);
    std::vector<SubscriberSpec> specs(1);
    if (absl::Status st = agent::validate_subscriber(m, store->ports(), "Access-Accept", &specs[0]);
        !st.ok())
      return st;
    specs[0].origin = agent::kOriginRadius;
    if (sessions && !sessions->record(spec.key, data))
      return absl::UnavailableError("the session state file cannot be written");
    agent::UpsertResult res;
    absl::Status st = store->upsert(std::move(specs), &res);
    if (!st.ok() && sessions) {
      sessions->on_subscriber_change(spec.key, nullptr);
      sessions->flush();
    }
    return st;
  };
}

}  // namespace xbng::radius
