// Dynamic authorization (radius/dynauth.h, api/radius_store.h): CoA- and
// Disconnect-Requests signed as a RADIUS server signs them, handled on a
// store over maps in memory, with a RADIUS session created as an
// Access-Accept creates one; and the UDP server on the loopback.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "api/radius_store.h"
#include "radius/codec.h"
#include "radius/dynauth.h"
#include "radius/dynauth_server.h"
#include "radius/session_table.h"
#include "store_test_maps.h"

namespace xbng::test {
namespace {

using namespace xbng::radius;

constexpr uint64_t kStart = 1700000000;
const char* kClient = "192.0.2.10";
const char* kSecret = "coa-secret";

agent::PolicySpec plan(uint64_t up, uint64_t down) { return {up, up / 80, down, down / 80}; }

class DynAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_->set_change_hook([this](const agent::SubKey& k, const agent::SubscriberSpec* now, bool) {
      table_.on_subscriber_change(k, now);
    });
    plans_["gold"] = plan(20000000, 100000000);
    plans_["silver"] = plan(5000000, 25000000);
    backend_ = std::make_unique<StoreDynAuthBackend>(store_.get(), &table_, plans_,
                                                     [this] { return now_; });
    DynAuthOptions o;
    o.clients = {{kClient, kSecret}, {"2001:db8::10", "v6-secret"}};
    o.nas_identifier = "bng1";
    handler_ = std::make_unique<DynAuth>(o, backend_.get());
    create(200, "100.64.0.9", "S-200");
  }

  // A RADIUS session as an Access-Accept creates it.
  void create(uint16_t inner, const std::string& ipv4, const std::string& sid) {
    agent::SubscriberSpec s;
    s.key = key(inner);
    s.ipv4 = *agent::parse_ipv4(ipv4);
    s.has_ipv4 = true;
    s.policy = plans_["silver"];
    s.has_policy = true;
    SessionData d;
    d.session_id = sid;
    d.user_name = "a0:100:" + std::to_string(inner);
    d.start_unix = kStart;
    d.filter_id = "silver";
    ASSERT_TRUE(store_creator(store_.get(), &table_)(s, d).ok());
  }

  struct Reply {
    Packet p;
    uint32_t cause = 0;  // Error-Cause, 0 when absent
  };
  // Sends a request as a server would (from kClient unless `src`); the
  // verified reply, or nullopt when dropped.
  std::optional<Reply> send(uint8_t code, std::vector<Attribute> attrs, bool ma = false,
                            const char* src = nullptr, const char* secret = kSecret) {
    auto b = build_signed_request(code, next_id_++, std::move(attrs), secret, ma);
    EXPECT_TRUE(b.ok());
    return send_bytes(*b, src);
  }
  std::optional<Reply> send_bytes(const Bytes& b, const char* src = nullptr) {
    auto r = handler_->handle(b, src ? src : kClient, now_);
    if (!r) return std::nullopt;
    Authenticator ra;
    std::copy(b.begin() + 4, b.begin() + 20, ra.begin());
    auto v = verify_response(*r, ra, kSecret, false);
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) return std::nullopt;
    Reply out{*v, 0};
    if (const Attribute* e = v->find(attr::kErrorCause)) out.cause = *as_u32(e->value);
    return out;
  }
  agent::SubscriberSpec spec(uint16_t inner) {
    agent::SubscriberSpec s;
    std::optional<agent::Mac> learned;
    EXPECT_TRUE(store_->binding(key(inner), &s, &learned));
    return s;
  }
  bool present(uint16_t inner) {
    agent::SubscriberSpec s;
    std::optional<agent::Mac> learned;
    return store_->binding(key(inner), &s, &learned);
  }
  uint64_t drops(const char* reason) {
    auto c = handler_->counters();
    auto it = c.drops.find(reason);
    return it == c.drops.end() ? 0 : it->second;
  }

  std::shared_ptr<MapState> st_ = std::make_shared<MapState>();
  std::unique_ptr<agent::SubscriberStore> store_ = make_store(st_);
  SessionTable table_{""};
  std::map<std::string, agent::PolicySpec> plans_;
  std::unique_ptr<StoreDynAuthBackend> backend_;
  std::unique_ptr<DynAuth> handler_;
  uint64_t now_ = kStart + 100;
  uint8_t next_id_ = 1;
};

