// The RADIUS codec: RFC 2865 section 7 packets byte for byte, vectors computed
// independently (Python hashlib/hmac) for Message-Authenticator and the
// Accounting-Request authenticator, build->decode round trips, and each
// malformation refused with its named fault.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstring>
#include <unistd.h>
#include <sys/socket.h>
#include <atomic>
#include <chrono>
#include <thread>
#include <mutex>
#include <map>
#include <vector>
#include <set>

#include "radius/client.h"
#include "radius/codec.h"

namespace xbng::radius {
namespace {

Bytes hex(const char* s) {
  Bytes out;
  int hi = -1;
  for (; *s; ++s) {
    int v = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : -1;
    if (v < 0) continue;
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  return out;
}

Authenticator auth_of(const Bytes& b) {
  Authenticator a;
  std::memcpy(a.data(), b.data() + 4, 16);
  return a;
}

Authenticator seq16() {
  Authenticator a;
  for (int i = 0; i < 16; ++i) a[i] = static_cast<uint8_t>(i);
  return a;
}

// RFC 2865 7.1: User Telnet to Specified Host (secret "xyzzy5461").
const Bytes kRfcRequest = hex(
    "01 00 00 38 0f 40 3f 94 73 97 80 57 bd 83 d5 cb 98 f4 22 7a 01 06 6e 65 6d 6f 02 12 0d be 70 "
    "8d 93 d4 13 ce 31 96 e4 3f 78 2a 0a ee 04 06 c0 a8 01 10 05 06 00 00 00 03");
const Bytes kRfcAccept = hex(
    "02 00 00 26 86 fe 22 0e 76 24 ba 2a 10 05 f6 bf 9b 55 e0 b2 06 06 00 00 00 01 0f 06 00 00 00 "
    "00 0e 06 c0 a8 01 03");
// RFC 2865 7.2: Framed User Authenticating with CHAP.
const Bytes kRfcChap = hex(
    "01 01 00 47 2a ee 86 f0 8d 0d 55 96 9c a5 97 8e 0d 33 67 a2 01 08 66 6c 6f 70 73 79 03 13 16 "
    "e9 75 57 c3 16 18 58 95 f2 93 ff 63 44 07 72 75 04 06 c0 a8 01 10 05 06 00 00 00 14 06 06 00 "
    "00 00 02 07 06 00 00 00 01");
constexpr std::string_view kRfcSecret = "xyzzy5461";

TEST(RadiusCodec, Rfc2865AccessRequestDecodesAndReencodes) {
  auto p = decode(kRfcRequest);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->code, kAccessRequest);
  EXPECT_EQ(p->id, 0);
  ASSERT_EQ(p->attrs.size(), 4u);
  EXPECT_EQ(p->find(attr::kUserName)->value, "nemo");
  EXPECT_EQ(as_u32(p->find(attr::kNasPort)->value), 3u);
  auto pw = unhide_password(p->find(attr::kUserPassword)->value, kRfcSecret, p->authenticator);
  ASSERT_TRUE(pw.ok());
  EXPECT_EQ(*pw, "arctangent");
  auto hidden = hide_password("arctangent", kRfcSecret, p->authenticator);
  ASSERT_TRUE(hidden.ok());
  EXPECT_EQ(*hidden, p->find(attr::kUserPassword)->value);
  auto again = encode(*p);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, kRfcRequest);
  // No Message-Authenticator: a server refuses it.
  EXPECT_EQ(fault_of(verify_request(kRfcRequest, kRfcSecret).status()),
            Fault::kMissingMessageAuthenticator);
}

TEST(RadiusCodec, Rfc2865AccessAcceptResponseAuthenticator) {
  Authenticator ra = auth_of(kRfcRequest);
  auto built = build_response(
      kAccessAccept, 0, ra,
      {make_u32(attr::kServiceType, 1), make_u32(15, 0), make_ipv4(14, htonl(0xc0a80103))},
      kRfcSecret, false);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(*built, kRfcAccept);
  auto ok = verify_response(kRfcAccept, ra, kRfcSecret, /*require_ma=*/false);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->code, kAccessAccept);
  // The same reply is refused when Message-Authenticator is required
  // (BlastRADIUS), with a wrong secret, and against another request.
  EXPECT_EQ(fault_of(verify_response(kRfcAccept, ra, kRfcSecret, true).status()),
            Fault::kMissingMessageAuthenticator);
  EXPECT_EQ(fault_of(verify_response(kRfcAccept, ra, "wrong", false).status()),
            Fault::kBadAuthenticator);
  Authenticator other = ra;
  other[0] ^= 1;
  EXPECT_EQ(fault_of(verify_response(kRfcAccept, other, kRfcSecret, false).status()),
            Fault::kBadAuthenticator);
}

