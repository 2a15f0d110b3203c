#include "api/listener.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "config/config.h"

namespace xbng::agent {

namespace {

std::string errstr(int e) { return std::strerror(e); }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

sockaddr_un unix_addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    throw std::runtime_error(fmt::format("unix socket path {} is too long ({} bytes, at most {})",
                                         path, path.size(), sizeof a.sun_path - 1));
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

// A rate-limited log line: at most one per 10 s per call site.
bool log_now(std::atomic<int64_t>* last) {
  const int64_t t = now_ns();
  int64_t l = last->load();
  return t - l > 10'000'000'000 && last->compare_exchange_strong(l, t);
}

}  // namespace

size_t connections_within_fd_limit(size_t per_connection, size_t reserve) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit up = rl;
    up.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up;
  }
  if (rl.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  if (rl.rlim_cur <= reserve) return 0;
  return static_cast<size_t>((rl.rlim_cur - reserve) / per_connection);
}

Listener::Listener(const std::string& address, size_t max_connections)
    : address_(address), max_(max_connections) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(fmt::format("pipe: {}", errstr(errno)));
  // Spare descriptor: when accept(2) fails with EMFILE, it is closed to
  // accept-and-close the pending connection, then reopened.
  reserve_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  try {
    if (address.rfind("unix:", 0) == 0)
      bind_unix(address.substr(address.rfind("unix://", 0) == 0 ? 7 : 5));
    else
      bind_tcp(address);
  } catch (...) {
    for (int f : {wake_[0], wake_[1], reserve_})
      if (f >= 0) close(f);
    throw;
  }
}

void Listener::bind_unix(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty() || path[0] != '/')
    throw std::runtime_error(fmt::format("--grpc {}: expected unix:///absolute/path", address_));
  const sockaddr_un target = unix_addr(path);
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error(
        fmt::format("cannot create the directory of {}: {}", path, ec.message()));

  // What is at the path already. Called with the pin directory locked, so
  // no other xbngd of this data plane is creating it concurrently.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw std::runtime_error(fmt::format(
          "{} exists and is not a socket: refusing to remove it. Move it away or choose another "
          "grpc.listen (--grpc)",
          path));
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) throw std::runtime_error(fmt::format("socket: {}", errstr(errno)));
    const int rc = connect(probe, reinterpret_cast<const sockaddr*>(&target), sizeof target);
    const int e = errno;
    close(probe);
    if (rc == 0 || e == EAGAIN)
      throw std::runtime_error(fmt::format(
          "{}: another process is serving on this socket (another xbngd with another pin "
          "directory?): refusing to replace it. Stop it or choose another grpc.listen (--grpc)",
          path));
    if (e != ECONNREFUSED)
      throw std::runtime_error(
          fmt::format("{}: cannot tell whether the socket is stale: {}", path, errstr(e)));
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      throw std::runtime_error(
          fmt::format("removing the stale socket {}: {}", path, errstr(errno)));
    spdlog::info("removed the stale socket {} (nobody served on it)", path);
  } else if (errno != ENOENT) {
    throw std::runtime_error(fmt::format("{}: {}", path, errstr(errno)));
  }

  // Bind inside a private 0700 directory next to the target, restrict the
  // socket, then rename it into place: at the final path it is 0600 from
  // its first instant, whatever the process umask.
  std::string tmpl = (dir / ".xbngd-XXXXXX").string();
  if (!mkdtemp(tmpl.data()))
    throw std::runtime_error(fmt::format("mkdtemp {}: {}", tmpl, errstr(errno)));
  const std::string tmp = tmpl + "/s";
  auto fail = [&](const std::string& what, int e) {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    unlink(tmp.c_str());
    rmdir(tmpl.c_str());
    throw std::runtime_error(fmt::format("{}: {}", what, errstr(e)));
  };
  const sockaddr_un a = unix_addr(tmp);
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) fail("socket", errno);
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) fail("bind " + tmp, errno);
  if (chmod(tmp.c_str(), 0600) != 0) fail("chmod 0600 " + tmp, errno);
  if (listen(fd_, SOMAXCONN) != 0) fail("listen " + tmp, errno);
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0)
    fail(fmt::format("moving the socket to {}", path), errno);
  rmdir(tmpl.c_str());
  if (lstat(path.c_str(), &st) == 0) {
    path_dev_ = st.st_dev;
    path_ino_ = st.st_ino;
  }
  path_ = path;
}

void Listener::bind_tcp(const std::string& hostport) {
  std::string host;
  uint16_t port = 0;
  if (auto e = parse_listen(hostport, &host, &port))
    throw std::runtime_error(fmt::format("--grpc {}: {}", hostport, *e));
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    throw std::runtime_error(fmt::format("--grpc {}: {}", hostport, gai_strerror(rc)));
  std::string why;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      fd_ = fd;
      break;
    }
    why = errstr(errno);
    close(fd);
  }
  freeaddrinfo(res);
  if (fd_ < 0) throw std::runtime_error(fmt::format("gRPC cannot listen on {}: {}", hostport, why));
}

void Listener::start(std::function<void(int)> handoff) {
  handoff_ = std::move(handoff);
  heartbeat_ns_ = now_ns();
  thread_ = std::thread([this] { loop(); });
}

size_t Listener::prune_locked() {
  std::erase_if(conns_, [](const Conn& c) {
    struct stat st {};
    return fstat(c.fd, &st) != 0 || st.st_ino != c.ino || st.st_dev != c.dev;
  });
  return conns_.size();
}

