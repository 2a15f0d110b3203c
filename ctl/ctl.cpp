#include "ctl/ctl.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/generic/generic_stub.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <cstring>
#include <google/protobuf/util/json_util.h>
#include <net/if.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <future>
#include <iostream>
#include <sstream>
#include <string_view>

#include "xbng/agent/dataplane.h"
#include "xbng/agent/net.h"
#include "xbng/agent/subscriber_json.h"

namespace xbng::agent {

namespace v1 = xbng::v1;
using google::protobuf::util::JsonPrintOptions;

namespace {

std::string to_json(const google::protobuf::Message& m) {
  JsonPrintOptions jo;
  jo.preserve_proto_field_names = true;
  jo.always_print_primitive_fields = true;
  std::string s;
  (void)google::protobuf::util::MessageToJsonString(m, &s, jo);
  return s;
}

const char* code_name(grpc::StatusCode c) {
  static const char* names[] = {"OK",
                                "CANCELLED",
                                "UNKNOWN",
                                "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED",
                                "NOT_FOUND",
                                "ALREADY_EXISTS",
                                "PERMISSION_DENIED",
                                "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION",
                                "ABORTED",
                                "OUT_OF_RANGE",
                                "UNIMPLEMENTED",
                                "INTERNAL",
                                "UNAVAILABLE",
                                "DATA_LOSS",
                                "UNAUTHENTICATED"};
  int i = static_cast<int>(c);
  return i >= 0 && i < 17 ? names[i] : "?";
}

std::string join(const google::protobuf::RepeatedPtrField<std::string>& v) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s.push_back(';');
    s.append(x);
  }
  return s;
}

