// The fleet reconciler: full read → store, then watch → store; the status
// key under a lease. Two threads: `sync` (range reads, the watch, applying
// to the store) and `status` (lease, keepalive, status puts).
#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <malloc.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <random>
#include <thread>

#include "api/convert.h"
#include "etcd/etcd_client.h"
#include "fleet/fleet.h"
#include "store/store.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

using fleet::EtcdClient;
using fleet::EtcdConn;
using fleet::status_text;
using Clock = std::chrono::steady_clock;
namespace pb = etcdserverpb;

namespace {
constexpr size_t kDeleteChunk = 50000;
constexpr auto kProgressIdle = std::chrono::milliseconds(300);
// Without own events, progress is asked at most this often: every answer moves
// the status revision, and so rewrites the status key (itself a revision).
constexpr auto kProgressQuiet = std::chrono::seconds(2);
constexpr auto kStatusInterval = std::chrono::milliseconds(200);
}  // namespace

struct Fleet::Impl {
  FleetOptions o;
  SubscriberStore* store;
  std::string boot_id;
  std::string prefix, prefix_end, status_key;
  EtcdClient client;

  std::atomic<bool> stopping{false};
  std::mutex mu;  // everything below
  std::condition_variable cv;
  FleetState st;
  int64_t event_rev = 0;  // resume point: every event up to it has been applied
  std::map<std::string, std::string> refused;  // etcd key → reason: every key refused now
  // What the node knows of etcd's history, to notice a wiped, restored or
  // replaced etcd (its revisions start again at 1): the cluster id of the
  // last answer, the number of keys under the prefix at event_rev, and the
  // last key applied (its revisions and value at its mod_revision).
  uint64_t cluster_id = 0;
  int64_t key_count = 0;
  struct Witness {
    std::string key, value;
    int64_t mod_revision = 0, create_revision = 0, version = 0;
  } witness;
  bool was_up = false;
  Clock::time_point down_since{};
  Clock::time_point last_down_log{};
  double last_outage_seconds = 0;
  std::string last_outage_error;
  grpc::ClientContext* watch_ctx = nullptr;  // cancelled by stop()
  int64_t lease_id = 0;

  std::thread sync_thread, status_thread;

  Impl(const FleetOptions& opts, SubscriberStore* s, std::string boot)
      : o(opts),
        store(s),
        boot_id(std::move(boot)),
        prefix(node_subscribers_prefix(opts.node)),
        prefix_end(prefix_range_end(prefix)),
        status_key(status_etcd_key(opts.node)),
        client(opts.etcd) {}

  // ---- outage accounting ----------------------------------------------------
  void up(const std::shared_ptr<EtcdConn>& c) {
    std::lock_guard l(mu);
    st.endpoint = c->endpoint;
    if (st.etcd_up) return;
    if (was_up || st.outages) {
      const double secs = std::chrono::duration<double>(Clock::now() - down_since).count();
      last_outage_seconds = secs;
      spdlog::info("fleet: etcd reachable again via {} after {:.1f} s", c->endpoint, secs);
    } else {
      spdlog::info("fleet: etcd reachable via {}", c->endpoint);
    }
    st.etcd_up = true;
    was_up = true;
    st.outage_seconds = 0;
  }
  void down(const std::shared_ptr<EtcdConn>& c, const std::string& what, const grpc::Status& s) {
    client.failed(c, s);
    std::lock_guard l(mu);
    const std::string err = fmt::format("{} via {}: {}", what, c->endpoint, status_text(s));
    st.last_error = err;
    last_outage_error = err;
    const auto now = Clock::now();
    if (st.etcd_up || (!was_up && st.outages == 0 && down_since == Clock::time_point{})) {
      st.etcd_up = false;
      ++st.outages;
      down_since = now;
      last_down_log = now;
      spdlog::warn(
          "fleet: etcd unreachable ({}); forwarding continues with the last applied "
          "state, retrying with backoff",
          err);
    } else if (now - last_down_log > std::chrono::seconds(30)) {
      last_down_log = now;
      spdlog::warn("fleet: etcd still unreachable after {:.0f} s ({})",
                   std::chrono::duration<double>(now - down_since).count(), err);
    } else {
      spdlog::debug("fleet: {}", err);
    }
  }
  bool sleep_for(std::chrono::milliseconds d) {
    std::unique_lock l(mu);
    return !cv.wait_for(l, d, [&] { return stopping.load(); });
  }
  std::chrono::milliseconds backoff(int attempt) {
    static thread_local std::mt19937 rng{std::random_device{}()};
    const int64_t base = std::min<int64_t>(5000, 100ll << std::min(attempt, 6));
    return std::chrono::milliseconds(base / 2 +
                                     std::uniform_int_distribution<int64_t>(0, base / 2)(rng));
  }