TEST_F(DynAuthTest, FilterIdSwitchesThePlanInPlace) {
  const auto before = st_->snapshot();
  auto r = send(kCoaRequest,
                {make_string(attr::kAcctSessionId, "S-200"), make_string(attr::kFilterId, "gold")});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->p.code, kCoaAck);
  EXPECT_EQ(r->cause, 0u);
  EXPECT_EQ(spec(200).policy, plans_["gold"]);
  EXPECT_EQ(spec(200).origin, agent::kOriginRadius);
  EXPECT_EQ(table_.get(key(200))->filter_id, "gold");
  // Only the policers changed, in place: the routes stay as they were, and
  // the subscriber entry keeps everything but its upstream bucket (no
  // window where a packet finds nothing, no counter reset).
  const auto after = st_->snapshot();
  const int subs = static_cast<int>(agent::MapId::kSubscribers);
  const int police = static_cast<int>(agent::MapId::kPolice);
  for (int m = 0; m < agent::kMapCount; ++m) {
    if (m != police && m != subs) {
      EXPECT_EQ(before[m], after[m]) << "map " << m;
    }
  }
  ASSERT_EQ(before[subs].size(), 1u);
  ASSERT_EQ(after[subs].size(), 1u);
  EXPECT_EQ(before[subs].begin()->first, after[subs].begin()->first);
  const size_t head = offsetof(struct xbng_subscriber, up);
  EXPECT_EQ(before[subs].begin()->second.substr(0, head),
            after[subs].begin()->second.substr(0, head));
  EXPECT_NE(before[subs].begin()->second, after[subs].begin()->second);  // the new up rate
  EXPECT_NE(before[police], after[police]);                              // the new down rate
  EXPECT_EQ(handler_->counters().requests[0].at("ack"), 1u);
}

TEST_F(DynAuthTest, WisprRatesChangeTheGivenDirectionOnly) {
  auto r = send(kCoaRequest, {make_string(attr::kUserName, "a0:100:200"),
                              make_vendor_u32(kVendorWispr, kWisprBandwidthMaxDown, 50000000)});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->p.code, kCoaAck);
  const auto p = spec(200).policy;
  EXPECT_EQ(p.down_rate, 50000000u);
  EXPECT_EQ(p.down_burst, burst_for(50000000, 1500));
  EXPECT_EQ(p.up_rate, plans_["silver"].up_rate);
  EXPECT_FALSE(table_.get(key(200))->filter_id);
}

TEST_F(DynAuthTest, TimersCountFromNow) {
  auto r =
      send(kCoaRequest, {make_string(attr::kNasPortId, "a0:100.200"),
                         make_u32(attr::kSessionTimeout, 600), make_u32(attr::kIdleTimeout, 60)});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->p.code, kCoaAck);
  auto d = table_.get(key(200));
  EXPECT_EQ(d->session_timeout, 700u);  // 100 s up, 600 s more
  EXPECT_EQ(d->idle_timeout, 60u);
  EXPECT_EQ(spec(200).policy, plans_["silver"]);  // the plan stays
  r = send(kCoaRequest, {make_ipv4(attr::kFramedIpAddress, *agent::parse_ipv4("100.64.0.9")),
                         make_u32(attr::kSessionTimeout, 0)});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->p.code, kCoaAck);
  EXPECT_FALSE(table_.get(key(200))->session_timeout);
  EXPECT_EQ(table_.get(key(200))->idle_timeout, 60u);
}

TEST_F(DynAuthTest, MatchingNeedsEveryIdentifierToAgree) {
  create(201, "100.64.0.10", "S-201");
  auto gold = make_string(attr::kFilterId, "gold");
  struct Case {
    std::vector<Attribute> ids;
    uint32_t cause;
  } cases[] = {
      {{make_string(attr::kAcctSessionId, "S-201")}, 0},
      {{make_string(attr::kUserName, "a0:100:201")}, 0},
      {{make_string(attr::kNasPortId, "a0:100.201")}, 0},
      {{make_ipv4(attr::kFramedIpAddress, *agent::parse_ipv4("100.64.0.10"))}, 0},
      {{make_string(attr::kAcctSessionId, "S-201"), make_string(attr::kUserName, "a0:100:201"),
        make_ipv4(attr::kFramedIpAddress, *agent::parse_ipv4("100.64.0.10"))},
       0},
      // Two sessions named at once, or one that does not exist.
      {{make_string(attr::kAcctSessionId, "S-201"), make_string(attr::kUserName, "a0:100:200")},
       error_cause::kSessionContextNotFound},
      {{make_string(attr::kAcctSessionId, "nope")}, error_cause::kSessionContextNotFound},
      {{make_string(attr::kNasPortId, "a0:100.999")}, error_cause::kSessionContextNotFound},
      {{make_string(attr::kNasPortId, "zz:100.201")}, error_cause::kSessionContextNotFound},
      {{make_string(attr::kNasPortId, "garbage")}, error_cause::kSessionContextNotFound},
      {{make_ipv4(attr::kFramedIpAddress, *agent::parse_ipv4("100.64.9.9"))},
       error_cause::kSessionContextNotFound},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    auto attrs = cases[i].ids;
    attrs.push_back(gold);
    auto r = send(kCoaRequest, attrs);
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->cause, cases[i].cause) << i;
    EXPECT_EQ(r->p.code, cases[i].cause ? kCoaNak : kCoaAck) << i;
  }
}