void print_sub_table_header() {
  std::printf("%-12s %5s %5s  %-17s  %-15s  %-39s  %s\n", "PORT", "OUTER", "INNER", "MAC", "IPV4",
              "IPV6", "PREFIXES");
}
void print_sub_row(const v1::Subscriber& s) {
  std::string pfx = join(s.ipv6_prefixes());
  if (s.ipv4_prefixes_size()) {
    if (!pfx.empty()) pfx.push_back(';');
    pfx.append(join(s.ipv4_prefixes()));
  }
  std::string mac = s.mac().empty() ? std::string("(learn)") : s.mac();
  if (s.mac_learned()) mac.push_back('*');
  std::printf("%-12s %5u %5u  %-17s  %-15s  %-39s  %s\n", s.port().c_str(), s.outer_vlan(),
              s.inner_vlan(), mac.c_str(), s.ipv4().c_str(), s.ipv6().c_str(), pfx.c_str());
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(fmt::format("cannot read {}", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::shared_ptr<grpc::Channel> make_channel(const CtlOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.server.rfind("unix:", 0) == 0 || o.insecure) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions so;
    if (!o.tls_ca.empty()) so.pem_root_certs = read_all(o.tls_ca);
    if (!o.tls_cert.empty()) so.pem_cert_chain = read_all(o.tls_cert);
    if (!o.tls_key.empty()) so.pem_private_key = read_all(o.tls_key);
    creds = grpc::SslCredentials(so);
  }
  return grpc::CreateCustomChannel(o.server, creds, args);
}

namespace {

// Splits `s` at `sep` without copying: calls fn for each field.
template <typename F>
void for_each_field(std::string_view s, char sep, F&& fn) {
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    fn(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
}

// `ncols`: 8 (kCsvHeader) or 12 (kCsvHeaderPolicy).
std::string parse_csv(std::string_view l, v1::Subscriber* s, size_t ncols = 8) {
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  std::string_view f[12];
  size_t nf = 0;
  for_each_field(l, ',', [&](std::string_view x) {
    if (nf < 12) f[nf] = x;
    ++nf;
  });
  if (nf != ncols)
    return fmt::format("expected {} columns ({}), got {}", ncols,
                       ncols == 8 ? kCsvHeader : kCsvHeaderPolicy, nf);
  s->Clear();
  s->set_port(f[0].data(), f[0].size());
  auto num = [](std::string_view t, uint32_t* v) {
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string_view::npos)
      return false;
    uint32_t x = 0;
    for (char c : t) x = x * 10 + static_cast<uint32_t>(c - '0');
    *v = x;
    return true;
  };
  uint32_t o = 0, i = 0;
  if (!num(f[1], &o)) return fmt::format("outer_vlan \"{}\" is not a number", f[1]);
  if (!num(f[2], &i)) return fmt::format("inner_vlan \"{}\" is not a number", f[2]);
  s->set_outer_vlan(o);
  s->set_inner_vlan(i);
  s->set_mac(f[3].data(), f[3].size());
  s->set_ipv4(f[4].data(), f[4].size());
  s->set_ipv6(f[5].data(), f[5].size());
  if (!f[6].empty())
    for_each_field(f[6], ';', [&](std::string_view x) { s->add_ipv6_prefixes(x.data(), x.size()); });
  if (!f[7].empty())
    for_each_field(f[7], ';', [&](std::string_view x) { s->add_ipv4_prefixes(x.data(), x.size()); });
  if (ncols == 12 && !(f[8].empty() && f[9].empty() && f[10].empty() && f[11].empty())) {
    static constexpr const char* names[] = {"up_rate_bps", "up_burst_bytes", "down_rate_bps",
                                            "down_burst_bytes"};
    uint64_t v[4] = {};
    for (int k = 0; k < 4; ++k) {
      if (f[8 + k].empty()) continue;
      auto n = parse_si(f[8 + k]);
      if (!n) return fmt::format("{} \"{}\" is not a number", names[k], f[8 + k]);
      v[k] = *n;
    }
    auto* p = s->mutable_policy();
    p->set_up_rate_bps(v[0]);
    p->set_up_burst_bytes(v[1]);
    p->set_down_rate_bps(v[2]);
    p->set_down_burst_bytes(v[3]);
  }
  return "";
}

// Reads a file line by line through a large buffer (no per-line stream
// machinery). Lines are passed without their '\n'.
class LineReader {
 public:
  explicit LineReader(const std::string& file) : f_(std::fopen(file.c_str(), "rb")), buf_(1 << 20) {
    if (!f_) throw std::runtime_error(fmt::format("cannot read {}", file));
  }
  ~LineReader() { std::fclose(f_); }
  bool next(std::string_view* line) {
    for (;;) {
      if (const char* nl = static_cast<const char*>(std::memchr(buf_.data() + b_, '\n', e_ - b_))) {
        *line = std::string_view(buf_.data() + b_, nl - (buf_.data() + b_));
        b_ = nl - buf_.data() + 1;
        return true;
      }
      if (eof_) {
        if (b_ == e_) return false;
        *line = std::string_view(buf_.data() + b_, e_ - b_);
        b_ = e_;
        return true;
      }
      // Move the partial line to the front, grow for very long lines, refill.
      std::memmove(buf_.data(), buf_.data() + b_, e_ - b_);
      e_ -= b_;
      b_ = 0;
      if (e_ == buf_.size()) buf_.resize(buf_.size() * 2);
      const size_t got = std::fread(buf_.data() + e_, 1, buf_.size() - e_, f_);
      if (got == 0) eof_ = true;
      e_ += got;
    }
  }

 private:
  std::FILE* f_;
  std::vector<char> buf_;
  size_t b_ = 0, e_ = 0;
  bool eof_ = false;
};

}  // namespace

std::string parse_csv_line(const std::string& line, v1::Subscriber* s) {
  return parse_csv(line, s, std::count(line.begin(), line.end(), ',') >= 11 ? 12 : 8);
}

std::optional<uint64_t> parse_si(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t mult = 1;
  switch (s.back()) {
    case 'k': case 'K': mult = 1000; break;
    case 'm': case 'M': mult = 1000000; break;
    case 'g': case 'G': mult = 1000000000; break;
  }
  if (mult != 1) s.remove_suffix(1);
  if (s.empty() || s.size() > 20) return std::nullopt;
  // Digits with at most one '.', scaled exactly (no floating point).
  uint64_t whole = 0, frac = 0, scale = 1;
  bool dot = false;
  for (char c : s) {
    if (c == '.' && !dot) {
      dot = true;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    if (!dot) {
      if (whole > (UINT64_MAX - 9) / 10) return std::nullopt;
      whole = whole * 10 + static_cast<uint64_t>(c - '0');
    } else if (scale < mult) {
      frac = frac * 10 + static_cast<uint64_t>(c - '0');
      scale *= 10;
    } else if (c != '0') {
      return std::nullopt;  // finer than one unit
    }
  }
  if (whole > UINT64_MAX / mult) return std::nullopt;
  return whole * mult + frac * (mult / scale);
}

Ctl::Ctl(const CtlOptions& o) : o_(o), stub_(v1::Subscribers::NewStub(make_channel(o))) {}

int Ctl::fail(const grpc::Status& st, const grpc::ClientContext* ctx) const {
  return report_status(o_, st, ctx);
}

int Ctl::sub_add(const SubArgs& a) {
  v1::UpsertSubscribersRequest req;
  auto* s = req.add_subscribers();
  s->set_port(a.port);
  s->set_outer_vlan(a.outer);
  s->set_inner_vlan(a.inner);
  s->set_mac(a.mac);
  s->set_ipv4(a.ipv4);
  s->set_ipv6(a.ipv6);
  for (const auto& p : a.ipv6_prefixes) s->add_ipv6_prefixes(p);
  for (const auto& p : a.ipv4_prefixes) s->add_ipv4_prefixes(p);
  if (a.unlimited || !a.up_rate.empty() || !a.up_burst.empty() || !a.down_rate.empty() ||
      !a.down_burst.empty()) {
    uint64_t v[4] = {};
    const std::string* in[4] = {&a.up_rate, &a.up_burst, &a.down_rate, &a.down_burst};
    static constexpr const char* flags[] = {"--up-rate", "--up-burst", "--down-rate",
                                            "--down-burst"};
    for (int k = 0; k < 4; ++k) {
      if (in[k]->empty()) continue;
      auto n = parse_si(*in[k]);
      if (!n) {
        return report_local(o_, "invalid_value",
                            fmt::format("{} \"{}\": not a number (k/M/G suffixes allowed)",
                                        flags[k], *in[k]),
                            kExitRefused);
      }
      v[k] = *n;
    }
    auto* p = s->mutable_policy();
    p->set_up_rate_bps(v[0]);
    p->set_up_burst_bytes(v[1]);
    p->set_down_rate_bps(v[2]);
    p->set_down_burst_bytes(v[3]);
  }
  v1::UpsertSubscribersResponse resp;
  grpc::ClientContext ctx;
  auto st = stub_->UpsertSubscribers(&ctx, req, &resp);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json)
    std::printf("%s\n", to_json(resp).c_str());
  else
    std::printf("%s %s/%u/%u\n",
                resp.created() ? "created" : resp.updated() ? "updated" : "unchanged",
                a.port.c_str(), a.outer, a.inner);
  return 0;
}

int Ctl::sub_del(const SubArgs& a) {
  v1::DeleteSubscribersRequest req;
  auto* k = req.add_keys();
  k->set_port(a.port);
  k->set_outer_vlan(a.outer);
  k->set_inner_vlan(a.inner);
  v1::DeleteSubscribersResponse resp;
  grpc::ClientContext ctx;
  auto st = stub_->DeleteSubscribers(&ctx, req, &resp);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json)
    std::printf("%s\n", to_json(resp).c_str());
  else
    std::printf("%s %s/%u/%u\n", resp.deleted() ? "deleted" : "not found (nothing to delete)",
                a.port.c_str(), a.outer, a.inner);
  return 0;
}

