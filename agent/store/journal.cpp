#include "store/journal.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "common/statefile.h"

namespace xbng::agent {

namespace {

// File layout: a 64-byte header, then the body (the created keys, then the
// previous specs). The header is written after the body: a header that says
// "pending" always describes a complete body. Its checksum covers the header
// (with the checksum field taken as zero) and the body, and clear() zeroes
// the state and the checksum together (one 16-byte write): a cleared intent
// whose state word is later damaged back to "pending" fails the checksum, it
// is never replayed.
constexpr char kMagic[8] = {'X', 'B', 'N', 'G', 'J', 'R', 'N', '2'};
// The layout before the header was checksummed (body only): still read, so
// an agent killed mid-change and then upgraded resolves its change.
constexpr char kMagicV1[8] = {'X', 'B', 'N', 'G', 'J', 'R', 'N', '1'};
constexpr uint32_t kClear = 0, kPending = 1;
// Beyond this, a cleared journal gives its pages back (an atomic upsert of
// 16 MiB writes ~15 MB here; stream batches write ~0.1-1 MB).
constexpr uint64_t kKeepBytes = 4u << 20;

struct Header {
  char magic[8];
  uint32_t state;
  uint8_t op;
  uint8_t pad[3];
  uint64_t checksum;  // next to the state: clear() zeroes both in one write
  uint64_t seq;
  uint64_t created;
  uint64_t before;
  uint64_t body_len;
  uint64_t pad2;
};
static_assert(sizeof(Header) == 64);
constexpr off_t kStateOffset = offsetof(Header, state);
static_assert(offsetof(Header, checksum) == kStateOffset + 8);

struct HeaderV1 {
  char magic[8];
  uint32_t state;
  uint8_t op;
  uint8_t pad[3];
  uint64_t seq;
  uint64_t created;
  uint64_t before;
  uint64_t body_len;
  uint64_t checksum;  // of the body only
  uint64_t pad2;
};
static_assert(sizeof(HeaderV1) == 64);

// Word-at-a-time multiplicative hash: a torn or foreign body is told from
// the one the header describes, at memory speed.
uint64_t checksum(const uint8_t* p, size_t n, uint64_t seed = 0x9e3779b97f4a7c15ull) {
  uint64_t h = seed ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, p + i, n - i);
  h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}

// Header (checksum field as zero) then body.
uint64_t checksum(const Header& hdr, const uint8_t* body, size_t n) {
  Header z = hdr;
  z.checksum = 0;
  return checksum(body, n, checksum(reinterpret_cast<const uint8_t*>(&z), sizeof z));
}

int write_all(int fd, const void* buf, size_t n, off_t off) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n) {
    ssize_t w = pwrite(fd, p, n, off);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    p += w, n -= static_cast<size_t>(w), off += w;
  }
  return 0;
}

enum SpecFlags : uint8_t { kMac = 1, kV4 = 2, kV6 = 4, kPolicy = 8 };
constexpr int kOriginShift = 4;  // bits 4..6: SubscriberSpec.origin (0 in older journals)

template <typename T>
void put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

struct Reader {
  const uint8_t* p;
  size_t n;
  bool ok = true;
  template <typename T>
  T get() {
    T v{};
    take(&v, sizeof v);
    return v;
  }
  void take(void* dst, size_t k) {
    if (k == 0) return;  // dst may be null (an empty vector's data())
    if (!ok || k > n) {
      ok = false;
      return;
    }
    std::memcpy(dst, p, k);
    p += k, n -= k;
  }
};

}  // namespace

void Journal::encode(const JournalIntent& in, std::string* out) {
  out->clear();
  out->reserve(in.created.size() * sizeof(SubKey) + in.before.size() * 64);
  out->append(reinterpret_cast<const char*>(in.created.data()), in.created.size() * sizeof(SubKey));
  for (const SubscriberSpec& s : in.before) {
    put(out, s.key);
    const uint8_t fl = (s.has_mac ? kMac : 0) | (s.has_ipv4 ? kV4 : 0) | (s.has_ipv6 ? kV6 : 0) |
                       (s.has_policy ? kPolicy : 0) |
                       static_cast<uint8_t>((s.origin & 7) << kOriginShift);
    put(out, fl);
    put(out, s.mac_policy);
    put(out, static_cast<uint32_t>(s.prefixes.size()));
    if (s.has_mac) out->append(reinterpret_cast<const char*>(s.mac.data()), 6);
    if (s.has_ipv4) put(out, s.ipv4);
    if (s.has_ipv6) out->append(reinterpret_cast<const char*>(s.ipv6.data()), 16);
    if (s.has_policy) {
      put(out, s.policy.up_rate);
      put(out, s.policy.up_burst);
      put(out, s.policy.down_rate);
      put(out, s.policy.down_burst);
    }
    for (const Prefix& p : s.prefixes) {
      put(out, p.family);
      put(out, p.len);
      out->append(reinterpret_cast<const char*>(p.addr.data()), p.family == 4 ? 4 : 16);
    }
  }
}

