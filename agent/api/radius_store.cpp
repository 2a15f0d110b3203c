#include "api/radius_store.h"

#include "api/convert.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::radius {

AccessSessions::CreateFn store_creator(
    agent::SubscriberStore* store,
    std::function<void(const SubscriberSpec&, const SessionData&)> recorded) {
  return [store, recorded](const SubscriberSpec& spec, const SessionData& data) -> absl::Status {
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
    if (recorded) recorded(specs[0], data);
    agent::UpsertResult res;
    return store->upsert(std::move(specs), &res);
  };
}

}  // namespace xbng::radius
