// xbngctl: the options every command takes, the gRPC client commands (class
// Ctl), failure reporting, and the two commands that are not gRPC clients
// (bpf dump, sub import --etcd).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "xbng/v1/xbng.grpc.pb.h"

namespace xbng::agent {

struct CtlOptions {
  std::string server = "unix:///run/xbng/xbngd.sock";
  bool json = false;
  std::string tls_ca, tls_cert, tls_key;
  bool insecure = false;
};

struct SubArgs {
  std::string port;
  uint32_t outer = 0, inner = 0;
  std::string mac, ipv4, ipv6;
  std::vector<std::string> ipv6_prefixes, ipv4_prefixes;
  // Rate plan. Rates in bits/s, bursts in bytes, each a number
  // with an optional k/M/G suffix (x1000). None given and !unlimited: no
  // policy of its own (the port's default applies).
  std::string up_rate, up_burst, down_rate, down_burst;
  bool unlimited = false;
};

struct ListArgs {
  std::string port;
  uint32_t outer = 0;
  uint32_t page_size = 1000;
  std::string page_token;
  bool all = false, counters = false;
};

// The channel to o.server: a unix socket or plaintext TCP (--insecure), else TLS
// with --tls-ca/--tls-cert/--tls-key.
std::shared_ptr<grpc::Channel> make_channel(const CtlOptions& o);

// ---- failures ------------------------------------------------------------------
// Every failure of an xbngctl command is reported by report_failure(): one
// line on stderr ("xbngctl: MESSAGE") and, with --json, the same as fields on
// stdout: {"error":{"kind":...,"server":...,"message":...,"cause":...,
// "action":...,"code":...,"server_message":...,"exit_code":N,...}}.

// Exit status of xbngctl (xbngctl(8), EXIT STATUS).
inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;  // a value refused, by xbngd or by xbngctl's own check
inline constexpr int kExitUsage = 2;    // unknown flag, missing argument
inline constexpr int kExitUnreachable =
    3;  // no answer from xbngd: not running, permission, TLS, deadline

struct CtlFailure {
  // unreachable, permission, tls, deadline, fleet_read_only, invalid_argument,
  // failed_precondition, not_found, invalid_value (xbngctl's own check),
  // usage, or the gRPC code in lower case for the rest.
  std::string kind;
  std::string message;         // the line, without "xbngctl: "
  std::string cause;           // why, in a few words ("no such socket")
  std::string action;          // the next step, when there is one
  std::string code;            // the gRPC status code name; empty for xbngctl's own checks
  std::string server_message;  // the status message as received; empty for local checks
  int exit_code = kExitRefused;
  std::vector<std::pair<std::string, std::string>> extra;  // more fields (socket_owner, ...)
};

// A usage error (exit 2): a missing or conflicting argument.
struct CtlUsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What went wrong with a call to o.server that ended in `st`: for
// UNAVAILABLE and DEADLINE_EXCEEDED the address is probed (the socket's
// path, a TCP connect, a TLS handshake) to say precisely why. `ctx`: the
// call's context (trailing metadata), may be null; `deadline`: the call's
// deadline, 0 if none.
CtlFailure describe_failure(const CtlOptions& o, const grpc::Status& st,
                            const grpc::ClientContext* ctx,
                            std::chrono::milliseconds deadline = std::chrono::milliseconds(0));
// Prints f (stderr, and stdout with --json); returns f.exit_code.
int report_failure(const CtlOptions& o, const CtlFailure& f);
// describe_failure + report_failure.
int report_status(const CtlOptions& o, const grpc::Status& st, const grpc::ClientContext* ctx,
                  std::chrono::milliseconds deadline = std::chrono::milliseconds(0));
// f's fields as one JSON object (the value of "error"), server included.
std::string failure_json(const CtlFailure& f, const std::string& server);
// xbngctl's own refusal: kind invalid_value (exit 1) or usage (exit 2).
int report_local(const CtlOptions& o, const std::string& kind, const std::string& message,
                 int exit_code);

class Ctl {
 public:
  explicit Ctl(const CtlOptions& o);
  int sub_add(const SubArgs& a);
  int sub_del(const SubArgs& a);
  int sub_get(const SubArgs& a);
  int sub_list(const ListArgs& a);
  int sub_import(const std::string& file);
  int sub_import_atomic(const std::string& file);  // one UpsertSubscribers: all or nothing
  int sub_del_file(const std::string& file);
  int stats();
  int events(int count);
  int ha_status();  // ha.cpp
  int ha_switchover();
  int health(int timeout_ms);

 private:
  int fail(const grpc::Status& st, const grpc::ClientContext* ctx) const;
  CtlOptions o_;
  std::unique_ptr<xbng::v1::Subscribers::Stub> stub_;
};

// bpf dump: reads the pinned maps under bpffs (libbpf), not xbngd.
int ctl_bpf_dump(const CtlOptions& o, const std::string& bpffs);

}  // namespace xbng::agent