  // ---- decoding -------------------------------------------------------------
  // Decodes a kv of this node's prefix. Returns false (and records the
  // refusal) when the key or value is refused. `rank` gets the store rank of
  // the key when its port is an access port of this node.
  bool decode(const std::string& key, const std::string& value, xbng::v1::Subscriber* m,
              std::optional<uint64_t>* rank, std::map<std::string, std::string>* refusals) {
    std::string port;
    uint32_t outer = 0, inner = 0;
    bool key_ok = false;
    std::optional<std::string> e;
    try {
      e = decode_subscriber_kv(prefix, key, value, &port, &outer, &inner, &key_ok, m);
    } catch (const std::exception& ex) {  // a bug, not the input's fault: refuse, count, go on
      note_internal_error("decoding a key", ex);
      e = fmt::format("internal error while decoding: {}", ex.what());
    }
    if (key_ok)
      if (auto ifx = store->ports().access_ifindex(port)) {
        SubKey k{};
        k.ifindex = *ifx;
        k.outer_vid = static_cast<uint16_t>(outer);
        k.inner_vid = static_cast<uint16_t>(inner);
        *rank = key_rank(k);
      }
    if (e) {
      (*refusals)[key] = std::move(*e);
      return false;
    }
    return true;
  }

  // Store refusals (validation, overlaps) of a stream call, by etcd key:
  // every one (the store's own list stops at its report limit).
  void collect_failures(StreamResult* r, std::map<std::string, std::string>* refusals) {
    r->on_failure = [this, refusals](const StreamFailure& f) {
      (*refusals)[subscriber_etcd_key(o.node, f.key.port, f.key.outer_vlan, f.key.inner_vlan)] =
          std::string(status_message(f.status));
    };
  }

  void note_internal_error(const char* what, const std::exception& ex) {
    spdlog::error("fleet: internal error {}: {} (counted in internal_errors; continuing)", what,
                  escape_bytes(ex.what()));
    std::lock_guard l(mu);
    ++st.internal_errors;
  }

  void set_witness(const mvccpb::KeyValue& kv) {
    witness.key = kv.key();
    witness.value = kv.value();
    witness.mod_revision = kv.mod_revision();
    witness.create_revision = kv.create_revision();
    witness.version = kv.version();
  }

  // Compares an answer's header with what the node saw last: a reason when
  // etcd is another cluster or its revision is below what was applied.
  std::optional<std::string> header_changed(const pb::ResponseHeader& h) {
    std::optional<std::string> why;
    std::lock_guard l(mu);
    if (cluster_id && h.cluster_id() && h.cluster_id() != cluster_id)
      why = fmt::format("etcd cluster id changed from {:x} to {:x} (member {:x})", cluster_id,
                        h.cluster_id(), h.member_id());
    else if (event_rev && h.revision() && h.revision() < event_rev)
      why = fmt::format(
          "etcd's revision went backwards: member {:x} is at revision {}, the node "
          "applied {} (etcd wiped or restored)",
          h.member_id(), h.revision(), event_rev);
    if (h.cluster_id()) cluster_id = h.cluster_id();
    return why;
  }

