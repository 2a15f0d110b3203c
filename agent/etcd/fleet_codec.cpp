// The fleet's ValueCodec (fleet/kv.h): a kv checked and decoded by
// decode_subscriber_kv, its subscriber validated as the store validates a
// stream entry (api/convert.h).
#include "api/convert.h"
#include "etcd/value_codec.h"

namespace xbng::agent {

namespace {

class SubscriberValueCodec final : public fleet::ValueCodec {
 public:
  void decode(std::string_view prefix, std::string_view key, std::string_view value,
              const PortResolver& ports, size_t index, fleet::DecodedKv* out) const override {
    // One message per thread, reused: it keeps the memory of its strings.
    thread_local xbng::v1::Subscriber m;
    out->refused = decode_subscriber_kv(prefix, key, value, &out->port, &out->outer, &out->inner,
                                        &out->key_ok, &m);
    if (out->refused) return;
    out->invalid = validate_at(m, ports, false, index, &out->spec);
    out->spec.origin = kOriginEtcd;
  }
};

}  // namespace

const fleet::ValueCodec& subscriber_value_codec() {
  static const SubscriberValueCodec codec;
  return codec;
}

}  // namespace xbng::agent
