// xbngctl's failures in an operator's words: the one place that turns a gRPC
// status (or xbngctl's own refusal) into a message, an exit code and --json
// fields. gRPC says "UNAVAILABLE: failed to connect to all addresses" for a
// missing socket, a stale one, a permission problem and a TLS refusal alike;
// so on UNAVAILABLE and DEADLINE_EXCEEDED the address is probed again here,
// step by step (the socket's path, a connect, a TLS handshake), and the first
// step that fails is the diagnosis. Only failures pay for the probe.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <netdb.h>
#include <nlohmann/json.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "api/grpc_code.h"
#include "ctl/ctl.h"

namespace xbng::agent {

namespace {

constexpr int kProbeTimeoutMs = 3000;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

CtlFailure make(std::string kind, std::string message, std::string cause, std::string action,
                int exit_code) {
  CtlFailure f;
  f.kind = std::move(kind);
  f.cause = std::move(cause);
  f.action = std::move(action);
  f.message = f.action.empty() ? std::move(message) : fmt::format("{}; {}", message, f.action);
  f.exit_code = exit_code;
  return f;
}

const std::string kStartIt = "start it with systemctl start xbngd, or pass --server";

CtlFailure not_running(const std::string& srv, const std::string& cause) {
  return make("unreachable", fmt::format("xbngd is not running at {} ({})", srv, cause), cause,
              kStartIt, kExitUnreachable);
}

CtlFailure cannot_reach(const std::string& srv, const std::string& cause,
                        const std::string& action) {
  return make("unreachable", fmt::format("xbngd cannot be reached at {} ({})", srv, cause), cause,
              action, kExitUnreachable);
}

// A server address as xbngctl takes it: unix:PATH, unix://PATH, or a gRPC
// target naming HOST:PORT (optionally dns:///, ipv4:, ipv6:).
struct Target {
  bool unix_socket = false;
  std::string path, host, port;
};

std::optional<Target> parse_target(std::string s) {
  Target t;
  if (s.rfind("unix:", 0) == 0) {
    t.unix_socket = true;
    t.path = s.substr(s.rfind("unix://", 0) == 0 ? 7 : 5);
    return t;
  }
  for (const char* p : {"dns:///", "dns:", "ipv4:", "ipv6:"})
    if (s.rfind(p, 0) == 0) {
      s = s.substr(std::strlen(p));
      break;
    }
  if (s.find(':') == std::string::npos && s.find('/') != std::string::npos) return std::nullopt;
  if (!s.empty() && s[0] == '[') {
    const size_t e = s.find(']');
    if (e == std::string::npos) return std::nullopt;
    t.host = s.substr(1, e - 1);
    t.port = e + 2 <= s.size() && s[e + 1] == ':' ? s.substr(e + 2) : "443";
  } else if (const size_t c = s.rfind(':');
             c != std::string::npos && s.find(':') == c) {  // one ':': HOST:PORT
    t.host = s.substr(0, c);
    t.port = s.substr(c + 1);
  } else if (c == std::string::npos) {
    t.host = s;
    t.port = "443";
  } else {
    t.host = s;  // a bare IPv6 address
    t.port = "443";
  }
  return t;
}

std::string user_name(uid_t u) {
  if (const passwd* p = getpwuid(u)) return p->pw_name;
  return std::to_string(u);
}
std::string group_name(gid_t g) {
  if (const group* p = getgrgid(g)) return p->gr_name;
  return std::to_string(g);
}

CtlFailure permission(const std::string& srv, const std::string& path, const struct stat& st) {
  // Connecting needs write permission on the socket (xbngd makes it 0600,
  // owned by its user: root). Say who has it.
  const std::string owner = user_name(st.st_uid), grp = group_name(st.st_gid);
  const unsigned mode = st.st_mode & 07777;
  std::string who = "run as root";
  if ((mode & 0002) == 0) {
    if ((mode & 0020) && st.st_gid != 0)
      who = fmt::format("run as root or as a member of group {}", grp);
    else if ((mode & 0200) && st.st_uid != 0)
      who = fmt::format("run as root or as user {}", owner);
  }
  const std::string cause =
      fmt::format("socket {} owned by {}:{}, mode {:04o}", path, owner, grp, mode);
  CtlFailure f = make("permission",
                      fmt::format("permission denied on {} ({}, not writable by {})", srv, cause,
                                  user_name(geteuid())),
                      cause, who, kExitUnreachable);
  f.extra = {
      {"socket_owner", owner}, {"socket_group", grp}, {"socket_mode", fmt::format("{:04o}", mode)}};
  return f;
}

std::optional<CtlFailure> probe_unix(const std::string& srv, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) return not_running(srv, "no such socket");
    if (e == EACCES) {
      const std::string cause =
          fmt::format("the directory of {} is closed to {}", path, user_name(geteuid()));
      return make("permission", fmt::format("permission denied on {} ({})", srv, cause), cause,
                  "run as root", kExitUnreachable);
    }
    return cannot_reach(srv, fmt::format("{}: {}", path, std::strerror(e)), "pass --server");
  }
  if (!S_ISSOCK(st.st_mode))
    return make(
        "unreachable", fmt::format("xbngd is not running at {} ({} is not a socket)", srv, path),
        "not a socket", "pass --server with xbngd's socket (its grpc.listen)", kExitUnreachable);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    return cannot_reach(srv, "socket path too long", "pass --server with a shorter path");
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
  const int e = errno;
  close(fd);
  if (rc == 0) return std::nullopt;  // it accepts: the failure is elsewhere
  if (e == ECONNREFUSED) return not_running(srv, "stale socket, nothing listening");
  if (e == EACCES || e == EPERM) return permission(srv, path, st);
  if (e == EAGAIN)
    return cannot_reach(srv, "it accepts no more connections: listen backlog full",
                        "retry, or check xbngd with systemctl status xbngd");
  return cannot_reach(srv, std::strerror(e), "pass --server");
}

