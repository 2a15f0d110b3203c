// DHCPv6 server logic (RFC 8415, IA_PD per RFC 8415 §6.3, DNS per RFC 3646):
// (client message, the subscriber's provisioned binding, settings, now) →
// an outcome: what to count, the reply payload (or none), and the lease
// change to record. Pure: no sockets, no clock, no globals, no state between
// calls — the provisioned binding IS the lease (the subscriber is the QinQ
// pair, not the client DUID), so a restart of the daemon loses nothing: a
// RENEW after a restart is answered exactly like before it.
//
// Policy, in short (details in docs/design.md):
// - IA_NA always carries the provisioned /128, IA_PD every provisioned IPv6
//   prefix (at most kMaxDelegatedPrefixes, in the binding's order: a reply
//   must fit one frame); client hints are ignored. Nothing provisioned: the IA comes back
//   with NoAddrsAvail / NoPrefixAvail (and ADVERTISE also carries the
//   top-level NoAddrsAvail when no IA gets anything, RFC 8415 §18.3.9).
// - SOLICIT → ADVERTISE; with Rapid Commit (client asks, settings allow,
//   something is assigned) → REPLY + bound.
// - REQUEST / RENEW / REBIND → REPLY + bound. Addresses/prefixes the client
//   lists that are no longer provisioned come back with lifetimes 0 next to
//   the provisioned ones (a re-provisioned address is taken up at renew).
//   RENEW of an IA we cannot serve → NoBinding (§18.3.4); REBIND → lifetimes 0.
// - RELEASE / DECLINE → REPLY Success (+ NoBinding per IA that holds nothing
//   of ours) and released/declined.
// - CONFIRM → REPLY Success when every address is the provisioned one,
//   NotOnLink otherwise; no REPLY when it lists no address (§18.3.3).
// - INFORMATION-REQUEST → REPLY with DNS.
// - REQUEST/RENEW/RELEASE/DECLINE/INFORMATION-REQUEST naming another server
//   DUID → no reply (§16), counted.
// - Unicast and multicast messages are served alike: we never send the
//   Server Unicast option, and RFC 9915 (8415bis) retires the UseMulticast
//   answer, so a unicast RENEW to the gateway is simply answered.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bringup/dhcpv6/message.h"
#include "common/net.h"

