// radius_probe: drives the xbng RADIUS client (agent/radius) once, for
// test_radius.py, and prints what it decoded as one JSON object.
//   radius_probe --server ADDR,AUTH_PORT,ACCT_PORT,SECRET [--server ...]
//                [--timeout-ms N] [--retries N] [--dead-time-s N] [--no-require-ma]
//                [--user U] [--password P] [--nas-port-id X] [--calling-station-id M]
//                [--circuit-id C] [--remote-id R] [--count N]
//                [--acct start|interim|stop|on|off --session-id ID
//                 --in-octets N --out-octets N --class HEX]
// --count N sends N requests at once (more than 256 exercises several
// source sockets); the JSON then carries per-outcome totals, with the first
// result in full.
// --users FILE [--window W] sends one Access-Request per line of FILE (the
// User-Name), at most W outstanding at once, and reports the totals, the
// seconds from the first send to the last answer and the answers per
// second: the RADIUS server's rate by itself, with the client xbngd uses
// (bench/bringup_radius.py --alone).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>

#include "common/net.h"
#include "radius/client.h"

using namespace xbng;
using nlohmann::json;

namespace {

std::string to_hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string o;
  for (unsigned char c : s) {
    o.push_back(d[c >> 4]);
    o.push_back(d[c & 15]);
  }
  return o;
}

std::string from_hex(const std::string& h) {
  std::string o;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    o.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return o;
}

json auth_json(const radius::Authorization& a) {
  json j = json::object();
  if (a.framed_ip) j["framed_ip"] = agent::format_ipv4(*a.framed_ip);
  if (a.framed_ipv6) j["framed_ipv6"] = agent::format_ipv6(a.framed_ipv6->data());
  j["delegated_v6"] = json::array();
  for (auto& p : a.delegated_v6) j["delegated_v6"].push_back(agent::format_prefix(p));
  j["framed_v6_prefix"] = json::array();
  for (auto& p : a.framed_v6_prefix) j["framed_v6_prefix"].push_back(agent::format_prefix(p));
  j["framed_routes"] = a.framed_routes;
  j["framed_v6_routes"] = a.framed_v6_routes;
  if (a.session_timeout) j["session_timeout"] = *a.session_timeout;
  if (a.idle_timeout) j["idle_timeout"] = *a.idle_timeout;
  if (a.interim_interval) j["interim_interval"] = *a.interim_interval;
  j["classes"] = json::array();
  for (auto& c : a.classes) j["classes"].push_back(to_hex(c));
  if (a.filter_id) j["filter_id"] = *a.filter_id;
  if (a.wispr_up_bps) j["wispr_up_bps"] = *a.wispr_up_bps;
  if (a.wispr_down_bps) j["wispr_down_bps"] = *a.wispr_down_bps;
  j["raw_types"] = json::array();
  for (auto& [t, v] : a.raw) j["raw_types"].push_back(t);
  return j;
}

json counters_json(const radius::CounterSnapshot& c) {
  return {{"access_requests", c.access_requests},
          {"accepts", c.accepts},
          {"rejects", c.rejects},
          {"auth_timeouts", c.auth_timeouts},
          {"accepts_unusable", c.accepts_unusable},
          {"accounting_requests", c.accounting_requests},
          {"accounting_responses", c.accounting_responses},
          {"accounting_timeouts", c.accounting_timeouts},
          {"retransmits", c.retransmits},
          {"failovers", c.failovers},
          {"drop_malformed", c.drop_malformed},
          {"drop_unknown_source", c.drop_unknown_source},
          {"drop_no_request", c.drop_no_request},
          {"drop_bad_authenticator", c.drop_bad_authenticator},
          {"drop_bad_message_authenticator", c.drop_bad_message_authenticator},
          {"drop_missing_message_authenticator", c.drop_missing_message_authenticator},
          {"drop_unexpected_code", c.drop_unexpected_code},
          {"queue_full", c.queue_full},
          {"send_errors", c.send_errors},
          {"sockets", c.sockets}};
}

const char* outcome_name(radius::Outcome o) {
  switch (o) {
    case radius::Outcome::kAccept:
      return "accept";
    case radius::Outcome::kReject:
      return "reject";
    case radius::Outcome::kTimeout:
      return "timeout";
  }
  return "?";
}