// Connects to HOST:PORT within the probe timeout; -1 and *why on failure.
int tcp_connect(const std::string& srv, const Target& t, std::optional<CtlFailure>* why) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  if (int rc = getaddrinfo(t.host.c_str(), t.port.c_str(), &hints, &res); rc != 0) {
    *why = cannot_reach(srv, fmt::format("cannot resolve {}: {}", t.host, gai_strerror(rc)),
                        "check the name, or pass --server HOST:PORT");
    return -1;
  }
  int last = 0, fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, kProbeTimeoutMs) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err ? -1 : 0;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc != 0) {
      last = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    timeval tv{kProbeTimeoutMs / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
  }
  const std::string listen =
      fmt::format("start xbngd with grpc.listen {}:{}, or pass --server", t.host, t.port);
  if (last == ECONNREFUSED)
    *why = cannot_reach(srv, "connection refused: nothing listens there", listen);
  else if (last == EHOSTUNREACH || last == ENETUNREACH)
    *why = cannot_reach(srv, "no route to host",
                        "check the address and the network, or pass --server");
  else if (last == ETIMEDOUT)
    *why = cannot_reach(
        srv, fmt::format("no answer to a TCP connect within {} s", kProbeTimeoutMs / 1000),
        "check that xbngd runs there and that no firewall drops the port");
  else
    *why = cannot_reach(srv, std::strerror(last), listen);
  return -1;
}

// What a probe handshake saw.
struct TlsSeen {
  bool tls_record = false;      // the server sent at least one TLS record
  bool cert_requested = false;  // ... and a CertificateRequest
};

void on_msg(int write_p, int, int content_type, const void* buf, size_t len, SSL*, void* arg) {
  auto* seen = static_cast<TlsSeen*>(arg);
  if (write_p || (content_type != SSL3_RT_HANDSHAKE && content_type != SSL3_RT_ALERT)) return;
  seen->tls_record = true;
  if (content_type == SSL3_RT_HANDSHAKE && len > 0 &&
      static_cast<const unsigned char*>(buf)[0] == SSL3_MT_CERTIFICATE_REQUEST)
    seen->cert_requested = true;
}

