// DHCPv4 relay: every input is relayed as a client message (each option 82
// policy) and parsed as a server reply; option 82 values and circuit-ids
// are decoded. A relayed message must parse back as a client request with
// hops + 1, giaddr set and xbngd's option 82 last (replace); a reply that
// parses must turn into a client reply without option 82 whose server
// identifier is the gateway.
#include <cstring>
#include <string>

#include "fuzz.h"
#include "relay/agent_info.h"
#include "relay/dhcpv4_relay.h"
#include "relay/dhcpv6_relay.h"

namespace xbng::fuzz {
namespace {

using namespace xbng::agent;
namespace v4 = xbng::agent::dhcpv4;
namespace rl = xbng::agent::relay;

const uint32_t kGw = 0x01004064;     // 100.64.0.1, network order
const uint32_t kRelay = 0x010200c0;  // 192.0.2.1

Bytes bootp(uint8_t op, uint8_t type, const char* opts_hex, uint32_t giaddr = 0) {
  Bytes b(236, 0);
  b[0] = op, b[1] = 1, b[2] = 6;
  b[4] = 0x12, b[5] = 0x34, b[6] = 0x56, b[7] = 0x78;
  std::memcpy(&b[24], &giaddr, 4);
  b[28] = 0x02, b[33] = 0x11;
  for (uint8_t c : {0x63, 0x82, 0x53, 0x63, 53, 1, 0}) b.push_back(c);
  b.back() = type;
  Bytes o = from_hex(opts_hex);
  b.insert(b.end(), o.begin(), o.end());
  b.push_back(255);
  return b;
}

std::vector<Bytes> seeds() {
  return {
      bootp(1, v4::kDiscover, "3d0701020000000011 370801031c060f77797a"),
      bootp(1, v4::kRequest, "3204 6440010a 3604 64400001 5206010470727420"),
      bootp(1, v4::kRelease, "3604 64400001"),
      // Kea-like OFFER and ACK with option 82 echoed (circuit-id acc0:100:1)
      bootp(2, v4::kOffer,
            "3604 c0000243 3304 00000e10 0104 ffffff00 "
            "5218 010a 616363303a3130303a31 0506 64400001 0b04 64400001",
            kRelay),
      bootp(2, v4::kAck, "3604 c0000243 3304 00000e10 520c 010a 616363303a3130303a31", kRelay),
      bootp(2, v4::kNak, "3604 c0000243", kRelay),
      // a DHCPv6 REPLY with IA_NA (one address) and IA_PD (one /56)
      from_hex("07 abcdef 0003 0028 00000001 00000e10 00001c20 0005 0018 "
               "20010db8100000000000000000000064 00001c20 00002a30 "
               "0019 0029 00000002 00000e10 00001c20 001a 0019 00001c20 00002a30 38 "
               "20010db8200001000000000000000000"),
      // circuit-id strings and agent info values, raw
      from_hex("616363303a3130303a31"),
      from_hex("010a616363303a3130303a3102113032 3a63633a30303a36343a30303a3031"),
  };
}

size_t g_req[8], g_rep[16], g_tmpl;

void report() {
  std::printf("  relay_request:");
  for (int i = 0; i <= static_cast<int>(rl::RequestError::kTooLong); ++i)
    if (g_req[i])
      std::printf(" %s=%zu", rl::request_error_name(static_cast<rl::RequestError>(i)), g_req[i]);
  std::printf("\n  parse_reply:");
  for (int i = 0; i <= static_cast<int>(rl::ReplyError::kNoEnd); ++i)
    if (g_rep[i])
      std::printf(" %s=%zu", rl::reply_error_name(static_cast<rl::ReplyError>(i)), g_rep[i]);
  std::printf("\n  circuit-ids matched: %zu\n", g_tmpl);
}

void run_one(const uint8_t* data, size_t size) {
  const Bytes in(data, data + size);
  for (rl::Policy pol : {rl::Policy::kReplace, rl::Policy::kKeep, rl::Policy::kDrop}) {
    rl::RequestParams p;
    p.giaddr = kRelay;
    p.policy = pol;
    p.ours.circuit_id = "acc0:100:1";
    p.ours.remote_id = "02:00:00:00:00:11";
    p.ours.link_selection = kGw;
    p.ours.server_id_override = kGw;
    if (pol == rl::Policy::kKeep) p.server_id = 0x430200c0;
    v4::Message m;
    rl::RequestError e;
    v4::ParseError pe;
    auto out = rl::relay_request(in, p, &m, &e, &pe);
    ++g_req[static_cast<int>(e)];
    if (!out) continue;
    XBNG_FUZZ_CHECK(out->size() >= 300 && out->size() <= v4::kMaxLen);
    XBNG_FUZZ_CHECK((*out)[3] == static_cast<uint8_t>(in[3] + 1));
    XBNG_FUZZ_CHECK(std::memcmp(&(*out)[24], &kRelay, 4) == 0);
    // The relayed message is a request again (giaddr/hops aside).
    Bytes back = *out;
    back[3] = 0;
    std::memset(&back[24], 0, 4);
    v4::ParseError pe2;
    auto m2 = v4::parse(back, &pe2);
    XBNG_FUZZ_CHECK(m2 && m2->type == m.type && m2->xid == m.xid);
    if (pol == rl::Policy::kReplace) {
      XBNG_FUZZ_CHECK(m2->has_relay_agent_info);
      auto ai = rl::decode_agent_info(m2->relay_agent_info);
      XBNG_FUZZ_CHECK(ai && ai->circuit_id == "acc0:100:1" && ai->link_selection == kGw);
    }
  }
  rl::ReplyError re;
  auto r = rl::parse_reply(in, &re);
  ++g_rep[static_cast<int>(re)];
  if (r) {
    Bytes c = rl::client_reply(in, kGw);
    XBNG_FUZZ_CHECK(c.size() >= 300);
    rl::ReplyError re2;
    auto r2 = rl::parse_reply(c, &re2);
    XBNG_FUZZ_CHECK(r2 && !r2->agent_info && r2->type == r->type && r2->xid == r->xid);
    XBNG_FUZZ_CHECK(!r->server_id || r2->server_id == kGw);
  }
  (void)rl::decode_agent_info(in);
  rl::TemplateVars tv;
  const std::string s(in.begin(), in.end());
  if (rl::match_template(rl::kDefaultCircuitId, s, &tv)) {
    ++g_tmpl;
    XBNG_FUZZ_CHECK(rl::expand(rl::kDefaultCircuitId, tv) == s);  // the exact inverse
  }
  (void)rl::match_template("cid-{svlan}.{cvlan}@{port}/{mac}", s, &tv);
  // DHCPv6: a Relay-Forward around the input unwraps back to it.
  rl::Forward6Params p6;
  p6.interface_id = "acc0:100:1";
  p6.remote_id = "02:00:00:00:00:11";
  rl::Relay6Error e6;
  if (auto fw = rl::relay_forward(in, p6, &e6)) {
    Bytes rep = *fw;
    rep[0] = 13;
    auto r6 = rl::parse_relay_reply(rep, &e6);
    XBNG_FUZZ_CHECK(r6 && r6->message == in && r6->interface_id == "acc0:100:1");
  }
  if (auto r6 = rl::parse_relay_reply(in, &e6)) (void)rl::parse_reply_leases(r6->message);
  // The leases of a REPLY: bounded, prefix lengths in range.
  if (auto l6 = rl::parse_reply_leases(in)) {
    XBNG_FUZZ_CHECK(l6->addresses.size() <= rl::kMaxLeases6);
    XBNG_FUZZ_CHECK(l6->prefixes.size() <= rl::kMaxLeases6);
    for (const auto& p : l6->prefixes) XBNG_FUZZ_CHECK(p.length <= 128);
  }
}

}  // namespace

const FuzzTarget kRelay4Target{"relay4", seeds, run_one, report};

}  // namespace xbng::fuzz
