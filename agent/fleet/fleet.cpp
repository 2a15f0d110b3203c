// The fleet reconciler: full read → store, then watch → store; the status
// key under a lease. Two threads: `sync` (range reads, the watch, applying
// to the store) and `status` (lease, keepalive, status puts). etcd is
// reached through fleet/kv.h and its values decoded by a ValueCodec: this
// file sees neither gRPC nor protobuf.
#include <absl/container/flat_hash_set.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <malloc.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <random>
#include <thread>

#include "common/status.h"
#include "fleet/fleet.h"
#include "fleet/kv.h"
#include "store/store.h"
#include "store/scan.h"

namespace xbng::agent {

using fleet::DecodedKv;
using fleet::KeyValue;
using fleet::KvConn;
using fleet::KvHeader;
using fleet::RangeResponse;
using fleet::status_text;
using fleet::WatchEvent;
using fleet::WatchResponse;
using fleet::WatchStream;
using Clock = std::chrono::steady_clock;

namespace {
constexpr size_t kDeleteChunk = 50000;
constexpr auto kProgressIdle = std::chrono::milliseconds(300);
// Without own events, progress is asked at most this often: every answer moves
// the status revision, and so rewrites the status key (itself a revision).
constexpr auto kProgressQuiet = std::chrono::seconds(2);
constexpr auto kStatusInterval = std::chrono::milliseconds(200);

bool is_compacted(const absl::Status& s) {
  return s.code() == absl::StatusCode::kOutOfRange &&
         status_message(s).find("compacted") != std::string_view::npos;
}

// Subscribers the access side created (an Access-Accept, a relayed lease),
// not etcd: the reconciler never deletes them (docs/fleet.md, "Reconcile").
bool access_side(uint8_t origin) { return origin == kOriginRadius || origin == kOriginRelay; }
}  // namespace

struct Fleet::Impl {
  FleetOptions o;
  SubscriberStore* store;
  std::string boot_id;
  std::string prefix, prefix_end, status_key;
  std::unique_ptr<fleet::Kv> etcd;
  const fleet::ValueCodec& codec;

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
  WatchStream* watch_stream = nullptr;  // cancelled by stop()
  int64_t lease_id = 0;

  std::thread sync_thread, status_thread;

  Impl(const FleetOptions& opts, SubscriberStore* s, std::string boot,
       std::unique_ptr<fleet::Kv> kv, const fleet::ValueCodec& c)
      : o(opts),
        store(s),
        boot_id(std::move(boot)),
        prefix(
            node_subscribers_prefix(opts.subscribers_of.empty() ? opts.node : opts.subscribers_of)),
        prefix_end(prefix_range_end(prefix)),
        status_key(status_etcd_key(opts.node)),
        etcd(std::move(kv)),
        codec(c) {}

