#include "xbng/agent/config.h"

#include <fmt/format.h>

#include <set>
#include <stdexcept>
#include <toml++/toml.h>

namespace xbng::agent {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& key, const std::string& why) {
  throw std::runtime_error(fmt::format("config {}: {}: {}", path, key, why));
}

std::string get_string(const std::string& path, const std::string& key, const toml::node& n) {
  if (auto v = n.value<std::string>()) return *v;
  fail(path, key, "expected a string");
}
bool get_bool(const std::string& path, const std::string& key, const toml::node& n) {
  if (auto v = n.value<bool>()) return *v;
  fail(path, key, "expected true or false");
}
uint64_t get_uint(const std::string& path, const std::string& key, const toml::node& n) {
  if (auto v = n.value<int64_t>(); v && *v >= 0) return static_cast<uint64_t>(*v);
  fail(path, key, "expected a non-negative integer");
}
std::vector<std::string> get_strings(const std::string& path, const std::string& key,
                                     const toml::node& n) {
  std::vector<std::string> out;
  if (auto s = n.value<std::string>()) return {*s};
  const toml::array* a = n.as_array();
  if (!a) fail(path, key, "expected an array of strings");
  for (const auto& e : *a) out.push_back(get_string(path, key, e));
  return out;
}

}  // namespace

void load_config_file(const std::string& path, Config* cfg) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(fmt::format("config {}:{}:{}: {}", path, e.source().begin.line,
                                         e.source().begin.column, e.description()));
  }
  for (const auto& [sec, node] : t) {
    const std::string s(sec.str());
    const toml::table* tab = node.as_table();
    if (!tab) fail(path, s, "expected a [section]");
    for (const auto& [k, v] : *tab) {
      const std::string key = s + "." + std::string(k.str());
      if (key == "ports.access") cfg->access = get_strings(path, key, v);
      else if (key == "ports.uplink") cfg->uplink = get_strings(path, key, v);
      else if (key == "ports.outer_tpid") {
        if (auto i = v.value<int64_t>()) cfg->outer_tpid = std::to_string(*i);
        else cfg->outer_tpid = get_string(path, key, v);
      } else if (key == "ports.xdp_generic") cfg->xdp_generic = get_bool(path, key, v);
      else if (key == "gateway.ipv4") cfg->gateway_ipv4 = get_string(path, key, v);
      else if (key == "gateway.ipv6") cfg->gateway_ipv6 = get_string(path, key, v);
      else if (key == "grpc.listen") cfg->grpc = get_string(path, key, v);
      else if (key == "grpc.tls_cert") cfg->tls_cert = get_string(path, key, v);
      else if (key == "grpc.tls_key") cfg->tls_key = get_string(path, key, v);
      else if (key == "grpc.tls_client_ca") cfg->tls_client_ca = get_string(path, key, v);
      else if (key == "grpc.insecure_tcp") cfg->insecure_tcp = get_bool(path, key, v);
      else if (key == "bpf.bpffs") cfg->bpffs = get_string(path, key, v);
      else if (key == "bpf.max_subscribers") cfg->max_subscribers = get_uint(path, key, v);
      else if (key == "bpf.events_per_sec") cfg->events_per_sec = get_uint(path, key, v);
      else if (key == "bpf.unknown_interval_ms") cfg->unknown_interval_ms = get_uint(path, key, v);
      else if (key == "log.level") cfg->log_level = get_string(path, key, v);
      else fail(path, key, "unknown key");
    }
  }
}

DataplaneOptions to_dataplane_options(const Config& c) {
  DataplaneOptions o;
  if (c.access.empty()) throw std::runtime_error("no access port: give --access IFNAME");
  if (c.uplink.empty()) throw std::runtime_error("no uplink port: give --uplink IFNAME");
  o.access = c.access;
  o.uplink = c.uplink;
  if (!c.gateway_ipv4.empty()) {
    auto a = parse_ipv4(c.gateway_ipv4);
    if (!a) throw std::runtime_error(fmt::format("--gateway-ipv4 {}: not an IPv4 address", c.gateway_ipv4));
    if (auto e = check_ipv4_host(*a))
      throw std::runtime_error(fmt::format("--gateway-ipv4 {}: {}", c.gateway_ipv4, *e));
    o.gateway_ipv4 = *a;
  }
  if (!c.gateway_ipv6.empty()) {
    auto a = parse_ipv6(c.gateway_ipv6);
    if (!a) throw std::runtime_error(fmt::format("--gateway-ipv6 {}: not an IPv6 address", c.gateway_ipv6));
    if (auto e = check_ipv6_host(*a))
      throw std::runtime_error(fmt::format("--gateway-ipv6 {}: {}", c.gateway_ipv6, *e));
    o.gateway_ipv6 = *a;
  }
  if (c.gateway_ipv4.empty() && c.gateway_ipv6.empty())
    throw std::runtime_error("no gateway: give --gateway-ipv4 and/or --gateway-ipv6");
  auto tpid = parse_u16(c.outer_tpid);
  if (!tpid || (*tpid != XBNG_ETH_P_8021AD && *tpid != XBNG_ETH_P_8021Q &&
                *tpid != XBNG_ETH_P_QINQ_9100))
    throw std::runtime_error(
        fmt::format("--outer-tpid {}: expected 0x88a8, 0x8100 or 0x9100", c.outer_tpid));
  o.outer_tpid = *tpid;
  if (c.max_subscribers < 1 || c.max_subscribers > 16'000'000)
    throw std::runtime_error(
        fmt::format("--max-subscribers {}: expected 1..16000000", c.max_subscribers));
  o.max_subscribers = static_cast<uint32_t>(c.max_subscribers);
  if (c.bpffs.empty() || c.bpffs[0] != '/')
    throw std::runtime_error(fmt::format("--bpffs {}: expected an absolute path", c.bpffs));
  o.bpffs = c.bpffs;
  o.xdp_generic = c.xdp_generic;
  o.events_per_sec = c.events_per_sec;
  o.unknown_interval_ns = c.unknown_interval_ms * 1000000ull;
  return o;
}

ServerOptions to_server_options(const Config& c) {
  ServerOptions s;
  s.listen = c.grpc;
  s.tls_cert = c.tls_cert;
  s.tls_key = c.tls_key;
  s.tls_client_ca = c.tls_client_ca;
  s.insecure_tcp = c.insecure_tcp;
  return s;
}

}  // namespace xbng::agent
