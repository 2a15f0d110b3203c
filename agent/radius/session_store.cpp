#include "radius/session_store.h"

#include "xbng/v1/xbng.pb.h"

namespace xbng::radius {

AccessSessions::CreateFn store_creator(agent::SubscriberStore* store) {
  return [store](const SubscriberSpec& spec, const SessionData&) -> absl::Status {
    SubscriberSpec existing;
    std::optional<Mac> learned;
    if (store->binding(spec.key, &existing, &learned))
      return absl::AlreadyExistsError("provisioned meanwhile");
    xbng::v1::Subscriber sub;
    agent::spec_to_proto(spec, store->ports(), &sub);
    agent::UpsertResult res;
    const grpc::Status st = store->upsert({&sub}, &res);
    if (!st.ok()) return absl::FailedPreconditionError(st.error_message());
    return absl::OkStatus();
  };
}

}  // namespace xbng::radius
