#include "config/radius_config.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/net.h"
#include "common/status.h"
#include "config/config.h"
#include "config/radius_config_toml.h"

namespace xbng::agent {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& key, const std::string& why) {
  throw std::runtime_error(fmt::format("config {}: {}: {}", path, key, why));
}

std::string str(const std::string& path, const std::string& key, const toml::node& n) {
  if (n.is_string()) return *n.value<std::string>();
  fail(path, key, "expected a string");
}
bool boolean(const std::string& path, const std::string& key, const toml::node& n) {
  if (n.is_boolean()) return *n.value<bool>();
  fail(path, key, "expected true or false");
}
uint64_t uint(const std::string& path, const std::string& key, const toml::node& n) {
  if (n.is_integer())
    if (auto v = n.value<int64_t>(); v && *v >= 0) return static_cast<uint64_t>(*v);
  fail(path, key, "expected a non-negative integer");
}

const toml::array& array(const std::string& path, const std::string& key, const toml::node& n) {
  const toml::array* a = n.as_array();
  if (!a) fail(path, key, "expected an array of tables");
  return *a;
}

std::vector<RadiusServerConfig> servers(const std::string& path, const toml::node& n) {
  std::vector<RadiusServerConfig> out;
  size_t i = 0;
  for (const auto& e : array(path, "radius.servers", n)) {
    const std::string where = fmt::format("radius.servers[{}]", i++);
    const toml::table* t = e.as_table();
    if (!t) fail(path, where, "expected a table { address, auth_port, acct_port, secret_file }");
    RadiusServerConfig s;
    for (const auto& [k, v] : *t) {
      const std::string key = where + "." + std::string(k.str());
      if (k == "address")
        s.address = str(path, key, v);
      else if (k == "auth_port")
        s.auth_port = uint(path, key, v);
      else if (k == "acct_port")
        s.acct_port = uint(path, key, v);
      else if (k == "secret")
        s.secret = str(path, key, v);
      else if (k == "secret_file")
        s.secret_file = str(path, key, v);
      else
        fail(path, key,
             "unknown key (a server has address, auth_port, acct_port, secret_file or secret)");
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<CoaClientConfig> coa_clients(const std::string& path, const toml::node& n) {
  std::vector<CoaClientConfig> out;
  size_t i = 0;
  for (const auto& e : array(path, "radius.coa_clients", n)) {
    const std::string where = fmt::format("radius.coa_clients[{}]", i++);
    const toml::table* t = e.as_table();
    if (!t) fail(path, where, "expected a table { address, secret_file }");
    CoaClientConfig c;
    for (const auto& [k, v] : *t) {
      const std::string key = where + "." + std::string(k.str());
      if (k == "address")
        c.address = str(path, key, v);
      else if (k == "secret")
        c.secret = str(path, key, v);
      else if (k == "secret_file")
        c.secret_file = str(path, key, v);
      else
        fail(path, key, "unknown key (a CoA client has address, secret_file or secret)");
    }
    out.push_back(std::move(c));
  }
  return out;
}

bool is_ip_literal(const std::string& s) {
  return parse_ipv4(s).has_value() || parse_ipv6(s).has_value();
}

// One secret, inline or in a file that is readable and non-empty after
// the trailing newline.
absl::Status secret_problem(const std::string& inline_secret, const std::string& file) {
  if (!inline_secret.empty() && !file.empty())
    return absl::InvalidArgumentError("give secret or secret_file, not both");
  if (inline_secret.empty() && file.empty())
    return absl::InvalidArgumentError("needs secret_file (or secret)");
  if (file.empty()) return absl::OkStatus();
  return read_secret("", file).status();
}

}  // namespace

void load_radius_section(const std::string& path, const toml::table& t, RadiusConfig* r) {
  r->present = true;
  for (const auto& [k, v] : t) {
    const std::string key = "radius." + std::string(k.str());
    if (k == "servers")
      r->servers = servers(path, v);
    else if (k == "nas_identifier")
      r->nas_identifier = str(path, key, v);
    else if (k == "username")
      r->username = str(path, key, v);
    else if (k == "password")
      r->password = str(path, key, v);
    else if (k == "timeout_ms")
      r->timeout_ms = uint(path, key, v);
    else if (k == "retries")
      r->retries = uint(path, key, v);
    else if (k == "dead_time_s")
      r->dead_time_s = uint(path, key, v);
    else if (k == "interim_interval_s")
      r->interim_interval_s = uint(path, key, v);
    else if (k == "interim_min_s")
      r->interim_min_s = uint(path, key, v);
    else if (k == "reject_hold_s")
      r->reject_hold_s = uint(path, key, v);
    else if (k == "require_message_authenticator")
      r->require_message_authenticator = boolean(path, key, v);
    else if (k == "coa_listen")
      r->coa_listen = str(path, key, v);
    else if (k == "coa_clients")
      r->coa_clients = coa_clients(path, v);
    else
      fail(path, key,
           "unknown key (radius has servers, nas_identifier, username, password, timeout_ms, "
           "retries, dead_time_s, interim_interval_s, interim_min_s, reject_hold_s, "
           "require_message_authenticator, coa_listen, coa_clients)");
  }
}

void load_plans_section(const std::string& path, const toml::table& t, PlanTable* plans) {
  for (const auto& [k, v] : t) {
    const std::string name(k.str());
    const std::string where = "plans." + name;
    const toml::table* p = v.as_table();
    if (!p)
      fail(path, where,
           "expected a table { up_rate_bps, up_burst_bytes, down_rate_bps, down_burst_bytes }");
    PolicySpec s;
    for (const auto& [pk, pv] : *p) {
      const std::string key = where + "." + std::string(pk.str());
      if (pk == "up_rate_bps")
        s.up_rate = uint(path, key, pv);
      else if (pk == "up_burst_bytes")
        s.up_burst = uint(path, key, pv);
      else if (pk == "down_rate_bps")
        s.down_rate = uint(path, key, pv);
      else if (pk == "down_burst_bytes")
        s.down_burst = uint(path, key, pv);
      else
        fail(path, key,
             "unknown key (a plan has up_rate_bps, up_burst_bytes, down_rate_bps, "
             "down_burst_bytes)");
    }
    (*plans)[name] = s;
  }
}

std::optional<std::string> check_username_template(const std::string& t) {
  if (t.empty()) return "empty (the default is {port}:{svlan}:{cvlan})";
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '}') return fmt::format("'}}' at {} without '{{'", i);
    if (t[i] != '{') continue;
    size_t close = t.find('}', i);
    if (close == std::string::npos) return fmt::format("'{{' at {} is not closed", i);
    std::string name = t.substr(i + 1, close - i - 1);
    bool known = false;
    for (const char* p : kUsernamePlaceholders) known |= name == p;
    if (!known)
      return fmt::format(
          "unknown placeholder {{{}}} (known: {{port}}, {{svlan}}, {{cvlan}}, {{mac}}, "
          "{{circuit_id}}, {{remote_id}})",
          name);
    i = close;
  }
  return std::nullopt;
}