TEST(RadiusCodec, Rfc2865ChapRequestRoundTrip) {
  auto p = decode(kRfcChap);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->find(attr::kUserName)->value, "flopsy");
  EXPECT_EQ(p->find(attr::kChapPassword)->value.size(), 17u);
  EXPECT_EQ(*encode(*p), kRfcChap);
}

TEST(RadiusCodec, AccessRequestMessageAuthenticatorMatchesIndependentVector) {
  auto b = build_access_request(
      7, seq16(), {make_string(attr::kUserName, "alice"), make_string(attr::kUserPassword, "pw")},
      "s3cret");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, hex("0107003f000102030405060708090a0b0c0d0e0f50120511ca3d7a72b081e53e99a58779e58b"
                    "0107616c6963650212b3c5645f7dc082e7dc50f83977198150"));
  auto v = verify_request(*b, "s3cret");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->attrs[0].type, attr::kMessageAuthenticator);  // first: BlastRADIUS mitigation
  EXPECT_EQ(*unhide_password(v->find(attr::kUserPassword)->value, "s3cret", v->authenticator),
            "pw");
  Bytes t = *b;
  t[26] ^= 0x40;  // inside User-Name
  EXPECT_EQ(fault_of(verify_request(t, "s3cret").status()), Fault::kBadMessageAuthenticator);
  EXPECT_EQ(fault_of(verify_request(*b, "other").status()), Fault::kBadMessageAuthenticator);
}

// HMAC-MD5 with a secret longer than MD5's 64-octet block (RFC 2104: the
// key is its MD5 then), checked against OpenSSL's own HMAC.
TEST(RadiusCodec, MessageAuthenticatorWithASecretAboveTheBlock) {
  for (size_t len : {63u, 64u, 65u, 100u}) {
    const std::string secret(len, 'k');
    auto b = build_access_request(7, seq16(), {make_string(attr::kUserName, "alice")}, secret);
    ASSERT_TRUE(b.ok()) << b.status();
    Bytes zeroed = *b;
    std::memset(zeroed.data() + 22, 0, 16);  // the first attribute's value
    uint8_t want[16];
    unsigned int n = 0;
    HMAC(EVP_md5(), secret.data(), static_cast<int>(secret.size()), zeroed.data(), zeroed.size(),
         want, &n);
    ASSERT_EQ(n, 16u);
    EXPECT_EQ(Bytes(b->begin() + 22, b->begin() + 38), Bytes(want, want + 16)) << len;
    EXPECT_TRUE(verify_request(*b, secret).ok()) << len;
  }
}

TEST(RadiusCodec, EmptyPasswordIsOneHiddenBlock) {
  auto h = hide_password("", "s", seq16());
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->size(), 16u);
  EXPECT_EQ(*unhide_password(*h, "s", seq16()), "");
  auto b = build_access_request(1, seq16(), {make_string(attr::kUserPassword, "")}, "s");
  ASSERT_TRUE(b.ok());
  auto p = decode(*b);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->find(attr::kUserPassword)->value, *h);
}

TEST(RadiusCodec, PasswordHidingLongAndTooLong) {
  std::string pw(40, 'x');
  auto h = hide_password(pw, "secret", seq16());
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->size(), 48u);
  EXPECT_EQ(*unhide_password(*h, "secret", seq16()), pw);
  EXPECT_EQ(fault_of(hide_password(std::string(129, 'x'), "s", seq16()).status()),
            Fault::kValueTooLong);
  EXPECT_EQ(fault_of(unhide_password("short", "s", seq16()).status()), Fault::kBadAttributeValue);
}