TEST_F(DynAuthTest, OnlyRadiusSessionsAreFound) {
  ASSERT_TRUE(upsert(*store_, {sub(300, "100.64.0.30")}).ok());
  auto r = send(kCoaRequest, {make_ipv4(attr::kFramedIpAddress, *agent::parse_ipv4("100.64.0.30")),
                              make_string(attr::kFilterId, "gold")});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->cause, error_cause::kSessionContextNotFound);
  r = send(kDisconnectRequest, {make_string(attr::kNasPortId, "a0:100.300")});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->p.code, kDisconnectNak);
  EXPECT_EQ(r->cause, error_cause::kSessionContextNotFound);
  EXPECT_TRUE(present(300));
}

TEST_F(DynAuthTest, SeveralSessionsOfOneUserNameAreRefused) {
  // A User-Name template without the VLANs can give two sessions one name.
  SessionData d = *table_.get(key(200));
  create(201, "100.64.0.10", "S-201");
  d.session_id = "S-201";
  ASSERT_TRUE(table_.record(key(201), d));
  auto r = send(kDisconnectRequest, {make_string(attr::kUserName, "a0:100:200")});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->cause, error_cause::kMultipleSessionSelectionUnsupported);
  EXPECT_TRUE(present(200));
  EXPECT_TRUE(present(201));
}

TEST_F(DynAuthTest, ErrorCauses) {
  const auto sid = make_string(attr::kAcctSessionId, "S-200");
  struct Case {
    uint8_t code;
    std::vector<Attribute> attrs;
    uint32_t cause;
  } cases[] = {
      {kCoaRequest, {make_string(attr::kFilterId, "gold")}, error_cause::kMissingAttribute},
      {kCoaRequest, {sid}, error_cause::kMissingAttribute},
      {kCoaRequest,
       {sid, make_string(attr::kFilterId, "gold"), make_string(attr::kCallingStationId, "x")},
       error_cause::kUnsupportedAttribute},
      {kCoaRequest,
       {sid, make_string(attr::kFilterId, "gold"),
        make_vendor_u32(kVendorWispr, kWisprBandwidthMaxUp, 1000000)},
       error_cause::kInvalidRequest},
      {kCoaRequest,
       {sid, make_string(attr::kFilterId, "platinum")},
       error_cause::kInvalidAttributeValue},
      {kCoaRequest,
       {sid, make_vendor_u32(kVendorWispr, kWisprBandwidthMaxUp, 10)},
       error_cause::kInvalidAttributeValue},  // below the 8 kbit/s floor
      {kCoaRequest, {sid, make_vendor_u32(9, 1, 1)}, error_cause::kUnsupportedAttribute},
      {kCoaRequest, {sid, make_u32(attr::kServiceType, 17)}, error_cause::kUnsupportedService},
      {kCoaRequest,
       {sid, make_string(attr::kFilterId, "gold"), make_string(attr::kNasIdentifier, "other")},
       error_cause::kNasIdentificationMismatch},
      {kDisconnectRequest,
       {sid, make_string(attr::kFilterId, "gold")},
       error_cause::kUnsupportedAttribute},
      {kDisconnectRequest,
       {make_u32(attr::kAcctTerminateCause, 6)},
       error_cause::kMissingAttribute},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    auto r = send(cases[i].code, cases[i].attrs);
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->p.code, cases[i].code == kCoaRequest ? kCoaNak : kDisconnectNak) << i;
    EXPECT_EQ(r->cause, cases[i].cause) << i;
  }
  // Nothing changed.
  EXPECT_EQ(spec(200).policy, plans_["silver"]);
  EXPECT_EQ(table_.get(key(200))->filter_id, "silver");
  auto c = handler_->counters();
  EXPECT_EQ(c.requests[0].at("missing_attribute"), 2u);
  EXPECT_EQ(c.requests[0].at("invalid_attribute_value"), 2u);
  EXPECT_EQ(c.requests[1].at("unsupported_attribute"), 1u);
  // With our NAS-Identifier, the same request goes through.
  auto r = send(kCoaRequest, {sid, make_string(attr::kFilterId, "gold"),
                              make_string(attr::kNasIdentifier, "bng1")});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->p.code, kCoaAck);
}

