#include "relay/dhcpv6_relay.h"

#include <cstring>

#include "common/bytes.h"

namespace xbng::agent::relay {

namespace {

constexpr size_t kRelayHeader = 34;  // msg-type, hop-count, link-address, peer-address
constexpr size_t kMaxDatagram = 65535 - 8;
constexpr uint8_t kRelayForw = 12, kRelayRepl = 13;
constexpr uint16_t kOptRelayMsg = 9, kOptInterfaceId = 18;

void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

void put_opt(std::vector<uint8_t>& b, uint16_t code, const void* v, size_t len) {
  put16(b, code);
  put16(b, static_cast<uint16_t>(len));
  const auto* p = static_cast<const uint8_t*>(v);
  b.insert(b.end(), p, p + len);
}

bool client_type(uint8_t t) {
  // Solicit, Request, Confirm, Renew, Rebind, Release, Decline, Information-request
  return t == 1 || t == 3 || t == 4 || t == 5 || t == 6 || t == 8 || t == 9 || t == 11;
}

}  // namespace

const char* relay6_error_name(Relay6Error e) {
  switch (e) {
    case Relay6Error::kNone:
      return "none";
    case Relay6Error::kTruncated:
      return "truncated";
    case Relay6Error::kOversized:
      return "oversized";
    case Relay6Error::kNotClient:
      return "not_client_message";
    case Relay6Error::kHopLimit:
      return "hop_limit";
    case Relay6Error::kNotRelayReply:
      return "not_relay_reply";
    case Relay6Error::kOptionOverflow:
      return "option_overflow";
    case Relay6Error::kNoRelayMessage:
      return "no_relay_message";
  }
  return "?";
}

std::optional<std::vector<uint8_t>> relay_forward(std::span<const uint8_t> client,
                                                  const Forward6Params& p, Relay6Error* err) {
  auto fail = [&](Relay6Error e) {
    *err = e;
    return std::nullopt;
  };
  *err = Relay6Error::kNone;
  if (client.size() < 4) return fail(Relay6Error::kTruncated);
  uint8_t hops = 0;
  if (client[0] == kRelayForw) {
    if (client.size() < kRelayHeader) return fail(Relay6Error::kTruncated);
    if (client[1] >= kHopCountLimit) return fail(Relay6Error::kHopLimit);
    hops = static_cast<uint8_t>(client[1] + 1);
  } else if (!client_type(client[0])) {
    return fail(Relay6Error::kNotClient);
  }
  const size_t iid = p.interface_id.empty() ? 0 : 4 + std::min<size_t>(p.interface_id.size(), 255);
  const size_t rid = p.remote_id.empty() ? 0 : 8 + std::min<size_t>(p.remote_id.size(), 255);
  if (kRelayHeader + 4 + client.size() + iid + rid > kMaxDatagram)
    return fail(Relay6Error::kOversized);
  std::vector<uint8_t> b;
  b.reserve(kRelayHeader + 4 + client.size() + iid + rid);
  b.push_back(kRelayForw);
  b.push_back(hops);
  b.insert(b.end(), p.link_address.begin(), p.link_address.end());
  b.insert(b.end(), p.peer_address.begin(), p.peer_address.end());
  // Interface-ID first: servers echo it, and it names the subscriber.
  if (iid) put_opt(b, kOptInterfaceId, p.interface_id.data(), iid - 4);
  if (rid) {
    put16(b, kOptRemoteId);
    put16(b, static_cast<uint16_t>(rid - 4));
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(p.enterprise >> s));
    b.insert(b.end(), p.remote_id.begin(), p.remote_id.begin() + static_cast<long>(rid - 8));
  }
  put_opt(b, kOptRelayMsg, client.data(), client.size());
  return b;
}

