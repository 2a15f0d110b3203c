// What the fleet needs of etcd, in the core's own types: the etcd v3 calls
// its reconciler and writer make (Kv, KvConn, WatchStream) and the decoder
// of a node's subscriber values (ValueCodec). The etcd/ room implements
// them over gRPC and protobuf (etcd/etcd_kv.h, etcd/value_codec.h); the
// fleet sees neither, and a test can hand it an etcd of its own.
//
// Errors are absl::Status with etcd's gRPC codes and messages as they came
// (absl::StatusCode numbers the codes as gRPC does).
#pragma once

#include <absl/status/status.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/subscriber.h"

namespace xbng::agent::fleet {

// etcd's ResponseHeader.
struct KvHeader {
  uint64_t cluster_id = 0, member_id = 0;
  int64_t revision = 0;
};

// etcd's mvccpb.KeyValue.
struct KeyValue {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0;
  int64_t lease = 0;  // the lease the key is attached to (0: none)
};

struct RangeRequest {
  std::string key, range_end;  // [key, range_end); range_end "" = key alone
  int64_t limit = 0;           // 0 = no limit
  int64_t revision = 0;        // 0 = the current one
  bool count_only = false;
  // Answered by the member asked from its own state, without asking the
  // leader (no ReadIndex round): valid for a revision that member has
  // already answered.
  bool serializable = false;
};

struct RangeResponse {
  KvHeader header;
  std::vector<KeyValue> kvs;
  bool more = false;  // more keys in the range than returned
  int64_t count = 0;  // keys in the range
};

// One kv of a range page as views into the page's own buffer.
struct KeyValueView {
  std::string_view key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0;
};

// A range page seen in place (KvConn::range_view): its kvs are views into
// the response as it was received, valid only during the call.
struct RangeView {
  KvHeader header;
  std::span<const KeyValueView> kvs;
  bool more = false;
  int64_t count = 0;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;
};

struct WatchResponse {
  KvHeader header;
  int64_t watch_id = 0;
  bool created = false, canceled = false;
  int64_t compact_revision = 0;  // canceled: the watch fell behind compaction
  std::string cancel_reason;
  std::vector<WatchEvent> events;
};

// One operation of a transaction without compares (every one applied).
struct TxnOp {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  std::string key, value;
};

// One watch stream. read() and request_progress() may run at the same time
// on two threads; cancel() on any thread.
class WatchStream {
 public:
  virtual ~WatchStream() = default;
  // Asks for a watch of [key, range_end) from start_revision.
  virtual void create(const std::string& key, const std::string& range_end,
                      int64_t start_revision) = 0;
  // Waits for the next response; false once the stream has ended.
  virtual bool read(WatchResponse* out) = 0;
  // Asks where the stream stands (an empty response answers); false when
  // the stream is closed.
  virtual bool request_progress() = 0;
  // Ends the stream (before create() too): read() returns false.
  virtual void cancel() = 0;
  // After read() returned false: how the stream ended.
  virtual absl::Status finish() = 0;
};

// The connection to one etcd member. A timeout of zero is none.
class KvConn {
 public:
  virtual ~KvConn() = default;
  virtual const std::string& endpoint() const = 0;
  virtual absl::Status range(const RangeRequest& rq, std::chrono::milliseconds timeout,
                             RangeResponse* out) = 0;
  // range(), the page handed to `page` in place: no copy of a key or value
  // (a full read decodes 1M of them). `page` runs once, on this thread,
  // when the request succeeded. Here: over range().
  virtual absl::Status range_view(const RangeRequest& rq, std::chrono::milliseconds timeout,
                                  const std::function<void(const RangeView&)>& page);
  virtual absl::Status put(const std::string& key, const std::string& value, int64_t lease,
                           std::chrono::milliseconds timeout) = 0;
  virtual absl::Status txn(const std::vector<TxnOp>& ops, std::chrono::milliseconds timeout) = 0;
  // Puts `key` under `lease` only if it does not exist (a transaction
  // comparing its create revision with 0): *created says whether it did.
  virtual absl::Status create_if_absent(const std::string& key, const std::string& value,
                                        int64_t lease, std::chrono::milliseconds timeout,
                                        bool* created) {
    (void)key, (void)value, (void)lease, (void)timeout, (void)created;
    return absl::UnimplementedError("create_if_absent");
  }
  // A lease of ttl seconds; etcd's refusal of it is UNAVAILABLE.
  virtual absl::Status lease_grant(int64_t ttl_seconds, std::chrono::milliseconds timeout,
                                   int64_t* id) = 0;
  // One keepalive of the lease: *ttl is what it has left (<= 0: expired).
  // A stream that closes without an answer is UNAVAILABLE.
  virtual absl::Status lease_keepalive(int64_t id, std::chrono::milliseconds timeout,
                                       int64_t* ttl) = 0;
  virtual absl::Status lease_revoke(int64_t id, std::chrono::milliseconds timeout) = 0;
  // A watch stream that requires a leader (a member cut off from the
  // quorum cancels it). Fails when etcd cannot be asked (authentication).
  virtual absl::Status watch(std::unique_ptr<WatchStream>* out) = 0;
};

// etcd: the members of one cluster, one of them connected at a time.
class Kv {
 public:
  virtual ~Kv() = default;
  // The current connection (thread-safe).
  virtual std::shared_ptr<KvConn> conn() = 0;
  // After a failed call on `c`: a connection failure moves to the next
  // endpoint, an authentication failure drops the token.
  virtual void failed(const std::shared_ptr<KvConn>& c, const absl::Status& st) = 0;
};

// "UNAVAILABLE: connection refused" (the code's name, then the message).
std::string status_text(const absl::Status& st);

// One kv of a node's prefix as ValueCodec::decode leaves it.
struct DecodedKv {
  bool key_ok = false;  // the key parsed after the prefix: port, outer, inner are set
  std::string port;
  uint32_t outer = 0, inner = 0;
  // The key or the value is refused (bytes, syntax, a key that is not the
  // value's): why, raw bytes escaped.
  std::optional<std::string> refused;
  // Otherwise: the value validated as a subscriber (`spec`), or why not
  // (INVALID_ARGUMENT, as the store words it for stream entry `index`).
  absl::Status invalid;
  SubscriberSpec spec;
};

// The subscriber values of a node's prefix (docs/fleet.md).
class ValueCodec {
 public:
  virtual ~ValueCodec() = default;
  // Checks `key` (under `prefix`) and `value`, then validates the value's
  // subscriber against `ports` as stream entry `index`.
  virtual void decode(std::string_view prefix, std::string_view key, std::string_view value,
                      const PortResolver& ports, size_t index, DecodedKv* out) const = 0;
};

}  // namespace xbng::agent::fleet