int Ctl::sub_get(const SubArgs& a) {
  v1::GetSubscriberRequest req;
  req.mutable_key()->set_port(a.port);
  req.mutable_key()->set_outer_vlan(a.outer);
  req.mutable_key()->set_inner_vlan(a.inner);
  v1::GetSubscriberResponse resp;
  grpc::ClientContext ctx;
  auto st = stub_->GetSubscriber(&ctx, req, &resp);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) {
    std::printf("%s\n", to_json(resp).c_str());
    return 0;
  }
  const auto& s = resp.subscriber();
  std::printf("subscriber   %s/%u/%u\n", s.port().c_str(), s.outer_vlan(), s.inner_vlan());
  std::string mac = s.mac().empty() ? std::string("(to be learned)") : s.mac();
  if (s.mac_learned()) mac.append(" (learned)");
  std::printf("mac          %s\n", mac.c_str());
  std::printf("ipv4         %s\n", s.ipv4().c_str());
  std::printf("ipv6         %s\n", s.ipv6().c_str());
  std::printf("ipv6 prefix  %s\n", join(s.ipv6_prefixes()).c_str());
  std::printf("ipv4 prefix  %s\n", join(s.ipv4_prefixes()).c_str());
  std::printf("up           %lu packets, %lu bytes\n", s.counters().up_packets(),
              s.counters().up_bytes());
  std::printf("down         %lu packets, %lu bytes\n", s.counters().down_packets(),
              s.counters().down_bytes());
  auto rate = [](uint64_t bps, uint64_t burst) {
    return bps ? fmt::format("{} bit/s, burst {} bytes", bps, burst) : std::string("unlimited");
  };
  const auto& e = s.effective_policy();
  const char* from = s.has_policy() ? "own" : "port default";
  std::printf("policy up    %s (%s)\n", rate(e.up_rate_bps(), e.up_burst_bytes()).c_str(), from);
  std::printf("policy down  %s (%s)\n", rate(e.down_rate_bps(), e.down_burst_bytes()).c_str(), from);
  std::printf("policed up   %lu packets, %lu bytes\n", s.counters().up_policed_packets(),
              s.counters().up_policed_bytes());
  std::printf("policed down %lu packets, %lu bytes\n", s.counters().down_policed_packets(),
              s.counters().down_policed_bytes());
  auto lease = [](const char* fam, bool has, const v1::Lease& l) {
    if (!has) {
      std::printf("lease %s   none\n", fam);
      return;
    }
    std::string what = l.address();
    for (const auto& p : l.prefixes()) what += (what.empty() ? "" : " ") + p;
    if (l.bound())
      std::printf("lease %s   bound %s, expires in %llds (%llu)\n", fam, what.c_str(),
                  static_cast<long long>(l.expires_unix()) - static_cast<long long>(time(nullptr)),
                  static_cast<unsigned long long>(l.expires_unix()));
    else
      std::printf("lease %s   not bound (last: %s)\n", fam, what.c_str());
  };
  lease("v4", s.has_lease_v4(), s.lease_v4());
  lease("v6", s.has_lease_v6(), s.lease_v6());
  return 0;
}

