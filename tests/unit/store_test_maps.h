// Test doubles for the subscriber store's unit tests: the store's maps in
// memory (MapOps), able to refuse a chosen write, and helpers to build
// requests and compare map contents.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "api/convert.h"
#include "api/status.h"
#include "store/map_ops.h"
#include "store/store.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::test {

using agent::kMapCount;
using agent::MapId;

// The maps' contents: per map, key bytes → value bytes. Shared by the
// stores of one test (an agent restarting on the pinned maps).
struct MapState {
  std::map<std::string, std::string> m[kMapCount];
  uint32_t max[kMapCount];
  std::mutex mu[kMapCount];
  explicit MapState(uint32_t max_entries = 1024) {
    for (auto& x : max) x = max_entries;
  }
  // A copy of the contents, to compare before and after.
  std::array<std::map<std::string, std::string>, kMapCount> snapshot() {
    std::array<std::map<std::string, std::string>, kMapCount> s;
    for (int i = 0; i < kMapCount; ++i) {
      std::lock_guard l(mu[i]);
      s[i] = m[i];
    }
    return s;
  }
};

class FakeMaps final : public agent::MapOps {
 public:
  explicit FakeMaps(std::shared_ptr<MapState> st) : st_(std::move(st)) {}

  // Faults: the next update_many calls of `m` write `after` entries in all
  // (an update's swap_many and a create's update_many of one change count
  // together), then one fails with `rc`; every later single update / erase
  // of `m` fails with `rc`.
  struct Fault {
    std::optional<size_t> batch_after;
    int batch_rc = -ENOSPC;
    bool singles = false;
    int single_rc = -EIO;
  };
  Fault fault[kMapCount];

  uint32_t max_entries(MapId m) const override { return st_->max[i(m)]; }
  int lookup(MapId m, const void* key, void* value) const override {
    std::lock_guard l(st_->mu[i(m)]);
    auto it = st_->m[i(m)].find(k(m, key));
    if (it == st_->m[i(m)].end()) return err(-ENOENT);
    std::memcpy(value, it->second.data(), it->second.size());
    return 0;
  }
  int update(MapId m, const void* key, const void* value, uint64_t flags) override {
    if (fault[i(m)].singles) return err(fault[i(m)].single_rc);
    std::lock_guard l(st_->mu[i(m)]);
    return put(m, key, value, flags);
  }
  int erase(MapId m, const void* key) override {
    if (fault[i(m)].singles) return err(fault[i(m)].single_rc);
    std::lock_guard l(st_->mu[i(m)]);
    return st_->m[i(m)].erase(k(m, key)) ? 0 : err(-ENOENT);
  }
  int update_many(MapId m, const void* keys, const void* values, size_t n, size_t ks, size_t vs,
                  size_t* done) override {
    std::lock_guard l(st_->mu[i(m)]);
    *done = 0;
    size_t limit = n;
    Fault& f = fault[i(m)];
    if (f.batch_after) {
      limit = std::min(n, *f.batch_after);
      *f.batch_after -= limit;
    }
    for (size_t j = 0; j < limit; ++j) {
      if (int rc = put(m, static_cast<const uint8_t*>(keys) + j * ks,
                       static_cast<const uint8_t*>(values) + j * vs, BPF_ANY))
        return rc;
      ++*done;
    }
    if (limit < n) {
      f.batch_after.reset();
      return err(f.batch_rc);
    }
    return 0;
  }
  int delete_many(MapId m, const void* keys, size_t n, size_t ks) override {
    std::lock_guard l(st_->mu[i(m)]);
    for (size_t j = 0; j < n; ++j)
      st_->m[i(m)].erase(k(m, static_cast<const uint8_t*>(keys) + j * ks));
    return 0;
  }
  int for_each(MapId m, size_t, size_t,
               const std::function<void(const void*, const void*)>& fn) const override {
    std::map<std::string, std::string> copy;
    {
      std::lock_guard l(st_->mu[i(m)]);
      copy = st_->m[i(m)];
    }
    for (const auto& [key, v] : copy) fn(key.data(), v.data());
    return 0;
  }

