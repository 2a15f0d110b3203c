// DHCPv4: parser, builder and server, byte-exact; the frame layer
// with checksums; a deterministic mutation fuzz loop over both parsers.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "bringup/dhcpv4/message.h"
#include "bringup/dhcpv4/server.h"
#include "bringup/punt/frame.h"
#include "telemetry/events.h"
#include "api/lease_proto.h"
#include "bringup/lease/lease.h"
#include "common/net.h"
#include "xbng/v1/xbng.pb.h"

#include <arpa/inet.h>
#include <unistd.h>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

using namespace xbng::agent;
using namespace xbng::agent::dhcpv4;
using Bytes = std::vector<uint8_t>;
namespace v1 = xbng::v1;

namespace {

const Mac kCpe{0x02, 0x00, 0x00, 0x00, 0x00, 0x11};
const Mac kPortMac{0x02, 0x00, 0x00, 0x00, 0xaa, 0x01};
const uint32_t kGw = *parse_ipv4("100.64.0.1");
const uint32_t kSubIp = *parse_ipv4("100.64.1.10");

Bytes hex(const std::string& h) {
  Bytes b;
  for (size_t i = 0; i < h.size();) {
    if (h[i] == ' ' || h[i] == '\n') {
      ++i;
      continue;
    }
    b.push_back(static_cast<uint8_t>(std::stoi(h.substr(i, 2), nullptr, 16)));
    i += 2;
  }
  return b;
}

// A client message: fixed header, cookie, then `opts` (without End) and End.
Bytes client_msg(uint8_t type, const Bytes& opts, uint32_t ciaddr = 0, uint16_t flags = 0,
                 const Mac& chaddr = kCpe) {
  Bytes b(236, 0);
  b[0] = 1;
  b[1] = 1;
  b[2] = 6;
  b[4] = 0xde, b[5] = 0xad, b[6] = 0xbe, b[7] = 0xef;  // xid
  b[10] = static_cast<uint8_t>(flags >> 8);
  b[11] = static_cast<uint8_t>(flags);
  std::memcpy(&b[12], &ciaddr, 4);
  std::memcpy(&b[28], chaddr.data(), 6);
  for (uint8_t c : {0x63, 0x82, 0x53, 0x63}) b.push_back(c);
  b.push_back(53);
  b.push_back(1);
  b.push_back(type);
  b.insert(b.end(), opts.begin(), opts.end());
  b.push_back(255);
  return b;
}

Bytes opt_ip(uint8_t code, uint32_t be) {
  Bytes b{code, 4};
  const auto* p = reinterpret_cast<const uint8_t*>(&be);
  b.insert(b.end(), p, p + 4);
  return b;
}
Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Settings settings() {
  Settings s;
  s.gateway = kGw;
  s.lease_time = 3600;
  s.dns = {*parse_ipv4("192.0.2.53")};
  return s;
}
Binding binding() { return Binding{kSubIp, kCpe}; }

Result serve_bytes(const Bytes& msg, const Binding& b = binding(), const Settings& s = settings()) {
  ParseError e;
  auto m = parse(msg, &e);
  EXPECT_TRUE(m) << parse_error_name(e);
  if (!m) return {};
  return serve(*m, b, s, kCpe);
}

// The reply's fixed part (op .. chaddr) for xid deadbeef, then zeros to 236.
std::string fixed_hex(const std::string& flags, const std::string& ciaddr,
                      const std::string& yiaddr) {
  return "02 01 06 00 deadbeef 0000 " + flags + ciaddr + yiaddr + "00000000 00000000" +
         "020000000011 00000000000000000000" + std::string(192 * 2, '0');
}

// Options common to OFFER/ACK with the default settings (mask /32 + 121).
const char* kLeaseOptions =
    "33 04 00000e10"                          // 51 lease 3600
    "3a 04 00000708"                          // 58 T1 1800
    "3b 04 00000c4e"                          // 59 T2 3150
    "01 04 ffffffff"                          // 1 mask /32
    "03 04 64400001"                          // 3 router
    "79 0e 20 64400001 00000000 00 64400001"  // 121: gw/32 on-link, 0/0 via gw
    "06 04 c0000235";                         // 6 dns 192.0.2.53

Bytes padded(Bytes b) {
  if (b.size() < 300) b.resize(300, 0);
  return b;
}

}  // namespace