int Ctl::sub_list(const ListArgs& a) {
  v1::ListSubscribersRequest req;
  req.set_page_size(a.page_size);
  req.set_page_token(a.page_token);
  req.set_port(a.port);
  req.set_outer_vlan(a.outer);
  req.set_with_counters(a.counters);
  bool first = true;
  uint64_t shown = 0;
  for (;;) {
    v1::ListSubscribersResponse resp;
    grpc::ClientContext ctx;
    auto st = stub_->ListSubscribers(&ctx, req, &resp);
    if (!st.ok()) return fail(st, &ctx);
    if (o_.json) {
      if (a.all) {
        // One JSON document: {"subscribers":[...],"total_count":"N"}.
        for (const auto& s : resp.subscribers())
          std::printf("%s%s", first && shown == 0 && &s == &resp.subscribers(0)
                                  ? "{\"subscribers\":[" : ",", to_json(s).c_str());
        if (resp.next_page_token().empty())
          std::printf("%s],\"total_count\":\"%lu\",\"boot_id\":\"%s\"}\n",
                      shown + resp.subscribers_size() == 0 ? "{\"subscribers\":[" : "",
                      resp.total_count(), resp.boot_id().c_str());
      } else {
        std::printf("%s\n", to_json(resp).c_str());
      }
    } else {
      if (first) print_sub_table_header();
      for (const auto& s : resp.subscribers()) print_sub_row(s);
    }
    first = false;
    shown += resp.subscribers_size();
    if (!a.all || resp.next_page_token().empty()) {
      if (!o_.json)
        std::printf("-- %lu shown, %lu matching%s\n", shown, resp.total_count(),
                    resp.next_page_token().empty()
                        ? ""
                        : fmt::format("; next: --page-token {}", resp.next_page_token()).c_str());
      return 0;
    }
    req.set_page_token(resp.next_page_token());
  }
}

uint64_t read_import_file(const std::string& file,
                          const std::function<bool(const v1::Subscriber&)>& fn,
                          std::vector<std::string>* errors) {
  LineReader in(file);
  std::string_view line;
  bool csv = false, header_seen = false;
  size_t ncols = 8;
  uint64_t lineno = 0, bad = 0;
  v1::Subscriber s;
  while (in.next(&line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    if (!header_seen) {
      header_seen = true;
      if (line[0] != '{') {
        csv = true;
        std::string_view h = line;
        if (!h.empty() && h.back() == '\r') h.remove_suffix(1);
        if (h == kCsvHeaderPolicy)
          ncols = 12;
        else if (h != kCsvHeader)
          throw std::runtime_error(fmt::format("{}:1: CSV header must be \"{}\" or \"{}\"", file,
                                               kCsvHeader, kCsvHeaderPolicy));
        continue;
      }
    }
    std::string err;
    if (csv) {
      err = parse_csv(line, &s, ncols);
    } else if (auto e = subscriber_from_json(line, &s)) {
      err = std::move(*e);
    }
    if (!err.empty()) {
      ++bad;
      if (errors->size() < 20) errors->push_back(fmt::format("{}:{}: {}", file, lineno, err));
      continue;
    }
    if (!fn(s)) break;
  }
  return bad;
}

namespace {
// absl (as packaged) checks every Mutex acquisition for lock-order cycles, a
// debugging aid that costs ~5% of a bulk import's CPU in gRPC's locks.
void bulk_mode() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }
}  // namespace

