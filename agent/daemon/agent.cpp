#include "daemon/agent.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <cstring>
#include <stdexcept>

#include "xbng/abi.h"
#include "xbng/v1/xbng.pb.h"
#include "bringup/dhcpv6/duid.h"
#include "bringup/punt/counters.h"
#include "common/status.h"
#include "api/radius_store.h"
#include "etcd/etcd_kv.h"
#include "etcd/value_codec.h"
#include "dataplane/router.h"

namespace xbng::agent {

Agent::Agent(const AgentOptions& o)
    : boot_id_(make_boot_id()),
      start_time_seconds_(
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count()) {
  dp_ = Dataplane::start(o.dataplane);
  if (o.ha) ha_node_ = std::make_unique<HaNode>(dp_.get(), *o.ha);
  const StoreMaps maps = StoreMaps::from(*dp_);
  store_ = std::make_unique<SubscriberStore>(maps, dp_->resolver(), &hub_);
  if (!o.journal_file.empty()) store_->set_journal(std::make_unique<Journal>(o.journal_file));
  if (dp_->adopted()) {
    std::string summary;
    store_->rebuild(&summary);
    spdlog::info("{}", summary);
  } else if (std::string void_change = store_->discard_journal(); !void_change.empty()) {
    spdlog::warn("{}", void_change);
  }
  reserved_ranges_ = o.reserved;
  // Watch first, then read: no address change falls between the two.
  addr_watcher_ = std::make_unique<AddressWatcher>([this] { refresh_reserved(); });
  refresh_reserved();
  rb_ =
      std::make_unique<RingbufReader>(dp_->fd(MapId::kEvents), &hub_, [this](const AgentEvent& e) {
        if (e.type == EventType::kMacLearned || e.type == EventType::kMacChanged)
          if (HaReplica* r = replica_raw_.load()) r->mac_learned(e.key, e.mac);
        if (e.type == EventType::kMacChanged)
          store_->follow_mac(e.key, e.mac);
        else if (e.type == EventType::kMacConflict)
          spdlog::warn(
              "subscriber {}: frames from MAC {}, not "
              "its own (mac policy learn-once/enforce)",
              key_to_string(e.key, dp_->resolver()), format_mac(e.mac.data()));
      });
  service_ =
      std::make_unique<SubscribersService>(store_.get(), &hub_, maps, dp_->ports(), boot_id_);
  tracer_ = std::make_unique<Tracer>(dp_.get());
  service_->set_tracer(tracer_.get());
  if (o.fleet)
    service_->set_fleet_read_only(
        o.fleet->node,
        node_subscribers_prefix(o.fleet->subscribers_of.empty() ? o.fleet->node
                                                                : o.fleet->subscribers_of));
  store_->set_mac_hook([this](const SubKey& k, const Mac& mac) {
    if (HaReplica* r = replica_raw_.load()) r->mac_learned(k, mac);
  });
  if (o.bringup.enabled) start_bringup(o);
  ServerOptions so = o.server;
  so.metrics = &grpc_metrics_;
  service_->set_watch_limits(o.server.max_watchers, o.server.watcher_queue);
  server_ = std::make_unique<GrpcServer>(so, service_.get());
  service_->set_connection_stats([this] { return server_->listener().stats(); });
  spdlog::info("gRPC serving on {} (boot id {})", server_->address(), boot_id_);
  if (o.fleet) {
    FleetOptions fo = *o.fleet;
    for (const auto& p : dp_->ports())
      if (p.role == XBNG_ROLE_ACCESS) fo.access_ports.push_back(p.name);
    fleet_ = std::make_unique<Fleet>(fo, store_.get(), boot_id_, fleet::connect_etcd(fo.etcd),
                                     subscriber_value_codec());
    if (o.ha) start_ha(*o.ha, fo);
  }
  set_metrics_listen(o.metrics_listen);
}

// The HA member, then the replication of its dynamic state: the lease
// table's and the store's hooks queue changes from now on (while active).
void Agent::start_ha(const HaOptions& opts, const FleetOptions& fo) {
  HaOptions ho = opts;
  ho.etcd_endpoints = fo.etcd.endpoints;
  // Synced: the fleet's first full read is applied and so is the replicated
  // state's (the replica reads it once the fleet's is in place).
  ho.synced = [this] {
    const HaReplica* r = replica_raw_.load();
    return fleet_->state().full_syncs > 0 && r && r->stats().full_reads > 0;
  };
  ha_ = std::make_unique<HaMember>(ho, fleet::connect_etcd(fo.etcd), ha_node_.get());
  service_->set_ha(ha_.get());
  HaReplica::Hooks h;
  h.active = [m = ha_.get()] { return m->active(); };
  h.ready = [f = fleet_.get()] { return f->state().full_syncs > 0; };
  h.leases = leases_.get();
  h.apply_mac = [s = store_.get()](const SubKey& k, const Mac& mac) {
    return s->apply_replica_mac(k, mac);
  };
  if (SessionReplication* r = session_repl_.get()) {
    h.session_value = [r](const SubKey& k) { return r->value_of(k); };
    h.apply_session = [r](const SubKey& k, std::string_view port, std::string_view value,
                          bool active,
                          std::string* why) { return r->apply(k, port, value, active, why); };
    h.remove_session = [r](const SubKey& k) { return r->remove(k); };
    h.prune_sessions = [r](const std::function<bool(const SubKey&)>& present) {
      return r->prune(present);
    };
  }
  replica_ = std::make_unique<HaReplica>(ho.group, ho.member, fleet::connect_etcd(fo.etcd),
                                         dp_->resolver(), std::move(h));
  replica_raw_ = replica_.get();
}

namespace {

// The hop limit of the DHCPv6 relay's Relay-Forwards to a multicast group:
// ff02::1:2 never leaves the link whatever it is; ff05::1:3 may cross the
// site's multicast routers (RFC 8415 leaves the value open; a site is a few
// hops deep).
constexpr int kRelay6MulticastHops = 8;

// The DHCPv6 server DUID stays the same across restarts and upgrades
// (dhcpv6::load_or_create_server_duid); an HA group's members share the
// group's (ha_group_duid), so that a client renews with whichever is active.
void set_server_duid(punt::BringupOptions& o, const std::optional<HaOptions>& ha) {
  std::string err;
  std::optional<dhcpv6::Duid> duid;
  if (ha) {
    dhcpv6::Duid d;
    const std::vector<uint8_t> b = ha_group_duid(ha->group);
    d.assign(b);
    o.dhcpv6_settings.server_duid = d;
    spdlog::info("DHCPv6 server DUID {} (the HA group {}'s)", dhcpv6::format_duid_hex(d),
                 ha->group);
    return;
  }
  if (o.duid_file.empty()) {  // embedded use (tests): a DUID for this process only
    duid = dhcpv6::make_duid_uuid();
    spdlog::warn("no DHCPv6 DUID file: the server DUID changes at every start");
  } else {
    duid = dhcpv6::load_or_create_server_duid(o.duid_file, &err);
  }
  if (!duid) throw std::runtime_error("DHCPv6 server DUID: " + err);
  o.dhcpv6_settings.server_duid = *duid;
  spdlog::info("DHCPv6 server DUID {} ({})", dhcpv6::format_duid_hex(*duid), o.duid_file);
}

// RADIUS session data (Acct-Session-Id, User-Name, Class, start) beside
// the leases; records whose subscriber is gone, or no longer RADIUS's,
// are dropped.
std::unique_ptr<radius::SessionTable> load_radius_sessions(const std::string& lease_file,
                                                           SubscriberStore* store) {
  const std::string dir =
      lease_file.empty() ? "" : lease_file.substr(0, lease_file.find_last_of('/') + 1);
  auto sessions = std::make_unique<radius::SessionTable>(
      lease_file.empty() ? "" : dir + "radius-sessions.json");
  if (auto e = sessions->load()) spdlog::warn("radius: session state: {}", *e);
  sessions->retain([store](const SubKey& k) {
    SubscriberSpec spec;
    std::optional<Mac> learned;
    return store->binding(k, &spec, &learned) && spec.origin == kOriginRadius;
  });
  if (sessions->size()) spdlog::info("radius: {} session(s) adopted", sessions->size());
  return sessions;
}

// The bring-up settings of each access port (their ifindexes in `ifindexes`).
std::vector<punt::PortBringup> access_port_bringup(const std::vector<PortInfo>& all,
                                                   const punt::BringupOptions& o,
                                                   std::vector<uint32_t>* ifindexes) {
  std::vector<punt::PortBringup> ports;
  for (const auto& p : all) {
    if (p.role != XBNG_ROLE_ACCESS) continue;
    punt::PortBringup b;
    b.ifindex = p.ifindex;
    std::memcpy(b.mac.data(), p.cfg.mac, 6);
    b.outer_tpid = p.cfg.outer_tpid;
    auto it = o.dhcpv4_ports.find(p.name);
    b.dhcpv4 = it != o.dhcpv4_ports.end() ? it->second : o.dhcpv4_defaults;
    b.dhcpv4.gateway = p.cfg.gw_ipv4;
    b.dhcpv6 = o.dhcpv6_settings;
    b.ra = o.ra_settings;
    // The MTU option: at most the port's subscriber MTU, else what
    // fits once the two tags (8 bytes) are added.
    const uint32_t cap = p.cfg.sub_mtu ? p.cfg.sub_mtu : (p.cfg.mtu > 8 ? p.cfg.mtu - 8u : 0u);
    if (b.ra.mtu && cap && b.ra.mtu > cap) b.ra.mtu = cap;
    b.auth = o.auth_ports.count(p.name) > 0;
    b.relay4 = o.relay4_ports.count(p.name) > 0;
    b.relay6 = o.relay6_ports.count(p.name) > 0;
    ports.push_back(b);
    ifindexes->push_back(p.ifindex);
  }
  return ports;
}

}  // namespace

void Agent::start_bringup(const AgentOptions& ao) {
  const auto& radius = ao.radius;
  const auto& ha = ao.ha;
  punt::BringupOptions o = ao.bringup;
  if (o.dhcpv6) set_server_duid(o, ha);
  leases_ = std::make_unique<LeaseTable>(&hub_, dp_->resolver(), o.lease_file);
  // Sized up front only where a relayed ACK/REPLY binds (a rehash would run
  // under the table's lock in its bind): 2^21 slots at 1M subscribers are
  // 16 MB of address space and 2 MB of control bytes written at once, and
  // the first touch of a random slot per subscriber change.
  if (!o.relay4_ports.empty() || !o.relay6_ports.empty()) leases_->reserve(o.max_subscribers);
  leases_->set_change_sink([this](const SubKey& k, LeaseFamily f, const Lease* now) {
    if (HaReplica* r = replica_raw_.load()) r->lease_changed(k, f, now);
  });
  // A lease never outlives its subscriber: restored leases of subscribers
  // gone (or changed) while xbngd was stopped are dropped, and from now on
  // every change of a subscriber ends the leases it loses.
  leases_->retain_owned([s = store_.get()](const SubKey& k, SubscriberSpec* out) {
    std::optional<Mac> learned;
    return s->binding(k, out, &learned);
  });
  radius_sessions_ = load_radius_sessions(o.lease_file, store_.get());
  // HA: the sessions of the access side (RADIUS, relay) are replicated too.
  if (ha)
    session_repl_ =
        std::make_unique<SessionReplication>(store_.get(), radius_sessions_.get(), ha->member);
  if (!o.auth_ports.empty()) {
    if (!radius) throw std::runtime_error("access ports with auth = \"radius\" need [radius]");
    auto client = radius::Client::create(radius->client);
    if (!client.ok()) throw std::runtime_error("radius: " + std::string(client.status().message()));
    radius_client_ = std::move(*client);
    start_accounting(*radius, o.lease_file);
  }
  store_->set_change_hook(
      [this, l = leases_.get(), r = radius_sessions_.get(), a = radius_accounting_.get()](
          const SubKey& k, const SubscriberSpec* now, bool created) {
        l->on_subscriber_change(k, now, created);
        if (HaReplica* rep = replica_raw_.load()) {
          if (!now || created) rep->subscriber_gone(k);
          rep->session_changed(k, now && session_origin(now->origin));
        }
        if (a) a->on_subscriber_change(k, now);  // reads the record: before the table drops it
        if (a && created && now && now->origin == kOriginRadius) a->on_created(k);
        r->on_subscriber_change(k, now);
      });
  std::vector<uint32_t> ifindexes;
  std::vector<punt::PortBringup> ports = access_port_bringup(dp_->ports(), o, &ifindexes);
  punt_tx_ = std::make_unique<punt::PuntTx>(ifindexes);
  dispatcher_ = std::make_unique<punt::Dispatcher>(
      store_.get(), leases_.get(), std::move(ports), o,
      [tx = punt_tx_.get(), ha = ha_node_.get()](uint32_t ifx, std::span<const uint8_t> f) {
        if (ha && !ha->active()) return true;  // a standby sends nothing on the access side
        return tx->send(ifx, f);
      });
  if (radius) start_radius_access(*radius, o);
  start_relays(o, ao.relay4, ao.relay6);
  punt_rx_ = std::make_unique<punt::PuntRx>(
      dp_->fd(MapId::kPunt), [d = dispatcher_.get()](const punt::PuntedFrame& f) { d->handle(f); },
      punt_tx_.get());
  if (o.af_xdp) {
    std::vector<punt::XskPort> xports;
    for (const auto& p : dp_->ports())
      if (p.role == XBNG_ROLE_ACCESS) xports.push_back({p.name, p.ifindex, p.cfg.slot});
    punt_xsk_rx_ = std::make_unique<punt::PuntXskRx>(
        dp_->fd(MapId::kPuntXsks), xports,
        [d = dispatcher_.get()](const punt::PuntedFrame& f) { d->handle(f); }, punt_tx_.get());
    spdlog::info("punt: AF_XDP transport, {} socket(s)", punt_xsk_rx_->sockets());
  }
  if (o.realtime_priority) set_realtime(o.realtime_priority, o.realtime_required);
  leases_->start();
  if (radius_accounting_) radius_accounting_->start();
  dispatcher_->start_ra();
  service_->set_leases(leases_.get());
  spdlog::info("bring-up on: DHCPv4 {}, DHCPv6 {}, RA {}, leases {}, {} lease(s) restored",
               o.dhcpv4 ? "on" : "off", o.dhcpv6 ? "on" : "off", o.ra ? "on" : "off",
               o.lease_file.empty() ? "not persisted" : o.lease_file, leases_->size());
}

// Sessions from the access side (auth ports) and dynamic authorization.
void Agent::start_radius_access(const AgentOptions::Radius& radius, const punt::BringupOptions& o) {
  if (radius_client_) {
    const PortResolver& res = dp_->resolver();
    access_sessions_ = std::make_unique<radius::AccessSessions>(
        radius_client_.get(), radius.access, res.name,
        [res](uint32_t ifx) { return res.max_packet_of(ifx); },
        radius::store_creator(store_.get(), radius_sessions_.get()),
        [d = dispatcher_.get()](const punt::PuntedFrame& f) { d->handle(f); });
    access_sessions_->set_redispatch_batch([tx = punt_tx_.get()](bool open) {
      if (open)
        tx->begin_batch();
      else
        tx->end_batch();
    });
    // Accepts become subscribers on worker threads, in batches: the Accepts
    // a worker takes at once share one durable write of the session table.
    // Two: one writes while the other gathers the next batch (group commit);
    // more only woke each other over the table's lock on 2 vCPUs.
    access_sessions_->set_workers(2,
                                  radius::store_creator_many(store_.get(), radius_sessions_.get()));
    dispatcher_->set_unknown_handler(
        [s = access_sessions_.get()](const punt::PuntedFrame& f) { s->on_unknown(f); });
    spdlog::info("radius: subscribers created on demand on {} ({} server(s), User-Name {})",
                 fmt::join(o.auth_ports, ","), radius.client.servers.size(),
                 radius.access.username);
  }
  if (radius.dynauth) {
    const auto& d = *radius.dynauth;
    dynauth_backend_ = std::make_unique<radius::StoreDynAuthBackend>(
        store_.get(), radius_sessions_.get(), radius.access.plans);
    // New timers count at once, and reach the standbys with the session.
    dynauth_backend_->set_timers_changed([this, a = radius_accounting_.get()](const SubKey& k) {
      if (a) a->timers_changed(k);
      if (HaReplica* rep = replica_raw_.load()) rep->session_changed(k, true);
    });
    auto server = radius::DynAuthServer::start(d.host, d.port, d.options, dynauth_backend_.get());
    if (!server.ok()) throw std::runtime_error("radius: " + std::string(server.status().message()));
    dynauth_ = std::move(*server);
    std::vector<std::string> clients;
    for (const auto& c : d.options.clients) clients.push_back(c.address);
    spdlog::info("radius: dynamic authorization (CoA, Disconnect) on {}:{} from {}", d.host,
                 dynauth_->port(), fmt::join(clients, ","));
  }
}

// Accounting's `identities` hook: the subscribers of a pass's Starts, their
// learned MACs read together (SubscriberStore::bindings_many).
static void acct_identities(const SubscriberStore& s, const PortResolver& res,
                            std::span<const SubKey> keys, std::vector<radius::AcctView>* out,
                            std::vector<uint8_t>* found) {
  std::vector<SubscriberSpec> specs;
  std::vector<std::optional<Mac>> learned;
  s.bindings_many(keys, &specs, &learned, found);
  out->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(*found)[i]) continue;
    SubscriberView v;
    v.spec = std::move(specs[i]);
    v.learned_mac = learned[i];
    (*out)[i] = radius::acct_view_of(v, res.name(keys[i].ifindex));
  }
}

