// DHCPv6: parse + serve every input against three bindings and two
// settings; a reply must be a well-formed DHCPv6 message for the same xid.
#include <cstring>
#include <string>

#include "fuzz.h"
#include "bringup/dhcpv6/server.h"

namespace xbng::fuzz {
namespace {

using namespace xbng::agent;
using namespace xbng::agent::dhcpv6;

std::vector<Bytes> seeds() {
  const char* cid = "0001 000e 0001000132a0e9c5020000001001";
  const char* sid = "0002 0012 0004 00112233445566778899aabbccddeeff";
  const char* na =
      "0003 0028 00001001 00000708 00000b40 0005 0018 20010db8100000000000000000000016 "
      "00000e10 00001c20";
  const char* pd =
      "0019 0029 00001001 00000708 00000b40 001a 0019 00000e10 00001c20 38 "
      "20010db8200000000000000000000000";
  auto msg = [&](const char* type, bool with_sid, bool ias) {
    std::string s =
        std::string(type) + " 123456 " + cid + (with_sid ? std::string(" ") + sid : "") +
        " 0008 0002 0000 0006 0004 0017 0018" + (ias ? std::string(" ") + na + " " + pd : "");
    return from_hex(s.c_str());
  };
  return {
      // captured: dhclient -6 -P -N solicit, dhclient -6 -S, dhcpcd solicit
      from_hex("015927ee0001000e0001000132a0e9c502000000100100060008001700180027001f00080002000000"
               "03000c0000100100000e10000015180019000c0000100100000e1000001518"),
      from_hex("0b7b23c60001000a0003000102000000100100060008001700180027001f000800020000"),
      from_hex("016bbfe50001000e0001000132a0e9cc0200000010010003000c000000010000000000000000001900"
               "0c0000000200000000000000000006000400520053000800020000000e00000010003c00009f080036"
               "6468637063642d392e342e313a4c696e75782d362e31382e34342d66632d763738323a7838365f3634"
               "3a41757468656e746963414d44"),
      msg("01", false, true),
      msg("03", true, true),
      msg("04", false, true),
      msg("05", true, true),
      msg("06", false, true),
      msg("08", true, true),
      msg("09", true, true),
      msg("0b", false, false),
      msg("0b", true, false),
  };
}

// Walks [p, end) as DHCPv6 options; true when every length fits exactly.
bool well_formed(const uint8_t* p, const uint8_t* end) {
  while (p < end) {
    if (end - p < 4) return false;
    size_t len = size_t(p[2]) << 8 | p[3];
    p += 4;
    if (len > size_t(end - p)) return false;
    p += len;
  }
  return true;
}

size_t g_kinds[kNumKinds], g_errors[kNumParseErrors];

void report() {
  std::printf("  outcomes:");
  for (size_t i = 0; i < kNumKinds; ++i)
    if (g_kinds[i]) std::printf(" %s=%zu", std::string(kind_name(Kind(i))).c_str(), g_kinds[i]);
  std::printf("\n  parse errors:");
  for (size_t i = 0; i < kNumParseErrors; ++i)
    if (g_errors[i])
      std::printf(" %s=%zu", std::string(parse_error_name(ParseError(i))).c_str(), g_errors[i]);
  std::printf("\n");
}

void run_one(const uint8_t* data, size_t size) {
  static Settings settings = [] {
    Settings s;
    s.server_duid.assign(from_hex("000400112233445566778899aabbccddeeff"));
    s.dns_servers = {*parse_ipv6("2001:db8::53")};
    return s;
  }();
  static const std::vector<Prefix> prefixes = {*parse_prefix("2001:db8:2000::/56"),
                                               *parse_prefix("2001:db8:4000::/48"),
                                               *parse_prefix("198.51.100.0/28")};
  static const Ipv6 addr = *parse_ipv6("2001:db8:1000::16");
  const Binding bindings[] = {Binding{true, addr, prefixes}, Binding{}, Binding{true, addr, {}}};
  static Outcome out;
  // The parser must only read what it is given: hand it an exact-size copy
  // so ASan sees any read past the end.
  Bytes copy(data, data + size);
  for (const Binding& b : bindings) {
    for (bool rapid : {true, false}) {
      settings.rapid_commit = rapid;
      serve(copy, b, settings, 1000, &out);
      ++g_kinds[size_t(out.kind)];
      ++g_errors[size_t(out.parse_error)];
      if (out.kind == Kind::kMalformed) {
        XBNG_FUZZ_CHECK(!out.has_reply && out.parse_error != ParseError::kOk);
        continue;
      }
      XBNG_FUZZ_CHECK(size >= 4);
      if (!out.has_reply) continue;
      XBNG_FUZZ_CHECK(out.reply.size() >= 4 && out.reply.size() <= kMaxReply);
      XBNG_FUZZ_CHECK(out.reply[0] == 2 || out.reply[0] == 7);
      XBNG_FUZZ_CHECK(std::memcmp(out.reply.data() + 1, data + 1, 3) == 0);
      XBNG_FUZZ_CHECK(well_formed(out.reply.data() + 4, out.reply.data() + out.reply.size()));
      if (out.lease.action == LeaseChange::Action::kBound)
        XBNG_FUZZ_CHECK(out.reply[0] == 7 && (out.lease.na || out.lease.pd));
    }
  }
}

}  // namespace

const FuzzTarget kDhcpv6Target{"dhcpv6", seeds, run_one, report};

}  // namespace xbng::fuzz