  // ---- full read ------------------------------------------------------------
  // One consistent range read at a single revision, paged, streamed into the
  // store as pages arrive; then deletes what the store has and etcd has not.
  // Returns kFailed when etcd failed (what was applied stays; retried
  // later), kCompacted when the read revision was compacted meanwhile.
  enum class FullEnd { kDone, kFailed, kCompacted };
  static bool is_compacted(const grpc::Status& s) {
    return s.error_code() == grpc::StatusCode::OUT_OF_RANGE &&
           s.error_message().find("compacted") != std::string::npos;
  }
  FullEnd full_sync() {
    auto c = client.conn();
    const auto t0 = Clock::now();
    int64_t rev = 0;
    bool failed = false;
    grpc::Status err;
    const auto ranges = full_read_ranges(prefix, o.access_ports);
    size_t range_i = 0;
    std::string next_key = ranges[0].first;
    uint64_t kvs = 0;
    double range_s = 0, decode_s = 0;
    // Pages are fetched by their own thread, one or two ahead of decoding.
    auto fetch = [&](pb::RangeResponse* page) -> bool {
      const auto f0 = Clock::now();
      pb::RangeRequest rq;
      rq.set_key(next_key);
      rq.set_range_end(ranges[range_i].second);
      rq.set_limit(o.page_size);
      if (rev) rq.set_revision(rev);
      grpc::ClientContext ctx;
      grpc::Status s = client.prepare(c, &ctx, std::chrono::milliseconds(60000));
      if (s.ok()) s = c->kv->Range(&ctx, rq, page);
      if (!s.ok()) {
        err = s;
        failed = true;
        return false;
      }
      if (!rev) rev = page->header().revision();
      if (page->more() && page->kvs_size()) {
        next_key = page->kvs(page->kvs_size() - 1).key() + '\0';
      } else if (++range_i < ranges.size()) {  // the next range
        next_key = ranges[range_i].first;
        page->set_more(true);
      }
      kvs += page->kvs_size();
      range_s += std::chrono::duration<double>(Clock::now() - f0).count();
      return true;
    };
    auto first = std::make_unique<pb::RangeResponse>();
    if (!fetch(first.get())) {
      down(c, "range read", err);
      return FullEnd::kFailed;
    }
    up(c);
    if (auto why = header_changed(first->header())) {
      spdlog::warn("fleet: {}: reading everything again (subscribers no longer in etcd go)", *why);
      std::lock_guard l(mu);
      ++st.history_resets;
    }
    std::mutex pmu;
    std::condition_variable pcv;
    std::deque<std::unique_ptr<pb::RangeResponse>> pages;
    bool fetch_done = !first->more(), abort_fetch = false;
    pages.push_back(std::move(first));
    std::thread fetcher([&] {
      bool more = !fetch_done;
      while (more) {
        auto pg = std::make_unique<pb::RangeResponse>();
        if (!fetch(pg.get())) break;
        more = pg->more();
        if (pg->kvs_size() == 0) continue;
        std::unique_lock l(pmu);
        pcv.wait(l, [&] { return pages.empty() || abort_fetch; });
        if (abort_fetch) break;
        pages.push_back(std::move(pg));
        pcv.notify_all();
      }
      std::lock_guard l(pmu);
      fetch_done = true;
      pcv.notify_all();
    });
    std::unique_ptr<pb::RangeResponse> page;
    int page_pos = 0;
    // Ranks of the keys etcd has (sorted at the end: 8 bytes a key).
    std::vector<uint64_t> present;
    std::map<std::string, std::string> refusals, store_refusals;
    int64_t count = 0;
    Witness last;
    auto next = [&](xbng::v1::Subscriber* m) -> bool {
      for (;;) {
        if (stopping) return false;
        if (!page || page_pos == page->kvs_size()) {
          std::unique_lock l(pmu);
          pcv.wait(l, [&] { return !pages.empty() || fetch_done; });
          if (pages.empty()) return false;
          page = std::move(pages.front());
          pages.pop_front();
          page_pos = 0;
          pcv.notify_all();
          continue;
        }
        const auto& kv = page->kvs(page_pos++);
        ++count;
        if (kv.mod_revision() > last.mod_revision)
          last = {kv.key(), kv.value(), kv.mod_revision(), kv.create_revision(), kv.version()};
        std::optional<uint64_t> rank;
        const auto d0 = Clock::now();
        const bool ok = decode(kv.key(), kv.value(), m, &rank, &refusals);
        decode_s += std::chrono::duration<double>(Clock::now() - d0).count();
        if (rank) present.push_back(*rank);
        if (ok) return true;
      }
    };
    StreamResult r;
    collect_failures(&r, &store_refusals);
    // A full read restates etcd: a learned MAC (mac policy "follow") stays.
    store->stream(stream_source(next, store->ports()), &r, /*resync=*/true);
    {
      std::lock_guard l(pmu);
      abort_fetch = true;
      pcv.notify_all();
    }
    fetcher.join();
    if (failed && is_compacted(err)) {
      // Not an outage: etcd answers, the read revision is gone. Read again
      // at a new one.
      spdlog::warn(
          "fleet: full read at revision {} fell behind compaction after {} keys ({} "
          "applied): reading everything again",
          rev, kvs, r.applied);
      std::lock_guard l(mu);
      ++st.compactions;
      return FullEnd::kCompacted;
    }
    if (failed || stopping) {
      if (failed) down(c, "range read", err);
      spdlog::warn(
          "fleet: full read at revision {} interrupted after {} keys ({} applied); "
          "will read again",
          rev, kvs, r.applied);
      return FullEnd::kFailed;
    }
    refusals.merge(store_refusals);
    const auto t1 = Clock::now();
    // Delete what etcd does not have. Every applied key is in the store and
    // distinct: when the store holds exactly those, nothing is stale.
    uint64_t deleted = 0;
    if (store->size() != r.applied) {
      std::sort(present.begin(), present.end());
      std::vector<xbng::v1::SubscriberKey> stale;
      ListQuery q;
      q.page_size = 10000;
      for (;;) {
        std::vector<SubscriberView> subs;
        std::string tok;
        uint64_t total = 0;
        if (!store->list(q, &subs, &tok, &total).ok()) break;
        for (const auto& v : subs) {
          const SubKey& k = v.spec.key;
          if (std::binary_search(present.begin(), present.end(), key_rank(k))) continue;
          auto& sk = stale.emplace_back();
          sk.set_port(store->ports().name(k.ifindex));
          sk.set_outer_vlan(k.outer_vid);
          sk.set_inner_vlan(k.inner_vid);
        }
        if (tok.empty()) break;
        q.page_token = tok;
      }
      if (!remove_keys(stale, &deleted)) return FullEnd::kFailed;
    }
    {
      std::lock_guard l(mu);
      refused.swap(refusals);
      event_rev = rev;
      key_count = count;
      witness = std::move(last);
      st.applied_revision = rev;
      st.refused = refused.size();
      ++st.full_syncs;
    }
    cv.notify_all();
    present = {};
    malloc_trim(0);  // the pages and the stream's buffers go back to the system
    spdlog::info(
        "fleet: full read of {} at revision {}: {} keys in {:.2f} s (range reads {:.2f} s, "
        "decoding {:.2f} s), {} applied ({} refused), {} stale deleted in {:.2f} s; {} "
        "subscribers",
        prefix, rev, kvs, std::chrono::duration<double>(t1 - t0).count(), range_s, decode_s,
        r.applied, st.refused, deleted, std::chrono::duration<double>(Clock::now() - t1).count(),
        store->size());
    return FullEnd::kDone;
  }

