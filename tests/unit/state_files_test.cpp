// Every state file the agent reads or writes (the store journal, the lease
// table, the DHCPv6 server DUID), against every damaged shape: one row per
// shape. Each row checks what the agent says (the file named, and the entry
// or field at fault), that nothing was taken from the damaged file, and that
// no file outside the state directory changed (a file a link points to).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "bringup/dhcpv6/duid.h"
#include "store/journal.h"
#include "bringup/lease/lease.h"
#include "common/statefile.h"

using namespace xbng::agent;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& p, std::string_view s) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o.write(s.data(), static_cast<std::streamsize>(s.size()));
}

// A state directory, and a file outside it that links may point to.
class StateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xbng-state-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/state";
    outside_ = root_ + "/outside";
    fs::create_directories(dir_);
    spit(outside_, kOutside);
  }
  void TearDown() override {
    // Nothing outside the state directory changed, whatever the row did.
    EXPECT_EQ(slurp(outside_), kOutside);
    struct stat st {};
    ASSERT_EQ(lstat(outside_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    fs::remove_all(root_);
  }
  std::string at(const std::string& name) const { return dir_ + "/" + name; }
  static constexpr const char* kOutside = "a file outside the state directory\n";
  std::string root_, dir_, outside_;
};

// Non-regular shapes of a path, made at `path`.
struct Shape {
  const char* name;
  std::function<void(const std::string& path, const std::string& outside)> make;
  const char* says;  // in the error
};
const std::vector<Shape>& special_shapes() {
  static const std::vector<Shape> v = {
      {"symlink", [](auto& p, auto& o) { ASSERT_EQ(symlink(o.c_str(), p.c_str()), 0); },
       "symbolic link"},
      {"dangling symlink",
       [](auto& p, auto& o) { ASSERT_EQ(symlink((o + ".none").c_str(), p.c_str()), 0); },
       "symbolic link"},
      {"FIFO", [](auto& p, auto&) { ASSERT_EQ(mkfifo(p.c_str(), 0600), 0); }, "a FIFO"},
      {"directory", [](auto& p, auto&) { fs::create_directory(p); }, "a directory"},
  };
  return v;
}

template <typename F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// ---- the module -------------------------------------------------------------

TEST_F(StateDir, ReadRefusesEveryNonRegularShapeAtOnceNamingThePath) {
  for (const auto& sh : special_shapes()) {
    SCOPED_TRACE(sh.name);
    const std::string p = at(std::string("f-") + sh.name);
    sh.make(p, outside_);
    std::string out, err;
    statefile::ReadStatus st{};
    EXPECT_LT(seconds([&] { st = statefile::read(p, 1 << 20, &out, &err); }), 1.0);
    EXPECT_EQ(st, statefile::ReadStatus::kError);
    EXPECT_EQ(out, "");
    EXPECT_NE(err.find(p), std::string::npos) << err;
    EXPECT_NE(err.find(sh.says), std::string::npos) << err;
  }
  std::string out, err;
  EXPECT_EQ(statefile::read(at("absent"), 10, &out, &err), statefile::ReadStatus::kAbsent);
  spit(at("big"), std::string(101, 'x'));
  EXPECT_EQ(statefile::read(at("big"), 100, &out, &err), statefile::ReadStatus::kError);
  EXPECT_NE(err.find(at("big")), std::string::npos) << err;
  EXPECT_NE(err.find("101 bytes"), std::string::npos) << err;
  EXPECT_EQ(statefile::read(at("big"), 101, &out, &err), statefile::ReadStatus::kOk);
  EXPECT_EQ(out.size(), 101u);
}

TEST_F(StateDir, WriteNeverGoesThroughALink) {
  // Links planted at every name a writer could predict: the old ".tmp",
  // ".tmp.<pid>" of the DUID writer.
  const std::string p = at("leases.json");
  for (const std::string& n :
       {p + ".tmp", p + ".tmp." + std::to_string(getpid()), at(".leases.json.tmp")})
    ASSERT_EQ(symlink(outside_.c_str(), n.c_str()), 0);
  std::string err;
  ASSERT_TRUE(statefile::write_atomic(p, "one\n", 0640, true, &err)) << err;
  ASSERT_TRUE(statefile::write_atomic(p, "two\n", 0640, false, &err)) << err;
  EXPECT_EQ(slurp(p), "two\n");
  struct stat st {};
  ASSERT_EQ(lstat(p.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // No temporary left behind: the three links and the file.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 4);
  // The path itself not a regular file: refused, nothing replaced.
  for (const auto& sh : special_shapes()) {
    SCOPED_TRACE(sh.name);
    const std::string q = at(std::string("w-") + sh.name);
    sh.make(q, outside_);
    err.clear();
    EXPECT_FALSE(statefile::write_atomic(q, "x", 0600, true, &err));
    EXPECT_NE(err.find(q), std::string::npos) << err;
    EXPECT_NE(err.find(sh.says), std::string::npos) << err;
    ASSERT_EQ(lstat(q.c_str(), &st), 0);
    EXPECT_FALSE(S_ISREG(st.st_mode));
  }
}

TEST_F(StateDir, InPlaceOpenRefusesLinksAndSpecialFiles) {
  for (const auto& sh : special_shapes()) {
    SCOPED_TRACE(sh.name);
    const std::string p = at(std::string("j-") + sh.name);
    sh.make(p, outside_);
    std::string err;
    int fd = 0;
    EXPECT_LT(seconds([&] { fd = statefile::open_in_place(p, 0600, &err); }), 1.0);
    EXPECT_LT(fd, 0);
    EXPECT_NE(err.find(p), std::string::npos) << err;
    EXPECT_NE(err.find(sh.says), std::string::npos) << err;
  }
  // A hard link to a file elsewhere would be written through.
  ASSERT_EQ(link(outside_.c_str(), at("hard").c_str()), 0);
  std::string err;
  EXPECT_LT(statefile::open_in_place(at("hard"), 0600, &err), 0);
  EXPECT_NE(err.find("hard link"), std::string::npos) << err;
  const int fd = statefile::open_in_place(at("new/journal"), 0600, &err);
  ASSERT_GE(fd, 0) << err;
  close(fd);
}

// ---- the store journal --------------------------------------------------------

namespace {

JournalIntent five_created() {
  JournalIntent in;
  in.op = JournalIntent::Op::kUpsert;
  for (uint16_t i = 1; i <= 5; ++i) in.created.push_back({7, 100, i});
  return in;
}

void poke(const std::string& path, off_t off, const void* b, size_t n) {
  const int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, b, n, off), static_cast<ssize_t>(n));
  close(fd);
}

}  // namespace

// One row per damaged shape of the file; each row starts from a journal that
// was written by begin() (and, for "cleared" rows, clear()).
TEST_F(StateDir, JournalDamageIsReportedAndNeverReplayed) {
  struct Row {
    const char* name;
    bool cleared;  // the change completed before the damage
    std::function<void(const std::string&)> damage;
    const char* says;
  };
  const uint64_t huge = uint64_t{1} << 62, gib = uint64_t{1} << 30;
  const std::vector<Row> rows = {
      // A cleared change's state byte flipped back to "pending".
      {"cleared, state byte 8 = 0x01", true,
       [](auto& p) {
         const uint8_t one = 1;
         poke(p, 8, &one, 1);
       },
       "checksum"},
      {"pending, a body byte flipped", false,
       [](auto& p) {
         const uint8_t x = 0x40;
         poke(p, 64 + 3, &x, 1);
       },
       "checksum"},
      {"pending, the created count changed", false,
       [](auto& p) {
         const uint64_t n = 4;
         poke(p, 32, &n, 8);
       },
       "checksum"},
      {"pending, the sequence number changed", false,
       [](auto& p) {
         const uint64_t n = 99;
         poke(p, 24, &n, 8);
       },
       "checksum"},
      {"truncated header", false, [](auto& p) { fs::resize_file(p, 40); }, "shorter than"},
      {"truncated body", false, [](auto& p) { fs::resize_file(p, 64 + 17); }, "body"},
      {"wrong magic", false, [](auto& p) { poke(p, 0, "NOTAJRNL", 8); },
       "not an xbng store journal"},
      {"another version", false, [](auto& p) { poke(p, 0, "XBNGJRN9", 8); },
       "not an xbng store journal"},
      {"unknown state", false,
       [](auto& p) {
         const uint32_t s = 7;
         poke(p, 8, &s, 4);
       },
       "neither clear nor pending"},
      {"body length 2^62", false, [&](auto& p) { poke(p, 48, &huge, 8); }, "the file holds"},
      {"body length 1 GiB", false, [&](auto& p) { poke(p, 48, &gib, 8); }, "the file holds"},
      {"created count 2^62", false, [&](auto& p) { poke(p, 32, &huge, 8); }, "more than its"},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    const std::string p = at("store.journal");
    fs::remove(p);
    {
      Journal j(p);
      ASSERT_EQ(j.begin(five_created()), 0);
      if (r.cleared) {
        ASSERT_EQ(j.clear(), 0);
      }
    }
    r.damage(p);
    Journal next(p);
    std::string err;
    std::optional<JournalIntent> got;
    EXPECT_LT(seconds([&] { got = next.pending(&err); }), 0.5) << "nothing large allocated";
    EXPECT_FALSE(got) << "a damaged journal replays nothing";
    EXPECT_NE(err.find(p), std::string::npos) << err;
    EXPECT_NE(err.find("damaged"), std::string::npos) << err;
    EXPECT_NE(err.find(r.says), std::string::npos) << err;
    // Kept aside for inspection, a new journal in its place.
    const std::string damaged = slurp(p);
    EXPECT_NE(next.set_aside().find(p + ".damaged"), std::string::npos);
    EXPECT_EQ(slurp(p + ".damaged"), damaged);
    err.clear();
    EXPECT_FALSE(next.pending(&err));
    EXPECT_EQ(err, "");
    ASSERT_EQ(next.begin(five_created()), 0);
    EXPECT_TRUE(Journal(p).pending(&err)) << err;
  }
}

TEST_F(StateDir, ACleanJournalReadsBackAndAClearedOneIsEmpty) {
  const std::string p = at("store.journal");
  Journal j(p);
  ASSERT_EQ(j.begin(five_created()), 0);
  std::string err;
  auto got = Journal(p).pending(&err);
  ASSERT_TRUE(got) << err;
  EXPECT_EQ(got->created.size(), 5u);
  ASSERT_EQ(j.clear(), 0);
  EXPECT_FALSE(Journal(p).pending(&err));
  EXPECT_EQ(err, "");
}

TEST_F(StateDir, JournalPathThatIsNotARegularFileRefusesTheStart) {
  for (const auto& sh : special_shapes()) {
    SCOPED_TRACE(sh.name);
    const std::string p = at(std::string("journal-") + sh.name);
    sh.make(p, outside_);
    try {
      Journal j(p);
      ADD_FAILURE() << "opened";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(sh.says), std::string::npos) << e.what();
    }
  }
}