TEST_F(DynAuthTest, DisconnectEndsTheSession) {
  auto r = send(kDisconnectRequest, {make_string(attr::kAcctSessionId, "S-200"),
                                     make_u32(attr::kEventTimestamp, static_cast<uint32_t>(now_))});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->p.code, kDisconnectAck);
  EXPECT_FALSE(present(200));
  EXPECT_FALSE(table_.get(key(200)));
  EXPECT_EQ(table_.take_end_cause(key(200)), kTerminateAdminReset);
  // The routes went with it.
  for (auto m : {agent::MapId::kRoutesV4, agent::MapId::kSubscribers})
    EXPECT_TRUE(st_->snapshot()[static_cast<int>(m)].empty());
  r = send(kDisconnectRequest, {make_string(attr::kAcctSessionId, "S-200")});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->cause, error_cause::kSessionContextNotFound);
}

TEST_F(DynAuthTest, RetransmissionGetsTheCachedReply) {
  auto b = *build_signed_request(kDisconnectRequest, 9,
                                 {make_string(attr::kAcctSessionId, "S-200")}, kSecret);
  auto first = send_bytes(b);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->p.code, kDisconnectAck);
  // The same request again (a lost ACK): the same ACK, not a 503.
  auto again = send_bytes(b);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->p.code, kDisconnectAck);
  auto c = handler_->counters();
  EXPECT_EQ(c.retransmits[1], 1u);
  EXPECT_EQ(c.requests[1].at("ack"), 1u);
  // Beyond the window the cache forgets it; it is a new request then.
  now_ += 301;
  auto late = send_bytes(b);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->cause, error_cause::kSessionContextNotFound);
}

TEST_F(DynAuthTest, ReplayWindow) {
  auto coa = [&](int64_t skew) {
    return send(kCoaRequest,
                {make_string(attr::kAcctSessionId, "S-200"), make_string(attr::kFilterId, "gold"),
                 make_u32(attr::kEventTimestamp, static_cast<uint32_t>(now_ + skew))});
  };
  EXPECT_FALSE(coa(-301));
  EXPECT_FALSE(coa(301));
  EXPECT_EQ(drops("stale_event_timestamp"), 2u);
  EXPECT_EQ(spec(200).policy, plans_["silver"]);
  auto r = coa(-300);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->p.code, kCoaAck);
  r = coa(299);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->p.code, kCoaAck);
}

TEST_F(DynAuthTest, ForgedAndMalformedAreDroppedAndCounted) {
  const std::vector<Attribute> ok = {make_string(attr::kAcctSessionId, "S-200")};
  // Unknown source, wrong secret.
  EXPECT_FALSE(send(kDisconnectRequest, ok, false, "192.0.2.99"));
  EXPECT_FALSE(send(kDisconnectRequest, ok, false, nullptr, "wrong"));
  // A Message-Authenticator that does not match (the authenticator over it
  // is recomputed, so only the MA is wrong).
  auto b = *build_signed_request(kDisconnectRequest, 3, ok, kSecret, true);
  ASSERT_EQ(b[20], attr::kMessageAuthenticator);
  b[22] ^= 1;
  Bytes tampered = b;  // without re-signing: the Request Authenticator fails
  std::fill(b.begin() + 4, b.begin() + 20, 0);
  Bytes signed_input = b;
  signed_input.insert(signed_input.end(), kSecret, kSecret + strlen(kSecret));
  unsigned int n = 16;
  ASSERT_EQ(
      EVP_Digest(signed_input.data(), signed_input.size(), b.data() + 4, &n, EVP_md5(), nullptr),
      1);
  EXPECT_FALSE(send_bytes(b));
  EXPECT_FALSE(send_bytes(tampered));
  EXPECT_EQ(drops("bad_message_authenticator"), 1u);
  // Illegal repetitions: twice a once-only attribute (codec), twice Filter-Id.
  EXPECT_FALSE(send(kDisconnectRequest, {ok[0], ok[0]}));
  EXPECT_FALSE(send(kCoaRequest, {ok[0], make_string(attr::kFilterId, "gold"),
                                  make_string(attr::kFilterId, "silver")}));
  // Not a CoA or Disconnect; truncated; too long.
  EXPECT_FALSE(send(kAccountingRequest, ok));
  auto t = *build_signed_request(kDisconnectRequest, 4, ok, kSecret);
  t.resize(19);
  EXPECT_FALSE(send_bytes(t));
  Bytes huge(5000, 0);
  EXPECT_FALSE(send_bytes(huge));
  EXPECT_EQ(drops("unknown_source"), 1u);
  EXPECT_EQ(drops("bad_authenticator"), 2u);  // wrong secret, MA tampered without re-signing
  EXPECT_EQ(drops("illegal_repeat"), 2u);
  EXPECT_EQ(drops("unexpected_code"), 1u);
  EXPECT_EQ(drops("too_short"), 1u);
  EXPECT_EQ(drops("too_long"), 1u);
  EXPECT_TRUE(present(200));
  EXPECT_EQ(spec(200).policy, plans_["silver"]);
}

