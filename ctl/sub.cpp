// xbngctl sub add / del / get / list: one subscriber at a time, or a listing.
#include <fmt/format.h>

#include <cstdio>
#include <ctime>

#include "api/subscriber_file.h"
#include "ctl/ctl.h"
#include "ctl/output.h"

namespace xbng::agent {

namespace v1 = xbng::v1;

namespace {

void print_sub_table_header() {
  std::printf("%-12s %5s %5s  %-17s  %-15s  %-39s  %s\n", "PORT", "OUTER", "INNER", "MAC", "IPV4",
              "IPV6", "PREFIXES");
}
void print_sub_row(const v1::Subscriber& s) {
  std::string pfx = join(s.ipv6_prefixes());
  if (s.ipv4_prefixes_size()) {
    if (!pfx.empty()) pfx.push_back(';');
    pfx.append(join(s.ipv4_prefixes()));
  }
  std::string mac = s.mac().empty() ? std::string("(learn)") : s.mac();
  if (s.mac_learned()) mac.push_back('*');
  std::printf("%-12s %5u %5u  %-17s  %-15s  %-39s  %s\n", s.port().c_str(), s.outer_vlan(),
              s.inner_vlan(), mac.c_str(), s.ipv4().c_str(), s.ipv6().c_str(), pfx.c_str());
}

}  // namespace

Ctl::Ctl(const CtlOptions& o) : o_(o), stub_(v1::Subscribers::NewStub(make_channel(o))) {}

int Ctl::fail(const grpc::Status& st, const grpc::ClientContext* ctx) const {
  return report_status(o_, st, ctx);
}

int Ctl::sub_add(const SubArgs& a) {
  v1::UpsertSubscribersRequest req;
  auto* s = req.add_subscribers();
  s->set_port(a.port);
  s->set_outer_vlan(a.outer);
  s->set_inner_vlan(a.inner);
  s->set_mac(a.mac);
  s->set_ipv4(a.ipv4);
  s->set_ipv6(a.ipv6);
  for (const auto& p : a.ipv6_prefixes) s->add_ipv6_prefixes(p);
  for (const auto& p : a.ipv4_prefixes) s->add_ipv4_prefixes(p);
  if (a.unlimited || !a.up_rate.empty() || !a.up_burst.empty() || !a.down_rate.empty() ||
      !a.down_burst.empty()) {
    static constexpr const char* flags[] = {"--up-rate", "--up-burst", "--down-rate",
                                            "--down-burst"};
    const RatePlanText text = {a.up_rate, a.up_burst, a.down_rate, a.down_burst};
    if (auto bad = parse_policy(text, s)) {
      return report_local(
          o_, "invalid_value",
          fmt::format("{} \"{}\": not a number (k/M/G suffixes allowed)", flags[*bad], text[*bad]),
          kExitRefused);
    }
  }
  v1::UpsertSubscribersResponse resp;
  grpc::ClientContext ctx;
  auto st = stub_->UpsertSubscribers(&ctx, req, &resp);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json)
    std::printf("%s\n", to_json(resp).c_str());
  else
    std::printf("%s %s/%u/%u\n",
                resp.created()   ? "created"
                : resp.updated() ? "updated"
                                 : "unchanged",
                a.port.c_str(), a.outer, a.inner);
  return 0;
}

int Ctl::sub_del(const SubArgs& a) {
  v1::DeleteSubscribersRequest req;
  auto* k = req.add_keys();
  k->set_port(a.port);
  k->set_outer_vlan(a.outer);
  k->set_inner_vlan(a.inner);
  v1::DeleteSubscribersResponse resp;
  grpc::ClientContext ctx;
  auto st = stub_->DeleteSubscribers(&ctx, req, &resp);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json)
    std::printf("%s\n", to_json(resp).c_str());
  else
    std::printf("%s %s/%u/%u\n", resp.deleted() ? "deleted" : "not found (nothing to delete)",
                a.port.c_str(), a.outer, a.inner);
  return 0;
}

