// The fleet's etcd decode path: a key and a value as etcd hands them over
// (any bytes) through decode_subscriber_kv (UTF-8 checks, key parsing, the
// fast and the exact Subscriber JSON parsers), then the status value
// rendered with that key and the refusal reason, the raw value as an error
// text. Input: a 16-bit key length, the key, the value.
//
// Invariants: nothing throws; an accepted kv has UTF-8 key and value and a
// Subscriber of that key that survives a round trip; a reason is UTF-8;
// invalid_utf8_at agrees with nlohmann's own UTF-8 check (dump() throws
// type_error.316 exactly on the strings it flags); escape_bytes is the
// identity on UTF-8 and always yields UTF-8; the status parses back as JSON
// with the escaped key.
#include <nlohmann/json.hpp>

#include <string>

#include "fuzz.h"
#include "etcd/value_codec.h"
#include "fleet/fleet.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::fuzz {
namespace {

using namespace xbng::agent;

const std::string kPrefix = node_subscribers_prefix("n1");

Bytes kv(const std::string& key, const std::string& value) {
  Bytes b{static_cast<uint8_t>(key.size() >> 8), static_cast<uint8_t>(key.size())};
  b.insert(b.end(), key.begin(), key.end());
  b.insert(b.end(), value.begin(), value.end());
  return b;
}

std::vector<Bytes> seeds() {
  return {
      kv(kPrefix + "acc0/102/1",
         R"({"port":"acc0","outerVlan":102,"innerVlan":1,"mac":"02:00:00:00:00:07",)"
         R"("ipv4":"100.64.4.1","ipv6":"2001:db8:1000::7","ipv6Prefixes":["2001:db8:2007::/64"]})"),
      kv(kPrefix + "acc0/102/1",
         "{\"port\":\"acc0\",\"outerVlan\":102,\"innerVlan\":1,\"ipv4\":\"100.64.4.1\","
         "\"mac\":\"\xff\xfe\xfd\"}"),
      kv(kPrefix + "acc0/102/1\xff", R"({"port":"acc0","outerVlan":102,"innerVlan":1})"),
      kv(kPrefix + "eth\xc3\xa9/4094/7",
         "{\"port\":\"eth\\u00e9\",\"outer_vlan\":4094,\"inner_vlan\":7,"
         "\"ipv4_prefixes\":[\"100.64.8.0/30\"]}"),
      kv(kPrefix + "acc0/1/1",
         "{\"port\":\"acc0\",\"outerVlan\":1,\"innerVlan\":1,"
         "\"mac\":\"\\udcff\",\"counters\":{}}"),
      kv("/xbng/v1/nodes/n2/subscribers/acc0/1/1", "{}"),
  };
}

size_t g_accepted, g_refused, g_bad_utf8;

void report() {
  std::printf("  results: accepted=%zu refused=%zu (not UTF-8: %zu)\n", g_accepted, g_refused,
              g_bad_utf8);
}

bool nlohmann_says_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

void run_one(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const size_t klen = std::min<size_t>(size - 2, size_t(data[0]) << 8 | data[1]);
  const std::string key(reinterpret_cast<const char*>(data + 2), klen);
  const std::string value(reinterpret_cast<const char*>(data + 2 + klen), size - 2 - klen);

  for (const std::string* s : {&key, &value}) {
    const bool utf8 = !invalid_utf8_at(*s);
    XBNG_FUZZ_CHECK(utf8 == nlohmann_says_utf8(*s));
    const std::string e = escape_bytes(*s);
    XBNG_FUZZ_CHECK(!invalid_utf8_at(e));
    XBNG_FUZZ_CHECK(!utf8 || e == *s);
    if (!utf8) ++g_bad_utf8;
  }

  std::string port;
  uint32_t outer = 0, inner = 0;
  bool key_ok = false;
  xbng::v1::Subscriber m;
  auto why = decode_subscriber_kv(kPrefix, key, value, &port, &outer, &inner, &key_ok, &m);
  if (!why) {
    ++g_accepted;
    XBNG_FUZZ_CHECK(key_ok && !invalid_utf8_at(key) && !invalid_utf8_at(value));
    XBNG_FUZZ_CHECK(key == subscriber_etcd_key("n1", port, outer, inner));
    XBNG_FUZZ_CHECK(m.port() == port && m.outer_vlan() == outer && m.inner_vlan() == inner);
    xbng::v1::Subscriber back;
    XBNG_FUZZ_CHECK(
        !decode_subscriber_value(encode_subscriber_value(m), port, outer, inner, &back));
    XBNG_FUZZ_CHECK(back.SerializeAsString() == m.SerializeAsString());
  } else {
    ++g_refused;
    XBNG_FUZZ_CHECK(!invalid_utf8_at(*why));
    if (invalid_utf8_at(key)) XBNG_FUZZ_CHECK(!key_ok);
  }

  // The status as the node would write it, with raw etcd bytes everywhere.
  std::map<std::string, std::string> refused{{key, why.value_or(value)}, {value, value}};
  FleetStatus st;
  st.node = "n1";
  st.boot_id = "b";
  st.refused = &refused;
  st.endpoint = key;
  st.last_error = value;
  const std::string js = render_fleet_status(st);
  XBNG_FUZZ_CHECK(!invalid_utf8_at(js));
  const auto j = nlohmann::json::parse(js);
  XBNG_FUZZ_CHECK(j["refused_count"] == refused.size());
  XBNG_FUZZ_CHECK(j["refused"][0]["key"] == escape_bytes(refused.begin()->first));
  XBNG_FUZZ_CHECK(j["etcd"]["last_error"] == escape_bytes(value));
}

}  // namespace

const FuzzTarget kFleetTarget{"fleet", seeds, run_one, report};

}  // namespace xbng::fuzz