void Agent::start_accounting(const AgentOptions::Radius& radius, const std::string& lease_file) {
  radius::AcctOptions ao = radius.acct;
  ao.state_file = lease_file.empty() ? ""
                                     : lease_file.substr(0, lease_file.find_last_of('/') + 1) +
                                           "radius-accounting.json";
  radius::Accounting::Hooks h;
  h.send = [c = radius_client_.get()](const radius::AccountingRequest& r,
                                      std::function<void(bool)> done) {
    c->account(r, std::move(done));
  };
  const PortResolver& res = dp_->resolver();
  h.view = [s = store_.get(), res](const SubKey& k, radius::AcctView* out) {
    SubscriberView v;
    if (!s->get(k, &v).ok()) return false;
    *out = radius::acct_view_of(v, res.name(k.ifindex));
    return true;
  };
  h.views = [s = store_.get(), res](std::span<const SubKey> keys,
                                    std::vector<radius::AcctView>* out,
                                    std::vector<uint8_t>* found) {
    std::vector<SubscriberView> v;
    s->get_many(keys, &v, found);
    out->resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i)
      if ((*found)[i]) (*out)[i] = radius::acct_view_of(v[i], res.name(keys[i].ifindex));
  };
  h.identity = [s = store_.get(), res](const SubKey& k, radius::AcctView* out) {
    SubscriberView v;
    if (!s->binding(k, &v.spec, &v.learned_mac)) return false;
    *out = radius::acct_view_of(v, res.name(k.ifindex));
    return true;
  };
  h.identities = [s = store_.get(), res](
                     std::span<const SubKey> keys, std::vector<radius::AcctView>* out,
                     std::vector<uint8_t>* found) { acct_identities(*s, res, keys, out, found); };
  h.remove = [s = store_.get()](const SubKey& k) -> absl::Status {
    uint64_t deleted = 0, not_found = 0;
    absl::Status st = s->remove({k}, &deleted, &not_found);
    if (st.ok() && !deleted) return absl::NotFoundError("not provisioned");
    return st;
  };
  h.lease_bound = [l = leases_.get()](const SubKey& k) {
    for (auto f : {LeaseFamily::kV4, LeaseFamily::kV6})
      if (auto lease = l->get(k, f); lease && lease->bound) return true;
    return false;
  };
  // HA: only the active accounts; what it reported goes to the standbys
  // with the session (its acct_base there).
  if (HaNode* n = ha_node_.get()) h.active = [n] { return n->active(); };
  if (SessionReplication* r = session_repl_.get())
    h.reported = [this, r](const SubKey& k, const radius::AcctCounts& c) {
      r->reported(k, c);
      if (HaReplica* rep = replica_raw_.load()) rep->session_changed(k, true);
    };
  radius_accounting_ =
      std::make_unique<radius::Accounting>(radius_sessions_.get(), ao, std::move(h));
  radius::Accounting* a = radius_accounting_.get();
  store_->set_removal_hook(kOriginRadius, [a, res](const SubscriberView& v) {
    a->on_removing(v.spec.key, radius::acct_view_of(v, res.name(v.spec.key.ifindex)));
  });
  leases_->set_observer([a](const SubKey& k, LeaseFamily, EventType t) {
    a->on_lease(k, t == EventType::kLeaseBound      ? radius::Accounting::LeaseChange::kBound
                   : t == EventType::kLeaseReleased ? radius::Accounting::LeaseChange::kReleased
                                                    : radius::Accounting::LeaseChange::kExpired);
  });
  if (auto e = a->load_and_adopt()) spdlog::warn("radius: accounting state: {}", *e);
  // A cold start (fresh maps): no session of this NAS goes on. A hitless
  // restart (maps adopted) says nothing: its sessions go on. An HA member
  // never says it: the group's sessions go on on the active, and the server
  // would close them all.
  if (ha_node_)
    spdlog::info("radius: no Accounting-On (HA group member: the group's sessions go on)");
  else if (!dp_->adopted())
    a->accounting_on();
}