  bool remove_keys(const std::vector<xbng::v1::SubscriberKey>& keys, uint64_t* deleted) {
    for (size_t i = 0; i < keys.size(); i += kDeleteChunk) {
      std::vector<const xbng::v1::SubscriberKey*> ptrs;
      for (size_t j = i; j < std::min(keys.size(), i + kDeleteChunk); ++j) ptrs.push_back(&keys[j]);
      uint64_t d = 0, nf = 0;
      std::vector<SubKey> ks;
      absl::Status s = validate_keys(ptrs, store->ports(), &ks);
      if (s.ok()) s = store->remove(ks, &d, &nf);
      if (!s.ok()) {
        spdlog::error("fleet: deleting {} subscribers failed: {}; will read everything again",
                      ptrs.size(), status_message(s));
        return false;
      }
      *deleted += d;
    }
    return true;
  }

  // ---- watch ------------------------------------------------------------------
  enum class WatchEnd { kStopped, kCompacted, kError, kApplyFailed, kReset };

  // Before a watch resumes from event_rev after an error: is etcd's history
  // still the one the node applied? A wiped or restored etcd starts again at
  // revision 1 with the same cluster id (ids derive from the member names,
  // peer URLs and cluster token), and may have passed the old revision by
  // the time the node sees it: so besides the header (cluster id, a
  // revision below event_rev) the node checks, at event_rev, the number of
  // keys under its prefix and the last key it applied. Returns the reason
  // when it changed; *err is set when etcd did not answer.
  std::optional<std::string> history_changed(const std::shared_ptr<EtcdConn>& c,
                                             grpc::Status* err) {
    int64_t at, count;
    Witness w;
    {
      std::lock_guard l(mu);
      at = event_rev;
      count = key_count;
      w = witness;
    }
    auto range = [&](const std::string& key, const std::string& end, int64_t rev,
                     pb::RangeResponse* rs) {
      pb::RangeRequest rq;
      rq.set_key(key);
      rq.set_range_end(end);
      rq.set_revision(rev);
      if (!end.empty()) rq.set_count_only(true);
      grpc::ClientContext ctx;
      grpc::Status s = client.prepare(c, &ctx, o.etcd.timeout);
      if (s.ok()) s = c->kv->Range(&ctx, rq, rs);
      return s;
    };
    pb::RangeResponse now;  // the current revision (a linearizable read)
    if (*err = range(prefix, prefix_end, 0, &now); !err->ok()) return std::nullopt;
    if (auto why = header_changed(now.header())) return why;
    if (!at) return std::nullopt;
    pb::RangeResponse then;
    *err = range(prefix, prefix_end, at, &then);
    if (err->error_code() == grpc::StatusCode::OUT_OF_RANGE &&
        err->error_message().find("future revision") != std::string::npos) {
      const std::string why = fmt::format(
          "etcd's revision went backwards: revision {} the node applied is in etcd's future "
          "(etcd wiped or restored)",
          at);
      *err = grpc::Status::OK;
      return why;
    }
    if (is_compacted(*err)) {  // cannot tell here; the watch will be cancelled as compacted
      *err = grpc::Status::OK;
      return std::nullopt;
    }
    if (!err->ok()) return std::nullopt;
    if (then.count() != count)
      return fmt::format(
          "etcd's history changed: {} keys under the prefix at revision {}, the node "
          "applied {} (etcd wiped or restored)",
          then.count(), at, count);
    if (w.mod_revision) {
      pb::RangeResponse kv;
      *err = range(w.key, "", w.mod_revision, &kv);
      if (is_compacted(*err)) {
        *err = grpc::Status::OK;
        return std::nullopt;
      }
      if (!err->ok()) return std::nullopt;
      if (kv.kvs_size() != 1 || kv.kvs(0).mod_revision() != w.mod_revision ||
          kv.kvs(0).create_revision() != w.create_revision || kv.kvs(0).version() != w.version ||
          kv.kvs(0).value() != w.value)
        return fmt::format(
            "etcd's history changed: key {} at revision {} is not the one the node "
            "applied (etcd wiped or restored)",
            escape_bytes(w.key), w.mod_revision);
    }
    return std::nullopt;
  }