int Ctl::sub_import(const std::string& file) {
  bulk_mode();
  struct stat stt {};
  if (stat(file.c_str(), &stt) != 0) throw std::runtime_error(fmt::format("cannot read {}", file));
  grpc::ClientContext ctx;
  v1::StreamSubscribersResponse resp;
  auto writer = stub_->StreamSubscribers(&ctx, &resp);
  uint64_t sent = 0;
  std::vector<std::string> local_errors;
  const auto t0 = std::chrono::steady_clock::now();
  const bool tty = isatty(2);
  const uint64_t local_fail = read_import_file(
      file,
      [&](const v1::Subscriber& s) {
        // Let gRPC coalesce messages into large frames (flushed at the
        // transport's write-buffer size and by WritesDone).
        if (!writer->Write(s, grpc::WriteOptions().set_buffer_hint())) return false;
        if (++sent % 50000 == 0 && tty)
          std::fprintf(stderr, "\r%lu sent (%.0f/s)", sent,
                       double(sent) / std::chrono::duration<double>(
                                          std::chrono::steady_clock::now() - t0)
                                          .count());
        return true;
      },
      &local_errors);
  writer->WritesDone();
  auto st = writer->Finish();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) std::fprintf(stderr, "\n");
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) std::printf("%s\n", to_json(resp).c_str());
  std::fprintf(stderr, "%lu sent in %.2f s: %lu applied, %lu failed on the server, %lu lines "
               "unreadable\n",
               sent, secs, resp.applied(), resp.failed(), local_fail);
  for (const auto& e : local_errors) std::fprintf(stderr, "  %s\n", e.c_str());
  for (const auto& f : resp.failures())
    std::fprintf(stderr, "  entry %lu (%s/%u/%u): %s: %s\n", f.index(), f.key().port().c_str(),
                 f.key().outer_vlan(), f.key().inner_vlan(),
                 code_name(static_cast<grpc::StatusCode>(f.code())), f.message().c_str());
  if (resp.failed() > static_cast<uint64_t>(resp.failures_size()))
    std::fprintf(stderr, "  ... %lu more failures not reported\n",
                 resp.failed() - resp.failures_size());
  return resp.failed() || local_fail ? 1 : 0;
}

int Ctl::sub_import_atomic(const std::string& file) {
  bulk_mode();
  struct stat stt {};
  if (stat(file.c_str(), &stt) != 0) throw std::runtime_error(fmt::format("cannot read {}", file));
  v1::UpsertSubscribersRequest req;
  std::vector<std::string> errors;
  const uint64_t bad = read_import_file(
      file,
      [&](const v1::Subscriber& s) {
        *req.add_subscribers() = s;
        return true;
      },
      &errors);
  if (bad) {  // all or nothing: an unreadable line sends nothing
    report_local(o_, "invalid_value", fmt::format("{} unreadable lines: nothing sent", bad),
                 kExitRefused);
    for (const auto& e : errors) std::fprintf(stderr, "  %s\n", e.c_str());
    return kExitRefused;
  }
  v1::UpsertSubscribersResponse resp;
  grpc::ClientContext ctx;
  const auto t0 = std::chrono::steady_clock::now();
  auto st = stub_->UpsertSubscribers(&ctx, req, &resp);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) std::printf("%s\n", to_json(resp).c_str());
  std::fprintf(stderr, "%d subscribers in one request, %.2f s: %lu created, %lu updated, %lu "
               "unchanged\n",
               req.subscribers_size(), secs, resp.created(), resp.updated(), resp.unchanged());
  return 0;
}

