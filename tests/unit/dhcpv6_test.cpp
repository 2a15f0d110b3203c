// DHCPv6 parser, server and DUID: byte-exact replies against RFC 8415 wire
// formats, and real client messages captured from dhclient (isc-dhcp-client
// 4.4, `dhclient -6 -P -N` and `-6 -S`) and dhcpcd 9.4 (IA_NA + IA_PD +
// rapid commit) in a throwaway namespace pair (tests/unit/capture_vectors.sh).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "proto_test_util.h"
#include "bringup/dhcpv6/duid.h"
#include "bringup/dhcpv6/server.h"

using namespace xbng::agent;
using namespace xbng::agent::dhcpv6;
using xbng::test::Bytes;
using xbng::test::bytes_eq;
using xbng::test::hex;

namespace {

// --- captured client messages (UDP payloads) -------------------------------
// dhclient -6 -P -N: SOLICIT, client id DUID-LLT, ORO (23 24 39 31),
// elapsed 0, IA_NA iaid 00001001 (T1 3600 T2 5400), IA_PD iaid 00001001.
const char* kDhclientSolicit =
    "01 5927ee"
    "0001 000e 0001000132a0e9c5020000001001"
    "0006 0008 0017 0018 0027 001f"
    "0008 0002 0000"
    "0003 000c 00001001 00000e10 00001518"
    "0019 000c 00001001 00000e10 00001518";
// dhclient -6 -S: INFORMATION-REQUEST, client id DUID-LL.
const char* kDhclientInfoRequest =
    "0b 7b23c6"
    "0001 000a 00030001020000001001"
    "0006 0008 0017 0018 0027 001f"
    "0008 0002 0000";
// dhcpcd 9.4 (ia_na 1, ia_pd 2, option rapid_commit): SOLICIT with IA_NA
// iaid 1, IA_PD iaid 2, ORO (82 83), elapsed, RAPID COMMIT, vendor class.
const char* kDhcpcdSolicit =
    "01 6bbfe5"
    "0001 000e 0001000132a0e9cc020000001001"
    "0003 000c 00000001 00000000 00000000"
    "0019 000c 00000002 00000000 00000000"
    "0006 0004 0052 0053"
    "0008 0002 0000"
    "000e 0000"
    "0010 003c 00009f08 0036 6468637063642d392e342e313a4c696e75782d362e31382e34342d66632d7637"
    "38323a7838365f36343a41757468656e746963414d44";

const char* kServerDuid = "0004 00112233445566778899aabbccddeeff";
const char* kServerIdOpt = "0002 0012 0004 00112233445566778899aabbccddeeff";
const char* kAddr = "20010db8100000000000000000000016";    // 2001:db8:1000::16
const char* kPrefix = "20010db8200000000000000000000000";  // 2001:db8:2000::/56
const char* kDnsOpt = "0017 0010 20010db8000000000000000000000053";
// Lifetimes: preferred 3600 (0e10), valid 7200 (1c20), T1 1800 (0708), T2 2880 (0b40).

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
Bytes str(std::string_view s) { return Bytes(s.begin(), s.end()); }
Bytes u16(uint16_t v) { return {static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)}; }
Bytes opt(uint16_t code, const Bytes& body) {
  return cat({u16(code), u16(static_cast<uint16_t>(body.size())), body});
}
Bytes status(uint16_t code, std::string_view text) { return opt(13, cat({u16(code), str(text)})); }

class Dhcpv6 : public ::testing::Test {
 protected:
  void SetUp() override {
    settings.server_duid.assign(hex(kServerDuid));
    settings.dns_servers.push_back(*parse_ipv6("2001:db8::53"));
    addr = *parse_ipv6("2001:db8:1000::16");
    prefixes.push_back(*parse_prefix("2001:db8:2000::/56"));
    binding = Binding{true, addr, prefixes};
  }
  Outcome run(const Bytes& msg, const Binding& b) {
    Outcome o;
    serve(msg, b, settings, kNow, &o);
    return o;
  }
  Outcome run(const Bytes& msg) { return run(msg, binding); }

  static constexpr uint64_t kNow = 1'000'000;
  Settings settings;
  Ipv6 addr;
  std::vector<Prefix> prefixes;
  Binding binding;
};

Bytes ia_na_full(const char* iaid) {
  return hex(std::string("0003 0028") + iaid + "00000708 00000b40" + "0005 0018" + kAddr +
             "00000e10 00001c20");
}
Bytes ia_pd_full(const char* iaid) {
  return hex(std::string("0019 0029") + iaid + "00000708 00000b40" +
             "001a 0019 00000e10 00001c20 38" + kPrefix);
}

