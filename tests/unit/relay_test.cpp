// The DHCPv4 relay: option 82 codec and templates, the message rewrites,
// and the relay engine (Relay4) against fake servers, a fake client port
// and fake sessions: no socket, no store.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <type_traits>

#include "bringup/punt/counters.h"
#include "bringup/punt/frame.h"
#include "relay/agent_info.h"
#include "relay/dhcpv4_relay.h"
#include "relay/dhcpv6_relay.h"
#include "relay/relay4.h"
#include "relay/relay6.h"
#include "relay/socket4.h"
#include "relay/socket6.h"

namespace xbng::agent::relay {
namespace {

namespace v4 = dhcpv4;
using Bytes = std::vector<uint8_t>;

uint32_t ip(const char* s) { return *parse_ipv4(s); }

const Mac kCpe{0x02, 0xcc, 0x00, 0x64, 0x00, 0x01};
const Mac kPortMac{0x02, 0x00, 0x00, 0x00, 0xaa, 0x01};

Bytes hex(const char* h) {
  Bytes out;
  int hi = -1;
  for (const char* p = h; *p; ++p) {
    int v = std::isxdigit(static_cast<unsigned char>(*p))
                ? (std::isdigit(static_cast<unsigned char>(*p)) ? *p - '0' : (*p | 0x20) - 'a' + 10)
                : -1;
    if (v < 0) continue;
    if (hi < 0)
      hi = v;
    else
      out.push_back(static_cast<uint8_t>(hi << 4 | v)), hi = -1;
  }
  return out;
}

Bytes bootp(uint8_t op, uint8_t type, const Bytes& opts, uint32_t xid = 0x12345678,
            uint32_t giaddr = 0, uint32_t yiaddr = 0, uint32_t ciaddr = 0) {
  Bytes b(236, 0);
  b[0] = op, b[1] = 1, b[2] = 6;
  b[4] = static_cast<uint8_t>(xid >> 24), b[5] = static_cast<uint8_t>(xid >> 16);
  b[6] = static_cast<uint8_t>(xid >> 8), b[7] = static_cast<uint8_t>(xid);
  std::memcpy(&b[12], &ciaddr, 4);
  std::memcpy(&b[16], &yiaddr, 4);
  std::memcpy(&b[24], &giaddr, 4);
  std::memcpy(&b[28], kCpe.data(), 6);
  for (uint8_t c : {0x63, 0x82, 0x53, 0x63, 53, 1, 0}) b.push_back(c);
  b.back() = type;
  b.insert(b.end(), opts.begin(), opts.end());
  b.push_back(255);
  return b;
}

TEST(AgentInfo, RoundTripsAndRefusesBrokenSubOptions) {
  AgentInfo a;
  a.circuit_id = "acc0:100:1";
  a.remote_id = "02:cc:00:64:00:01";
  a.link_selection = ip("100.64.0.1");
  a.server_id_override = ip("100.64.0.1");
  const Bytes v = encode_agent_info(a);
  EXPECT_EQ(v[0], kSubCircuitId);
  auto d = decode_agent_info(v);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, a);
  EXPECT_FALSE(decode_agent_info(hex("0105 6162")));         // runs past the end
  EXPECT_FALSE(decode_agent_info(hex("0503 010203")));       // link selection of 3 bytes
  EXPECT_FALSE(decode_agent_info(hex("0100")));              // empty sub-option
  EXPECT_TRUE(decode_agent_info(hex("0901 ff 0102 6162")));  // unknown sub-option skipped
  // Long ids are cut so the whole option fits its 255 bytes.
  a.circuit_id.assign(300, 'c');
  a.remote_id.assign(300, 'r');
  EXPECT_LE(encode_agent_info(a).size(), 255u);
  auto cut = decode_agent_info(encode_agent_info(a));
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->link_selection, a.link_selection);
}

TEST(Templates, ExpandCheckAndMatchBack) {
  TemplateVars v{"acc0", 100, 7, kCpe};
  EXPECT_EQ(expand(kDefaultCircuitId, v), "acc0:100:7");
  EXPECT_EQ(expand(kDefaultRemoteId, v), "02:cc:00:64:00:01");
  EXPECT_FALSE(check_template(kDefaultCircuitId, true));
  EXPECT_FALSE(check_template("{mac}", false));
  EXPECT_TRUE(check_template("{mac}", true));                  // no key in it
  EXPECT_TRUE(check_template("{port}{svlan}:{cvlan}", true));  // not separated
  EXPECT_TRUE(check_template("{port}:{vlan}", false));         // unknown placeholder
  EXPECT_TRUE(check_template("{port", false));
  EXPECT_TRUE(check_template("", false));
  TemplateVars got;
  ASSERT_TRUE(match_template(kDefaultCircuitId, "acc0:100:7", &got));
  EXPECT_EQ(got.port, "acc0");
  EXPECT_EQ(got.svlan, 100);
  EXPECT_EQ(got.cvlan, 7);
  ASSERT_TRUE(match_template("bng1/{mac}/{svlan}.{cvlan}@{port}",
                             "bng1/" + format_mac(kCpe.data()) + "/5.6@eth1", &got));
  EXPECT_EQ(got.port, "eth1");
  EXPECT_EQ(got.mac, kCpe);
  for (const char* bad : {"acc0:100", "acc0:100:7:8", "acc0:0:7", "acc0:4095:7", "acc0:x:7",
                          ":100:7", "acc0:0100:7", ""})
    EXPECT_FALSE(match_template(kDefaultCircuitId, bad, &got)) << bad;
}

RequestParams params(Policy p = Policy::kReplace) {
  RequestParams rp;
  rp.giaddr = ip("192.0.2.1");
  rp.policy = p;
  rp.ours.circuit_id = "acc0:100:1";
  rp.ours.remote_id = "02:cc:00:64:00:01";
  rp.ours.link_selection = ip("100.64.0.1");
  rp.ours.server_id_override = ip("100.64.0.1");
  return rp;
}

