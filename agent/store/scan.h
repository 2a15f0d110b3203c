// Every subscriber of a store, read page by page through its listing (in
// the listing's order: port, outer, inner), for the scans that look at all
// of them: the fleet's stale check, HA's prune, the relay's reconcile, the
// RA scheduler's start. A failed page ends the scan.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "store/store.h"

namespace xbng::agent {

inline void for_each_subscriber(const SubscriberStore& store,
                                const std::function<void(const SubscriberView&)>& f) {
  ListQuery q;
  q.page_size = 10000;
  for (;;) {
    std::vector<SubscriberView> page;
    std::string next;
    uint64_t total = 0;
    if (!store.list(q, &page, &next, &total).ok()) return;
    for (const auto& v : page) f(v);
    if (next.empty()) return;
    q.page_token = next;
  }
}

}  // namespace xbng::agent
