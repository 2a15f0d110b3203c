// xbngctl: thin gRPC client of xbngd (tables for people, --json for scripts),
// plus `bpf dump`, which reads the pinned maps directly.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "ctl/trace.h"
#include "api/subscriber_file.h"
#include "ctl/ctl.h"
#include "fleet/fleet.h"

using namespace xbng::agent;

namespace {

// Everything the command line can ask: the arguments of each command and the
// subcommand objects that tell which one was given.
struct Commands {
  CtlOptions o;
  SubArgs a;
  ListArgs la;
  TraceArgs ta;
  std::string del_file, import_file, bpffs = "/sys/fs/bpf/xbng";
  bool atomic = false;
  // sub import --etcd (fleet mode: write into etcd instead of xbngd).
  std::string etcd, node, etcd_password_file;
  EtcdOptions eo;
  uint32_t txn_ops = 128, inflight = 8;
  int count = 0, health_timeout_ms = 3000;
  CLI::App *add = nullptr, *del = nullptr, *get = nullptr, *list = nullptr, *imp = nullptr,
           *stats = nullptr, *events = nullptr, *health = nullptr, *trace = nullptr,
           *dump = nullptr, *ha_status = nullptr, *ha_switchover = nullptr;
};

void add_global_options(CLI::App& app, CtlOptions& o) {
  app.add_option("--server", o.server, "unix:///path or HOST:PORT")->default_str(o.server);
  app.add_flag("--json", o.json, "JSON output for scripts");
  app.add_option("--tls-ca", o.tls_ca, "CA to verify a TCP server (TLS)");
  app.add_option("--tls-cert", o.tls_cert, "client certificate (TLS)");
  app.add_option("--tls-key", o.tls_key, "client key (TLS)");
  app.add_flag("--insecure", o.insecure, "plaintext TCP (server started with --insecure-tcp)");
}

// sub add, del, get, list.
void add_sub_commands(CLI::App* sub, Commands& c) {
  SubArgs& a = c.a;
  auto key_opts = [&](CLI::App* cmd) {
    cmd->add_option("--port", a.port, "access port")->required();
    cmd->add_option("--outer", a.outer, "S-VLAN")->required();
    cmd->add_option("--inner", a.inner, "C-VLAN")->required();
  };
  auto* add = c.add = sub->add_subcommand("add", "create or replace a subscriber");
  key_opts(add);
  add->add_option("--mac", a.mac, "MAC (empty: learn)");
  add->add_option("--ipv4", a.ipv4, "IPv4 host address");
  add->add_option("--ipv6", a.ipv6, "IPv6 host address");
  add->add_option("--ipv6-prefix", a.ipv6_prefixes, "delegated IPv6 prefix; repeatable");
  add->add_option("--ipv4-prefix", a.ipv4_prefixes, "routed IPv4 prefix; repeatable");
  add->add_option("--up-rate", a.up_rate, "upstream rate, bits/s (k/M/G suffix; 0 = unlimited)");
  add->add_option("--up-burst", a.up_burst, "upstream burst, bytes (>= the port MTU; k/M/G)");
  add->add_option("--down-rate", a.down_rate,
                  "downstream rate, bits/s (k/M/G suffix; 0 = unlimited)");
  add->add_option("--down-burst", a.down_burst, "downstream burst, bytes (>= the port MTU; k/M/G)");
  add->add_flag("--unlimited", a.unlimited,
                "own policy, unlimited (overrides the port default); with rate flags: unset "
                "directions unlimited. Without any policy flag: the port default applies");
  auto* del = c.del =
      sub->add_subcommand("del", "delete a subscriber, or every key of an import file");
  del->add_option("--port", a.port, "access port");
  del->add_option("--outer", a.outer, "S-VLAN");
  del->add_option("--inner", a.inner, "C-VLAN");
  del->add_option("--file", c.del_file, "CSV or JSON Lines file (as for import): delete its keys");
  c.get = sub->add_subcommand("get", "show a subscriber and its counters");
  key_opts(c.get);
  ListArgs& la = c.la;
  auto* list = c.list = sub->add_subcommand("list", "list subscribers");
  list->add_option("--port", la.port, "only this access port");
  list->add_option("--outer", la.outer, "only this S-VLAN");
  list->add_option("--page-size", la.page_size, "entries per page")->default_str("1000");
  list->add_option("--page-token", la.page_token, "continue from this token");
  list->add_flag("--all", la.all, "follow next_page_token to the end");
  list->add_flag("--counters", la.counters, "include counters");
}

// sub import, to xbngd or (--etcd) into etcd.
void add_import_command(CLI::App* sub, Commands& c) {
  auto* imp = c.imp =
      sub->add_subcommand("import", "bulk load a CSV or JSON Lines file (StreamSubscribers)");
  imp->add_option("FILE", c.import_file,
                  "CSV with header " + std::string(kCsvHeader) +
                      " (optionally followed by ,up_rate_bps,up_burst_bytes,"
                      "down_rate_bps,down_burst_bytes)"
                      " or JSON Lines (.jsonl; \"policy\": {...})")
      ->required();
  imp->add_flag(
      "--atomic", c.atomic,
      "send the whole file as one UpsertSubscribers request: applied all or nothing "
      "(bounded by xbngd's api.max_request_bytes: 512 KiB, ~5,000 subscribers, by default)");
  imp->add_option("--etcd", c.etcd, "write into etcd (fleet mode): HOST:PORT[,HOST:PORT...]");
  imp->add_option("--node", c.node, "with --etcd: the node whose prefix receives the entries");
  imp->add_option("--etcd-ca", c.eo.ca, "CA of the etcd servers (PEM; enables TLS)");
  imp->add_option("--etcd-cert", c.eo.cert, "client certificate for etcd (PEM)");
  imp->add_option("--etcd-key", c.eo.key, "client key for etcd (PEM)");
  imp->add_option("--etcd-username", c.eo.username, "etcd user");
  imp->add_option("--etcd-password-file", c.etcd_password_file, "file holding the etcd password");
  imp->add_option("--txn-ops", c.txn_ops, "puts per etcd transaction (etcd's --max-txn-ops)")
      ->default_str("128");
  imp->add_option("--inflight", c.inflight, "transactions in flight")->default_str("8");
}

// stats, events, health, trace, bpf dump.
void add_other_commands(CLI::App& app, Commands& c) {
  c.stats = app.add_subcommand("stats", "counters by reason, ports, map fill");
  c.events = app.add_subcommand("events", "print events until interrupted");
  c.events->add_option("--count", c.count, "exit after N events");
  c.health = app.add_subcommand(
      "health", "exit 0 when xbngd accepts a connection and answers a health check, else 1");
  c.health->add_option("--timeout-ms", c.health_timeout_ms, "deadline")->default_str("3000");
  c.trace = add_trace_command(app, &c.ta);
  auto* bpf = app.add_subcommand("bpf", "read the pinned maps directly")->require_subcommand(1);
  c.dump = bpf->add_subcommand("dump", "print subscribers and routes from the pinned maps");
  c.dump->add_option("--bpffs", c.bpffs, "pin directory")->default_str(c.bpffs);
  auto* ha = app.add_subcommand("ha", "high availability ([ha] group)")->require_subcommand(1);
  c.ha_status = ha->add_subcommand(
      "status",
      "the group: members, who is active and since when, the last takeover and its cause");
  c.ha_switchover = ha->add_subcommand(
      "switchover", "hand over on purpose: the active steps down and another member takes over");
}

// sub import --etcd: straight into etcd, no xbngd involved.
int import_into_etcd(Commands& c) {
  if (c.node.empty()) throw CtlUsageError("sub import --etcd needs --node");
  c.eo.endpoints = split_endpoints(c.etcd);
  if (!c.etcd_password_file.empty()) {
    std::ifstream in(c.etcd_password_file);
    if (!in) throw std::runtime_error("cannot read " + c.etcd_password_file);
    std::getline(in, c.eo.password);
  }
  return ctl_etcd_import(c.eo, c.node, c.import_file, c.txn_ops, c.inflight);
}

// Runs the command given. Throws CtlUsageError or std::exception.
int run(Commands& c) {
  if (*c.dump) return ctl_bpf_dump(c.o, c.bpffs);
  if (*c.trace) return ctl_trace(c.o, c.ta);
  if (*c.imp && !c.etcd.empty()) return import_into_etcd(c);
  if (*c.imp && !c.node.empty()) throw CtlUsageError("sub import --node needs --etcd");
  if (*c.imp && c.atomic && !c.etcd.empty())
    throw CtlUsageError("sub import --atomic writes to xbngd, not etcd");
  Ctl ctl(c.o);
  if (*c.health) return ctl.health(c.health_timeout_ms);
  if (*c.add) return ctl.sub_add(c.a);
  if (*c.del) {
    if (!c.del_file.empty()) return ctl.sub_del_file(c.del_file);
    if (c.a.port.empty() || !c.a.outer || !c.a.inner)
      throw CtlUsageError("sub del: give --port, --outer and --inner, or --file");
    return ctl.sub_del(c.a);
  }
  if (*c.get) return ctl.sub_get(c.a);
  if (*c.list) return ctl.sub_list(c.la);
  if (*c.imp)
    return c.atomic ? ctl.sub_import_atomic(c.import_file) : ctl.sub_import(c.import_file);
  if (*c.stats) return ctl.stats();
  if (*c.events) return ctl.events(c.count);
  if (*c.ha_status) return ctl.ha_status();
  if (*c.ha_switchover) return ctl.ha_switchover();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // gRPC's own log lines (a failed handshake, ...) would precede xbngctl's
  // one-line diagnosis; GRPC_VERBOSITY set: keep them, for debugging.
  if (!std::getenv("GRPC_VERBOSITY")) gpr_set_log_function([](gpr_log_func_args*) {});
  CLI::App app{"xbngctl: control xbngd"};
  app.require_subcommand(1);
  Commands c;
  add_global_options(app, c.o);
  auto* sub = app.add_subcommand("sub", "subscribers")->require_subcommand(1);
  add_sub_commands(sub, c);
  add_import_command(sub, c);
  add_other_commands(app, c);

  // Usage errors (an unknown flag, a missing argument) exit 2: xbngctl(8).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    return report_local(c.o, "usage", fmt::format("{}; run with --help for usage", e.what()),
                        kExitUsage);
  }
  try {
    return run(c);
  } catch (const CtlUsageError& e) {
    return report_local(c.o, "usage", e.what(), kExitUsage);
  } catch (const std::exception& e) {
    return report_local(c.o, "error", e.what(), kExitRefused);
  }
}