TEST(RelayRequest, AddsTheRelayAndItsOption82Last) {
  const Bytes discover = bootp(1, v4::kDiscover, hex("3703 010306"));
  v4::Message m;
  RequestError e;
  v4::ParseError pe;
  auto out = relay_request(discover, params(), &m, &e, &pe);
  ASSERT_TRUE(out) << request_error_name(e);
  EXPECT_EQ((*out)[3], 1);
  uint32_t gi;
  std::memcpy(&gi, &(*out)[24], 4);
  EXPECT_EQ(gi, ip("192.0.2.1"));
  // Option 82 is the last before End.
  Bytes back = *out;
  back[3] = 0;
  std::memset(&back[24], 0, 4);
  auto m2 = v4::parse(back, &pe);
  ASSERT_TRUE(m2);
  ASSERT_TRUE(m2->has_relay_agent_info);
  auto ai = decode_agent_info(m2->relay_agent_info);
  ASSERT_TRUE(ai);
  EXPECT_EQ(ai->circuit_id, "acc0:100:1");
  EXPECT_EQ(ai->link_selection, ip("100.64.0.1"));
  EXPECT_EQ(ai->server_id_override, ip("100.64.0.1"));
  EXPECT_EQ(m2->param_list, (Bytes{1, 3, 6}));
}

TEST(RelayRequest, Option82PolicyHopsAndGiaddr) {
  // An access node's own option 82 (circuit-id "dslam")
  const Bytes theirs = bootp(1, v4::kDiscover, hex("5207 0105 64736c616d"));
  v4::Message m;
  RequestError e;
  v4::ParseError pe;
  auto rep = relay_request(theirs, params(Policy::kReplace), &m, &e, &pe);
  ASSERT_TRUE(rep);
  Bytes b = *rep;
  b[3] = 0;
  std::memset(&b[24], 0, 4);
  auto ai = decode_agent_info(v4::parse(b, &pe)->relay_agent_info);
  EXPECT_EQ(ai->circuit_id, "acc0:100:1");  // ours, theirs gone
  auto keep = relay_request(theirs, params(Policy::kKeep), &m, &e, &pe);
  ASSERT_TRUE(keep);
  b = *keep;
  b[3] = 0;
  std::memset(&b[24], 0, 4);
  ai = decode_agent_info(v4::parse(b, &pe)->relay_agent_info);
  EXPECT_EQ(ai->circuit_id, "dslam");
  EXPECT_FALSE(ai->link_selection);
  EXPECT_FALSE(relay_request(theirs, params(Policy::kDrop), &m, &e, &pe));
  EXPECT_EQ(e, RequestError::kAgentInfoDropped);
  // Without one, drop relays with ours.
  EXPECT_TRUE(relay_request(bootp(1, v4::kDiscover, {}), params(Policy::kDrop), &m, &e, &pe));

  Bytes hops = bootp(1, v4::kDiscover, {});
  hops[3] = 17;
  EXPECT_FALSE(relay_request(hops, params(), &m, &e, &pe));
  EXPECT_EQ(e, RequestError::kHopLimit);
  hops[3] = 3;  // an access node counted itself: relayed, one more
  auto h = relay_request(hops, params(), &m, &e, &pe);
  ASSERT_TRUE(h);
  EXPECT_EQ((*h)[3], 4);
  EXPECT_FALSE(
      relay_request(bootp(1, v4::kDiscover, {}, 1, ip("10.0.0.1")), params(), &m, &e, &pe));
  EXPECT_EQ(e, RequestError::kGiaddrSet);
  Bytes cut = bootp(1, v4::kDiscover, {});
  cut.pop_back();  // no End
  EXPECT_FALSE(relay_request(cut, params(), &m, &e, &pe));
  EXPECT_EQ(e, RequestError::kMalformed);
  EXPECT_EQ(pe, v4::ParseError::kNoEnd);
}

TEST(RelayRequest, RestoresTheRealServerIdentifier) {
  const Bytes req = bootp(1, v4::kRequest, hex("3204 6440010a 3604 64400001"));
  RequestParams rp = params();
  rp.server_id = ip("192.0.2.67");
  v4::Message m;
  RequestError e;
  v4::ParseError pe;
  auto out = relay_request(req, rp, &m, &e, &pe);
  ASSERT_TRUE(out);
  Bytes b = *out;
  b[3] = 0;
  std::memset(&b[24], 0, 4);
  EXPECT_EQ(v4::parse(b, &pe)->server_id, ip("192.0.2.67"));
  EXPECT_EQ(m.server_id, ip("100.64.0.1"));  // what the client sent
}

Bytes kea_ack(uint8_t type, uint32_t yiaddr, uint32_t xid = 0x12345678,
              const char* cid_hex = "616363303a3130303a31") {
  Bytes opts = hex("3604 c0000243 3304 00000e10 0104 ffffffff");
  Bytes cid = hex(cid_hex);
  opts.push_back(82);
  opts.push_back(static_cast<uint8_t>(cid.size() + 2));
  opts.push_back(1);
  opts.push_back(static_cast<uint8_t>(cid.size()));
  opts.insert(opts.end(), cid.begin(), cid.end());
  return bootp(2, type, opts, xid, ip("192.0.2.1"), yiaddr);
}

TEST(ServerReply, ParsedAndRewrittenForTheClient) {
  const Bytes ack = kea_ack(v4::kAck, ip("100.64.5.5"));
  ReplyError e;
  auto r = parse_reply(ack, &e);
  ASSERT_TRUE(r) << reply_error_name(e);
  EXPECT_EQ(r->type, v4::kAck);
  EXPECT_EQ(r->lease_time, 3600u);
  EXPECT_EQ(r->server_id, ip("192.0.2.67"));
  ASSERT_TRUE(r->agent_info);
  EXPECT_EQ(r->agent_info->circuit_id, "acc0:100:1");
  const Bytes c = client_reply(ack, ip("100.64.0.1"));
  auto rc = parse_reply(c, &e);
  ASSERT_TRUE(rc);
  EXPECT_FALSE(rc->agent_info);  // never echoed to the client
  EXPECT_EQ(rc->server_id, ip("100.64.0.1"));
  EXPECT_EQ(rc->yiaddr, ip("100.64.5.5"));
  EXPECT_FALSE(parse_reply(bootp(1, v4::kAck, {}), &e));
  EXPECT_EQ(e, ReplyError::kNotReply);
  EXPECT_FALSE(parse_reply(bootp(2, v4::kDiscover, {}), &e));
  EXPECT_EQ(e, ReplyError::kBadMessageType);
  EXPECT_FALSE(parse_reply(bootp(2, v4::kAck, hex("5203 0105 61")), &e));
  EXPECT_EQ(e, ReplyError::kBadAgentInfo);
}

