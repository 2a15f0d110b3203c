// The api/ room's translation between xbng.v1 messages and the core's types
// (store/subscriber.h, store/store.h): validation of a proto into a
// SubscriberSpec or a SubKey (absl::Status errors whose messages clients
// see as they are), and results back into protos.
#pragma once

#include <absl/status/status.h>

#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

#include "store/store.h"
#include "store/subscriber.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

// Proto → spec. On error returns INVALID_ARGUMENT whose message starts with
// `where` (e.g. "subscribers[3]") and names the field and the value. A
// subscriber needs an IPv4 or IPv6 address, except one RADIUS authorized on
// a port whose DHCP is relayed (`address_required` false): its addresses
// come with the lease the relay sees.
absl::Status validate_subscriber(const xbng::v1::Subscriber& in, const PortResolver& ports,
                                 std::string_view where, SubscriberSpec* out,
                                 bool address_required = true);
absl::Status validate_key(const xbng::v1::SubscriberKey& in, const PortResolver& ports,
                          std::string_view where, SubKey* out);

// validate_subscriber() with the entry's position prefixed to an error:
// "subscribers[i]" (in_request) or "entry i" (formatted only on error: the
// hot path of a bulk load formats nothing).
absl::Status validate_at(const xbng::v1::Subscriber& m, const PortResolver& ports, bool in_request,
                         size_t i, SubscriberSpec* out);

// Every subscriber of an UpsertSubscribers request, or the first error
// ("subscribers[i]: ...").
// The specs get `origin` (the request's field is output only).
absl::Status validate_request(const std::vector<const xbng::v1::Subscriber*>& in,
                              const PortResolver& ports, std::vector<SubscriberSpec>* out,
                              Origin origin = kOriginApi);
// Every key of a DeleteSubscribers request, or the first error ("keys[i]: ...").
absl::Status validate_keys(const std::vector<const xbng::v1::SubscriberKey*>& in,
                           const PortResolver& ports, std::vector<SubKey>* out);

// A stream of messages as the store's StreamSource: `read` fills the next
// message (false at the end of the stream); each is validated as "entry i"
// on the store's reader thread; the specs get `origin`.
StreamSource stream_source(std::function<bool(xbng::v1::Subscriber*)> read,
                           const PortResolver& ports, Origin origin);

// Spec → proto (no counters).
void spec_to_proto(const SubscriberSpec& s, const PortResolver& ports, xbng::v1::Subscriber* out);
// A Get/List result: the spec and, when read, its counters and learned MAC.
void view_to_proto(const SubscriberView& v, const PortResolver& ports, xbng::v1::Subscriber* out);
void counters_to_proto(const SubscriberCounters& c, xbng::v1::Counters* out);
void failure_to_proto(const StreamFailure& f, xbng::v1::Failure* out);

}  // namespace xbng::agent
