// The fleet's etcd (fleet/kv.h) over the etcd v3 gRPC API: EtcdClient's
// connections, the calls translated to and from etcd's protobuf messages,
// gRPC statuses as absl::Status (same code, same message).
#pragma once

#include <memory>

#include "fleet/fleet.h"
#include "fleet/kv.h"

namespace xbng::agent::fleet {

// Throws std::runtime_error: no endpoint, a bad one, unreadable TLS file.
std::unique_ptr<Kv> connect_etcd(const EtcdOptions& o);

}  // namespace xbng::agent::fleet