// ---- the engine ----

struct FakeSessions : Sessions {
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> leases;  // rank -> (addr, server)
  std::vector<std::string> ended_why;
  bool refuse = false;
  absl::Status bound(const SubKey& k, const Mac&, uint32_t addr, uint32_t,
                     uint32_t server) override {
    if (refuse) return absl::FailedPreconditionError("reserved");
    leases[key_rank(k)] = {addr, server};
    return absl::OkStatus();
  }
  void ended(const SubKey& k, const char* why) override {
    leases.erase(key_rank(k));
    ended_why.push_back(why);
  }
  std::optional<uint32_t> lease_server(const SubKey& k) override {
    auto it = leases.find(key_rank(k));
    if (it == leases.end()) return std::nullopt;
    return it->second.second;
  }
};

struct Harness {
  FakeSessions sessions;
  std::vector<std::pair<uint32_t, Bytes>> to_server;
  std::vector<Bytes> to_client;
  uint64_t now = 1'000'000'000;
  std::unique_ptr<Relay4> relay;
  SubKey key{};
  Harness() {
    Relay4Options o;
    o.servers = {ip("192.0.2.67"), ip("192.0.2.68")};
    o.relay_address = ip("192.0.2.1");
    RelayPort p;
    p.ifindex = 7;
    p.name = "acc0";
    p.mac = kPortMac;
    p.gateway = ip("100.64.0.1");
    key.ifindex = 7;
    key.outer_vid = 100;
    key.inner_vid = 1;
    relay = std::make_unique<Relay4>(
        o, std::vector<RelayPort>{p}, &sessions,
        [this](uint32_t, std::span<const uint8_t> f) {
          to_client.emplace_back(f.begin(), f.end());
          return true;
        },
        [this](uint32_t s, std::span<const uint8_t> b) {
          to_server.emplace_back(s, Bytes(b.begin(), b.end()));
          return true;
        },
        [this] { return now; });
  }
  void client(const Bytes& payload) {
    punt::L2 l2{kPortMac, kCpe, 0x88a8, 100, 1};
    l2.dst = Mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    l2.src = kCpe;
    const Bytes f = punt::build_udp4(l2, 0, 0xffffffffu, 68, 67, payload);
    punt::FrameError fe;
    auto v = punt::parse_frame(f, &fe);
    ASSERT_TRUE(v);
    relay->on_client(key, *v);
  }
  // The payload of the last frame to the client, and its IPv4 destination.
  Bytes last_client(uint32_t* dst = nullptr) {
    punt::FrameError fe;
    auto v = punt::parse_frame(to_client.back(), &fe);
    if (dst) *dst = v->dst4;
    return Bytes(v->payload.begin(), v->payload.end());
  }
};

uint64_t counter(AgentReason r) { return agent_reason_value(r); }

TEST(Relay4Engine, DiscoverOfferRequestAckThroughTwoServers) {
  Harness h;
  h.client(bootp(1, v4::kDiscover, {}));
  ASSERT_EQ(h.to_server.size(), 2u);  // every server
  // Server A offers; the client sees the gateway as the server.
  h.relay->on_server(ip("192.0.2.67"), 67, kea_ack(v4::kOffer, ip("100.64.5.5")));
  ASSERT_EQ(h.to_client.size(), 1u);
  ReplyError e;
  auto offer = parse_reply(h.last_client(), &e);
  ASSERT_TRUE(offer);
  EXPECT_EQ(offer->server_id, ip("100.64.0.1"));
  EXPECT_FALSE(offer->agent_info);
  // The client selects it by the gateway: the relayed REQUEST names server A.
  h.to_server.clear();
  h.client(bootp(1, v4::kRequest, hex("3204 64400505 3604 64400001")));
  ASSERT_EQ(h.to_server.size(), 2u);
  Bytes b = h.to_server[0].second;
  b[3] = 0;
  std::memset(&b[24], 0, 4);
  v4::ParseError pe;
  EXPECT_EQ(v4::parse(b, &pe)->server_id, ip("192.0.2.67"));
  // The ACK creates the session, then goes to the client (unicast, yiaddr).
  h.relay->on_server(ip("192.0.2.67"), 67, kea_ack(v4::kAck, ip("100.64.5.5")));
  ASSERT_EQ(h.sessions.leases.count(key_rank(h.key)), 1u);
  EXPECT_EQ(h.sessions.leases[key_rank(h.key)].first, ip("100.64.5.5"));
  uint32_t dst = 0;
  auto ack = parse_reply(h.last_client(&dst), &e);
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->type, v4::kAck);
  EXPECT_EQ(dst, ip("100.64.5.5"));
  // A second ACK for the same exchange is a duplicate.
  const uint64_t dup = counter(AgentReason::kRELAY4_REPLY_DUPLICATE);
  h.relay->on_server(ip("192.0.2.68"), 67, kea_ack(v4::kAck, ip("100.64.6.6")));
  EXPECT_EQ(counter(AgentReason::kRELAY4_REPLY_DUPLICATE), dup + 1);
  EXPECT_EQ(h.sessions.leases[key_rank(h.key)].first, ip("100.64.5.5"));
  // A renewal goes to the server holding the lease only.
  h.to_server.clear();
  Bytes renew = bootp(1, v4::kRequest, {}, 0x99, 0, 0, ip("100.64.5.5"));
  h.client(renew);
  ASSERT_EQ(h.to_server.size(), 1u);
  EXPECT_EQ(h.to_server[0].first, ip("192.0.2.67"));
  // The other server was not asked: its answer is for nobody.
  const uint64_t unk = counter(AgentReason::kRELAY4_REPLY_UNKNOWN_CLIENT);
  h.relay->on_server(ip("192.0.2.68"), 67, kea_ack(v4::kNak, 0, 0x99));
  EXPECT_EQ(counter(AgentReason::kRELAY4_REPLY_UNKNOWN_CLIENT), unk + 1);
  // An INIT-REBOOT goes to every server; a NAK from the one that does not
  // hold the lease is ignored, the lease stays.
  h.client(bootp(1, v4::kRequest, hex("3204 64400505"), 0x98));
  const uint64_t ign = counter(AgentReason::kRELAY4_NAK_IGNORED);
  h.relay->on_server(ip("192.0.2.68"), 67, kea_ack(v4::kNak, 0, 0x98));
  EXPECT_EQ(counter(AgentReason::kRELAY4_NAK_IGNORED), ign + 1);
  EXPECT_EQ(h.sessions.leases.count(key_rank(h.key)), 1u);
  // RELEASE ends it at once.
  h.client(bootp(1, v4::kRelease, hex("3604 64400001"), 0x77, 0, 0, ip("100.64.5.5")));
  EXPECT_EQ(h.sessions.leases.count(key_rank(h.key)), 0u);
  ASSERT_FALSE(h.sessions.ended_why.empty());
  EXPECT_EQ(h.sessions.ended_why.back(), "released");
}