void Agent::start_relay4(const punt::BringupOptions& o, relay::Relay4Options ro) {
  if (!ro.relay_address)
    for (const auto& p : dp_->ports()) {
      if (p.role != XBNG_ROLE_UPLINK) continue;
      if (auto a = first_global(interface_addresses(p.name), 4)) {
        std::memcpy(&ro.relay_address, a->addr.data(), 4);
        break;
      }
    }
  if (!ro.relay_address)
    throw std::runtime_error(
        "relay: no relay.relay_address_v4 and no global IPv4 address on an uplink");
  std::vector<relay::RelayPort> ports;
  for (const auto& p : dp_->ports()) {
    if (p.role != XBNG_ROLE_ACCESS || !o.relay4_ports.count(p.name)) continue;
    relay::RelayPort r;
    r.ifindex = p.ifindex;
    r.name = p.name;
    std::memcpy(r.mac.data(), p.cfg.mac, 6);
    r.outer_tpid = p.cfg.outer_tpid;
    r.gateway = p.cfg.gw_ipv4;
    ports.push_back(std::move(r));
  }
  relay4_ = std::make_unique<relay::Relay4>(
      ro, std::move(ports), relay_sessions_.get(),
      [tx = punt_tx_.get(), ha = ha_node_.get()](uint32_t ifx, std::span<const uint8_t> f) {
        if (ha && !ha->active()) return true;  // a standby sends nothing on the access side
        return tx->send(ifx, f);
      },
      [this](uint32_t server, std::span<const uint8_t> payload) {
        return relay_socket_ && relay_socket_->send(server, 67, payload);
      });
  relay_socket_ = std::make_unique<relay::Socket4>(
      ro.relay_address, 67,
      [r = relay4_.get()](uint32_t src, uint16_t sport, std::span<const uint8_t> b) {
        r->on_server(src, sport, b);
      },
      [r = relay4_.get()] { r->tick(); });
  dispatcher_->set_relay4_handler(
      [r = relay4_.get()](const SubKey& k, const punt::FrameView& v) { r->on_client(k, v); });
  std::vector<std::string> servers;
  for (uint32_t a : ro.servers) servers.push_back(format_ipv4(a));
  spdlog::info(
      "relay: DHCPv4 of {} relayed from {} to {} (circuit-id {}, remote-id {}, option 82 {})",
      fmt::join(o.relay4_ports, ","), format_ipv4(ro.relay_address), fmt::join(servers, ","),
      ro.circuit_id, ro.remote_id, relay::policy_name(ro.policy));
}