TEST(RadiusCodec, AccountingRequestAuthenticatorMatchesIndependentVector) {
  auto b = build_signed_request(
      kAccountingRequest, 9,
      {make_u32(attr::kAcctStatusType, 1), make_string(attr::kAcctSessionId, "s1")}, "s3cret");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, hex("0409001e6425b9dd40d4bfe46da6958918b950fc2806000000012c047331"));
  EXPECT_TRUE(verify_request(*b, "s3cret").ok());
  Bytes t = *b;
  t.back() ^= 1;
  EXPECT_EQ(fault_of(verify_request(t, "s3cret").status()), Fault::kBadAuthenticator);
}

TEST(RadiusCodec, AcceptWithMessageAuthenticatorMatchesIndependentVector) {
  Bytes want = hex(
      "0207002cc0c2f5400fc4ab9befc3602f4a19574850123513978234856a97440ca835864a8abd0806c0000205");
  auto b = build_response(kAccessAccept, 7, seq16(),
                          {make_ipv4(attr::kFramedIpAddress, htonl(0xc0000205))}, "s3cret", true);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, want);
  auto v = verify_response(want, seq16(), "s3cret", true);
  ASSERT_TRUE(v.ok()) << v.status();
  // Change an attribute and recompute only the Response Authenticator (what
  // an attacker able to collide MD5 achieves): the stale HMAC gives it away.
  auto p = decode(want);
  ASSERT_TRUE(p.ok());
  p->attrs[1].value[3] = 6;
  auto forged = build_response(kAccessAccept, 7, seq16(), p->attrs, "s3cret", false);
  ASSERT_TRUE(forged.ok());
  EXPECT_EQ(fault_of(verify_response(*forged, seq16(), "s3cret", true).status()),
            Fault::kBadMessageAuthenticator);
}

TEST(RadiusCodec, CoaRequestWithMessageAuthenticator) {
  auto b = build_signed_request(
      kCoaRequest, 3,
      {make_string(attr::kAcctSessionId, "abc"), make_string(attr::kFilterId, "gold"),
       make_u32(attr::kEventTimestamp, 1700000000)},
      "coa", true);
  ASSERT_TRUE(b.ok());
  auto v = verify_request(*b, "coa");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->attrs[0].type, attr::kMessageAuthenticator);
  EXPECT_EQ(fault_of(verify_request(*b, "other").status()), Fault::kBadAuthenticator);
  // A CoA-ACK to it verifies against the request's authenticator.
  auto ack = build_response(kCoaAck, 3, auth_of(*b), {}, "coa", false);
  EXPECT_TRUE(verify_response(*ack, auth_of(*b), "coa", true).ok());
  auto nak =
      build_response(kCoaNak, 3, auth_of(*b), {make_u32(attr::kErrorCause, 503)}, "coa", false);
  auto n = verify_response(*nak, auth_of(*b), "coa", true);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(as_u32(n->find(attr::kErrorCause)->value), 503u);
}

// A valid Access-Accept carrying every attribute the session flow reads.
Packet full_accept() {
  Prefix pd = *agent::parse_prefix("2001:db8:100::/56", 6);
  Prefix fp = *agent::parse_prefix("2001:db8:200::/64", 6);
  Packet p;
  p.code = kAccessAccept;
  p.attrs = {make_ipv4(attr::kFramedIpAddress, *agent::parse_ipv4("100.64.0.9")),
             make_ipv6(attr::kFramedIpv6Address, *agent::parse_ipv6("2001:db8::9")),
             make_ipv6_prefix(attr::kDelegatedIpv6Prefix, pd),
             make_ipv6_prefix(attr::kFramedIpv6Prefix, fp),
             make_string(attr::kFramedRoute, "198.51.100.0/24 100.64.0.9 1"),
             make_string(attr::kFramedIpv6Route, "2001:db8:300::/48 :: 1"),
             make_u32(attr::kSessionTimeout, 86400),
             make_u32(attr::kIdleTimeout, 600),
             make_u32(attr::kAcctInterimInterval, 300),
             make_string(attr::kClass, std::string("\x00\x01\xff", 3)),
             make_string(attr::kClass, "second"),
             make_string(attr::kFilterId, "gold"),
             make_vendor_u32(kVendorWispr, kWisprBandwidthMaxUp, 20000000),
             make_vendor_u32(kVendorWispr, kWisprBandwidthMaxDown, 100000000)};
  return p;
}