// --- parser ---------------------------------------------------------------

TEST_F(Dhcpv6, ParsesDhclientSolicit) {
  Message m;
  ASSERT_EQ(parse(hex(kDhclientSolicit), &m), ParseError::kOk);
  EXPECT_EQ(m.type, MsgType::kSolicit);
  EXPECT_EQ(m.xid, 0x5927eeu);
  ASSERT_TRUE(m.has_client_id);
  EXPECT_EQ(m.client_id.len, 14);
  EXPECT_FALSE(m.has_server_id);
  EXPECT_FALSE(m.rapid_commit);
  ASSERT_EQ(m.num_ias, 2);
  EXPECT_EQ(m.ias[0].type, kOptIaNa);
  EXPECT_EQ(m.ias[0].iaid, 0x1001u);
  EXPECT_EQ(m.ias[0].t1, 3600u);
  EXPECT_EQ(m.ias[0].t2, 5400u);
  EXPECT_EQ(m.ias[1].type, kOptIaPd);
  EXPECT_TRUE(m.requested(kOptDnsServers));
  EXPECT_TRUE(m.requested(kOptDomainList));
  EXPECT_FALSE(m.requested(kOptSolMaxRt));
  EXPECT_TRUE(m.has_elapsed_time);
}

TEST_F(Dhcpv6, ParsesDhcpcdSolicitWithRapidCommit) {
  Message m;
  ASSERT_EQ(parse(hex(kDhcpcdSolicit), &m), ParseError::kOk);
  EXPECT_TRUE(m.rapid_commit);
  ASSERT_EQ(m.num_ias, 2);
  EXPECT_EQ(m.ias[0].iaid, 1u);
  EXPECT_EQ(m.ias[1].iaid, 2u);
  EXPECT_TRUE(m.requested(kOptSolMaxRt));
}

TEST_F(Dhcpv6, ParsesInformationRequest) {
  Message m;
  ASSERT_EQ(parse(hex(kDhclientInfoRequest), &m), ParseError::kOk);
  EXPECT_EQ(m.type, MsgType::kInformationRequest);
  EXPECT_EQ(m.num_ias, 0);
}

TEST_F(Dhcpv6, ParsesIaEntries) {
  Bytes renew = cat({hex("05 000102"), hex("0001 000a 00030001020000001001"), hex(kServerIdOpt),
                     hex(std::string("0003 0028 00000001 00000000 00000000 0005 0018") + kAddr +
                         "00000e10 00001c20"),
                     hex(std::string("0019 0029 00000002 00000000 00000000 001a 0019 00000e10 "
                                     "00001c20 38") +
                         kPrefix)});
  Message m;
  ASSERT_EQ(parse(renew, &m), ParseError::kOk);
  ASSERT_EQ(m.num_ias, 2);
  ASSERT_EQ(m.ias[0].num_entries, 1);
  EXPECT_EQ(m.ias[0].entries[0].addr, addr);
  EXPECT_EQ(m.ias[0].entries[0].valid, 7200u);
  ASSERT_EQ(m.ias[1].num_entries, 1);
  EXPECT_EQ(m.ias[1].entries[0].prefix_len, 56);
  EXPECT_EQ(m.ias[1].entries[0].preferred, 3600u);
}

struct BadCase {
  const char* what;
  Bytes msg;
  ParseError want;
};