// ---- the lease file -------------------------------------------------------------

namespace {

PortResolver acc0() {
  PortResolver r;
  r.access_ifindex = [](std::string_view n) -> std::optional<uint32_t> {
    if (n == "acc0") return 7;
    return std::nullopt;
  };
  r.name = [](uint32_t i) { return i == 7 ? std::string("acc0") : std::string(); };
  return r;
}

// A valid IPv4 lease, as flush() writes it.
const std::string kGoodLease =
    R"({"port":"acc0","outer_vlan":100,"inner_vlan":1,"family":"ipv4","address":"100.64.0.16",)"
    R"("prefixes":[],"bound_unix":1764556400,"expires_unix":4102444800})";

std::string file_of(const std::string& entries) {
  return R"({"version":1,"leases":[)" + entries + "]}";
}

}  // namespace

TEST_F(StateDir, LeaseFileDamageRefusesTheStartNamingFileAndEntry) {
  const std::string ok = kGoodLease;
  auto with = [&](const std::string& field, const std::string& value) {
    std::string e = ok;
    const std::string key = "\"" + field + "\":";
    const size_t a = e.find(key);
    if (a == std::string::npos) return e;
    size_t b = a + key.size();
    int depth = 0;
    for (; b < e.size(); ++b) {
      if (e[b] == '[') ++depth;
      if (e[b] == ']') --depth;
      if (depth == 0 && (e[b] == ',' || e[b] == '}')) break;
    }
    if (value.empty()) return e.substr(0, a) + e.substr(b + 1);  // a field not the last: removed
    return e.substr(0, a + key.size()) + value + e.substr(b);
  };
  struct Row {
    const char* name;
    std::string text;
    const char* says;
  };
  const std::vector<Row> rows = {
      {"outer_vlan 65636 (narrowed to 100 before)", file_of(ok + "," + with("outer_vlan", "65636")),
       "entry 1: \"outer_vlan\" 65636 is outside 1..4094"},
      {"inner_vlan 0", file_of(with("inner_vlan", "0")), "entry 0: \"inner_vlan\" 0 is outside"},
      {"inner_vlan 4095", file_of(with("inner_vlan", "4095")), "entry 0: \"inner_vlan\" 4095"},
      {"outer_vlan -1", file_of(with("outer_vlan", "-1")), "entry 0: \"outer_vlan\" -1 is outside"},
      {"outer_vlan a string", R"({"version":1,"leases":[{"port":"acc0","outer_vlan":"x"}]})",
       "entry 0: \"outer_vlan\" is string \"x\", not an integer"},
      {"outer_vlan 1.5", file_of(with("outer_vlan", "1.5")), "entry 0: \"outer_vlan\" is number"},
      {"outer_vlan true", file_of(with("outer_vlan", "true")), "not an integer"},
      {"a field missing", file_of(with("family", "")), "entry 0: no \"family\""},
      {"port a number", file_of(with("port", "3")), "entry 0: \"port\" is number, not a string"},
      {"port too long", file_of(with("port", "\"abcdefghijklmnop\"")), "not an interface name"},
      {"family unknown", file_of(with("family", "\"ipv5\"")), "\"family\" \"ipv5\" is neither"},
      {"address not IPv4", file_of(with("address", "\"2001:db8::1\"")),
       "\"address\" \"2001:db8::1\" is not an IPv4 address"},
      {"prefix not a prefix", file_of(with("prefixes", "[\"banana\"]")),
       "\"prefixes\"[0] \"banana\" is not an IPv4 prefix"},
      {"prefixes not an array", file_of(with("prefixes", "{}")), "\"prefixes\" is object"},
      {"expires before bound", file_of(with("bound_unix", "4102444801")),
       "is not within a lease time"},
      {"expiry 2^64-1", file_of(with("expires_unix", "18446744073709551615")), "is outside 0.."},
      {"entry not an object", file_of(ok + ",[1,2,3]"), "entry 1: is array, not an object"},
      {"duplicate entry", file_of(ok + "," + ok), "entry 1: a second ipv4 lease of acc0/100/1"},
      {"document an array", "[1,2,3]", "is array, not an object"},
      {"document null", "null", "is null, not an object"},
      {"version 2", R"({"version":2,"leases":[]})", "\"version\" is 2, not 1"},
      {"version missing", R"({"leases":[]})", "\"version\" is missing"},
      {"leases not an array", R"({"version":1,"leases":{}})", "\"leases\" is object, not an array"},
      {"truncated JSON", file_of(ok).substr(0, 40), "cannot parse"},
  };
  const std::string p = at("leases.json");
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    spit(p, r.text);
    try {
      LeaseTable t(nullptr, acc0(), p);
      ADD_FAILURE() << "loaded " << t.size() << " leases";
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(p), std::string::npos) << m;
      EXPECT_NE(m.find(r.says), std::string::npos) << m;
      EXPECT_NE(m.rfind("[json.exception", 0), 0u) << "a bare library message: " << m;
    }
    EXPECT_EQ(slurp(p), r.text) << "the file is left as it was";
  }
  // The good entry alone loads.
  spit(p, file_of(ok));
  LeaseTable t(nullptr, acc0(), p);
  EXPECT_EQ(t.size(), 1u);
  auto l = t.get({7, 100, 1}, LeaseFamily::kV4);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->address, "100.64.0.16");
}

