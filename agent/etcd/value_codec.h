// The subscriber values of a node's etcd prefix (docs/fleet.md, part of the
// API): xbng.v1.Subscriber in canonical proto3 JSON, whose port, outer_vlan
// and inner_vlan must be the key's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fleet/fleet.h"
#include "fleet/kv.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

// The value: canonical proto3 JSON (JsonStringToMessage), and its key fields
// must equal the key's. Returns the error or nullopt. Address validation is
// the store's (the same path as gRPC).
std::optional<std::string> decode_subscriber_value(std::string_view json, std::string_view port,
                                                   uint32_t outer, uint32_t inner,
                                                   xbng::v1::Subscriber* out);
std::string encode_subscriber_value(const xbng::v1::Subscriber& s);  // MessageToJsonString

// One kv of a node's prefix: the key must be UTF-8 and parse after `prefix`,
// the value must be UTF-8 and a Subscriber of that key. On a parsed key,
// *port/*outer/*inner are set and *key_ok is true (even when the value is
// refused). Returns the refusal reason (UTF-8: raw bytes escaped) or nullopt.
std::optional<std::string> decode_subscriber_kv(std::string_view prefix, std::string_view key,
                                                std::string_view value, std::string* port,
                                                uint32_t* outer, uint32_t* inner, bool* key_ok,
                                                xbng::v1::Subscriber* out);

// The fleet's decoder (fleet/kv.h): decode_subscriber_kv, then the
// subscriber validated as the store validates a stream entry (api/convert.h).
const fleet::ValueCodec& subscriber_value_codec();

}  // namespace xbng::agent