TEST(Relay4Engine, BadRepliesAreDroppedAndCounted) {
  Harness h;
  h.client(bootp(1, v4::kDiscover, {}));
  auto drops = [&](AgentReason r, auto&& fn) {
    const uint64_t before = counter(r);
    const size_t sent = h.to_client.size();
    fn();
    EXPECT_EQ(counter(r), before + 1) << agent_reason_name(r);
    EXPECT_EQ(h.to_client.size(), sent);
  };
  drops(AgentReason::kRELAY4_REPLY_UNKNOWN_SERVER,
        [&] { h.relay->on_server(ip("192.0.2.99"), 67, kea_ack(v4::kOffer, ip("100.64.5.5"))); });
  drops(AgentReason::kRELAY4_REPLY_UNKNOWN_CLIENT, [&] {
    h.relay->on_server(ip("192.0.2.67"), 67, kea_ack(v4::kOffer, ip("100.64.5.5"), 0xdead));
  });
  drops(AgentReason::kRELAY4_REPLY_BAD_OPTION82, [&] {  // circuit-id of another key
    h.relay->on_server(ip("192.0.2.67"), 67,
                       kea_ack(v4::kOffer, ip("100.64.5.5"), 0x12345678, "616363303a3130303a32"));
  });
  drops(AgentReason::kRELAY4_REPLY_BAD_OPTION82, [&] {  // not a known port
    h.relay->on_server(ip("192.0.2.67"), 67,
                       kea_ack(v4::kOffer, ip("100.64.5.5"), 0x12345678, "6e6f3a3130303a31"));
  });
  drops(AgentReason::kRELAY4_REPLY_MALFORMED, [&] {
    Bytes b = kea_ack(v4::kOffer, ip("100.64.5.5"));
    b.resize(100);
    h.relay->on_server(ip("192.0.2.67"), 67, b);
  });
  // A refused address: no session, the ACK is not forwarded.
  h.sessions.refuse = true;
  h.client(bootp(1, v4::kRequest, hex("3204 64400505")));
  drops(AgentReason::kRELAY4_ACK_REFUSED,
        [&] { h.relay->on_server(ip("192.0.2.67"), 67, kea_ack(v4::kAck, ip("100.64.5.5"))); });
  EXPECT_TRUE(h.sessions.leases.empty());
}

TEST(Relay4Engine, AServerThatStopsAnsweringIsMarkedDown) {
  Harness h;
  for (uint32_t i = 0; i < 3; ++i) {
    h.client(bootp(1, v4::kDiscover, {}, 0x100 + i));
    h.relay->on_server(ip("192.0.2.67"), 67, kea_ack(v4::kOffer, ip("100.64.5.5"), 0x100 + i));
    h.now += 3'000'000'000ull;
    h.relay->tick();
  }
  auto s = h.relay->servers();
  EXPECT_TRUE(s[0].up);
  EXPECT_FALSE(s[1].up);
  EXPECT_EQ(s[1].downs, 1u);
  EXPECT_EQ(s[0].answered, 3u);
  // Its next answer marks it up again.
  h.client(bootp(1, v4::kDiscover, {}, 0x200));
  h.relay->on_server(ip("192.0.2.68"), 67, kea_ack(v4::kOffer, ip("100.64.6.6"), 0x200));
  EXPECT_TRUE(h.relay->servers()[1].up);
}

