// Whole reads and writes over pread(2)/write(2)/pwrite(2), retrying short transfers and EINTR, a
// flush to storage, and a file replaced whole: every layer reads and writes files through these.
// They do not know what the descriptor is: `what` (a file's name, a record's path) starts the
// message of an Error, "<what>: <strerror>".
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/fd.h"

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

// Reads exactly len bytes at off; a file that ends before them is EIO ("<what>: ... cut short").
inline Status pread_exact(int fd, uint8_t* dst, uint64_t len, uint64_t off, std::string_view what) {
  Result<uint64_t> n = pread_loop(fd, dst, len, off, what);
  if (!n) return std::move(n).error();
  if (*n != len) return Error{EIO, fmt::format("{}: cut short ({} of {} bytes at {})", what, *n, len, off)};
  return {};
}

// Writes all len bytes at the file position.
inline Status write_loop(int fd, const uint8_t* src, uint64_t len, std::string_view what) {
  for (uint64_t done = 0; done < len;) {
    ssize_t n = ::write(fd, src + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(n < 0 ? errno : EIO, what);
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

// Flushes a file or a folder to storage. A failure (EIO, ENOSPC on delayed allocation) means
// data written before may not be there.
// Opens a file that must be a regular file for reading (a store's index or record: input from
// strangers). Opened without blocking, so that a FIFO or a device in its place is refused at once
// instead of waiting for a writer: "<p>: not a regular file (a FIFO)".
inline Result<Fd> open_regular(const std::filesystem::path& p, int flags = 0) {
  Fd fd(::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | flags));
  if (fd.get() < 0) return io_error(errno, p.string());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io_error(errno, p.string());
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)  ? "a FIFO"
                       : S_ISDIR(st.st_mode) ? "a folder"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                    : "not a file";
    return Error{EINVAL, fmt::format("{}: not a regular file ({})", p.string(), kind)};
  }
  return fd;
}

inline Status fsync_path(const std::filesystem::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(errno, p.string() + ": cannot open to flush");
  const int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  if (err) return io_error(err, p.string() + ": flush to storage failed");
  return {};
}

// Replaces `file` with `bytes` so that a reader sees the old file or the whole new one: a
// temporary file beside it (<file>.tmp-<pid>, made anew with `mode` and never through a symbolic
// link; a crash's leftover of that name is removed), then a rename. Nothing is left behind on a
// failure. No flush: callers that need the bytes on storage call fsync_path.
inline Status write_file_atomically(const std::filesystem::path& file, std::span<const uint8_t> bytes, mode_t mode) {
  const std::string tmp = file.string() + ".tmp-" + std::to_string(::getpid());
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), flags, mode);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0) fd = ::open(tmp.c_str(), flags, mode);
  if (fd < 0) return io_error(errno, tmp + ": cannot create");
  Status written = write_loop(fd, bytes.data(), bytes.size(), tmp + ": write failed");
  // Not an Fd: close's result counts, a failed close can mean the bytes never reached the file.
  if (::close(fd) != 0 && written) written = io_error(errno, tmp + ": write failed");
  if (written && ::rename(tmp.c_str(), file.c_str()) != 0) written = io_error(errno, file.string() + ": cannot replace");
  if (!written) ::unlink(tmp.c_str());
  return written;
}

}  // namespace fid