bool is_ip(const std::string& h) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, h.c_str(), &a4) == 1 || inet_pton(AF_INET6, h.c_str(), &a6) == 1;
}

// xbngctl's TLS client context, as its TLS flags make it; null when it cannot
// be made (`*failure` says why when the flags are at fault).
SSL_CTX* tls_client_context(const CtlOptions& o, TlsSeen* seen,
                            std::optional<CtlFailure>* failure) {
  SSL_CTX* c = SSL_CTX_new(TLS_client_method());
  if (!c) return nullptr;
  const bool plaintext_client = o.insecure;
  if (!plaintext_client) {
    if (!o.tls_ca.empty() ? SSL_CTX_load_verify_locations(c, o.tls_ca.c_str(), nullptr) != 1
                          : SSL_CTX_set_default_verify_paths(c) != 1) {
      SSL_CTX_free(c);
      return nullptr;
    }
    if (!o.tls_cert.empty() && !o.tls_key.empty() &&
        (SSL_CTX_use_certificate_chain_file(c, o.tls_cert.c_str()) != 1 ||
         SSL_CTX_use_PrivateKey_file(c, o.tls_key.c_str(), SSL_FILETYPE_PEM) != 1)) {
      SSL_CTX_free(c);
      *failure = make("tls",
                      fmt::format("TLS: xbngctl cannot use its client certificate {} with key {}",
                                  o.tls_cert, o.tls_key),
                      "certificate and key unusable or not a pair",
                      "pass --tls-cert and --tls-key of one certificate", kExitRefused);
      return nullptr;
    }
  }
  SSL_CTX_set_verify(c, plaintext_client ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_msg_callback(c, on_msg);
  SSL_CTX_set_msg_callback_arg(c, seen);
  return c;
}

// What the handshake and the HTTP/2 preface gave.
struct TlsOutcome {
  bool handshake = false;
  long verify = X509_V_OK;
  bool answered = false;  // the server answered the preface
};

TlsOutcome tls_handshake(SSL_CTX* c, const Target& t, int fd) {
  SSL* s = SSL_new(c);
  SSL_set_fd(s, fd);
  static const unsigned char alpn[] = {2, 'h', '2'};
  SSL_set_alpn_protos(s, alpn, sizeof alpn);
  if (is_ip(t.host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), t.host.c_str());
  } else {
    SSL_set_tlsext_host_name(s, t.host.c_str());
    SSL_set1_host(s, t.host.c_str());
  }
  TlsOutcome r;
  r.handshake = SSL_connect(s) == 1;
  r.verify = SSL_get_verify_result(s);
  if (r.handshake) {
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0";
    char buf[64];
    r.answered = SSL_write(s, preface, sizeof preface - 1) > 0 && SSL_read(s, buf, sizeof buf) > 0;
  }
  SSL_free(s);
  return r;
}

// xbngctl refused the server's certificate (verify result `verify`).
CtlFailure certificate_refused(const std::string& srv, const CtlOptions& o, const Target& t,
                               long verify) {
  const std::string ca_action =
      o.tls_ca.empty() ? "pass --tls-ca with the CA that signed xbngd's grpc.tls_cert"
                       : fmt::format(
                             "pass --tls-ca with the CA that signed xbngd's grpc.tls_cert "
                             "({} did not)",
                             o.tls_ca);
  std::string why = X509_verify_cert_error_string(verify);
  CtlFailure out;
  if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
    out = make("tls",
               fmt::format("TLS: xbngctl refused the certificate of xbngd at {} ({}: it does "
                           "not name {})",
                           srv, why, t.host),
               fmt::format("server certificate refused: {}", why),
               fmt::format("connect with a name the certificate holds in its subjectAltName, "
                           "or reissue it for {}",
                           t.host),
               kExitUnreachable);
  else if (verify == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
           verify == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT ||
           verify == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
           verify == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT ||
           verify == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE)
    out = make("tls",
               fmt::format("TLS: xbngctl refused the certificate of xbngd at {} (unknown CA: {})",
                           srv, why),
               fmt::format("server certificate refused: unknown CA: {}", why), ca_action,
               kExitUnreachable);
  else
    out = make("tls",
               fmt::format("TLS: xbngctl refused the certificate of xbngd at {} ({})", srv, why),
               fmt::format("server certificate refused: {}", why),
               "check xbngd's grpc.tls_cert (dates, key usage) and --tls-ca", kExitUnreachable);
  out.extra = {{"refused_by", "xbngctl"}, {"verify_error", why}};
  return out;
}