  // A full read of a new history follows: what the node knew of the old one
  // is void.
  void forget_history(const std::string& why) {
    spdlog::warn("fleet: {}: reading everything again (subscribers no longer in etcd go)", why);
    std::lock_guard l(mu);
    ++st.history_resets;
    st.synced = false;
    event_rev = 0;
    key_count = 0;
    witness = {};
  }

  // Applies events in order: runs of puts go through store->stream, runs of
  // deletes through store->remove.
  bool apply_events(const std::vector<mvccpb::Event>& evs) {
    std::vector<xbng::v1::Subscriber> puts;
    std::vector<xbng::v1::SubscriberKey> dels;
    std::map<std::string, std::string> refusals;  // new refusals
    std::vector<std::string> cleared;             // keys no longer refused
    int64_t count_delta = 0;
    const mvccpb::KeyValue* last_put = nullptr;
    // Keys of the puts not yet given to the store: a later event of the same
    // key flushes them first, so that its last event decides its refusal.
    absl::flat_hash_set<std::string_view> pending;
    bool ok = true;
    auto flush_puts = [&] {
      if (puts.empty()) return;
      size_t i = 0;
      StreamResult r;
      collect_failures(&r, &refusals);
      store->stream(stream_source(
                        [&](xbng::v1::Subscriber* m) {
                          if (i == puts.size()) return false;
                          m->Swap(&puts[i++]);
                          return true;
                        },
                        store->ports()),
                    &r);
      puts.clear();
      pending.clear();
    };
    auto flush_dels = [&] {
      if (dels.empty()) return;
      uint64_t d = 0;
      ok = remove_keys(dels, &d) && ok;
      dels.clear();
    };
    for (const auto& ev : evs) {
      const std::string& key = ev.kv().key();
      if (key.compare(0, prefix.size(), prefix) != 0) continue;
      std::optional<uint64_t> rank;
      if (pending.contains(key)) flush_puts();
      if (ev.type() == mvccpb::Event::PUT) {
        if (ev.kv().version() == 1) ++count_delta;  // created (not an update)
        last_put = &ev.kv();
        xbng::v1::Subscriber m;
        std::map<std::string, std::string> bad;
        if (!decode(key, ev.kv().value(), &m, &rank, &bad)) {
          // Refused: the key keeps what was applied before (as a refused
          // gRPC upsert would).
          for (auto& [k, v] : bad) refusals[k] = std::move(v);
          continue;
        }
        refusals.erase(key);
        cleared.push_back(key);
        flush_dels();
        puts.push_back(std::move(m));
        pending.insert(key);
      } else {
        --count_delta;
        refusals.erase(key);
        cleared.push_back(key);
        std::string port;
        uint32_t outer = 0, inner = 0;
        if (parse_subscriber_key_suffix(std::string_view(key).substr(prefix.size()), &port, &outer,
                                        &inner) ||
            !store->ports().access_ifindex(port))
          continue;  // never applied
        flush_puts();
        auto& k = dels.emplace_back();
        k.set_port(port);
        k.set_outer_vlan(outer);
        k.set_inner_vlan(inner);
      }
    }
    flush_puts();
    flush_dels();
    std::lock_guard l(mu);
    for (const auto& k : cleared) refused.erase(k);
    for (auto& [k, v] : refusals) refused[k] = std::move(v);
    st.refused = refused.size();
    st.events += evs.size();
    key_count += count_delta;
    if (last_put) set_witness(*last_put);
    return ok;
  }