bool Journal::decode(const uint8_t* p, size_t n, size_t created, size_t before,
                     JournalIntent* out) {
  Reader r{p, n};
  if (created > n / sizeof(SubKey)) return false;
  out->created.resize(created);
  r.take(out->created.data(), created * sizeof(SubKey));
  out->before.clear();
  for (size_t i = 0; i < before && r.ok; ++i) {
    SubscriberSpec s;
    s.key = r.get<SubKey>();
    const auto fl = r.get<uint8_t>();
    s.mac_policy = r.get<uint8_t>();
    const auto np = r.get<uint32_t>();
    s.has_mac = fl & kMac, s.has_ipv4 = fl & kV4, s.has_ipv6 = fl & kV6,
    s.has_policy = fl & kPolicy;
    s.origin = static_cast<uint8_t>((fl >> kOriginShift) & 7);
    if (s.has_mac) r.take(s.mac.data(), 6);
    if (s.has_ipv4) s.ipv4 = r.get<uint32_t>();
    if (s.has_ipv6) r.take(s.ipv6.data(), 16);
    if (s.has_policy) {
      s.policy.up_rate = r.get<uint64_t>();
      s.policy.up_burst = r.get<uint64_t>();
      s.policy.down_rate = r.get<uint64_t>();
      s.policy.down_burst = r.get<uint64_t>();
    }
    if (np > r.n / 6) return false;  // each prefix takes at least 6 bytes
    for (uint32_t k = 0; k < np && r.ok; ++k) {
      Prefix pf;
      pf.family = r.get<uint8_t>();
      pf.len = r.get<uint8_t>();
      if (pf.family != 4 && pf.family != 6) return false;
      r.take(pf.addr.data(), pf.family == 4 ? 4 : 16);
      s.prefixes.push_back(pf);
    }
    out->before.push_back(std::move(s));
  }
  return r.ok && r.n == 0;
}