namespace xbng::agent::dhcpv6 {

inline constexpr size_t kMaxDelegatedPrefixes = 16;
// A reply must fit one 1500-byte frame with IPv6 and UDP headers. Real
// clients' answers are far smaller (~160 bytes for IA_NA + IA_PD + DNS);
// only a message stuffed with IAs and stale entries could exceed it, and
// it then gets no answer (counted), rather than a frame no link carries.
inline constexpr size_t kMaxReply = 1452;

// Per access port (config.cpp maps the config file onto this).
struct Settings {
  Duid server_duid;                    // see duid.h: persistent
  uint32_t preferred_lifetime = 3600;  // seconds, for IAADDR and IAPREFIX
  uint32_t valid_lifetime = 7200;
  uint32_t t1 = 1800;  // 0 = let the client choose (RFC 8415 §21.4)
  uint32_t t2 = 2880;
  std::vector<Ipv6> dns_servers;  // OPTION_DNS_SERVERS; empty: not sent
  bool rapid_commit = true;       // honour Rapid Commit in SOLICIT
  uint8_t preference = 255;       // OPTION_PREFERENCE in ADVERTISE; 255 = the
                                  // client may request at once (§18.2.1)
  bool send_preference = true;
};

// Problems that make settings unusable, each naming the field and value
// (empty: fine): a server DUID must be set; 0 < preferred ≤ valid;
// T1 ≤ T2 ≤ preferred when T1/T2 are given (RFC 8415 §21.4, §21.21); at
// most 16 DNS servers. For config checks (the config layer).
std::vector<std::string> check_settings(const Settings& s);

// What the subscriber is provisioned with (from SubscriberSpec).
struct Binding {
  bool has_address = false;
  Ipv6 address{};                    // the /128 for IA_NA
  std::span<const Prefix> prefixes;  // family-4 entries are skipped
};
// Convenience: a Binding viewing a spec-like object's fields.
inline Binding make_binding(bool has_ipv6, const Ipv6& addr, std::span<const Prefix> prefixes) {
  return Binding{has_ipv6, addr, prefixes};
}

// What happened, for counters. X(enum, metric suffix).
#define XBNG_DHCPV6_OUTCOMES(X)                                                                    \
  X(kAdvertise, "answered_advertise")                                                              \
  X(kReplyRapidCommit, "answered_reply_rapid_commit")                                              \
  X(kReplyRequest, "answered_reply_request")                                                       \
  X(kReplyRenew, "answered_reply_renew")                                                           \
  X(kReplyRebind, "answered_reply_rebind")                                                         \
  X(kReplyRelease, "answered_reply_release")                                                       \
  X(kReplyDecline, "answered_reply_decline")                                                       \
  X(kReplyConfirm, "answered_reply_confirm")                                                       \
  X(kReplyConfirmNotOnLink, "answered_reply_confirm_not_on_link")                                  \
  X(kReplyInformation, "answered_reply_information")                                               \
  X(kRefusedNoBinding, "refused_no_binding")     /* answered: nothing provisioned for its IAs */   \
  X(kRefusedStaleLease, "refused_stale_lease")   /* answered: RENEW/REBIND/RELEASE of              \
                                                    something not ours, nothing bound */           \
  X(kIgnoredOtherServer, "ignored_other_server") /* Server Identifier not ours */                  \
  X(kIgnoredConfirmNoAddress, "ignored_confirm_no_address")                                        \
  X(kIgnoredNotForServer, "ignored_not_for_server")   /* ADVERTISE/REPLY/relay types */            \
  X(kMalformed, "malformed")                          /* parse failed: see Outcome::parse_error */ \
  X(kRefusedReplyTooLarge, "refused_reply_too_large") /* the answer would exceed                   \
                                         kMaxReply: only a pathological client gets here */

enum class Kind : uint8_t {
#define XBNG_DHCPV6_KIND_(e, m) e,
  XBNG_DHCPV6_OUTCOMES(XBNG_DHCPV6_KIND_)
#undef XBNG_DHCPV6_KIND_
};
inline constexpr size_t kNumKinds = 0
#define XBNG_DHCPV6_KCOUNT_(e, m) +1
    XBNG_DHCPV6_OUTCOMES(XBNG_DHCPV6_KCOUNT_)
#undef XBNG_DHCPV6_KCOUNT_
    ;
std::string_view kind_name(Kind k);  // metric suffix

// The lease change to record; times are `now` + lifetime in the caller's
// clock (seconds). na/pd say which families the change concerns.
struct LeaseChange {
  enum class Action : uint8_t { kNone, kBound, kReleased, kDeclined };
  Action action = Action::kNone;
  bool na = false, pd = false;
  uint64_t na_valid_until = 0, pd_valid_until = 0;  // kBound only
  uint64_t na_preferred_until = 0, pd_preferred_until = 0;
  uint32_t na_iaid = 0, pd_iaid = 0;
};

struct Outcome {
  Kind kind = Kind::kMalformed;
  ParseError parse_error = ParseError::kOk;  // when kind == kMalformed
  MsgType request_type = MsgType::kSolicit;  // valid unless kMalformed
  bool has_reply = false;
  std::vector<uint8_t> reply;  // UDP payload to port 546
  LeaseChange lease;
};

// Handles a parsed message. `out` is reused (its reply buffer keeps its
// capacity: no allocation per message once warm).
void handle(const Message& msg, const Binding& binding, const Settings& settings, uint64_t now,
            Outcome* out);
// parse + handle.
void serve(std::span<const uint8_t> payload, const Binding& binding, const Settings& settings,
           uint64_t now, Outcome* out);

}  // namespace xbng::agent::dhcpv6
