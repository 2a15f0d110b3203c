// DHCPv4 relay agent information (option 82, RFC 3046) and the identifier
// templates of the relay: pure functions, bytes in and out, no sockets.
//
// xbngd's own option 82 carries, in this order:
//   1  Agent Circuit ID    the circuit_id template ({port}:{svlan}:{cvlan})
//   2  Agent Remote ID     the remote_id template ({mac})
//   5  Link Selection      the access port's gateway: the server picks the
//                          subnet (and pool) from it (RFC 3527)
//   11 Server ID Override  the port's gateway (RFC 5107): the client's
//                          REQUESTs name it and still reach the server
// The circuit-id of a server's reply (servers echo option 82) decodes back
// to the subscriber's (port, S-VID, C-VID) with the same template.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/net.h"

namespace xbng::agent::relay {

enum SubOption : uint8_t {
  kSubCircuitId = 1,
  kSubRemoteId = 2,
  kSubLinkSelection = 5,
  kSubServerIdOverride = 11,
};

struct AgentInfo {
  std::string circuit_id, remote_id;           // raw bytes; empty = absent
  std::optional<uint32_t> link_selection;      // network order
  std::optional<uint32_t> server_id_override;  // network order
  friend bool operator==(const AgentInfo&, const AgentInfo&) = default;
};

// The value of option 82 (without code and length). Circuit and remote ids
// are cut so that the whole value fits the option's 255 bytes.
std::vector<uint8_t> encode_agent_info(const AgentInfo& a);
// Sub-options 1, 2, 5 and 11; others are skipped. nullopt when a
// sub-option runs past the end, is empty, or 5/11 is not 4 bytes long.
std::optional<AgentInfo> decode_agent_info(std::span<const uint8_t> value);

// What an access node or client's own option 82 becomes (option82_policy).
enum class Policy {
  kKeep,     // forwarded as it is (xbngd adds none of its own)
  kReplace,  // removed; xbngd's own goes to the server
  kDrop,     // the client's message is dropped (counted)
};
std::optional<Policy> parse_policy(std::string_view s);
const char* policy_name(Policy p);

// The placeholders of the circuit_id / remote_id templates.
struct TemplateVars {
  std::string port;
  uint16_t svlan = 0, cvlan = 0;
  Mac mac{};
};
inline constexpr const char* kDefaultCircuitId = "{port}:{svlan}:{cvlan}";
inline constexpr const char* kDefaultRemoteId = "{mac}";

// {port} {svlan} {cvlan} {mac} (aa:bb:cc:dd:ee:ff); other text is literal.
std::string expand(std::string_view tmpl, const TemplateVars& v);
// Error text, or nullopt: only known placeholders, closed braces, at most
// 128 bytes; with `need_key`, {port}, {svlan} and {cvlan} each exactly once
// and separated by literal text (a reply's circuit-id must decode back).
std::optional<std::string> check_template(std::string_view tmpl, bool need_key);
// The inverse of expand for a circuit-id template that passed
// check_template(need_key = true): port and VLANs of `value`, or false.
bool match_template(std::string_view tmpl, std::string_view value, TemplateVars* out);

}  // namespace xbng::agent::relay