  WatchEnd watch(bool resume) {
    auto c = client.conn();
    if (resume) {
      grpc::Status s;
      if (auto why = history_changed(c, &s)) {
        up(c);
        forget_history(*why);
        return WatchEnd::kReset;
      }
      if (!s.ok()) {
        down(c, "watch", s);
        return WatchEnd::kError;
      }
    }
    grpc::ClientContext ctx;
    if (grpc::Status s = client.prepare(c, &ctx, std::chrono::milliseconds(0), true); !s.ok()) {
      down(c, "watch", s);
      return WatchEnd::kError;
    }
    {
      std::lock_guard l(mu);
      if (stopping) return WatchEnd::kStopped;
      watch_ctx = &ctx;
    }
    auto stream = c->watch->Watch(&ctx);
    int64_t start;
    {
      std::lock_guard l(mu);
      start = event_rev + 1;
    }
    pb::WatchRequest rq;
    auto* cr = rq.mutable_create_request();
    cr->set_key(prefix);
    cr->set_range_end(prefix_end);
    cr->set_start_revision(start);
    stream->Write(rq);

    // A reader thread queues responses; this thread applies everything
    // queued at once (runs of changes become one store call).
    std::mutex qmu;
    std::condition_variable qcv;
    std::deque<pb::WatchResponse> q;
    bool ended = false;
    std::thread reader([&] {
      pb::WatchResponse r;
      while (stream->Read(&r)) {
        std::lock_guard l(qmu);
        q.push_back(std::move(r));
        qcv.notify_one();
        r.Clear();
      }
      std::lock_guard l(qmu);
      ended = true;
      qcv.notify_one();
    });
    // On any way out (an exception included): cancel the stream, join the reader.
    struct Joiner {
      Impl* self;
      grpc::ClientContext& ctx;
      std::thread& t;
      ~Joiner() {
        if (!t.joinable()) return;
        {
          std::lock_guard l(self->mu);
          self->watch_ctx = nullptr;
          self->st.synced = false;
        }
        ctx.TryCancel();
        t.join();
      }
    } joiner{this, ctx, reader};
    WatchEnd end = WatchEnd::kError;
    bool created = false, progress_pending = false, events_since_progress = true;
    auto last_progress = Clock::now();
    int64_t watch_id = -1;
    std::vector<mvccpb::Event> evs;
    for (;;) {
      std::deque<pb::WatchResponse> got;
      bool is_end;
      {
        std::unique_lock l(qmu);
        const bool woke = qcv.wait_for(l, kProgressIdle, [&] { return !q.empty() || ended; });
        got.swap(q);
        is_end = ended && got.empty();
        if (!woke && created && !progress_pending &&
            (events_since_progress || Clock::now() - last_progress >= kProgressQuiet)) {
          // Idle: ask where the stream stands, so that the status revision
          // follows the store's even when other nodes' keys change.
          pb::WatchRequest pr;
          pr.mutable_progress_request();
          l.unlock();
          progress_pending = stream->Write(pr);
          events_since_progress = false;
          last_progress = Clock::now();
        }
      }
      if (is_end) break;
      evs.clear();
      int64_t last_rev = 0, progress_rev = 0;
      bool stop_now = false;
      for (auto& r : got) {
        if (auto why = header_changed(r.header())) {
          forget_history(*why);
          end = WatchEnd::kReset;
          stop_now = true;
          break;
        }
        if (r.created()) {
          created = true;
          watch_id = r.watch_id();
          up(c);
          spdlog::info("fleet: watching {} from revision {} via {}", prefix, start, c->endpoint);
        }
        if (r.canceled()) {
          if (r.compact_revision() > 0) {
            spdlog::warn(
                "fleet: watch fell behind compaction (compacted up to {}, needed {}): "
                "reading everything again",
                r.compact_revision(), start);
            end = WatchEnd::kCompacted;
          } else {
            down(c, "watch",
                 grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "watch canceled: " + r.cancel_reason()));
            end = WatchEnd::kError;
          }
          stop_now = true;
          break;
        }
        if (r.events_size() == 0 && !r.created() &&
            (r.watch_id() == watch_id || r.watch_id() == -1)) {
          progress_rev = std::max(progress_rev, r.header().revision());
          progress_pending = false;
        }
        for (auto& e : *r.mutable_events()) {
          last_rev = std::max(last_rev, e.kv().mod_revision());
          evs.push_back(std::move(e));
        }
      }
      if (!evs.empty() && end != WatchEnd::kReset) {
        events_since_progress = true;
        if (!apply_events(evs)) {
          end = WatchEnd::kApplyFailed;
          stop_now = true;
        }
      }
      {
        std::lock_guard l(mu);
        if (!stop_now || (end != WatchEnd::kApplyFailed && end != WatchEnd::kReset)) {
          event_rev = std::max(event_rev, last_rev);
          st.applied_revision = std::max({st.applied_revision, event_rev, progress_rev});
        }
        st.synced = created && !stop_now;
      }
      if (!evs.empty() || progress_rev) cv.notify_all();
      if (stop_now) break;
    }
    {
      std::lock_guard l(mu);
      watch_ctx = nullptr;
      st.synced = false;
    }
    ctx.TryCancel();
    reader.join();
    grpc::Status fs = stream->Finish();
    if (stopping) return WatchEnd::kStopped;
    if (end == WatchEnd::kError && !fs.ok() && fs.error_code() != grpc::StatusCode::CANCELLED)
      down(c, "watch", fs);
    else if (end == WatchEnd::kError && !created)
      down(c, "watch", grpc::Status(grpc::StatusCode::UNAVAILABLE, "watch stream closed"));
    else if (end == WatchEnd::kError)
      down(c, "watch",
           fs.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "watch stream closed") : fs);
    return end;
  }

  void sync_loop() {
    bool need_full = true, resume = false;
    int attempt = 0;
    while (!stopping) {
      try {
        if (need_full) {
          switch (full_sync()) {
            case FullEnd::kDone:
              break;
            case FullEnd::kCompacted:  // etcd answers: read again soon, not as after an outage
              if (!sleep_for(backoff(0))) return;
              continue;
            case FullEnd::kFailed:
              if (!sleep_for(backoff(attempt++))) return;
              continue;
          }
          need_full = resume = false;
          attempt = 0;
        }
        const auto t = Clock::now();
        const WatchEnd end = watch(resume);
        resume = false;
        switch (end) {
          case WatchEnd::kStopped:
            return;
          case WatchEnd::kCompacted: {
            std::lock_guard l(mu);
            ++st.compactions;
            need_full = true;
            break;
          }
          case WatchEnd::kReset:
            need_full = true;
            break;
          case WatchEnd::kApplyFailed:
            need_full = true;
            [[fallthrough]];
          case WatchEnd::kError:
            resume = !need_full;  // the watch resumes: check etcd's history first
            if (Clock::now() - t > std::chrono::seconds(10)) attempt = 0;
            if (!sleep_for(backoff(attempt++))) return;
            break;
        }
      } catch (const std::exception& ex) {
        // Nothing may end the process from here: log, count, read everything again.
        note_internal_error("in the sync thread", ex);
        need_full = true;
        if (!sleep_for(backoff(attempt++))) return;
      }
    }
  }

  // ---- status -------------------------------------------------------------------
  std::string status_json() {
    std::lock_guard l(mu);
    FleetStatus v;
    v.node = o.node;
    v.boot_id = boot_id;
    v.revision = st.applied_revision;
    v.subscribers = store->size();
    v.synced = st.synced;
    v.refused = &refused;
    v.endpoint = st.endpoint;
    v.outages = st.outages;
    v.last_outage_seconds = last_outage_seconds;
    v.last_error = last_outage_error;
    v.full_syncs = st.full_syncs;
    v.compactions = st.compactions;
    v.history_resets = st.history_resets;
    v.internal_errors = st.internal_errors;
    return render_fleet_status(v);
  }

  void status_loop() {
    while (!stopping) {
      try {
        status_loop_once();
        return;
      } catch (const std::exception& ex) {
        // Nothing may end the process from here: log, count, start over.
        note_internal_error("in the status thread", ex);
        if (!sleep_for(backoff(3))) return;
      }
    }
  }

  void status_loop_once() {
    std::string last_put;
    auto last_keepalive = Clock::now();
    int attempt = 0;
    while (!stopping) {
      auto c = client.conn();
      const auto ttl = std::chrono::seconds(o.status_ttl_seconds);
      if (!lease_id) {
        pb::LeaseGrantRequest rq;
        rq.set_ttl(o.status_ttl_seconds);
        pb::LeaseGrantResponse rs;
        grpc::ClientContext ctx;
        grpc::Status s = client.prepare(c, &ctx, o.etcd.timeout);
        if (s.ok()) s = c->lease->LeaseGrant(&ctx, rq, &rs);
        if (!s.ok() || !rs.error().empty()) {
          down(c, "lease grant",
               s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, rs.error()) : s);
          if (!sleep_for(backoff(attempt++))) break;
          continue;
        }
        lease_id = rs.id();
        last_keepalive = Clock::now();
        last_put.clear();
        spdlog::info("fleet: status {} under lease {:x} (ttl {} s)", status_key, lease_id,
                     o.status_ttl_seconds);
      }
      if (Clock::now() - last_keepalive >= ttl / 3) {
        grpc::ClientContext ctx;
        grpc::Status s = client.prepare(c, &ctx, o.etcd.timeout);
        pb::LeaseKeepAliveResponse rs;
        bool got = false;
        if (s.ok()) {
          auto ka = c->lease->LeaseKeepAlive(&ctx);
          pb::LeaseKeepAliveRequest rq;
          rq.set_id(lease_id);
          got = ka->Write(rq) && ka->Read(&rs);
          ka->WritesDone();
          ctx.TryCancel();
          s = ka->Finish();
          if (got) s = grpc::Status::OK;
        }
        if (!got) {
          down(c, "lease keepalive",
               s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keepalive stream closed") : s);
          if (!sleep_for(backoff(attempt++))) break;
          continue;
        }
        last_keepalive = Clock::now();
        if (rs.ttl() <= 0) {
          spdlog::warn("fleet: status lease {:x} expired; granting a new one", lease_id);
          lease_id = 0;
          continue;
        }
      }
      const std::string js = status_json();
      if (js != last_put) {
        pb::PutRequest rq;
        rq.set_key(status_key);
        rq.set_value(js);
        rq.set_lease(lease_id);
        pb::PutResponse rs;
        grpc::ClientContext ctx;
        grpc::Status s = client.prepare(c, &ctx, o.etcd.timeout);
        if (s.ok()) s = c->kv->Put(&ctx, rq, &rs);
        if (!s.ok()) {
          if (s.error_message().find("lease not found") != std::string::npos) {
            lease_id = 0;
            continue;
          }
          down(c, "status put", s);
          if (!sleep_for(backoff(attempt++))) break;
          continue;
        }
        last_put = js;
      }
      attempt = 0;
      if (!sleep_for(kStatusInterval)) break;
    }
    if (lease_id) {  // a clean stop: the status goes now, not at the lease's expiry
      auto c = client.conn();
      pb::LeaseRevokeRequest rq;
      rq.set_id(lease_id);
      pb::LeaseRevokeResponse rs;
      grpc::ClientContext ctx;
      if (client.prepare(c, &ctx, std::chrono::milliseconds(2000)).ok())
        (void)c->lease->LeaseRevoke(&ctx, rq, &rs);
    }
  }
};

