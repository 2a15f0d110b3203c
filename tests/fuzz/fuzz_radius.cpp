// RADIUS codec: decode every input; what decodes must encode back to the
// same octets, survive the dictionary (decode_authorization) and, signed
// again, verify. The reply and request checks run on every input too.
// Dynamic authorization: every input goes to the CoA handler as it arrived,
// and what decodes is signed again as a CoA- and a Disconnect-Request, so
// that the request parser, session matching and the reply builder see it.
#include <string>

#include "fuzz.h"
#include "radius/codec.h"
#include "radius/dynauth.h"

namespace xbng::fuzz {
namespace {

using namespace xbng::radius;

const Authenticator kAuth{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

std::vector<Bytes> seeds() {
  std::vector<Bytes> s = {
      // RFC 2865 7.1 Access-Request and Access-Accept, 7.2 CHAP request.
      from_hex("01000038 0f403f947397 8057bd83d5cb98f4227a 01066e656d6f 02120dbe708d93d413ce"
               "3196e43f782a0aee 0406c0a80110 050600000003"),
      from_hex("02000026 86fe220e7624ba2a1005f6bf9b55e0b2 06060000000 1 0f0600000000 0e06c0a80103"),
      from_hex("01010047 2aee86f08d0d55969ca5978e0d3367a2 0108666c6f707379 031316e97557c3161858"
               "95f293ff6344077275 0406c0a80110 050600000014 060600000002 070600000001"),
  };
  std::vector<Attribute> accept = {
      make_ipv4(attr::kFramedIpAddress, 0x0900400a),
      make_ipv6(attr::kFramedIpv6Address,
                Ipv6{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}),
      {attr::kDelegatedIpv6Prefix, std::string("\x00\x38\x20\x01\x0d\xb8\x01\x00\x00", 9)},
      {attr::kFramedIpv6Prefix, std::string("\x00\x40\x20\x01\x0d\xb8\x02\x00\x00\x00", 10)},
      make_string(attr::kFramedRoute, "198.51.100.0/24 100.64.0.9 1"),
      make_u32(attr::kSessionTimeout, 3600),
      make_u32(attr::kIdleTimeout, 60),
      make_u32(attr::kAcctInterimInterval, 300),
      make_string(attr::kClass, "class-1"),
      make_string(attr::kFilterId, "gold"),
      make_vendor_u32(kVendorWispr, kWisprBandwidthMaxUp, 1000000),
      make_vendor_u32(kVendorWispr, kWisprBandwidthMaxDown, 2000000),
      make_string(attr::kReplyMessage, "welcome")};
  s.push_back(*build_response(kAccessAccept, 3, kAuth, accept, "secret", true));
  s.push_back(*build_response(kAccessReject, 4, kAuth, {make_string(18, "no")}, "secret", true));
  s.push_back(*build_access_request(
      5, kAuth,
      {make_string(attr::kUserName, "eth1:100:200"), make_string(attr::kUserPassword, "pw"),
       make_u32(attr::kNasPortType, 15), make_vendor(kVendorAdslForum, 1, "circuit"),
       make_vendor(kVendorAdslForum, 2, "remote")},
      "secret"));
  s.push_back(*build_signed_request(
      kAccountingRequest, 6,
      {make_u32(attr::kAcctStatusType, 3), make_string(attr::kAcctSessionId, "abc"),
       make_u32(attr::kAcctInputOctets, 10), make_u32(attr::kAcctInputGigawords, 1),
       make_u32(attr::kEventTimestamp, 1700000000)},
      "secret"));
  s.push_back(*build_signed_request(
      kCoaRequest, 7,
      {make_string(attr::kAcctSessionId, "abc"), make_string(attr::kFilterId, "silver")}, "secret",
      true));
  s.push_back(
      *build_response(kCoaNak, 7, kAuth, {make_u32(attr::kErrorCause, 503)}, "secret", false));
  s.push_back(*build_signed_request(
      kCoaRequest, 8,
      {make_string(attr::kUserName, "eth1:100:200"), make_string(attr::kNasPortId, "eth1:100.200"),
       make_ipv4(attr::kFramedIpAddress, 0x0900400a), make_u32(attr::kSessionTimeout, 60),
       make_u32(attr::kIdleTimeout, 30), make_u32(attr::kEventTimestamp, 1700000000),
       make_vendor_u32(kVendorWispr, kWisprBandwidthMaxUp, 1000000),
       make_vendor_u32(kVendorWispr, kWisprBandwidthMaxDown, 2000000),
       make_string(attr::kProxyState, "ps"), make_string(attr::kNasIdentifier, "xbng")},
      "secret", true));
  s.push_back(*build_signed_request(
      kDisconnectRequest, 9,
      {make_string(attr::kAcctSessionId, "abc"), make_u32(attr::kAcctTerminateCause, 6),
       make_u32(attr::kServiceType, 17)},
      "secret"));
  return s;
}

// Sessions "abc" / "eth1:100:200" / eth1:100.200 / 10.64.0.9 are one; the
// changes succeed or fail by their content, deterministically.
class FakeBackend final : public DynAuthBackend {
 public:
  std::vector<SubKey> by_session_id(std::string_view id) override {
    if (id == "abc") return {kKey};
    if (id == "two") return {kKey, kOther};
    return {};
  }
  std::vector<SubKey> by_user_name(std::string_view n) override {
    return n == "eth1:100:200" ? std::vector<SubKey>{kKey} : std::vector<SubKey>{};
  }
  std::optional<SubKey> by_nas_port_id(std::string_view id) override {
    if (id == "eth1:100.200") return kKey;
    return std::nullopt;
  }
  std::optional<SubKey> by_framed_ip(uint32_t be) override {
    if (be == 0x0900400a) return kKey;
    return std::nullopt;
  }
  uint32_t change(const SubKey& k, const DynAuthChange& c, std::string* why) override {
    XBNG_FUZZ_CHECK(k.inner_vid == 200 && !c.empty());
    if (c.filter_id && *c.filter_id != "gold") {
      *why = "no plan";
      return error_cause::kInvalidAttributeValue;
    }
    return 0;
  }
  uint32_t disconnect(const SubKey& k, std::string*) override {
    XBNG_FUZZ_CHECK(k.inner_vid == 200);
    return 0;
  }
  static constexpr SubKey kKey{7, 100, 200};
  static constexpr SubKey kOther{7, 100, 201};
};

FakeBackend g_backend;
DynAuth& handler() {
  static DynAuth* h = [] {
    DynAuthOptions o;
    o.clients = {{"192.0.2.10", "secret"}};
    o.cache_entries = 64;  // small: eviction runs often
    return new DynAuth(o, &g_backend);
  }();
  return *h;
}
uint64_t g_dynauth_answered, g_dynauth_acks;

// A reply of the handler must verify against its request, as the server's.
void check_dynauth_reply(const Bytes& req, const std::optional<Bytes>& reply) {
  if (!reply) return;
  ++g_dynauth_answered;
  Authenticator ra;
  std::copy(req.begin() + 4, req.begin() + 20, ra.begin());
  auto v = verify_response(*reply, ra, "secret", false);
  XBNG_FUZZ_CHECK(v.ok());
  XBNG_FUZZ_CHECK(v->code == req[0] + 1 || v->code == req[0] + 2);
  XBNG_FUZZ_CHECK((v->find(attr::kErrorCause) != nullptr) == (v->code == req[0] + 2));
  if (v->code == req[0] + 1) ++g_dynauth_acks;
}

uint64_t g_faults[kFaultCount];
uint64_t g_decoded, g_authorized, g_verified;

void report() {
  std::printf("  decoded=%llu authorized=%llu verified=%llu; faults:",
              static_cast<unsigned long long>(g_decoded),
              static_cast<unsigned long long>(g_authorized),
              static_cast<unsigned long long>(g_verified));
  for (int i = 1; i < kFaultCount; ++i)
    if (g_faults[i])
      std::printf(" %s=%llu", fault_name(static_cast<Fault>(i)),
                  static_cast<unsigned long long>(g_faults[i]));
  std::printf("\n  dynauth: answered=%llu acks=%llu cached=%zu\n",
              static_cast<unsigned long long>(g_dynauth_answered),
              static_cast<unsigned long long>(g_dynauth_acks), handler().cached());
}

void run_one(const uint8_t* data, size_t size) {
  Bytes copy(data, data + size);  // exact-size heap buffer: ASan sees any overread
  auto p = decode(copy);
  ++g_faults[static_cast<int>(fault_of(p.status()))];
  auto v = verify_response(copy, kAuth, "secret", true);
  if (v.ok()) ++g_verified;
  auto r = verify_request(copy, "secret");
  if (r.ok()) ++g_verified;
  // The time moves on so that the replay window and the cache both act.
  static uint64_t now = 1700000000;
  now += 7;
  check_dynauth_reply(copy, handler().handle(copy, "192.0.2.10", now));
  if (!p.ok()) {
    XBNG_FUZZ_CHECK(fault_of(p.status()) != Fault::kNone);
    XBNG_FUZZ_CHECK(!v.ok() && !r.ok());
    return;
  }
  ++g_decoded;
  // Its attributes as a CoA- and a Disconnect-Request, properly signed.
  {
    std::vector<Attribute> as;
    for (auto& at : p->attrs)
      if (at.type != attr::kMessageAuthenticator) as.push_back(at);
    for (uint8_t code : {kCoaRequest, kDisconnectRequest}) {
      auto pd = parse_dynauth(Packet{code, p->id, {}, as});
      if (pd.ok() && pd->error_cause == 0)
        XBNG_FUZZ_CHECK(pd->session_id || pd->user_name || pd->nas_port_id || pd->framed_ip);
      auto req = build_signed_request(code, p->id, as, "secret", (p->id & 1) != 0);
      if (req.ok()) check_dynauth_reply(*req, handler().handle(*req, "192.0.2.10", now));
    }
  }
  size_t len = size_t{copy[2]} << 8 | copy[3];
  XBNG_FUZZ_CHECK(len >= kHeaderLen && len <= size && len <= kMaxPacketLen);
  auto again = encode(*p);
  XBNG_FUZZ_CHECK(again.ok());
  XBNG_FUZZ_CHECK(*again == Bytes(copy.begin(), copy.begin() + static_cast<ptrdiff_t>(len)));
  auto a = decode_authorization(*p);
  if (a.ok()) {
    ++g_authorized;
    XBNG_FUZZ_CHECK(a->raw.size() == p->attrs.size());
  }
  // Signed again with a fresh Message-Authenticator, it verifies and means the same.
  std::vector<Attribute> attrs;
  for (auto& at : p->attrs)
    if (at.type != attr::kMessageAuthenticator) attrs.push_back(at);
  auto re = build_response(kAccessAccept, p->id, kAuth, attrs, "secret", true);
  if (!re.ok()) {
    XBNG_FUZZ_CHECK(fault_of(re.status()) == Fault::kTooLong);  // the MA's 18 octets
    return;
  }
  auto rv = verify_response(*re, kAuth, "secret", true);
  XBNG_FUZZ_CHECK(rv.ok());
  XBNG_FUZZ_CHECK(decode_authorization(*rv).ok() == a.ok());
}

}  // namespace

const FuzzTarget kRadiusTarget{"radius", seeds, run_one, report};

}  // namespace xbng::fuzz
