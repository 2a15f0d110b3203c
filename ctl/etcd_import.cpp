// `xbngctl sub import --etcd ENDPOINTS --node NAME FILE`: the import file
// (CSV or JSON Lines, as for gRPC) written into the node's etcd prefix.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "api/subscriber_file.h"
#include "ctl/ctl.h"
#include "etcd/etcd_kv.h"
#include "etcd/value_codec.h"
#include "fleet/fleet.h"
#include "api/convert.h"
#include "store/subscriber.h"
#include "xbng/v1/xbng.pb.h"

namespace xbng::agent {

int ctl_etcd_import(const EtcdOptions& eo, const std::string& node, const std::string& file,
                    uint32_t txn_ops, uint32_t inflight) {
  if (auto e = check_node_name(node)) throw std::runtime_error("--node: " + *e);
  // The node resolves port names; here every port name is taken, so that
  // addresses and VLANs are checked before anything is written.
  PortResolver any;
  any.access_ifindex = [](std::string_view p) -> std::optional<uint32_t> {
    if (p.empty() || p.size() >= 16 || p.find('/') != std::string_view::npos) return std::nullopt;
    return 1;
  };
  any.name = [](uint32_t) { return std::string(); };
  EtcdWriter w(fleet::connect_etcd(eo), node, txn_ops, inflight);
  std::vector<std::string> errors;
  uint64_t invalid = 0, queued = 0;
  const bool tty = isatty(2);
  const uint64_t unreadable = read_import_file(
      file,
      [&](const xbng::v1::Subscriber& s) {
        SubscriberSpec spec;
        absl::Status st = validate_subscriber(
            s, any, fmt::format("{}/{}/{}", s.port(), s.outer_vlan(), s.inner_vlan()), &spec);
        if (!st.ok()) {
          if (++invalid <= 20) errors.push_back(std::string(status_message(st)));
          return true;
        }
        w.put(s.port(), s.outer_vlan(), s.inner_vlan(), encode_subscriber_value(s));
        if (++queued % 100000 == 0 && tty) std::fprintf(stderr, "\r%lu queued", queued);
        return true;
      },
      &errors);
  const EtcdImportResult r = w.finish();
  if (tty) std::fprintf(stderr, "\n");
  std::fprintf(stderr,
               "%lu written to etcd under %s in %lu transactions in %.2f s (%.0f/s); %lu invalid, "
               "%lu lines unreadable\n",
               r.written, node_subscribers_prefix(node).c_str(), r.txns, r.seconds,
               r.seconds > 0 ? double(r.written) / r.seconds : 0.0, invalid, unreadable);
  for (const auto& e : errors) std::fprintf(stderr, "  %s\n", e.c_str());
  return invalid || unreadable ? 1 : 0;
}

}  // namespace xbng::agent
