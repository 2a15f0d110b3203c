#include "radius/dynauth.h"

#include <arpa/inet.h>

#include <cstring>

namespace xbng::radius {

namespace {

// The causes counted by name; anything else is counted as "other".
constexpr uint32_t kOutcomeCauses[] = {error_cause::kUnsupportedAttribute,
                                       error_cause::kMissingAttribute,
                                       error_cause::kNasIdentificationMismatch,
                                       error_cause::kInvalidRequest,
                                       error_cause::kUnsupportedService,
                                       error_cause::kInvalidAttributeValue,
                                       error_cause::kSessionContextNotFound,
                                       error_cause::kResourcesUnavailable,
                                       error_cause::kMultipleSessionSelectionUnsupported};
constexpr int kCauseCount = sizeof(kOutcomeCauses) / sizeof(kOutcomeCauses[0]);

int outcome_index(uint32_t cause) {
  if (cause == 0) return 0;
  for (int i = 0; i < kCauseCount; ++i)
    if (kOutcomeCauses[i] == cause) return i + 1;
  return kCauseCount + 1;  // other
}

std::string outcome_name(int i) {
  if (i == 0) return "ack";
  if (i <= kCauseCount) return error_cause_name(kOutcomeCauses[i - 1]);
  return "other";
}

absl::Status repeat(const char* what) {
  return fault_status(Fault::kIllegalRepeat, std::string(what) + " repeated");
}

std::optional<std::array<uint8_t, 16>> addr16(std::string_view s) {
  std::array<uint8_t, 16> a{};
  if (auto v4 = agent::parse_ipv4(s)) {
    a[10] = a[11] = 0xff;
    std::memcpy(a.data() + 12, &*v4, 4);
    return a;
  }
  if (auto v6 = agent::parse_ipv6(s)) {
    std::memcpy(a.data(), v6->data(), 16);
    return a;
  }
  return std::nullopt;
}

}  // namespace

std::string error_cause_name(uint32_t c) {
  switch (c) {
    case error_cause::kUnsupportedAttribute:
      return "unsupported_attribute";
    case error_cause::kMissingAttribute:
      return "missing_attribute";
    case error_cause::kNasIdentificationMismatch:
      return "nas_identification_mismatch";
    case error_cause::kInvalidRequest:
      return "invalid_request";
    case error_cause::kUnsupportedService:
      return "unsupported_service";
    case error_cause::kInvalidAttributeValue:
      return "invalid_attribute_value";
    case error_cause::kSessionContextNotFound:
      return "session_context_not_found";
    case error_cause::kResourcesUnavailable:
      return "resources_unavailable";
    case error_cause::kMultipleSessionSelectionUnsupported:
      return "multiple_session_selection_unsupported";
  }
  return "error_cause_" + std::to_string(c);
}

const char* drop_name(int r) {
  if (r >= 0 && r < kFaultCount) return fault_name(static_cast<Fault>(r));
  switch (static_cast<DynAuthDrop>(r)) {
    case DynAuthDrop::kUnknownSource:
      return "unknown_source";
    case DynAuthDrop::kStaleTimestamp:
      return "stale_event_timestamp";
    case DynAuthDrop::kSendError:
      return "send_error";
    case DynAuthDrop::kCount:
      break;
  }
  return "unknown";
}

namespace {

// Notes why the request is refused; the first fault found is the one reported.
void refuse(DynAuthRequest* r, uint32_t cause, std::string why) {
  if (r->error_cause == 0) {
    r->error_cause = cause;
    r->why = std::move(why);
  }
}

void unsupported(DynAuthRequest* r, uint8_t code, uint8_t type) {
  refuse(r, error_cause::kUnsupportedAttribute,
         "attribute " + std::to_string(type) + " is not supported in a " + code_name(code));
}

// The attributes that name the session (and the NAS asked): true when `a` is
// one of them.
bool read_identity(const Attribute& a, DynAuthRequest* r) {
  const std::string& v = a.value;
  switch (a.type) {
    case attr::kNasIdentifier:
      r->nas_identifier = v;
      return true;
    case attr::kNasIpAddress: {
      uint32_t be;
      std::memcpy(&be, v.data(), 4);
      r->nas_ipv4 = be;
      return true;
    }
    case attr::kNasIpv6Address: {
      agent::Ipv6 x;
      std::memcpy(x.data(), v.data(), 16);
      r->nas_ipv6 = x;
      return true;
    }
    case attr::kUserName:
      r->user_name = v;
      return true;
    case attr::kAcctSessionId:
      r->session_id = v;
      return true;
    case attr::kNasPortId:
      r->nas_port_id = v;
      return true;
    case attr::kFramedIpAddress: {
      uint32_t be;
      std::memcpy(&be, v.data(), 4);
      r->framed_ip = be;
      return true;
    }
    default:
      return false;
  }
}

// The WISPr sub-attributes of a CoA's Vendor-Specific attribute `v`.
absl::Status read_wispr(const std::string& v, DynAuthRequest* r) {
  const auto* b = reinterpret_cast<const uint8_t*>(v.data());
  for (size_t off = 4; off + 2 <= v.size();) {
    const uint8_t vt = b[off], vl = b[off + 1];
    if (vl < 2 || off + vl > v.size()) break;  // decode() refused these already
    auto val = as_u32(std::string_view(v).substr(off + 2, vl - 2u));
    if (vt == kWisprBandwidthMaxUp && val) {
      if (r->change.wispr_up) return repeat("WISPr-Bandwidth-Max-Up");
      r->change.wispr_up = *val;
    } else if (vt == kWisprBandwidthMaxDown && val) {
      if (r->change.wispr_down) return repeat("WISPr-Bandwidth-Max-Down");
      r->change.wispr_down = *val;
    } else {
      refuse(r, error_cause::kUnsupportedAttribute,
             "WISPr attribute " + std::to_string(vt) + " is not supported");
    }
    off += vl;
  }
  return absl::OkStatus();
}

// Any attribute but those naming the session: what to change, and what is
// refused in a request of `code`.
absl::Status read_request_attribute(const Attribute& a, uint8_t code, DynAuthRequest* r) {
  const bool coa = code == kCoaRequest;
  const std::string& v = a.value;
  switch (a.type) {
    case attr::kMessageAuthenticator:
    case attr::kEventTimestamp:  // checked by the handler
      break;
    case attr::kProxyState:
      r->proxy_states.push_back(v);
      break;
    case attr::kAcctTerminateCause:  // a Disconnect's reason: Admin-Reset is noted
      if (coa) unsupported(r, code, a.type);
      break;
    case attr::kServiceType:
      // Authorize-Only (17) asks for a new Access-Request round trip.
      if (as_u32(v) == 17u)
        refuse(r, error_cause::kUnsupportedService, "Service-Type Authorize-Only");
      else
        unsupported(r, code, a.type);
      break;
    case attr::kFilterId:
      if (!coa) {
        unsupported(r, code, a.type);
        break;
      }
      if (r->change.filter_id) return repeat("Filter-Id (11)");
      r->change.filter_id = v;
      break;
    case attr::kSessionTimeout:
      if (coa)
        r->change.session_timeout = as_u32(v);
      else
        unsupported(r, code, a.type);
      break;
    case attr::kIdleTimeout:
      if (coa)
        r->change.idle_timeout = as_u32(v);
      else
        unsupported(r, code, a.type);
      break;
    case attr::kVendorSpecific:
      if (!coa || v.size() < 4 || as_u32(std::string_view(v).substr(0, 4)) != kVendorWispr) {
        unsupported(r, code, a.type);
        break;
      }
      return read_wispr(v, r);
    default:
      unsupported(r, code, a.type);
      break;
  }
  return absl::OkStatus();
}

// What the whole request must hold.
void check_request(bool coa, DynAuthRequest* r) {
  if (!r->session_id && !r->user_name && !r->nas_port_id && !r->framed_ip)
    refuse(r, error_cause::kMissingAttribute,
           "no Acct-Session-Id, User-Name, NAS-Port-Id or Framed-IP-Address");
  if (coa && r->change.empty())
    refuse(r, error_cause::kMissingAttribute,
           "nothing to change (Filter-Id, WISPr-Bandwidth-Max-Up/Down, Session-Timeout, "
           "Idle-Timeout)");
  if (r->change.filter_id && (r->change.wispr_up || r->change.wispr_down))
    refuse(r, error_cause::kInvalidRequest,
           "both Filter-Id and a WISPr rate: the plan is ambiguous");
}

}  // namespace

absl::StatusOr<DynAuthRequest> parse_dynauth(const Packet& p) {
  DynAuthRequest r;
  r.code = p.code;
  const bool coa = p.code == kCoaRequest;
  for (const auto& a : p.attrs) {
    if (read_identity(a, &r)) continue;
    if (absl::Status s = read_request_attribute(a, p.code, &r); !s.ok()) return s;
  }
  check_request(coa, &r);
  return r;
}

size_t DynAuth::CacheKeyHash::operator()(const CacheKey& k) const {
  uint64_t h = k.client * 0x9e3779b97f4a7c15ull ^ k.id;
  for (uint8_t b : k.auth) h = (h ^ b) * 0x100000001b3ull;
  return static_cast<size_t>(h);
}

DynAuth::DynAuth(DynAuthOptions opts, DynAuthBackend* backend)
    : opts_(std::move(opts)), backend_(backend) {
  for (const auto& c : opts_.clients)
    client_addrs_.push_back(addr16(c.address).value_or(std::array<uint8_t, 16>{}));
}

std::optional<size_t> DynAuth::client_of(std::string_view src) const {
  auto a = addr16(src);
  if (!a) return std::nullopt;
  for (size_t i = 0; i < client_addrs_.size(); ++i)
    if (client_addrs_[i] == *a) return i;
  return std::nullopt;
}

void DynAuth::count_drop(int reason) {
  if (reason >= 0 && reason < kDynAuthDropCount)
    drops_[reason].fetch_add(1, std::memory_order_relaxed);
}

void DynAuth::expire(uint64_t now) {
  while (!cache_order_.empty() &&
         (cache_order_.front().first <= now || cache_.size() > opts_.cache_entries)) {
    auto it = cache_.find(cache_order_.front().second);
    // The entry may have been replaced by a later one with the same key.
    if (it != cache_.end() && it->second.expires == cache_order_.front().first) cache_.erase(it);
    cache_order_.pop_front();
  }
}

std::optional<Bytes> DynAuth::handle(std::span<const uint8_t> dgram, std::string_view src,
                                     uint64_t now) {
  if (dgram.size() > kMaxPacketLen) {
    count_drop(static_cast<int>(Fault::kTooLong));
    return std::nullopt;
  }
  auto client = client_of(src);
  if (!client) {
    count_drop(static_cast<int>(DynAuthDrop::kUnknownSource));
    return std::nullopt;
  }
  const std::string& secret = opts_.clients[*client].secret;
  auto p = verify_request(dgram, secret);
  if (!p.ok()) {
    Fault f = fault_of(p.status());
    count_drop(static_cast<int>(f == Fault::kNone ? Fault::kBadAttributeValue : f));
    return std::nullopt;
  }
  if (p->code != kCoaRequest && p->code != kDisconnectRequest) {
    count_drop(static_cast<int>(Fault::kUnexpectedCode));
    return std::nullopt;
  }
  const int type = p->code == kCoaRequest ? 0 : 1;
  if (const Attribute* ts = p->find(attr::kEventTimestamp)) {
    const uint64_t t = as_u32(ts->value).value_or(0);
    const uint64_t skew = t > now ? t - now : now - t;
    if (skew > opts_.replay_window_s) {
      count_drop(static_cast<int>(DynAuthDrop::kStaleTimestamp));
      return std::nullopt;
    }
  }
  expire(now);
  const CacheKey ck{*client, p->id, p->authenticator};
  if (auto it = cache_.find(ck); it != cache_.end()) {
    retransmits_[type].fetch_add(1, std::memory_order_relaxed);
    return it->second.reply;
  }
  auto req = parse_dynauth(*p);
  if (!req.ok()) {
    count_drop(static_cast<int>(Fault::kIllegalRepeat));
    return std::nullopt;
  }
  const bool ma = p->find(attr::kMessageAuthenticator) != nullptr;
  Bytes reply = answer(*p, *req, secret, ma, type);
  const uint64_t expires = now + opts_.replay_window_s;
  cache_[ck] = Cached{reply, expires};
  cache_order_.emplace_back(expires, ck);
  expire(now);
  return reply;
}

Bytes DynAuth::answer(const Packet& p, const DynAuthRequest& req, const std::string& secret,
                      bool ma, int type) {
  DynAuthRequest r = req;
  auto refuse = [&r](uint32_t cause, std::string why) {
    if (r.error_cause == 0) {
      r.error_cause = cause;
      r.why = std::move(why);
    }
  };
  if (r.nas_identifier && *r.nas_identifier != opts_.nas_identifier)
    refuse(error_cause::kNasIdentificationMismatch, "NAS-Identifier is not ours");
  if (r.nas_ipv4 && opts_.nas_ipv4 && *r.nas_ipv4 != *opts_.nas_ipv4)
    refuse(error_cause::kNasIdentificationMismatch, "NAS-IP-Address is not ours");
  if (r.nas_ipv6 && opts_.nas_ipv6 && *r.nas_ipv6 != *opts_.nas_ipv6)
    refuse(error_cause::kNasIdentificationMismatch, "NAS-IPv6-Address is not ours");

  // Session matching: every identifier present must name the same session.
  std::optional<std::vector<SubKey>> cand;
  auto narrow = [&cand](std::vector<SubKey> found) {
    if (!cand) {
      cand = std::move(found);
      return;
    }
    std::vector<SubKey> both;
    for (const auto& k : *cand)
      for (const auto& f : found)
        if (agent::key_rank(k) == agent::key_rank(f)) {
          both.push_back(k);
          break;
        }
    cand = std::move(both);
  };
  auto one = [](std::optional<SubKey> k) {
    return k ? std::vector<SubKey>{*k} : std::vector<SubKey>{};
  };
  if (r.error_cause == 0) {
    if (r.session_id) narrow(backend_->by_session_id(*r.session_id));
    if (r.user_name && (!cand || !cand->empty())) narrow(backend_->by_user_name(*r.user_name));
    if (r.nas_port_id && (!cand || !cand->empty()))
      narrow(one(backend_->by_nas_port_id(*r.nas_port_id)));
    if (r.framed_ip && (!cand || !cand->empty())) narrow(one(backend_->by_framed_ip(*r.framed_ip)));
    if (!cand || cand->empty())
      refuse(error_cause::kSessionContextNotFound, "no session matches");
    else if (cand->size() > 1)
      refuse(error_cause::kMultipleSessionSelectionUnsupported,
             std::to_string(cand->size()) + " sessions match");
  }
  if (r.error_cause == 0) {
    std::string why;
    const uint32_t c = p.code == kCoaRequest ? backend_->change(cand->front(), r.change, &why)
                                             : backend_->disconnect(cand->front(), &why);
    if (c) refuse(c, why);
  }
  std::vector<Attribute> attrs;
  if (r.error_cause) attrs.push_back(make_u32(attr::kErrorCause, r.error_cause));
  for (const auto& ps : r.proxy_states) attrs.push_back(make_string(attr::kProxyState, ps));
  const uint8_t code = p.code == kCoaRequest ? (r.error_cause ? kCoaNak : kCoaAck)
                                             : (r.error_cause ? kDisconnectNak : kDisconnectAck);
  requests_[type][outcome_index(r.error_cause)].fetch_add(1, std::memory_order_relaxed);
  auto b = build_response(code, p.id, p.authenticator, std::move(attrs), secret, ma);
  if (b.ok()) return std::move(*b);
  // Only too many Proxy-State octets can fail: answer without them.
  std::vector<Attribute> bare;
  if (r.error_cause) bare.push_back(make_u32(attr::kErrorCause, r.error_cause));
  return build_response(code, p.id, p.authenticator, std::move(bare), secret, ma).value();
}

DynAuthCounters DynAuth::counters() const {
  DynAuthCounters c;
  for (int t = 0; t < 2; ++t) {
    for (int o = 0; o < kCauseCount + 2; ++o)
      if (uint64_t n = requests_[t][o].load(std::memory_order_relaxed))
        c.requests[t][outcome_name(o)] = n;
    c.retransmits[t] = retransmits_[t].load(std::memory_order_relaxed);
  }
  for (int d = 1; d < kDynAuthDropCount; ++d)
    if (uint64_t n = drops_[d].load(std::memory_order_relaxed)) c.drops[drop_name(d)] = n;
  return c;
}

}  // namespace xbng::radius
