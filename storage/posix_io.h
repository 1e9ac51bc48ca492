// Whole reads and writes over pread(2)/write(2), retrying short transfers and EINTR: the record
// sources and the disk cache read and write files through these.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>

namespace fid::storage {

// Reads up to len bytes at off (stops early only at end of file). Bytes read (at most
// INT32_MAX), or -errno.
inline int pread_loop(int fd, uint8_t* dst, uint64_t len, uint64_t off) {
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, dst + done, len - done, static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  return static_cast<int>(std::min<uint64_t>(done, INT32_MAX));
}

// Writes all len bytes at the file position. 0, or -errno.
inline int write_loop(int fd, const uint8_t* src, uint64_t len) {
  for (uint64_t done = 0; done < len;) {
    ssize_t n = ::write(fd, src + done, len - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    done += static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace fid::storage
