// The relay's sessions from leases (api/relay_store.h) on a store over maps
// in memory: a DHCPACK creates the subscriber through the validated path
// with origin relay and binds the lease with its server; a renewal extends
// it; the end of the lease takes the address (and the subscriber) away; an
// address the store refuses is refused; a subscriber another source
// provisioned keeps its origin.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace xbng::test