// xbngd asked for a client certificate, then hung up instead of answering
// HTTP/2. (Its alert is not reliable evidence of why: under TLS 1.3 it is
// sent after the client's handshake and often arrives undecodable.)
CtlFailure client_certificate_refused(const std::string& srv, const CtlOptions& o) {
  const std::string line =
      o.tls_cert.empty()
          ? fmt::format("TLS: xbngd at {} requires a client certificate and xbngctl gave none", srv)
          : fmt::format(
                "TLS: xbngd at {} refused xbngctl's client certificate {} (not signed "
                "by the CA of its grpc.tls_client_ca, or expired)",
                srv, o.tls_cert);
  CtlFailure out =
      make("tls", line, o.tls_cert.empty() ? "no client certificate" : "client certificate refused",
           "pass --tls-cert and --tls-key with a certificate signed by the CA of xbngd's "
           "grpc.tls_client_ca",
           kExitUnreachable);
  out.extra = {{"refused_by", "xbngd"}};
  return out;
}

// A TLS handshake over fd as xbngctl's TLS flags make it, then the HTTP/2
// preface (with TLS 1.3 the server judges the client's certificate after the
// client's handshake is done: its refusal is the first thing read).
std::optional<CtlFailure> probe_tls(const std::string& srv, const CtlOptions& o, const Target& t,
                                    int fd) {
  TlsSeen seen;
  std::optional<CtlFailure> out;
  SSL_CTX* c = tls_client_context(o, &seen, &out);
  if (!c) return out;
  const TlsOutcome r = tls_handshake(c, t, fd);
  SSL_CTX_free(c);
  if (o.insecure) {
    if (seen.tls_record)
      out = make(
          "tls",
          fmt::format("TLS: xbngd at {} expects TLS and xbngctl spoke plaintext (--insecure)", srv),
          "plaintext client, TLS server",
          "drop --insecure and pass --tls-ca (and --tls-cert, --tls-key)", kExitUnreachable);
  } else if (!r.handshake && r.verify != X509_V_OK) {
    out = certificate_refused(srv, o, t, r.verify);
  } else if (!r.handshake && !seen.tls_record) {
    out = make("tls",
               fmt::format("TLS: xbngd at {} speaks plaintext (started with --insecure-tcp) and "
                           "xbngctl spoke TLS",
                           srv),
               "TLS client, plaintext server",
               "pass --insecure, or give xbngd grpc.tls_cert and grpc.tls_key", kExitUnreachable);
  } else if (r.handshake && !r.answered && seen.cert_requested) {
    out = client_certificate_refused(srv, o);
  }
  return out;
}

std::optional<CtlFailure> probe(const CtlOptions& o) {
  const auto t = parse_target(o.server);
  if (!t) return std::nullopt;
  if (t->unix_socket) return probe_unix(o.server, t->path);
  std::optional<CtlFailure> why;
  const int fd = tcp_connect(o.server, *t, &why);
  if (fd < 0) return why;
  auto r = probe_tls(o.server, o, *t, fd);
  close(fd);
  return r;
}

std::string trailer(const grpc::ClientContext* ctx, const char* key) {
  if (!ctx) return "";
  const auto& md = ctx->GetServerTrailingMetadata();
  auto it = md.find(key);
  return it == md.end() ? "" : std::string(it->second.data(), it->second.size());
}

}  // namespace

