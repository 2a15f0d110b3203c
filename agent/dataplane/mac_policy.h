// MAC policies by name (enum xbng_mac_policy of abi.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace xbng::agent {

// "learn-once", "follow", "enforce" (and "" = the default: 0).
std::optional<uint8_t> parse_mac_policy(std::string_view s);
const char* mac_policy_name(uint8_t policy);  // "default" for 0

}  // namespace xbng::agent
