// The gRPC API's listening socket, owned by xbngd rather than by gRPC, so
// that connections are bounded and a lack of file descriptors is survived:
//  - at most `max_connections` are open at once; beyond that a connection
//    is accepted and closed at once (refused, counted): a flood never runs
//    the process out of descriptors;
//  - accept(2) failing with EMFILE/ENFILE drains the backlog through a
//    reserved descriptor and keeps listening (gRPC 1.51's own listener
//    stops accepting for good on the first EMFILE);
//  - a unix socket is created race-free: bound in a fresh 0700 directory,
//    chmod 0600, then renamed into place (never reachable with looser
//    permissions, whatever the umask). Only a stale socket is ever removed
//    from the path (never a regular file, nor a socket someone serves on),
//    and only by the holder of the pin directory's lock (PinLock).
// Accepted connections are handed to `handoff`, which owns them; a
// connection is counted until the descriptor handed over is closed (checked
// by inode, so nothing needs to tell the listener).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace xbng::agent {

struct ListenerStats {
  uint64_t accepted = 0;       // connections handed over
  uint64_t refused = 0;        // closed at once: max_connections reached
  uint64_t accept_errors = 0;  // accept(2) failures (EMFILE, ENFILE, ENOMEM...)
  size_t open = 0;             // connections open now
  size_t max = 0;              // max_connections
};

class Listener {
 public:
  // `address`: unix:///path or HOST:PORT. Binds and listens; accepting
  // starts with start(). Throws std::runtime_error.
  Listener(const std::string& address, size_t max_connections);
  ~Listener();  // stops accepting; removes the unix socket if it is still ours
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  void start(std::function<void(int fd)> handoff);
  void stop();

  ListenerStats stats();
  // The accept loop went round within the last `seconds`.
  bool alive(double seconds = 3.0) const;
  // A new connection would be accepted now (below max_connections).
  bool has_room();
  const std::string& address() const { return address_; }
  const std::string& socket_path() const { return path_; }  // empty for TCP

 private:
  void loop();
  size_t prune_locked();  // forgets closed connections; returns how many remain
  void bind_unix(const std::string& path);
  void bind_tcp(const std::string& hostport);

  struct Conn {
    int fd;
    dev_t dev;
    ino_t ino;
  };
  std::string address_, path_;
  dev_t path_dev_ = 0;
  ino_t path_ino_ = 0;
  int fd_ = -1, wake_[2] = {-1, -1}, reserve_ = -1;
  size_t max_;
  std::function<void(int)> handoff_;
  std::mutex mu_;
  std::vector<Conn> conns_;
  std::atomic<uint64_t> accepted_{0}, refused_{0}, errors_{0};
  std::atomic<int64_t> heartbeat_ns_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Copies bytes between each accepted connection and a unix socket served by
// gRPC (the TLS listener: gRPC only takes descriptors of plaintext
// connections). A thread per connection, as many as the Listener allows.
class UnixRelay {
 public:
  explicit UnixRelay(std::string target);
  ~UnixRelay();             // ends every relayed connection
  void add(int client_fd);  // takes ownership

 private:
  void run(int client);
  struct Pipe {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::string target_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::list<Pipe> pipes_;
};

// Raises RLIMIT_NOFILE's soft limit to the hard limit and returns how many
// connections fit in it, with `reserve` descriptors kept for everything
// else and `per_connection` descriptors per connection.
size_t connections_within_fd_limit(size_t per_connection, size_t reserve);

}  // namespace xbng::agent
