// Reason counters of the agent's side of bring-up (every message answered,
// refused or dropped by xbngd), beside the BPF ones of include/xbng/reasons.h:
// GetStats and the Prometheus endpoint list both, the agent's after the
// fast path's. Process-wide, lock-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "bringup/dhcpv6/server.h"
#include "bringup/ra/ra.h"

namespace xbng::agent {

#define XBNG_AGENT_REASONS(X)                                                         \
  X(PUNT_RECEIVED, "punt_received", "info")                                           \
  X(PUNT_BAD_RECORD, "punt_bad_record", "drop")                                       \
  X(PUNT_RECEIVED_AF_XDP, "punt_received_af_xdp", "info")                             \
  X(PUNT_AF_XDP_DROPPED, "punt_af_xdp_dropped", "drop")                               \
  X(PUNT_MALFORMED_FRAME, "punt_malformed_frame", "drop")                             \
  X(PUNT_UNKNOWN_SUBSCRIBER, "punt_unknown_subscriber", "drop")                       \
  X(PUNT_DISABLED, "punt_protocol_disabled", "drop")                                  \
  X(PUNT_TX, "punt_tx", "info")                                                       \
  X(PUNT_TX_ERROR, "punt_tx_error", "drop")                                           \
  X(DHCPV4_OFFERED, "dhcpv4_offered", "answered")                                     \
  X(DHCPV4_ACKED, "dhcpv4_acked", "answered")                                         \
  X(DHCPV4_NAKED, "dhcpv4_naked", "answered")                                         \
  X(DHCPV4_INFORMED, "dhcpv4_informed", "answered")                                   \
  X(DHCPV4_RELEASED, "dhcpv4_released", "answered")                                   \
  X(DHCPV4_DECLINED, "dhcpv4_declined", "answered")                                   \
  X(DHCPV4_NO_IPV4, "dhcpv4_no_ipv4", "refused")                                      \
  X(DHCPV4_NO_GATEWAY, "dhcpv4_no_gateway", "refused")                                \
  X(DHCPV4_CHADDR_REFUSED, "dhcpv4_chaddr_refused", "refused")                        \
  X(DHCPV4_OTHER_SERVER, "dhcpv4_other_server", "refused")                            \
  X(DHCPV4_IGNORED, "dhcpv4_ignored", "refused")                                      \
  X(DHCPV4_MAC_LEARNED, "dhcpv4_mac_learned", "info")                                 \
  X(DHCPV4_MALFORMED_TRUNCATED, "dhcpv4_malformed_truncated", "drop")                 \
  X(DHCPV4_MALFORMED_OVERSIZED, "dhcpv4_malformed_oversized", "drop")                 \
  X(DHCPV4_MALFORMED_BAD_COOKIE, "dhcpv4_malformed_bad_cookie", "drop")               \
  X(DHCPV4_MALFORMED_NOT_BOOTREQUEST, "dhcpv4_malformed_not_bootrequest", "drop")     \
  X(DHCPV4_MALFORMED_BAD_HARDWARE, "dhcpv4_malformed_bad_hardware_type", "drop")      \
  X(DHCPV4_MALFORMED_RELAYED, "dhcpv4_malformed_relayed", "drop")                     \
  X(DHCPV4_MALFORMED_OPTION_TRUNCATED, "dhcpv4_malformed_option_truncated", "drop")   \
  X(DHCPV4_MALFORMED_BAD_OPTION_LENGTH, "dhcpv4_malformed_bad_option_length", "drop") \
  X(DHCPV4_MALFORMED_OVERLOAD, "dhcpv4_malformed_option_overload", "drop")            \
  X(DHCPV4_MALFORMED_NO_MESSAGE_TYPE, "dhcpv4_malformed_no_message_type", "drop")     \
  X(DHCPV4_MALFORMED_BAD_MESSAGE_TYPE, "dhcpv4_malformed_bad_message_type", "drop")   \
  X(DHCPV4_MALFORMED_NO_END, "dhcpv4_malformed_no_end_option", "drop")                \
  X(DHCPV4_MALFORMED_PORTS, "dhcpv4_malformed_udp_ports", "drop")                     \
  X(DHCPV6_BAD_PORTS, "dhcpv6_malformed_udp_ports", "drop")                           \
  X(RS_BAD_IP, "rs_malformed_ip_header", "drop")                                      \
  X(RS_BAD_CHECKSUM, "rs_malformed_checksum", "drop")                                 \
  X(RA_SOLICITED, "ra_solicited", "answered")                                         \
  X(RA_UNSOLICITED, "ra_unsolicited", "info")                                         \
  X(LEASE_EXPIRED, "lease_expired", "info")                                           \
  X(LEASE_ENDED_DEPROVISIONED, "lease_ended_deprovisioned", "info")                   \
  X(LEASE_STATE_WRITE_ERROR, "lease_state_write_error", "info")                       \
  /* subscribers created on demand (auth = "radius" ports) */                         \
  X(AUTH_REQUESTED, "auth_requests", "info")                                          \
  X(AUTH_COALESCED, "auth_coalesced_frames", "info")                                  \
  X(AUTH_FRAME_QUEUE_FULL, "auth_frame_queue_full", "drop")                           \
  X(AUTH_TABLE_FULL, "auth_table_full", "drop")                                       \
  X(AUTH_ACCEPTED, "auth_accepted", "info")                                           \
  X(AUTH_REJECTED, "auth_rejected", "refused")                                        \
  X(AUTH_TIMEOUT, "auth_timeout", "refused")                                          \
  X(AUTH_ACCEPT_REFUSED, "auth_accept_refused", "refused")                            \
  X(AUTH_HELD_DROPPED, "auth_held_back_dropped", "drop")                              \
  X(AUTH_NOT_CONFIGURED, "auth_not_configured", "drop")                               \
  /* RADIUS accounting (radius/accounting.h) */                                       \
  X(ACCT_START, "acct_start", "info")                                                 \
  X(ACCT_INTERIM, "acct_interim", "info")                                             \
  X(ACCT_STOP, "acct_stop", "info")                                                   \
  X(ACCT_ACKED, "acct_acked", "info")                                                 \
  X(ACCT_UNDELIVERED, "acct_undelivered_queued", "info")                              \
  X(ACCT_QUEUE_DROPPED, "acct_queue_dropped", "drop")                                 \
  /* DHCPv4 relay (dhcp = "relay" ports, docs/relay.md) */                            \
  X(RELAY4_FORWARDED, "relay4_forwarded", "info")                                     \
  X(RELAY4_REPLIED, "relay4_replies_forwarded", "answered")                           \
  X(RELAY4_BOUND, "relay4_bound", "info")                                             \
  X(RELAY4_ENDED, "relay4_ended", "info")                                             \
  X(RELAY4_ACK_REFUSED, "relay4_ack_refused", "refused")                              \
  X(RELAY4_HOP_LIMIT, "relay4_hop_limit", "drop")                                     \
  X(RELAY4_GIADDR_SET, "relay4_giaddr_set", "drop")                                   \
  X(RELAY4_OPTION82_DROPPED, "relay4_option82_dropped", "drop")                       \
  X(RELAY4_TOO_LONG, "relay4_too_long", "drop")                                       \
  X(RELAY4_TABLE_FULL, "relay4_exchange_table_full", "drop")                          \
  X(RELAY4_SEND_ERROR, "relay4_send_error", "drop")                                   \
  X(RELAY4_REPLY_UNKNOWN_SERVER, "relay4_reply_unknown_server", "drop")               \
  X(RELAY4_REPLY_UNKNOWN_CLIENT, "relay4_reply_unknown_client", "drop")               \
  X(RELAY4_REPLY_BAD_OPTION82, "relay4_reply_bad_option82", "drop")                   \
  X(RELAY4_REPLY_MALFORMED, "relay4_reply_malformed", "drop")                         \
  X(RELAY4_REPLY_DUPLICATE, "relay4_reply_duplicate", "drop")                         \
  X(RELAY4_NAK_IGNORED, "relay4_nak_ignored", "drop")                                 \
  X(RELAY4_SERVER_MISS, "relay4_server_misses", "info")                               \
  X(RELAY4_SERVER_DOWN, "relay4_server_down", "info")                                 \
  /* DHCPv6 relay (dhcp = "relay" ports with relay.servers_v6, docs/relay.md) */      \
  X(RELAY6_FORWARDED, "relay6_forwarded", "info")                                     \
  X(RELAY6_REPLIED, "relay6_replies_forwarded", "answered")                           \
  X(RELAY6_BOUND, "relay6_bound", "info")                                             \
  X(RELAY6_ENDED, "relay6_ended", "info")                                             \
  X(RELAY6_REPLY_REFUSED, "relay6_reply_refused", "refused")                          \
  X(RELAY6_CLIENT_MALFORMED, "relay6_client_malformed", "drop")                       \
  X(RELAY6_HOP_LIMIT, "relay6_hop_limit", "drop")                                     \
  X(RELAY6_NOT_RELAY_PORT, "relay6_client_not_relay_port", "drop")                    \
  X(RELAY6_SEND_ERROR, "relay6_send_error", "drop")                                   \
  X(RELAY6_REPLY_UNKNOWN_SERVER, "relay6_reply_unknown_server", "drop")               \
  X(RELAY6_REPLY_MALFORMED, "relay6_reply_malformed", "drop")                         \
  X(RELAY6_REPLY_BAD_INTERFACE_ID, "relay6_reply_bad_interface_id", "drop")           \
  X(RELAY6_REPLY_UNKNOWN_CLIENT, "relay6_reply_unknown_client", "drop")               \
  X(RELAY6_SERVER_MISS, "relay6_server_misses", "info")                               \
  X(RELAY6_SERVER_DOWN, "relay6_server_down", "info")

enum class AgentReason : int {
#define XBNG_AGENT_REASON_ENUM_(name, str, kind) k##name,
  XBNG_AGENT_REASONS(XBNG_AGENT_REASON_ENUM_)
#undef XBNG_AGENT_REASON_ENUM_
      kCount
};
inline constexpr int kAgentReasonCount = static_cast<int>(AgentReason::kCount);

const char* agent_reason_name(AgentReason r);
const char* agent_reason_kind(AgentReason r);  // answered | refused | drop | info

void count(AgentReason r, uint64_t n = 1);
uint64_t agent_reason_value(AgentReason r);

// Families named by the protocol libraries' own lists (the DHCPv6 server's outcome
// kinds and parse errors, RS parse errors): "dhcpv6_<kind>",
// "dhcpv6_malformed_<error>", "rs_malformed_<error>".
void count_dhcpv6(dhcpv6::Kind k);
void count_dhcpv6_malformed(dhcpv6::ParseError e);
void count_rs_malformed(ra::RsError e);

// Every agent-side counter, in a stable order, for GetStats and metrics.
struct AgentCounter {
  const char* name;
  const char* kind;
  uint64_t value;
};
std::vector<AgentCounter> agent_counters();

}  // namespace xbng::agent