CtlFailure describe_failure(const CtlOptions& o, const grpc::Status& st,
                            const grpc::ClientContext* ctx, std::chrono::milliseconds deadline) {
  const std::string& srv = o.server;
  const std::string& msg = st.error_message();
  CtlFailure f;
  switch (st.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      if (auto p = probe(o)) {
        f = std::move(*p);
      } else if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        const std::string within =
            deadline.count() ? fmt::format("{} ms", deadline.count()) : std::string("its deadline");
        f = make(
            "deadline",
            fmt::format("xbngd at {} did not answer within {} (deadline exceeded)", srv, within),
            "deadline exceeded",
            "check it with systemctl status xbngd, or allow more time (--timeout-ms)",
            kExitUnreachable);
        f.extra = {{"deadline_ms", std::to_string(deadline.count())}};
      } else {
        f = make("unavailable", fmt::format("xbngd at {} did not answer: {}", srv, msg), msg,
                 "check it with systemctl status xbngd", kExitUnreachable);
      }
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      if (trailer(ctx, "xbng-error-reason") == "fleet-read-only") {
        const std::string node = trailer(ctx, "xbng-fleet-node"),
                          prefix = trailer(ctx, "xbng-fleet-prefix");
        f = make("fleet_read_only",
                 fmt::format("xbngd at {} is in fleet mode (driven from etcd, node {}) and takes "
                             "no writes over gRPC",
                             srv, node),
                 "fleet mode",
                 fmt::format("change the subscriber in etcd instead, under {} (xbngctl sub import "
                             "--etcd ENDPOINTS --node {} FILE)",
                             prefix, node),
                 kExitRefused);
        f.extra = {{"fleet_node", node}, {"etcd_prefix", prefix}};
      } else {
        f = make("failed_precondition", msg, "", "", kExitRefused);
      }
      break;
    // Refusals whose message xbngd writes for people (the field, the value,
    // the limit): that message alone.
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::OUT_OF_RANGE:
      f = make(lower(grpc_code_name(static_cast<int>(st.error_code()))), msg, "", "", kExitRefused);
      break;
    default:
      f = make(lower(grpc_code_name(static_cast<int>(st.error_code()))),
               fmt::format("xbngd at {} failed the call: {} ({})", srv, msg,
                           grpc_code_name(static_cast<int>(st.error_code()))),
               "", "", kExitRefused);
  }
  f.code = grpc_code_name(static_cast<int>(st.error_code()));
  f.server_message = msg;
  return f;
}

std::string failure_json(const CtlFailure& f, const std::string& server) {
  nlohmann::ordered_json j;
  j["kind"] = f.kind;
  j["server"] = server;
  j["message"] = f.message;
  if (!f.cause.empty()) j["cause"] = f.cause;
  if (!f.action.empty()) j["action"] = f.action;
  j["code"] = f.code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.code);
  if (!f.code.empty()) j["server_message"] = f.server_message;
  j["exit_code"] = f.exit_code;
  for (const auto& [k, v] : f.extra) j[k] = v;
  return j.dump();
}

int report_failure(const CtlOptions& o, const CtlFailure& f) {
  if (o.json) {
    std::printf("{\"error\":%s}\n", failure_json(f, o.server).c_str());
    std::fflush(stdout);
  }
  std::fprintf(stderr, "xbngctl: %s\n", f.message.c_str());
  return f.exit_code;
}

int report_status(const CtlOptions& o, const grpc::Status& st, const grpc::ClientContext* ctx,
                  std::chrono::milliseconds deadline) {
  return report_failure(o, describe_failure(o, st, ctx, deadline));
}

int report_local(const CtlOptions& o, const std::string& kind, const std::string& message,
                 int exit_code) {
  CtlFailure f;
  f.kind = kind;
  f.message = message;
  f.exit_code = exit_code;
  return report_failure(o, f);
}

}  // namespace xbng::agent
