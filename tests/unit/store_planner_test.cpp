// The store's planner through the store alone (maps in memory): what a
// change may claim — owners, nested overlaps, duplicates within a request,
// reserved addresses, map capacity — and the counts it reports. Each
// refusal changes nothing.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include "store_test_maps.h"

using namespace xbng::agent;
using namespace xbng::test;
using ::testing::HasSubstr;

namespace {

class StorePlanner : public ::testing::Test {
 protected:
  void SetUp() override {
    st_ = std::make_shared<MapState>(8);
    store_ = make_store(st_);
    ASSERT_TRUE(
        upsert(*store_, {sub(1, "100.64.0.1", "", {"198.51.100.0/24", "2001:db8:100::/48"})}).ok());
  }
  void expect_unchanged() {
    EXPECT_EQ(store_->size(), 1u);
    EXPECT_EQ(st_->snapshot()[static_cast<int>(MapId::kSubscribers)].size(), 1u);
  }
  std::shared_ptr<MapState> st_;
  std::unique_ptr<SubscriberStore> store_;
};

TEST_F(StorePlanner, OwnedAddress) {
  grpc::Status st = upsert(*store_, {sub(2, "100.64.0.1")});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(st.error_message(),
            "subscribers[0]: field ipv4: \"100.64.0.1\" is owned by subscriber a0/100/1");
  expect_unchanged();
}

TEST_F(StorePlanner, NestedOverlapsWithTheIndex) {
  // Inside a prefix another subscriber owns.
  EXPECT_EQ(upsert(*store_, {sub(2, "198.51.100.7")}).error_message(),
            "subscribers[0]: field ipv4: \"198.51.100.7\" overlaps ipv4_prefixes "
            "\"198.51.100.0/24\" owned by subscriber a0/100/1");
  EXPECT_EQ(upsert(*store_, {sub(2, "100.64.9.2", "", {"2001:db8:100:5::/64"})}).error_message(),
            "subscribers[0]: field ipv6_prefixes: \"2001:db8:100:5::/64\" overlaps ipv6_prefixes "
            "\"2001:db8:100::/48\" owned by subscriber a0/100/1");
  // Containing a prefix, and a host, another subscriber owns.
  EXPECT_EQ(upsert(*store_, {sub(2, "100.64.9.2", "", {"198.51.0.0/16"})}).error_message(),
            "subscribers[0]: field ipv4_prefixes: \"198.51.0.0/16\" overlaps ipv4_prefixes "
            "\"198.51.100.0/24\" owned by subscriber a0/100/1");
  EXPECT_EQ(upsert(*store_, {sub(2, "100.64.9.2", "", {"100.64.0.0/24"})}).error_message(),
            "subscribers[0]: field ipv4_prefixes: \"100.64.0.0/24\" overlaps ipv4 "
            "\"100.64.0.1\" owned by subscriber a0/100/1");
  expect_unchanged();
  // The owner itself may nest its own claims.
  EXPECT_TRUE(upsert(*store_, {sub(1, "198.51.100.1", "", {"198.51.100.0/24"})}).ok());
}

TEST_F(StorePlanner, OverlapsWithinTheRequest) {
  EXPECT_EQ(upsert(*store_, {sub(2, "100.64.0.2"), sub(3, "100.64.0.2")}).error_message(),
            "subscribers[1]: field ipv4: \"100.64.0.2\" is also claimed by subscriber a0/100/2 in "
            "this request");
  EXPECT_EQ(upsert(*store_, {sub(2, "100.64.9.2", "", {"203.0.113.0/24"}), sub(3, "203.0.113.9")})
                .error_message(),
            "subscribers[1]: field ipv4: \"203.0.113.9\" overlaps ipv4_prefixes "
            "\"203.0.113.0/24\" claimed by subscriber a0/100/2 in this request");
  grpc::Status dup = upsert(*store_, {sub(2, "100.64.0.2"), sub(2, "100.64.0.3")});
  EXPECT_EQ(dup.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(dup.error_message(), HasSubstr("appears twice in the request (also subscribers[0])"));
  expect_unchanged();
}

TEST_F(StorePlanner, AddressMovesWithinOneRequest) {
  // 1 releases 100.64.0.1 and 2 takes it, in one request.
  UpsertResult r;
  ASSERT_TRUE(upsert(*store_, {sub(1, "100.64.0.9"), sub(2, "100.64.0.1")}, &r).ok());
  EXPECT_EQ(r.created, 1u);
  EXPECT_EQ(r.updated, 1u);
}

TEST_F(StorePlanner, UnchangedIsCounted) {
  UpsertResult r;
  ASSERT_TRUE(
      upsert(*store_, {sub(1, "100.64.0.1", "", {"2001:db8:100::/48", "198.51.100.0/24"})}, &r)
          .ok());
  // Prefixes in another order are the same provisioning (canonical form).
  EXPECT_EQ(r.unchanged, 1u);
  EXPECT_EQ(r.updated, 0u);
}

TEST_F(StorePlanner, MapCapacity) {
  // 8 entries a map: subscribers 2..8 fit, a 9th does not.
  std::vector<xbng::v1::Subscriber> subs;
  for (uint32_t i = 2; i <= 8; ++i) subs.push_back(sub(i, fmt::format("100.64.1.{}", i)));
  ASSERT_TRUE(upsert(*store_, subs).ok());
  grpc::Status st = upsert(*store_, {sub(9, "100.64.1.9")});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(st.error_message(),
            "subscribers[0]: map subscribers is full: 8 entries + 1 to add > 8 max_entries "
            "(--max-subscribers)");
}

TEST_F(StorePlanner, ReservedAddresses) {
  auto r = std::make_shared<ReservedSet>();
  r->add(*parse_prefix("100.64.0.254/32"), "the router");
  store_->set_reserved(r);
  grpc::Status st = upsert(*store_, {sub(2, "100.64.0.254")});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("conflicts with the router"));
  expect_unchanged();
}

TEST_F(StorePlanner, StreamReportsEachEntryAndAppliesTheRest) {
  std::vector<xbng::v1::Subscriber> in = {sub(2, "100.64.0.2"), sub(3, "100.64.0.1"),
                                          sub(2, "100.64.0.22"), sub(4, "not an address")};
  StreamOutcome r = stream(*store_, in);
  EXPECT_EQ(r.applied, 2u);  // 2, then 2 again (in order)
  EXPECT_EQ(r.failed, 2u);
  ASSERT_EQ(r.failures.size(), 2u);
  EXPECT_EQ(r.failures[0].index(), 1u);
  EXPECT_THAT(r.failures[0].message(), HasSubstr("entry 1: field ipv4: \"100.64.0.1\" is owned"));
  EXPECT_EQ(r.failures[1].index(), 3u);
  EXPECT_EQ(r.failures[1].code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  SubscriberSpec s;
  std::optional<Mac> learned;
  ASSERT_TRUE(store_->binding(key(2), &s, &learned));
  EXPECT_EQ(s.ipv4, *parse_ipv4("100.64.0.22"));
}

}  // namespace

namespace {

// Atomic (UpsertSubscribers) refuses the whole request for one bad entry;
// sequential (StreamSubscribers) applies the others and reports that one.
TEST_F(StorePlanner, AtomicRefusesAllSequentialAppliesTheRest) {
  const std::vector<xbng::v1::Subscriber> in = {sub(2, "100.64.0.2"), sub(3, "100.64.0.1"),
                                                sub(4, "100.64.0.4")};
  grpc::Status st = upsert(*store_, in);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("subscribers[1]: field ipv4: \"100.64.0.1\" is owned"));
  expect_unchanged();
  StreamOutcome r = stream(*store_, in);
  EXPECT_EQ(r.applied, 2u);
  EXPECT_EQ(r.failed, 1u);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].index(), 1u);
  EXPECT_EQ(r.failures[0].code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_THAT(r.failures[0].message(), HasSubstr("entry 1: field ipv4: \"100.64.0.1\" is owned"));
  EXPECT_EQ(store_->size(), 3u);
}

