// Persistent server DUID: see duid.h for why a DUID-UUID kept in a file.
#include "bringup/dhcpv6/duid.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/statefile.h"
#include "common/status.h"

namespace xbng::agent::dhcpv6 {

Duid make_duid_uuid() {
  uint8_t u[16];
  size_t got = 0;
  while (got < sizeof u) {
    ssize_t n = getrandom(u + got, sizeof u - got, 0);
    if (n > 0)
      got += static_cast<size_t>(n);
    else if (errno != EINTR)
      break;
  }
  if (got < sizeof u) {
    // getrandom cannot fail on Linux ≥ 3.17 once the pool is ready; keep
    // going with /dev/urandom rather than a weak DUID.
    std::ifstream r("/dev/urandom", std::ios::binary);
    r.read(reinterpret_cast<char*>(u), sizeof u);
  }
  u[6] = static_cast<uint8_t>((u[6] & 0x0f) | 0x40);  // version 4
  u[8] = static_cast<uint8_t>((u[8] & 0x3f) | 0x80);  // RFC 4122 variant
  Duid d;
  d.len = 18;
  d.bytes[0] = 0;
  d.bytes[1] = 4;  // DUID-UUID, RFC 6355
  std::memcpy(d.bytes.data() + 2, u, 16);
  return d;
}

std::optional<Duid> parse_duid_hex(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
    s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Duid d;
  size_t i = 0, n = 0;
  bool colons = false;
  while (i < s.size()) {
    if (i + 1 >= s.size()) return std::nullopt;
    int hi = nib(s[i]), lo = nib(s[i + 1]);
    if (hi < 0 || lo < 0 || n == kMaxDuid) return std::nullopt;
    d.bytes[n++] = static_cast<uint8_t>(hi << 4 | lo);
    i += 2;
    // Separators: all ':' ("00:04:..") or none ("0004..").
    if (n == 1) colons = i < s.size() && s[i] == ':';
    if (colons && i < s.size()) {
      if (s[i] != ':') return std::nullopt;
      if (++i == s.size()) return std::nullopt;
    }
  }
  if (n < 3) return std::nullopt;
  d.len = static_cast<uint8_t>(n);
  return d;
}

std::string format_duid_hex(const Duid& d) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < d.len; ++i) {
    if (i) s += ':';
    s += hex[d.bytes[i] >> 4];
    s += hex[d.bytes[i] & 15];
  }
  return s;
}

absl::Status duid_shape_error(const Duid& d) {
  const unsigned type = d.len >= 2 ? unsigned{d.bytes[0]} << 8 | d.bytes[1] : 0;
  // RFC 8415 §11.2-11.4 and RFC 6355: the fixed part of each type, and at
  // least one byte of identifier (link-layer address, enterprise id).
  size_t min = 0, max = kMaxDuid;
  switch (type) {
    case 1:
      min = 9;
      break;  // LLT: type, hw type, time, address
    case 2:
      min = 7;
      break;  // EN: type, enterprise number, identifier
    case 3:
      min = 5;
      break;  // LL: type, hw type, address
    case 4:
      min = max = 18;
      break;  // UUID: type, 16 bytes
    default:
      return absl::InvalidArgumentError("DUID type " + std::to_string(type) +
                                        " is not one of 1..4 (LLT, EN, LL, UUID)");
  }
  if (d.len < min || d.len > max)
    return absl::InvalidArgumentError(
        "a type-" + std::to_string(type) + " DUID of " + std::to_string(d.len) +
        " bytes (expected " +
        (min == max ? std::to_string(min) : std::to_string(min) + ".." + std::to_string(max)) +
        ")");
  return absl::OkStatus();
}

std::optional<Duid> load_or_create_server_duid(const std::string& path, std::string* error) {
  if (path.empty()) {
    *error = "no state file path for the DHCPv6 server DUID";
    return std::nullopt;
  }
  // A line of at most 130 bytes as "xx:" (and some blanks): anything larger is not a DUID.
  std::string text, err;
  switch (statefile::read(path, 1024, &text, &err)) {
    case statefile::ReadStatus::kError:
      *error = err +
               " (the DHCPv6 server DUID; a new DUID makes clients' RENEWs go unanswered "
               "until REBIND)";
      return std::nullopt;
    case statefile::ReadStatus::kOk: {
      auto d = parse_duid_hex(text);
      const absl::Status shape = d ? duid_shape_error(*d) : absl::OkStatus();
      if (!d || !shape.ok()) {
        *error = path + ": not a DUID (" +
                 (d ? std::string(status_message(shape)) : "expected hex bytes like 00:04:...") +
                 "); fix or remove it (a new DUID makes clients' RENEWs go unanswered until "
                 "REBIND)";
        return std::nullopt;
      }
      return d;
    }
    case statefile::ReadStatus::kAbsent:
      break;
  }
  Duid d = make_duid_uuid();
  if (!statefile::write_atomic(path, format_duid_hex(d) + "\n", 0644, true, &err)) {
    *error = err + " (the DHCPv6 server DUID)";
    return std::nullopt;
  }
  return d;
}

}  // namespace xbng::agent::dhcpv6