TEST(Dhcpv4, DiscoverGetsByteExactOffer) {
  Result r = serve_bytes(client_msg(kDiscover, {}));
  ASSERT_EQ(r.outcome, Outcome::kOffered);
  ASSERT_TRUE(r.reply);
  EXPECT_FALSE(r.broadcast);
  EXPECT_EQ(r.dst_ip, kSubIp);
  EXPECT_EQ(r.lease, LeaseChange::kNone);
  const Bytes want = padded(hex(fixed_hex("0000", "00000000", "6440010a") + "63825363" +
                                "35 01 02 36 04 64400001" + kLeaseOptions + "ff"));
  EXPECT_EQ(build(*r.reply), want);
}

TEST(Dhcpv4, RequestSelectingGetsAckAndBinds) {
  Result r = serve_bytes(client_msg(kRequest, cat(opt_ip(50, kSubIp), opt_ip(54, kGw)), 0, 0x8000));
  ASSERT_EQ(r.outcome, Outcome::kAcked);
  EXPECT_TRUE(r.broadcast);  // broadcast flag honoured
  EXPECT_EQ(r.lease, LeaseChange::kBound);
  EXPECT_EQ(r.lease_time, 3600u);
  EXPECT_FALSE(r.learn_mac);
  const Bytes want = padded(hex(fixed_hex("8000", "00000000", "6440010a") + "63825363" +
                                "35 01 05 36 04 64400001" + kLeaseOptions + "ff"));
  EXPECT_EQ(build(*r.reply), want);
}

TEST(Dhcpv4, RequestInitRebootRenewRebind) {
  // INIT-REBOOT: option 50, no server id.
  EXPECT_EQ(serve_bytes(client_msg(kRequest, opt_ip(50, kSubIp))).outcome, Outcome::kAcked);
  // RENEWING (unicast) / REBINDING (broadcast): ciaddr, no 50, no 54.
  Result renew = serve_bytes(client_msg(kRequest, {}, kSubIp));
  ASSERT_EQ(renew.outcome, Outcome::kAcked);
  EXPECT_EQ(renew.dst_ip, kSubIp);
  EXPECT_FALSE(renew.broadcast);
  const Bytes want = padded(hex(fixed_hex("0000", "6440010a", "6440010a") + "63825363" +
                                "35 01 05 36 04 64400001" + kLeaseOptions + "ff"));
  EXPECT_EQ(build(*renew.reply), want);
}

TEST(Dhcpv4, NakWhenRequestedAddressIsNotTheBinding) {
  const uint32_t old = *parse_ipv4("100.64.1.99");
  for (const Bytes& m : {client_msg(kRequest, opt_ip(50, old)), client_msg(kRequest, {}, old),
                         client_msg(kRequest, cat(opt_ip(50, old), opt_ip(54, kGw)))}) {
    Result r = serve_bytes(m);
    ASSERT_EQ(r.outcome, Outcome::kNaked);
    EXPECT_TRUE(r.broadcast);
    EXPECT_EQ(r.lease, LeaseChange::kNone);
    std::string msg = "requested address is not this subscriber's";
    std::string msghex;
    for (char c : msg) msghex += fmt::format("{:02x}", static_cast<uint8_t>(c));
    const Bytes want = padded(hex(fixed_hex("0000", "00000000", "00000000") + "63825363" +
                                  "35 01 06 36 04 64400001 38 2a" + msghex + "ff"));
    EXPECT_EQ(build(*r.reply), want);
  }
}

TEST(Dhcpv4, RequestForAnotherServerIsIgnored) {
  Result r = serve_bytes(
      client_msg(kRequest, cat(opt_ip(50, kSubIp), opt_ip(54, *parse_ipv4("192.0.2.1")))));
  EXPECT_EQ(r.outcome, Outcome::kOtherServer);
  EXPECT_FALSE(r.reply);
}