int Ctl::sub_del_file(const std::string& file) {
  bulk_mode();
  constexpr int kChunk = 10000;  // ~200 KB a request: within api.max_request_bytes (512 KiB)
  uint64_t deleted = 0, not_found = 0;
  v1::DeleteSubscribersRequest req, sending;
  v1::DeleteSubscribersResponse sresp;
  grpc::Status err;
  // One request in flight while the next chunk is read: chunks still go one
  // after the other, in file order. Its context outlives it: a refusal's
  // trailing metadata is read from it.
  std::future<grpc::Status> inflight;
  std::unique_ptr<grpc::ClientContext> ctx;
  auto wait = [&]() {
    if (!inflight.valid()) return err.ok();
    grpc::Status st = inflight.get();
    if (!st.ok()) {
      err = st;
      return false;
    }
    deleted += sresp.deleted();
    not_found += sresp.not_found();
    return true;
  };
  auto flush = [&]() {
    if (!wait()) return false;
    if (req.keys_size() == 0) return true;
    sending.Swap(&req);
    req.clear_keys();
    ctx = std::make_unique<grpc::ClientContext>();
    inflight = std::async(std::launch::async,
                          [&] { return stub_->DeleteSubscribers(ctx.get(), sending, &sresp); });
    return true;
  };
  std::vector<std::string> errors;
  const uint64_t bad = read_import_file(
      file,
      [&](const v1::Subscriber& s) {
        auto* k = req.add_keys();
        k->set_port(s.port());
        k->set_outer_vlan(s.outer_vlan());
        k->set_inner_vlan(s.inner_vlan());
        return req.keys_size() < kChunk || flush();
      },
      &errors);
  if (err.ok()) flush();
  wait();
  if (!err.ok()) return fail(err, ctx.get());
  if (o_.json)
    std::printf("{\"deleted\":\"%lu\",\"not_found\":\"%lu\",\"unreadable\":\"%lu\"}\n", deleted,
                not_found, bad);
  else
    std::printf("%lu deleted, %lu not found, %lu lines unreadable\n", deleted, not_found, bad);
  for (const auto& e : errors) std::fprintf(stderr, "  %s\n", e.c_str());
  return bad ? 1 : 0;
}

int Ctl::stats() {
  v1::GetStatsRequest req;
  v1::GetStatsResponse resp;
  grpc::ClientContext ctx;
  auto st = stub_->GetStats(&ctx, req, &resp);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) {
    std::printf("%s\n", to_json(resp).c_str());
    return 0;
  }
  std::printf("subscribers %lu   (boot id %s)\n\n", resp.subscribers(), resp.boot_id().c_str());
  std::printf("%-28s %-8s %14s %16s\n", "REASON", "KIND", "PACKETS", "BYTES");
  for (const auto& r : resp.reasons())
    std::printf("%-28s %-8s %14lu %16lu\n", r.reason().c_str(), r.kind().c_str(), r.packets(),
                r.bytes());
  std::printf("\n%-12s %7s %-7s %12s %14s %12s %14s\n", "PORT", "IFINDEX", "ROLE", "RX_PKTS",
              "RX_BYTES", "TX_PKTS", "TX_BYTES");
  for (const auto& p : resp.ports())
    std::printf("%-12s %7u %-7s %12lu %14lu %12lu %14lu\n", p.name().c_str(), p.ifindex(),
                p.role().c_str(), p.rx_packets(), p.rx_bytes(), p.tx_packets(), p.tx_bytes());
  std::printf("\n%-14s %10s %12s %6s\n", "MAP", "ENTRIES", "MAX", "FILL");
  for (const auto& m : resp.maps())
    std::printf("%-14s %10lu %12lu %5.1f%%\n", m.name().c_str(), m.entries(), m.max_entries(),
                m.max_entries() ? 100.0 * double(m.entries()) / double(m.max_entries()) : 0.0);
  std::printf("\napi: %lu/%lu gRPC connections (%lu refused), %lu watchers (%lu disconnected "
              "for falling behind, %lu refused)\n",
              resp.grpc_connections(), resp.grpc_max_connections(),
              resp.grpc_connections_refused(), resp.watchers(), resp.watchers_disconnected(),
              resp.watchers_refused());
  if (resp.reserved_conflict_count()) {
    std::printf("\nRESERVED ADDRESS CONFLICTS: %lu (first %d)\n", resp.reserved_conflict_count(),
                resp.reserved_conflicts_size());
    for (const auto& c : resp.reserved_conflicts())
      std::printf("  %s/%u/%u %s %s overlaps %s\n", c.key().port().c_str(), c.key().outer_vlan(),
                  c.key().inner_vlan(), c.field().c_str(), c.value().c_str(), c.reserved().c_str());
  }
  return 0;
}

