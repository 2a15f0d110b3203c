// Journal recovery without an agent: a store adopting maps that an
// interrupted change left half-written resolves the intent the journal
// holds — an upsert rolled back to exactly the previous provisioning, a
// delete rolled forward — and leaves nothing pending.
#include <gmock/gmock.h>

#include <filesystem>

#include "store/journal.h"
#include "store_test_maps.h"

using namespace xbng::agent;
using namespace xbng::test;
using ::testing::HasSubstr;

namespace {

class StoreJournalRecovery : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xbng-store-journal-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/store.journal";
    st_ = std::make_shared<MapState>();
    auto a = make_store(st_);
    ASSERT_TRUE(
        upsert(*a, {sub(1, "100.64.0.1", "", {"2001:db8:1:1::/64"}), sub(2, "100.64.0.2")}).ok());
    std::optional<Mac> learned;
    ASSERT_TRUE(a->binding(key(1), &before1_, &learned));
    before_ = st_->snapshot();
    first_ = std::move(a);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A store restarting on the maps, with the journal.
  std::unique_ptr<SubscriberStore> restart(std::string* summary) {
    auto b = make_store(st_);
    b->set_journal(std::make_unique<Journal>(path_));
    b->rebuild(summary);
    return b;
  }
  std::string dir_, path_;
  std::shared_ptr<MapState> st_;
  std::unique_ptr<SubscriberStore> first_;
  SubscriberSpec before1_;
  std::array<std::map<std::string, std::string>, kMapCount> before_;
};

TEST_F(StoreJournalRecovery, InterruptedUpsertRolledBack) {
  // The change: 1 moves to other addresses, 3 is created; the maps got all
  // of it, the agent died before clearing the intent.
  ASSERT_TRUE(
      upsert(*first_, {sub(1, "100.64.0.11", "", {"2001:db8:1:9::/64"}), sub(3, "100.64.0.3")})
          .ok());
  {
    JournalIntent in;
    in.op = JournalIntent::Op::kUpsert;
    in.created = {key(3)};
    in.before = {before1_};
    Journal j(path_);
    ASSERT_EQ(j.begin(in), 0);
  }
  std::string summary;
  auto b = restart(&summary);
  EXPECT_THAT(summary, HasSubstr("an interrupted upsert of 2 subscribers was rolled back: 1 "
                                 "restored to their previous provisioning, 1 it had created "
                                 "removed"));
  EXPECT_EQ(b->size(), 2u);
  SubscriberSpec s;
  std::optional<Mac> learned;
  ASSERT_TRUE(b->binding(key(1), &s, &learned));
  EXPECT_TRUE(s.same_provisioning(before1_));
  EXPECT_FALSE(b->binding(key(3), &s, &learned));
  // The route and subscriber maps are as before the change.
  auto now = st_->snapshot();
  for (MapId m : kRouteMaps) EXPECT_EQ(now[static_cast<int>(m)], before_[static_cast<int>(m)]);
  EXPECT_EQ(now[static_cast<int>(MapId::kSubscribers)].size(), 2u);
  // Nothing is pending any more.
  std::string err;
  EXPECT_FALSE(Journal(path_).pending(&err));
  EXPECT_EQ(err, "");
}

TEST_F(StoreJournalRecovery, InterruptedUpsertHalfWritten) {
  // Killed after the subscriber entries, before the routes: 3's entry
  // exists without routes, 1's entry already claims the new address.
  ASSERT_TRUE(upsert(*first_, {sub(1, "100.64.0.11"), sub(3, "100.64.0.3")}).ok());
  for (MapId m : kRouteMaps) st_->m[static_cast<int>(m)] = before_[static_cast<int>(m)];
  {
    JournalIntent in;
    in.created = {key(3)};
    in.before = {before1_};
    Journal j(path_);
    ASSERT_EQ(j.begin(in), 0);
  }
  std::string summary;
  auto b = restart(&summary);
  EXPECT_THAT(summary, HasSubstr("was rolled back"));
  SubscriberSpec s;
  std::optional<Mac> learned;
  ASSERT_TRUE(b->binding(key(1), &s, &learned));
  EXPECT_TRUE(s.same_provisioning(before1_));
  EXPECT_FALSE(b->binding(key(3), &s, &learned));
  auto now = st_->snapshot();
  for (MapId m : kRouteMaps) EXPECT_EQ(now[static_cast<int>(m)], before_[static_cast<int>(m)]);
}

TEST_F(StoreJournalRecovery, InterruptedDeleteRolledForward) {
  // Killed after the routes of 2 were removed, before its entry.
  const uint32_t a2 = *parse_ipv4("100.64.0.2");
  st_->m[static_cast<int>(MapId::kRoutesV4)].erase(
      std::string(reinterpret_cast<const char*>(&a2), 4));
  {
    JournalIntent in;
    in.op = JournalIntent::Op::kDelete;
    in.created = {key(2)};
    Journal j(path_);
    ASSERT_EQ(j.begin(in), 0);
  }
  std::string summary;
  auto b = restart(&summary);
  EXPECT_THAT(summary, HasSubstr("an interrupted delete of 1 subscribers was rolled forward: 1 "
                                 "removed now, 0 were already gone"));
  EXPECT_EQ(b->size(), 1u);
  SubscriberSpec s;
  std::optional<Mac> learned;
  EXPECT_FALSE(b->binding(key(2), &s, &learned));
  EXPECT_EQ(st_->m[static_cast<int>(MapId::kSubscribers)].size(), 1u);
  EXPECT_EQ(st_->m[static_cast<int>(MapId::kRoutesV4)].size(), 1u);
  std::string err;
  EXPECT_FALSE(Journal(path_).pending(&err));
}

TEST_F(StoreJournalRecovery, FreshMapsDiscardThePendingChange) {
  {
    JournalIntent in;
    in.created = {key(3)};
    Journal j(path_);
    ASSERT_EQ(j.begin(in), 0);
  }
  auto b = make_store(std::make_shared<MapState>());
  b->set_journal(std::make_unique<Journal>(path_));
  EXPECT_THAT(b->discard_journal(), HasSubstr("a change of 1 subscribers left pending is void"));
  std::string err;
  EXPECT_FALSE(Journal(path_).pending(&err));
}

}  // namespace