TEST(Dhcpv4, ReleaseDeclineInform) {
  Result rel = serve_bytes(client_msg(kRelease, opt_ip(54, kGw), kSubIp));
  EXPECT_EQ(rel.outcome, Outcome::kReleased);
  EXPECT_EQ(rel.lease, LeaseChange::kReleased);
  EXPECT_FALSE(rel.reply);
  EXPECT_EQ(serve_bytes(client_msg(kRelease, {}, *parse_ipv4("100.64.9.9"))).outcome,
            Outcome::kIgnored);
  Result dec = serve_bytes(client_msg(kDecline, cat(opt_ip(50, kSubIp), opt_ip(54, kGw))));
  EXPECT_EQ(dec.outcome, Outcome::kDeclined);
  EXPECT_EQ(dec.lease, LeaseChange::kReleased);
  Result inf = serve_bytes(client_msg(kInform, {}, kSubIp));
  ASSERT_EQ(inf.outcome, Outcome::kInformed);
  EXPECT_EQ(inf.dst_ip, kSubIp);
  EXPECT_EQ(inf.lease, LeaseChange::kNone);
  // No lease options in an INFORM's ACK, no yiaddr (RFC 2131 4.3.5).
  const Bytes want = padded(hex(fixed_hex("0000", "6440010a", "00000000") + "63825363" +
                                "35 01 05 36 04 64400001"
                                "01 04 ffffffff 03 04 64400001"
                                "79 0e 20 64400001 00000000 00 64400001"
                                "06 04 c0000235 ff"));
  EXPECT_EQ(build(*inf.reply), want);
}

TEST(Dhcpv4, PoolMaskInsteadOfClasslessRoute) {
  Settings s = settings();
  s.prefix_len = 24;
  s.dns.clear();
  Result r = serve_bytes(client_msg(kDiscover, {}), binding(), s);
  const Bytes want = padded(hex(fixed_hex("0000", "00000000", "6440010a") + "63825363" +
                                "35 01 02 36 04 64400001"
                                "33 04 00000e10 3a 04 00000708 3b 04 00000c4e"
                                "01 04 ffffff00 03 04 64400001 ff"));
  EXPECT_EQ(build(*r.reply), want);
}

TEST(Dhcpv4, Option82IsEchoedLast) {
  const Bytes o82{82, 6, 1, 4, 'p', 'o', 'r', 't'};
  Result r = serve_bytes(client_msg(kDiscover, o82));
  Bytes b = build(*r.reply);
  const Bytes tail{82, 6, 1, 4, 'p', 'o', 'r', 't', 255};
  auto it = std::search(b.begin(), b.end(), tail.begin(), tail.end());
  EXPECT_NE(it, b.end());
}

TEST(Dhcpv4, NoIpv4NoGatewayAndMacChecks) {
  EXPECT_EQ(serve_bytes(client_msg(kDiscover, {}), Binding{0, kCpe}).outcome, Outcome::kNoIpv4);
  Settings nogw = settings();
  nogw.gateway = 0;
  EXPECT_EQ(serve_bytes(client_msg(kDiscover, {}), binding(), nogw).outcome, Outcome::kNoGateway);
  // chaddr not the provisioned MAC.
  const Mac other{0x02, 0, 0, 0, 0, 0x99};
  ParseError e;
  auto m = parse(client_msg(kDiscover, {}, 0, 0, other), &e);
  ASSERT_TRUE(m);
  EXPECT_EQ(serve(*m, binding(), settings(), other).outcome, Outcome::kChaddrRefused);
  // chaddr not the frame's source.
  auto m2 = parse(client_msg(kDiscover, {}), &e);
  EXPECT_EQ(serve(*m2, binding(), settings(), other).outcome, Outcome::kChaddrRefused);
  // Provisioned without MAC: offered, and the ACK teaches the MAC.
  Binding learn{kSubIp, std::nullopt};
  EXPECT_EQ(serve_bytes(client_msg(kDiscover, {}), learn).outcome, Outcome::kOffered);
  Result ack = serve_bytes(client_msg(kRequest, opt_ip(50, kSubIp)), learn);
  EXPECT_EQ(ack.outcome, Outcome::kAcked);
  EXPECT_TRUE(ack.learn_mac);
}

