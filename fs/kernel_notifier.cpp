// See kernel_notifier.h.
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include "fs/kernel_notifier.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fuse3/fuse_lowlevel.h>
#include <dirent.h>
#include <linux/openat2.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "common/fd.h"

namespace fid::fs {

Status KernelNotifier::forget_entry(uint64_t parent, std::string_view name) {
  const int rc = fuse_lowlevel_notify_inval_entry(se_, parent, name.data(), name.size());
  if (rc == 0) return {};
  return Error{-rc, fmt::format("invalidating entry '{}' failed: {}", name, std::strerror(-rc))};
}

void KernelNotifier::forget_inode(uint64_t ino) { (void)fuse_lowlevel_notify_inval_inode(se_, ino, 0, 0); }

Status KernelNotifier::store(uint64_t ino, std::span<const uint8_t> data, std::span<const uint8_t> tail) {
  // One buffer vector of up to two buffers: libfuse writes them with one writev.
  struct {
    fuse_bufvec head;
    fuse_buf more;
  } v{};
  v.head.count = tail.empty() ? 1 : 2;
  v.head.buf[0].mem = const_cast<uint8_t*>(data.data());
  v.head.buf[0].size = data.size();
  v.more.mem = const_cast<uint8_t*>(tail.data());
  v.more.size = tail.size();
  const int rc = fuse_lowlevel_notify_store(se_, ino, 0, &v.head, static_cast<fuse_buf_copy_flags>(0));
  if (rc == 0) return {};
  return Error{-rc, fmt::format("storing inode {} failed: {}", ino, std::strerror(-rc))};
}

Status KernelNotifier::make_known(std::span<const std::string> paths, const std::function<void(size_t i)>& known) {
  // Each path opened O_PATH beneath a root opened for this call (a LOOKUP a component the kernel
  // does not know; no OPEN), all in flight at once through io_uring (its workers run them).
  Result<Fd> root = mount_.open_root();
  if (!root) return std::move(root).error();
  constexpr unsigned kBatch = 64;
  io_uring ring{};
  if (const int rc = io_uring_queue_init(kBatch, &ring, 0); rc < 0)
    return Error{-rc, fmt::format("io_uring_queue_init: {}", std::strerror(-rc))};
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = OwnMount::kResolve;
  int failed = 0;
  for (size_t at = 0; at < paths.size(); at += kBatch) {
    const size_t n = std::min<size_t>(kBatch, paths.size() - at);
    for (size_t i = 0; i < n; ++i) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_openat2(sqe, root->get(), paths[at + i].c_str(), &how);
      sqe->user_data = at + i;
    }
    io_uring_submit(&ring);
    for (size_t i = 0; i < n; ++i) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring, &cqe) != 0) break;
      const int res = cqe->res;
      const size_t done = cqe->user_data;
      io_uring_cqe_seen(&ring, cqe);
      if (res < 0 && failed == 0) failed = -res;
      if (res < 0) continue;
      ::close(res);
      known(done);
    }
  }
  io_uring_queue_exit(&ring);
  if (failed == 0) return {};
  return Error{failed, fmt::format("looking up {} names under {} failed: {}", paths.size(), mount_.mountpoint(), std::strerror(failed))};
}

Status KernelNotifier::list_folder(const std::string& path, std::string_view until) {
  Result<Fd> root = mount_.open_root();
  if (!root) return std::move(root).error();
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW;
  how.resolve = OwnMount::kResolve;
  const char* const rel = path.empty() ? "." : path.c_str();
  const Fd dir(static_cast<int>(::syscall(SYS_openat2, root->get(), rel, &how, sizeof how)));
  if (dir.get() < 0) return Error{errno, fmt::format("opening {} in {}: {}", rel, mount_.mountpoint(), std::strerror(errno))};
  // A large buffer, so that the kernel asks for as many entries as a request carries (the first
  // chunk is the one readdir=auto lists with attributes: a 64 KiB one makes about 400 inodes); the
  // listing stops after the chunk that holds `until`.
  constexpr size_t kBuffer = 64 << 10;
  const std::unique_ptr<char[]> buf = std::make_unique_for_overwrite<char[]>(kBuffer);
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir.get(), buf.get(), kBuffer);
    if (n == 0) return {};
    if (n < 0) return Error{errno, fmt::format("listing {} in {}: {}", rel, mount_.mountpoint(), std::strerror(errno))};
    if (until.empty()) continue;
    for (long at = 0; at < n;) {
      const auto* d = reinterpret_cast<const struct dirent64*>(buf.get() + at);
      if (until == d->d_name) return {};
      at += d->d_reclen;
    }
  }
}

}  // namespace fid::fs
