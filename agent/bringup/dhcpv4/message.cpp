#include "bringup/dhcpv4/message.h"

#include <algorithm>
#include <cstring>

#include "common/bytes.h"

namespace xbng::agent::dhcpv4 {

namespace {

using be::get16;
using be::get32;
uint32_t rd_be(const uint8_t* p) {  // kept in network order
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}
void put_be(std::vector<uint8_t>& b, uint32_t be) {
  const auto* p = reinterpret_cast<const uint8_t*>(&be);
  b.insert(b.end(), p, p + 4);
}
void opt_be(std::vector<uint8_t>& b, uint8_t code, uint32_t be) {
  b.push_back(code);
  b.push_back(4);
  put_be(b, be);
}
void opt32(std::vector<uint8_t>& b, uint8_t code, uint32_t v) {
  b.push_back(code);
  b.push_back(4);
  put32(b, v);
}

}  // namespace

const char* message_type_name(uint8_t t) {
  static const char* const names[] = {"?",   "discover", "offer",   "request", "decline",
                                      "ack", "nak",      "release", "inform"};
  return t < 9 ? names[t] : "?";
}

const char* parse_error_name(ParseError e) {
  switch (e) {
    case ParseError::kNone:
      return "none";
    case ParseError::kTruncated:
      return "truncated";
    case ParseError::kOversized:
      return "oversized";
    case ParseError::kBadCookie:
      return "bad_cookie";
    case ParseError::kNotRequest:
      return "not_bootrequest";
    case ParseError::kBadHardware:
      return "bad_hardware_type";
    case ParseError::kRelayed:
      return "relayed";
    case ParseError::kOptionTruncated:
      return "option_truncated";
    case ParseError::kBadOptionLength:
      return "bad_option_length";
    case ParseError::kOverload:
      return "option_overload";
    case ParseError::kNoMessageType:
      return "no_message_type";
    case ParseError::kBadMessageType:
      return "bad_message_type";
    case ParseError::kNoEnd:
      return "no_end_option";
  }
  return "?";
}

bool Message::requested(uint8_t opt) const {
  return std::find(param_list.begin(), param_list.end(), opt) != param_list.end();
}

namespace {

// One option of a client message (code, its `len` bytes at v) into `m`.
ParseError parse_option(uint8_t code, const uint8_t* v, size_t len, Message* m) {
  switch (code) {
    case kOptMessageType:
      if (len != 1) return ParseError::kBadOptionLength;
      m->type = v[0];
      return ParseError::kNone;
    case kOptRequestedIp:
      if (len != 4) return ParseError::kBadOptionLength;
      m->requested_ip = rd_be(v);
      return ParseError::kNone;
    case kOptServerId:
      if (len != 4) return ParseError::kBadOptionLength;
      m->server_id = rd_be(v);
      return ParseError::kNone;
    case kOptMaxSize:
      if (len != 2) return ParseError::kBadOptionLength;
      m->max_size = get16(&v[0]);
      return ParseError::kNone;
    case kOptOverload:
      return ParseError::kOverload;
    case kOptClientId:
      if (len < 2) return ParseError::kBadOptionLength;
      m->client_id.assign(v, v + len);
      return ParseError::kNone;
    case kOptParamList:
      m->param_list.insert(m->param_list.end(), v, v + len);  // RFC 3396: concatenated
      return ParseError::kNone;
    case kOptRelayAgentInfo:
      m->relay_agent_info.insert(m->relay_agent_info.end(), v, v + len);
      m->has_relay_agent_info = true;
      if (m->relay_agent_info.size() > 255) return ParseError::kBadOptionLength;
      return ParseError::kNone;
    case kOptHostName:
      m->host_name.assign(reinterpret_cast<const char*>(v), len);
      return ParseError::kNone;
    default:
      return ParseError::kNone;
  }
}

}  // namespace

std::optional<Message> parse(std::span<const uint8_t> b, ParseError* err) {
  auto fail = [&](ParseError e) {
    if (err) *err = e;
    return std::nullopt;
  };
  if (err) *err = ParseError::kNone;
  if (b.size() > kMaxLen) return fail(ParseError::kOversized);
  if (b.size() < kMinLen) return fail(ParseError::kTruncated);
  if (get32(&b[kFixedLen]) != kMagicCookie) return fail(ParseError::kBadCookie);
  Message m;
  m.op = b[0];
  m.htype = b[1];
  m.hlen = b[2];
  m.hops = b[3];
  if (m.op != 1) return fail(ParseError::kNotRequest);
  if (m.htype != 1 || m.hlen != 6) return fail(ParseError::kBadHardware);
  m.xid = get32(&b[4]);
  m.secs = get16(&b[8]);
  m.flags = get16(&b[10]);
  m.ciaddr = rd_be(&b[12]);
  m.yiaddr = rd_be(&b[16]);
  m.siaddr = rd_be(&b[20]);
  m.giaddr = rd_be(&b[24]);
  if (m.hops != 0 || m.giaddr != 0) return fail(ParseError::kRelayed);
  std::memcpy(m.chaddr.data(), &b[28], 16);

  bool end = false;
  size_t i = kMinLen;
  while (i < b.size()) {
    const uint8_t code = b[i];
    if (code == kOptPad) {
      ++i;
      continue;
    }
    if (code == kOptEnd) {
      end = true;
      break;
    }
    if (i + 2 > b.size()) return fail(ParseError::kOptionTruncated);
    const size_t len = b[i + 1];
    if (i + 2 + len > b.size()) return fail(ParseError::kOptionTruncated);
    const uint8_t* v = &b[i + 2];
    if (ParseError e = parse_option(code, v, len, &m); e != ParseError::kNone) return fail(e);
    i += 2 + len;
  }
  if (!end) return fail(ParseError::kNoEnd);
  if (m.type == 0) return fail(ParseError::kNoMessageType);
  if (m.type != kDiscover && m.type != kRequest && m.type != kDecline && m.type != kRelease &&
      m.type != kInform)
    return fail(ParseError::kBadMessageType);
  return m;
}

std::vector<uint8_t> build(const Reply& r) {
  const Message& m = r.m;
  std::vector<uint8_t> b;
  b.reserve(400);
  b.push_back(2);  // BOOTREPLY
  b.push_back(1);
  b.push_back(6);
  b.push_back(0);
  put32(b, m.xid);
  b.push_back(0);  // secs
  b.push_back(0);
  b.push_back(static_cast<uint8_t>(m.flags >> 8));
  b.push_back(static_cast<uint8_t>(m.flags));
  put_be(b, m.ciaddr);
  put_be(b, m.yiaddr);
  put_be(b, m.siaddr);
  put_be(b, m.giaddr);
  b.insert(b.end(), m.chaddr.begin(), m.chaddr.end());
  b.resize(kFixedLen, 0);  // sname, file
  put32(b, kMagicCookie);
  b.push_back(kOptMessageType);
  b.push_back(1);
  b.push_back(m.type);
  opt_be(b, kOptServerId, r.server_id);
  if (r.lease_time) opt32(b, kOptLeaseTime, *r.lease_time);
  if (r.t1) opt32(b, kOptRenewalT1, *r.t1);
  if (r.t2) opt32(b, kOptRebindingT2, *r.t2);
  if (r.subnet_mask) opt_be(b, kOptSubnetMask, *r.subnet_mask);
  if (r.router) opt_be(b, kOptRouter, *r.router);
  if (!r.classless_routes.empty()) {
    std::vector<uint8_t> v;
    for (const auto& rt : r.classless_routes) {
      v.push_back(rt.len);
      const auto* d = reinterpret_cast<const uint8_t*>(&rt.dest);
      v.insert(v.end(), d, d + (rt.len + 7) / 8);  // significant octets only (RFC 3442)
      const auto* g = reinterpret_cast<const uint8_t*>(&rt.via);
      v.insert(v.end(), g, g + 4);
    }
    b.push_back(kOptClasslessRoutes);
    b.push_back(static_cast<uint8_t>(v.size()));
    b.insert(b.end(), v.begin(), v.end());
  }
  if (!r.dns.empty()) {
    const size_t n = std::min<size_t>(r.dns.size(), 63);
    b.push_back(kOptDns);
    b.push_back(static_cast<uint8_t>(4 * n));
    for (size_t i = 0; i < n; ++i) put_be(b, r.dns[i]);
  }
  if (!r.message.empty()) {
    const size_t n = std::min<size_t>(r.message.size(), 255);
    b.push_back(kOptMessage);
    b.push_back(static_cast<uint8_t>(n));
    b.insert(b.end(), r.message.begin(), r.message.begin() + static_cast<long>(n));
  }
  if (m.has_relay_agent_info) {
    b.push_back(kOptRelayAgentInfo);
    b.push_back(static_cast<uint8_t>(m.relay_agent_info.size()));
    b.insert(b.end(), m.relay_agent_info.begin(), m.relay_agent_info.end());
  }
  b.push_back(kOptEnd);
  if (b.size() < 300) b.resize(300, 0);
  return b;
}

}  // namespace xbng::agent::dhcpv4