TEST(Dhcpv6Relay, ForwardWrapsAndReplyUnwraps) {
  const Bytes solicit = hex("01 abcdef 0008 0002 0000");
  Forward6Params p;
  p.link_address = *parse_ipv6("2001:db8:1000::1");
  p.peer_address = *parse_ipv6("fe80::cc:64ff:fe00:1");
  p.interface_id = "acc0:100:1";
  p.enterprise = 32473;
  p.remote_id = "02:cc:00:64:00:01";
  Relay6Error e;
  auto fw = relay_forward(solicit, p, &e);
  ASSERT_TRUE(fw) << relay6_error_name(e);
  EXPECT_EQ((*fw)[0], 12);
  EXPECT_EQ((*fw)[1], 0);
  EXPECT_EQ(0, std::memcmp(&(*fw)[2], p.link_address.data(), 16));
  // A server's answer to it: the same header as a Relay-Reply, the
  // Interface-ID echoed, the client's REPLY inside.
  Bytes reply = *fw;
  reply[0] = 13;
  // replace the relay message (last option) with an ADVERTISE
  const size_t relay_msg = reply.size() - (4 + solicit.size());
  reply.resize(relay_msg);
  const Bytes adv = hex("02 abcdef 0002 0004 00010203");
  reply.insert(reply.end(), {0, 9, 0, static_cast<uint8_t>(adv.size())});
  reply.insert(reply.end(), adv.begin(), adv.end());
  auto r = parse_relay_reply(reply, &e);
  ASSERT_TRUE(r) << relay6_error_name(e);
  EXPECT_EQ(r->interface_id, "acc0:100:1");
  EXPECT_EQ(r->message, adv);
  EXPECT_EQ(r->message_type, 2);
  EXPECT_EQ(r->peer_address, p.peer_address);
  // Errors.
  EXPECT_FALSE(relay_forward(hex("02 abcdef"), p, &e));  // an ADVERTISE is no client message
  EXPECT_EQ(e, Relay6Error::kNotClient);
  Bytes nested = *fw;
  nested[1] = kHopCountLimit;
  EXPECT_FALSE(relay_forward(nested, p, &e));
  EXPECT_EQ(e, Relay6Error::kHopLimit);
  nested[1] = 2;
  auto again = relay_forward(nested, p, &e);
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)[1], 3);
  EXPECT_FALSE(parse_relay_reply(*fw, &e));
  EXPECT_EQ(e, Relay6Error::kNotRelayReply);
  Bytes cut = reply;
  cut.pop_back();
  EXPECT_FALSE(parse_relay_reply(cut, &e));
  EXPECT_EQ(e, Relay6Error::kOptionOverflow);
  EXPECT_FALSE(parse_relay_reply(Bytes(reply.begin(), reply.begin() + 34), &e));
  EXPECT_EQ(e, Relay6Error::kNoRelayMessage);
}

TEST(Dhcpv6Relay, ReplyLeases) {
  // REPLY: IA_NA with 2001:db8:1000::64 (7200/10800), IA_PD with
  // 2001:db8:2000:100::/56 (7200/10800).
  const Bytes reply =
      hex("07 abcdef 0003 0028 00000001 00000e10 00001c20 0005 0018 "
          "20010db8100000000000000000000064 00001c20 00002a30 "
          "0019 0029 00000002 00000e10 00001c20 001a 0019 00001c20 00002a30 38 "
          "20010db8200001000000000000000000");
  auto l = parse_reply_leases(reply);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->message_type, 7);
  EXPECT_EQ(l->transaction_id, 0xabcdefu);
  ASSERT_EQ(l->addresses.size(), 1u);
  EXPECT_EQ(l->addresses[0].address, *parse_ipv6("2001:db8:1000::64"));
  EXPECT_EQ(l->addresses[0].preferred, 7200u);
  EXPECT_EQ(l->addresses[0].valid, 10800u);
  ASSERT_EQ(l->prefixes.size(), 1u);
  EXPECT_EQ(l->prefixes[0].prefix, *parse_ipv6("2001:db8:2000:100::"));
  EXPECT_EQ(l->prefixes[0].length, 56);
  EXPECT_EQ(l->prefixes[0].valid, 10800u);
  // An IA_NA whose status is NoBinding (3) holds nothing.
  const Bytes nobinding =
      hex("07 000001 0003 002e 00000001 00000000 00000000 0005 0018 "
          "20010db8100000000000000000000064 00000000 00000000 000d 0002 0003");
  l = parse_reply_leases(nobinding);
  ASSERT_TRUE(l);
  EXPECT_TRUE(l->addresses.empty());
  // Lifetime 0 is kept: the server takes the address back.
  Bytes zero = reply;
  for (size_t i = 0; i < 4; ++i) zero[4 + 4 + 12 + 4 + 16 + 4 + i] = 0;
  l = parse_reply_leases(zero);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->addresses[0].valid, 0u);
  // Malformed: cut short, a prefix length over 128, not a server message.
  EXPECT_FALSE(parse_reply_leases(Bytes(reply.begin(), reply.end() - 1)));
  Bytes long_prefix = reply;
  long_prefix[reply.size() - 17] = 129;
  EXPECT_FALSE(parse_reply_leases(long_prefix));
  Bytes solicit = reply;
  solicit[0] = 1;
  EXPECT_FALSE(parse_reply_leases(solicit));
}

struct FakeSessions6 : Sessions6 {
  absl::Status bound6(const SubKey& k, const Mac&, const Reply6Leases& l,
                      const Ipv6& server) override {
    if (refuse) return absl::AlreadyExistsError("owned by another subscriber");
    bound.push_back({key_rank(k), l});
    last_server = server;
    return absl::OkStatus();
  }
  void ended6(const SubKey& k, const char* why) override { ended.push_back({key_rank(k), why}); }
  bool refuse = false;
  Ipv6 last_server{};
  std::vector<std::pair<uint64_t, Reply6Leases>> bound;
  std::vector<std::pair<uint64_t, std::string>> ended;
};

Relay6Options unicast6(bool two_servers) {
  Relay6Options o;
  o.servers = {*parse_ipv6("2001:db8:ffff::547")};
  if (two_servers) o.servers.push_back(*parse_ipv6("2001:db8:ffff::548"));
  return o;
}