TEST(RadiusCodec, AuthorizationDecodesEveryAttribute) {
  Packet p = full_accept();
  auto wire = build_response(kAccessAccept, 1, seq16(), p.attrs, "s", true);
  ASSERT_TRUE(wire.ok());
  auto v = verify_response(*wire, seq16(), "s", true);
  ASSERT_TRUE(v.ok()) << v.status();
  auto a = decode_authorization(*v);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->framed_ip, agent::parse_ipv4("100.64.0.9"));
  EXPECT_EQ(a->framed_ipv6, agent::parse_ipv6("2001:db8::9"));
  ASSERT_EQ(a->delegated_v6.size(), 1u);
  EXPECT_EQ(agent::format_prefix(a->delegated_v6[0]), "2001:db8:100::/56");
  ASSERT_EQ(a->framed_v6_prefix.size(), 1u);
  EXPECT_EQ(agent::format_prefix(a->framed_v6_prefix[0]), "2001:db8:200::/64");
  EXPECT_EQ(a->framed_routes, std::vector<std::string>{"198.51.100.0/24 100.64.0.9 1"});
  EXPECT_EQ(a->framed_v6_routes, std::vector<std::string>{"2001:db8:300::/48 :: 1"});
  EXPECT_EQ(a->session_timeout, 86400u);
  EXPECT_EQ(a->idle_timeout, 600u);
  EXPECT_EQ(a->interim_interval, 300u);
  EXPECT_EQ(a->classes, (std::vector<std::string>{std::string("\x00\x01\xff", 3), "second"}));
  EXPECT_EQ(a->filter_id, "gold");
  EXPECT_EQ(a->wispr_up_bps, 20000000u);
  EXPECT_EQ(a->wispr_down_bps, 100000000u);
  EXPECT_EQ(a->raw.size(), p.attrs.size() + 1);  // + Message-Authenticator
}

TEST(RadiusCodec, AuthorizationRefusesAmbiguousPlans) {
  Packet p = full_accept();
  p.attrs.push_back(make_string(attr::kFilterId, "silver"));
  EXPECT_EQ(fault_of(decode_authorization(p).status()), Fault::kIllegalRepeat);
  Packet q = full_accept();
  q.attrs.push_back(make_vendor_u32(kVendorWispr, kWisprBandwidthMaxUp, 1));
  EXPECT_EQ(fault_of(decode_authorization(q).status()), Fault::kIllegalRepeat);
  Packet r = full_accept();
  r.attrs[0].value = "abc";  // built by hand: Framed-IP-Address of 3 octets
  EXPECT_EQ(fault_of(decode_authorization(r).status()), Fault::kBadAttributeValue);
}

// ---- malformations ----

Bytes valid_reply() {
  return *build_response(kAccessAccept, 1, seq16(), full_accept().attrs, "s", true);
}

void set_len(Bytes& b, size_t n) {
  b[2] = static_cast<uint8_t>(n >> 8);
  b[3] = static_cast<uint8_t>(n);
}

Fault fault_of_decode(const Bytes& b) { return fault_of(decode(b).status()); }

