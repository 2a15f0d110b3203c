// DHCPv6 server: (message, binding, settings, now) → outcome. See server.h
// for the policy; RFC 8415 section numbers below name the rule applied.
#include "bringup/dhcpv6/server.h"

#include <algorithm>

#include "common/wire.h"

namespace xbng::agent::dhcpv6 {

std::string_view kind_name(Kind k) {
  switch (k) {
#define XBNG_DHCPV6_KNAME_(e, m) \
  case Kind::e:                  \
    return m;
    XBNG_DHCPV6_OUTCOMES(XBNG_DHCPV6_KNAME_)
#undef XBNG_DHCPV6_KNAME_
  }
  return "unknown";
}

std::vector<std::string> check_settings(const Settings& s) {
  std::vector<std::string> e;
  auto n = [](uint32_t v) { return std::to_string(v); };
  if (s.server_duid.len < 3) e.push_back("server DUID: not set");
  if (s.preferred_lifetime == 0) e.push_back("preferred lifetime: 0");
  if (s.preferred_lifetime > s.valid_lifetime)
    e.push_back("preferred lifetime " + n(s.preferred_lifetime) + " exceeds the valid lifetime " +
                n(s.valid_lifetime));
  if (s.t1 > s.t2 && s.t2 != 0) e.push_back("T1 " + n(s.t1) + " exceeds T2 " + n(s.t2));
  if (s.t2 > s.preferred_lifetime)
    e.push_back("T2 " + n(s.t2) + " exceeds the preferred lifetime " + n(s.preferred_lifetime));
  if (s.t1 > s.preferred_lifetime)
    e.push_back("T1 " + n(s.t1) + " exceeds the preferred lifetime " + n(s.preferred_lifetime));
  if (s.dns_servers.size() > 16) e.push_back("more than 16 DNS servers");
  return e;
}

namespace {

using wire::Writer;

void put_status(Writer& w, Status s, std::string_view text) {
  size_t o = w.begin(kOptStatusCode);
  w.u16(static_cast<uint16_t>(s));
  w.bytes(text.data(), text.size());
  w.end(o);
}

std::string_view status_text(Status s) {
  switch (s) {
    case Status::kSuccess:
      return "success";
    case Status::kNoAddrsAvail:
      return "no address provisioned for this subscriber";
    case Status::kNoPrefixAvail:
      return "no prefix provisioned for this subscriber";
    case Status::kNoBinding:
      return "no binding for this IA";
    case Status::kNotOnLink:
      return "address not provisioned for this subscriber";
    default:
      return "failure";
  }
}

void put_iaaddr(Writer& w, const Ipv6& a, uint32_t pref, uint32_t valid) {
  size_t o = w.begin(kOptIaAddr);
  w.bytes(a.data(), 16);
  w.u32(pref);
  w.u32(valid);
  w.end(o);
}

void put_iaprefix(Writer& w, const Ipv6& a, uint8_t len, uint32_t pref, uint32_t valid) {
  size_t o = w.begin(kOptIaPrefix);
  w.u32(pref);
  w.u32(valid);
  w.u8(len);
  w.bytes(a.data(), 16);
  w.end(o);
}

bool is_v6(const Prefix& p) { return p.family == 6; }

bool binding_has_prefix(const Binding& b) {
  return std::any_of(b.prefixes.begin(), b.prefixes.end(), is_v6);
}

bool binding_holds(const Binding& b, const Ia& ia, const IaEntry& e) {
  if (ia.type == kOptIaNa) return b.has_address && e.addr == b.address;
  if (ia.type == kOptIaPd)
    for (const Prefix& p : b.prefixes)
      if (is_v6(p) && p.len == e.prefix_len &&
          std::equal(e.addr.begin(), e.addr.end(), p.addr.begin()))
        return true;
  return false;
}

// One IA's answer to SOLICIT/REQUEST/RENEW/REBIND. `first_na`/`first_pd`:
// the binding is handed out to the first IA of each type only (two IA_PDs
// must not both receive the same prefixes). Returns true when something
// was assigned.
bool put_assigning_ia(Writer& w, MsgType type, const Ia& ia, const Binding& b, const Settings& s,
                      bool serve_this) {
  bool renewing = type == MsgType::kRenew || type == MsgType::kRebind;
  bool have = serve_this && (ia.type == kOptIaNa   ? b.has_address
                             : ia.type == kOptIaPd ? binding_has_prefix(b)
                                                   : false);
  size_t o = w.begin(ia.type);
  w.u32(ia.iaid);
  if (ia.type != kOptIaTa) {
    w.u32(have ? s.t1 : 0);
    w.u32(have ? s.t2 : 0);
  }
  // What the client holds that is no longer ours: lifetimes 0 (§18.3.4,
  // §18.3.5), so a re-provisioned subscriber drops the old lease.
  if (renewing)
    for (uint8_t i = 0; i < ia.num_entries; ++i) {
      const IaEntry& e = ia.entries[i];
      if (have && binding_holds(b, ia, e)) continue;
      if (ia.type == kOptIaPd)
        put_iaprefix(w, e.addr, e.prefix_len, 0, 0);
      else
        put_iaaddr(w, e.addr, 0, 0);
    }
  if (have) {
    if (ia.type == kOptIaNa) {
      put_iaaddr(w, b.address, s.preferred_lifetime, s.valid_lifetime);
    } else {
      size_t given = 0;
      for (const Prefix& p : b.prefixes) {
        if (!is_v6(p)) continue;
        if (given++ == kMaxDelegatedPrefixes) break;
        Ipv6 a;
        std::copy(p.addr.begin(), p.addr.end(), a.begin());
        put_iaprefix(w, a, p.len, s.preferred_lifetime, s.valid_lifetime);
      }
    }
  } else if (renewing) {
    put_status(w, Status::kNoBinding, status_text(Status::kNoBinding));
  } else {
    Status st = ia.type == kOptIaPd ? Status::kNoPrefixAvail : Status::kNoAddrsAvail;
    put_status(w, st, status_text(st));
  }
  w.end(o);
  return have;
}

void put_header(Writer& w, MsgType type, uint32_t xid) {
  w.u8(static_cast<uint8_t>(type));
  w.u8(static_cast<uint8_t>(xid >> 16));
  w.u8(static_cast<uint8_t>(xid >> 8));
  w.u8(static_cast<uint8_t>(xid));
}

void put_ids(Writer& w, const Message& m, const Settings& s) {
  size_t o = w.begin(kOptServerId);
  w.bytes(s.server_duid.view());
  w.end(o);
  if (m.has_client_id) {
    o = w.begin(kOptClientId);
    w.bytes(m.client_id.view());
    w.end(o);
  }
}

void put_dns(Writer& w, const Settings& s) {
  if (s.dns_servers.empty()) return;
  size_t o = w.begin(kOptDnsServers);
  for (const Ipv6& a : s.dns_servers) w.bytes(a.data(), 16);
  w.end(o);
}

void set_bound(LeaseChange* l, const Message& m, const Binding& b, const Settings& s,
               uint64_t now) {
  bool na_done = false, pd_done = false;
  for (const Ia& ia : m.ia_list()) {
    if (ia.type == kOptIaNa && !na_done && b.has_address) {
      na_done = true;
      l->na = true;
      l->na_iaid = ia.iaid;
      l->na_valid_until = now + s.valid_lifetime;
      l->na_preferred_until = now + s.preferred_lifetime;
    } else if (ia.type == kOptIaPd && !pd_done && binding_has_prefix(b)) {
      pd_done = true;
      l->pd = true;
      l->pd_iaid = ia.iaid;
      l->pd_valid_until = now + s.valid_lifetime;
      l->pd_preferred_until = now + s.preferred_lifetime;
    }
  }
  if (l->na || l->pd) l->action = LeaseChange::Action::kBound;
}

// SOLICIT, REQUEST, RENEW, REBIND.
void assign(const Message& m, const Binding& b, const Settings& s, uint64_t now, Outcome* out) {
  bool rapid = m.type == MsgType::kSolicit && m.rapid_commit && s.rapid_commit;
  // Rapid Commit only when something is assigned: otherwise ADVERTISE
  // (§18.3.1: the client then keeps soliciting other servers).
  bool any = false;
  {
    bool na = false, pd = false;
    for (const Ia& ia : m.ia_list()) {
      if (ia.type == kOptIaNa && !na) any |= (na = true) && b.has_address;
      if (ia.type == kOptIaPd && !pd) any |= (pd = true) && binding_has_prefix(b);
    }
  }
  if (!any) rapid = false;
  MsgType reply_type =
      m.type == MsgType::kSolicit && !rapid ? MsgType::kAdvertise : MsgType::kReply;

  Writer w(&out->reply);
  put_header(w, reply_type, m.xid);
  put_ids(w, m, s);
  if (rapid) {
    size_t o = w.begin(kOptRapidCommit);
    w.end(o);
  }
  if (reply_type == MsgType::kAdvertise && s.send_preference) {
    size_t o = w.begin(kOptPreference);
    w.u8(s.preference);
    w.end(o);
  }
  if (reply_type == MsgType::kAdvertise && !any)
    put_status(w, Status::kNoAddrsAvail, status_text(Status::kNoAddrsAvail));  // §18.3.9
  bool na_served = false, pd_served = false;
  for (const Ia& ia : m.ia_list()) {
    bool serve_this = false;
    if (ia.type == kOptIaNa && !na_served) serve_this = na_served = true;
    if (ia.type == kOptIaPd && !pd_served) serve_this = pd_served = true;
    put_assigning_ia(w, m.type, ia, b, s, serve_this);
  }
  put_dns(w, s);
  out->has_reply = true;

  if (reply_type == MsgType::kReply && any) set_bound(&out->lease, m, b, s, now);
  if (!any) {
    out->kind = Kind::kRefusedNoBinding;
    return;
  }
  switch (m.type) {
    case MsgType::kSolicit:
      out->kind = rapid ? Kind::kReplyRapidCommit : Kind::kAdvertise;
      break;
    case MsgType::kRequest:
      out->kind = Kind::kReplyRequest;
      break;
    case MsgType::kRenew:
      out->kind = Kind::kReplyRenew;
      break;
    default:
      out->kind = Kind::kReplyRebind;
      break;
  }
}

// RELEASE, DECLINE (§18.3.7, §18.3.8).
void release(const Message& m, const Binding& b, const Settings& s, Outcome* out) {
  Writer w(&out->reply);
  put_header(w, MsgType::kReply, m.xid);
  put_ids(w, m, s);
  put_status(w, Status::kSuccess, m.type == MsgType::kRelease ? "released" : "declined");
  LeaseChange& l = out->lease;
  for (const Ia& ia : m.ia_list()) {
    bool ours = false;
    for (uint8_t i = 0; i < ia.num_entries; ++i)
      if (binding_holds(b, ia, ia.entries[i])) ours = true;
    // A DECLINE concerns addresses only (§18.2.8): an IA_PD in it is not ours.
    if (m.type == MsgType::kDecline && ia.type != kOptIaNa) ours = false;
    if (ours) {
      if (ia.type == kOptIaNa && !l.na) {
        l.na = true;
        l.na_iaid = ia.iaid;
      } else if (ia.type == kOptIaPd && !l.pd) {
        l.pd = true;
        l.pd_iaid = ia.iaid;
      }
      continue;
    }
    size_t o = w.begin(ia.type);
    w.u32(ia.iaid);
    if (ia.type != kOptIaTa) {
      w.u32(0);
      w.u32(0);
    }
    put_status(w, Status::kNoBinding, status_text(Status::kNoBinding));
    w.end(o);
  }
  out->has_reply = true;
  if (l.na || l.pd) {
    l.action = m.type == MsgType::kRelease ? LeaseChange::Action::kReleased
                                           : LeaseChange::Action::kDeclined;
    out->kind = m.type == MsgType::kRelease ? Kind::kReplyRelease : Kind::kReplyDecline;
  } else {
    out->kind = Kind::kRefusedStaleLease;
  }
}

// CONFIRM (§18.3.3): are the client's addresses still right for its link?
// The subscriber's link carries exactly its provisioned /128.
void confirm(const Message& m, const Binding& b, const Settings& s, Outcome* out) {
  size_t n = 0;
  bool all_ok = true;
  for (const Ia& ia : m.ia_list()) {
    for (uint8_t i = 0; i < ia.num_entries; ++i) {
      ++n;
      if (ia.type != kOptIaNa || !binding_holds(b, ia, ia.entries[i])) all_ok = false;
    }
  }
  if (n == 0) {
    out->kind = Kind::kIgnoredConfirmNoAddress;
    return;
  }
  Writer w(&out->reply);
  put_header(w, MsgType::kReply, m.xid);
  put_ids(w, m, s);
  Status st = all_ok ? Status::kSuccess : Status::kNotOnLink;
  put_status(w, st, all_ok ? "addresses on link" : status_text(st));
  out->has_reply = true;
  out->kind = all_ok ? Kind::kReplyConfirm : Kind::kReplyConfirmNotOnLink;
}

void information(const Message& m, const Settings& s, Outcome* out) {
  Writer w(&out->reply);
  put_header(w, MsgType::kReply, m.xid);
  put_ids(w, m, s);
  put_dns(w, s);
  out->has_reply = true;
  out->kind = Kind::kReplyInformation;
}

void dispatch(const Message& m, const Binding& b, const Settings& s, uint64_t now, Outcome* out) {
  out->has_reply = false;
  out->reply.clear();
  out->lease = LeaseChange{};
  out->parse_error = ParseError::kOk;
  out->request_type = m.type;
  // §16: a message naming another server is not for us.
  if (m.has_server_id && !(m.server_id == s.server_duid)) {
    out->kind = Kind::kIgnoredOtherServer;
    return;
  }
  switch (m.type) {
    case MsgType::kSolicit:
    case MsgType::kRequest:
    case MsgType::kRenew:
    case MsgType::kRebind:
      assign(m, b, s, now, out);
      return;
    case MsgType::kRelease:
    case MsgType::kDecline:
      release(m, b, s, out);
      return;
    case MsgType::kConfirm:
      confirm(m, b, s, out);
      return;
    case MsgType::kInformationRequest:
      information(m, s, out);
      return;
    default:
      out->kind = Kind::kIgnoredNotForServer;
      return;
  }
}

}  // namespace

void handle(const Message& m, const Binding& b, const Settings& s, uint64_t now, Outcome* out) {
  dispatch(m, b, s, now, out);
  if (out->has_reply && out->reply.size() > kMaxReply) {
    out->has_reply = false;
    out->reply.clear();
    out->lease = LeaseChange{};
    out->kind = Kind::kRefusedReplyTooLarge;
  }
}

void serve(std::span<const uint8_t> payload, const Binding& b, const Settings& s, uint64_t now,
           Outcome* out) {
  Message m;
  ParseError e = parse(payload, &m);
  if (e != ParseError::kOk) {
    out->has_reply = false;
    out->reply.clear();
    out->lease = LeaseChange{};
    out->kind = Kind::kMalformed;
    out->parse_error = e;
    return;
  }
  handle(m, b, s, now, out);
}

}  // namespace xbng::agent::dhcpv6