TEST(Dhcpv4, MalformedIsRefusedByName) {
  const Bytes good = client_msg(kDiscover, {});
  auto err_of = [](const Bytes& b) {
    ParseError e;
    EXPECT_FALSE(parse(b, &e));
    return e;
  };
  EXPECT_EQ(err_of(Bytes(good.begin(), good.begin() + 239)), ParseError::kTruncated);
  Bytes big = good;
  big.resize(kMaxLen + 1, 0);
  EXPECT_EQ(err_of(big), ParseError::kOversized);
  Bytes cookie = good;
  cookie[236] = 0x64;
  EXPECT_EQ(err_of(cookie), ParseError::kBadCookie);
  Bytes hops = good;
  hops[3] = 1;
  EXPECT_EQ(err_of(hops), ParseError::kRelayed);
  Bytes giaddr = good;
  giaddr[24] = 10;
  EXPECT_EQ(err_of(giaddr), ParseError::kRelayed);
  Bytes op = good;
  op[0] = 2;
  EXPECT_EQ(err_of(op), ParseError::kNotRequest);
  Bytes hw = good;
  hw[2] = 16;
  EXPECT_EQ(err_of(hw), ParseError::kBadHardware);
  EXPECT_EQ(err_of(client_msg(kDiscover, {52, 1, 3})), ParseError::kOverload);
  EXPECT_EQ(err_of(client_msg(kDiscover, {50, 3, 1, 2, 3})), ParseError::kBadOptionLength);
  Bytes overflow = good;
  overflow.pop_back();  // no End
  overflow.push_back(12);
  overflow.push_back(40);  // hostname claims 40 bytes, 2 follow
  overflow.push_back('a');
  overflow.push_back('b');
  EXPECT_EQ(err_of(overflow), ParseError::kOptionTruncated);
  Bytes noend = good;
  noend.pop_back();
  EXPECT_EQ(err_of(noend), ParseError::kNoEnd);
  Bytes notype(good.begin(), good.begin() + 240);
  notype.push_back(255);
  EXPECT_EQ(err_of(notype), ParseError::kNoMessageType);
  EXPECT_EQ(err_of(client_msg(kOffer, {})), ParseError::kBadMessageType);
}

// ---- frame layer -----------------------------------------------------------------

namespace {
bool udp_checksum_ok(const punt::FrameView& v, std::span<const uint8_t> frame) {
  // Verifies the UDP checksum independently: sum(pseudo header + UDP) == 0xffff.
  const size_t l3 = 22;
  uint32_t sum = 0;
  std::span<const uint8_t> udp;
  if (v.ip_version == 4) {
    sum = punt::csum_partial(frame.subspan(l3 + 12, 8), 0);
    const size_t ulen = v.payload.size() + 8;
    sum += 17 + static_cast<uint32_t>(ulen);
    udp = frame.subspan(l3 + 20, ulen);
  } else {
    sum = punt::csum_partial(frame.subspan(l3 + 8, 32), 0);
    const size_t ulen = v.payload.size() + 8;
    sum += v.proto + static_cast<uint32_t>(ulen);
    udp = frame.subspan(l3 + 40, ulen);
  }
  return punt::csum_fold(punt::csum_partial(udp, sum)) == 0;
}
}  // namespace

TEST(PuntFrame, BuildsAndParsesQinqUdp4WithChecksums) {
  punt::L2 l2{kCpe, kPortMac, 0x88a8, 100, 200};
  const Bytes payload{1, 2, 3, 4, 5};
  Bytes f = punt::build_udp4(l2, kGw, kSubIp, 67, 68, payload);
  ASSERT_EQ(f.size(), 22u + 20 + 8 + 5);
  // Ethernet + both tags, byte-exact.
  EXPECT_EQ(Bytes(f.begin(), f.begin() + 22),
            hex("020000000011 02000000aa01 88a8 0064 8100 00c8 0800"));
  // IPv4 header: 45 00 len 0000 0000 40 11 csum src dst.
  EXPECT_EQ(Bytes(f.begin() + 22, f.begin() + 32), hex("4500 0021 0000 0000 4011"));
  punt::FrameError e;
  EXPECT_EQ(punt::csum_fold(punt::csum_partial({f.data() + 22, 20}, 0)), 0);
  auto v = punt::parse_frame(f, &e);
  ASSERT_TRUE(v) << punt::frame_error_name(e);
  EXPECT_EQ(v->l2.outer_vid, 100);
  EXPECT_EQ(v->l2.inner_vid, 200);
  EXPECT_EQ(v->sport, 67);
  EXPECT_EQ(v->dport, 68);
  EXPECT_EQ(Bytes(v->payload.begin(), v->payload.end()), payload);
  EXPECT_TRUE(udp_checksum_ok(*v, f));
}