TEST(RadiusCodec, Malformations) {
  Bytes b = valid_reply();
  ASSERT_TRUE(decode(b).ok());
  EXPECT_EQ(fault_of_decode(Bytes(b.begin(), b.begin() + 19)), Fault::kTooShort);
  {
    Bytes t = b;
    set_len(t, 19);
    EXPECT_EQ(fault_of_decode(t), Fault::kLengthMismatch);
    set_len(t, b.size() + 1);
    EXPECT_EQ(fault_of_decode(t), Fault::kLengthMismatch);
  }
  {
    Bytes t(4200, 0);
    std::copy(b.begin(), b.end(), t.begin());
    set_len(t, 4097);
    EXPECT_EQ(fault_of_decode(t), Fault::kTooLong);
  }
  {
    Bytes t = b;  // octets past Length: padding, ignored
    t.push_back(0xff);
    t.push_back(0x01);
    auto p = decode(t);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(verify_response(t, seq16(), "s", true).ok());
  }
  {
    Bytes t = b;
    t[21] = 1;  // first attribute's length
    EXPECT_EQ(fault_of_decode(t), Fault::kAttributeTooShort);
    t[21] = 250;
    EXPECT_EQ(fault_of_decode(t), Fault::kAttributeOverrun);
  }
  {
    Bytes t = b;
    t.push_back(5);  // a lone type octet at the end
    set_len(t, t.size());
    EXPECT_EQ(fault_of_decode(t), Fault::kAttributeOverrun);
  }
  auto with = [&](std::vector<Attribute> attrs) {
    Packet p;
    p.code = kAccessAccept;
    p.attrs = std::move(attrs);
    return fault_of_decode(*encode(p));
  };
  EXPECT_EQ(with({{attr::kNasPort, "abc"}}), Fault::kBadAttributeValue);
  EXPECT_EQ(with({{attr::kFramedIpv6Address, std::string(15, 'a')}}), Fault::kBadAttributeValue);
  EXPECT_EQ(with({{attr::kMessageAuthenticator, std::string(15, 'a')}}), Fault::kBadAttributeValue);
  EXPECT_EQ(with({{attr::kUserPassword, std::string(15, 'a')}}), Fault::kBadAttributeValue);
  EXPECT_EQ(with({make_string(attr::kUserName, "a"), make_string(attr::kUserName, "b")}),
            Fault::kIllegalRepeat);
  EXPECT_EQ(with({make_u32(attr::kSessionTimeout, 1), make_u32(attr::kSessionTimeout, 2)}),
            Fault::kIllegalRepeat);
  EXPECT_EQ(with({{attr::kMessageAuthenticator, std::string(16, 'a')},
                  {attr::kMessageAuthenticator, std::string(16, 'a')}}),
            Fault::kIllegalRepeat);
  // IPv6 prefixes: length > 128, too few octets, bits past the length, reserved octet.
  EXPECT_EQ(with({{attr::kDelegatedIpv6Prefix, std::string("\x00\x81", 2) + std::string(16, 0)}}),
            Fault::kBadAttributeValue);
  EXPECT_EQ(with({{attr::kDelegatedIpv6Prefix, std::string("\x00\x38\x20\x01", 4)}}),
            Fault::kBadAttributeValue);
  EXPECT_EQ(with({{attr::kFramedIpv6Prefix, std::string("\x00\x08\x20\x01", 4)}}),
            Fault::kBadAttributeValue);
  EXPECT_EQ(with({{attr::kFramedIpv6Prefix, std::string("\x01\x00", 2)}}),
            Fault::kBadAttributeValue);
  // Vendor-Specific: no vendor id, sub-attribute overrun / too short, WISPr size and repeat.
  EXPECT_EQ(with({{attr::kVendorSpecific, "abc"}}), Fault::kBadAttributeValue);
  Attribute wispr = make_vendor_u32(kVendorWispr, kWisprBandwidthMaxUp, 5);
  Attribute over = wispr;
  over.value[5] = 9;
  EXPECT_EQ(with({over}), Fault::kAttributeOverrun);
  Attribute tiny = wispr;
  tiny.value[5] = 1;
  EXPECT_EQ(with({tiny}), Fault::kAttributeTooShort);
  EXPECT_EQ(with({make_vendor(kVendorWispr, kWisprBandwidthMaxDown, "abc")}),
            Fault::kBadAttributeValue);
  Attribute twice = wispr;
  twice.value += wispr.value.substr(4);
  EXPECT_EQ(with({twice}), Fault::kIllegalRepeat);
  EXPECT_EQ(with({make_vendor(kVendorAdslForum, kAdslAgentCircuitId, std::string(64, 'c'))}),
            Fault::kBadAttributeValue);
  // Unknown vendors and attributes pass unchecked.
  EXPECT_EQ(with({make_vendor(9, 1, "x"), {200, "anything"}}), Fault::kNone);
}