TEST_F(DynAuthTest, ReplyEchoesProxyStateAndSignsWithMessageAuthenticator) {
  auto b = *build_signed_request(
      kCoaRequest, 5,
      {make_string(attr::kAcctSessionId, "S-200"), make_string(attr::kFilterId, "gold"),
       make_string(attr::kProxyState, "p1"), make_string(attr::kProxyState, "p2")},
      kSecret, true);
  auto r = handler_->handle(b, kClient, now_);
  ASSERT_TRUE(r);
  Authenticator ra;
  std::copy(b.begin() + 4, b.begin() + 20, ra.begin());
  auto v = verify_response(*r, ra, kSecret, false);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->code, kCoaAck);
  EXPECT_TRUE(v->find(attr::kMessageAuthenticator));
  std::vector<std::string> ps;
  for (const auto& a : v->attrs)
    if (a.type == attr::kProxyState) ps.push_back(a.value);
  EXPECT_EQ(ps, (std::vector<std::string>{"p1", "p2"}));
}

TEST_F(DynAuthTest, Ipv6ClientAndMappedSource) {
  auto b = *build_signed_request(
      kCoaRequest, 6,
      {make_string(attr::kAcctSessionId, "S-200"), make_string(attr::kFilterId, "gold")},
      "v6-secret");
  EXPECT_TRUE(handler_->handle(b, "2001:db8::10", now_));
  // An IPv4 client seen through a dual-stack socket.
  auto b4 = *build_signed_request(
      kCoaRequest, 7,
      {make_string(attr::kAcctSessionId, "S-200"), make_string(attr::kFilterId, "silver")},
      kSecret);
  EXPECT_TRUE(handler_->handle(b4, "::ffff:192.0.2.10", now_));
  EXPECT_EQ(spec(200).policy, plans_["silver"]);
}

TEST(DynAuthServer, AnswersOverUdpAndIgnoresStrangers) {
  auto st = std::make_shared<MapState>();
  auto store = make_store(st);
  SessionTable table("");
  StoreDynAuthBackend backend(store.get(), &table, {});
  DynAuthOptions o;
  o.clients = {{"127.0.0.1", kSecret}};
  auto server = DynAuthServer::start("127.0.0.1", 0, o, &backend);
  ASSERT_TRUE(server.ok()) << server.status();
  const uint16_t port = (*server)->port();
  ASSERT_NE(port, 0);

  auto exchange = [&](const char* src) -> std::optional<Bytes> {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in me{};
    me.sin_family = AF_INET;
    inet_pton(AF_INET, src, &me.sin_addr);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    auto b = *build_signed_request(kDisconnectRequest, 1,
                                   {make_string(attr::kAcctSessionId, "none")}, kSecret);
    EXPECT_EQ(sendto(fd, b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(b.size()));
    pollfd p{fd, POLLIN, 0};
    std::optional<Bytes> out;
    if (poll(&p, 1, 2000) == 1) {
      Bytes r(4096);
      ssize_t n = recv(fd, r.data(), r.size(), 0);
      if (n > 0) {
        r.resize(static_cast<size_t>(n));
        out = r;
      }
    }
    close(fd);
    return out;
  };
  auto r = exchange("127.0.0.1");
  ASSERT_TRUE(r);
  auto p = decode(*r);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->code, kDisconnectNak);
  EXPECT_EQ(as_u32(p->find(attr::kErrorCause)->value), error_cause::kSessionContextNotFound);
  EXPECT_FALSE(exchange("127.0.0.2"));  // no answer to a stranger
  EXPECT_EQ((*server)->counters().drops.at("unknown_source"), 1u);
  const std::string m = (*server)->render_metrics();
  EXPECT_NE(m.find("xbng_radius_dynauth_requests_total{type=\"disconnect\",outcome=\""
                   "session_context_not_found\"} 1"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("xbng_radius_dynauth_dropped_total{reason=\"unknown_source\"} 1"),
            std::string::npos);
}

}  // namespace
}  // namespace xbng::test