std::optional<RelayReply6> parse_relay_reply(std::span<const uint8_t> b, Relay6Error* err) {
  auto fail = [&](Relay6Error e) {
    *err = e;
    return std::nullopt;
  };
  *err = Relay6Error::kNone;
  if (b.size() < kRelayHeader) return fail(Relay6Error::kTruncated);
  if (b[0] != kRelayRepl) return fail(Relay6Error::kNotRelayReply);
  RelayReply6 r;
  r.hop_count = b[1];
  std::memcpy(r.link_address.data(), &b[2], 16);
  std::memcpy(r.peer_address.data(), &b[18], 16);
  bool have_msg = false;
  for (size_t i = kRelayHeader; i < b.size();) {
    if (i + 4 > b.size()) return fail(Relay6Error::kOptionOverflow);
    const uint16_t code = be::get16(&b[i]), len = be::get16(&b[i + 2]);
    if (i + 4 + len > b.size()) return fail(Relay6Error::kOptionOverflow);
    const uint8_t* v = &b[i + 4];
    if (code == kOptRelayMsg && len > 0) {
      r.message.assign(v, v + len);
      r.message_type = v[0];
      have_msg = true;
    } else if (code == kOptInterfaceId) {
      r.interface_id.assign(reinterpret_cast<const char*>(v), len);
    }
    i += 4 + len;
  }
  if (!have_msg) return fail(Relay6Error::kNoRelayMessage);
  return r;
}

namespace {

constexpr uint16_t kOptIaNa = 3, kOptIaAddr = 5, kOptStatus = 13, kOptIaPd = 25, kOptIaPrefix = 26;

// Walks the options of [b, e): f(code, value, len) for each; false when one
// runs past the end.
template <typename F>
bool each_option(const uint8_t* b, const uint8_t* e, F&& f) {
  while (b < e) {
    if (e - b < 4) return false;
    const uint16_t code = be::get16(b), len = be::get16(b + 2);
    if (static_cast<size_t>(e - b - 4) < len) return false;
    if (!f(code, b + 4, len)) return false;
    b += 4 + len;
  }
  return true;
}

// One IA_NA or IA_PD's options (after IAID, T1, T2) into r.
bool read_ia(uint16_t ia, const uint8_t* v, size_t len, Reply6Leases& r) {
  std::vector<Lease6Address> addrs;
  std::vector<Lease6Prefix> prefixes;
  uint16_t status = 0;
  const bool ok = each_option(v, v + len, [&](uint16_t code, const uint8_t* o, uint16_t n) {
    if (code == kOptStatus) {
      if (n < 2) return false;
      status = be::get16(o);
    } else if (ia == kOptIaNa && code == kOptIaAddr) {
      if (n < 24) return false;
      Lease6Address a;
      std::memcpy(a.address.data(), o, 16);
      a.preferred = be::get32(o + 16);
      a.valid = be::get32(o + 20);
      addrs.push_back(a);
    } else if (ia == kOptIaPd && code == kOptIaPrefix) {
      if (n < 25 || o[8] > 128) return false;
      Lease6Prefix p;
      p.preferred = be::get32(o);
      p.valid = be::get32(o + 4);
      p.length = o[8];
      std::memcpy(p.prefix.data(), o + 9, 16);
      prefixes.push_back(p);
    }
    return true;
  });
  if (!ok) return false;
  if (status != 0) return true;  // NoAddrsAvail, NoBinding, ...: the IA holds nothing
  for (const auto& a : addrs)
    if (r.addresses.size() < kMaxLeases6) r.addresses.push_back(a);
  for (const auto& p : prefixes)
    if (r.prefixes.size() < kMaxLeases6) r.prefixes.push_back(p);
  return true;
}

}  // namespace

std::optional<Reply6Leases> parse_reply_leases(std::span<const uint8_t> msg) {
  if (msg.size() < 4) return std::nullopt;
  if (msg[0] != 2 && msg[0] != 7) return std::nullopt;  // ADVERTISE, REPLY
  Reply6Leases r;
  r.message_type = msg[0];
  r.transaction_id = (uint32_t{msg[1]} << 16) | (uint32_t{msg[2]} << 8) | msg[3];
  const bool ok = each_option(msg.data() + 4, msg.data() + msg.size(),
                              [&](uint16_t code, const uint8_t* v, uint16_t n) {
                                if (code == kOptStatus) {
                                  if (n < 2) return false;
                                  r.status = be::get16(v);
                                } else if (code == kOptIaNa || code == kOptIaPd) {
                                  if (n < 12) return false;  // IAID, T1, T2
                                  return read_ia(code, v + 12, n - 12u, r);
                                }
                                return true;
                              });
  if (!ok) return std::nullopt;
  return r;
}

}  // namespace xbng::agent::relay
