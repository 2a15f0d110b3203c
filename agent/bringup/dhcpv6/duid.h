// The server's DUID (RFC 8415 §11), persistent across restarts and upgrades.
//
// Clients put the server DUID in REQUEST, RENEW, RELEASE and DECLINE, and a
// server must ignore those messages when it is not its own (§16). If the DUID
// changed at a restart, every lease would fall back to REBIND at T2 (and
// releases would be lost). So the DUID is generated ONCE as a DUID-UUID
// (type 4, RFC 6355) from the kernel's random source and kept in a state
// file (e.g. /var/lib/xbng/dhcpv6-server-duid, one line of hex). Why not the
// alternatives: DUID-LLT/-LL embed a NIC's MAC (a replaced NIC or a changed
// first port would change it) and LLT also a clock; a DUID derived from
// /etc/machine-id is identical on cloned VM images. A UUID kept in a file
// survives restarts, package upgrades and hardware changes, and an operator
// can set it by hand (copy the file to a standby to take over its leases).
#pragma once

#include <optional>
#include <span>
#include <string>

#include "bringup/dhcpv6/message.h"

namespace xbng::agent::dhcpv6 {

// A new random DUID-UUID (00:04 + 16 bytes, RFC 4122 version 4 bits).
Duid make_duid_uuid();
// "00:04:..." → DUID (2..130 bytes, ':' separated or plain hex); nullopt when invalid.
std::optional<Duid> parse_duid_hex(std::string_view s);
std::string format_duid_hex(const Duid& d);

// Reads the DUID kept at `path`; when the file does not exist, generates a
// DUID-UUID and writes it there atomically (temp file, fsync, rename; parent
// directories created). Returns nullopt and sets *error when the file exists
// but cannot be read or is not a valid DUID: never silently replaces it,
// because a new DUID orphans every lease's server identifier.
std::optional<Duid> load_or_create_server_duid(const std::string& path, std::string* error);

}  // namespace xbng::agent::dhcpv6
