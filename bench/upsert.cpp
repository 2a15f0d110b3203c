// xbng_bench_upsert: one atomic UpsertSubscribers as large as the API takes.
// Reads subscribers from a JSON Lines or CSV import file (the format of
// `xbngctl sub import`), packs as many as fit in --max-bytes of request
// (serialized size) into ONE request, sends it and prints what was sent and
// the answer as one JSON line. bench/upsert_rss.py drives it; it measures
// nothing but the client's own wall time.
//
//   xbng_bench_upsert --server unix:///run/xbng/xbngd.sock --file subs.jsonl
//                     [--max-bytes 16777216]
//
// Exit status 0 when the call was made (whatever gRPC answered), 2 when it
// could not be (bad file).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <chrono>
#include <cstdio>

#include "api/subscriber_file.h"
#include "ctl/ctl.h"
#include "xbng/v1/xbng.grpc.pb.h"

namespace v1 = xbng::v1;

int main(int argc, char** argv) {
  CLI::App app{"one atomic UpsertSubscribers of up to --max-bytes"};
  xbng::agent::CtlOptions o;
  std::string file;
  size_t max_bytes = 16u << 20;
  app.add_option("--server", o.server, "gRPC target");
  app.add_option("--file", file, "subscribers: JSON Lines or CSV (xbngctl sub import)")->required();
  app.add_option("--max-bytes", max_bytes, "largest serialized request");
  CLI11_PARSE(app, argc, argv);

  v1::UpsertSubscribersRequest req;
  size_t bytes = 0;
  std::vector<std::string> errors;
  const uint64_t bad = xbng::agent::read_import_file(
      file,
      [&](const v1::Subscriber& s) {
        // A repeated message field costs its tag, its length varint and itself.
        const size_t n = s.ByteSizeLong();
        const size_t cost = 1 + google::protobuf::io::CodedOutputStream::VarintSize64(n) + n;
        if (bytes + cost > max_bytes) return false;
        *req.add_subscribers() = s;
        bytes += cost;
        return true;
      },
      &errors);
  if (bad) {
    for (const auto& e : errors) std::fprintf(stderr, "%s\n", e.c_str());
    return 2;
  }
  bytes = req.ByteSizeLong();

  auto stub = v1::Subscribers::NewStub(xbng::agent::make_channel(o));
  v1::UpsertSubscribersResponse resp;
  grpc::ClientContext ctx;
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status st = stub->UpsertSubscribers(&ctx, req, &resp);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const nlohmann::json out = {{"subscribers", req.subscribers_size()},
                              {"request_bytes", bytes},
                              {"seconds", secs},
                              {"code", static_cast<int>(st.error_code())},
                              {"message", st.error_message()},
                              {"created", resp.created()},
                              {"updated", resp.updated()},
                              {"unchanged", resp.unchanged()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
