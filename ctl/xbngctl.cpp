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

int main(int argc, char** argv) {
  // gRPC's own log lines (a failed handshake, ...) would precede xbngctl's
  // one-line diagnosis; GRPC_VERBOSITY set: keep them, for debugging.
  if (!std::getenv("GRPC_VERBOSITY")) gpr_set_log_function([](gpr_log_func_args*) {});
  CLI::App app{"xbngctl: control xbngd"};
  app.require_subcommand(1);
  CtlOptions o;
  app.add_option("--server", o.server, "unix:///path or HOST:PORT")->default_str(o.server);
  app.add_flag("--json", o.json, "JSON output for scripts");
  app.add_option("--tls-ca", o.tls_ca, "CA to verify a TCP server (TLS)");
  app.add_option("--tls-cert", o.tls_cert, "client certificate (TLS)");
  app.add_option("--tls-key", o.tls_key, "client key (TLS)");
  app.add_flag("--insecure", o.insecure, "plaintext TCP (server started with --insecure-tcp)");

  auto* sub = app.add_subcommand("sub", "subscribers")->require_subcommand(1);
  SubArgs a;
  auto key_opts = [&](CLI::App* c) {
    c->add_option("--port", a.port, "access port")->required();
    c->add_option("--outer", a.outer, "S-VLAN")->required();
    c->add_option("--inner", a.inner, "C-VLAN")->required();
  };
  auto* add = sub->add_subcommand("add", "create or replace a subscriber");
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
  auto* del = sub->add_subcommand("del", "delete a subscriber, or every key of an import file");
  std::string del_file;
  del->add_option("--port", a.port, "access port");
  del->add_option("--outer", a.outer, "S-VLAN");
  del->add_option("--inner", a.inner, "C-VLAN");
  del->add_option("--file", del_file, "CSV or JSON Lines file (as for import): delete its keys");
  auto* get = sub->add_subcommand("get", "show a subscriber and its counters");
  key_opts(get);
  ListArgs la;
  auto* list = sub->add_subcommand("list", "list subscribers");
  list->add_option("--port", la.port, "only this access port");
  list->add_option("--outer", la.outer, "only this S-VLAN");
  list->add_option("--page-size", la.page_size, "entries per page")->default_str("1000");
  list->add_option("--page-token", la.page_token, "continue from this token");
  list->add_flag("--all", la.all, "follow next_page_token to the end");
  list->add_flag("--counters", la.counters, "include counters");
  std::string import_file;
  auto* imp =
      sub->add_subcommand("import", "bulk load a CSV or JSON Lines file (StreamSubscribers)");
  imp->add_option("FILE", import_file,
                  "CSV with header " + std::string(kCsvHeader) +
                      " (optionally followed by ,up_rate_bps,up_burst_bytes,"
                      "down_rate_bps,down_burst_bytes)"
                      " or JSON Lines (.jsonl; \"policy\": {...})")
      ->required();
  bool atomic = false;
  imp->add_flag(
      "--atomic", atomic,
      "send the whole file as one UpsertSubscribers request: applied all or nothing "
      "(bounded by xbngd's api.max_request_bytes: 512 KiB, ~5,000 subscribers, by default)");
  // Fleet mode: write into etcd instead of xbngd.
  std::string etcd, node, etcd_password_file;
  EtcdOptions eo;
  uint32_t txn_ops = 128, inflight = 8;
  imp->add_option("--etcd", etcd, "write into etcd (fleet mode): HOST:PORT[,HOST:PORT...]");
  imp->add_option("--node", node, "with --etcd: the node whose prefix receives the entries");
  imp->add_option("--etcd-ca", eo.ca, "CA of the etcd servers (PEM; enables TLS)");
  imp->add_option("--etcd-cert", eo.cert, "client certificate for etcd (PEM)");
  imp->add_option("--etcd-key", eo.key, "client key for etcd (PEM)");
  imp->add_option("--etcd-username", eo.username, "etcd user");
  imp->add_option("--etcd-password-file", etcd_password_file, "file holding the etcd password");
  imp->add_option("--txn-ops", txn_ops, "puts per etcd transaction (etcd's --max-txn-ops)")
      ->default_str("128");
  imp->add_option("--inflight", inflight, "transactions in flight")->default_str("8");
  auto* stats = app.add_subcommand("stats", "counters by reason, ports, map fill");
  int count = 0;
  auto* events = app.add_subcommand("events", "print events until interrupted");
  events->add_option("--count", count, "exit after N events");
  int health_timeout_ms = 3000;
  auto* health = app.add_subcommand(
      "health", "exit 0 when xbngd accepts a connection and answers a health check, else 1");
  health->add_option("--timeout-ms", health_timeout_ms, "deadline")->default_str("3000");
  std::string bpffs = "/sys/fs/bpf/xbng";
  TraceArgs ta;
  auto* trace = add_trace_command(app, &ta);
  auto* bpf = app.add_subcommand("bpf", "read the pinned maps directly")->require_subcommand(1);
  auto* dump = bpf->add_subcommand("dump", "print subscribers and routes from the pinned maps");
  dump->add_option("--bpffs", bpffs, "pin directory")->default_str(bpffs);

  // Usage errors (an unknown flag, a missing argument) exit 2: xbngctl(8).
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    return report_local(o, "usage", fmt::format("{}; run with --help for usage", e.what()),
                        kExitUsage);
  }
  try {
    if (*dump) return ctl_bpf_dump(o, bpffs);
    if (*trace) return ctl_trace(o, ta);
    if (*imp && !etcd.empty()) {
      if (node.empty()) throw CtlUsageError("sub import --etcd needs --node");
      eo.endpoints = split_endpoints(etcd);
      if (!etcd_password_file.empty()) {
        std::ifstream in(etcd_password_file);
        if (!in) throw std::runtime_error("cannot read " + etcd_password_file);
        std::getline(in, eo.password);
      }
      return ctl_etcd_import(eo, node, import_file, txn_ops, inflight);
    }
    if (*imp && !node.empty()) throw CtlUsageError("sub import --node needs --etcd");
    if (*imp && atomic && !etcd.empty())
      throw CtlUsageError("sub import --atomic writes to xbngd, not etcd");
    Ctl ctl(o);
    if (*health) return ctl.health(health_timeout_ms);
    if (*add) return ctl.sub_add(a);
    if (*del) {
      if (!del_file.empty()) return ctl.sub_del_file(del_file);
      if (a.port.empty() || !a.outer || !a.inner)
        throw CtlUsageError("sub del: give --port, --outer and --inner, or --file");
      return ctl.sub_del(a);
    }
    if (*get) return ctl.sub_get(a);
    if (*list) return ctl.sub_list(la);
    if (*imp) return atomic ? ctl.sub_import_atomic(import_file) : ctl.sub_import(import_file);
    if (*stats) return ctl.stats();
    if (*events) return ctl.events(count);
  } catch (const CtlUsageError& e) {
    return report_local(o, "usage", e.what(), kExitUsage);
  } catch (const std::exception& e) {
    return report_local(o, "error", e.what(), kExitRefused);
  }
  return 0;
}
