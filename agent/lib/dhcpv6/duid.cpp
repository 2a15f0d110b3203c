// Persistent server DUID: see duid.h for why a DUID-UUID kept in a file.
#include "xbng/agent/dhcpv6/duid.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace xbng::agent::dhcpv6 {

Duid make_duid_uuid() {
  uint8_t u[16];
  size_t got = 0;
  while (got < sizeof u) {
    ssize_t n = getrandom(u + got, sizeof u - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    else if (errno != EINTR) break;
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
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
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

std::optional<Duid> load_or_create_server_duid(const std::string& path, std::string* error) {
  namespace fs = std::filesystem;
  if (path.empty()) {
    *error = "no state file path for the DHCPv6 server DUID";
    return std::nullopt;
  }
  std::error_code ec;
  if (fs::exists(path, ec)) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in.good() && !in.eof()) {
      *error = path + ": cannot read the DHCPv6 server DUID";
      return std::nullopt;
    }
    auto d = parse_duid_hex(ss.str());
    if (!d) {
      *error = path + ": not a DUID (expected hex bytes like 00:04:...); fix or remove it "
                      "(a new DUID makes clients' RENEWs go unanswered until REBIND)";
      return std::nullopt;
    }
    return d;
  }
  if (ec) {
    *error = path + ": " + ec.message();
    return std::nullopt;
  }
  fs::path p(path);
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) {
      *error = p.parent_path().string() + ": " + ec.message();
      return std::nullopt;
    }
  }
  Duid d = make_duid_uuid();
  std::string text = format_duid_hex(d) + "\n";
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = tmp + ": " + std::strerror(errno);
    return std::nullopt;
  }
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) saved = errno;
    ::unlink(tmp.c_str());
    *error = path + ": cannot write the DHCPv6 server DUID: " + std::strerror(saved);
    return std::nullopt;
  }
  if (p.has_parent_path()) {
    int dfd = ::open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  return d;
}

}  // namespace xbng::agent::dhcpv6
