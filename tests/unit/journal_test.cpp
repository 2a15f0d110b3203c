// The store's write-ahead journal as a file: what begin()
// writes is what pending() reads back, clear() leaves nothing pending, and a
// damaged file is reported, never misread. (The kill-at-every-stage test of
// the store with it is tests/integration/test_crash_atomicity.py.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "config/config.h"
#include "store/journal.h"

using namespace xbng::agent;

namespace {

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xbng-journal-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/sub/store.journal";  // the directory is created
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

SubscriberSpec spec(uint16_t inner, bool full) {
  SubscriberSpec s;
  s.key = {7, 100, inner};
  if (!full) return s;
  s.has_mac = true;
  s.mac = {2, 0, 0, 0, 0, static_cast<uint8_t>(inner)};
  s.has_ipv4 = true;
  s.ipv4 = 0x10004064;
  s.has_ipv6 = true;
  s.ipv6 = *parse_ipv6("2001:db8:1000::10");
  s.prefixes.push_back(*parse_prefix("2001:db8:2000::/64"));
  s.prefixes.push_back(*parse_prefix("2001:db8:3000:100::/56"));
  s.prefixes.push_back(*parse_prefix("100.65.0.0/31"));
  s.has_policy = true;
  s.policy = {1000000, 64000, 5000000, 128000};
  s.mac_policy = 2;
  return s;
}

bool same(const SubscriberSpec& a, const SubscriberSpec& b) {
  return a.key == b.key && a.same_provisioning(b) && a.has_mac == b.has_mac &&
         a.mac_policy == b.mac_policy;
}

}  // namespace

TEST_F(JournalTest, PendingIsWhatBeginWrote) {
  Journal j(path_);
  std::string err;
  EXPECT_FALSE(j.pending(&err)) << "a new journal has nothing pending";
  EXPECT_EQ(err, "");
  JournalIntent in;
  in.op = JournalIntent::Op::kUpsert;
  in.created = {{7, 100, 1}, {7, 100, 2}};
  in.before = {spec(3, true), spec(4, false)};
  ASSERT_EQ(j.begin(in), 0);
  // Another process (the next agent) reads it.
  Journal next(path_);
  auto got = next.pending(&err);
  ASSERT_TRUE(got) << err;
  EXPECT_EQ(got->op, JournalIntent::Op::kUpsert);
  ASSERT_EQ(got->created.size(), 2u);
  EXPECT_TRUE(got->created[1] == (SubKey{7, 100, 2}));
  ASSERT_EQ(got->before.size(), 2u);
  EXPECT_TRUE(same(got->before[0], in.before[0]));
  EXPECT_TRUE(same(got->before[1], in.before[1]));
  EXPECT_EQ(got->before[0].prefixes.size(), 3u);
  ASSERT_EQ(next.clear(), 0);
  EXPECT_FALSE(Journal(path_).pending(&err));
  EXPECT_EQ(err, "");
}

TEST_F(JournalTest, AShorterIntentAfterALongerOneReadsBackExactly) {
  Journal j(path_);
  JournalIntent big;
  big.op = JournalIntent::Op::kDelete;
  for (uint16_t i = 1; i <= 3000; ++i) big.before.push_back(spec(i, true));
  ASSERT_EQ(j.begin(big), 0);
  ASSERT_EQ(j.clear(), 0);
  JournalIntent small;
  small.op = JournalIntent::Op::kDelete;
  small.before = {spec(9, true)};
  ASSERT_EQ(j.begin(small), 0);
  std::string err;
  auto got = Journal(path_).pending(&err);
  ASSERT_TRUE(got) << err;
  EXPECT_EQ(got->op, JournalIntent::Op::kDelete);
  ASSERT_EQ(got->before.size(), 1u);
  EXPECT_TRUE(same(got->before[0], small.before[0]));
}

TEST_F(JournalTest, DamageIsReportedNotMisread) {
  {
    Journal j(path_);
    JournalIntent in;
    in.before = {spec(3, true)};
    ASSERT_EQ(j.begin(in), 0);
  }
  // One flipped byte in the body.
  int fd = open(path_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char b;
  ASSERT_EQ(pread(fd, &b, 1, 64 + 9), 1);
  b ^= 0x40;
  ASSERT_EQ(pwrite(fd, &b, 1, 64 + 9), 1);
  close(fd);
  std::string err;
  EXPECT_FALSE(Journal(path_).pending(&err));
  EXPECT_NE(err.find("damaged"), std::string::npos) << err;
  // Not a journal at all.
  fd = open(path_.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_EQ(write(fd, "hello, this is not a journal, it is 64 bytes long or more, really", 65), 65);
  close(fd);
  err.clear();
  EXPECT_FALSE(Journal(path_).pending(&err));
  EXPECT_NE(err.find("not an xbng store journal"), std::string::npos) << err;
}

TEST_F(JournalTest, DecodeRefusesTruncatedBodies) {
  JournalIntent in;
  in.created = {{7, 100, 1}};
  in.before = {spec(3, true)};
  std::string body;
  Journal::encode(in, &body);
  JournalIntent out;
  EXPECT_TRUE(
      Journal::decode(reinterpret_cast<const uint8_t*>(body.data()), body.size(), 1, 1, &out));
  for (size_t n = 0; n < body.size(); ++n)
    EXPECT_FALSE(Journal::decode(reinterpret_cast<const uint8_t*>(body.data()), n, 1, 1, &out))
        << "truncated at " << n;
  EXPECT_FALSE(
      Journal::decode(reinterpret_cast<const uint8_t*>(body.data()), body.size(), 1, 2, &out));
}

TEST(JournalPath, RuntimeStateNextToThePinSet) {
  Config c;
  EXPECT_EQ(store_journal_path(c), "/run/xbng/store.journal");
  c.bpffs = "/sys/fs/bpf/lab-7";
  EXPECT_EQ(store_journal_path(c), "/run/xbng/lab-7/store.journal");
}
