#include "relay/dhcpv4_relay.h"

#include <cstring>

#include "common/bytes.h"

namespace xbng::agent::relay {

namespace {

using dhcpv4::kFixedLen;
using dhcpv4::kMagicCookie;
using dhcpv4::kMaxLen;
using dhcpv4::kMinLen;

struct Opt {
  uint8_t code;
  std::span<const uint8_t> value;
};

// The options of a BOOTP payload that passed its header checks; false when
// one runs past the end or no End is found.
bool options_of(std::span<const uint8_t> b, std::vector<Opt>* out, bool* no_end) {
  *no_end = false;
  size_t i = kMinLen;
  while (i < b.size()) {
    const uint8_t code = b[i];
    if (code == dhcpv4::kOptPad) {
      ++i;
      continue;
    }
    if (code == dhcpv4::kOptEnd) return true;
    if (i + 2 > b.size()) return false;
    const size_t len = b[i + 1];
    if (i + 2 + len > b.size()) return false;
    out->push_back({code, b.subspan(i + 2, len)});
    i += 2 + len;
  }
  *no_end = true;
  return false;
}

void put_opt(std::vector<uint8_t>& o, uint8_t code, std::span<const uint8_t> v) {
  o.push_back(code);
  o.push_back(static_cast<uint8_t>(v.size()));
  o.insert(o.end(), v.begin(), v.end());
}

}  // namespace

const char* request_error_name(RequestError e) {
  switch (e) {
    case RequestError::kNone:
      return "none";
    case RequestError::kMalformed:
      return "malformed";
    case RequestError::kHopLimit:
      return "hop_limit";
    case RequestError::kGiaddrSet:
      return "giaddr_set";
    case RequestError::kAgentInfoDropped:
      return "option82_dropped";
    case RequestError::kTooLong:
      return "too_long";
  }
  return "?";
}

const char* reply_error_name(ReplyError e) {
  switch (e) {
    case ReplyError::kNone:
      return "none";
    case ReplyError::kTruncated:
      return "truncated";
    case ReplyError::kOversized:
      return "oversized";
    case ReplyError::kBadCookie:
      return "bad_cookie";
    case ReplyError::kNotReply:
      return "not_bootreply";
    case ReplyError::kBadHardware:
      return "bad_hardware_type";
    case ReplyError::kOptionTruncated:
      return "option_truncated";
    case ReplyError::kOverload:
      return "option_overload";
    case ReplyError::kNoMessageType:
      return "no_message_type";
    case ReplyError::kBadMessageType:
      return "bad_message_type";
    case ReplyError::kBadOption:
      return "bad_option_length";
    case ReplyError::kBadAgentInfo:
      return "bad_option82";
    case ReplyError::kNoEnd:
      return "no_end_option";
  }
  return "?";
}

std::optional<std::vector<uint8_t>> relay_request(std::span<const uint8_t> client,
                                                  const RequestParams& p, dhcpv4::Message* msg,
                                                  RequestError* err, dhcpv4::ParseError* perr) {
  auto fail = [&](RequestError e) {
    *err = e;
    return std::nullopt;
  };
  *err = RequestError::kNone;
  *perr = dhcpv4::ParseError::kNone;
  if (client.size() >= kMinLen) {
    if (client[3] > p.max_hops) return fail(RequestError::kHopLimit);
    uint32_t gi;
    std::memcpy(&gi, &client[24], 4);
    if (gi != 0) return fail(RequestError::kGiaddrSet);
  }
  // The client parser checks everything else; it refuses hops != 0 (it
  // serves first-hop clients), so it reads a copy with hops cleared (an
  // access node in between may have counted itself).
  std::vector<uint8_t> copy(client.begin(), client.end());
  if (copy.size() >= kMinLen) copy[3] = 0;
  auto m = dhcpv4::parse(copy, perr);
  if (!m) return fail(RequestError::kMalformed);
  m->hops = client[3];
  if (m->has_relay_agent_info && p.policy == Policy::kDrop)
    return fail(RequestError::kAgentInfoDropped);

  std::vector<Opt> opts;
  bool no_end;
  if (!options_of(client, &opts, &no_end)) return fail(RequestError::kMalformed);
  std::vector<uint8_t> out(client.begin(), client.begin() + kMinLen);
  out[3] = static_cast<uint8_t>(client[3] + 1);
  std::memcpy(&out[24], &p.giaddr, 4);
  const bool keep_theirs = m->has_relay_agent_info && p.policy == Policy::kKeep;
  for (const auto& o : opts) {
    if (o.code == dhcpv4::kOptRelayAgentInfo) {
      if (keep_theirs) put_opt(out, o.code, o.value);
      continue;
    }
    if (o.code == dhcpv4::kOptServerId && p.server_id) {
      put_opt(out, o.code, {reinterpret_cast<const uint8_t*>(&*p.server_id), 4});
      continue;
    }
    put_opt(out, o.code, o.value);
  }
  // RFC 3046 2.1: option 82 is the last option before End.
  if (!keep_theirs) {
    const std::vector<uint8_t> ai = encode_agent_info(p.ours);
    if (!ai.empty()) put_opt(out, dhcpv4::kOptRelayAgentInfo, ai);
  }
  out.push_back(dhcpv4::kOptEnd);
  if (out.size() > kMaxLen) return fail(RequestError::kTooLong);
  if (out.size() < 300) out.resize(300, 0);
  *msg = std::move(*m);
  return out;
}

std::optional<ServerReply> parse_reply(std::span<const uint8_t> b, ReplyError* err) {
  auto fail = [&](ReplyError e) {
    *err = e;
    return std::nullopt;
  };
  *err = ReplyError::kNone;
  if (b.size() > kMaxLen) return fail(ReplyError::kOversized);
  if (b.size() < kMinLen) return fail(ReplyError::kTruncated);
  if (be::get32(&b[kFixedLen]) != kMagicCookie) return fail(ReplyError::kBadCookie);
  if (b[0] != 2) return fail(ReplyError::kNotReply);
  if (b[1] != 1 || b[2] != 6) return fail(ReplyError::kBadHardware);
  ServerReply r;
  r.xid = be::get32(&b[4]);
  r.flags = be::get16(&b[10]);
  std::memcpy(&r.ciaddr, &b[12], 4);
  std::memcpy(&r.yiaddr, &b[16], 4);
  std::memcpy(&r.giaddr, &b[24], 4);
  std::memcpy(r.chaddr.data(), &b[28], 16);
  std::vector<Opt> opts;
  bool no_end;
  if (!options_of(b, &opts, &no_end))
    return fail(no_end ? ReplyError::kNoEnd : ReplyError::kOptionTruncated);
  std::vector<uint8_t> ai;
  bool has_ai = false;
  for (const auto& o : opts) {
    switch (o.code) {
      case dhcpv4::kOptMessageType:
        if (o.value.size() != 1) return fail(ReplyError::kBadOption);
        r.type = o.value[0];
        break;
      case dhcpv4::kOptServerId: {
        if (o.value.size() != 4) return fail(ReplyError::kBadOption);
        uint32_t v;
        std::memcpy(&v, o.value.data(), 4);
        r.server_id = v;
        break;
      }
      case dhcpv4::kOptLeaseTime:
        if (o.value.size() != 4) return fail(ReplyError::kBadOption);
        r.lease_time = be::get32(o.value.data());
        break;
      case dhcpv4::kOptOverload:
        return fail(ReplyError::kOverload);
      case dhcpv4::kOptRelayAgentInfo:
        ai.insert(ai.end(), o.value.begin(), o.value.end());  // RFC 3396: concatenated
        has_ai = true;
        break;
      default:
        break;
    }
  }
  if (r.type == 0) return fail(ReplyError::kNoMessageType);
  if (r.type != dhcpv4::kOffer && r.type != dhcpv4::kAck && r.type != dhcpv4::kNak)
    return fail(ReplyError::kBadMessageType);
  if (has_ai) {
    r.agent_info = decode_agent_info(ai);
    if (!r.agent_info) return fail(ReplyError::kBadAgentInfo);
  }
  return r;
}

std::vector<uint8_t> client_reply(std::span<const uint8_t> b, uint32_t server_id) {
  std::vector<Opt> opts;
  bool no_end;
  options_of(b, &opts, &no_end);
  std::vector<uint8_t> out(b.begin(), b.begin() + kMinLen);
  for (const auto& o : opts) {
    if (o.code == dhcpv4::kOptRelayAgentInfo) continue;
    if (o.code == dhcpv4::kOptServerId) {
      put_opt(out, o.code, {reinterpret_cast<const uint8_t*>(&server_id), 4});
      continue;
    }
    put_opt(out, o.code, o.value);
  }
  out.push_back(dhcpv4::kOptEnd);
  if (out.size() < 300) out.resize(300, 0);
  return out;
}

}  // namespace xbng::agent::relay
