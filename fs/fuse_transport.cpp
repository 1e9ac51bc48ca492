// See fuse_transport.h.
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include "fs/fuse_transport.h"

#include <fuse3/fuse_lowlevel.h>
#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fid::fs {
namespace {

// The INIT request's unique id and whether the kernel offered parallel directory operations; INIT
// is the first request of a connection, answered before any other, and a process serves one.
std::atomic<uint64_t> init_unique{0};
std::atomic<bool> kernel_offers_parallel_dirops{false};

ssize_t read_request(int fd, void* buf, size_t len, void*) {
  const ssize_t n = ::read(fd, buf, len);
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header) + sizeof(fuse_init_in::major) * 4)) {
    fuse_in_header in;
    std::memcpy(&in, buf, sizeof in);
    if (in.opcode == FUSE_INIT) {
      uint32_t flags;  // fuse_init_in: major, minor, max_readahead, flags
      std::memcpy(&flags, static_cast<const char*>(buf) + sizeof in + offsetof(fuse_init_in, flags), sizeof flags);
      kernel_offers_parallel_dirops.store((flags & FUSE_PARALLEL_DIROPS) != 0);
      init_unique.store(in.unique);
    }
  }
  return n;
}

ssize_t write_reply(int fd, iovec* iov, int count, void*) {
  // libfuse sends a reply as its header, then the argument (fuse_init_out for INIT).
  const uint64_t init = init_unique.load();
  if (init != 0 && count >= 2 && iov[0].iov_len >= sizeof(fuse_out_header) &&
      iov[1].iov_len >= offsetof(fuse_init_out, flags) + sizeof(uint32_t)) {
    fuse_out_header out;
    std::memcpy(&out, iov[0].iov_base, sizeof out);
    if (out.unique == init && out.error == 0 && kernel_offers_parallel_dirops.load()) {
      uint32_t flags;
      char* arg = static_cast<char*>(iov[1].iov_base);
      std::memcpy(&flags, arg + offsetof(fuse_init_out, flags), sizeof flags);
      flags |= FUSE_PARALLEL_DIROPS;
      std::memcpy(arg + offsetof(fuse_init_out, flags), &flags, sizeof flags);
      init_unique.store(0);
    }
  }
  return ::writev(fd, iov, count);
}

}  // namespace

int use_parallel_dirops_transport(fuse_session* se) {
  fuse_custom_io io{};
  io.read = read_request;
  io.writev = write_reply;
  return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

}  // namespace fid::fs
