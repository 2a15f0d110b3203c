// DHCPv4: every input goes through the punt frame parser
// (inside a QinQ/IPv4/UDP frame, then raw as a frame) and the DHCPv4 parser;
// what parses is served against a binding with and without MAC, and every
// reply must build, be a BOOTREPLY of at least 300 bytes that the request
// parser refuses, and go where RFC 2131 says.
#include <cstring>
#include <string>

#include "fuzz.h"
#include "bringup/dhcpv4/message.h"
#include "bringup/dhcpv4/server.h"
#include "bringup/punt/frame.h"

namespace xbng::fuzz {
namespace {

using namespace xbng::agent;
namespace v4 = xbng::agent::dhcpv4;

const Mac kCpe{0x02, 0x00, 0x00, 0x00, 0x00, 0x11};
const Mac kPort{0x02, 0x00, 0x00, 0x00, 0xaa, 0x01};

// A client message: fixed header, cookie, options given as hex.
Bytes msg(uint8_t type, const char* opts_hex, uint32_t ciaddr_be = 0, uint16_t flags = 0) {
  Bytes b(236, 0);
  b[0] = 1, b[1] = 1, b[2] = 6;
  b[4] = 0x12, b[5] = 0x34, b[6] = 0x56, b[7] = 0x78;
  b[10] = static_cast<uint8_t>(flags >> 8), b[11] = static_cast<uint8_t>(flags);
  std::memcpy(&b[12], &ciaddr_be, 4);
  std::memcpy(&b[28], kCpe.data(), 6);
  for (uint8_t c : {0x63, 0x82, 0x53, 0x63, 53, 1, 0}) b.push_back(c);
  b.back() = type;
  Bytes o = from_hex(opts_hex);
  b.insert(b.end(), o.begin(), o.end());
  b.push_back(255);
  return b;
}

const uint32_t kSub = 0x0a014064;  // 100.64.1.10 in network order (LE host)
const uint32_t kGw = 0x01004064;   // 100.64.0.1

std::vector<Bytes> seeds() {
  return {
      // dhclient-like DISCOVER: client id, hostname, parameter list, option 82
      msg(v4::kDiscover, "3d0701020000000011 0c03637065 370801031c060f77797a 5206010470727420"),
      msg(v4::kRequest, "3204 6440010a 3604 64400001 370401037906", 0, 0x8000),
      msg(v4::kRequest, "3204 6440010a"),
      msg(v4::kRequest, "", kSub),
      msg(v4::kRelease, "3604 64400001", kSub),
      msg(v4::kDecline, "3204 6440010a 3604 64400001"),
      msg(v4::kInform, "3703 010306", kSub),
  };
}

size_t g_errors[16], g_outcomes[16];

void report() {
  std::printf("  parse:");
  for (int i = 0; i <= static_cast<int>(v4::ParseError::kNoEnd); ++i)
    if (g_errors[i])
      std::printf(" %s=%zu", v4::parse_error_name(static_cast<v4::ParseError>(i)), g_errors[i]);
  std::printf("\n  outcomes:");
  for (int i = 0; i <= static_cast<int>(v4::Outcome::kIgnored); ++i)
    if (g_outcomes[i])
      std::printf(" %s=%zu", v4::outcome_name(static_cast<v4::Outcome>(i)), g_outcomes[i]);
  std::printf("\n");
}

void check_reply(const v4::Message& req, const v4::Result& r) {
  if (!r.reply) return;
  Bytes out = v4::build(*r.reply);
  XBNG_FUZZ_CHECK(out.size() >= 300);
  XBNG_FUZZ_CHECK(out[0] == 2);
  XBNG_FUZZ_CHECK(std::memcmp(&out[28], req.chaddr.data(), 16) == 0);
  v4::ParseError e;
  XBNG_FUZZ_CHECK(!v4::parse(out, &e));  // never mistaken for a request
  XBNG_FUZZ_CHECK(r.broadcast || r.dst_ip != 0);
  // The reply fits a frame and the frame parses back to the same payload.
  punt::L2 l2{kCpe, kPort, 0x88a8, 100, 200};
  Bytes f = punt::build_udp4(l2, kGw, r.broadcast ? 0xffffffffu : r.dst_ip, 67, 68, out);
  punt::FrameError fe;
  auto v = punt::parse_frame(f, &fe);
  XBNG_FUZZ_CHECK(v && v->payload.size() == out.size());
}

void run_one(const uint8_t* data, size_t size) {
  Bytes copy(data, data + size);
  // Raw bytes as a frame (the punt record's frame).
  punt::FrameError fe;
  (void)punt::parse_frame(copy, &fe);
  // As the UDP payload of a DHCP frame.
  punt::L2 l2{kCpe, kPort, 0x88a8, 100, 200};
  if (size <= 1500) {
    Bytes f = punt::build_udp4(l2, 0, 0xffffffffu, 68, 67, copy);
    auto v = punt::parse_frame(f, &fe);
    XBNG_FUZZ_CHECK(v && v->payload.size() == size);
  }
  v4::ParseError e;
  auto m = v4::parse(copy, &e);
  ++g_errors[static_cast<int>(e)];
  if (!m) return;
  XBNG_FUZZ_CHECK(size >= v4::kMinLen && size <= v4::kMaxLen);
  v4::Settings s;
  s.gateway = kGw;
  s.dns = {0x350200c0};
  for (const auto& b :
       {v4::Binding{kSub, kCpe}, v4::Binding{kSub, std::nullopt}, v4::Binding{0, std::nullopt}}) {
    v4::Result r = v4::serve(*m, b, s, kCpe);
    ++g_outcomes[static_cast<int>(r.outcome)];
    check_reply(*m, r);
  }
  s.prefix_len = 22;
  check_reply(*m, v4::serve(*m, v4::Binding{kSub, kCpe}, s, kCpe));
}

}  // namespace

const FuzzTarget kDhcpv4Target{"dhcpv4", seeds, run_one, report};

}  // namespace xbng::fuzz