// punt.realtime_priority: the threads that carry control frames (a client's
// message to its answer or to the relay's servers, a server's answer to
// the client) at SCHED_FIFO, so that they preempt the host's other work
// when a frame arrives instead of waiting for a CPU. A priority the
// operator set must hold (a refusal stops the start); the automatic one of
// a relaying host is refused with a warning: the relay then works, at the
// default policy's latency.
void Agent::set_realtime(int priority, bool required) {
  std::vector<std::string> names, refused;
  std::string why;
  auto apply = [&](const char* what, std::string error) {
    if (error.empty()) {
      names.push_back(what);
      return;
    }
    if (required)
      throw std::runtime_error(
          fmt::format("punt.realtime_priority {}: cannot run the {} SCHED_FIFO: {} (xbngd needs "
                      "CAP_SYS_NICE or an RLIMIT_RTPRIO of at least {})",
                      priority, what, error, priority));
    refused.push_back(what);
    why = error;
  };
  apply("punt thread", punt_rx_->set_fifo_priority(priority));
  if (punt_xsk_rx_) apply("AF_XDP punt thread", punt_xsk_rx_->set_fifo_priority(priority));
  if (relay_socket_) apply("DHCPv4 relay thread", relay_socket_->set_fifo_priority(priority));
  if (relay_socket6_) apply("DHCPv6 relay thread", relay_socket6_->set_fifo_priority(priority));
  if (!names.empty())
    spdlog::info("punt: {} at SCHED_FIFO priority {}{}", fmt::join(names, ", "), priority,
                 required ? "" : " (punt.realtime_priority \"auto\": a port relays)");
  if (!refused.empty())
    spdlog::warn(
        "punt: the {} stay(s) at the default policy: SCHED_FIFO {} refused: {} (xbngd needs "
        "CAP_SYS_NICE or an RLIMIT_RTPRIO of at least {}). The relay works; its added latency "
        "then waits on the host's other work. punt.realtime_priority = 0 chooses the default "
        "policy without this warning",
        fmt::join(refused, ", "), priority, why, priority);
}