struct Relay6Harness {
  explicit Relay6Harness(bool two_servers = false) : Relay6Harness(unicast6(two_servers)) {}
  explicit Relay6Harness(Relay6Options o) {
    RelayPort6 p;
    p.ifindex = 7;
    p.name = "acc0";
    p.gateway = *parse_ipv6("2001:db8:1000::1");
    relay = std::make_unique<Relay6>(
        o, std::vector<RelayPort6>{p}, &sessions,
        [this](const RelayPort6&, const SubKey& k, const Mac&, const Ipv6& c,
               std::span<const uint8_t> m) {
          to_client.push_back({key_rank(k), Bytes(m.begin(), m.end())});
          client_addr = c;
          return true;
        },
        [this](const Ipv6& dst, std::span<const uint8_t> b) {
          to_server.emplace_back(b.begin(), b.end());
          to_server_dst.push_back(dst);
          return true;
        },
        [this] { return now; });
    key.ifindex = 7, key.outer_vid = 100, key.inner_vid = 1;
  }
  // The server's Relay-Reply to the last Relay-Forward, around `inner`.
  Bytes answer(const Bytes& inner, const char* iid = nullptr) {
    Relay6Error e;
    auto fw = parse_relay_reply(
        [&] {
          Bytes b = to_server.back();
          b[0] = 13;
          return b;
        }(),
        &e);
    Bytes b(34);
    b[0] = 13;
    std::memcpy(&b[2], fw->link_address.data(), 16);
    std::memcpy(&b[18], fw->peer_address.data(), 16);
    const std::string id = iid ? iid : fw->interface_id;
    b.insert(b.end(), {0, 18, 0, static_cast<uint8_t>(id.size())});
    b.insert(b.end(), id.begin(), id.end());
    b.insert(b.end(),
             {0, 9, static_cast<uint8_t>(inner.size() >> 8), static_cast<uint8_t>(inner.size())});
    b.insert(b.end(), inner.begin(), inner.end());
    return b;
  }
  FakeSessions6 sessions;
  std::unique_ptr<Relay6> relay;
  std::vector<Bytes> to_server;
  std::vector<Ipv6> to_server_dst;
  std::vector<std::pair<uint64_t, Bytes>> to_client;
  Ipv6 client_addr{};
  uint64_t now = 1;
  SubKey key{};
  Mac mac{0x02, 0xcc, 0, 0x64, 0, 1};
  Ipv6 ll = *parse_ipv6("fe80::cc:64ff:fe00:1");
  Ipv6 server = *parse_ipv6("2001:db8:ffff::547");
};

const char* kReply6 =
    "07 abcdef 0003 0028 00000001 00000e10 00001c20 0005 0018 "
    "20010db8100000000000000000000064 00001c20 00002a30 "
    "0019 0029 00000002 00000e10 00001c20 001a 0019 00001c20 00002a30 38 "
    "20010db8200001000000000000000000";

TEST(Relay6, RequestReplyBindsAndForwards) {
  Relay6Harness h;
  h.relay->on_client(h.key, h.mac, h.ll, hex("03 abcdef 0008 0002 0000"));
  ASSERT_EQ(h.to_server.size(), 1u);
  Relay6Error e;
  Bytes fw = h.to_server[0];
  fw[0] = 13;
  auto parsed = parse_relay_reply(fw, &e);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->interface_id, "acc0:100:1");
  EXPECT_EQ(parsed->link_address, *parse_ipv6("2001:db8:1000::1"));
  EXPECT_EQ(parsed->peer_address, h.ll);
  h.relay->on_server(h.server, 547, h.answer(hex(kReply6)));
  ASSERT_EQ(h.sessions.bound.size(), 1u);
  EXPECT_EQ(h.sessions.bound[0].first, key_rank(h.key));
  EXPECT_EQ(h.sessions.bound[0].second.addresses.size(), 1u);
  EXPECT_EQ(h.sessions.bound[0].second.prefixes.size(), 1u);
  EXPECT_EQ(h.sessions.last_server, h.server);
  ASSERT_EQ(h.to_client.size(), 1u);
  EXPECT_EQ(h.to_client[0].second, hex(kReply6));
  EXPECT_EQ(h.client_addr, h.ll);
}

TEST(Relay6, RefusedReplyIsNotForwarded) {
  Relay6Harness h;
  h.sessions.refuse = true;
  h.relay->on_client(h.key, h.mac, h.ll, hex("03 abcdef 0008 0002 0000"));
  h.relay->on_server(h.server, 547, h.answer(hex(kReply6)));
  EXPECT_TRUE(h.to_client.empty());
  EXPECT_EQ(h.relay->counters().reply_refused.load(), 1u);
}

TEST(Relay6, ReleaseAndLifetimeZeroEnd) {
  Relay6Harness h;
  h.relay->on_client(h.key, h.mac, h.ll, hex("08 abcdef 0008 0002 0000"));
  ASSERT_EQ(h.sessions.ended.size(), 1u);
  EXPECT_EQ(h.sessions.ended[0].second, "release");
  // A RENEW answered with every lifetime 0 ends the lease too.
  h.relay->on_client(h.key, h.mac, h.ll, hex("05 abcdef 0008 0002 0000"));
  Bytes zero = hex(kReply6);
  for (size_t off : {40u, 44u, 68u, 72u})  // preferred/valid of the address and prefix
    for (size_t i = 0; i < 4; ++i) zero[off + i] = 0;
  h.relay->on_server(h.server, 547, h.answer(zero));
  EXPECT_TRUE(h.sessions.bound.empty());
  ASSERT_EQ(h.sessions.ended.size(), 2u);
  EXPECT_EQ(h.sessions.ended[1].second, "lifetime 0");
  EXPECT_EQ(h.to_client.size(), 1u);
}