TEST(RadiusCodec, EncodeRefusesOversizedValuesAndPackets) {
  Packet p;
  p.code = kAccessRequest;
  p.attrs = {{attr::kClass, std::string(254, 'x')}};
  EXPECT_EQ(fault_of(encode(p).status()), Fault::kValueTooLong);
  p.attrs.assign(16, Attribute{attr::kClass, std::string(253, 'x')});  // 20 + 16 * 255 = 4100
  EXPECT_EQ(fault_of(encode(p).status()), Fault::kTooLong);
  p.attrs.pop_back();
  EXPECT_TRUE(encode(p).ok());
}

TEST(RadiusCodec, VerifyRefusesRequestsAsReplies) {
  auto req = build_access_request(1, seq16(), {make_string(attr::kUserName, "a")}, "s");
  EXPECT_EQ(fault_of(verify_response(*req, seq16(), "s", true).status()), Fault::kUnexpectedCode);
  EXPECT_EQ(fault_of(verify_request(valid_reply(), "s").status()), Fault::kUnexpectedCode);
}

TEST(RadiusClient, RequestAttributes) {
  Config cfg;
  cfg.nas_identifier = "bng1";
  cfg.nas_ipv4 = agent::parse_ipv4("192.0.2.1");
  AccessRequest r{"eth1:100:200", "", "eth1:100.200", "02:00:00:00:00:01", "circuit", "remote"};
  auto attrs = access_request_attributes(cfg, r);
  auto b = build_access_request(1, seq16(), attrs, "s");
  ASSERT_TRUE(b.ok());
  auto p = verify_request(*b, "s");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->find(attr::kUserName)->value, "eth1:100:200");
  EXPECT_EQ(*unhide_password(p->find(attr::kUserPassword)->value, "s", p->authenticator), "");
  EXPECT_EQ(p->find(attr::kNasIdentifier)->value, "bng1");
  EXPECT_EQ(as_u32(p->find(attr::kNasPortType)->value), kNasPortTypeEthernet);
  EXPECT_EQ(p->find(attr::kNasPortId)->value, "eth1:100.200");
  EXPECT_EQ(p->find(attr::kCallingStationId)->value, "02:00:00:00:00:01");
  EXPECT_EQ(p->find_vendor(kVendorAdslForum, kAdslAgentCircuitId), "circuit");
  EXPECT_EQ(p->find_vendor(kVendorAdslForum, kAdslAgentRemoteId), "remote");

  AccountingRequest a;
  a.status = AcctStatus::kStop;
  a.session_id = "0123456789abcdef";
  a.input_octets = (uint64_t{5} << 32) + 7;
  a.output_octets = 9;
  a.terminate_cause = 1;
  a.classes = {"c1"};
  auto ab = build_signed_request(kAccountingRequest, 2, accounting_attributes(cfg, a), "s");
  auto ap = verify_request(*ab, "s");
  ASSERT_TRUE(ap.ok()) << ap.status();
  EXPECT_EQ(as_u32(ap->find(attr::kAcctStatusType)->value), 2u);
  EXPECT_EQ(as_u32(ap->find(attr::kAcctInputOctets)->value), 7u);
  EXPECT_EQ(as_u32(ap->find(attr::kAcctInputGigawords)->value), 5u);
  EXPECT_EQ(as_u32(ap->find(attr::kAcctOutputOctets)->value), 9u);
  EXPECT_EQ(as_u32(ap->find(attr::kAcctTerminateCause)->value), 1u);
  EXPECT_EQ(ap->find(attr::kClass)->value, "c1");
}