int Ctl::events(int count) {
  grpc::ClientContext ctx;
  v1::WatchEventsRequest req;
  auto reader = stub_->WatchEvents(&ctx, req);
  v1::Event e;
  int n = 0;
  while ((count <= 0 || n < count) && reader->Read(&e)) {
    ++n;
    if (o_.json) {
      std::printf("%s\n", to_json(e).c_str());
    } else {
      std::string key = e.has_key() ? fmt::format("{}/{}/{}", e.key().port(), e.key().outer_vlan(),
                                                  e.key().inner_vlan())
                                    : "-";
      std::string extra;
      if (e.type() == v1::Event::AGENT_STARTED) extra = "boot_id=" + e.boot_id();
      if (e.has_lease()) {
        extra = e.lease_family() + " " + e.lease().address();
        for (const auto& p : e.lease().prefixes()) extra += " " + p;
        if (e.lease().bound()) extra += fmt::format(" expires={}", e.lease().expires_unix());
      }
      std::printf("%lu %-20s %-20s %s%s\n", e.timestamp_unix_ns(),
                  v1::Event::Type_Name(e.type()).c_str(), key.c_str(), e.mac().c_str(),
                  extra.c_str());
    }
    std::fflush(stdout);
  }
  if (count > 0 && n >= count) {
    ctx.TryCancel();
    return 0;
  }
  auto st = reader->Finish();
  if (!st.ok()) return fail(st, &ctx);
  return 0;
}

namespace {
constexpr const char* kNotServing = "health check: not SERVING";
}  // namespace

grpc::Status check_health(const std::shared_ptr<grpc::Channel>& ch,
                          std::chrono::milliseconds timeout) {
  // grpc.health.v1.Health/Check without the generated health stubs: the
  // request (service "") is empty; the response is field 1, the status enum
  // (SERVING = 1): bytes 08 01.
  grpc::GenericStub stub(ch);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::Slice empty("");
  grpc::ByteBuffer req(&empty, 1), resp;
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", req, &cq);
  call->StartCall();
  grpc::Status st;
  call->Finish(&resp, &st, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!st.ok()) return st;
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (resp.Dump(&slices).ok())
    for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  if (bytes != std::string("\x08\x01", 2))
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, kNotServing);
  return grpc::Status::OK;
}

int Ctl::health(int timeout_ms) {
  auto st = check_health(make_channel(o_), std::chrono::milliseconds(timeout_ms));
  if (!st.ok()) {
    CtlFailure f = st.error_code() == grpc::StatusCode::UNAVAILABLE &&
                           st.error_message() == kNotServing
                       ? CtlFailure{"not_serving", fmt::format("xbngd at {} is NOT SERVING: it "
                                                               "answered the health check with "
                                                               "another status than SERVING",
                                                               o_.server),
                                    "not serving", "", "UNAVAILABLE", st.error_message(),
                                    kExitRefused, {}}
                       : describe_failure(o_, st, nullptr, std::chrono::milliseconds(timeout_ms));
    if (o_.json)
      std::printf("{\"status\":\"NOT_SERVING\",\"error\":%s}\n",
                  failure_json(f, o_.server).c_str());
    std::fprintf(stderr, "xbngctl: %s\n", f.message.c_str());
    return f.exit_code;
  }
  if (o_.json) std::printf("{\"status\":\"SERVING\"}\n");
  else std::printf("%s: SERVING\n", o_.server.c_str());
  return 0;
}

// ---- bpf dump -----------------------------------------------------------------

