// DHCPv6 client message parser (RFC 8415 §7, §16, §21).
#include "bringup/dhcpv6/message.h"

#include <algorithm>
#include <cstring>

#include "common/wire.h"

namespace xbng::agent::dhcpv6 {

std::string_view msg_type_name(MsgType t) {
  switch (t) {
    case MsgType::kSolicit:
      return "solicit";
    case MsgType::kAdvertise:
      return "advertise";
    case MsgType::kRequest:
      return "request";
    case MsgType::kConfirm:
      return "confirm";
    case MsgType::kRenew:
      return "renew";
    case MsgType::kRebind:
      return "rebind";
    case MsgType::kReply:
      return "reply";
    case MsgType::kRelease:
      return "release";
    case MsgType::kDecline:
      return "decline";
    case MsgType::kReconfigure:
      return "reconfigure";
    case MsgType::kInformationRequest:
      return "information_request";
    case MsgType::kRelayForw:
      return "relay_forw";
    case MsgType::kRelayRepl:
      return "relay_repl";
  }
  return "unknown";
}

std::string_view parse_error_name(ParseError e) {
  switch (e) {
#define XBNG_DHCPV6_NAME_(en, m, d) \
  case ParseError::en:              \
    return m;
    XBNG_DHCPV6_PARSE_ERRORS(XBNG_DHCPV6_NAME_)
#undef XBNG_DHCPV6_NAME_
  }
  return "unknown";
}

std::string_view parse_error_description(ParseError e) {
  switch (e) {
#define XBNG_DHCPV6_DESC_(en, m, d) \
  case ParseError::en:              \
    return d;
    XBNG_DHCPV6_PARSE_ERRORS(XBNG_DHCPV6_DESC_)
#undef XBNG_DHCPV6_DESC_
  }
  return "unknown";
}

bool Duid::assign(std::span<const uint8_t> b) {
  if (b.empty() || b.size() > kMaxDuid) return false;
  len = static_cast<uint8_t>(b.size());
  std::memcpy(bytes.data(), b.data(), b.size());
  return true;
}

bool Message::requested(uint16_t option) const {
  return std::find(oro.begin(), oro.begin() + num_oro, option) != oro.begin() + num_oro;
}

namespace {

using wire::get16;
using wire::get32;

// Walks the options of [p, end): calls f(code, body) for each. Fails on a
// header that does not fit or a length that overflows the container.
template <typename F>
ParseError walk(const uint8_t* p, const uint8_t* end, F&& f) {
  while (p < end) {
    if (end - p < 4) return ParseError::kTruncatedOption;
    uint16_t code = get16(p), len = get16(p + 2);
    p += 4;
    if (len > end - p) return ParseError::kOptionOverflow;
    if (ParseError e = f(code, std::span<const uint8_t>(p, len)); e != ParseError::kOk) return e;
    p += len;
  }
  return ParseError::kOk;
}

ParseError parse_duid(std::span<const uint8_t> b, Duid* d) {
  if (b.size() < 3 || b.size() > kMaxDuid) return ParseError::kBadDuid;
  d->assign(b);
  return ParseError::kOk;
}

ParseError parse_ia(uint16_t type, std::span<const uint8_t> b, Ia* ia) {
  size_t fixed = type == kOptIaTa ? 4 : 12;
  if (b.size() < fixed) return ParseError::kBadOptionLength;
  ia->type = type;
  ia->iaid = get32(b.data());
  if (type != kOptIaTa) {
    ia->t1 = get32(b.data() + 4);
    ia->t2 = get32(b.data() + 8);
  }
  ia->num_entries = 0;
  bool status_seen = false;
  return walk(b.data() + fixed, b.data() + b.size(),
              [&](uint16_t code, std::span<const uint8_t> o) {
                if (code == kOptIaAddr || code == kOptIaPrefix) {
                  bool want_prefix = type == kOptIaPd;
                  if ((code == kOptIaPrefix) != want_prefix) return ParseError::kBadIaEntry;
                  if (ia->num_entries == kMaxIaEntries) return ParseError::kTooManyIaEntries;
                  IaEntry& e = ia->entries[ia->num_entries];
                  if (code == kOptIaAddr) {
                    if (o.size() < 24) return ParseError::kBadIaEntry;
                    std::memcpy(e.addr.data(), o.data(), 16);
                    e.prefix_len = 128;
                    e.preferred = get32(o.data() + 16);
                    e.valid = get32(o.data() + 20);
                    // IAADDR-options: a client sends none we use; still, they must be
                    // well-formed options.
                    ParseError sub =
                        walk(o.data() + 24, o.data() + o.size(),
                             [](uint16_t, std::span<const uint8_t>) { return ParseError::kOk; });
                    if (sub != ParseError::kOk) return sub;
                  } else {
                    if (o.size() < 25) return ParseError::kBadIaEntry;
                    e.preferred = get32(o.data());
                    e.valid = get32(o.data() + 4);
                    e.prefix_len = o[8];
                    if (e.prefix_len > 128) return ParseError::kBadIaEntry;
                    std::memcpy(e.addr.data(), o.data() + 9, 16);
                    ParseError sub =
                        walk(o.data() + 25, o.data() + o.size(),
                             [](uint16_t, std::span<const uint8_t>) { return ParseError::kOk; });
                    if (sub != ParseError::kOk) return sub;
                  }
                  ++ia->num_entries;
                  return ParseError::kOk;
                }
                if (code == kOptStatusCode) {
                  if (o.size() < 2) return ParseError::kBadOptionLength;
                  if (status_seen) return ParseError::kDuplicateOption;
                  status_seen = true;
                }
                return ParseError::kOk;  // other IA sub-options: ignored
              });
}

// Client messages are parsed; the others are refused by kind.
ParseError check_type(uint8_t t) {
  switch (static_cast<MsgType>(t)) {
    case MsgType::kSolicit:
    case MsgType::kRequest:
    case MsgType::kConfirm:
    case MsgType::kRenew:
    case MsgType::kRebind:
    case MsgType::kRelease:
    case MsgType::kDecline:
    case MsgType::kInformationRequest:
      return ParseError::kOk;
    case MsgType::kAdvertise:
    case MsgType::kReply:
    case MsgType::kReconfigure:
    case MsgType::kRelayRepl:
      return ParseError::kServerMessage;
    case MsgType::kRelayForw:
      return ParseError::kRelayMessage;
    default:
      return ParseError::kUnknownType;
  }
}

// One top-level option of a client message into `m`. `oro_seen`: an Option
// Request came before.
ParseError parse_option(uint16_t code, std::span<const uint8_t> o, Message* m, bool* oro_seen) {
  switch (code) {
    case kOptClientId:
      if (m->has_client_id) return ParseError::kDuplicateOption;
      m->has_client_id = true;
      return parse_duid(o, &m->client_id);
    case kOptServerId:
      if (m->has_server_id) return ParseError::kDuplicateOption;
      m->has_server_id = true;
      return parse_duid(o, &m->server_id);
    case kOptIaNa:
    case kOptIaTa:
    case kOptIaPd: {
      if (m->num_ias == kMaxIas) return ParseError::kTooManyIas;
      Ia& ia = m->ias[m->num_ias];
      if (ParseError pe = parse_ia(code, o, &ia); pe != ParseError::kOk) return pe;
      for (uint8_t i = 0; i < m->num_ias; ++i)
        if (m->ias[i].type == code && m->ias[i].iaid == ia.iaid) return ParseError::kDuplicateIaid;
      ++m->num_ias;
      return ParseError::kOk;
    }
    case kOptOro:
      if (*oro_seen) return ParseError::kDuplicateOption;
      *oro_seen = true;
      if (o.size() % 2) return ParseError::kBadOptionLength;
      for (size_t i = 0; i + 1 < o.size() && m->num_oro < kMaxOro; i += 2)
        m->oro[m->num_oro++] = get16(o.data() + i);
      return ParseError::kOk;
    case kOptElapsedTime:
      if (o.size() != 2) return ParseError::kBadOptionLength;
      if (m->has_elapsed_time) return ParseError::kDuplicateOption;
      m->has_elapsed_time = true;
      m->elapsed_time = get16(o.data());
      return ParseError::kOk;
    case kOptRapidCommit:
      if (!o.empty()) return ParseError::kBadOptionLength;
      m->rapid_commit = true;
      return ParseError::kOk;
    case kOptReconfAccept:
      if (!o.empty()) return ParseError::kBadOptionLength;
      m->reconfigure_accept = true;
      return ParseError::kOk;
    case kOptRelayMsg:
      return ParseError::kRelayMessage;
    default:
      return ParseError::kOk;  // unknown or not for us: skipped (§16)
  }
}

// Per-type rules (RFC 8415 §16.2–§16.12). A wrong Server Identifier
// VALUE is the server's business (it knows its DUID), not the parser's.
ParseError check_identifiers(const Message& m) {
  switch (m.type) {
    case MsgType::kSolicit:
    case MsgType::kConfirm:
    case MsgType::kRebind:
      if (!m.has_client_id) return ParseError::kMissingClientId;
      if (m.has_server_id) return ParseError::kUnexpectedServerId;
      break;
    case MsgType::kRequest:
    case MsgType::kRenew:
    case MsgType::kRelease:
    case MsgType::kDecline:
      if (!m.has_client_id) return ParseError::kMissingClientId;
      if (!m.has_server_id) return ParseError::kMissingServerId;
      break;
    case MsgType::kInformationRequest:
      if (m.num_ias) return ParseError::kUnexpectedIa;
      break;
    default:
      break;
  }
  return ParseError::kOk;
}

}  // namespace

ParseError parse(std::span<const uint8_t> payload, Message* m) {
  if (payload.size() < 4) return ParseError::kTooShort;
  if (payload.size() > kMaxMessage) return ParseError::kOversized;
  uint8_t t = payload[0];
  if (ParseError e = check_type(t); e != ParseError::kOk) return e;
  m->type = static_cast<MsgType>(t);
  m->xid = (uint32_t{payload[1]} << 16) | (uint32_t{payload[2]} << 8) | payload[3];
  m->has_client_id = m->has_server_id = false;
  m->rapid_commit = m->reconfigure_accept = m->has_elapsed_time = false;
  m->elapsed_time = 0;
  m->num_ias = 0;
  m->num_oro = 0;
  bool oro_seen = false;

  ParseError e = walk(payload.data() + 4, payload.data() + payload.size(),
                      [&](uint16_t code, std::span<const uint8_t> o) {
                        return parse_option(code, o, m, &oro_seen);
                      });
  if (e != ParseError::kOk) return e;
  return check_identifiers(*m);
}

}  // namespace xbng::agent::dhcpv6
