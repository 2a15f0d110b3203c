// State files: what the agent keeps on disk between runs (the store journal,
// the DHCP lease table, the DHCPv6 server DUID). Each is a path in a state
// directory that a mistake, a restore from backup or a hostile local user
// can turn into a symbolic link, a FIFO, a device, a directory or a huge
// file. One place decides how they are opened, so that none of them:
//   - is read or written through a link (O_NOFOLLOW; a link is refused);
//   - blocks the start (O_NONBLOCK: a FIFO opens at once, then is refused
//     as not a regular file);
//   - makes the agent allocate what the file does not hold (the size is
//     checked with fstat against the caller's bound before reading);
//   - is left half-written: a replacement is a new file made in the same
//     directory with O_CREAT|O_EXCL|O_NOFOLLOW under a random name, written,
//     fsync'ed, renamed over the path, and the directory fsync'ed.
// Every error message starts with the path.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace xbng::agent::statefile {

// "a symbolic link", "a FIFO", "a directory", ...: what a non-regular file is.
std::string kind_of(mode_t mode);

enum class ReadStatus { kOk, kAbsent, kError };

// Reads the whole of `path` into *out. kAbsent: no such file (a first
// start). kError, *error set: a link, not a regular file, larger than
// max_bytes, or unreadable.
ReadStatus read(const std::string& path, size_t max_bytes, std::string* out, std::string* error);

// Replaces `path` with `data` atomically (see above). The parent directory is
// created (0700) when missing. Refuses, changing nothing, when `path` exists
// and is not a regular file. durable: fsync the file and the directory
// (state that must survive a power cut); without it a crash of the process
// still never leaves a partial file.
bool write_atomic(const std::string& path, std::string_view data, mode_t mode, bool durable,
                  std::string* error);

// Opens `path` read-write for in-place updates (the journal), creating it
// with `mode` (and its directory, 0700) when missing. Refuses a link, a file
// that is not regular and a regular file with other hard links (writing it
// would change a file elsewhere). The descriptor, or -1 with *error set.
int open_in_place(const std::string& path, mode_t mode, std::string* error);

}  // namespace xbng::agent::statefile