int Ctl::sub_get(const SubArgs& a) {
  v1::GetSubscriberRequest req;
  req.mutable_key()->set_port(a.port);
  req.mutable_key()->set_outer_vlan(a.outer);
  req.mutable_key()->set_inner_vlan(a.inner);
  v1::GetSubscriberResponse resp;
  grpc::ClientContext ctx;
  auto st = stub_->GetSubscriber(&ctx, req, &resp);
  if (!st.ok()) return fail(st, &ctx);
  if (o_.json) {
    std::printf("%s\n", to_json(resp).c_str());
    return 0;
  }
  const auto& s = resp.subscriber();
  std::printf("subscriber   %s/%u/%u\n", s.port().c_str(), s.outer_vlan(), s.inner_vlan());
  std::string mac = s.mac().empty() ? std::string("(to be learned)") : s.mac();
  if (s.mac_learned()) mac.append(" (learned)");
  std::printf("mac          %s\n", mac.c_str());
  std::printf("ipv4         %s\n", s.ipv4().c_str());
  std::printf("ipv6         %s\n", s.ipv6().c_str());
  std::printf("ipv6 prefix  %s\n", join(s.ipv6_prefixes()).c_str());
  std::printf("ipv4 prefix  %s\n", join(s.ipv4_prefixes()).c_str());
  std::printf("origin       %s\n", v1::Origin_Name(s.origin()).c_str());
  std::printf("up           %lu packets, %lu bytes\n", s.counters().up_packets(),
              s.counters().up_bytes());
  std::printf("down         %lu packets, %lu bytes\n", s.counters().down_packets(),
              s.counters().down_bytes());
  auto rate = [](uint64_t bps, uint64_t burst) {
    return bps ? fmt::format("{} bit/s, burst {} bytes", bps, burst) : std::string("unlimited");
  };
  const auto& e = s.effective_policy();
  const char* from = s.has_policy() ? "own" : "port default";
  std::printf("policy up    %s (%s)\n", rate(e.up_rate_bps(), e.up_burst_bytes()).c_str(), from);
  std::printf("policy down  %s (%s)\n", rate(e.down_rate_bps(), e.down_burst_bytes()).c_str(),
              from);
  std::printf("policed up   %lu packets, %lu bytes\n", s.counters().up_policed_packets(),
              s.counters().up_policed_bytes());
  std::printf("policed down %lu packets, %lu bytes\n", s.counters().down_policed_packets(),
              s.counters().down_policed_bytes());
  auto lease = [](const char* fam, bool has, const v1::Lease& l) {
    if (!has) {
      std::printf("lease %s   none\n", fam);
      return;
    }
    std::string what = l.address();
    for (const auto& p : l.prefixes()) what += (what.empty() ? "" : " ") + p;
    const std::string from = l.server().empty() ? "" : ", from server " + l.server();
    if (l.bound())
      std::printf("lease %s   bound %s, expires in %llds (%llu)%s\n", fam, what.c_str(),
                  static_cast<long long>(l.expires_unix()) - static_cast<long long>(time(nullptr)),
                  static_cast<unsigned long long>(l.expires_unix()), from.c_str());
    else
      std::printf("lease %s   not bound (last: %s)\n", fam, what.c_str());
  };
  lease("v4", s.has_lease_v4(), s.lease_v4());
  lease("v6", s.has_lease_v6(), s.lease_v6());
  return 0;
}

int Ctl::sub_list(const ListArgs& a) {
  v1::ListSubscribersRequest req;
  req.set_page_size(a.page_size);
  req.set_page_token(a.page_token);
  req.set_port(a.port);
  req.set_outer_vlan(a.outer);
  req.set_with_counters(a.counters);
  bool first = true;
  uint64_t shown = 0;
  for (;;) {
    v1::ListSubscribersResponse resp;
    grpc::ClientContext ctx;
    auto st = stub_->ListSubscribers(&ctx, req, &resp);
    if (!st.ok()) return fail(st, &ctx);
    if (o_.json) {
      if (a.all) {
        // One JSON document: {"subscribers":[...],"total_count":"N"}.
        for (const auto& s : resp.subscribers())
          std::printf(
              "%s%s",
              first && shown == 0 && &s == &resp.subscribers(0) ? "{\"subscribers\":[" : ",",
              to_json(s).c_str());
        if (resp.next_page_token().empty())
          std::printf("%s],\"total_count\":\"%lu\",\"boot_id\":\"%s\"}\n",
                      shown + resp.subscribers_size() == 0 ? "{\"subscribers\":[" : "",
                      resp.total_count(), resp.boot_id().c_str());
      } else {
        std::printf("%s\n", to_json(resp).c_str());
      }
    } else {
      if (first) print_sub_table_header();
      for (const auto& s : resp.subscribers()) print_sub_row(s);
    }
    first = false;
    shown += resp.subscribers_size();
    if (!a.all || resp.next_page_token().empty()) {
      if (!o_.json)
        std::printf("-- %lu shown, %lu matching%s\n", shown, resp.total_count(),
                    resp.next_page_token().empty()
                        ? ""
                        : fmt::format("; next: --page-token {}", resp.next_page_token()).c_str());
      return 0;
    }
    req.set_page_token(resp.next_page_token());
  }
}

}  // namespace xbng::agent
