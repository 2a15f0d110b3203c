// The relay's sessions from leases (api/relay_store.h) on a store over maps
// in memory: a DHCPACK creates the subscriber through the validated path
// with origin relay and binds the lease with its server; a renewal extends
// it; the end of the lease takes the address (and the subscriber) away; an
// address the store refuses is refused; a subscriber another source
// provisioned keeps its origin.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "api/relay_store.h"
#include "bringup/lease/lease.h"
#include "store_test_maps.h"

namespace xbng::test {
namespace {

using agent::LeaseFamily;

class RelaySessionsTest : public ::testing::Test {
 protected:
  std::shared_ptr<MapState> st_ = std::make_shared<MapState>();
  std::unique_ptr<agent::SubscriberStore> store_ = make_store(st_);
  agent::LeaseTable leases_{nullptr, test_ports(), ""};
  uint64_t now_ = 1'700'000'000;
  agent::RelaySessions sessions_{store_.get(), &leases_, [this] { return now_; }};
  const agent::Mac mac_{0x02, 0xcc, 0, 100, 0, 1};
  uint32_t ip(const char* s) { return *agent::parse_ipv4(s); }
  bool spec(uint16_t inner, agent::SubscriberSpec* out) {
    std::optional<agent::Mac> learned;
    return store_->binding(key(inner), out, &learned);
  }
};

TEST_F(RelaySessionsTest, AckCreatesRenewExtendsEndRemoves) {
  ASSERT_TRUE(sessions_.bound(key(1), mac_, ip("100.64.20.10"), 60, ip("198.51.100.67")).ok());
  agent::SubscriberSpec s;
  ASSERT_TRUE(spec(1, &s));
  EXPECT_EQ(s.origin, agent::kOriginRelay);
  EXPECT_TRUE(s.has_ipv4);
  EXPECT_EQ(s.ipv4, ip("100.64.20.10"));
  EXPECT_TRUE(s.has_mac);
  auto l = leases_.get(key(1), LeaseFamily::kV4);
  ASSERT_TRUE(l && l->bound);
  EXPECT_EQ(l->server, "198.51.100.67");
  EXPECT_EQ(l->expires_unix, now_ + 60);
  EXPECT_EQ(sessions_.lease_server(key(1)), ip("198.51.100.67"));
  now_ += 30;
  ASSERT_TRUE(sessions_.bound(key(1), mac_, ip("100.64.20.10"), 60, ip("198.51.100.67")).ok());
  EXPECT_EQ(leases_.get(key(1), LeaseFamily::kV4)->expires_unix, now_ + 60);
  sessions_.ended(key(1), "released");
  EXPECT_FALSE(spec(1, &s));  // nothing left: the subscriber goes
  EXPECT_FALSE(sessions_.lease_server(key(1)));
}

TEST_F(RelaySessionsTest, ExpiryRemovesTheAddress) {
  ASSERT_TRUE(sessions_.bound(key(2), mac_, ip("100.64.20.11"), 10, ip("198.51.100.67")).ok());
  leases_.set_expiry_hook([this](const agent::SubKey& k, LeaseFamily f, const agent::Lease&) {
    sessions_.expired(k, f);
  });
  EXPECT_EQ(leases_.expire(now_ + 5), 0u);
  agent::SubscriberSpec s;
  EXPECT_TRUE(spec(2, &s));
  EXPECT_EQ(leases_.expire(now_ + 11), 1u);
  EXPECT_FALSE(spec(2, &s));
}

TEST_F(RelaySessionsTest, RefusedAddressInstallsNothing) {
  auto r = std::make_shared<agent::ReservedSet>();
  r->add(*agent::parse_prefix("100.64.0.0/24"), "reserved range (security.reserved)");
  store_->set_reserved(r);
  EXPECT_FALSE(sessions_.bound(key(3), mac_, ip("100.64.0.7"), 60, ip("198.51.100.67")).ok());
  agent::SubscriberSpec s;
  EXPECT_FALSE(spec(3, &s));
  EXPECT_FALSE(leases_.get(key(3), LeaseFamily::kV4));
  // Another subscriber's address is refused too.
  ASSERT_TRUE(sessions_.bound(key(4), mac_, ip("100.64.20.12"), 60, ip("198.51.100.67")).ok());
  EXPECT_FALSE(sessions_.bound(key(5), mac_, ip("100.64.20.12"), 60, ip("198.51.100.67")).ok());
  EXPECT_FALSE(spec(5, &s));
}

TEST_F(RelaySessionsTest, ProvisionedSubscriberKeepsItsOriginAndStays) {
  ASSERT_TRUE(upsert(*store_, {sub(6, "", "2001:db8:1000::6")}).ok());
  ASSERT_TRUE(sessions_.bound(key(6), mac_, ip("100.64.20.13"), 60, ip("198.51.100.67")).ok());
  agent::SubscriberSpec s;
  ASSERT_TRUE(spec(6, &s));
  EXPECT_NE(s.origin, agent::kOriginRelay);
  EXPECT_EQ(s.ipv4, ip("100.64.20.13"));
  EXPECT_TRUE(s.has_ipv6);
  sessions_.ended(key(6), "released");
  EXPECT_TRUE(spec(6, &s));  // not relay's to remove
  EXPECT_FALSE(leases_.get(key(6), LeaseFamily::kV4)->bound);
}

agent::relay::Reply6Leases leases6(const char* addr, const char* prefix, uint8_t len,
                                   uint32_t valid) {
  agent::relay::Reply6Leases l;
  l.message_type = 7;
  if (addr) l.addresses.push_back({*agent::parse_ipv6(addr), valid, valid});
  if (prefix) l.prefixes.push_back({*agent::parse_ipv6(prefix), len, valid, valid});
  return l;
}

TEST_F(RelaySessionsTest, Dhcpv6ReplyInstallsAddressAndPrefixAndSharesTheSubscriber) {
  const agent::Ipv6 server = *agent::parse_ipv6("2001:db8:ffff::547");
  ASSERT_TRUE(sessions_.bound(key(6), mac_, ip("100.64.20.16"), 60, ip("198.51.100.67")).ok());
  ASSERT_TRUE(
      sessions_
          .bound6(key(6), mac_, leases6("2001:db8:1000::64", "2001:db8:2000:100::", 56, 90), server)
          .ok());
  agent::SubscriberSpec s;
  ASSERT_TRUE(spec(6, &s));
  EXPECT_EQ(s.origin, agent::kOriginRelay);
  EXPECT_TRUE(s.has_ipv4);
  EXPECT_TRUE(s.has_ipv6);
  EXPECT_EQ(s.ipv6, *agent::parse_ipv6("2001:db8:1000::64"));
  ASSERT_EQ(s.prefixes.size(), 1u);
  EXPECT_EQ(agent::format_prefix(s.prefixes[0]), "2001:db8:2000:100::/56");
  auto l = leases_.get(key(6), LeaseFamily::kV6);
  ASSERT_TRUE(l && l->bound);
  EXPECT_EQ(l->server, "2001:db8:ffff::547");
  EXPECT_EQ(l->expires_unix, now_ + 90);
  // Renewal extends.
  now_ += 30;
  ASSERT_TRUE(
      sessions_
          .bound6(key(6), mac_, leases6("2001:db8:1000::64", "2001:db8:2000:100::", 56, 90), server)
          .ok());
  EXPECT_EQ(leases_.get(key(6), LeaseFamily::kV6)->expires_unix, now_ + 90);
  // The end of the IPv6 lease leaves the IPv4 family; the end of both, nothing.
  sessions_.ended6(key(6), "release");
  ASSERT_TRUE(spec(6, &s));
  EXPECT_FALSE(s.has_ipv6);
  EXPECT_TRUE(s.prefixes.empty());
  EXPECT_TRUE(s.has_ipv4);
  sessions_.ended(key(6), "release");
  EXPECT_FALSE(spec(6, &s));
}

TEST_F(RelaySessionsTest, Dhcpv6ExpiryAndRefusal) {
  const agent::Ipv6 server = *agent::parse_ipv6("2001:db8:ffff::547");
  leases_.set_expiry_hook([this](const agent::SubKey& k, LeaseFamily f, const agent::Lease&) {
    sessions_.expired(k, f);
  });
  // A prefix alone makes no subscriber (the store wants an address).
  EXPECT_FALSE(
      sessions_.bound6(key(7), mac_, leases6(nullptr, "2001:db8:2000:200::", 56, 10), server).ok());
  const absl::Status st7 = sessions_.bound6(
      key(7), mac_, leases6("2001:db8:1000::77", "2001:db8:2000:200::", 56, 10), server);
  ASSERT_TRUE(st7.ok()) << st7.message();
  agent::SubscriberSpec s;
  ASSERT_TRUE(spec(7, &s));
  EXPECT_EQ(leases_.expire(now_ + 11), 1u);
  EXPECT_FALSE(spec(7, &s));
  // Another subscriber's /128 is refused, nothing installed.
  ASSERT_TRUE(
      sessions_.bound6(key(8), mac_, leases6("2001:db8:1000::88", nullptr, 0, 60), server).ok());
  EXPECT_FALSE(
      sessions_.bound6(key(9), mac_, leases6("2001:db8:1000::88", nullptr, 0, 60), server).ok());
  EXPECT_FALSE(spec(9, &s));
  EXPECT_FALSE(leases_.get(key(9), LeaseFamily::kV6));
}

// A dual-stack CPE's DHCPACK and DHCPv6 REPLY are bound from the two
// relays' threads at the same moment: each change is a read-modify-write of
// the whole subscriber, and the second must keep what the first installed
// (and, when both create it, not replace the other's subscriber).
TEST_F(RelaySessionsTest, AckAndReplyTogetherKeepBothFamilies) {
  const agent::Ipv6 server = *agent::parse_ipv6("2001:db8:ffff::547");
  constexpr uint16_t kFirst = 100, kKeys = 300;
  std::atomic<int> arrived{0};
  // Both threads start each key together (a spin barrier of two).
  auto meet = [&](int round) {
    arrived.fetch_add(1);
    while (arrived.load() < 2 * (round + 1)) {
    }
  };
  std::atomic<int> refused{0};
  std::thread v4([&] {
    for (uint16_t i = 0; i < kKeys; ++i) {
      meet(i);
      const uint32_t a = htonl(ntohl(ip("100.64.40.0")) + 1 + i);  // network order
      if (absl::Status st = sessions_.bound(key(kFirst + i), mac_, a, 60, ip("198.51.100.67"));
          !st.ok()) {
        ADD_FAILURE() << i << ": " << st.message();
        ++refused;
      }
    }
  });
  std::thread v6([&] {
    for (uint16_t i = 0; i < kKeys; ++i) {
      meet(i);
      const std::string a = fmt::format("2001:db8:1000::4:{:x}", i);
      const std::string p = fmt::format("2001:db8:2000:{:x}::", i);
      if (absl::Status st = sessions_.bound6(key(kFirst + i), mac_,
                                             leases6(a.c_str(), p.c_str(), 64, 60), server);
          !st.ok()) {
        ADD_FAILURE() << i << ": " << st.message();
        ++refused;
      }
    }
  });
  v4.join();
  v6.join();
  EXPECT_EQ(refused.load(), 0);
  int both = 0;
  for (uint16_t i = 0; i < kKeys; ++i) {
    agent::SubscriberSpec s;
    ASSERT_TRUE(spec(kFirst + i, &s)) << i;
    EXPECT_TRUE(s.has_ipv4) << i;
    EXPECT_TRUE(s.has_ipv6) << i;
    EXPECT_EQ(s.prefixes.size(), 1u) << i;
    EXPECT_EQ(s.origin, agent::kOriginRelay) << i;
    auto l4 = leases_.get(key(kFirst + i), LeaseFamily::kV4);
    auto l6 = leases_.get(key(kFirst + i), LeaseFamily::kV6);
    EXPECT_TRUE(l4 && l4->bound) << i;
    EXPECT_TRUE(l6 && l6->bound) << i;
    both += s.has_ipv4 && s.has_ipv6 && l4 && l4->bound && l6 && l6->bound;
  }
  EXPECT_EQ(both, kKeys);
}

}  // namespace
}  // namespace xbng::test