TEST(Relay6, BadRepliesDroppedAndCounted) {
  Relay6Harness h;
  h.relay->on_client(h.key, h.mac, h.ll, hex("01 abcdef 0008 0002 0000"));
  const Bytes good = h.answer(hex(kReply6));
  const uint64_t exported = agent_reason_value(AgentReason::kRELAY6_REPLY_UNKNOWN_SERVER);
  h.relay->on_server(*parse_ipv6("2001:db8:ffff::666"), 547, good);
  EXPECT_EQ(h.relay->counters().reply_unknown_server.load(), 1u);
  // Exported as the agent reason too (GetStats, Prometheus).
  EXPECT_EQ(agent_reason_value(AgentReason::kRELAY6_REPLY_UNKNOWN_SERVER), exported + 1);
  h.relay->on_server(h.server, 547, h.answer(hex(kReply6), "acc9:100:1"));
  h.relay->on_server(h.server, 547, h.answer(hex(kReply6), "garbage"));
  EXPECT_EQ(h.relay->counters().reply_bad_interface_id.load(), 2u);
  h.relay->on_server(h.server, 547, h.answer(hex(kReply6), "acc0:100:2"));
  Bytes other_xid = hex(kReply6);
  other_xid[1] = 0x11;
  h.relay->on_server(h.server, 547, h.answer(other_xid));
  EXPECT_EQ(h.relay->counters().reply_unknown_client.load(), 2u);
  h.relay->on_server(h.server, 547, Bytes(good.begin(), good.end() - 1));
  EXPECT_EQ(h.relay->counters().reply_malformed.load(), 1u);
  EXPECT_TRUE(h.to_client.empty());
  EXPECT_TRUE(h.sessions.bound.empty());
  // Hop count at the limit, and a client message not from a relay port.
  Bytes nested(34, 0);
  nested[0] = 12;
  nested[1] = kHopCountLimit;
  h.relay->on_client(h.key, h.mac, h.ll, nested);
  EXPECT_EQ(h.relay->counters().client_hop_limit.load(), 1u);
  SubKey other = h.key;
  other.ifindex = 8;
  h.relay->on_client(other, h.mac, h.ll, hex("01 abcdef 0008 0002 0000"));
  EXPECT_EQ(h.relay->counters().client_not_relay_port.load(), 1u);
  // The exchange is forgotten after its time.
  h.now += 61ull * 1000000000ull;
  h.relay->tick();
  EXPECT_EQ(h.relay->exchanges(), 0u);
}

TEST(Relay6, AServerThatStopsAnsweringIsMarkedDown) {
  Relay6Harness h(true);
  const Ipv6 other = *parse_ipv6("2001:db8:ffff::548");
  const uint64_t exported = agent_reason_value(AgentReason::kRELAY6_SERVER_DOWN);
  for (uint8_t i = 0; i < 3; ++i) {
    // A SOLICIT: both servers may answer; only the first does.
    Bytes solicit = hex("01 00aa00 0008 0002 0000");
    solicit[3] = i;
    h.relay->on_client(h.key, h.mac, h.ll, solicit);
    EXPECT_EQ(h.to_server.size(), 2u * (i + 1u));  // every message goes to both
    Bytes advertise = solicit;
    advertise[0] = 2;
    h.relay->on_server(h.server, 547, h.answer(advertise));
    h.now += 3'000'000'000ull;
    h.relay->tick();
    EXPECT_EQ(h.relay->servers()[1].up, i < 2);
  }
  auto s = h.relay->servers();
  EXPECT_TRUE(s[0].up);
  EXPECT_EQ(s[0].answered, 3u);
  EXPECT_EQ(s[0].misses_total, 0u);
  EXPECT_FALSE(s[1].up);
  EXPECT_EQ(s[1].sent, 3u);
  EXPECT_EQ(s[1].misses_total, 3u);
  EXPECT_EQ(s[1].downs, 1u);
  EXPECT_EQ(h.relay->counters().server_misses.load(), 3u);
  EXPECT_EQ(h.relay->counters().server_down.load(), 1u);
  EXPECT_EQ(agent_reason_value(AgentReason::kRELAY6_SERVER_DOWN), exported + 1);
  // Its next answer marks it up again.
  h.relay->on_client(h.key, h.mac, h.ll, hex("01 00bb00 0008 0002 0000"));
  h.relay->on_server(other, 547, h.answer(hex("02 00bb00 0008 0002 0000")));
  s = h.relay->servers();
  EXPECT_TRUE(s[1].up);
  EXPECT_EQ(s[1].misses, 0u);
  EXPECT_EQ(s[1].answered, 1u);
}

TEST(Relay6, OnlyOpenMessagesAndFirstSendsAreJudged) {
  Relay6Harness h(true);
  // A REQUEST names its server (Server Identifier): no answer is a miss.
  h.relay->on_client(h.key, h.mac, h.ll, hex("03 00cc00 0008 0002 0000 0002 0004 00030001"));
  h.now += 3'000'000'000ull;
  h.relay->tick();
  EXPECT_EQ(h.relay->counters().server_misses.load(), 0u);
  // A SOLICIT retransmitted after 1 s is judged 2 s after its first send.
  h.relay->on_client(h.key, h.mac, h.ll, hex("01 00dd00 0008 0002 0000"));
  h.now += 1'000'000'000ull;
  h.relay->on_client(h.key, h.mac, h.ll, hex("01 00dd00 0008 0002 0064"));
  h.now += 1'100'000'000ull;
  h.relay->tick();
  EXPECT_EQ(h.relay->counters().server_misses.load(), 2u);
  for (const auto& s : h.relay->servers()) {
    EXPECT_EQ(s.misses, 1u);
    EXPECT_TRUE(s.up);
  }
  // The client takes the first ADVERTISE and moves on: the slower server's
  // late ADVERTISE still counts as its answer (not forwarded).
  const Ipv6 other = *parse_ipv6("2001:db8:ffff::548");
  h.relay->on_client(h.key, h.mac, h.ll, hex("01 00ee00 0008 0002 0000"));
  const Bytes late = h.answer(hex("02 00ee00 0008 0002 0000"));
  h.relay->on_server(h.server, 547, late);
  h.relay->on_client(h.key, h.mac, h.ll, hex("03 00ef00 0008 0002 0000 0002 0004 00030001"));
  h.relay->on_server(other, 547, late);
  EXPECT_EQ(h.to_client.size(), 1u);
  h.now += 3'000'000'000ull;
  h.relay->tick();
  EXPECT_EQ(h.relay->counters().server_misses.load(), 2u);
  EXPECT_EQ(h.relay->servers()[1].misses, 0u);
  // Without that late answer, the previous SOLICIT is a miss of that server.
  h.relay->on_client(h.key, h.mac, h.ll, hex("01 00f000 0008 0002 0000"));
  h.relay->on_server(h.server, 547, h.answer(hex("02 00f000 0008 0002 0000")));
  h.relay->on_client(h.key, h.mac, h.ll, hex("03 00f100 0008 0002 0000 0002 0004 00030001"));
  h.now += 3'000'000'000ull;
  h.relay->tick();
  EXPECT_EQ(h.relay->counters().server_misses.load(), 3u);
  EXPECT_EQ(h.relay->servers()[0].misses, 0u);
  EXPECT_EQ(h.relay->servers()[1].misses, 1u);
}