Fleet::Fleet(const FleetOptions& o, SubscriberStore* store, std::string boot_id) {
  if (auto e = check_node_name(o.node)) throw std::runtime_error("fleet: " + *e);
  if (o.status_ttl_seconds < 2) throw std::runtime_error("fleet: status ttl must be >= 2 s");
  impl_ = std::make_unique<Impl>(o, store, std::move(boot_id));
  spdlog::info("fleet: node {}: desired state {} in etcd [{}]; gRPC writes are refused", o.node,
               impl_->prefix, fmt::join(o.etcd.endpoints, ","));
  impl_->sync_thread = std::thread([this] { impl_->sync_loop(); });
  impl_->status_thread = std::thread([this] { impl_->status_loop(); });
}

Fleet::~Fleet() { stop(); }

void Fleet::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  {
    std::lock_guard l(impl_->mu);
    if (impl_->watch_ctx) impl_->watch_ctx->TryCancel();
  }
  impl_->cv.notify_all();
  if (impl_->sync_thread.joinable()) impl_->sync_thread.join();
  if (impl_->status_thread.joinable()) impl_->status_thread.join();
}

FleetState Fleet::state() const {
  std::lock_guard l(impl_->mu);
  FleetState s = impl_->st;
  if (!s.etcd_up && impl_->down_since != Clock::time_point{})
    s.outage_seconds = std::chrono::duration<double>(Clock::now() - impl_->down_since).count();
  return s;
}