 private:
  static int i(MapId m) { return static_cast<int>(m); }
  static int err(int rc) {
    errno = -rc;
    return rc;
  }
  static size_t key_size(MapId m) {
    switch (m) {
      case MapId::kSubscribers:
        return sizeof(agent::SubKey);
      case MapId::kPolice:
      case MapId::kPorts:
        return 4;
      default:
        return agent::route_key_size(m);
    }
  }
  static size_t value_size(MapId m) {
    switch (m) {
      case MapId::kSubscribers:
        return sizeof(struct xbng_subscriber);
      case MapId::kPolice:
        return sizeof(struct xbng_police);
      case MapId::kPorts:
        return sizeof(struct xbng_port);
      default:
        return sizeof(struct xbng_route);
    }
  }
  static std::string k(MapId m, const void* key) {
    return std::string(static_cast<const char*>(key), key_size(m));
  }
  int put(MapId m, const void* key, const void* value, uint64_t flags) {
    auto& mm = st_->m[i(m)];
    const std::string kk = k(m, key);
    const bool exists = mm.contains(kk);
    if (flags == BPF_EXIST && !exists) return err(-ENOENT);
    if (flags == BPF_NOEXIST && exists) return err(-EEXIST);
    if (!exists && mm.size() >= st_->max[i(m)]) return err(-E2BIG);
    mm[kk] = std::string(static_cast<const char*>(value), value_size(m));
    return 0;
  }
  std::shared_ptr<MapState> st_;
};

// One access port, "a0" = ifindex 10.
inline agent::PortResolver test_ports() {
  agent::PortResolver r;
  r.access_ifindex = [](std::string_view n) -> std::optional<uint32_t> {
    if (n == "a0") return 10;
    return std::nullopt;
  };
  r.name = [](uint32_t ifx) { return ifx == 10 ? std::string("a0") : std::to_string(ifx); };
  return r;
}

// A store on `st`; *faults (if given) points at its map double.
inline std::unique_ptr<agent::SubscriberStore> make_store(std::shared_ptr<MapState> st,
                                                          FakeMaps** faults = nullptr) {
  auto maps = std::make_unique<FakeMaps>(std::move(st));
  if (faults) *faults = maps.get();
  return std::make_unique<agent::SubscriberStore>(std::move(maps), test_ports(), nullptr);
}

inline v1::Subscriber sub(uint32_t inner, const std::string& ipv4, const std::string& ipv6 = "",
                          std::vector<std::string> prefixes = {}) {
  v1::Subscriber s;
  s.set_port("a0");
  s.set_outer_vlan(100);
  s.set_inner_vlan(inner);
  if (!ipv4.empty()) s.set_ipv4(ipv4);
  if (!ipv6.empty()) s.set_ipv6(ipv6);
  for (auto& p : prefixes) {
    if (p.find(':') != std::string::npos)
      s.add_ipv6_prefixes(p);
    else
      s.add_ipv4_prefixes(p);
  }
  return s;
}

// An UpsertSubscribers request as the service runs it: validated into specs
// (api/convert.h), then given to the store; the status a client would see.
inline grpc::Status upsert(agent::SubscriberStore& st, const std::vector<v1::Subscriber>& subs,
                           agent::UpsertResult* r = nullptr) {
  std::vector<const v1::Subscriber*> ptrs;
  for (const auto& s : subs) ptrs.push_back(&s);
  std::vector<agent::SubscriberSpec> specs;
  if (absl::Status v = agent::validate_request(ptrs, st.ports(), &specs); !v.ok())
    return agent::to_grpc(v);
  agent::UpsertResult tmp;
  return agent::to_grpc(st.upsert(std::move(specs), r ? r : &tmp));
}

// A StreamSubscribers call of `in` as the service runs it, and its answer.
struct StreamOutcome {
  uint64_t applied = 0, failed = 0;
  std::vector<v1::Failure> failures;
};
inline StreamOutcome stream(agent::SubscriberStore& st, const std::vector<v1::Subscriber>& in,
                            bool resync = false) {
  size_t next = 0;
  agent::StreamResult r;
  st.stream(agent::stream_source(
                [&](v1::Subscriber* m) {
                  if (next == in.size()) return false;
                  *m = in[next++];
                  return true;
                },
                st.ports(), agent::kOriginApi),
            &r, resync);
  StreamOutcome out{r.applied, r.failed, {}};
  for (const auto& f : r.failures) agent::failure_to_proto(f, &out.failures.emplace_back());
  return out;
}

inline agent::SubKey key(uint16_t inner) { return {10, 100, inner}; }

}  // namespace xbng::test