  // ---- outage accounting ----------------------------------------------------
  void up(const std::shared_ptr<KvConn>& c) {
    std::lock_guard l(mu);
    st.endpoint = c->endpoint();
    if (st.etcd_up) return;
    if (was_up || st.outages) {
      const double secs = std::chrono::duration<double>(Clock::now() - down_since).count();
      last_outage_seconds = secs;
      spdlog::info("fleet: etcd reachable again via {} after {:.1f} s", c->endpoint(), secs);
    } else {
      spdlog::info("fleet: etcd reachable via {}", c->endpoint());
    }
    st.etcd_up = true;
    was_up = true;
    st.outage_seconds = 0;
  }
  void down(const std::shared_ptr<KvConn>& c, const std::string& what, const absl::Status& s) {
    etcd->failed(c, s);
    std::lock_guard l(mu);
    const std::string err = fmt::format("{} via {}: {}", what, c->endpoint(), status_text(s));
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
  // Decodes a kv of this node's prefix as stream entry `index`. Returns false
  // (and records the refusal) when the key or value is refused: it is no
  // entry of the stream. An entry that fails validation is one (the store
  // refuses it). `rank` gets the store rank of the key when its port is an
  // access port of this node.
  bool decode(std::string_view key, std::string_view value, size_t index, DecodedKv* d,
              std::optional<uint64_t>* rank, std::map<std::string, std::string>* refusals) {
    try {
      codec.decode(prefix, key, value, store->ports(), index, d);
    } catch (const std::exception& ex) {  // a bug, not the input's fault: refuse, count, go on
      note_internal_error("decoding a key", ex);
      d->refused = fmt::format("internal error while decoding: {}", ex.what());
    }
    if (d->key_ok)
      if (auto ifx = store->ports().access_ifindex(d->port)) {
        SubKey k{};
        k.ifindex = *ifx;
        k.outer_vid = static_cast<uint16_t>(d->outer);
        k.inner_vid = static_cast<uint16_t>(d->inner);
        *rank = key_rank(k);
      }
    if (d->refused) {
      (*refusals)[std::string(key)] = std::move(*d->refused);
      return false;
    }
    return true;
  }

  // Appends a decoded entry to a stream batch: valid, or refused as invalid.
  static void add_entry(DecodedKv&& d, StreamBatch* b) {
    const size_t i = b->base + b->got++;
    b->keys.push_back({std::move(d.port), d.outer, d.inner});
    if (!d.invalid.ok()) {
      b->invalid.emplace_back(i, std::move(d.invalid));
      return;
    }
    b->specs.push_back(std::move(d.spec));
    b->idx.push_back(i);
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

  void set_witness(const KeyValue& kv) {
    witness.key = kv.key;
    witness.value = kv.value;
    witness.mod_revision = kv.mod_revision;
    witness.create_revision = kv.create_revision;
    witness.version = kv.version;
  }

  // Compares an answer's header with what the node saw last: a reason when
  // etcd is another cluster or its revision is below what was applied.
  std::optional<std::string> header_changed(const KvHeader& h) {
    std::optional<std::string> why;
    std::lock_guard l(mu);
    if (cluster_id && h.cluster_id && h.cluster_id != cluster_id)
      why = fmt::format("etcd cluster id changed from {:x} to {:x} (member {:x})", cluster_id,
                        h.cluster_id, h.member_id);
    else if (event_rev && h.revision && h.revision < event_rev)
      why = fmt::format(
          "etcd's revision went backwards: member {:x} is at revision {}, the node "
          "applied {} (etcd wiped or restored)",
          h.member_id, h.revision, event_rev);
    if (h.cluster_id) cluster_id = h.cluster_id;
    return why;
  }

  // ---- full read ------------------------------------------------------------
  // The pages of a full read: one consistent read at a single revision R,
  // over the disjoint key ranges of full_read_ranges(). The first request
  // (linearizable) fixes R; then `readers` threads take the ranges in key
  // order, one whole range at a time, and read its pages at R, serializable
  // (the member that answered at R has R: no ReadIndex round per page).
  // Each reader decodes its page where it arrived (key, UTF-8, JSON, the
  // store's validation) straight from the response's buffer, so decoding
  // runs on every reader at once and no key or value is copied. The store
  // then takes the decoded pages in key order (so the same key wins a
  // conflict whatever the timing), while the readers go on: each reader
  // keeps at most one page waiting, so at most 2 * readers + 1 pages are in
  // memory. Pages are of page_size / readers keys: those pages hold no more
  // keys than one reader's three pages of page_size.
  struct RangeReader {
    // One page, decoded on the reader that read it.
    struct Page {
      std::vector<DecodedKv> entries;  // the stream entries (valid or not), in key order
      // Key and value of each entry that failed validation, in order: its
      // reason names its stream index, known only when the store takes it.
      std::vector<std::pair<std::string, std::string>> invalid_kvs;
      std::vector<uint64_t> present;  // store ranks of the keys read
      std::map<std::string, std::string> refusals;
      uint64_t kvs = 0;
      Witness last;  // the page's key of the highest mod_revision
      double decode_s = 0;
    };

    Impl* self;
    std::shared_ptr<KvConn> c;
    std::vector<std::pair<std::string, std::string>> ranges;
    const uint32_t readers;
    const int64_t limit;  // keys per page
    int64_t rev = 0;
    const Clock::time_point t0 = Clock::now();

    // A range's pages, in order, as its reader delivers them.
    struct Slot {
      std::deque<std::unique_ptr<Page>> pages;
      bool done = false;
    };
    std::mutex mu;  // everything below
    std::condition_variable cv;
    std::deque<Slot> slots;  // [ranges.size()] (a deque: a Slot does not move)
    size_t next_range = 0;   // the next range a reader takes
    size_t running = 0;      // readers not finished
    bool abort = false, failed = false;
    absl::Status err;  // the first failure
    uint64_t kvs = 0;
    double request_s = 0, decode_s = 0;  // summed over the readers
    Clock::time_point last_page = t0;
    std::vector<std::thread> threads;

    std::unique_ptr<Page> first_page;  // first()'s, until start()
    std::string first_from;

    // The store's side (one thread).
    size_t cur = 0;  // the range being taken
    double wait_s = 0;

    RangeReader(Impl* s, std::shared_ptr<KvConn> conn, uint32_t n)
        : self(s),
          c(std::move(conn)),
          ranges(full_read_ranges(s->prefix, s->o.access_ports)),
          readers(n),
          limit(std::max<int64_t>(1, s->o.page_size / n)) {
      slots.resize(ranges.size());
    }
    ~RangeReader() { stop(); }

    // Decodes a page's kvs into `pg` (index 0: see Page::invalid_kvs).
    // Returns the key to read on from ("" at the range's end).
    std::string decode_page(const fleet::RangeView& v, Page* pg) {
      const auto d0 = Clock::now();
      pg->kvs = v.kvs.size();
      pg->entries.reserve(v.kvs.size());
      pg->present.reserve(v.kvs.size());
      const fleet::KeyValueView* last = nullptr;
      for (const auto& kv : v.kvs) {
        if (!last || kv.mod_revision > last->mod_revision) last = &kv;
        DecodedKv d;
        std::optional<uint64_t> rank;
        const bool entry = self->decode(kv.key, kv.value, 0, &d, &rank, &pg->refusals);
        if (rank) pg->present.push_back(*rank);
        if (!entry) continue;
        if (!d.invalid.ok()) pg->invalid_kvs.emplace_back(kv.key, kv.value);
        pg->entries.push_back(std::move(d));
      }
      if (last)
        pg->last = {std::string(last->key), std::string(last->value), last->mod_revision,
                    last->create_revision, last->version};
      pg->decode_s = std::chrono::duration<double>(Clock::now() - d0).count();
      if (!v.more || v.kvs.empty()) return {};
      std::string from(v.kvs.back().key);
      from += '\0';
      return from;
    }

    // One page of [from, ranges[i].second) at R (rev 0: the first request,
    // which fixes R), decoded. False when etcd failed (err is set).
    // *next is where the range goes on ("" at its end).
    bool request(size_t i, const std::string& from, Page* out, std::string* next,
                 KvHeader* h = nullptr) {
      const auto f0 = Clock::now();
      fleet::RangeRequest rq;
      rq.key = from;
      rq.range_end = ranges[i].second;
      rq.limit = limit;
      rq.revision = rev;
      rq.serializable = rev != 0;
      KvHeader at;
      absl::Status s =
          c->range_view(rq, std::chrono::milliseconds(60000), [&](const fleet::RangeView& v) {
            at = v.header;
            *next = decode_page(v, out);
          });
      const auto f1 = Clock::now();
      std::lock_guard l(mu);
      request_s += std::chrono::duration<double>(f1 - f0).count() - out->decode_s;
      decode_s += out->decode_s;
      if (!s.ok()) {
        if (!failed) err = std::move(s);
        failed = abort = true;
        cv.notify_all();
        return false;
      }
      if (!rev) rev = at.revision;
      if (h) *h = at;
      kvs += out->kvs;
      last_page = f1;
      return true;
    }

    // Hands a page of range i to the store; waits while the range already
    // has one waiting. False when the read is aborted.
    bool deliver(size_t i, std::unique_ptr<Page> pg, bool last) {
      std::unique_lock l(mu);
      cv.wait(l, [&] { return slots[i].pages.empty() || abort; });
      if (abort) return false;
      if (pg->kvs) slots[i].pages.push_back(std::move(pg));
      slots[i].done = last;
      cv.notify_all();
      return true;
    }

    // Reads range i from `from` to its end, page after page.
    bool read_range(size_t i, std::string from) {
      for (;;) {
        auto pg = std::make_unique<Page>();
        std::string next;
        if (!request(i, from, pg.get(), &next)) return false;
        if (!deliver(i, std::move(pg), next.empty())) return false;
        if (next.empty()) return true;
        from = std::move(next);
      }
    }

    void reader_loop() {
      for (;;) {
        size_t i;
        {
          std::lock_guard l(mu);
          if (abort || next_range == ranges.size()) break;
          i = next_range++;
        }
        if (!read_range(i, ranges[i].first)) break;
      }
      std::lock_guard l(mu);
      --running;
      cv.notify_all();
    }

    // The first request: fixes R (its header in *h). False when etcd failed.
    bool first(KvHeader* h) {
      first_page = std::make_unique<Page>();
      if (!request(0, ranges[0].first, first_page.get(), &first_from, h)) return false;
      return true;
    }

    // Starts the readers, the first page (of range 0) already read.
    void start() {
      const bool more = !first_from.empty();
      {
        std::lock_guard l(mu);
        if (first_page->kvs) slots[0].pages.push_back(std::move(first_page));
        slots[0].done = !more;
        next_range = 1;
        running = readers;
      }
      for (uint32_t k = 0; k < readers; ++k)
        threads.emplace_back([this, k, more, from = first_from] {
          if (k == 0 && more && !read_range(0, from)) {
            std::lock_guard l(mu);
            --running;
            cv.notify_all();
            return;
          }
          reader_loop();
        });
    }

    // The next page in key order; null at the end, when etcd failed or the
    // fleet stops.
    std::unique_ptr<Page> next() {
      for (;;) {
        if (self->stopping) return nullptr;
        std::unique_lock l(mu);
        const auto w0 = Clock::now();
        cv.wait(l, [&] {
          return abort || cur == slots.size() || !slots[cur].pages.empty() || slots[cur].done;
        });
        wait_s += std::chrono::duration<double>(Clock::now() - w0).count();
        if (abort || cur == slots.size()) return nullptr;
        if (slots[cur].pages.empty()) {  // done
          ++cur;
          continue;
        }
        auto pg = std::move(slots[cur].pages.front());
        slots[cur].pages.pop_front();
        cv.notify_all();
        return pg;
      }
    }

    void stop() {
      {
        std::lock_guard l(mu);
        abort = true;
        cv.notify_all();
      }
      for (auto& t : threads)
        if (t.joinable()) t.join();
      threads.clear();
    }
  };

  // What a full read gathered besides the entries it streamed.
  struct FullRead {
    std::vector<uint64_t> present;  // ranks of the keys etcd has (8 bytes a key)
    std::map<std::string, std::string> refusals, store_refusals;
    int64_t count = 0;  // keys under the prefix
    Witness last;       // the key of the highest mod_revision
    // The page being streamed.
    std::unique_ptr<RangeReader::Page> page;
    size_t pos = 0, invalid_pos = 0;
  };

  // Takes the next page of the full read: its refusals, keys and witness.
  bool next_page(RangeReader* pr, FullRead* fr) {
    fr->page = pr->next();
    if (!fr->page) return false;
    RangeReader::Page& pg = *fr->page;
    fr->count += static_cast<int64_t>(pg.kvs);
    if (pg.last.mod_revision > fr->last.mod_revision) fr->last = std::move(pg.last);
    fr->present.insert(fr->present.end(), pg.present.begin(), pg.present.end());
    pg.present = {};
    fr->refusals.merge(pg.refusals);
    fr->pos = fr->invalid_pos = 0;
    return true;
  }

  // The full read's decoded pages as the store's stream input. An entry
  // that failed validation is decoded again with its stream index, which
  // its reason names.
  StreamSource full_read_source(RangeReader* pr, FullRead* fr) {
    return [this, pr, fr](StreamBatch* b, size_t max) {
      while (b->got < max) {
        while (!fr->page || fr->pos == fr->page->entries.size())
          if (!next_page(pr, fr)) return false;
        DecodedKv& d = fr->page->entries[fr->pos++];
        if (!d.invalid.ok()) {
          const auto& [key, value] = fr->page->invalid_kvs[fr->invalid_pos++];
          std::optional<uint64_t> rank;
          d = {};
          decode(key, value, b->base + b->got, &d, &rank, &fr->refusals);
        }
        add_entry(std::move(d), b);
      }
      return true;
    };
  }

  // One consistent range read at a single revision, streamed into the store
  // as pages arrive; then deletes what the store has and etcd has not.
  // Returns kFailed when etcd failed (what was applied stays; retried
  // later), kCompacted when the read revision was compacted meanwhile.
  enum class FullEnd { kDone, kFailed, kCompacted };
  FullEnd full_sync() {
    auto c = etcd->conn();
    const uint32_t readers = std::clamp<uint32_t>(o.full_read_readers, 1, kMaxFullReadReaders);
    RangeReader pr(this, c, readers);
    KvHeader first;
    if (!pr.first(&first)) {
      down(c, "range read", pr.err);
      return FullEnd::kFailed;
    }
    up(c);
    if (auto why = header_changed(first)) {
      spdlog::warn("fleet: {}: reading everything again (subscribers no longer in etcd go)", *why);
      std::lock_guard l(mu);
      ++st.history_resets;
    }
    pr.start();
    FullRead fr;
    StreamResult r;
    collect_failures(&r, &fr.store_refusals);
    // A full read restates etcd: a learned MAC (mac policy "follow") stays.
    store->stream(full_read_source(&pr, &fr), &r, /*resync=*/true);
    pr.stop();
    if (pr.failed && is_compacted(pr.err)) {
      // Not an outage: etcd answers, the read revision is gone. Read again
      // at a new one.
      spdlog::warn(
          "fleet: full read at revision {} fell behind compaction after {} keys ({} "
          "applied): reading everything again",
          pr.rev, pr.kvs, r.applied);
      std::lock_guard l(mu);
      ++st.compactions;
      return FullEnd::kCompacted;
    }
    if (pr.failed || stopping) {
      if (pr.failed) down(c, "range read", pr.err);
      spdlog::warn(
          "fleet: full read at revision {} interrupted after {} keys ({} applied); "
          "will read again",
          pr.rev, pr.kvs, r.applied);
      return FullEnd::kFailed;
    }
    FullReadTimes t;
    t.revision = pr.rev;
    t.keys = pr.kvs;
    t.readers = readers;
    t.read_s = std::chrono::duration<double>(pr.last_page - pr.t0).count();
    t.request_s = pr.request_s;
    t.decode_s = pr.decode_s;
    t.apply_s = r.apply_seconds;
    t.wait_s = pr.wait_s;
    return finish_full_sync(&fr, r.applied, t, pr.t0) ? FullEnd::kDone : FullEnd::kFailed;
  }

  // The end of a full read whose every page was applied: stale subscribers
  // deleted, the revision and refusals adopted, the phases logged.
  bool finish_full_sync(FullRead* fr, uint64_t applied, FullReadTimes t, Clock::time_point t0) {
    fr->refusals.merge(fr->store_refusals);
    const auto t1 = Clock::now();
    uint64_t deleted = 0;
    if (!delete_stale(applied, &fr->present, &deleted)) return false;
    const auto t2 = Clock::now();
    t.delete_s = std::chrono::duration<double>(t2 - t1).count();
    t.total_s = std::chrono::duration<double>(t2 - t0).count();
    size_t n_refused;
    {
      std::lock_guard l(mu);
      refused.swap(fr->refusals);
      event_rev = t.revision;
      key_count = fr->count;
      witness = std::move(fr->last);
      st.applied_revision = t.revision;
      n_refused = st.refused = refused.size();
      st.last_full_read = t;
      ++st.full_syncs;
    }
    cv.notify_all();
    fr->present = {};
    malloc_trim(0);  // the pages and the stream's buffers go back to the system
    spdlog::info(
        "fleet: full read of {} at revision {}: {} keys in {:.2f} s with {} readers (range "
        "reads {:.2f} s, {:.2f} s in requests; decoding {:.2f} s, waiting for pages {:.2f} s; "
        "applying {:.2f} s), {} applied ({} refused), {} stale deleted in {:.2f} s; {} "
        "subscribers",
        prefix, t.revision, t.keys, std::chrono::duration<double>(t1 - t0).count(), t.readers,
        t.read_s, t.request_s, t.decode_s, t.wait_s, t.apply_s, applied, n_refused, deleted,
        t.delete_s, store->size());
    return true;
  }

  // Deletes what etcd does not have (`present`: the ranks of its keys).
  // Every applied key is in the store and distinct: when the store holds
  // exactly those, nothing is stale. Subscribers created on the access side
  // (origin radius or relay) are not etcd's to delete: they live until
  // their session ends.
  bool delete_stale(uint64_t applied, std::vector<uint64_t>* present, uint64_t* deleted) {
    if (store->size() == applied) return true;
    std::sort(present->begin(), present->end());
    std::vector<SubKey> stale;
    for_each_subscriber(*store, [&](const SubscriberView& v) {
      if (!access_side(v.spec.origin) &&
          !std::binary_search(present->begin(), present->end(), key_rank(v.spec.key)))
        stale.push_back(v.spec.key);
    });
    return remove_keys(stale, deleted);
  }

  bool remove_keys(const std::vector<SubKey>& keys, uint64_t* deleted) {
    for (size_t i = 0; i < keys.size(); i += kDeleteChunk) {
      const std::vector<SubKey> chunk(
          keys.begin() + static_cast<std::ptrdiff_t>(i),
          keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), i + kDeleteChunk)));
      uint64_t d = 0, nf = 0;
      absl::Status s = store->remove(chunk, &d, &nf);
      if (!s.ok()) {
        spdlog::error("fleet: deleting {} subscribers failed: {}; will read everything again",
                      chunk.size(), status_message(s));
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
  std::optional<std::string> history_changed(const std::shared_ptr<KvConn>& c, absl::Status* err) {
    int64_t at, count;
    Witness w;
    {
      std::lock_guard l(mu);
      at = event_rev;
      count = key_count;
      w = witness;
    }
    RangeResponse now;  // the current revision (a linearizable read)
    if (*err = range(c, prefix, prefix_end, 0, &now); !err->ok()) return std::nullopt;
    if (auto why = header_changed(now.header)) return why;
    if (!at) return std::nullopt;
    RangeResponse then;
    *err = range(c, prefix, prefix_end, at, &then);
    if (err->code() == absl::StatusCode::kOutOfRange &&
        status_message(*err).find("future revision") != std::string_view::npos) {
      const std::string why = fmt::format(
          "etcd's revision went backwards: revision {} the node applied is in etcd's future "
          "(etcd wiped or restored)",
          at);
      *err = absl::OkStatus();
      return why;
    }
    if (is_compacted(*err)) {  // cannot tell here; the watch will be cancelled as compacted
      *err = absl::OkStatus();
      return std::nullopt;
    }
    if (!err->ok()) return std::nullopt;
    if (then.count != count)
      return fmt::format(
          "etcd's history changed: {} keys under the prefix at revision {}, the node "
          "applied {} (etcd wiped or restored)",
          then.count, at, count);
    return witness_changed(c, w, err);
  }

  // [key, end) at revision `rev` (0: the current one); a count only when
  // `end` is set.
  absl::Status range(const std::shared_ptr<KvConn>& c, const std::string& key,
                     const std::string& end, int64_t rev, RangeResponse* rs) {
    fleet::RangeRequest rq;
    rq.key = key;
    rq.range_end = end;
    rq.revision = rev;
    rq.count_only = !end.empty();
    return c->range(rq, o.etcd.timeout, rs);
  }

  // history_changed(): the last key applied, as etcd has it at its mod_revision.
  std::optional<std::string> witness_changed(const std::shared_ptr<KvConn>& c, const Witness& w,
                                             absl::Status* err) {
    if (!w.mod_revision) return std::nullopt;
    RangeResponse rs;
    *err = range(c, w.key, "", w.mod_revision, &rs);
    if (is_compacted(*err)) {
      *err = absl::OkStatus();
      return std::nullopt;
    }
    if (!err->ok()) return std::nullopt;
    if (rs.kvs.size() != 1 || rs.kvs[0].mod_revision != w.mod_revision ||
        rs.kvs[0].create_revision != w.create_revision || rs.kvs[0].version != w.version ||
        rs.kvs[0].value != w.value)
      return fmt::format(
          "etcd's history changed: key {} at revision {} is not the one the node "
          "applied (etcd wiped or restored)",
          escape_bytes(w.key), w.mod_revision);
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

  // One apply_events() call: runs of puts go to the store through
  // store->stream, runs of deletes through store->remove, in event order.
  struct EventRun {
    explicit EventRun(Impl* s) : self(s) {}
    Impl* self;
    std::vector<DecodedKv> puts;  // the next stream call's entries (valid or not)
    std::vector<SubKey> dels;
    std::map<std::string, std::string> refusals;  // new refusals
    std::vector<std::string> cleared;             // keys no longer refused
    int64_t count_delta = 0;
    const KeyValue* last_put = nullptr;
    // Keys of the puts not yet given to the store: a later event of the same
    // key flushes them first, so that its last event decides its refusal.
    absl::flat_hash_set<std::string_view> pending;
    bool ok = true;

    void flush_puts() {
      if (puts.empty()) return;
      size_t i = 0;
      StreamResult r;
      self->collect_failures(&r, &refusals);
      self->store->stream(
          [&](StreamBatch* b, size_t max) {
            while (b->got < max) {
              if (i == puts.size()) return false;
              add_entry(std::move(puts[i++]), b);
            }
            return true;
          },
          &r);
      puts.clear();
      pending.clear();
    }
    // A deleted key whose subscriber the access side created (a RADIUS or
    // relay session that took the key after etcd's value was refused, or
    // before etcd had one) is left to its session.
    void flush_dels() {
      if (dels.empty()) return;
      std::erase_if(dels, [&](const SubKey& k) {
        SubscriberSpec spec;
        std::optional<Mac> learned;
        return self->store->binding(k, &spec, &learned) && access_side(spec.origin);
      });
      uint64_t d = 0;
      ok = self->remove_keys(dels, &d) && ok;
      dels.clear();
    }
    void put(const WatchEvent& ev) {
      const std::string& key = ev.kv.key;
      if (ev.kv.version == 1) ++count_delta;  // created (not an update)
      last_put = &ev.kv;
      DecodedKv d;
      std::optional<uint64_t> rank;
      std::map<std::string, std::string> bad;
      if (!self->decode(key, ev.kv.value, puts.size(), &d, &rank, &bad)) {
        // Refused: the key keeps what was applied before (as a refused
        // gRPC upsert would).
        for (auto& [k, v] : bad) refusals[k] = std::move(v);
        return;
      }
      refusals.erase(key);
      cleared.push_back(key);
      flush_dels();
      puts.push_back(std::move(d));
      pending.insert(key);
    }
    void del(const WatchEvent& ev) {
      const std::string& key = ev.kv.key;
      --count_delta;
      refusals.erase(key);
      cleared.push_back(key);
      std::string port;
      uint32_t outer = 0, inner = 0;
      if (parse_subscriber_key_suffix(std::string_view(key).substr(self->prefix.size()), &port,
                                      &outer, &inner))
        return;  // never applied
      const auto ifx = self->store->ports().access_ifindex(port);
      if (!ifx) return;
      flush_puts();
      SubKey k{};
      k.ifindex = *ifx;
      k.outer_vid = static_cast<uint16_t>(outer);
      k.inner_vid = static_cast<uint16_t>(inner);
      dels.push_back(k);
    }
  };

  // Applies events in order. False when a delete failed in the store.
  bool apply_events(const std::vector<WatchEvent>& evs) {
    EventRun run(this);
    for (const auto& ev : evs) {
      const std::string& key = ev.kv.key;
      if (key.compare(0, prefix.size(), prefix) != 0) continue;
      if (run.pending.contains(key)) run.flush_puts();
      if (ev.type == WatchEvent::Type::kPut)
        run.put(ev);
      else
        run.del(ev);
    }
    run.flush_puts();
    run.flush_dels();
    std::lock_guard l(mu);
    for (const auto& k : run.cleared) refused.erase(k);
    for (auto& [k, v] : run.refusals) refused[k] = std::move(v);
    st.refused = refused.size();
    st.events += evs.size();
    key_count += run.count_delta;
    if (run.last_put) set_witness(*run.last_put);
    return run.ok;
  }

  // One watch stream's progress, kept by watch() across the responses.
  struct WatchRun {
    std::shared_ptr<KvConn> c;
    WatchStream* stream = nullptr;
    int64_t start = 0;  // the revision watched from
    WatchEnd end = WatchEnd::kError;
    bool created = false, progress_pending = false, events_since_progress = true;
    Clock::time_point last_progress = Clock::now();
    int64_t watch_id = -1;
  };

  // Applies what the stream sent since the last call (`got`, maybe nothing):
  // events, progress, cancellation, a changed history. Returns true when
  // the watch is to end (run->end says why).
  bool on_responses(std::deque<WatchResponse>& got, WatchRun* run) {
    std::vector<WatchEvent> evs;
    int64_t last_rev = 0, progress_rev = 0;
    bool stop_now = false;
    for (auto& r : got) {
      if (auto why = header_changed(r.header)) {
        forget_history(*why);
        run->end = WatchEnd::kReset;
        stop_now = true;
        break;
      }
      if (r.created) {
        run->created = true;
        run->watch_id = r.watch_id;
        up(run->c);
        spdlog::info("fleet: watching {} from revision {} via {}", prefix, run->start,
                     run->c->endpoint());
      }
      if (r.canceled) {
        if (r.compact_revision > 0) {
          spdlog::warn(
              "fleet: watch fell behind compaction (compacted up to {}, needed {}): "
              "reading everything again",
              r.compact_revision, run->start);
          run->end = WatchEnd::kCompacted;
        } else {
          down(run->c, "watch", absl::UnavailableError("watch canceled: " + r.cancel_reason));
          run->end = WatchEnd::kError;
        }
        stop_now = true;
        break;
      }
      if (r.events.empty() && !r.created && (r.watch_id == run->watch_id || r.watch_id == -1)) {
        progress_rev = std::max(progress_rev, r.header.revision);
        run->progress_pending = false;
      }
      for (auto& e : r.events) {
        last_rev = std::max(last_rev, e.kv.mod_revision);
        evs.push_back(std::move(e));
      }
    }
    if (!evs.empty() && run->end != WatchEnd::kReset) {
      run->events_since_progress = true;
      if (!apply_events(evs)) {
        run->end = WatchEnd::kApplyFailed;
        stop_now = true;
      }
    }
    {
      std::lock_guard l(mu);
      if (!stop_now || (run->end != WatchEnd::kApplyFailed && run->end != WatchEnd::kReset)) {
        event_rev = std::max(event_rev, last_rev);
        st.applied_revision = std::max({st.applied_revision, event_rev, progress_rev});
      }
      st.synced = run->created && !stop_now;
    }
    if (!evs.empty() || progress_rev) cv.notify_all();
    return stop_now;
  }

  // Reads the stream until it ends or the watch is to end: a reader thread
  // queues responses; this thread applies everything queued at once (runs
  // of changes become one store call) and, when idle, asks for progress.
  void watch_responses(WatchRun* run) {
    std::mutex qmu;
    std::condition_variable qcv;
    std::deque<WatchResponse> q;
    bool ended = false;
    std::thread reader([&] {
      WatchResponse r;
      while (run->stream->read(&r)) {
        std::lock_guard l(qmu);
        q.push_back(std::move(r));
        qcv.notify_one();
        r = {};
      }
      std::lock_guard l(qmu);
      ended = true;
      qcv.notify_one();
    });
    // On any way out (an exception included): cancel the stream, join the reader.
    struct Joiner {
      Impl* self;
      WatchStream* stream;
      std::thread& t;
      ~Joiner() {
        {
          std::lock_guard l(self->mu);
          self->watch_stream = nullptr;
          self->st.synced = false;
        }
        stream->cancel();
        t.join();
      }
    } joiner{this, run->stream, reader};
    for (;;) {
      std::deque<WatchResponse> got;
      bool is_end;
      {
        std::unique_lock l(qmu);
        const bool woke = qcv.wait_for(l, kProgressIdle, [&] { return !q.empty() || ended; });
        got.swap(q);
        is_end = ended && got.empty();
        if (!woke && run->created && !run->progress_pending &&
            (run->events_since_progress || Clock::now() - run->last_progress >= kProgressQuiet)) {
          // Idle: ask where the stream stands, so that the status revision
          // follows the store's even when other nodes' keys change.
          l.unlock();
          run->progress_pending = run->stream->request_progress();
          run->events_since_progress = false;
          run->last_progress = Clock::now();
        }
      }
      if (is_end || on_responses(got, run)) break;
    }
  }

  WatchEnd watch(bool resume) {
    WatchRun run;
    run.c = etcd->conn();
    const auto& c = run.c;
    if (resume) {
      absl::Status s;
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
    std::unique_ptr<WatchStream> stream;
    if (absl::Status s = c->watch(&stream); !s.ok()) {
      down(c, "watch", s);
      return WatchEnd::kError;
    }
    {
      std::lock_guard l(mu);
      if (stopping) return WatchEnd::kStopped;
      watch_stream = stream.get();
      run.start = event_rev + 1;
    }
    run.stream = stream.get();
    stream->create(prefix, prefix_end, run.start);
    watch_responses(&run);
    const absl::Status fs = stream->finish();
    if (stopping) return WatchEnd::kStopped;
    if (run.end == WatchEnd::kError && !fs.ok() && fs.code() != absl::StatusCode::kCancelled)
      down(c, "watch", fs);
    else if (run.end == WatchEnd::kError && !run.created)
      down(c, "watch", absl::UnavailableError("watch stream closed"));
    else if (run.end == WatchEnd::kError)
      down(c, "watch", fs.ok() ? absl::UnavailableError("watch stream closed") : fs);
    return run.end;
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
    v.full_read = st.last_full_read;
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

  // What one step of the status loop asks of the loop.
  enum class Step { kOk, kBackoff, kAgain };

  Step grant_lease(const std::shared_ptr<KvConn>& c) {
    int64_t id = 0;
    if (absl::Status s = c->lease_grant(o.status_ttl_seconds, o.etcd.timeout, &id); !s.ok()) {
      down(c, "lease grant", s);
      return Step::kBackoff;
    }
    lease_id = id;
    spdlog::info("fleet: status {} under lease {:x} (ttl {} s)", status_key, lease_id,
                 o.status_ttl_seconds);
    return Step::kOk;
  }

  Step keep_lease(const std::shared_ptr<KvConn>& c) {
    int64_t ttl = 0;
    if (absl::Status s = c->lease_keepalive(lease_id, o.etcd.timeout, &ttl); !s.ok()) {
      down(c, "lease keepalive", s);
      return Step::kBackoff;
    }
    if (ttl <= 0) {
      spdlog::warn("fleet: status lease {:x} expired; granting a new one", lease_id);
      lease_id = 0;
      return Step::kAgain;
    }
    return Step::kOk;
  }

  // Puts the status when it changed since *last_put.
  Step put_status(const std::shared_ptr<KvConn>& c, std::string* last_put) {
    const std::string js = status_json();
    if (js == *last_put) return Step::kOk;
    if (absl::Status s = c->put(status_key, js, lease_id, o.etcd.timeout); !s.ok()) {
      if (status_message(s).find("lease not found") != std::string_view::npos) {
        lease_id = 0;
        return Step::kAgain;
      }
      down(c, "status put", s);
      return Step::kBackoff;
    }
    *last_put = js;
    return Step::kOk;
  }

  void status_loop_once() {
    std::string last_put;
    auto last_keepalive = Clock::now();
    int attempt = 0;
    while (!stopping) {
      auto c = etcd->conn();
      const auto ttl = std::chrono::seconds(o.status_ttl_seconds);
      Step step = Step::kOk;
      if (!lease_id) {
        step = grant_lease(c);
        if (step == Step::kOk) {
          last_keepalive = Clock::now();
          last_put.clear();
        }
      }
      if (step == Step::kOk && Clock::now() - last_keepalive >= ttl / 3) {
        step = keep_lease(c);
        if (step != Step::kBackoff) last_keepalive = Clock::now();
      }
      if (step == Step::kOk) step = put_status(c, &last_put);
      if (step == Step::kAgain) continue;
      if (step == Step::kBackoff) {
        if (!sleep_for(backoff(attempt++))) break;
        continue;
      }
      attempt = 0;
      if (!sleep_for(kStatusInterval)) break;
    }
    if (lease_id)  // a clean stop: the status goes now, not at the lease's expiry
      (void)etcd->conn()->lease_revoke(lease_id, std::chrono::milliseconds(2000));
  }
};

Fleet::Fleet(const FleetOptions& o, SubscriberStore* store, std::string boot_id,
             std::unique_ptr<fleet::Kv> kv, const fleet::ValueCodec& codec) {
  if (auto e = check_node_name(o.node)) throw std::runtime_error("fleet: " + *e);
  if (o.status_ttl_seconds < 2) throw std::runtime_error("fleet: status ttl must be >= 2 s");
  impl_ = std::make_unique<Impl>(o, store, std::move(boot_id), std::move(kv), codec);
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
    if (impl_->watch_stream) impl_->watch_stream->cancel();
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
