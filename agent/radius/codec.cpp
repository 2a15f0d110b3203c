#include "radius/codec.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "absl/strings/cord.h"
#include "fmt/format.h"

namespace xbng::radius {

namespace {

// Concatenates anything fmt formats (std::string_view is not absl's here).
template <typename... A>
std::string cat(const A&... a) {
  std::string s;
  ((s += fmt::to_string(a)), ...);
  return s;
}

constexpr const char* kFaultPayload = "type.xbng/radius.Fault";

absl::Status fault(Fault f, std::string_view detail) { return fault_status(f, detail); }

// Data types of the dictionary (RFC 8044 names).
enum class Type : uint8_t { kString, kText, kInteger, kIpv4, kIpv6, kIpv6Prefix, kIfId, kVsa };

struct AttrDef {
  const char* name;
  Type type;
  bool once;  // at most once per packet
};

// The dictionary by attribute type; name == nullptr = not in it (kept raw,
// unchecked). Once-only: RFC 2865 5.44 / RFC 2866 5.13 tables (attributes
// allowed 0-1 in every packet kind), plus the ones xbng reads as single values.
struct Dictionary {
  AttrDef defs[256] = {};
  constexpr Dictionary() {
    auto d = [this](uint8_t t, const char* n, Type ty, bool once) { defs[t] = {n, ty, once}; };
    d(attr::kUserName, "User-Name", Type::kString, true);
    d(attr::kUserPassword, "User-Password", Type::kString, true);
    d(attr::kChapPassword, "CHAP-Password", Type::kString, true);
    d(attr::kNasIpAddress, "NAS-IP-Address", Type::kIpv4, true);
    d(attr::kNasPort, "NAS-Port", Type::kInteger, true);
    d(attr::kServiceType, "Service-Type", Type::kInteger, true);
    d(attr::kFramedProtocol, "Framed-Protocol", Type::kInteger, true);
    d(attr::kFramedIpAddress, "Framed-IP-Address", Type::kIpv4, true);
    d(attr::kFramedIpNetmask, "Framed-IP-Netmask", Type::kIpv4, true);
    d(attr::kFilterId, "Filter-Id", Type::kText, false);
    d(attr::kFramedMtu, "Framed-MTU", Type::kInteger, true);
    d(attr::kReplyMessage, "Reply-Message", Type::kText, false);
    d(attr::kFramedRoute, "Framed-Route", Type::kText, false);
    d(attr::kState, "State", Type::kString, true);
    d(attr::kClass, "Class", Type::kString, false);
    d(attr::kVendorSpecific, "Vendor-Specific", Type::kVsa, false);
    d(attr::kSessionTimeout, "Session-Timeout", Type::kInteger, true);
    d(attr::kIdleTimeout, "Idle-Timeout", Type::kInteger, true);
    d(attr::kTerminationAction, "Termination-Action", Type::kInteger, true);
    d(attr::kCalledStationId, "Called-Station-Id", Type::kString, true);
    d(attr::kCallingStationId, "Calling-Station-Id", Type::kString, true);
    d(attr::kNasIdentifier, "NAS-Identifier", Type::kString, true);
    d(attr::kProxyState, "Proxy-State", Type::kString, false);
    d(attr::kAcctStatusType, "Acct-Status-Type", Type::kInteger, true);
    d(attr::kAcctDelayTime, "Acct-Delay-Time", Type::kInteger, true);
    d(attr::kAcctInputOctets, "Acct-Input-Octets", Type::kInteger, true);
    d(attr::kAcctOutputOctets, "Acct-Output-Octets", Type::kInteger, true);
    d(attr::kAcctSessionId, "Acct-Session-Id", Type::kText, true);
    d(attr::kAcctAuthentic, "Acct-Authentic", Type::kInteger, true);
    d(attr::kAcctSessionTime, "Acct-Session-Time", Type::kInteger, true);
    d(attr::kAcctInputPackets, "Acct-Input-Packets", Type::kInteger, true);
    d(attr::kAcctOutputPackets, "Acct-Output-Packets", Type::kInteger, true);
    d(attr::kAcctTerminateCause, "Acct-Terminate-Cause", Type::kInteger, true);
    d(attr::kAcctMultiSessionId, "Acct-Multi-Session-Id", Type::kText, true);
    d(attr::kAcctLinkCount, "Acct-Link-Count", Type::kInteger, true);
    d(attr::kAcctInputGigawords, "Acct-Input-Gigawords", Type::kInteger, true);
    d(attr::kAcctOutputGigawords, "Acct-Output-Gigawords", Type::kInteger, true);
    d(attr::kEventTimestamp, "Event-Timestamp", Type::kInteger, true);
    d(attr::kNasPortType, "NAS-Port-Type", Type::kInteger, true);
    d(attr::kMessageAuthenticator, "Message-Authenticator", Type::kString, true);
    d(attr::kAcctInterimInterval, "Acct-Interim-Interval", Type::kInteger, true);
    d(attr::kNasPortId, "NAS-Port-Id", Type::kText, true);
    d(attr::kNasIpv6Address, "NAS-IPv6-Address", Type::kIpv6, true);
    d(attr::kFramedInterfaceId, "Framed-Interface-Id", Type::kIfId, true);
    d(attr::kFramedIpv6Prefix, "Framed-IPv6-Prefix", Type::kIpv6Prefix, false);
    d(attr::kFramedIpv6Route, "Framed-IPv6-Route", Type::kText, false);
    d(attr::kErrorCause, "Error-Cause", Type::kInteger, true);
    d(attr::kDelegatedIpv6Prefix, "Delegated-IPv6-Prefix", Type::kIpv6Prefix, false);
    d(attr::kFramedIpv6Address, "Framed-IPv6-Address", Type::kIpv6, false);
  }
};
constexpr Dictionary kDict;

std::string attr_label(uint8_t t) {
  const char* n = kDict.defs[t].name;
  return n ? cat(n, " (", t, ")") : cat("attribute ", t);
}

void put16(Bytes& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v);
}

uint32_t get32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

std::string be32(uint32_t v) {
  std::string s(4, '\0');
  s[0] = static_cast<char>(v >> 24);
  s[1] = static_cast<char>(v >> 16);
  s[2] = static_cast<char>(v >> 8);
  s[3] = static_cast<char>(v);
  return s;
}

// RFC 3162 / RFC 4818 / RFC 8044 ipv6prefix: reserved 0, length 0..128,
// at least ceil(len/8) prefix octets, at most 16, bits past len zero.
absl::Status check_ipv6_prefix(std::string_view v, std::string_view what) {
  if (v.size() < 2 || v.size() > 18)
    return fault(Fault::kBadAttributeValue, cat(what, ": ", v.size(), " octets"));
  auto plen = static_cast<uint8_t>(v[1]);
  if (v[0] != 0) return fault(Fault::kBadAttributeValue, cat(what, ": reserved octet"));
  if (plen > 128) return fault(Fault::kBadAttributeValue, cat(what, ": prefix length ", plen));
  size_t need = (plen + 7u) / 8u;
  if (v.size() - 2 < need)
    return fault(Fault::kBadAttributeValue,
                 cat(what, ": /", plen, " in ", v.size() - 2, " octets"));
  std::array<uint8_t, 16> a{};
  std::memcpy(a.data(), v.data() + 2, v.size() - 2);
  if (!agent::host_bits_zero(a.data(), 16, plen))
    return fault(Fault::kBadAttributeValue, cat(what, ": bits set past /", plen));
  return absl::OkStatus();
}

absl::Status check_value(uint8_t t, std::string_view v) {
  const AttrDef& d = kDict.defs[t];
  if (!d.name) return absl::OkStatus();
  auto size_is = [&](size_t n) -> absl::Status {
    if (v.size() == n) return absl::OkStatus();
    return fault(Fault::kBadAttributeValue,
                 cat(attr_label(t), ": ", v.size(), " octets, expected ", n));
  };
  switch (d.type) {
    case Type::kString:
    case Type::kText:
      if (t == attr::kMessageAuthenticator) return size_is(16);
      if (t == attr::kChapPassword) return size_is(17);
      if (t == attr::kUserPassword && v.size() % 16 != 0)
        return fault(Fault::kBadAttributeValue,
                     cat(attr_label(t), ": ", v.size(), " octets, not a multiple of 16"));
      return absl::OkStatus();
    case Type::kInteger:
    case Type::kIpv4:
      return size_is(4);
    case Type::kIpv6:
      return size_is(16);
    case Type::kIfId:
      return size_is(8);
    case Type::kIpv6Prefix:
      return check_ipv6_prefix(v, attr_label(t));
    case Type::kVsa: {
      if (v.size() < 4)
        return fault(Fault::kBadAttributeValue,
                     cat("Vendor-Specific: ", v.size(), " octets, no vendor id"));
      uint32_t vendor = get32(reinterpret_cast<const uint8_t*>(v.data()));
      if (vendor != kVendorWispr && vendor != kVendorAdslForum) return absl::OkStatus();
      // RFC 2865 5.26 recommended format: type, length, value; both vendors use it.
      const auto* p = reinterpret_cast<const uint8_t*>(v.data());
      size_t off = 4;
      bool seen[256] = {};
      if (v.size() == 4)
        return fault(Fault::kBadAttributeValue,
                     cat("Vendor-Specific ", vendor, ": no sub-attribute"));
      while (off < v.size()) {
        if (v.size() - off < 2)
          return fault(Fault::kAttributeOverrun,
                       cat("Vendor-Specific ", vendor, ": truncated sub-attribute"));
        uint8_t vt = p[off], vl = p[off + 1];
        if (vl < 2)
          return fault(Fault::kAttributeTooShort,
                       cat("Vendor-Specific ", vendor, ": sub-attribute ", vt, " length ", vl));
        if (vl > v.size() - off)
          return fault(Fault::kAttributeOverrun, cat("Vendor-Specific ", vendor, ": sub-attribute ",
                                                     vt, " length ", vl, " past the attribute"));
        size_t n = vl - 2u;
        if (vendor == kVendorWispr &&
            (vt == kWisprBandwidthMaxUp || vt == kWisprBandwidthMaxDown)) {
          if (n != 4)
            return fault(Fault::kBadAttributeValue,
                         cat("WISPr-Bandwidth-Max-", vt == 7 ? "Up" : "Down", ": ", n,
                             " octets, expected 4"));
          if (seen[vt])
            return fault(Fault::kIllegalRepeat,
                         cat("WISPr-Bandwidth-Max-", vt == 7 ? "Up" : "Down", " repeated"));
        }
        if (vendor == kVendorAdslForum && (vt == kAdslAgentCircuitId || vt == kAdslAgentRemoteId)) {
          if (n == 0 || n > 63)
            return fault(
                Fault::kBadAttributeValue,
                cat(vt == 1 ? "Agent-Circuit-Id" : "Agent-Remote-Id", ": ", n, " octets (1..63)"));
        }
        seen[vt] = true;
        off += vl;
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// MD5, fetched from the provider once (EVP_md5() alone makes OpenSSL 3 look
// it up again at every EVP_DigestInit_ex), with a context per thread that is
// reset, not allocated, per digest: RADIUS signs and checks two digests per
// request at storm rates.
const EVP_MD* md5_algorithm() {
  static const EVP_MD* const md = [] {
    const EVP_MD* m = EVP_MD_fetch(nullptr, "MD5", nullptr);
    return m ? m : EVP_md5();
  }();
  return md;
}

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

Authenticator md5(std::initializer_list<std::span<const uint8_t>> parts) {
  thread_local std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
  Authenticator out{};
  EVP_MD_CTX* c = ctx.get();
  unsigned int n = 0;
  if (c && EVP_DigestInit_ex(c, md5_algorithm(), nullptr) == 1) {
    for (auto p : parts) EVP_DigestUpdate(c, p.data(), p.size());
    EVP_DigestFinal_ex(c, out.data(), &n);
  }
  return out;
}

std::span<const uint8_t> sv(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// HMAC-MD5 (RFC 2104) on md5() above: MD5((K ^ opad) || MD5((K ^ ipad) ||
// data)), K the key (its MD5 when above the 64-octet block) padded with
// zeros to the block.
Authenticator hmac_md5(std::span<const uint8_t> data, std::string_view key) {
  constexpr size_t kBlock = 64;
  std::array<uint8_t, kBlock> k{}, ipad, opad;
  if (key.size() > kBlock) {
    const Authenticator h = md5({sv(key)});
    std::memcpy(k.data(), h.data(), h.size());
  } else {
    std::memcpy(k.data(), key.data(), key.size());
  }
  for (size_t i = 0; i < kBlock; ++i) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  const Authenticator inner = md5({ipad, data});
  return md5({opad, inner});
}

// Offset of the first Message-Authenticator value in an encoded packet
// (decoded already, so the layout is sound), or 0.
size_t find_ma_offset(std::span<const uint8_t> b) {
  size_t len = size_t{b[2]} << 8 | b[3];
  for (size_t off = kHeaderLen; off + 2 <= len;) {
    if (b[off] == attr::kMessageAuthenticator) return off + 2;
    off += b[off + 1];
  }
  return 0;
}

// HMAC-MD5 of `b` with its authenticator field replaced by `auth_field` and
// the Message-Authenticator value at `ma` zeroed.
Authenticator compute_ma(std::span<const uint8_t> b, size_t ma, const Authenticator& auth_field,
                         std::string_view secret) {
  Bytes copy(b.begin(), b.end());
  std::memcpy(copy.data() + 4, auth_field.data(), 16);
  std::memset(copy.data() + ma, 0, 16);
  return hmac_md5(copy, secret);
}

bool equal16(const uint8_t* a, const uint8_t* b) { return CRYPTO_memcmp(a, b, 16) == 0; }

absl::StatusOr<Bytes> encode_with_ma(uint8_t code, uint8_t id, const Authenticator& auth,
                                     std::vector<Attribute> attrs, bool ma, size_t* ma_off) {
  *ma_off = 0;
  if (ma)
    attrs.insert(attrs.begin(), Attribute{attr::kMessageAuthenticator, std::string(16, '\0')});
  Packet p{code, id, auth, std::move(attrs)};
  auto b = encode(p);
  if (b.ok() && ma) *ma_off = kHeaderLen + 2;
  return b;
}

constexpr Authenticator kZeroAuth{};

}  // namespace

const char* code_name(uint8_t code) {
  switch (code) {
    case kAccessRequest:
      return "Access-Request";
    case kAccessAccept:
      return "Access-Accept";
    case kAccessReject:
      return "Access-Reject";
    case kAccountingRequest:
      return "Accounting-Request";
    case kAccountingResponse:
      return "Accounting-Response";
    case kAccessChallenge:
      return "Access-Challenge";
    case kDisconnectRequest:
      return "Disconnect-Request";
    case kDisconnectAck:
      return "Disconnect-ACK";
    case kDisconnectNak:
      return "Disconnect-NAK";
    case kCoaRequest:
      return "CoA-Request";
    case kCoaAck:
      return "CoA-ACK";
    case kCoaNak:
      return "CoA-NAK";
  }
  return "unknown code";
}

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::kNone:
      return "none";
    case Fault::kTooShort:
      return "too_short";
    case Fault::kTooLong:
      return "too_long";
    case Fault::kLengthMismatch:
      return "length_mismatch";
    case Fault::kAttributeOverrun:
      return "attribute_overrun";
    case Fault::kAttributeTooShort:
      return "attribute_too_short";
    case Fault::kBadAttributeValue:
      return "bad_attribute_value";
    case Fault::kIllegalRepeat:
      return "illegal_repeat";
    case Fault::kValueTooLong:
      return "value_too_long";
    case Fault::kMissingMessageAuthenticator:
      return "missing_message_authenticator";
    case Fault::kBadMessageAuthenticator:
      return "bad_message_authenticator";
    case Fault::kBadAuthenticator:
      return "bad_authenticator";
    case Fault::kUnexpectedCode:
      return "unexpected_code";
  }
  return "unknown";
}

absl::Status fault_status(Fault f, std::string_view detail) {
  absl::Status s = absl::InvalidArgumentError(cat(fault_name(f), ": ", detail));
  s.SetPayload(kFaultPayload, absl::Cord(std::to_string(static_cast<int>(f))));
  return s;
}

Fault fault_of(const absl::Status& s) {
  if (s.ok()) return Fault::kNone;
  auto p = s.GetPayload(kFaultPayload);
  if (!p) return Fault::kNone;
  int v = std::atoi(std::string(*p).c_str());
  return v > 0 && v < kFaultCount ? static_cast<Fault>(v) : Fault::kNone;
}

const Attribute* Packet::find(uint8_t type) const {
  for (const auto& a : attrs)
    if (a.type == type) return &a;
  return nullptr;
}

std::optional<std::string_view> Packet::find_vendor(uint32_t vendor, uint8_t vtype) const {
  for (const auto& a : attrs) {
    if (a.type != attr::kVendorSpecific || a.value.size() < 4) continue;
    const auto* p = reinterpret_cast<const uint8_t*>(a.value.data());
    if (get32(p) != vendor) continue;
    for (size_t off = 4; off + 2 <= a.value.size();) {
      uint8_t vl = p[off + 1];
      if (vl < 2 || off + vl > a.value.size()) break;
      if (p[off] == vtype) return std::string_view(a.value).substr(off + 2, vl - 2u);
      off += vl;
    }
  }
  return std::nullopt;
}

absl::StatusOr<Packet> decode(std::span<const uint8_t> b) {
  if (b.size() < kHeaderLen)
    return fault(Fault::kTooShort, cat(b.size(), " octets, the header is 20"));
  size_t len = size_t{b[2]} << 8 | b[3];
  if (len > kMaxPacketLen) return fault(Fault::kTooLong, cat("Length ", len, " above 4096"));
  if (len < kHeaderLen) return fault(Fault::kLengthMismatch, cat("Length ", len));
  if (len > b.size())
    return fault(Fault::kLengthMismatch,
                 cat("Length ", len, " but the datagram has ", b.size(), " octets"));
  Packet p;
  p.code = b[0];
  p.id = b[1];
  std::memcpy(p.authenticator.data(), b.data() + 4, 16);
  bool seen[256] = {};
  for (size_t off = kHeaderLen; off < len;) {
    if (len - off < 2) return fault(Fault::kAttributeOverrun, cat("1 octet left at offset ", off));
    uint8_t t = b[off], al = b[off + 1];
    if (al < 2)
      return fault(Fault::kAttributeTooShort,
                   cat(attr_label(t), " length ", al, " at offset ", off));
    if (al > len - off)
      return fault(Fault::kAttributeOverrun,
                   cat(attr_label(t), " length ", al, " at offset ", off, " past Length ", len));
    if (kDict.defs[t].once && seen[t])
      return fault(Fault::kIllegalRepeat, cat(attr_label(t), " repeated"));
    seen[t] = true;
    std::string_view v(reinterpret_cast<const char*>(b.data() + off + 2), al - 2u);
    if (auto s = check_value(t, v); !s.ok()) return s;
    p.attrs.push_back({t, std::string(v)});
    off += al;
  }
  return p;
}

absl::StatusOr<Bytes> encode(const Packet& p) {
  Bytes b(kHeaderLen);
  b[0] = p.code;
  b[1] = p.id;
  std::memcpy(b.data() + 4, p.authenticator.data(), 16);
  for (const auto& a : p.attrs) {
    if (a.value.size() > kMaxAttrValueLen)
      return fault(Fault::kValueTooLong,
                   cat(attr_label(a.type), ": ", a.value.size(), " octets above 253"));
    b.push_back(a.type);
    b.push_back(static_cast<uint8_t>(a.value.size() + 2));
    b.insert(b.end(), a.value.begin(), a.value.end());
    if (b.size() > kMaxPacketLen)
      return fault(Fault::kTooLong, cat("the attributes exceed 4096 octets"));
  }
  put16(b, 2, static_cast<uint16_t>(b.size()));
  return b;
}

Attribute make_string(uint8_t type, std::string_view v) { return {type, std::string(v)}; }
Attribute make_u32(uint8_t type, uint32_t v) { return {type, be32(v)}; }
Attribute make_ipv4(uint8_t type, uint32_t be) {
  return {type, std::string(reinterpret_cast<const char*>(&be), 4)};
}
Attribute make_ipv6(uint8_t type, const Ipv6& a) {
  return {type, std::string(reinterpret_cast<const char*>(a.data()), 16)};
}
Attribute make_ipv6_prefix(uint8_t type, const Prefix& p) {
  std::string v(2, '\0');
  v[1] = static_cast<char>(p.len);
  v.append(reinterpret_cast<const char*>(p.addr.data()), (p.len + 7u) / 8u);
  return {type, v};
}
Attribute make_vendor(uint32_t vendor, uint8_t vtype, std::string_view v) {
  std::string s = be32(vendor);
  s.push_back(static_cast<char>(vtype));
  s.push_back(static_cast<char>(v.size() + 2));
  s.append(v);
  return {attr::kVendorSpecific, s};
}
Attribute make_vendor_u32(uint32_t vendor, uint8_t vtype, uint32_t v) {
  return make_vendor(vendor, vtype, be32(v));
}

std::optional<uint32_t> as_u32(std::string_view v) {
  if (v.size() != 4) return std::nullopt;
  return get32(reinterpret_cast<const uint8_t*>(v.data()));
}

std::optional<Prefix> as_ipv6_prefix(std::string_view v) {
  if (!check_ipv6_prefix(v, "prefix").ok()) return std::nullopt;
  Prefix p;
  p.family = 6;
  p.len = static_cast<uint8_t>(v[1]);
  std::memcpy(p.addr.data(), v.data() + 2, v.size() - 2);
  return p;
}

absl::StatusOr<std::string> hide_password(std::string_view plain, std::string_view secret,
                                          const Authenticator& ra) {
  if (plain.size() > 128)
    return fault(Fault::kValueTooLong, cat("User-Password: ", plain.size(), " octets above 128"));
  std::string out(plain);
  // At least one block: RFC 2865 5.2 gives the attribute 16..128 octets, and
  // servers (FreeRADIUS) drop a zero-length User-Password as absent.
  out.resize(std::max<size_t>(16, (plain.size() + 15) / 16 * 16), '\0');
  std::span<const uint8_t> prev(ra.data(), 16);
  for (size_t i = 0; i < out.size(); i += 16) {
    Authenticator b = md5({sv(secret), prev});
    for (size_t j = 0; j < 16; ++j) out[i + j] = static_cast<char>(out[i + j] ^ b[j]);
    prev = sv(std::string_view(out).substr(i, 16));
  }
  return out;
}

absl::StatusOr<std::string> unhide_password(std::string_view hidden, std::string_view secret,
                                            const Authenticator& ra) {
  if (hidden.size() % 16 != 0 || hidden.size() > 128)
    return fault(Fault::kBadAttributeValue, cat("User-Password: ", hidden.size(), " octets"));
  std::string out(hidden);
  std::span<const uint8_t> prev(ra.data(), 16);
  for (size_t i = 0; i < out.size(); i += 16) {
    Authenticator b = md5({sv(secret), prev});
    for (size_t j = 0; j < 16; ++j) out[i + j] = static_cast<char>(out[i + j] ^ b[j]);
    prev = sv(hidden.substr(i, 16));
  }
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

Authenticator random_authenticator() {
  Authenticator a{};
  if (RAND_bytes(a.data(), 16) != 1) {
    // RAND_bytes only fails when the system has no entropy source; a
    // predictable authenticator weakens the reply check, so fall back to
    // the kernel's generator directly.
    FILE* f = std::fopen("/dev/urandom", "rb");
    if (f) {
      size_t n = std::fread(a.data(), 1, 16, f);
      (void)n;
      std::fclose(f);
    }
  }
  return a;
}

absl::StatusOr<Bytes> build_access_request(uint8_t id, const Authenticator& ra,
                                           std::vector<Attribute> attrs, std::string_view secret) {
  for (auto& a : attrs) {
    if (a.type == attr::kMessageAuthenticator)
      return absl::InvalidArgumentError("Message-Authenticator is added by the codec");
    if (a.type != attr::kUserPassword) continue;
    auto h = hide_password(a.value, secret, ra);
    if (!h.ok()) return h.status();
    a.value = std::move(*h);
  }
  size_t ma = 0;
  auto b = encode_with_ma(kAccessRequest, id, ra, std::move(attrs), true, &ma);
  if (!b.ok()) return b;
  Authenticator m = compute_ma(*b, ma, ra, secret);
  std::memcpy(b->data() + ma, m.data(), 16);
  return b;
}

absl::StatusOr<Bytes> build_signed_request(uint8_t code, uint8_t id, std::vector<Attribute> attrs,
                                           std::string_view secret, bool message_authenticator) {
  size_t ma = 0;
  auto b = encode_with_ma(code, id, kZeroAuth, std::move(attrs), message_authenticator, &ma);
  if (!b.ok()) return b;
  if (ma) {
    Authenticator m = compute_ma(*b, ma, kZeroAuth, secret);
    std::memcpy(b->data() + ma, m.data(), 16);
  }
  Authenticator a = md5({*b, sv(secret)});
  std::memcpy(b->data() + 4, a.data(), 16);
  return b;
}

absl::StatusOr<Bytes> build_response(uint8_t code, uint8_t id, const Authenticator& ra,
                                     std::vector<Attribute> attrs, std::string_view secret,
                                     bool message_authenticator) {
  size_t ma = 0;
  auto b = encode_with_ma(code, id, ra, std::move(attrs), message_authenticator, &ma);
  if (!b.ok()) return b;
  if (ma) {
    Authenticator m = compute_ma(*b, ma, ra, secret);
    std::memcpy(b->data() + ma, m.data(), 16);
  }
  Authenticator a = md5({*b, sv(secret)});
  std::memcpy(b->data() + 4, a.data(), 16);
  return b;
}

absl::StatusOr<Packet> verify_response(std::span<const uint8_t> bytes, const Authenticator& ra,
                                       std::string_view secret, bool require_ma) {
  auto p = decode(bytes);
  if (!p.ok()) return p;
  switch (p->code) {
    case kAccessAccept:
    case kAccessReject:
    case kAccessChallenge:
    case kAccountingResponse:
    case kCoaAck:
    case kCoaNak:
    case kDisconnectAck:
    case kDisconnectNak:
      break;
    default:
      return fault(Fault::kUnexpectedCode,
                   cat(code_name(p->code), " (", p->code, ") is not a reply"));
  }
  size_t len = size_t{bytes[2]} << 8 | bytes[3];
  auto pkt = bytes.first(len);
  // Response Authenticator: MD5 over the reply with the request's authenticator.
  Bytes copy(pkt.begin(), pkt.end());
  std::memcpy(copy.data() + 4, ra.data(), 16);
  Authenticator want = md5({copy, sv(secret)});
  if (!equal16(want.data(), pkt.data() + 4))
    return fault(Fault::kBadAuthenticator, "Response Authenticator does not match");
  size_t ma = find_ma_offset(pkt);
  if (ma) {
    Authenticator m = compute_ma(pkt, ma, ra, secret);
    if (!equal16(m.data(), pkt.data() + ma))
      return fault(Fault::kBadMessageAuthenticator, "Message-Authenticator does not match");
  } else if (require_ma && (p->code == kAccessAccept || p->code == kAccessReject ||
                            p->code == kAccessChallenge)) {
    return fault(Fault::kMissingMessageAuthenticator,
                 cat(code_name(p->code), " without Message-Authenticator"));
  }
  return p;
}

absl::StatusOr<Packet> verify_request(std::span<const uint8_t> bytes, std::string_view secret) {
  auto p = decode(bytes);
  if (!p.ok()) return p;
  size_t len = size_t{bytes[2]} << 8 | bytes[3];
  auto pkt = bytes.first(len);
  size_t ma = find_ma_offset(pkt);
  switch (p->code) {
    case kAccessRequest:
      if (!ma)
        return fault(Fault::kMissingMessageAuthenticator,
                     "Access-Request without Message-Authenticator");
      if (!equal16(compute_ma(pkt, ma, p->authenticator, secret).data(), pkt.data() + ma))
        return fault(Fault::kBadMessageAuthenticator, "Message-Authenticator does not match");
      return p;
    case kAccountingRequest:
    case kCoaRequest:
    case kDisconnectRequest: {
      Bytes copy(pkt.begin(), pkt.end());
      std::memset(copy.data() + 4, 0, 16);
      Authenticator want = md5({copy, sv(secret)});
      if (!equal16(want.data(), pkt.data() + 4))
        return fault(Fault::kBadAuthenticator, "Request Authenticator does not match");
      if (ma && !equal16(compute_ma(pkt, ma, kZeroAuth, secret).data(), pkt.data() + ma))
        return fault(Fault::kBadMessageAuthenticator, "Message-Authenticator does not match");
      return p;
    }
    default:
      return fault(Fault::kUnexpectedCode,
                   cat(code_name(p->code), " (", p->code, ") is not a request"));
  }
}

absl::StatusOr<Authorization> decode_authorization(const Packet& p) {
  Authorization a;
  bool seen_up = false, seen_down = false;
  for (const auto& at : p.attrs) {
    a.raw.emplace_back(at.type, at.value);
    const std::string& v = at.value;
    // A packet built by hand rather than by decode() may hold any sizes.
    if (auto s = check_value(at.type, v); !s.ok()) return s;
    switch (at.type) {
      case attr::kFramedIpAddress: {
        uint32_t be;
        std::memcpy(&be, v.data(), 4);
        a.framed_ip = be;
        break;
      }
      case attr::kFramedIpv6Address: {
        if (a.framed_ipv6)
          return fault(Fault::kIllegalRepeat, "Framed-IPv6-Address (168) repeated");
        Ipv6 x;
        std::memcpy(x.data(), v.data(), 16);
        a.framed_ipv6 = x;
        break;
      }
      case attr::kDelegatedIpv6Prefix:
      case attr::kFramedIpv6Prefix: {
        auto px = as_ipv6_prefix(v);
        if (!px) return fault(Fault::kBadAttributeValue, attr_label(at.type));
        (at.type == attr::kDelegatedIpv6Prefix ? a.delegated_v6 : a.framed_v6_prefix)
            .push_back(*px);
        break;
      }
      case attr::kFramedRoute:
        a.framed_routes.push_back(v);
        break;
      case attr::kFramedIpv6Route:
        a.framed_v6_routes.push_back(v);
        break;
      case attr::kSessionTimeout:
        a.session_timeout = as_u32(v);
        break;
      case attr::kIdleTimeout:
        a.idle_timeout = as_u32(v);
        break;
      case attr::kAcctInterimInterval:
        a.interim_interval = as_u32(v);
        break;
      case attr::kClass:
        a.classes.push_back(v);
        break;
      case attr::kFilterId:
        if (a.filter_id)
          return fault(Fault::kIllegalRepeat, "Filter-Id (11) repeated: the plan is ambiguous");
        a.filter_id = v;
        break;
      case attr::kVendorSpecific: {
        if (as_u32(std::string_view(v).substr(0, 4)) != kVendorWispr) break;
        const auto* b = reinterpret_cast<const uint8_t*>(v.data());
        for (size_t off = 4; off + 2 <= v.size();) {
          uint8_t vt = b[off], vl = b[off + 1];
          if (vl < 2 || off + vl > v.size()) break;  // decode() refused these already
          auto val = as_u32(std::string_view(v).substr(off + 2, vl - 2u));
          if (vt == kWisprBandwidthMaxUp && val) {
            if (seen_up) return fault(Fault::kIllegalRepeat, "WISPr-Bandwidth-Max-Up repeated");
            seen_up = true;
            a.wispr_up_bps = *val;
          } else if (vt == kWisprBandwidthMaxDown && val) {
            if (seen_down) return fault(Fault::kIllegalRepeat, "WISPr-Bandwidth-Max-Down repeated");
            seen_down = true;
            a.wispr_down_bps = *val;
          }
          off += vl;
        }
        break;
      }
      default:
        break;
    }
  }
  return a;
}

}  // namespace xbng::radius
