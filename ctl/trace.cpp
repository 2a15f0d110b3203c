#include "ctl/trace.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "xbng/v1/xbng.grpc.pb.h"

namespace xbng::agent {

namespace v1 = xbng::v1;

CLI::App* add_trace_command(CLI::App& app, TraceArgs* a) {
  auto* t = app.add_subcommand(
      "trace",
      "what the fast path would do with one frame, against the live maps (changes "
      "nothing)");
  auto* port = t->add_option("--port", a->port, "ingress access port");
  auto* uplink = t->add_option("--uplink", a->uplink, "ingress uplink");
  port->excludes(uplink);
  t->add_option("--outer", a->outer, "S-VLAN (access port)");
  t->add_option("--inner", a->inner, "C-VLAN (access port)");
  t->add_option("--src", a->src, "source address (IPv4 or IPv6)");
  t->add_option("--dst", a->dst, "destination address");
  t->add_option("--proto", a->proto, "tcp | udp | icmp (default udp)")
      ->check(CLI::IsMember({"tcp", "udp", "icmp"}));
  t->add_option("--sport", a->sport, "source port (default 40000)")->check(CLI::Range(0, 65535));
  t->add_option("--dport", a->dport, "destination port (default 80)")->check(CLI::Range(0, 65535));
  t->add_option("--src-mac", a->src_mac,
                "source MAC (default: the subscriber's on an access port)");
  t->add_option("--ttl", a->ttl, "IPv4 TTL / IPv6 hop limit (default 64)")
      ->check(CLI::Range(1, 255));
  t->add_option("--length", a->length, "L4 payload bytes (default 0)");
  t->add_option("--frame", a->frame_file, "the frame from a file: hex or pcap (first packet)");
  return t;
}

namespace {

uint32_t rd32(const unsigned char* p, bool swap) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return swap ? __builtin_bswap32(v) : v;
}

std::string from_pcap(const std::string& data, const std::string& path) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  uint32_t magic;
  std::memcpy(&magic, p, 4);
  const bool swap = magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1;
  if (data.size() < 24 + 16) throw std::runtime_error(path + ": pcap file without a packet");
  const uint32_t link = rd32(p + 20, swap) & 0x0fffffff;
  if (link != 1)
    throw std::runtime_error(fmt::format("{}: pcap link type {}, not Ethernet (1)", path, link));
  const uint32_t caplen = rd32(p + 24 + 8, swap), origlen = rd32(p + 24 + 12, swap);
  if (caplen != origlen)
    throw std::runtime_error(
        fmt::format("{}: first packet captured {} of {} bytes (snaplen): "
                    "trace needs the whole frame",
                    path, caplen, origlen));
  if (data.size() < 24 + 16 + static_cast<size_t>(caplen))
    throw std::runtime_error(path + ": pcap file truncated");
  return data.substr(24 + 16, caplen);
}

std::string from_hex(const std::string& text, const std::string& path) {
  std::string out;
  std::istringstream in(text);
  std::string tok;
  while (in >> tok) {
    if (tok.back() == ':') continue;  // tcpdump -xx offset column ("0x0000:")
    if (tok.rfind("0x", 0) == 0 || tok.rfind("0X", 0) == 0) tok = tok.substr(2);
    std::string digits;
    for (char c : tok)
      if (c != ':' && c != '-') digits += c;
    if (digits.size() % 2)
      throw std::runtime_error(fmt::format("{}: odd number of hex digits in {:?}", path, tok));
    for (size_t i = 0; i < digits.size(); i += 2) {
      if (!std::isxdigit(static_cast<unsigned char>(digits[i])) ||
          !std::isxdigit(static_cast<unsigned char>(digits[i + 1])))
        throw std::runtime_error(fmt::format("{}: {:?} is not hex", path, tok));
      out += static_cast<char>(std::stoi(digits.substr(i, 2), nullptr, 16));
    }
  }
  if (out.empty()) throw std::runtime_error(path + ": no bytes");
  return out;
}

std::string tags_text(const v1::DecodedFrame& d) {
  std::string t;
  for (const auto& g : d.tags())
    t += fmt::format("{}{:#06x} vid {}", t.empty() ? "" : ", ", g.tpid(), g.vid());
  return t.empty() ? "untagged" : t;
}

void print_frame(const char* what, const v1::DecodedFrame& d) {
  std::printf("%s: %s\n", what, d.text().c_str());
  std::printf("  tags: %s\n", tags_text(d).c_str());
  if (!d.inner().empty()) std::printf("  quoted: %s\n", d.inner().c_str());
}

}  // namespace

std::string read_frame_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(fmt::format("{}: {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();
  if (data.size() >= 4) {
    uint32_t magic;
    std::memcpy(&magic, data.data(), 4);
    if (magic == 0xa1b2c3d4 || magic == 0xd4c3b2a1 || magic == 0xa1b23c4d || magic == 0x4d3cb2a1)
      return from_pcap(data, path);
    if (magic == 0x0a0d0d0a)
      throw std::runtime_error(path + ": pcapng is not read; save as pcap (editcap -F pcap)");
  }
  return from_hex(data, path);
}

int ctl_trace(const CtlOptions& o, const TraceArgs& a) {
  v1::TraceRequest req;
  const bool access = !a.port.empty();
  if (!access && a.uplink.empty()) throw CtlUsageError("trace: give --port or --uplink");
  req.set_port(access ? a.port : a.uplink);
  if (!a.frame_file.empty()) {
    req.set_frame(read_frame_file(a.frame_file));
  } else {
    if (a.src.empty() || a.dst.empty())
      throw std::runtime_error("trace: give --src and --dst, or --frame FILE");
    if (access && (!a.outer || !a.inner))
      throw CtlUsageError("trace --port: give --outer and --inner");
    req.set_outer_vlan(a.outer);
    req.set_inner_vlan(a.inner);
    req.set_src(a.src);
    req.set_dst(a.dst);
    req.set_proto(a.proto);
    req.set_sport(a.sport);
    req.set_dport(a.dport);
    req.set_src_mac(a.src_mac);
    req.set_ttl(a.ttl);
    req.set_payload_len(a.length);
  }
  auto stub = v1::Subscribers::NewStub(make_channel(o));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::TraceReply r;
  grpc::Status st = stub->Trace(&ctx, req, &r);
  if (!st.ok()) return report_status(o, st, &ctx, std::chrono::seconds(30));
  if (o.json) {
    google::protobuf::util::JsonPrintOptions jo;
    jo.preserve_proto_field_names = true;
    jo.always_print_primitive_fields = true;
    std::string s;
    (void)google::protobuf::util::MessageToJsonString(r, &s, jo);
    std::printf("%s\n", s.c_str());
    return 0;
  }
  print_frame("input", r.input());
  size_t w = 4;
  for (const auto& s : r.steps()) w = std::max(w, s.name().size());
  int i = 0;
  for (const auto& s : r.steps())
    std::printf("%3d  %-*s  %s\n", ++i, static_cast<int>(w), s.name().c_str(), s.detail().c_str());
  std::printf("verdict: %s (%s)\n", r.verdict().c_str(), r.reason().c_str());
  std::printf("egress: %s\n", !r.egress_port().empty()    ? r.egress_port().c_str()
                              : r.verdict() == "XDP_PASS" ? "the kernel's stack"
                                                          : "none");
  if (!r.output_frame().empty()) print_frame("output", r.output());
  return 0;
}

}  // namespace xbng::agent