std::string Fleet::status_json() const { return impl_->status_json(); }

std::string Fleet::render_metrics() const {
  const FleetState s = state();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, auto v) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n{}{{node=\"{}\"}} {}\n",
                   name, help, name, type, name, impl_->o.node, v);
  };
  metric("xbng_fleet_etcd_up", "gauge", "1 when etcd answers, 0 during an outage",
         s.etcd_up ? 1 : 0);
  metric("xbng_fleet_synced", "gauge", "1 when the maps follow etcd (full read done, watch up)",
         s.synced ? 1 : 0);
  metric("xbng_fleet_applied_revision", "gauge", "etcd revision fully applied to the maps",
         s.applied_revision);
  metric("xbng_fleet_refused_keys", "gauge", "keys of this node refused (see the status key)",
         s.refused);
  metric("xbng_fleet_etcd_outages_total", "counter", "times etcd became unreachable", s.outages);
  metric("xbng_fleet_outage_seconds", "gauge", "length of the current etcd outage",
         s.outage_seconds);
  metric("xbng_fleet_full_syncs_total", "counter", "full reads of the node's prefix applied",
         s.full_syncs);
  metric("xbng_fleet_compactions_total", "counter",
         "reads or watches that fell behind compaction (each followed by a full read)",
         s.compactions);
  metric("xbng_fleet_events_total", "counter", "watch events applied", s.events);
  metric("xbng_fleet_history_resets_total", "counter",
         "full reads because etcd's history changed (wiped, restored or another cluster)",
         s.history_resets);
  metric("xbng_fleet_internal_errors_total", "counter",
         "exceptions caught at a reconciler thread's top level (logged; the thread goes on)",
         s.internal_errors);
  return out;
}

}  // namespace xbng::agent
