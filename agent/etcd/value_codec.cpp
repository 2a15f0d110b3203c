// The subscriber values of a node's etcd prefix (docs/fleet.md): canonical
// proto3 JSON of xbng.v1.Subscriber.
#include "etcd/value_codec.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include "api/subscriber_json.h"

namespace xbng::agent {

std::optional<std::string> decode_subscriber_value(std::string_view json, std::string_view port,
                                                   uint32_t outer, uint32_t inner,
                                                   xbng::v1::Subscriber* out) {
  if (auto e = subscriber_from_json(json, out))
    return fmt::format("value is not an xbng.v1.Subscriber in JSON: {}", *e);
  if (out->port() != port || out->outer_vlan() != outer || out->inner_vlan() != inner)
    return fmt::format("value says {}/{}/{} but the key says {}/{}/{}", out->port(),
                       out->outer_vlan(), out->inner_vlan(), port, outer, inner);
  return std::nullopt;
}

std::optional<std::string> decode_subscriber_kv(std::string_view prefix, std::string_view key,
                                                std::string_view value, std::string* port,
                                                uint32_t* outer, uint32_t* inner, bool* key_ok,
                                                xbng::v1::Subscriber* out) {
  *key_ok = false;
  if (key.substr(0, prefix.size()) != prefix)
    return fmt::format("key is not under {}", escape_bytes(prefix));
  if (auto at = invalid_utf8_at(key))
    return fmt::format("key is not valid UTF-8 (byte 0x{:02x} at offset {})",
                       static_cast<unsigned char>(key[*at]), *at);
  if (auto e = parse_subscriber_key_suffix(key.substr(prefix.size()), port, outer, inner))
    return escape_bytes(*e);
  *key_ok = true;
  if (auto at = invalid_utf8_at(value)) {
    const size_t from = *at < 16 ? 0 : *at - 16;
    return fmt::format("value is not valid UTF-8 (byte 0x{:02x} at offset {}: \"{}\")",
                       static_cast<unsigned char>(value[*at]), *at,
                       escape_bytes(value.substr(from, 32)));
  }
  // JSON escapes can still spell what is not UTF-8 (a lone surrogate).
  if (auto e = decode_subscriber_value(value, *port, *outer, *inner, out)) return escape_bytes(*e);
  auto bad = [](std::string_view f) { return invalid_utf8_at(f).has_value(); };
  bool any = bad(out->port()) || bad(out->mac()) || bad(out->ipv4()) || bad(out->ipv6());
  for (const auto& p : out->ipv6_prefixes()) any = any || bad(p);
  for (const auto& p : out->ipv4_prefixes()) any = any || bad(p);
  if (any) return std::string("value is not valid UTF-8 once its JSON escapes are decoded");
  return std::nullopt;
}

std::string encode_subscriber_value(const xbng::v1::Subscriber& s) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(s, &out);
  return out;
}

}  // namespace xbng::agent