namespace {

// The plans Filter-Id may name.
void check_plans(const PlanTable& plans, std::vector<std::string>* errors) {
  auto err = [&](std::string s) { errors->push_back(std::move(s)); };
  for (const auto& [name, p] : plans) {
    if (name.empty() || name.size() > 253)
      err(
          fmt::format("plans.\"{}\": a plan name has 1..253 characters (it is matched against "
                      "Filter-Id)",
                      name));
    if (auto st = check_policy(p, kDefaultMaxPacket); !st.ok())
      err(fmt::format("plans.{}: {}", name, status_message(st)));
  }
}

void check_radius_servers(const RadiusConfig& r, std::vector<std::string>* errors) {
  auto err = [&](std::string s) { errors->push_back(std::move(s)); };
  if (r.servers.empty()) err("radius.servers: at least one server is needed");
  std::set<std::pair<std::string, uint64_t>> seen;
  for (size_t i = 0; i < r.servers.size(); ++i) {
    const auto& s = r.servers[i];
    const std::string w = fmt::format("radius.servers[{}]", i);
    if (s.address.empty())
      err(w + ": needs address");
    else if (!is_ip_literal(s.address))
      err(fmt::format("{}.address {}: not an IPv4 or IPv6 address", w, s.address));
    for (auto [what, port] : {std::pair{"auth_port", s.auth_port}, {"acct_port", s.acct_port}})
      if (port < 1 || port > 65535) err(fmt::format("{}.{} {}: expected 1..65535", w, what, port));
    if (!seen.insert({s.address, s.auth_port}).second)
      err(fmt::format("{}: {} port {} is listed twice", w, s.address, s.auth_port));
    if (auto st = secret_problem(s.secret, s.secret_file); !st.ok())
      err(fmt::format("{}: {}", w, status_message(st)));
  }
}

// The scalar settings of [radius].
void check_radius_settings(const RadiusConfig& r, std::vector<std::string>* errors,
                           std::vector<std::string>* warnings) {
  auto err = [&](std::string s) { errors->push_back(std::move(s)); };
  if (r.nas_identifier.size() > 253)
    err(fmt::format("radius.nas_identifier: {} characters, at most 253", r.nas_identifier.size()));
  if (auto e = check_username_template(r.username))
    err(fmt::format("radius.username \"{}\": {}", r.username, *e));
  if (r.password.size() > 128)
    err(fmt::format("radius.password: {} characters, at most 128 (RFC 2865 User-Password)",
                    r.password.size()));
  if (r.timeout_ms < 10 || r.timeout_ms > 60000)
    err(fmt::format("radius.timeout_ms {}: expected 10..60000", r.timeout_ms));
  if (r.retries > 10) err(fmt::format("radius.retries {}: expected 0..10", r.retries));
  if (r.dead_time_s > 3600)
    err(fmt::format("radius.dead_time_s {}: expected 0..3600", r.dead_time_s));
  if (r.interim_interval_s < 60 || r.interim_interval_s > 604800)
    err(fmt::format(
        "radius.interim_interval_s {}: expected 60..604800 (RFC 2869: no interims more often "
        "than every 60 s)",
        r.interim_interval_s));
  if (r.interim_min_s < 1 || r.interim_min_s > 604800)
    err(fmt::format("radius.interim_min_s {}: expected 1..604800", r.interim_min_s));
  else if (r.interim_min_s < 60)
    warnings->push_back(fmt::format(
        "radius.interim_min_s {}: an Access-Accept may ask for interims more often than every "
        "60 s (RFC 2869 advises against it)",
        r.interim_min_s));
  if (r.reject_hold_s > 3600)
    err(fmt::format("radius.reject_hold_s {}: expected 0..3600", r.reject_hold_s));
  if (!r.require_message_authenticator)
    warnings->push_back(
        "radius.require_message_authenticator = false: replies without Message-Authenticator are "
        "accepted, which leaves the BlastRADIUS forgery (CVE-2024-3596) open");
}

// The CoA/Disconnect listener and the clients it accepts.
void check_radius_coa(const RadiusConfig& r, std::vector<std::string>* errors,
                      std::vector<std::string>* warnings) {
  auto err = [&](std::string s) { errors->push_back(std::move(s)); };
  if (!r.coa_listen.empty()) {
    std::string host;
    uint16_t port = 0;
    if (auto e = parse_listen(r.coa_listen, &host, &port))
      err(fmt::format("radius.coa_listen {}: {}", r.coa_listen, *e));
    else if (!is_ip_literal(host))
      err(fmt::format("radius.coa_listen {}: {} is not an IP address", r.coa_listen, host));
  }
  std::set<std::string> coa_seen;
  for (size_t i = 0; i < r.coa_clients.size(); ++i) {
    const auto& c = r.coa_clients[i];
    const std::string w = fmt::format("radius.coa_clients[{}]", i);
    if (c.address.empty())
      err(w + ": needs address");
    else if (!is_ip_literal(c.address))
      err(fmt::format("{}.address {}: not an IPv4 or IPv6 address", w, c.address));
    else if (!coa_seen.insert(c.address).second)
      err(fmt::format("{}: {} is listed twice", w, c.address));
    if (auto st = secret_problem(c.secret, c.secret_file); !st.ok())
      err(fmt::format("{}: {}", w, status_message(st)));
  }
  if (!r.coa_clients.empty() && r.coa_listen.empty())
    warnings->push_back("radius.coa_clients are set but coa_listen is \"\": no CoA listener");
}

}  // namespace

