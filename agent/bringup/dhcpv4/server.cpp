#include "bringup/dhcpv4/server.h"

#include <cstring>

namespace xbng::agent::dhcpv4 {

namespace {

uint32_t mask_be(uint8_t len) {
  const uint32_t host = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
  return __builtin_bswap32(host);
}

// Fills the fixed fields shared by every reply to `req`.
Reply reply_to(const Message& req, uint8_t type, const Settings& s) {
  Reply r;
  r.m.xid = req.xid;
  r.m.flags = req.flags & 0x8000;
  r.m.chaddr = req.chaddr;
  r.m.type = type;
  r.m.relay_agent_info = req.relay_agent_info;
  r.m.has_relay_agent_info = req.has_relay_agent_info;
  r.server_id = s.gateway;
  return r;
}

void add_config(const Message& req, const Settings& s, Reply* r, bool with_lease) {
  if (with_lease) {
    r->lease_time = s.lease_time;
    r->t1 = s.lease_time / 2;
    r->t2 = static_cast<uint32_t>(uint64_t{s.lease_time} * 7 / 8);
  }
  r->subnet_mask = mask_be(s.prefix_len);
  if (s.prefix_len == 32) {
    // The gateway is outside a /32: routes to it on-link, then default via it.
    // Option 3 as well, for clients that ignore 121 (RFC 3442 lets clients
    // that support 121 ignore 3).
    r->classless_routes.push_back({32, s.gateway, 0});
    r->classless_routes.push_back({0, 0, s.gateway});
  }
  r->router = s.gateway;
  r->dns = s.dns;
  (void)req;
}

}  // namespace

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kOffered:
      return "offered";
    case Outcome::kAcked:
      return "acked";
    case Outcome::kNaked:
      return "naked";
    case Outcome::kInformed:
      return "informed";
    case Outcome::kReleased:
      return "released";
    case Outcome::kDeclined:
      return "declined";
    case Outcome::kNoIpv4:
      return "no_ipv4";
    case Outcome::kNoGateway:
      return "no_gateway";
    case Outcome::kChaddrRefused:
      return "chaddr_refused";
    case Outcome::kOtherServer:
      return "other_server";
    case Outcome::kIgnored:
      return "ignored";
  }
  return "?";
}

namespace {

// Where a reply goes: unicast to ciaddr when the client has one; else
// broadcast when asked, else unicast to the offered address (chaddr as MAC).
void address_reply(const Message& req, uint32_t yiaddr, Result* res) {
  if (req.ciaddr != 0) {
    res->dst_ip = req.ciaddr;
  } else if (req.broadcast()) {
    res->broadcast = true;
  } else {
    res->dst_ip = yiaddr;
  }
}

// A REQUEST (RFC 2131 4.3.2): ACK of the subscriber's address, NAK of any
// other, nothing when it selects another server.
void answer_request(const Message& req, const Binding& b, const Settings& s, Result* out) {
  Result& res = *out;
  uint32_t wanted;
  if (req.server_id) {  // SELECTING
    if (*req.server_id != s.gateway) {
      res.outcome = Outcome::kOtherServer;
      return;
    }
    wanted = req.requested_ip.value_or(req.ciaddr);
  } else if (req.requested_ip) {  // INIT-REBOOT
    wanted = *req.requested_ip;
  } else {  // RENEWING / REBINDING
    wanted = req.ciaddr;
  }
  if (wanted != b.ipv4) {
    Reply r = reply_to(req, kNak, s);
    r.message = "requested address is not this subscriber's";
    res.reply = std::move(r);
    res.outcome = Outcome::kNaked;
    res.broadcast = true;  // RFC 2131 4.3.2: NAKs are broadcast
    return;
  }
  Reply r = reply_to(req, kAck, s);
  r.m.ciaddr = req.ciaddr;
  r.m.yiaddr = b.ipv4;
  add_config(req, s, &r, true);
  res.reply = std::move(r);
  res.outcome = Outcome::kAcked;
  res.lease = LeaseChange::kBound;
  res.lease_time = s.lease_time;
  res.learn_mac = !b.mac;
  address_reply(req, b.ipv4, &res);
}

}  // namespace

Result serve(const Message& req, const Binding& b, const Settings& s, const Mac& frame_src) {
  Result res;
  Mac chaddr;
  std::memcpy(chaddr.data(), req.chaddr.data(), 6);
  if (chaddr != frame_src || (b.mac && *b.mac != chaddr)) {
    res.outcome = Outcome::kChaddrRefused;
    return res;
  }
  if (b.ipv4 == 0) {
    res.outcome = Outcome::kNoIpv4;
    return res;
  }
  if (s.gateway == 0) {
    res.outcome = Outcome::kNoGateway;
    return res;
  }
  switch (req.type) {
    case kDiscover: {
      Reply r = reply_to(req, kOffer, s);
      r.m.yiaddr = b.ipv4;
      add_config(req, s, &r, true);
      res.reply = std::move(r);
      res.outcome = Outcome::kOffered;
      address_reply(req, b.ipv4, &res);
      return res;
    }
    case kRequest:
      answer_request(req, b, s, &res);
      return res;
    case kRelease:
      if (req.ciaddr != b.ipv4 || (req.server_id && *req.server_id != s.gateway)) {
        res.outcome = Outcome::kIgnored;
        return res;
      }
      res.outcome = Outcome::kReleased;
      res.lease = LeaseChange::kReleased;
      return res;
    case kDecline:
      if (req.requested_ip.value_or(0) != b.ipv4) {
        res.outcome = Outcome::kIgnored;
        return res;
      }
      res.outcome = Outcome::kDeclined;
      res.lease = LeaseChange::kReleased;
      return res;
    case kInform: {
      if (req.ciaddr != b.ipv4) {
        res.outcome = Outcome::kIgnored;
        return res;
      }
      Reply r = reply_to(req, kAck, s);
      r.m.ciaddr = req.ciaddr;
      add_config(req, s, &r, false);
      res.reply = std::move(r);
      res.outcome = Outcome::kInformed;
      res.dst_ip = req.ciaddr;  // RFC 2131 4.3.5: unicast to ciaddr
      return res;
    }
    default:
      res.outcome = Outcome::kIgnored;
      return res;
  }
}

}  // namespace xbng::agent::dhcpv4
