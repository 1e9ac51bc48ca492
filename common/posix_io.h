// Whole reads and writes over pread(2)/write(2)/pwrite(2), retrying short transfers and EINTR: the record
// sources, the disk cache, the index cache and relayout read and write files through these. They do not know what the
// descriptor is: `what` (a file's name, a record's path) starts the message of an Error,
// "<what>: <strerror>".
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/error.h"

namespace fid {

inline Error io_error(int code, std::string_view what) { return Error{code, fmt::format("{}: {}", what, std::strerror(code))}; }

// Reads up to len bytes at off; stops early only at end of file. The bytes read.
inline Result<uint64_t> pread_loop(int fd, uint8_t* dst, uint64_t len, uint64_t off, std::string_view what) {
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, dst + done, len - done, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error(errno, what);
    }
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  return done;
}

// Writes all len bytes at the file position.
inline Status write_loop(int fd, const uint8_t* src, uint64_t len, std::string_view what) {
  for (uint64_t done = 0; done < len;) {
    ssize_t n = ::write(fd, src + done, len - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error(errno, what);
    }
    done += static_cast<uint64_t>(n);
  }
  return {};
}

// Writes all len bytes at off.
inline Status pwrite_loop(int fd, const uint8_t* src, uint64_t len, uint64_t off, std::string_view what) {
  for (uint64_t done = 0; done < len;) {
    ssize_t n = ::pwrite(fd, src + done, len - done, static_cast<off_t>(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(n < 0 ? errno : EIO, what);
    done += static_cast<uint64_t>(n);
  }
  return {};
}

}  // namespace fid