TEST_F(Dhcpv6, RejectsMalformedWithTheReason) {
  const Bytes cid = hex("0001 000a 00030001020000001001");
  const Bytes sid = hex(kServerIdOpt);
  const Bytes na = hex("0003 000c 00000001 00000000 00000000");
  std::vector<BadCase> cases = {
      {"empty", {}, ParseError::kTooShort},
      {"3 bytes", hex("01 0000"), ParseError::kTooShort},
      {"oversized", cat({hex("01 000001"), cid, opt(16, Bytes(1500, 0))}), ParseError::kOversized},
      {"advertise from a client", cat({hex("02 000001"), cid}), ParseError::kServerMessage},
      {"reply from a client", cat({hex("07 000001"), cid}), ParseError::kServerMessage},
      {"reconfigure", cat({hex("0a 000001"), cid}), ParseError::kServerMessage},
      {"relay-repl", cat({hex("0d 000001"), cid}), ParseError::kServerMessage},
      {"relay-forw", hex("0c 00 00000000000000000000000000000000 00000000000000000000000000000000"),
       ParseError::kRelayMessage},
      {"relay message option", cat({hex("01 000001"), cid, hex("0009 0004 01000001")}),
       ParseError::kRelayMessage},
      {"type 0", cat({hex("00 000001"), cid}), ParseError::kUnknownType},
      {"type 14 (leasequery)", cat({hex("0e 000001"), cid}), ParseError::kUnknownType},
      {"type 255", cat({hex("ff 000001"), cid}), ParseError::kUnknownType},
      {"3 trailing bytes", cat({hex("01 000001"), cid, hex("000100")}),
       ParseError::kTruncatedOption},
      {"option length past end", cat({hex("01 000001"), cid, hex("0003 0010 00000001")}),
       ParseError::kOptionOverflow},
      {"option length 0xffff", cat({hex("01 000001"), hex("0001 ffff 0003")}),
       ParseError::kOptionOverflow},
      {"IA_NA shorter than 12", cat({hex("01 000001"), cid, hex("0003 0008 00000001 00000000")}),
       ParseError::kBadOptionLength},
      {"IA_TA shorter than 4", cat({hex("01 000001"), cid, hex("0004 0002 0000")}),
       ParseError::kBadOptionLength},
      {"IAADDR overflowing its IA",
       cat({hex("01 000001"), cid, hex("0003 0014 00000001 00000000 00000000 0005 0018 00000000")}),
       ParseError::kOptionOverflow},
      {"IAADDR shorter than 24",
       cat({hex("01 000001"), cid,
            hex("0003 0018 00000001 00000000 00000000 0005 0008 "
                "0000000000000000")}),
       ParseError::kBadIaEntry},
      {"IAPREFIX in IA_NA",
       cat({hex("01 000001"), cid,
            hex("0003 0029 00000001 00000000 00000000 001a 0019 00000000 "
                "00000000 40 20010db8000000000000000000000000")}),
       ParseError::kBadIaEntry},
      {"IAPREFIX length 129",
       cat({hex("01 000001"), cid,
            hex("0019 0029 00000001 00000000 00000000 001a 0019 00000000 "
                "00000000 81 20010db8000000000000000000000000")}),
       ParseError::kBadIaEntry},
      {"IAADDR sub-option truncated",
       cat({hex("01 000001"), cid, hex("0003 002a 00000001 00000000 00000000 0005 001a"),
            hex(kAddr), hex("00000000 00000000 000d")}),
       ParseError::kTruncatedOption},
      {"elapsed time of 3 bytes", cat({hex("01 000001"), cid, hex("0008 0003 000000")}),
       ParseError::kBadOptionLength},
      {"rapid commit with data", cat({hex("01 000001"), cid, hex("000e 0001 00")}),
       ParseError::kBadOptionLength},
      {"odd ORO", cat({hex("01 000001"), cid, hex("0006 0003 001700")}),
       ParseError::kBadOptionLength},
      {"two client ids", cat({hex("01 000001"), cid, cid}), ParseError::kDuplicateOption},
      {"two server ids", cat({hex("03 000001"), cid, sid, sid}), ParseError::kDuplicateOption},
      {"two OROs", cat({hex("01 000001"), cid, hex("0006 0002 0017 0006 0002 0017")}),
       ParseError::kDuplicateOption},
      {"client id of 2 bytes", cat({hex("01 000001"), hex("0001 0002 0003")}),
       ParseError::kBadDuid},
      {"client id of 131 bytes", cat({hex("01 000001"), opt(1, Bytes(131, 1))}),
       ParseError::kBadDuid},
      {"solicit without client id", cat({hex("01 000001"), na}), ParseError::kMissingClientId},
      {"rebind without client id", cat({hex("06 000001"), na}), ParseError::kMissingClientId},
      {"solicit with server id", cat({hex("01 000001"), cid, sid, na}),
       ParseError::kUnexpectedServerId},
      {"confirm with server id", cat({hex("04 000001"), cid, sid, na}),
       ParseError::kUnexpectedServerId},
      {"rebind with server id", cat({hex("06 000001"), cid, sid, na}),
       ParseError::kUnexpectedServerId},
      {"request without server id", cat({hex("03 000001"), cid, na}), ParseError::kMissingServerId},
      {"renew without server id", cat({hex("05 000001"), cid, na}), ParseError::kMissingServerId},
      {"release without server id", cat({hex("08 000001"), cid, na}), ParseError::kMissingServerId},
      {"decline without server id", cat({hex("09 000001"), cid, na}), ParseError::kMissingServerId},
      {"information-request with IA", cat({hex("0b 000001"), cid, na}), ParseError::kUnexpectedIa},
      {"9 IAs",
       cat({hex("01 000001"), cid, hex("0003 000c 00000001 00000000 00000000"),
            hex("0003 000c 00000002 00000000 00000000"),
            hex("0003 000c 00000003 00000000 00000000"),
            hex("0003 000c 00000004 00000000 00000000"),
            hex("0003 000c 00000005 00000000 00000000"),
            hex("0003 000c 00000006 00000000 00000000"),
            hex("0003 000c 00000007 00000000 00000000"),
            hex("0003 000c 00000008 00000000 00000000"),
            hex("0003 000c 00000009 00000000 00000000")}),
       ParseError::kTooManyIas},
      {"two IA_NA with one IAID", cat({hex("01 000001"), cid, na, na}), ParseError::kDuplicateIaid},
  };
  {
    Bytes many = hex("00000001 00000000 00000000");
    for (int i = 0; i < 9; ++i)
      many = cat({many, hex("0005 0018"), hex(kAddr), hex("00000000 00000000")});
    cases.push_back({"9 IAADDR in one IA", cat({hex("01 000001"), cid, opt(3, many)}),
                     ParseError::kTooManyIaEntries});
  }
  for (const auto& c : cases) {
    Message m;
    EXPECT_EQ(parse(c.msg, &m), c.want) << c.what << ": got " << parse_error_name(parse(c.msg, &m))
                                        << ", want " << parse_error_name(c.want);
    Outcome o = run(c.msg);
    EXPECT_EQ(o.kind, Kind::kMalformed) << c.what;
    EXPECT_EQ(o.parse_error, c.want) << c.what;
    EXPECT_FALSE(o.has_reply) << c.what;
    EXPECT_EQ(o.lease.action, LeaseChange::Action::kNone) << c.what;
  }
}