TEST(PuntFrame, BuildsUdp6AndIcmp6WithChecksums) {
  punt::L2 l2{kCpe, kPortMac, 0x8100, 5, 6};
  const Ipv6 src = *parse_ipv6("fe80::1"), dst = *parse_ipv6("fe80::211");
  Bytes f = punt::build_udp6(l2, src, dst, 547, 546, Bytes{9, 9, 9});
  punt::FrameError e;
  auto v = punt::parse_frame(f, &e);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->ip_version, 6);
  EXPECT_TRUE(udp_checksum_ok(*v, f));
  // ICMPv6 RA-like body: checksum field filled so the whole sums to zero.
  Bytes body{134, 0, 0xaa, 0xbb, 64, 0xc0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0};
  Bytes g = punt::build_icmp6(l2, src, dst, body);
  auto w = punt::parse_frame(g, &e);
  ASSERT_TRUE(w);
  uint32_t sum = punt::csum_partial({g.data() + 22 + 8, 32}, 0) + 58 + 16;
  EXPECT_EQ(punt::csum_fold(punt::csum_partial(w->payload, sum)), 0);
  EXPECT_EQ(g[22 + 7], 255);  // hop limit of ND
}

TEST(PuntFrame, RefusesWhatIsNotQinqIpUdp) {
  punt::L2 l2{kCpe, kPortMac, 0x88a8, 100, 200};
  Bytes f = punt::build_udp4(l2, kGw, kSubIp, 67, 68, Bytes(10, 0));
  punt::FrameError e;
  Bytes single = f;
  single[16] = 0x08, single[17] = 0x00;  // inner TPID replaced by IPv4
  EXPECT_FALSE(punt::parse_frame(single, &e));
  EXPECT_EQ(e, punt::FrameError::kNotQinq);
  EXPECT_FALSE(punt::parse_frame(std::span(f).first(30), &e));
  EXPECT_EQ(e, punt::FrameError::kTruncated);
  Bytes badsum = f;
  badsum[22 + 10] ^= 1;
  EXPECT_FALSE(punt::parse_frame(badsum, &e));
  EXPECT_EQ(e, punt::FrameError::kBadIpHeader);
  Bytes udplen = f;
  udplen[22 + 20 + 4] = 0xff;
  EXPECT_FALSE(punt::parse_frame(udplen, &e));
  EXPECT_EQ(e, punt::FrameError::kTruncated);
}

// ---- fuzz: deterministic mutations of valid messages under the sanitizer build ----
// XBNG_FUZZ_ITERATIONS sets the count (CI: 20000; the long run, 200K:
// XBNG_FUZZ_ITERATIONS=200000 in the ASan/UBSan build).
TEST(Dhcpv4Fuzz, MutatedPacketsNeverCrash) {
  const char* env = std::getenv("XBNG_FUZZ_ITERATIONS");
  const long n = env ? std::atol(env) : 20000;
  std::mt19937_64 rng(20261201);
  const std::vector<Bytes> seeds = {
      client_msg(kDiscover, Bytes{82, 6, 1, 4, 'p', 'o', 'r', 't', 55, 3, 1, 3, 121}),
      client_msg(kRequest, cat(opt_ip(50, kSubIp), opt_ip(54, kGw)), 0, 0x8000),
      client_msg(kRequest, {}, kSubIp), client_msg(kRelease, opt_ip(54, kGw), kSubIp),
      client_msg(kInform, Bytes{61, 7, 1, 2, 0, 0, 0, 0, 0x11}, kSubIp)};
  long parsed = 0, answered = 0;
  for (long i = 0; i < n; ++i) {
    Bytes b = seeds[static_cast<size_t>(i) % seeds.size()];
    const int muts = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < muts; ++k) {
      switch (rng() % 6) {
        case 0:  // flip a byte (options area mostly)
          b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:  // random byte in the options area
          if (b.size() > 240) b[240 + rng() % (b.size() - 240)] = static_cast<uint8_t>(rng());
          break;
        case 2:  // truncate
          b.resize(rng() % (b.size() + 1));
          break;
        case 3:  // append junk
          for (int j = rng() % 40; j > 0; --j) b.push_back(static_cast<uint8_t>(rng()));
          break;
        case 4:  // overflowing option length
          if (b.size() > 242) b[241 + rng() % (b.size() - 241)] = 0xff;
          break;
        default:  // grow past the maximum
          if (rng() % 16 == 0) b.resize(kMaxLen + rng() % 200, static_cast<uint8_t>(rng()));
          break;
      }
      if (b.empty()) break;
    }
    ParseError e;
    auto m = parse(b, &e);
    if (m) {
      ++parsed;
      Result r = serve(*m, binding(), settings(), kCpe);
      if (r.reply) {
        ++answered;
        Bytes out = build(*r.reply);
        ASSERT_GE(out.size(), 300u);
        ParseError e2;
        EXPECT_FALSE(parse(out, &e2));  // a BOOTREPLY is never parsed as a request
      }
    }
    // The frame parser on the same bytes behind a QinQ/IPv4/UDP header.
    punt::L2 l2{kCpe, kPortMac, 0x88a8, 1, 2};
    Bytes f = punt::build_udp4(l2, 0, 0xffffffff, 68, 67, b);
    f.resize(f.size() - (rng() % 4 == 0 ? rng() % (f.size() / 2) : 0));
    if (rng() % 3 == 0 && f.size() > 30) f[22 + rng() % 28] = static_cast<uint8_t>(rng());
    punt::FrameError fe;
    (void)punt::parse_frame(f, &fe);
  }
  std::printf("dhcpv4 fuzz: %ld mutated packets, %ld parsed, %ld answered\n", n, parsed, answered);
  EXPECT_GT(parsed, 0);
}