// --users: one request per User-Name, at most `window` outstanding.
json run_users(radius::Client& client, const radius::AccessRequest& base, const std::string& file,
               size_t window) {
  std::vector<std::string> users;
  {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) users.push_back(line);
  }
  std::mutex mu;
  std::condition_variable cv;
  size_t in_flight = 0, answered = 0;
  std::map<std::string, int> totals;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& u : users) {
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return in_flight < window; });
      ++in_flight;
    }
    radius::AccessRequest r = base;
    r.user_name = u;
    client.authorize(r, [&](const radius::AccessResult& res) {
      std::lock_guard<std::mutex> l(mu);
      totals[outcome_name(res.outcome)]++;
      --in_flight;
      ++answered;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return answered == users.size(); });
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json out;
  out["totals"] = totals;
  out["requests"] = users.size();
  out["seconds"] = s;
  out["per_s"] = s > 0 ? double(users.size()) / s : 0.0;
  out["counters"] = counters_json(client.counters());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"radius_probe"};
  std::vector<std::string> servers;
  radius::Config cfg;
  bool no_ma = false;
  radius::AccessRequest req;
  std::string acct, session_id, cls;
  uint64_t in_octets = 0, out_octets = 0;
  int count = 1;
  std::string users_file;
  size_t window = 256;
  app.add_option("--server", servers, "ADDR,AUTH_PORT,ACCT_PORT,SECRET")->required();
  app.add_option("--timeout-ms", cfg.timeout_ms);
  app.add_option("--retries", cfg.retries);
  app.add_option("--dead-time-s", cfg.dead_time_s);
  app.add_flag("--no-require-ma", no_ma);
  app.add_option("--nas-identifier", cfg.nas_identifier);
  app.add_option("--user", req.user_name);
  app.add_option("--password", req.password);
  app.add_option("--nas-port-id", req.nas_port_id);
  app.add_option("--calling-station-id", req.calling_station_id);
  app.add_option("--circuit-id", req.circuit_id);
  app.add_option("--remote-id", req.remote_id);
  app.add_option("--count", count);
  app.add_option("--users", users_file, "one User-Name a line: one request each");
  app.add_option("--window", window, "--users: requests outstanding at once");
  app.add_option("--acct", acct);
  app.add_option("--session-id", session_id);
  app.add_option("--in-octets", in_octets);
  app.add_option("--out-octets", out_octets);
  app.add_option("--class", cls, "hex");
  CLI11_PARSE(app, argc, argv);
  cfg.require_message_authenticator = !no_ma;
  for (const auto& s : servers) {
    std::vector<std::string> f;
    size_t at = 0;
    for (int i = 0; i < 3; ++i) {
      size_t c = s.find(',', at);
      if (c == std::string::npos) {
        std::fprintf(stderr, "radius_probe: --server %s: expected ADDR,AUTH,ACCT,SECRET\n",
                     s.c_str());
        return 2;
      }
      f.push_back(s.substr(at, c - at));
      at = c + 1;
    }
    f.push_back(s.substr(at));
    cfg.servers.push_back({f[0], static_cast<uint16_t>(std::stoi(f[1])),
                           static_cast<uint16_t>(std::stoi(f[2])), f[3]});
  }
  auto client = radius::Client::create(cfg);
  if (!client.ok()) {
    std::fprintf(stderr, "radius_probe: %s\n", std::string(client.status().message()).c_str());
    return 2;
  }
  if (!users_file.empty()) {
    std::printf("%s\n",
                run_users(**client, req, users_file, std::max<size_t>(1, window)).dump().c_str());
    return 0;
  }
  std::mutex mu;
  std::condition_variable cv;
  int left = count;
  json out;
  std::map<std::string, int> totals;
  if (!acct.empty()) {
    radius::AccountingRequest a;
    static const std::map<std::string, radius::AcctStatus> kinds = {
        {"start", radius::AcctStatus::kStart},
        {"stop", radius::AcctStatus::kStop},
        {"interim", radius::AcctStatus::kInterimUpdate},
        {"on", radius::AcctStatus::kAccountingOn},
        {"off", radius::AcctStatus::kAccountingOff}};
    if (!kinds.count(acct)) {
      std::fprintf(stderr, "radius_probe: --acct %s: start|interim|stop|on|off\n", acct.c_str());
      return 2;
    }
    a.status = kinds.at(acct);
    a.session_id = session_id;
    a.user_name = req.user_name;
    a.nas_port_id = req.nas_port_id;
    a.calling_station_id = req.calling_station_id;
    a.input_octets = in_octets;
    a.output_octets = out_octets;
    a.session_time = 42;
    if (a.status == radius::AcctStatus::kStop) a.terminate_cause = 1;  // User-Request
    if (!cls.empty()) a.classes.push_back(from_hex(cls));
    for (int i = 0; i < count; ++i)
      (*client)->account(a, [&](bool delivered) {
        std::lock_guard<std::mutex> l(mu);
        totals[delivered ? "delivered" : "not_delivered"]++;
        if (out.is_null()) out["delivered"] = delivered;
        if (--left == 0) cv.notify_one();
      });
  } else {
    for (int i = 0; i < count; ++i) {
      radius::AccessRequest r = req;
      if (count > 1) r.calling_station_id = req.calling_station_id + "#" + std::to_string(i);
      (*client)->authorize(r, [&](const radius::AccessResult& res) {
        std::lock_guard<std::mutex> l(mu);
        totals[outcome_name(res.outcome)]++;
        if (out.is_null()) {
          out["outcome"] = outcome_name(res.outcome);
          out["server"] = res.server;
          out["reply_message"] = res.reply_message;
          if (res.outcome == radius::Outcome::kAccept) out["auth"] = auth_json(res.auth);
        }
        if (--left == 0) cv.notify_one();
      });
    }
  }
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return left == 0; });
  }
  out["totals"] = totals;
  out["counters"] = counters_json((*client)->counters());
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