TEST_F(StateDir, LeaseFileThatIsNotARegularFileRefusesTheStartAtOnce) {
  for (const auto& sh : special_shapes()) {
    if (std::string(sh.name) == "dangling symlink") continue;  // below
    SCOPED_TRACE(sh.name);
    const std::string p = at(std::string("leases-") + sh.name + ".json");
    sh.make(p, outside_);
    try {
      const double s = seconds([&] { LeaseTable t(nullptr, acc0(), p); });
      ADD_FAILURE() << "loaded in " << s << " s";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(sh.says), std::string::npos) << e.what();
    }
  }
  // A dangling link is not "no file": it is refused too.
  const std::string p = at("dangling.json");
  ASSERT_EQ(symlink((outside_ + ".none").c_str(), p.c_str()), 0);
  EXPECT_THROW(LeaseTable(nullptr, acc0(), p), std::runtime_error);
  EXPECT_FALSE(fs::exists(outside_ + ".none"));
}

TEST_F(StateDir, LeaseWriterDoesNotFollowAPlantedTemporaryLink) {
  const std::string p = at("leases.json");
  ASSERT_EQ(symlink(outside_.c_str(), (p + ".tmp").c_str()), 0);
  {
    LeaseTable t(nullptr, acc0(), p);
    t.bind({7, 100, 1}, LeaseFamily::kV4, "100.64.0.16", {}, 3600, 1764556400);
    ASSERT_TRUE(t.flush());
  }
  struct stat st {};
  ASSERT_EQ(lstat(p.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "leases.json is the file, not a link";
  EXPECT_NE(slurp(p).find("100.64.0.16"), std::string::npos);
  ASSERT_EQ(lstat((p + ".tmp").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the planted link is left alone";
}

// The file's bytes: one compact json document, keys sorted (as nlohmann's
// dump() of the whole document writes it), each lease written as it is bound;
// and it reads back whole.
TEST_F(StateDir, LeaseFileBytesAreTheWholeDocumentsDump) {
  constexpr uint32_t kTo2100 = 4102444800 - 1764556400;  // bound in 2025, expiring in 2100
  const std::string p = at("leases.json");
  {
    LeaseTable t(nullptr, acc0(), p);
    t.bind({7, 100, 1}, LeaseFamily::kV4, "100.64.0.16", {}, kTo2100, 1764556400, "192.0.2.1");
    t.bind({7, 100, 1}, LeaseFamily::kV6, "2001:db8::10", {"2001:db8:1::/56", "2001:db8:2::/56"},
           kTo2100 - 1, 1764556400);
    ASSERT_TRUE(t.flush());
  }
  EXPECT_EQ(
      slurp(p),
      R"({"leases":[{"address":"100.64.0.16","bound_unix":1764556400,"expires_unix":4102444800,)"
      R"("family":"ipv4","inner_vlan":1,"outer_vlan":100,"port":"acc0","prefixes":[],)"
      R"("server":"192.0.2.1"},{"address":"2001:db8::10","bound_unix":1764556400,)"
      R"("expires_unix":4102444799,"family":"ipv6","inner_vlan":1,"outer_vlan":100,"port":"acc0",)"
      R"("prefixes":["2001:db8:1::/56","2001:db8:2::/56"]}],"version":1})"
      "\n");
  LeaseTable back(nullptr, acc0(), p);
  const auto v4 = back.get({7, 100, 1}, LeaseFamily::kV4);
  const auto v6 = back.get({7, 100, 1}, LeaseFamily::kV6);
  ASSERT_TRUE(v4 && v6);
  EXPECT_EQ(v4->server, "192.0.2.1");
  EXPECT_EQ(v6->prefixes, (std::vector<std::string>{"2001:db8:1::/56", "2001:db8:2::/56"}));
}

// An empty table writes an empty document.
TEST_F(StateDir, LeaseFileOfNoLeaseIsAnEmptyDocument) {
  const std::string p = at("leases.json");
  {
    LeaseTable t(nullptr, acc0(), p);
    t.bind({7, 100, 1}, LeaseFamily::kV4, "100.64.0.16", {}, 3600, 1764556400);
    t.release({7, 100, 1}, LeaseFamily::kV4, 1764556401);
    ASSERT_TRUE(t.flush());
  }
  EXPECT_EQ(slurp(p), "{\"leases\":[],\"version\":1}\n");
}

// ---- the DHCPv6 server DUID ----------------------------------------------------------

TEST_F(StateDir, DuidFileDamageRefusesNamingTheFile) {
  struct Row {
    const char* name;
    std::function<void(const std::string&)> make;
    const char* says;
  };
  const std::vector<Row> rows = {
      {"not hex", [](auto& p) { spit(p, "garbage\n"); }, "not a DUID"},
      {"2 bytes", [](auto& p) { spit(p, "00:04\n"); }, "not a DUID"},
      {"unknown type", [](auto& p) { spit(p, "00:09:01:02:03\n"); }, "DUID type 9"},
      {"a UUID of 5 bytes", [](auto& p) { spit(p, "00:04:01:02:03\n"); }, "type-4 DUID of 5 bytes"},
      {"1 MiB", [](auto& p) { spit(p, std::string(1 << 20, 'a')); }, "bytes, more than"},
      {"symlink", [&](auto& p) { ASSERT_EQ(symlink(outside_.c_str(), p.c_str()), 0); },
       "symbolic link"},
      {"FIFO", [](auto& p) { ASSERT_EQ(mkfifo(p.c_str(), 0600), 0); }, "a FIFO"},
      {"directory", [](auto& p) { fs::create_directory(p); }, "a directory"},
  };
  const std::string p = at("dhcpv6-server-duid");
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    fs::remove_all(p);
    r.make(p);
    std::string err;
    std::optional<dhcpv6::Duid> d;
    EXPECT_LT(seconds([&] { d = dhcpv6::load_or_create_server_duid(p, &err); }), 1.0);
    EXPECT_FALSE(d);
    EXPECT_NE(err.find(p), std::string::npos) << err;
    EXPECT_NE(err.find(r.says), std::string::npos) << err;
  }
  // Created when absent, through no link.
  fs::remove_all(p);
  ASSERT_EQ(symlink(outside_.c_str(), (p + ".tmp." + std::to_string(getpid())).c_str()), 0);
  std::string err;
  auto d = dhcpv6::load_or_create_server_duid(p, &err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(slurp(p), dhcpv6::format_duid_hex(*d) + "\n");
}