// Every refused entry is counted and given to on_failure; the answer lists
// the first kMaxReportedFailures, by index, each with its key as sent.
TEST_F(StorePlanner, StreamListsTheFirstFailuresAndCountsAll) {
  const size_t n = SubscriberStore::kMaxReportedFailures + 5;
  size_t next = 0, seen = 0;
  StreamResult r;
  r.on_failure = [&](const StreamFailure& f) {
    EXPECT_EQ(f.status.code(), absl::StatusCode::kInvalidArgument);
    ++seen;
  };
  store_->stream(stream_source(
                     [&](xbng::v1::Subscriber* m) {
                       if (next == n) return false;
                       *m = sub(static_cast<uint32_t>(1 + next % 4000), "not an address");
                       if (next == 7) m->set_port("nowhere");
                       ++next;
                       return true;
                     },
                     store_->ports(), kOriginApi),
                 &r);
  EXPECT_EQ(r.applied, 0u);
  EXPECT_EQ(r.failed, n);
  EXPECT_EQ(seen, n);
  ASSERT_EQ(r.failures.size(), SubscriberStore::kMaxReportedFailures);
  for (size_t i = 0; i < r.failures.size(); ++i) ASSERT_EQ(r.failures[i].index, i);
  EXPECT_EQ(r.failures[7].key.port, "nowhere");  // as sent, though no port resolves it
  EXPECT_EQ(r.failures[9].key.port, "a0");
  EXPECT_EQ(r.failures[9].key.outer_vlan, 100u);
  EXPECT_EQ(r.failures[9].key.inner_vlan, 10u);
  EXPECT_EQ(std::string(status_message(r.failures[9].status)),
            "entry 9: field ipv4: \"not an address\" is not an IPv4 address");
  expect_unchanged();
}

}  // namespace