Journal::Journal(std::string path) : path_(std::move(path)) {
  std::string err;
  fd_ = statefile::open_in_place(path_, 0600, &err);
  if (fd_ < 0) throw std::runtime_error("store journal " + err);
  struct stat st {};
  if (fstat(fd_, &st) == 0 && st.st_size > static_cast<off_t>(sizeof(Header)))
    body_bytes_ = static_cast<uint64_t>(st.st_size) - sizeof(Header);
  Header h{};
  if (pread(fd_, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
      std::memcmp(h.magic, kMagic, sizeof kMagic) == 0)
    seq_ = h.seq;
}

Journal::~Journal() {
  if (fd_ >= 0) close(fd_);
}

int Journal::begin(const JournalIntent& intent) {
  std::string body;
  encode(intent, &body);
  if (int rc = write_all(fd_, body.data(), body.size(), sizeof(Header))) return rc;
  body_bytes_ = std::max<uint64_t>(body_bytes_, body.size());
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.state = kPending;
  h.op = static_cast<uint8_t>(intent.op);
  h.seq = ++seq_;
  h.created = intent.created.size();
  h.before = intent.before.size();
  h.body_len = body.size();
  h.checksum = checksum(h, reinterpret_cast<const uint8_t*>(body.data()), body.size());
  return write_all(fd_, &h, sizeof h, 0);
}

int Journal::clear() {
  // State, op and checksum zeroed together: nothing left to resurrect.
  const uint8_t zero[16] = {};
  if (int rc = write_all(fd_, zero, sizeof zero, kStateOffset)) return rc;
  if (body_bytes_ > kKeepBytes) {
    if (ftruncate(fd_, sizeof(Header)) != 0) return -errno;
    body_bytes_ = 0;
  }
  return 0;
}

std::optional<JournalIntent> Journal::pending(std::string* error) const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    *error = fmt::format("{}: fstat: {}", path_, std::strerror(errno));
    return std::nullopt;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return std::nullopt;  // never used
  Header h{};
  if (size < sizeof h || pread(fd_, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
    *error = fmt::format("{}: damaged: {} bytes, shorter than the {}-byte header", path_, size,
                         sizeof h);
    return std::nullopt;
  }
  uint64_t sum = 0;
  const bool v1 = std::memcmp(h.magic, kMagicV1, sizeof kMagicV1) == 0;
  if (v1) {  // same fields, other places; its checksum covers the body only
    HeaderV1 o;
    std::memcpy(&o, &h, sizeof o);
    h.seq = o.seq, h.created = o.created, h.before = o.before, h.body_len = o.body_len;
    sum = o.checksum;
  } else if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    *error = fmt::format("{}: damaged: not an xbng store journal (or from another version)", path_);
    return std::nullopt;
  }
  if (h.state == kClear) return std::nullopt;
  if (h.state != kPending) {
    *error = fmt::format("{}: damaged: state {} is neither clear nor pending", path_, h.state);
    return std::nullopt;
  }
  // Every length against what the file holds, before anything is allocated.
  if (h.body_len > size - sizeof h) {
    *error = fmt::format("{}: damaged: change #{} claims a {}-byte body, the file holds {}", path_,
                         h.seq, h.body_len, size - sizeof h);
    return std::nullopt;
  }
  if (h.created > h.body_len / sizeof(SubKey) || h.before > h.body_len / 8) {
    *error = fmt::format(
        "{}: damaged: change #{} claims {} created and {} previous specs, more "
        "than its {}-byte body holds",
        path_, h.seq, h.created, h.before, h.body_len);
    return std::nullopt;
  }
  std::string body(h.body_len, '\0');
  if (pread(fd_, body.data(), body.size(), sizeof h) != static_cast<ssize_t>(body.size())) {
    *error = fmt::format("{}: damaged: change #{}: short read of its body", path_, h.seq);
    return std::nullopt;
  }
  const auto* b = reinterpret_cast<const uint8_t*>(body.data());
  if (!v1) sum = h.checksum;
  if ((v1 ? checksum(b, body.size()) : checksum(h, b, body.size())) != sum) {
    *error = fmt::format(
        "{}: damaged: pending change #{} fails its checksum (a cleared change "
        "whose state was altered, or a torn or foreign file)",
        path_, h.seq);
    return std::nullopt;
  }
  if (h.op != static_cast<uint8_t>(JournalIntent::Op::kUpsert) &&
      h.op != static_cast<uint8_t>(JournalIntent::Op::kDelete)) {
    *error = fmt::format("{}: damaged: unknown operation {}", path_, h.op);
    return std::nullopt;
  }
  JournalIntent in;
  in.op = static_cast<JournalIntent::Op>(h.op);
  if (!decode(b, body.size(), h.created, h.before, &in)) {
    *error = fmt::format("{}: damaged: pending change #{} does not decode", path_, h.seq);
    return std::nullopt;
  }
  return in;
}

std::string Journal::set_aside() {
  const std::string aside = path_ + ".damaged";
  if (rename(path_.c_str(), aside.c_str()) != 0)
    return fmt::format("could not keep it as {}: {}", aside, std::strerror(errno));
  std::string err;
  const int fd = statefile::open_in_place(path_, 0600, &err);
  if (fd < 0) return fmt::format("kept as {}; a new journal: {}", aside, err);
  close(fd_);
  fd_ = fd;
  body_bytes_ = 0;
  return fmt::format("kept as {} for inspection", aside);
}

void crash_point(const char* op, const char* stage) {
  // Parsed once; empty = no hook (production).
  static const std::string at = [] {
    const char* e = std::getenv("XBNG_TEST_CRASH_AT");
    return std::string(e ? e : "");
  }();
  static std::atomic<bool> fired{false};
  if (at.empty() || fired.load(std::memory_order_relaxed)) return;
  const size_t c = at.find(':');
  if (c == std::string::npos || at.compare(0, c, op) != 0 ||
      at.compare(c + 1, std::string::npos, stage) != 0)
    return;
  fired = true;
  std::fprintf(stderr, "XBNG_TEST_CRASH_AT=%s: killing myself now\n", at.c_str());
  std::fflush(stderr);
  raise(SIGKILL);
}

}  // namespace xbng::agent
