#include "dataplane/mac_policy.h"

#include "xbng/abi.h"

namespace xbng::agent {

std::optional<uint8_t> parse_mac_policy(std::string_view s) {
  if (s.empty()) return XBNG_MAC_POLICY_DEFAULT;
  if (s == "learn-once") return XBNG_MAC_POLICY_LEARN_ONCE;
  if (s == "follow") return XBNG_MAC_POLICY_FOLLOW;
  if (s == "enforce") return XBNG_MAC_POLICY_ENFORCE;
  return std::nullopt;
}

const char* mac_policy_name(uint8_t p) {
  switch (p) {
    case XBNG_MAC_POLICY_LEARN_ONCE:
      return "learn-once";
    case XBNG_MAC_POLICY_FOLLOW:
      return "follow";
    case XBNG_MAC_POLICY_ENFORCE:
      return "enforce";
    default:
      return "default";
  }
}

}  // namespace xbng::agent
