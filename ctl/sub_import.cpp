// xbngctl sub import (streamed, or --atomic in one request) and sub del --file:
// an import file sent to xbngd.
#include <absl/synchronization/mutex.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>

#include "api/grpc_code.h"
#include "api/subscriber_file.h"
#include "ctl/ctl.h"
#include "ctl/output.h"

namespace xbng::agent {

namespace v1 = xbng::v1;

namespace {
// absl (as packaged) checks every Mutex acquisition for lock-order cycles, a
// debugging aid that costs ~5% of a bulk import's CPU in gRPC's locks.
// gRPC serializes each message into a block of its own (a 16-byte header
// and the message), freed only once the transport has sent it: far more at
// once than malloc's per-thread cache holds, so they go back to its bins.
// Up to 128 bytes (a subscriber without a rate plan) that is a fast bin; a
// line with a rate plan (~115 bytes and the header) went through malloc's
// slow path, the bins sorted and merged on every call (an import with
// rate plans cost the client ~20% more CPU). Fast bins up to the largest
// size glibc allows (160 bytes) take those too.
void bulk_mode() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  mallopt(M_MXFAST, 160);
}
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
          std::fprintf(
              stderr, "\r%lu sent (%.0f/s)", sent,
              double(sent) /
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        return true;
      },
      &local_errors);
  writer->WritesDone();
  auto st = writer->Finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) std::fprintf(stderr, "\n");
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) std::printf("%s\n", to_json(resp).c_str());
  std::fprintf(stderr,
               "%lu sent in %.2f s: %lu applied, %lu failed on the server, %lu lines "
               "unreadable\n",
               sent, secs, resp.applied(), resp.failed(), local_fail);
  for (const auto& e : local_errors) std::fprintf(stderr, "  %s\n", e.c_str());
  for (const auto& f : resp.failures())
    std::fprintf(stderr, "  entry %lu (%s/%u/%u): %s: %s\n", f.index(), f.key().port().c_str(),
                 f.key().outer_vlan(), f.key().inner_vlan(),
                 grpc_code_name(static_cast<int>(f.code())), f.message().c_str());
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
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) std::printf("%s\n", to_json(resp).c_str());
  std::fprintf(stderr,
               "%d subscribers in one request, %.2f s: %lu created, %lu updated, %lu "
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

}  // namespace xbng::agent
