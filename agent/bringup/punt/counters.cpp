#include "bringup/punt/counters.h"

#include <string>

namespace xbng::agent {

namespace {

struct Info {
  const char* name;
  const char* kind;
};
#define XBNG_AGENT_REASON_INFO_(name, str, kind) {str, kind},
constexpr Info kInfo[] = {XBNG_AGENT_REASONS(XBNG_AGENT_REASON_INFO_)};
#undef XBNG_AGENT_REASON_INFO_
static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == kAgentReasonCount);

std::atomic<uint64_t> g_counters[kAgentReasonCount];

constexpr size_t kNumRsErrors = static_cast<size_t>(ra::RsError::kLlaWithUnspecified) + 1;
std::atomic<uint64_t> g_dhcpv6[dhcpv6::kNumKinds];
std::atomic<uint64_t> g_dhcpv6_malformed[dhcpv6::kNumParseErrors];
std::atomic<uint64_t> g_rs_malformed[kNumRsErrors];

// Names built once (the counters' names must outlive every snapshot).
struct Names {
  std::vector<std::string> dhcpv6, dhcpv6_kind, dhcpv6_malformed, rs;
  Names() {
    for (size_t i = 0; i < dhcpv6::kNumKinds; ++i) {
      const std::string n(dhcpv6::kind_name(static_cast<dhcpv6::Kind>(i)));
      dhcpv6.push_back("dhcpv6_" + n);
      dhcpv6_kind.push_back(n.rfind("answered", 0) == 0    ? "answered"
                            : n.rfind("malformed", 0) == 0 ? "drop"
                                                           : "refused");
    }
    for (size_t i = 1; i < dhcpv6::kNumParseErrors; ++i)
      dhcpv6_malformed.push_back("dhcpv6_malformed_" + std::string(dhcpv6::parse_error_name(
                                                           static_cast<dhcpv6::ParseError>(i))));
    for (size_t i = 1; i < kNumRsErrors; ++i)
      rs.push_back("rs_malformed_" + std::string(ra::rs_error_name(static_cast<ra::RsError>(i))));
  }
};
const Names& names() {
  static const Names n;
  return n;
}

}  // namespace

void count_dhcpv6(dhcpv6::Kind k) {
  const auto i = static_cast<size_t>(k);
  if (i < dhcpv6::kNumKinds) g_dhcpv6[i].fetch_add(1, std::memory_order_relaxed);
}
void count_dhcpv6_malformed(dhcpv6::ParseError e) {
  const auto i = static_cast<size_t>(e);
  if (i < dhcpv6::kNumParseErrors) g_dhcpv6_malformed[i].fetch_add(1, std::memory_order_relaxed);
}
void count_rs_malformed(ra::RsError e) {
  const auto i = static_cast<size_t>(e);
  if (i < kNumRsErrors) g_rs_malformed[i].fetch_add(1, std::memory_order_relaxed);
}

std::vector<AgentCounter> agent_counters() {
  const Names& n = names();
  std::vector<AgentCounter> out;
  for (int i = 0; i < kAgentReasonCount; ++i)
    out.push_back({kInfo[i].name, kInfo[i].kind, g_counters[i].load(std::memory_order_relaxed)});
  for (size_t i = 0; i < dhcpv6::kNumKinds; ++i)
    if (static_cast<dhcpv6::Kind>(i) != dhcpv6::Kind::kMalformed)  // by error below
      out.push_back({n.dhcpv6[i].c_str(), n.dhcpv6_kind[i].c_str(), g_dhcpv6[i].load()});
  for (size_t i = 1; i < dhcpv6::kNumParseErrors; ++i)
    out.push_back({n.dhcpv6_malformed[i - 1].c_str(), "drop", g_dhcpv6_malformed[i].load()});
  for (size_t i = 1; i < kNumRsErrors; ++i)
    out.push_back({n.rs[i - 1].c_str(), "drop", g_rs_malformed[i].load()});
  return out;
}

const char* agent_reason_name(AgentReason r) { return kInfo[static_cast<int>(r)].name; }
const char* agent_reason_kind(AgentReason r) { return kInfo[static_cast<int>(r)].kind; }

void count(AgentReason r, uint64_t n) {
  g_counters[static_cast<int>(r)].fetch_add(n, std::memory_order_relaxed);
}
uint64_t agent_reason_value(AgentReason r) {
  return g_counters[static_cast<int>(r)].load(std::memory_order_relaxed);
}

}  // namespace xbng::agent