int ctl_bpf_dump(const CtlOptions& o, const std::string& bpffs) {
  PinnedMaps maps(bpffs);
  auto ifname = [](uint32_t ifx) {
    char buf[IF_NAMESIZE] = {};
    return if_indextoname(ifx, buf) ? std::string(buf) : fmt::format("if{}", ifx);
  };
  auto key_str = [&](const struct xbng_sub_key& k) {
    return fmt::format("{}/{}/{}", ifname(k.ifindex), k.outer_vid, k.inner_vid);
  };
  uint64_t nsubs = 0, nroutes = 0;
  if (!o.json)
    std::printf("# subscribers (%s)\n%-20s %-17s %-6s %-15s %-39s %12s %14s\n",
                map_pin_path(bpffs, MapId::kSubscribers).c_str(), "KEY", "MAC", "FLAGS", "IPV4",
                "IPV6", "UP_PKTS", "UP_BYTES");
  int rc = map_for_each(maps.fd(MapId::kSubscribers), sizeof(struct xbng_sub_key),
                        sizeof(struct xbng_subscriber), [&](const void* k, const void* v) {
                          struct xbng_sub_key key;
                          struct xbng_subscriber s;
                          std::memcpy(&key, k, sizeof key);
                          std::memcpy(&s, v, sizeof s);
                          ++nsubs;
                          std::string mac = (s.flags & XBNG_SUB_F_MAC_VALID) ? format_mac(s.mac) : "-";
                          std::string v4 = (s.flags & XBNG_SUB_F_HAS_IPV4) ? format_ipv4(s.ipv4) : "-";
                          std::string v6 = (s.flags & XBNG_SUB_F_HAS_IPV6)
                                               ? format_ipv6(reinterpret_cast<const uint8_t*>(s.ipv6))
                                               : "-";
                          if (o.json)
                            std::printf("{\"map\":\"subscribers\",\"key\":\"%s\",\"mac\":\"%s\","
                                        "\"flags\":%u,\"ipv4\":\"%s\",\"ipv6\":\"%s\","
                                        "\"up_packets\":%llu,\"up_bytes\":%llu}\n",
                                        key_str(key).c_str(), mac.c_str(), s.flags, v4.c_str(),
                                        v6.c_str(), (unsigned long long)s.up_packets,
                                        (unsigned long long)s.up_bytes);
                          else
                            std::printf("%-20s %-17s 0x%04x %-15s %-39s %12llu %14llu\n",
                                        key_str(key).c_str(), mac.c_str(), s.flags, v4.c_str(),
                                        v6.c_str(), (unsigned long long)s.up_packets,
                                        (unsigned long long)s.up_bytes);
                        });
  if (rc) throw std::runtime_error(fmt::format("reading subscribers: {}", std::strerror(-rc)));
  struct RouteMap {
    MapId id;
    size_t ks;
  };
  for (auto [id, ks] : {RouteMap{MapId::kRoutesV4, 4}, RouteMap{MapId::kRoutesV6, 16},
                        RouteMap{MapId::kRoutesV6_64, 8}, RouteMap{MapId::kPrefixesV4, 8},
                        RouteMap{MapId::kPrefixesV6, 20}}) {
    if (!o.json)
      std::printf("\n# %s\n%-44s %-20s %-17s %12s %14s\n", map_name(id), "DESTINATION", "OWNER",
                  "MAC", "DOWN_PKTS", "DOWN_BYTES");
    rc = map_for_each(maps.fd(id), ks, sizeof(struct xbng_route), [&](const void* k, const void* v) {
      struct xbng_route r;
      std::memcpy(&r, v, sizeof r);
      const auto* b = static_cast<const uint8_t*>(k);
      Prefix p;
      if (id == MapId::kRoutesV4) {
        p.family = 4, p.len = 32;
        std::memcpy(p.addr.data(), b, 4);
      } else if (id == MapId::kRoutesV6) {
        p.family = 6, p.len = 128;
        std::memcpy(p.addr.data(), b, 16);
      } else if (id == MapId::kRoutesV6_64) {
        p.family = 6, p.len = 64;
        std::memcpy(p.addr.data(), b, 8);
      } else {
        uint32_t len;
        std::memcpy(&len, b, 4);
        p.family = id == MapId::kPrefixesV4 ? 4 : 6;
        p.len = static_cast<uint8_t>(len);
        std::memcpy(p.addr.data(), b + 4, p.family == 4 ? 4 : 16);
      }
      ++nroutes;
      std::string mac = (r.flags & XBNG_ROUTE_F_MAC_VALID) ? format_mac(r.mac) : "-";
      if (o.json)
        std::printf("{\"map\":\"%s\",\"destination\":\"%s\",\"owner\":\"%s\",\"mac\":\"%s\","
                    "\"down_packets\":%llu,\"down_bytes\":%llu}\n",
                    map_name(id), format_prefix(p).c_str(), key_str(r.sub).c_str(), mac.c_str(),
                    (unsigned long long)r.down_packets, (unsigned long long)r.down_bytes);
      else
        std::printf("%-44s %-20s %-17s %12llu %14llu\n", format_prefix(p).c_str(),
                    key_str(r.sub).c_str(), mac.c_str(), (unsigned long long)r.down_packets,
                    (unsigned long long)r.down_bytes);
    });
    if (rc) throw std::runtime_error(fmt::format("reading {}: {}", map_name(id), std::strerror(-rc)));
  }
  if (!o.json) std::printf("\n-- %lu subscribers, %lu routes\n", nsubs, nroutes);
  return 0;
}

}  // namespace xbng::agent
