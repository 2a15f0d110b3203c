// `xbngctl trace`: what the fast path would do with one frame (the Trace
// RPC; docs/operations.md "What would the box do with this packet").
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "ctl/ctl.h"

namespace xbng::agent {

struct TraceArgs {
  std::string port, uplink;  // exactly one: the ingress port
  uint32_t outer = 0, inner = 0;
  std::string src, dst, proto, src_mac;
  uint32_t sport = 0, dport = 0, ttl = 0, length = 0;
  std::string frame_file;  // hex or pcap (first packet)
};

// Registers `trace` and its options on app.
CLI::App* add_trace_command(CLI::App& app, TraceArgs* a);
int ctl_trace(const CtlOptions& o, const TraceArgs& a);

// The frame in `text`: a pcap file (first packet, Ethernet link type) or hex
// (whitespace, ':' and '-' separators, a leading "0x" and tcpdump -xx offset
// columns ignored). Throws std::runtime_error with the reason.
std::string read_frame_file(const std::string& path);

}  // namespace xbng::agent
