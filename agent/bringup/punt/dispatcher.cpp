#include "bringup/punt/dispatcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>

#include "xbng/abi.h"
#include "common/thread_priority.h"
#include "bringup/punt/counters.h"
#include "store/scan.h"

namespace xbng::agent::punt {

namespace {

constexpr Mac kBroadcast{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
constexpr Mac kAllNodesMac{0x33, 0x33, 0x00, 0x00, 0x00, 0x01};
constexpr Ipv6 kLinkLocalGateway{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
constexpr Ipv6 kAllNodes{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

uint64_t system_seconds() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool has_v6(const SubscriberSpec& s) {
  if (s.has_ipv6) return true;
  for (const auto& p : s.prefixes)
    if (p.family == 6) return true;
  return false;
}

AgentReason dhcpv4_reason(dhcpv4::Outcome o) {
  using O = dhcpv4::Outcome;
  switch (o) {
    case O::kOffered:
      return AgentReason::kDHCPV4_OFFERED;
    case O::kAcked:
      return AgentReason::kDHCPV4_ACKED;
    case O::kNaked:
      return AgentReason::kDHCPV4_NAKED;
    case O::kInformed:
      return AgentReason::kDHCPV4_INFORMED;
    case O::kReleased:
      return AgentReason::kDHCPV4_RELEASED;
    case O::kDeclined:
      return AgentReason::kDHCPV4_DECLINED;
    case O::kNoIpv4:
      return AgentReason::kDHCPV4_NO_IPV4;
    case O::kNoGateway:
      return AgentReason::kDHCPV4_NO_GATEWAY;
    case O::kChaddrRefused:
      return AgentReason::kDHCPV4_CHADDR_REFUSED;
    case O::kOtherServer:
      return AgentReason::kDHCPV4_OTHER_SERVER;
    case O::kIgnored:
      return AgentReason::kDHCPV4_IGNORED;
  }
  return AgentReason::kDHCPV4_IGNORED;
}

AgentReason dhcpv4_malformed(dhcpv4::ParseError e) {
  // ParseError (after kNone) and the DHCPV4_MALFORMED_* reasons share their order.
  static_assert(static_cast<int>(AgentReason::kDHCPV4_MALFORMED_NO_END) -
                    static_cast<int>(AgentReason::kDHCPV4_MALFORMED_TRUNCATED) ==
                static_cast<int>(dhcpv4::ParseError::kNoEnd) -
                    static_cast<int>(dhcpv4::ParseError::kTruncated));
  return static_cast<AgentReason>(static_cast<int>(AgentReason::kDHCPV4_MALFORMED_TRUNCATED) +
                                  static_cast<int>(e) -
                                  static_cast<int>(dhcpv4::ParseError::kTruncated));
}

}  // namespace

Dispatcher::Dispatcher(SubscriberStore* store, LeaseTable* leases, std::vector<PortBringup> ports,
                       BringupOptions opts, Sender send, Clock clock)
    : store_(store),
      leases_(leases),
      opts_(std::move(opts)),
      send_(std::move(send)),
      clock_(clock ? std::move(clock) : Clock(system_seconds)) {
  for (auto& p : ports) ports_[p.ifindex] = std::move(p);
  if (opts_.ra) {
    const uint64_t interval_ns =
        std::max<uint64_t>(opts_.ra_unsolicited_interval_s, 1) * 1000000000ull;
    ra_sched_ =
        std::make_unique<ra::RaScheduler>(interval_ns, std::max<uint32_t>(opts_.ra_slots, 1),
                                          std::max<uint32_t>(opts_.max_subscribers, 1));
  }
}

Dispatcher::~Dispatcher() { stop_ra(); }

const PortBringup* Dispatcher::port(uint32_t ifindex) const {
  auto it = ports_.find(ifindex);
  return it == ports_.end() ? nullptr : &it->second;
}

L2 Dispatcher::l2_to(const PortBringup& port, const SubKey& key, const Mac& dst) const {
  L2 l2;
  l2.src = port.mac;
  l2.dst = dst;
  l2.outer_tpid = port.outer_tpid;
  l2.outer_vid = key.outer_vid;
  l2.inner_vid = key.inner_vid;
  return l2;
}

void Dispatcher::handle(const PuntedFrame& pf) {
  const PortBringup* port = this->port(pf.ifindex);
  FrameError err;
  auto v = parse_frame(pf.frame, &err);
  if (!port || !v || v->l2.outer_vid != pf.outer_vid || v->l2.inner_vid != pf.inner_vid) {
    count(AgentReason::kPUNT_MALFORMED_FRAME);
    return;
  }
  SubKey key{};
  key.ifindex = pf.ifindex;
  key.outer_vid = pf.outer_vid;
  key.inner_vid = pf.inner_vid;
  SubscriberSpec spec;
  // The learned MAC (a map lookup) only for DHCPv4, the one server that uses it.
  std::optional<Mac> learned;
  const bool known =
      store_->binding(key, &spec, pf.kind == XBNG_PUNT_KIND_DHCPV4 ? &learned : nullptr);
  if (port->relay4 && pf.kind == XBNG_PUNT_KIND_DHCPV4 && (known || !port->auth)) {
    // Relayed to the servers, provisioned or not (RADIUS first for an
    // unknown key of an auth port: the relay's lease then builds on it).
    if (relay4_ && opts_.dhcpv4)
      relay4_(key, *v);
    else
      count(AgentReason::kPUNT_DISABLED);
    return;
  }
  if (port->relay6 && pf.kind == XBNG_PUNT_KIND_DHCPV6 && (known || !port->auth)) {
    if (relay6_ && opts_.dhcpv6)
      relay6_(key, *v);
    else
      count(AgentReason::kPUNT_DISABLED);
    return;
  }
  if (!known) {
    if (port->auth) {
      // Not provisioned yet: the session flow asks whether it may be.
      if (unknown_)
        unknown_(pf);
      else
        count(AgentReason::kAUTH_NOT_CONFIGURED);
      return;
    }
    count(AgentReason::kPUNT_UNKNOWN_SUBSCRIBER);  // deleted since the frame was punted
    return;
  }
  switch (pf.kind) {
    case XBNG_PUNT_KIND_DHCPV4:
      if (!opts_.dhcpv4) break;
      on_dhcpv4(*v, *port, key, spec, learned);
      return;
    case XBNG_PUNT_KIND_DHCPV6:
      if (!opts_.dhcpv6) break;
      on_dhcpv6(*v, *port, key, spec);
      return;
    case XBNG_PUNT_KIND_RS:
      if (!opts_.ra) break;
      on_rs(*v, *port, key, spec);
      return;
    default:
      break;
  }
  count(AgentReason::kPUNT_DISABLED);
}

void Dispatcher::on_dhcpv4(const FrameView& v, const PortBringup& port, const SubKey& key,
                           const SubscriberSpec& spec, const std::optional<Mac>& learned) {
  if (v.ip_version != 4 || v.proto != 17 || v.dport != 67 || v.sport != 68) {
    count(AgentReason::kDHCPV4_MALFORMED_PORTS);
    return;
  }
  dhcpv4::ParseError perr;
  auto req = dhcpv4::parse(v.payload, &perr);
  if (!req) {
    count(dhcpv4_malformed(perr));
    return;
  }
  dhcpv4::Binding b;
  b.ipv4 = spec.has_ipv4 ? spec.ipv4 : 0;
  if (spec.has_mac)
    b.mac = spec.mac;
  else
    b.mac = learned;
  dhcpv4::Result res = dhcpv4::serve(*req, b, port.dhcpv4, v.l2.src);
  count(dhcpv4_reason(res.outcome));
  spdlog::debug("dhcpv4 {}/{}/{}: {} -> {}", key.ifindex, key.outer_vid, key.inner_vid,
                dhcpv4::message_type_name(req->type), dhcpv4::outcome_name(res.outcome));

  if (res.learn_mac) {
    auto st = store_->learn_mac(key, v.l2.src);
    if (st.ok()) {
      count(AgentReason::kDHCPV4_MAC_LEARNED);
    } else {
      // Another frame taught another MAC in between: refuse this exchange.
      count(AgentReason::kDHCPV4_CHADDR_REFUSED);
      spdlog::warn("dhcpv4: {}", status_message(st));
      return;
    }
  }
  const uint64_t now = clock_();
  if (res.lease == dhcpv4::LeaseChange::kBound) {
    leases_->bind(key, LeaseFamily::kV4, format_ipv4(b.ipv4), {}, res.lease_time, now);
    confirm(key, LeaseFamily::kV4);
  } else if (res.lease == dhcpv4::LeaseChange::kReleased)
    leases_->release(key, LeaseFamily::kV4, now);

  if (!res.reply) return;
  const std::vector<uint8_t> payload = dhcpv4::build(*res.reply);
  const uint32_t dst = res.broadcast ? 0xffffffffu : res.dst_ip;
  send_(key.ifindex, build_udp4(l2_to(port, key, res.broadcast ? kBroadcast : v.l2.src),
                                port.dhcpv4.gateway, dst, 67, 68, payload));
}

// The binding was read before the lease was written; a change of the
// subscriber in between ended nothing (the store ends leases under its lock,
// and this one did not exist yet). Read it again now that it does.
void Dispatcher::confirm(const SubKey& key, LeaseFamily f) {
  SubscriberSpec now;
  const bool found = store_->binding(key, &now, nullptr);
  leases_->confirm(key, f, found ? &now : nullptr);
}

void Dispatcher::on_dhcpv6(const FrameView& v, const PortBringup& port, const SubKey& key,
                           const SubscriberSpec& spec) {
  if (v.ip_version != 6 || v.proto != 17 || v.dport != 547) {
    count(AgentReason::kDHCPV6_BAD_PORTS);
    return;
  }
  const dhcpv6::Binding b =
      dhcpv6::make_binding(spec.has_ipv6, spec.ipv6,
                           std::span<const Prefix>(spec.prefixes.data(), spec.prefixes.size()));
  const uint64_t now = clock_();
  dhcpv6::Outcome out;
  dhcpv6::serve(v.payload, b, port.dhcpv6, now, &out);
  count_dhcpv6(out.kind);
  if (out.kind == dhcpv6::Kind::kMalformed) count_dhcpv6_malformed(out.parse_error);
  spdlog::debug("dhcpv6 {}/{}/{}: {} -> {}", key.ifindex, key.outer_vid, key.inner_vid,
                dhcpv6::msg_type_name(out.request_type), dhcpv6::kind_name(out.kind));
  using A = dhcpv6::LeaseChange::Action;
  if (out.lease.action == A::kBound) {
    // The v6 lease shows what the client holds: its /128 (IA_NA) and its
    // prefixes (IA_PD); a renewal of one IA keeps what the other holds.
    auto old = leases_->get(key, LeaseFamily::kV6);
    std::string addr;
    std::vector<std::string> prefixes;
    if (out.lease.na && spec.has_ipv6)
      addr = format_ipv6(spec.ipv6.data());
    else if (old && old->bound)
      addr = old->address;
    if (out.lease.pd) {
      for (const auto& p : spec.prefixes)
        if (p.family == 6) prefixes.push_back(format_prefix(p));
    } else if (old && old->bound) {
      prefixes = old->prefixes;
    }
    const uint64_t until = std::max(out.lease.na ? out.lease.na_valid_until : 0,
                                    out.lease.pd ? out.lease.pd_valid_until : 0);
    leases_->bind(key, LeaseFamily::kV6, std::move(addr), std::move(prefixes),
                  static_cast<uint32_t>(until > now ? until - now : 0), now);
    confirm(key, LeaseFamily::kV6);
  } else if (out.lease.action == A::kReleased || out.lease.action == A::kDeclined) {
    leases_->release(key, LeaseFamily::kV6, now);
  }
  if (!out.has_reply) return;
  // From the gateway's link-local address to the client's source, port 546.
  send_(key.ifindex,
        build_udp6(l2_to(port, key, v.l2.src), kLinkLocalGateway, v.src6, 547, v.sport, out.reply));
  schedule_ra(key);
}

void Dispatcher::on_rs(const FrameView& v, const PortBringup& port, const SubKey& key,
                       const SubscriberSpec& spec) {
  // RFC 4861 6.1.1: hop limit 255, valid ICMPv6 checksum, then the message.
  if (v.ip_version != 6 || v.proto != 58 || v.ttl != 255) {
    count(AgentReason::kRS_BAD_IP);
    return;
  }
  uint32_t sum = csum_partial(v.src6, 0);
  sum = csum_partial(v.dst6, sum);
  sum += static_cast<uint32_t>(v.payload.size()) + 58;
  if (csum_fold(csum_partial(v.payload, sum)) != 0) {
    count(AgentReason::kRS_BAD_CHECKSUM);
    return;
  }
  const bool unspecified = v.src6 == Ipv6{};
  ra::RouterSolicit rs;
  const ra::RsError e = ra::parse_rs(v.payload, unspecified, &rs);
  if (e != ra::RsError::kOk) {
    count_rs_malformed(e);
    return;
  }
  // Unicast on its tags, to its link-local address (or all-nodes when it has
  // none yet), MAC = the frame's source.
  if (send_ra(port, key, spec, v.l2.src, unspecified ? kAllNodes : v.src6))
    count(AgentReason::kRA_SOLICITED);
  schedule_ra(key);
}

bool Dispatcher::send_ra(const PortBringup& port, const SubKey& key, const SubscriberSpec& spec,
                         const Mac& dst_mac, const Ipv6& dst) {
  const Prefix* slaac = nullptr;
  if (opts_.ra_slaac)
    for (const auto& p : spec.prefixes)
      if (p.family == 6 && p.len == 64) {
        slaac = &p;
        break;
      }
  std::vector<uint8_t> body;
  ra::build_ra(port.ra, port.mac, slaac, &body);
  return send_(key.ifindex, build_icmp6(l2_to(port, key, dst_mac), kLinkLocalGateway, dst, body));
}

void Dispatcher::schedule_ra(const SubKey& key) {
  if (!ra_sched_) return;
  std::lock_guard g(ra_mu_);
  ra_sched_->add(key_rank(key));
}

size_t Dispatcher::ra_scheduled() const {
  if (!ra_sched_) return 0;
  std::lock_guard g(ra_mu_);
  return ra_sched_->size();
}

size_t Dispatcher::ra_tick(uint64_t now_ns) {
  if (!ra_sched_) return 0;
  std::vector<uint64_t> due;
  {
    std::lock_guard g(ra_mu_);
    ra_sched_->tick(now_ns, &due);
  }
  size_t sent = 0;
  for (uint64_t rank : due) {
    const SubKey key = key_of_rank(rank);
    SubscriberSpec spec;
    std::optional<Mac> learned;
    const PortBringup* port = this->port(key.ifindex);
    if (!port || !store_->binding(key, &spec, &learned) || !has_v6(spec)) {
      std::lock_guard g(ra_mu_);
      ra_sched_->remove(rank);  // gone, or no IPv6 any more
      continue;
    }
    const Mac dst = spec.has_mac ? spec.mac : learned.value_or(kAllNodesMac);
    if (send_ra(*port, key, spec, dst, kAllNodes)) {
      count(AgentReason::kRA_UNSOLICITED);
      ++sent;
    }
  }
  return sent;
}

void Dispatcher::start_ra() {
  if (!ra_sched_ || ra_thread_.joinable()) return;
  // Every provisioned IPv6 subscriber: hosts that came up while xbngd was
  // down (or before a restart) keep hearing RAs.
  size_t n = 0;
  for_each_subscriber(*store_, [&](const SubscriberView& v) {
    if (!has_v6(v.spec)) return;
    // Only subscribers of a port still configured for access.
    if (!store_->ports().access_ifindex(store_->ports().name(v.spec.key.ifindex))) return;
    schedule_ra(v.spec.key);
    ++n;
  });
  spdlog::info("unsolicited RAs: {} subscribers, one RA each every {} s, in {} slots", n,
               opts_.ra_unsolicited_interval_s, opts_.ra_slots);
  ra_thread_ = std::thread([this] {
    std::unique_lock l(ra_wait_mu_);
    while (!ra_stop_) {
      ra_tick(monotonic_ns());
      uint64_t next;
      {
        std::lock_guard g(ra_mu_);
        next = ra_sched_->next_tick_ns();
      }
      const uint64_t now = monotonic_ns();
      const uint64_t wait = next > now ? std::min<uint64_t>(next - now, 1000000000ull) : 1000000;
      ra_cv_.wait_for(l, std::chrono::nanoseconds(wait));
    }
  });
  set_thread_name(ra_thread_, "xbng-ra");
}

void Dispatcher::stop_ra() {
  if (!ra_thread_.joinable()) return;
  ra_stop_ = true;
  ra_cv_.notify_all();
  ra_thread_.join();
}

}  // namespace xbng::agent::punt