// The relays of the dhcp = "relay" ports and the sessions they share.
void Agent::start_relays(const punt::BringupOptions& o,
                         const std::optional<relay::Relay4Options>& relay4,
                         const std::optional<relay::Relay6Options>& relay6) {
  if (o.relay4_ports.empty() && o.relay6_ports.empty()) return;
  if (!o.relay4_ports.empty() && !relay4)
    throw std::runtime_error("the DHCPv4 relay needs relay.servers_v4");
  if (!o.relay6_ports.empty() && !relay6)
    throw std::runtime_error("the DHCPv6 relay needs relay.servers_v6");
  relay_sessions_ = std::make_unique<RelaySessions>(store_.get(), leases_.get());
  leases_->set_expiry_hook([s = relay_sessions_.get()](const SubKey& k, LeaseFamily f,
                                                       const Lease&) { s->expired(k, f); });
  if (!o.relay4_ports.empty()) start_relay4(o, *relay4);
  if (!o.relay6_ports.empty()) start_relay6(o, *relay6);
  if (size_t n = relay_sessions_->reconcile())
    spdlog::info("relay: {} subscriber(s) lost addresses whose lease ended while xbngd was stopped",
                 n);
}

void Agent::start_relay6(const punt::BringupOptions& o, relay::Relay6Options ro) {
  std::vector<relay::RelayPort6> ports;
  for (const auto& p : dp_->ports()) {
    if (p.role != XBNG_ROLE_ACCESS || !o.relay6_ports.count(p.name)) continue;
    relay::RelayPort6 r;
    r.ifindex = p.ifindex;
    r.name = p.name;
    std::memcpy(r.gateway.data(), p.cfg.gw_ipv6, 16);
    if (r.gateway == Ipv6{})
      throw std::runtime_error("relay: access port " + p.name +
                               " has no IPv6 gateway (the Relay-Forward's link-address)");
    ports.push_back(std::move(r));
  }
  // Multicast (servers_v6 is a DHCP group): out of relay.multicast_uplink
  // (default: the first uplink), and the servers' Relay-Replies come back
  // by it.
  const bool multicast = ro.servers.size() == 1 && relay::is_dhcp_group(ro.servers[0]);
  std::string uplink;
  if (multicast) {
    for (const auto& p : dp_->ports())
      if (p.role == XBNG_ROLE_UPLINK && (ro.uplink.empty() || p.name == ro.uplink)) {
        ro.uplink_ifindex = p.ifindex;
        uplink = p.name;
        break;
      }
    if (!ro.uplink_ifindex)
      throw std::runtime_error(
          ro.uplink.empty()
              ? std::string("relay: relay.servers_v6 is a multicast group and there is no uplink")
              : "relay: relay.multicast_uplink " + ro.uplink + " is not an uplink port");
  }
  relay6_ = std::make_unique<relay::Relay6>(
      ro, std::move(ports), relay_sessions_.get(),
      [this](const relay::RelayPort6&, const SubKey& k, const Mac& mac, const Ipv6& client,
             std::span<const uint8_t> m) { return send_relay6_reply(k, mac, client, m); },
      [this](const Ipv6& server, std::span<const uint8_t> payload) {
        return relay_socket6_ && relay_socket6_->send(server, 547, payload);
      });
  // Any address of the host, port 547: the kernel picks the uplink's
  // address toward the servers, and their replies come back to it.
  relay_socket6_ = std::make_unique<relay::Socket6>(
      Ipv6{}, 547,
      [r = relay6_.get()](const Ipv6& src, uint16_t sport, uint32_t ifindex,
                          std::span<const uint8_t> b) { r->on_server(src, sport, b, ifindex); },
      [r = relay6_.get()] { r->tick(); });
  if (multicast) relay_socket6_->multicast_via(ro.uplink_ifindex, kRelay6MulticastHops);
  dispatcher_->set_relay6_handler([r = relay6_.get()](const SubKey& k, const punt::FrameView& v) {
    if (v.ip_version != 6 || v.proto != 17 || v.dport != 547) {
      count(AgentReason::kDHCPV6_BAD_PORTS);
      return;
    }
    r->on_client(k, v.l2.src, v.src6, v.payload);
  });
  std::vector<std::string> servers;
  for (const auto& a : ro.servers) servers.push_back(format_ipv6(a.data()));
  spdlog::info("relay: DHCPv6 of {} relayed from port 547 to {}{} (Interface-ID {}, Remote-ID {})",
               fmt::join(o.relay6_ports, ","), fmt::join(servers, ","),
               multicast ? " (multicast out of " + uplink + ", servers learned from their answers)"
                         : std::string(),
               ro.circuit_id, ro.remote_id);
}