TEST_F(Dhcpv6, SkipsUnknownOptions) {
  Bytes m = cat({hex(kDhclientSolicit), hex("ff00 0003 010203"), hex("0010 0000")});
  Message msg;
  EXPECT_EQ(parse(m, &msg), ParseError::kOk);
}

TEST_F(Dhcpv6, EveryReasonHasAName) {
  for (size_t i = 0; i < kNumParseErrors; ++i)
    EXPECT_NE(parse_error_name(static_cast<ParseError>(i)), "unknown") << i;
  for (size_t i = 0; i < kNumKinds; ++i) EXPECT_NE(kind_name(static_cast<Kind>(i)), "unknown") << i;
}

// --- server ---------------------------------------------------------------

TEST_F(Dhcpv6, SolicitGetsAdvertiseWithAddressPrefixAndDns) {
  Outcome o = run(hex(kDhclientSolicit));
  EXPECT_EQ(o.kind, Kind::kAdvertise);
  ASSERT_TRUE(o.has_reply);
  Bytes want = cat({hex("02 5927ee"), hex(kServerIdOpt),
                    hex("0001 000e 0001000132a0e9c5020000001001"),  // client id echoed
                    hex("0007 0001 ff"),                            // preference 255
                    ia_na_full("00001001"), ia_pd_full("00001001"), hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kNone);  // ADVERTISE binds nothing
}

TEST_F(Dhcpv6, RapidCommitSolicitGetsReplyAndBinds) {
  Outcome o = run(hex(kDhcpcdSolicit));
  EXPECT_EQ(o.kind, Kind::kReplyRapidCommit);
  Bytes want =
      cat({hex("07 6bbfe5"), hex(kServerIdOpt), hex("0001 000e 0001000132a0e9cc020000001001"),
           hex("000e 0000"), ia_na_full("00000001"), ia_pd_full("00000002"), hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kBound);
  EXPECT_TRUE(o.lease.na);
  EXPECT_TRUE(o.lease.pd);
  EXPECT_EQ(o.lease.na_iaid, 1u);
  EXPECT_EQ(o.lease.pd_iaid, 2u);
  EXPECT_EQ(o.lease.na_valid_until, kNow + 7200);
  EXPECT_EQ(o.lease.pd_preferred_until, kNow + 3600);
}

TEST_F(Dhcpv6, RapidCommitOffInSettingsGivesAdvertise) {
  settings.rapid_commit = false;
  settings.send_preference = false;
  Outcome o = run(hex(kDhcpcdSolicit));
  EXPECT_EQ(o.kind, Kind::kAdvertise);
  Bytes want =
      cat({hex("02 6bbfe5"), hex(kServerIdOpt), hex("0001 000e 0001000132a0e9cc020000001001"),
           ia_na_full("00000001"), ia_pd_full("00000002"), hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kNone);
}

Bytes request_for(uint8_t type, const Bytes& ias, bool with_server_id = true) {
  return cat({Bytes{type, 0xab, 0xcd, 0xef}, hex("0001 000e 0001000132a0e9c5020000001001"),
              with_server_id ? hex(kServerIdOpt) : Bytes{}, hex("0008 0002 0000"), ias});
}

TEST_F(Dhcpv6, RequestGetsReplyAndBinds) {
  // dhclient copies the advertised IAs into its REQUEST.
  Outcome o = run(request_for(3, cat({ia_na_full("00001001"), ia_pd_full("00001001")})));
  EXPECT_EQ(o.kind, Kind::kReplyRequest);
  Bytes want =
      cat({hex("07 abcdef"), hex(kServerIdOpt), hex("0001 000e 0001000132a0e9c5020000001001"),
           ia_na_full("00001001"), ia_pd_full("00001001"), hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kBound);
  EXPECT_TRUE(o.lease.na && o.lease.pd);
}

TEST_F(Dhcpv6, MessagesForAnotherServerAreIgnored) {
  Bytes other = hex("0001 000e 0001000132a0e9c5020000009999");
  for (uint8_t type : {3, 5, 8, 9}) {
    Bytes m = cat({Bytes{type, 0, 0, 1}, hex("0001 000e 0001000132a0e9c5020000001001"),
                   opt(2, Bytes(other.begin() + 4, other.end())), ia_na_full("00001001")});
    Outcome o = run(m);
    EXPECT_EQ(o.kind, Kind::kIgnoredOtherServer) << int(type);
    EXPECT_FALSE(o.has_reply);
    EXPECT_EQ(o.lease.action, LeaseChange::Action::kNone);
  }
  Bytes info = cat({hex("0b 000001"), opt(2, hex("0003 0001 020000009999"))});
  EXPECT_EQ(run(info).kind, Kind::kIgnoredOtherServer);
}

TEST_F(Dhcpv6, RenewExtendsTheLease) {
  Outcome o = run(request_for(5, cat({ia_na_full("00001001"), ia_pd_full("00001001")})), binding);
  EXPECT_EQ(o.kind, Kind::kReplyRenew);
  Bytes want =
      cat({hex("07 abcdef"), hex(kServerIdOpt), hex("0001 000e 0001000132a0e9c5020000001001"),
           ia_na_full("00001001"), ia_pd_full("00001001"), hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kBound);
}

TEST_F(Dhcpv6, RenewAfterReprovisioningDropsTheOldLease) {
  // The client holds ::16 and 2001:db8:2000::/56; the subscriber is now
  // ::17 and 2001:db8:3000::/56. Old ones come back with lifetimes 0.
  Ipv6 new_addr = *parse_ipv6("2001:db8:1000::17");
  std::vector<Prefix> new_pfx{*parse_prefix("2001:db8:3000::/56")};
  Outcome o = run(request_for(5, cat({ia_na_full("00001001"), ia_pd_full("00001001")})),
                  Binding{true, new_addr, new_pfx});
  EXPECT_EQ(o.kind, Kind::kReplyRenew);
  Bytes want =
      cat({hex("07 abcdef"), hex(kServerIdOpt), hex("0001 000e 0001000132a0e9c5020000001001"),
           hex(std::string("0003 0044 00001001 00000708 00000b40"
                           "0005 0018") +
               kAddr +
               "00000000 00000000"
               "0005 0018 20010db8100000000000000000000017 00000e10 00001c20"),
           hex(std::string("0019 0046 00001001 00000708 00000b40"
                           "001a 0019 00000000 00000000 38") +
               kPrefix + "001a 0019 00000e10 00001c20 38 20010db8300000000000000000000000"),
           hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
}

TEST_F(Dhcpv6, RenewWithoutBindingGetsNoBinding) {
  Outcome o = run(request_for(5, ia_na_full("00001001")), Binding{});
  EXPECT_EQ(o.kind, Kind::kRefusedNoBinding);
  Bytes ia =
      cat({hex(std::string("00001001 00000000 00000000 0005 0018") + kAddr + "00000000 00000000"),
           status(3, "no binding for this IA")});
  Bytes want = cat({hex("07 abcdef"), hex(kServerIdOpt),
                    hex("0001 000e 0001000132a0e9c5020000001001"), opt(3, ia), hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kNone);
}

TEST_F(Dhcpv6, RebindGetsReply) {
  Bytes m = request_for(6, cat({ia_na_full("00001001"), ia_pd_full("00001001")}), false);
  Outcome o = run(m);
  EXPECT_EQ(o.kind, Kind::kReplyRebind);
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kBound);
  Bytes want =
      cat({hex("07 abcdef"), hex(kServerIdOpt), hex("0001 000e 0001000132a0e9c5020000001001"),
           ia_na_full("00001001"), ia_pd_full("00001001"), hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
}

TEST_F(Dhcpv6, SubscriberWithoutIpv6GetsNoAddrsAvail) {
  Outcome o = run(hex(kDhcpcdSolicit), Binding{});
  EXPECT_EQ(o.kind, Kind::kRefusedNoBinding);  // counted as refused...
  ASSERT_TRUE(o.has_reply);                    // ...but answered (RFC 8415 §18.3.9)
  Bytes want =
      cat({hex("02 6bbfe5"), hex(kServerIdOpt), hex("0001 000e 0001000132a0e9cc020000001001"),
           hex("0007 0001 ff"), status(2, "no address provisioned for this subscriber"),
           opt(3, cat({hex("00000001 00000000 00000000"),
                       status(2, "no address provisioned for this subscriber")})),
           opt(25, cat({hex("00000002 00000000 00000000"),
                        status(6, "no prefix provisioned for this subscriber")})),
           hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));  // ADVERTISE, not a rapid-commit REPLY
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kNone);
}

TEST_F(Dhcpv6, AddressWithoutPrefixGivesNoPrefixAvail) {
  std::vector<Prefix> v4only{*parse_prefix("198.51.100.0/28")};  // IPv4 routed prefix: skipped
  Outcome o = run(hex(kDhcpcdSolicit), Binding{true, addr, v4only});
  EXPECT_EQ(o.kind, Kind::kReplyRapidCommit);
  Bytes want =
      cat({hex("07 6bbfe5"), hex(kServerIdOpt), hex("0001 000e 0001000132a0e9cc020000001001"),
           hex("000e 0000"), ia_na_full("00000001"),
           opt(25, cat({hex("00000002 00000000 00000000"),
                        status(6, "no prefix provisioned for this subscriber")})),
           hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_TRUE(o.lease.na);
  EXPECT_FALSE(o.lease.pd);
}

TEST_F(Dhcpv6, SeveralPrefixesInOneIaPdAndASecondIaPdGetsNone) {
  std::vector<Prefix> two{*parse_prefix("2001:db8:2000::/56"), *parse_prefix("2001:db8:4000::/48")};
  Bytes m = cat({hex("01 000007 0001 000a 00030001020000001001"),
                 hex("0019 000c 00000001 00000000 00000000"),
                 hex("0019 000c 00000002 00000000 00000000")});
  Outcome o = run(m, Binding{false, {}, two});
  EXPECT_EQ(o.kind, Kind::kAdvertise);
  Bytes want =
      cat({hex("02 000007"), hex(kServerIdOpt), hex("0001 000a 00030001020000001001"),
           hex("0007 0001 ff"),
           hex(std::string("0019 0046 00000001 00000708 00000b40"
                           "001a 0019 00000e10 00001c20 38") +
               kPrefix + "001a 0019 00000e10 00001c20 30 20010db8400000000000000000000000"),
           opt(25, cat({hex("00000002 00000000 00000000"),
                        status(6, "no prefix provisioned for this subscriber")})),
           hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
}

TEST_F(Dhcpv6, AtMostSixteenPrefixesFitOneReply) {
  std::vector<Prefix> many;
  for (int i = 0; i < 40; ++i)
    many.push_back(*parse_prefix("2001:db8:" + std::to_string(2000 + i) + "::/48"));
  Outcome o = run(hex(kDhcpcdSolicit), Binding{true, addr, many});
  ASSERT_EQ(o.kind, Kind::kReplyRapidCommit);
  size_t n = 0;
  for (size_t i = 0; i + 4 <= o.reply.size(); ++i)
    if (o.reply[i] == 0x00 && o.reply[i + 1] == 0x1a && o.reply[i + 2] == 0x00 &&
        o.reply[i + 3] == 0x19)
      ++n;
  EXPECT_EQ(n, kMaxDelegatedPrefixes);
  EXPECT_LT(o.reply.size(), 1452u);
}

TEST_F(Dhcpv6, AnAnswerLargerThanAFrameIsRefused) {
  // A RENEW (1298 bytes: accepted) stuffed with 8 IA_NAs of 5 stale addresses each: every one must
  // come back with lifetimes 0, which does not fit one frame.
  Bytes ias;
  for (uint32_t k = 1; k <= 8; ++k) {
    Bytes body = cat({Bytes{0, 0, 0, static_cast<uint8_t>(k)}, hex("00000000 00000000")});
    for (int e = 0; e < 5; ++e)
      body = cat({body, hex("0005 0018 20010db81000000000000000000000"),
                  Bytes{static_cast<uint8_t>(0x80 + e)}, hex("00000000 00000000")});
    ias = cat({ias, opt(3, body)});
  }
  Bytes renew = request_for(5, ias);
  ASSERT_LE(renew.size(), kMaxMessage);
  Outcome o = run(renew);
  EXPECT_EQ(o.kind, Kind::kRefusedReplyTooLarge);
  EXPECT_FALSE(o.has_reply);
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kNone);
}

TEST_F(Dhcpv6, IaTaIsNotServed) {
  Bytes m = cat({hex("01 000008 0001 000a 00030001020000001001 000e 0000"),
                 hex("0004 0004 00000009"), hex("0003 000c 00000001 00000000 00000000")});
  Outcome o = run(m);
  EXPECT_EQ(o.kind, Kind::kReplyRapidCommit);
  Bytes want = cat(
      {hex("07 000008"), hex(kServerIdOpt), hex("0001 000a 00030001020000001001"), hex("000e 0000"),
       opt(4, cat({hex("00000009"), status(2, "no address provisioned for this subscriber")})),
       ia_na_full("00000001"), hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
}

TEST_F(Dhcpv6, ReleaseOfTheBoundLease) {
  Outcome o = run(request_for(8, cat({ia_na_full("00001001"), ia_pd_full("00001001")})));
  EXPECT_EQ(o.kind, Kind::kReplyRelease);
  Bytes want = cat({hex("07 abcdef"), hex(kServerIdOpt),
                    hex("0001 000e 0001000132a0e9c5020000001001"), status(0, "released")});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kReleased);
  EXPECT_TRUE(o.lease.na && o.lease.pd);
}

TEST_F(Dhcpv6, ReleaseOfAnOldAddressGetsNoBinding) {
  Bytes old_na =
      hex("0003 0028 00001001 00000000 00000000 0005 0018"
          "20010db8100000000000000000000099 00000000 00000000");
  Outcome o = run(request_for(8, old_na));
  EXPECT_EQ(o.kind, Kind::kRefusedStaleLease);
  Bytes want =
      cat({hex("07 abcdef"), hex(kServerIdOpt), hex("0001 000e 0001000132a0e9c5020000001001"),
           status(0, "released"),
           opt(3, cat({hex("00001001 00000000 00000000"), status(3, "no binding for this IA")}))});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kNone);
}

TEST_F(Dhcpv6, DeclineMarksTheAddress) {
  Outcome o = run(request_for(9, ia_na_full("00001001")));
  EXPECT_EQ(o.kind, Kind::kReplyDecline);
  Bytes want = cat({hex("07 abcdef"), hex(kServerIdOpt),
                    hex("0001 000e 0001000132a0e9c5020000001001"), status(0, "declined")});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  EXPECT_EQ(o.lease.action, LeaseChange::Action::kDeclined);
  EXPECT_TRUE(o.lease.na);
  EXPECT_FALSE(o.lease.pd);
}

TEST_F(Dhcpv6, ConfirmOnLinkAndNotOnLink) {
  Outcome ok = run(request_for(4, ia_na_full("00001001"), false));
  EXPECT_EQ(ok.kind, Kind::kReplyConfirm);
  EXPECT_TRUE(bytes_eq(ok.reply, cat({hex("07 abcdef"), hex(kServerIdOpt),
                                      hex("0001 000e 0001000132a0e9c5020000001001"),
                                      status(0, "addresses on link")})));
  Bytes moved =
      hex("0003 0028 00001001 00000000 00000000 0005 0018"
          "20010db8100000000000000000000099 00000000 00000000");
  Outcome bad = run(request_for(4, moved, false));
  EXPECT_EQ(bad.kind, Kind::kReplyConfirmNotOnLink);
  EXPECT_TRUE(bytes_eq(bad.reply, cat({hex("07 abcdef"), hex(kServerIdOpt),
                                       hex("0001 000e 0001000132a0e9c5020000001001"),
                                       status(4, "address not provisioned for this subscriber")})));
  EXPECT_EQ(run(request_for(4, ia_na_full("00001001"), false), Binding{}).kind,
            Kind::kReplyConfirmNotOnLink);
  // No address at all: no reply (§18.3.3).
  Outcome none = run(request_for(4, hex("0003 000c 00001001 00000000 00000000"), false));
  EXPECT_EQ(none.kind, Kind::kIgnoredConfirmNoAddress);
  EXPECT_FALSE(none.has_reply);
}

TEST_F(Dhcpv6, InformationRequestGetsDns) {
  Outcome o = run(hex(kDhclientInfoRequest));
  EXPECT_EQ(o.kind, Kind::kReplyInformation);
  Bytes want = cat(
      {hex("07 7b23c6"), hex(kServerIdOpt), hex("0001 000a 00030001020000001001"), hex(kDnsOpt)});
  EXPECT_TRUE(bytes_eq(o.reply, want));
  // Anonymous information-request: no client id to echo.
  Outcome anon = run(hex("0b 000001 0008 0002 0000"));
  EXPECT_TRUE(bytes_eq(anon.reply, cat({hex("07 000001"), hex(kServerIdOpt), hex(kDnsOpt)})));
}

TEST_F(Dhcpv6, RepliesAreClientParsableShapes) {
  // Every reply we build is a well-formed DHCPv6 message: re-parsing it as
  // a client message must fail only for being a server type.
  for (const Bytes& m : {hex(kDhclientSolicit), hex(kDhcpcdSolicit), hex(kDhclientInfoRequest)}) {
    Outcome o = run(m);
    ASSERT_TRUE(o.has_reply);
    Message r;
    EXPECT_EQ(parse(o.reply, &r), ParseError::kServerMessage);
    Bytes as_client = o.reply;
    as_client[0] = 11;  // pretend INFORMATION-REQUEST: option walk must succeed
    EXPECT_NE(parse(as_client, &r), ParseError::kTruncatedOption);
    EXPECT_NE(parse(as_client, &r), ParseError::kOptionOverflow);
  }
}

TEST_F(Dhcpv6, OutcomeBufferIsReused) {
  Outcome o;
  serve(hex(kDhcpcdSolicit), binding, settings, kNow, &o);
  const uint8_t* data = o.reply.data();
  size_t cap = o.reply.capacity();
  serve(hex(kDhcpcdSolicit), binding, settings, kNow, &o);
  EXPECT_EQ(o.reply.data(), data);
  EXPECT_EQ(o.reply.capacity(), cap);
  serve(hex("00"), binding, settings, kNow, &o);
  EXPECT_FALSE(o.has_reply);
  EXPECT_TRUE(o.reply.empty());
}

TEST_F(Dhcpv6, SettingsChecks) {
  EXPECT_TRUE(check_settings(settings).empty());
  Settings bad = settings;
  bad.server_duid = Duid{};
  bad.t1 = 5000;
  bad.t2 = 4000;
  bad.preferred_lifetime = 8000;
  auto e = check_settings(bad);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], "server DUID: not set");
  EXPECT_EQ(e[1], "preferred lifetime 8000 exceeds the valid lifetime 7200");
  EXPECT_EQ(e[2], "T1 5000 exceeds T2 4000");
}

// --- DUID -------------------------------------------------------------------

TEST(Dhcpv6Duid, UuidShape) {
  Duid a = make_duid_uuid(), b = make_duid_uuid();
  EXPECT_EQ(a.len, 18);
  EXPECT_EQ(a.bytes[0], 0);
  EXPECT_EQ(a.bytes[1], 4);
  EXPECT_EQ(a.bytes[2 + 6] >> 4, 4);       // UUID version 4
  EXPECT_EQ(a.bytes[2 + 8] & 0xc0, 0x80);  // RFC 4122 variant
  EXPECT_FALSE(a == b);
}

TEST(Dhcpv6Duid, HexRoundTrip) {
  auto d = parse_duid_hex("00:04:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff\n");
  ASSERT_TRUE(d);
  EXPECT_EQ(format_duid_hex(*d), "00:04:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff");
  EXPECT_TRUE(parse_duid_hex("000400112233"));
  for (const char* bad : {"", "00:04", "00:04:", "0:04:11", "00:04:zz", "00::04:11",
                          "00:04:11:", "00:0411", "0004:11", "00043"})
    EXPECT_FALSE(parse_duid_hex(bad)) << bad;
}

TEST(Dhcpv6Duid, PersistsAcrossRestarts) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("xbng-duid-test-" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::string path = (dir / "state" / "dhcpv6-server-duid").string();
  std::string err;
  auto first = load_or_create_server_duid(path, &err);
  ASSERT_TRUE(first) << err;
  auto again = load_or_create_server_duid(path, &err);  // "restart"
  ASSERT_TRUE(again) << err;
  EXPECT_TRUE(*first == *again);
  // An operator-set DUID is kept as is.
  std::ofstream(path) << "00:01:00:01:2a:2b:2c:2d:02:00:00:00:00:01\n";
  auto set = load_or_create_server_duid(path, &err);
  ASSERT_TRUE(set) << err;
  EXPECT_EQ(format_duid_hex(*set), "00:01:00:01:2a:2b:2c:2d:02:00:00:00:00:01");
  // A damaged file is an error, never silently replaced.
  std::ofstream(path) << "garbage";
  EXPECT_FALSE(load_or_create_server_duid(path, &err));
  EXPECT_NE(err.find("not a DUID"), std::string::npos) << err;
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(content, "garbage");
  fs::remove_all(dir);
}

}  // namespace