// ---- lease table ----------------------------------------------------------------

namespace {
PortResolver one_port() {
  PortResolver r;
  r.access_ifindex = [](std::string_view n) -> std::optional<uint32_t> {
    if (n == "acc0") return 7;
    return std::nullopt;
  };
  r.name = [](uint32_t i) { return i == 7 ? std::string("acc0") : std::string(); };
  return r;
}
}  // namespace

TEST(LeaseTable, BindRenewReleaseExpireWithEvents) {
  EventHub hub;
  auto w = hub.subscribe();
  LeaseTable t(&hub, one_port(), "");
  SubKey k{7, 100, 1};
  t.bind(k, LeaseFamily::kV4, "100.64.1.10", {}, 60, 1000);
  t.bind(k, LeaseFamily::kV4, "100.64.1.10", {}, 60, 1030);  // same address: renewal
  t.bind(k, LeaseFamily::kV6, "2001:db8::10", {"2001:db8:2000::/64"}, 100, 1030);
  auto l = t.get(k, LeaseFamily::kV4);
  ASSERT_TRUE(l);
  EXPECT_TRUE(l->bound);
  EXPECT_EQ(l->expires_unix, 1090u);
  t.release(k, LeaseFamily::kV4, 1040);
  EXPECT_FALSE(t.get(k, LeaseFamily::kV4)->bound);
  EXPECT_EQ(t.expire(1129), 0u);
  EXPECT_EQ(t.expire(1130), 1u);  // v6 ends at 1130
  EXPECT_FALSE(t.get(k, LeaseFamily::kV6)->bound);
  std::vector<AgentEvent> ev;
  ASSERT_TRUE(w->pop(&ev, 100));
  std::vector<EventType> types;
  for (const auto& e : ev) types.push_back(e.type);
  EXPECT_EQ(types, (std::vector<EventType>{EventType::kLeaseBound, EventType::kLeaseRenewed,
                                           EventType::kLeaseBound, EventType::kLeaseReleased,
                                           EventType::kLeaseExpired}));
  EXPECT_EQ(ev[2].lease_family, 6);
  EXPECT_EQ(ev[2].lease_prefixes, std::vector<std::string>{"2001:db8:2000::/64"});
  // Shown on the subscriber as the API returns it.
  v1::Subscriber s;
  s.set_port("acc0");
  s.set_outer_vlan(100);
  s.set_inner_vlan(1);
  fill_leases(t, &s);
  EXPECT_FALSE(s.lease_v4().bound());
  EXPECT_EQ(s.lease_v4().address(), "100.64.1.10");
  EXPECT_EQ(s.lease_v6().prefixes(0), "2001:db8:2000::/64");
}