bool Agent::send_relay6_reply(const SubKey& k, const Mac& mac, const Ipv6& client,
                              std::span<const uint8_t> message) {
  // From the gateway's link-local address, as xbngd's own DHCPv6 replies.
  constexpr Ipv6 kLinkLocalGateway{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (ha_node_ && !ha_node_->active()) return true;  // a standby sends nothing on the access side
  const punt::PortBringup* port = dispatcher_->port(k.ifindex);
  if (!port) return false;
  punt::L2 l2;
  l2.src = port->mac;
  l2.dst = mac;
  l2.outer_tpid = port->outer_tpid;
  l2.outer_vid = k.outer_vid;
  l2.inner_vid = k.inner_vid;
  const bool sent =
      punt_tx_->send(k.ifindex, punt::build_udp6(l2, kLinkLocalGateway, client, 547, 546, message));
  // A subscriber the relay gave IPv6 hears unsolicited RAs (its default
  // route); the schedule drops keys without IPv6.
  dispatcher_->schedule_ra(k);
  return sent;
}

std::string Agent::render_metrics() const {
  MetricsSnapshot s;
  if (auto st = read_stats(StoreMaps::from(*dp_), dp_->ports(), *store_, &s.stats); !st.ok())
    throw std::runtime_error(std::string(status_message(st)));
  s.grpc = grpc_metrics_.snapshot();
  s.version = XBNG_VERSION;
  s.abi = XBNG_ABI_VERSION;
  s.start_time_seconds = start_time_seconds_;
  s.last_reload_ok = last_reload_ok_;
  s.api.watchers = hub_.watchers();
  s.api.watchers_disconnected = hub_.overflowed_total();
  s.api.watchers_refused = hub_.refused_total();
  if (server_) {
    const ListenerStats c = server_->listener().stats();
    s.api.connections = c.open;
    s.api.max_connections = c.max;
    s.api.connections_refused = c.refused;
    s.api.accept_errors = c.accept_errors;
  }
  std::string out = xbng::agent::render_metrics(s);
  if (radius_accounting_ && radius_client_)
    out += radius::render_acct_metrics(radius_accounting_->counters(), radius_client_->counters());
  if (fleet_) out += fleet_->render_metrics();
  if (ha_) out += ha_->render_metrics();
  if (replica_) out += replica_->render_metrics();
  if (dynauth_) out += dynauth_->render_metrics();
  return out;
}

void Agent::set_metrics_listen(const std::string& listen) {
  if (metrics_ && metrics_->listen() == listen) return;
  const std::string old = metrics_listen();
  // The new address may be the old port on another host: free it first.
  metrics_.reset();
  if (listen.empty()) {
    if (!old.empty()) spdlog::info("metrics endpoint {} closed", old);
    return;
  }
  MetricsServer::Handlers scrape{[this] { return render_metrics(); }, [this] { return health(); }};
  try {
    metrics_ = std::make_unique<MetricsServer>(listen, scrape);
  } catch (const std::exception& e) {
    if (!old.empty()) {
      try {
        metrics_ = std::make_unique<MetricsServer>(old, scrape);
      } catch (const std::exception& e2) {
        spdlog::error("metrics endpoint {} could not be restored: {}", old, e2.what());
      }
    }
    throw;
  }
}

std::string Agent::health(bool capacity) {
  if (!server_) return "gRPC server stopped";
  Listener& l = server_->listener();
  if (!l.alive()) return "the gRPC accept loop is stuck";
  if (capacity && !l.has_room()) {
    const auto s = l.stats();
    return fmt::format(
        "{} gRPC connections open, the maximum (api.max_connections): new "
        "clients are refused",
        s.open);
  }
  if (auto st = server_->probe(std::chrono::seconds(2)); !st.ok())
    return fmt::format("gRPC health check failed: {}", st.error_message());
  return "";
}

void Agent::refresh_reserved() {
  std::lock_guard l(reserved_mu_);
  auto set = std::make_shared<ReservedSet>(
      build_reserved(dp_->ports(), reserved_ranges_, read_if_addresses()));
  spdlog::info(
      "reserved addresses: {} (gateways, xbng port addresses, uplink subnets, "
      "security.reserved)",
      set->size());
  store_->set_reserved(std::move(set));
}

void Agent::set_reserved_ranges(const std::vector<std::string>& ranges) {
  {
    std::lock_guard l(reserved_mu_);
    reserved_ranges_ = ranges;
  }
  refresh_reserved();
}

void Agent::stop() {
  // The metrics endpoint first: it reads the HA member below. Then the
  // replication sends what is queued, then an active hands over, while
  // everything else still serves.
  metrics_.reset();
  replica_raw_ = nullptr;
  if (replica_) replica_->stop();
  ha_.reset();
  addr_watcher_.reset();
  if (fleet_) fleet_->stop();
  if (server_) server_->shutdown();
  rb_.reset();
  punt_xsk_rx_.reset();
  punt_rx_.reset();       // no frame reaches the servers after this
  dynauth_.reset();       // no CoA or Disconnect after this
  relay_socket_.reset();  // no server reply after this
  relay_socket6_.reset();
  // Accounting sends what it has, then the client answers what is still
  // outstanding as undelivered (queued), then the queue is written.
  if (radius_accounting_) radius_accounting_->stop();
  radius_client_.reset();  // no completion after this
  if (radius_accounting_) radius_accounting_->flush();
  if (radius_sessions_) radius_sessions_->flush();
  if (dispatcher_) dispatcher_->stop_ra();
  if (leases_) leases_->stop();
}

Agent::~Agent() { stop(); }

}  // namespace xbng::agent