void check_radius_config(const RadiusConfig& r, const PlanTable& plans,
                         std::vector<std::string>* errors, std::vector<std::string>* warnings) {
  check_plans(plans, errors);
  if (!r.present) return;
  check_radius_servers(r, errors);
  check_radius_settings(r, errors, warnings);
  check_radius_coa(r, errors, warnings);
}

absl::StatusOr<std::string> read_secret(const std::string& inline_secret, const std::string& file) {
  if (file.empty()) return inline_secret;
  std::ifstream in(file);
  if (!in)
    return absl::InvalidArgumentError(
        fmt::format("secret_file {}: cannot read: {}", file, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (s.empty()) return absl::InvalidArgumentError(fmt::format("secret_file {}: empty", file));
  return s;
}

absl::StatusOr<radius::Config> to_radius_client_config(const RadiusConfig& r) {
  radius::Config c;
  for (const auto& s : r.servers) {
    auto secret = read_secret(s.secret, s.secret_file);
    if (!secret.ok()) return secret.status();
    c.servers.push_back({s.address, static_cast<uint16_t>(s.auth_port),
                         static_cast<uint16_t>(s.acct_port), *secret});
  }
  c.nas_identifier = r.nas_identifier;
  c.timeout_ms = static_cast<uint32_t>(r.timeout_ms);
  c.retries = static_cast<uint32_t>(r.retries);
  c.dead_time_s = static_cast<uint32_t>(r.dead_time_s);
  c.require_message_authenticator = r.require_message_authenticator;
  return c;
}

}  // namespace xbng::agent