TEST(LeaseTable, SurvivesARestartThroughTheStateFile) {
  char dir[] = "/tmp/xbng-lease-test-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir));
  const std::string file = std::string(dir) + "/leases.json";
  const uint64_t now = static_cast<uint64_t>(time(nullptr));
  SubKey k{7, 100, 1}, k2{7, 100, 2};
  {
    LeaseTable t(nullptr, one_port(), file);
    t.bind(k, LeaseFamily::kV4, "100.64.1.10", {}, 3600, now);
    t.bind(k2, LeaseFamily::kV6, "", {"2001:db8:2000::/56"}, 1, now - 10);  // already over
    ASSERT_TRUE(t.flush());
  }
  LeaseTable t2(nullptr, one_port(), file);
  auto l = t2.get(k, LeaseFamily::kV4);
  ASSERT_TRUE(l);
  EXPECT_TRUE(l->bound);
  EXPECT_EQ(l->address, "100.64.1.10");
  EXPECT_EQ(l->expires_unix, now + 3600);
  EXPECT_FALSE(t2.get(k2, LeaseFamily::kV6));  // expired while stopped: dropped
  // A file that cannot be parsed is refused, never silently replaced.
  { std::ofstream(file) << "{not json"; }
  EXPECT_THROW(LeaseTable(nullptr, one_port(), file), std::runtime_error);
  unlink(file.c_str());
  rmdir(dir);
}

// The state file is written without a JSON tree: its bytes are what
// nlohmann's dump() gives for the same document (keys in order, compact),
// with a relay's server, several prefixes and both families.
TEST(LeaseTable, StateFileIsTheJsonDumpOfItsDocument) {
  char dir[] = "/tmp/xbng-lease-test-XXXXXX";
  ASSERT_TRUE(mkdtemp(dir));
  const std::string file = std::string(dir) + "/leases.json";
  const uint64_t now = static_cast<uint64_t>(time(nullptr));
  SubKey k{7, 100, 1}, k2{7, 4094, 4000};
  {
    LeaseTable t(nullptr, one_port(), file);
    t.bind(k, LeaseFamily::kV4, "100.64.1.10", {}, 3600, now, "192.0.2.9");
    t.bind(k, LeaseFamily::kV6, "2001:db8:1000::16", {"2001:db8:2000::/56", "2001:db8:3000::/64"},
           7200, now);
    t.bind(k2, LeaseFamily::kV6, "", {"2001:db8:2000:100::/56"}, 60, now);
    ASSERT_TRUE(t.flush());
  }
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc.dump() + "\n", text);
  ASSERT_EQ(doc["leases"].size(), 3u);
  LeaseTable t2(nullptr, one_port(), file);
  auto l = t2.get(k, LeaseFamily::kV4);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->server, "192.0.2.9");
  l = t2.get(k, LeaseFamily::kV6);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->prefixes, (std::vector<std::string>{"2001:db8:2000::/56", "2001:db8:3000::/64"}));
  l = t2.get(k2, LeaseFamily::kV6);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->expires_unix, now + 60);
  unlink(file.c_str());
  rmdir(dir);
}

namespace {
SubscriberSpec spec_of(const SubKey& k, const char* v4, const char* v6, const char* pfx) {
  SubscriberSpec s;
  s.key = k;
  if (v4) {
    s.has_ipv4 = true;
    inet_pton(AF_INET, v4, &s.ipv4);
  }
  if (v6) {
    s.has_ipv6 = true;
    inet_pton(AF_INET6, v6, s.ipv6.data());
  }
  if (pfx) {
    auto p = parse_prefix(pfx);
    EXPECT_TRUE(p) << pfx;
    if (p) s.prefixes.push_back(*p);
  }
  return s;
}

std::vector<std::pair<EventType, int>> lease_events(Watcher* w) {
  std::vector<AgentEvent> ev;
  std::vector<std::pair<EventType, int>> out;
  while (w->pop(&ev, 50))
    for (const auto& e : ev) out.push_back({e.type, e.lease_family});
  return out;
}
}  // namespace