void Listener::loop() {
  static std::atomic<int64_t> last_refused{0}, last_error{0};
  pollfd p[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
  while (!stop_) {
    heartbeat_ns_ = now_ns();
    const int n = poll(p, 2, 1000);
    if (stop_) break;
    if (n <= 0 || !(p[0].revents & POLLIN)) {
      std::lock_guard l(mu_);
      prune_locked();
      continue;
    }
    for (int burst = 0; burst < 64 && !stop_; ++burst) {
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) {
        const int e = errno;
        if (e == EAGAIN || e == EINTR || e == ECONNABORTED) break;
        ++errors_;
        if (log_now(&last_error))
          spdlog::error(
              "gRPC {}: accept: {} ({} open connections, at most {}); refusing "
              "connections until descriptors free up",
              address_, errstr(e), stats().open, max_);
        if ((e == EMFILE || e == ENFILE) && reserve_ >= 0) {
          // Take the pending connection with the spare descriptor and
          // close it, so that the backlog drains instead of filling.
          close(reserve_);
          int x = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
          if (x >= 0) close(x);
          reserve_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
          if (x >= 0) {
            ++refused_;
            continue;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        break;
      }
      bool room;
      struct stat st {};
      fstat(c, &st);
      {
        std::lock_guard l(mu_);
        room = conns_.size() < max_ || prune_locked() < max_;
        if (room) conns_.push_back({c, st.st_dev, st.st_ino});
      }
      if (!room) {
        close(c);
        const uint64_t r = ++refused_;
        if (log_now(&last_refused))
          spdlog::warn(
              "gRPC {}: {} connections open, the maximum (grpc.max_connections): "
              "refusing new ones ({} refused so far)",
              address_, max_, r);
        continue;
      }
      ++accepted_;
      handoff_(c);
    }
  }
}

ListenerStats Listener::stats() {
  ListenerStats s;
  s.accepted = accepted_;
  s.refused = refused_;
  s.accept_errors = errors_;
  s.max = max_;
  std::lock_guard l(mu_);
  s.open = prune_locked();
  return s;
}

bool Listener::has_room() {
  std::lock_guard l(mu_);
  return prune_locked() < max_;
}

bool Listener::alive(double seconds) const {
  return thread_.joinable() && static_cast<double>(now_ns() - heartbeat_ns_.load()) < seconds * 1e9;
}

void Listener::stop() {
  if (stop_.exchange(true)) return;
  if (wake_[1] >= 0) {
    char b = 1;
    (void)!write(wake_[1], &b, 1);
  }
  if (thread_.joinable()) thread_.join();
}

Listener::~Listener() {
  stop();
  if (fd_ >= 0) close(fd_);
  // Only our own socket: a path replaced since is someone else's.
  struct stat st {};
  if (!path_.empty() && lstat(path_.c_str(), &st) == 0 && st.st_dev == path_dev_ &&
      st.st_ino == path_ino_)
    unlink(path_.c_str());
  for (int f : {wake_[0], wake_[1], reserve_})
    if (f >= 0) close(f);
}

// ---- relay ----------------------------------------------------------------------

UnixRelay::UnixRelay(std::string target) : target_(std::move(target)) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(fmt::format("pipe: {}", errstr(errno)));
}

UnixRelay::~UnixRelay() {
  stop_ = true;
  char b = 1;
  (void)!write(wake_[1], &b, 1);
  std::list<Pipe> all;
  {
    std::lock_guard l(mu_);
    all.swap(pipes_);
  }
  for (auto& p : all)
    if (p.thread.joinable()) p.thread.join();
  close(wake_[0]);
  close(wake_[1]);
}

void UnixRelay::add(int client) {
  std::lock_guard l(mu_);
  // Reap finished pipes.
  for (auto it = pipes_.begin(); it != pipes_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = pipes_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  pipes_.push_back({std::thread([this, client, done] {
                      run(client);
                      *done = true;
                    }),
                    done});
}

void UnixRelay::run(int client) {
  int up = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_un a = unix_addr(target_);
  if (up < 0 || connect(up, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    spdlog::error("gRPC relay: connecting to {}: {}", target_, errstr(errno));
    if (up >= 0) close(up);
    close(client);
    return;
  }
  fcntl(up, F_SETFL, O_NONBLOCK);
  // Bytes both ways until either side closes. The buffers are small: TLS
  // records are 16 KB at most.
  std::vector<char> buf(64 * 1024);
  int fds[2] = {client, up};
  bool open_dir[2] = {true, true};  // 0: client -> up, 1: up -> client
  while (!stop_ && (open_dir[0] || open_dir[1])) {
    // A closed direction is left out (-1): its HUP would wake poll for ever.
    pollfd p[3] = {{open_dir[0] ? client : -1, POLLIN, 0},
                   {open_dir[1] ? up : -1, POLLIN, 0},
                   {wake_[0], POLLIN, 0}};
    if (poll(p, 3, -1) < 0 && errno != EINTR) break;
    if (p[2].revents) break;
    bool fail = false;
    for (int d = 0; d < 2 && !fail; ++d) {
      if (!open_dir[d] || !(p[d].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[d], buf.data(), buf.size());
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        open_dir[d] = false;
        shutdown(fds[1 - d], SHUT_WR);
        if (n < 0) fail = true;
        continue;
      }
      // Blocking-ish write: wait for room on the other side.
      for (ssize_t off = 0; off < n && !fail && !stop_;) {
        const ssize_t w =
            send(fds[1 - d], buf.data() + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
        if (w > 0) {
          off += w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
          pollfd q[2] = {{fds[1 - d], POLLOUT, 0}, {wake_[0], POLLIN, 0}};
          if (poll(q, 2, 30000) <= 0 || q[1].revents) fail = true;
        } else {
          fail = true;
        }
      }
    }
    if (fail) break;
  }
  close(up);
  close(client);
}

}  // namespace xbng::agent
