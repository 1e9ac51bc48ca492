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

// FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39, Linux 6.6): a file opened with direct I/O may still
// be mapped shared (np.load(mmap_mode="r")). Debian 12's headers (7.38) do not name it.
constexpr uint32_t kDirectIoAllowMmap2 = uint32_t{1} << (36 - 32);  // in flags2

// What the kernel offered in INIT, the first request of a connection, answered before any other
// (a process serves one connection).
std::atomic<uint64_t> init_unique{0};
std::atomic<bool> kernel_offers_parallel_dirops{false};
std::atomic<bool> kernel_offers_direct_io_mmap{false};
std::atomic<bool> direct_io_mmap_taken{false};

ssize_t read_request(int fd, void* buf, size_t len, void*) {
  const ssize_t n = ::read(fd, buf, len);
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header) + offsetof(fuse_init_in, flags) + sizeof(uint32_t))) {
    fuse_in_header in;
    std::memcpy(&in, buf, sizeof in);
    if (in.opcode == FUSE_INIT) {
      const char* arg = static_cast<const char*>(buf) + sizeof in;
      uint32_t flags = 0, flags2 = 0;
      std::memcpy(&flags, arg + offsetof(fuse_init_in, flags), sizeof flags);
      if ((flags & FUSE_INIT_EXT) &&
          n >= static_cast<ssize_t>(sizeof in + offsetof(fuse_init_in, flags2) + sizeof flags2))
        std::memcpy(&flags2, arg + offsetof(fuse_init_in, flags2), sizeof flags2);
      kernel_offers_parallel_dirops.store((flags & FUSE_PARALLEL_DIROPS) != 0);
      kernel_offers_direct_io_mmap.store((flags & FUSE_INIT_EXT) && (flags2 & kDirectIoAllowMmap2));
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
    if (out.unique == init && out.error == 0) {
      char* arg = static_cast<char*>(iov[1].iov_base);
      uint32_t flags;
      std::memcpy(&flags, arg + offsetof(fuse_init_out, flags), sizeof flags);
      if (kernel_offers_parallel_dirops.load()) flags |= FUSE_PARALLEL_DIROPS;
      if (kernel_offers_direct_io_mmap.load() && iov[1].iov_len >= offsetof(fuse_init_out, flags2) + sizeof(uint32_t)) {
        uint32_t flags2;
        std::memcpy(&flags2, arg + offsetof(fuse_init_out, flags2), sizeof flags2);
        flags2 |= kDirectIoAllowMmap2;
        flags |= FUSE_INIT_EXT;
        std::memcpy(arg + offsetof(fuse_init_out, flags2), &flags2, sizeof flags2);
        direct_io_mmap_taken.store(true);
      }
      std::memcpy(arg + offsetof(fuse_init_out, flags), &flags, sizeof flags);
      init_unique.store(0);
    }
  }
  return ::writev(fd, iov, count);
}

}  // namespace

int use_own_transport(fuse_session* se) {
  fuse_custom_io io{};
  io.read = read_request;
  io.writev = write_reply;
  return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

bool kernel_maps_direct_io_files() { return direct_io_mmap_taken.load(); }

}  // namespace fid::fs
