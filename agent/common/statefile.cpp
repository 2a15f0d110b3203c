// State-file I/O: see statefile.h for what every state file is protected from.
#include "common/statefile.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace xbng::agent::statefile {

namespace {

std::string err(const std::string& path, const std::string& what) { return path + ": " + what; }
std::string sys(const std::string& path, const char* doing, int e) {
  return err(path, std::string(doing) + ": " + std::strerror(e));
}

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// dir/base of a path ("" dir = the working directory).
void split(const std::string& path, std::string* dir, std::string* base) {
  const size_t s = path.find_last_of('/');
  *dir = s == std::string::npos ? std::string(".") : s == 0 ? std::string("/") : path.substr(0, s);
  *base = s == std::string::npos ? path : path.substr(s + 1);
}

bool ensure_dir(const std::string& dir, std::string* error) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return true;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    *error = err(dir, "creating the state directory: " + ec.message());
    return false;
  }
  ::chmod(dir.c_str(), 0700);
  return true;
}

// ELOOP from O_NOFOLLOW: the last component is a symbolic link.
std::string open_error(const std::string& path, int e) {
  if (e == ELOOP)
    return err(path,
               "is a symbolic link: refused (state files are never read or written "
               "through a link; replace it with the file itself)");
  return sys(path, "cannot open", e);
}

std::string not_regular(const std::string& path, mode_t mode) {
  return err(path, "is " + kind_of(mode) + ", not a regular file: refused");
}

}  // namespace

std::string kind_of(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFLNK:
      return "a symbolic link";
    case S_IFIFO:
      return "a FIFO";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    default:
      return "not a file";
  }
}

ReadStatus read(const std::string& path, size_t max_bytes, std::string* out, std::string* error) {
  out->clear();
  Fd f(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (f.fd < 0) {
    if (errno == ENOENT) return ReadStatus::kAbsent;
    *error = open_error(path, errno);
    return ReadStatus::kError;
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    *error = sys(path, "fstat", errno);
    return ReadStatus::kError;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = not_regular(path, st.st_mode);
    return ReadStatus::kError;
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    *error = err(path, std::to_string(st.st_size) + " bytes, more than such a file can be (" +
                           std::to_string(max_bytes) + "): refused");
    return ReadStatus::kError;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out->size()) {
    const ssize_t n = ::read(f.fd, out->data() + got, out->size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = sys(path, "reading", errno);
      return ReadStatus::kError;
    }
    if (n == 0) break;  // shrank meanwhile: what is there
    got += static_cast<size_t>(n);
  }
  out->resize(got);
  return ReadStatus::kOk;
}

bool write_atomic(const std::string& path, std::string_view data, mode_t mode, bool durable,
                  std::string* error) {
  std::string dir, base;
  split(path, &dir, &base);
  if (base.empty()) {
    *error = err(path, "not a file name");
    return false;
  }
  if (!ensure_dir(dir, error)) return false;
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.fd < 0) {
    *error = sys(dir, "cannot open the state directory", errno);
    return false;
  }
  struct stat st {};
  if (::fstatat(d.fd, base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
    *error = not_regular(path, st.st_mode) + " (not replaced)";
    return false;
  }
  // A name nobody can have prepared: O_EXCL|O_NOFOLLOW fail on anything
  // already there, a link included.
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 16; ++attempt) {
    uint8_t r[8];
    if (::getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) {
      *error = sys(path, "getrandom", errno);
      return false;
    }
    static const char* hex = "0123456789abcdef";
    tmp.assign(1, '.');  // (append, not operator+: GCC 12 -O3 -Wrestrict false positive)
    tmp.append(base).append(".tmp-");
    for (uint8_t b : r) tmp += hex[b >> 4], tmp += hex[b & 15];
    fd = ::openat(d.fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno != EEXIST) {
      *error = sys(dir + "/" + tmp, "cannot create", errno);
      return false;
    }
  }
  if (fd < 0) {
    *error = err(path, "cannot find a free temporary name");
    return false;
  }
  Fd f(fd);
  ::fchmod(f.fd, mode);  // whatever the umask
  const char* p = data.data();
  size_t left = data.size();
  int e = 0;
  while (left && !e) {
    const ssize_t n = ::write(f.fd, p, left);
    if (n < 0) {
      if (errno != EINTR) e = errno;
      continue;
    }
    p += n, left -= static_cast<size_t>(n);
  }
  if (!e && durable && ::fsync(f.fd) != 0) e = errno;
  if (!e && ::renameat(d.fd, tmp.c_str(), d.fd, base.c_str()) != 0) e = errno;
  if (e) {
    ::unlinkat(d.fd, tmp.c_str(), 0);
    *error = sys(path, "cannot write", e);
    return false;
  }
  if (durable) ::fsync(d.fd);
  return true;
}

int open_in_place(const std::string& path, mode_t mode, std::string* error) {
  std::string dir, base;
  split(path, &dir, &base);
  if (!ensure_dir(dir, error)) return -1;
  // O_NONBLOCK: a FIFO must not hold the start (it is refused below).
  int fd =
      ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, mode);
  if (fd < 0) {
    *error = open_error(path, errno);
    return -1;
  }
  Fd f(fd);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    *error = sys(path, "fstat", errno);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = not_regular(path, st.st_mode);
    return -1;
  }
  if (st.st_nlink != 1) {
    *error = err(path, "has " + std::to_string(st.st_nlink) +
                           " hard links: refused (writing it would change a file elsewhere)");
    return -1;
  }
  // Back to blocking I/O (no effect on a regular file, but no surprise either).
  ::fcntl(f.fd, F_SETFL, ::fcntl(f.fd, F_GETFL) & ~O_NONBLOCK);
  f.fd = -1;
  return fd;
}

}  // namespace xbng::agent::statefile