// A lease never outlives its subscriber nor changes owner.
TEST(LeaseTable, SubscriberChangesEndTheLeasesItLoses) {
  EventHub hub;
  auto w = hub.subscribe();
  LeaseTable t(&hub, one_port(), "");
  const SubKey k{7, 100, 31};
  const SubscriberSpec old = spec_of(k, "100.64.1.31", "2001:db8:ff00::1:31", "2001:db8:2000::/64");
  auto bind_both = [&] {
    t.bind(k, LeaseFamily::kV4, "100.64.1.31", {}, 600, 1000);
    t.bind(k, LeaseFamily::kV6, "2001:db8:ff00::1:31", {"2001:db8:2000::/64"}, 600, 1000);
  };
  bind_both();
  lease_events(w.get());
  // An upsert that changes neither address keeps both.
  EXPECT_EQ(t.on_subscriber_change(k, &old, false), 0u);
  EXPECT_TRUE(t.get(k, LeaseFamily::kV4)->bound);
  // Deleted: both end (LEASE_RELEASED each) and are forgotten.
  EXPECT_EQ(t.on_subscriber_change(k, nullptr, false), 2u);
  EXPECT_FALSE(t.get(k, LeaseFamily::kV4));
  EXPECT_FALSE(t.get(k, LeaseFamily::kV6));
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(lease_events(w.get()),
            (std::vector<std::pair<EventType, int>>{{EventType::kLeaseReleased, 4},
                                                    {EventType::kLeaseReleased, 6}}));
  // A new subscriber on the key (even with the same addresses) starts without any.
  bind_both();
  EXPECT_EQ(t.on_subscriber_change(k, &old, true), 2u);
  EXPECT_FALSE(t.get(k, LeaseFamily::kV6));
  // Another IPv4: only the v4 lease ends; a delegated prefix taken away ends the v6 one.
  bind_both();
  const SubscriberSpec moved =
      spec_of(k, "100.64.1.231", "2001:db8:ff00::1:31", "2001:db8:2000::/64");
  EXPECT_EQ(t.on_subscriber_change(k, &moved, false), 1u);
  EXPECT_FALSE(t.get(k, LeaseFamily::kV4));
  EXPECT_TRUE(t.get(k, LeaseFamily::kV6)->bound);
  const SubscriberSpec no_pd = spec_of(k, "100.64.1.231", "2001:db8:ff00::1:31", nullptr);
  EXPECT_EQ(t.on_subscriber_change(k, &no_pd, false), 1u);
  EXPECT_FALSE(t.get(k, LeaseFamily::kV6));
  // confirm(): a bind made from a binding read before a change is undone.
  t.bind(k, LeaseFamily::kV4, "100.64.1.31", {}, 600, 1000);
  t.confirm(k, LeaseFamily::kV4, &moved);
  EXPECT_FALSE(t.get(k, LeaseFamily::kV4));
  t.bind(k, LeaseFamily::kV4, "100.64.1.231", {}, 600, 1000);
  t.confirm(k, LeaseFamily::kV4, &moved);
  EXPECT_TRUE(t.get(k, LeaseFamily::kV4)->bound);
  t.confirm(k, LeaseFamily::kV4, nullptr);
  EXPECT_FALSE(t.get(k, LeaseFamily::kV4));
}

TEST(LeaseTable, StartDropsLeasesNoSubscriberHolds) {
  LeaseTable t(nullptr, one_port(), "");
  const SubKey gone{7, 100, 1}, moved{7, 100, 2}, kept{7, 100, 3};
  t.bind(gone, LeaseFamily::kV4, "100.64.1.1", {}, 600, 1000);
  t.bind(moved, LeaseFamily::kV4, "100.64.1.2", {}, 600, 1000);
  t.bind(moved, LeaseFamily::kV6, "2001:db8::2", {}, 600, 1000);
  t.bind(kept, LeaseFamily::kV4, "100.64.1.3", {}, 600, 1000);
  auto lookup = [&](const SubKey& k, SubscriberSpec* out) {
    if (k.inner_vid == 2)
      *out = spec_of(k, "100.64.1.200", "2001:db8::2", nullptr);
    else if (k.inner_vid == 3)
      *out = spec_of(k, "100.64.1.3", nullptr, nullptr);
    else
      return false;
    return true;
  };
  EXPECT_EQ(t.retain_owned(lookup), 2u);
  EXPECT_FALSE(t.get(gone, LeaseFamily::kV4));
  EXPECT_FALSE(t.get(moved, LeaseFamily::kV4));
  EXPECT_TRUE(t.get(moved, LeaseFamily::kV6)->bound);
  EXPECT_TRUE(t.get(kept, LeaseFamily::kV4)->bound);
  EXPECT_EQ(t.size(), 2u);
}