// servers_v6 = [ff05::1:3]: each client message goes once to the group; a
// Relay-Reply is taken from any address that arrives by the uplink, its
// server learned from a reply that matches an exchange, and judged as a
// configured one is (misses, down, up again).
TEST(Relay6, MulticastSendsOnceAndLearnsTheServersThatAnswer) {
  Relay6Options o;
  o.servers = {kAllDhcpServers};
  o.uplink_ifindex = 3;
  Relay6Harness h(o);
  EXPECT_TRUE(h.relay->multicast());
  EXPECT_TRUE(h.relay->servers().empty());
  const Ipv6 a = *parse_ipv6("fe80::a"), b = *parse_ipv6("2001:db8:ffff::b");
  h.relay->on_client(h.key, h.mac, h.ll, hex("01 000100 0008 0002 0000"));
  ASSERT_EQ(h.to_server.size(), 1u);
  EXPECT_EQ(h.to_server_dst[0], kAllDhcpServers);
  EXPECT_EQ(h.relay->counters().forwarded.load(), 1u);
  const Bytes adv = h.answer(hex("02 000100 0008 0002 0000"));
  // Not by the uplink, or not from port 547: no server's.
  h.relay->on_server(a, 547, adv, 4);
  h.relay->on_server(a, 5470, adv, 3);
  EXPECT_EQ(h.relay->counters().reply_unknown_server.load(), 2u);
  // A reply for no exchange teaches nothing.
  h.relay->on_server(b, 547, h.answer(hex("02 0001ff 0008 0002 0000")), 3);
  EXPECT_EQ(h.relay->counters().reply_unknown_client.load(), 1u);
  EXPECT_TRUE(h.relay->servers().empty());
  h.relay->on_server(a, 547, adv, 3);
  ASSERT_EQ(h.to_client.size(), 1u);
  auto s = h.relay->servers();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].address, a);
  EXPECT_EQ(s[0].answered, 1u);
  // A second server answers the same SOLICIT (late, not forwarded again:
  // the client has it from the first): learned too.
  h.relay->on_server(b, 547, adv, 3);
  ASSERT_EQ(h.relay->servers().size(), 2u);
  h.now += 3'000'000'000ull;
  h.relay->tick();
  EXPECT_EQ(h.relay->counters().server_misses.load(), 0u);
  // From now on both are expected to answer each SOLICIT; b stays silent.
  for (uint8_t i = 0; i < 3; ++i) {
    Bytes solicit = hex("01 00aa00 0008 0002 0000");
    solicit[3] = i;
    h.relay->on_client(h.key, h.mac, h.ll, solicit);
    Bytes answer = solicit;
    answer[0] = 2;
    h.relay->on_server(a, 547, h.answer(answer), 3);
    h.now += 3'000'000'000ull;
    h.relay->tick();
  }
  EXPECT_EQ(h.to_server.size(), 4u);  // one send per client message
  s = h.relay->servers();
  EXPECT_TRUE(s[0].up);
  EXPECT_EQ(s[0].misses_total, 0u);
  EXPECT_FALSE(s[1].up);
  EXPECT_EQ(s[1].misses_total, 3u);
  EXPECT_EQ(s[1].sent, 4u);
  EXPECT_EQ(h.relay->counters().server_down.load(), 1u);
  // Its next answer marks it up again.
  h.relay->on_client(h.key, h.mac, h.ll, hex("01 00bb00 0008 0002 0000"));
  h.relay->on_server(b, 547, h.answer(hex("02 00bb00 0008 0002 0000")), 3);
  EXPECT_TRUE(h.relay->servers()[1].up);
}

// Both sockets over loopback: bound on an ephemeral port, a datagram to
// themselves arrives with its source, the tick runs.
template <typename Socket, typename Addr>
void loopback_roundtrip(const Addr& lo) {
  std::mutex mu;
  std::vector<Bytes> got;
  Addr from{};
  uint16_t sport = 0;
  std::atomic<int> ticks{0};
  uint32_t arrival = 0;
  // Socket6 also says the interface a datagram arrived by.
  Socket s(
      lo, 0,
      [&](const Addr& src, uint16_t p, auto... rest) {
        const auto args = std::make_tuple(rest...);
        const std::span<const uint8_t> b = std::get<sizeof...(rest) - 1>(args);
        std::lock_guard l(mu);
        got.emplace_back(b.begin(), b.end());
        from = src;
        sport = p;
        if constexpr (sizeof...(rest) == 2) arrival = std::get<0>(args);
      },
      [&] { ++ticks; });
  ASSERT_NE(s.port(), 0);
  const Bytes payload{1, 2, 3, 4, 5};
  ASSERT_TRUE(s.send(lo, s.port(), payload));
  for (int i = 0; i < 300 && (ticks.load() == 0 || got.empty()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::lock_guard l(mu);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], payload);
  EXPECT_EQ(from, lo);
  EXPECT_EQ(sport, s.port());
  EXPECT_GE(ticks.load(), 1);
  if constexpr (std::is_same_v<Socket, Socket6>) {
    EXPECT_EQ(arrival, if_nametoindex("lo"));
  }
}

TEST(RelaySocket, Socket4Loopback) { loopback_roundtrip<Socket4>(htonl(INADDR_LOOPBACK)); }

TEST(RelaySocket, Socket6Loopback) { loopback_roundtrip<Socket6>(*parse_ipv6("::1")); }

TEST(RelaySocket, BindErrorNamesTheAddress) {
  try {
    Socket6 s(
        *parse_ipv6("2001:db8::dead"), 0, [](const Ipv6&, uint16_t, uint32_t, auto) {}, nullptr);
    FAIL() << "bound an address the host does not have";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("[2001:db8::dead]:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace xbng::agent::relay