// Client::set_after_completions: every run of callbacks is followed by the
// hook on the thread that ran them, whatever ended the requests (an answer,
// no answer, a queue full at once on the caller's thread). The access
// sessions' workers are woken only by it.
TEST(RadiusClient, AfterCompletionsFollowsEveryRunOfCallbacks) {
  const int srv = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(srv, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t alen = sizeof a;
  ASSERT_EQ(::getsockname(srv, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  timeval tv{5, 0};
  ::setsockopt(srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // Once every request is in (and the test has been refused the ones
  // beyond max_outstanding), answers the first kAnswered Access-Requests
  // with an Accept; the rest get no answer (they time out).
  constexpr int kAnswered = 12, kAsked = 16, kRefused = 3;
  std::atomic<bool> asked{false};
  std::thread server([&] {
    std::vector<std::pair<Packet, sockaddr_in>> in;
    while (in.size() < static_cast<size_t>(kAsked)) {
      uint8_t buf[4096];
      sockaddr_in from{};
      socklen_t flen = sizeof from;
      const ssize_t n =
          ::recvfrom(srv, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &flen);
      if (n <= 0) return;
      if (auto q = decode({buf, static_cast<size_t>(n)}); q.ok()) in.emplace_back(*q, from);
    }
    while (!asked.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int i = 0; i < kAnswered; ++i) {
      const auto& [q, from] = in[i];
      auto r = build_response(kAccessAccept, q.id, q.authenticator, {}, "s", true);
      ::sendto(srv, r->data(), r->size(), 0, reinterpret_cast<const sockaddr*>(&from), sizeof from);
    }
  });
  Config cfg;
  cfg.servers = {{"127.0.0.1", ntohs(a.sin_port), 1813, "s"}};
  cfg.timeout_ms = 300;
  cfg.retries = 0;
  cfg.dead_time_s = 0;
  cfg.max_outstanding = kAsked;
  auto c = Client::create(cfg);
  ASSERT_TRUE(c.ok()) << c.status();
  std::mutex mu;
  std::map<std::thread::id, int> unflushed;  // callbacks since the hook, per thread
  int done = 0, accepts = 0, hooks = 0;
  ASSERT_TRUE((*c)->set_after_completions([&] {
    std::lock_guard g(mu);
    ++hooks;
    unflushed[std::this_thread::get_id()] = 0;
  }));
  auto on_done = [&](const AccessResult& r) {
    std::lock_guard g(mu);
    ++done;
    accepts += r.outcome == Outcome::kAccept;
    ++unflushed[std::this_thread::get_id()];
  };
  for (int i = 0; i < kAsked + kRefused; ++i)
    (*c)->authorize({"user" + std::to_string(i), "", "", "", "", ""}, on_done);
  {
    std::lock_guard g(mu);  // the refused ones, on this thread, each followed by the hook
    EXPECT_EQ(done, kRefused);
    EXPECT_EQ(unflushed[std::this_thread::get_id()], 0);
  }
  asked = true;
  for (int t = 0; t < 300; ++t) {
    {
      std::lock_guard g(mu);
      if (done == kAsked + kRefused) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server.join();
  ::close(srv);
  std::lock_guard g(mu);
  EXPECT_EQ(done, kAsked + kRefused);
  EXPECT_EQ(accepts, kAnswered);
  EXPECT_EQ((*c)->counters().queue_full, static_cast<uint64_t>(kRefused));
  EXPECT_GE(hooks, 1 + kRefused);  // the I/O thread's passes and each refusal
  for (const auto& [id, n] : unflushed) EXPECT_EQ(n, 0) << "callbacks left without the hook";
}

TEST(RadiusCodec, FaultNamesAreDistinct) {
  std::set<std::string> names;
  for (int i = 0; i < kFaultCount; ++i) names.insert(fault_name(static_cast<Fault>(i)));
  EXPECT_EQ(names.size(), static_cast<size_t>(kFaultCount));
  EXPECT_EQ(fault_of(absl::OkStatus()), Fault::kNone);
  EXPECT_EQ(fault_of(absl::InternalError("x")), Fault::kNone);
}

}  // namespace
}  // namespace xbng::radius
