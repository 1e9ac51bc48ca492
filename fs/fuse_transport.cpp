// See fuse_transport.h.
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include "fs/fuse_transport.h"

#include <fuse3/fuse_lowlevel.h>
#include <linux/fuse.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "common/log.h"
#include "fs/fuse_uring.h"

namespace fid::fs {
namespace {

// FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39, Linux 6.6): a file opened with direct I/O may still
// be mapped shared (np.load(mmap_mode="r")). Debian 12's headers (7.38) do not name it.
constexpr uint32_t kDirectIoAllowMmap2 = uint32_t{1} << (36 - 32);  // in flags2
// FUSE_OVER_IO_URING (protocol 7.42, Linux 6.14): the kernel offers it where the fuse module's
// enable_uring is on.
constexpr uint32_t kOverIoUring2 = uint32_t{1} << (41 - 32);  // in flags2

// What the kernel offered in INIT, the first request of a connection, answered before any other
// (a process serves one connection).
std::atomic<uint64_t> init_unique{0};
std::atomic<bool> kernel_offers_parallel_dirops{false};
std::atomic<bool> kernel_offers_direct_io_mmap{false};
std::atomic<bool> direct_io_mmap_taken{false};
std::atomic<bool> kernel_offers_uring{false};

// The session and its options, set before the first request.
fuse_session* session = nullptr;
TransportOptions options;
std::mutex uring_mu;
std::unique_ptr<UringQueues> uring;  // once INIT took FUSE_OVER_IO_URING and the queues registered

// What INIT settled: the transport in use, and why transport=uring could not be had.
std::mutex settle_mu;
std::condition_variable settle_cv;
bool settled = false;
std::string failure;

void settle(const std::string& in_use, const std::string& why, unsigned threads_a_request = options.threads) {
  if (options.in_use) options.in_use(in_use, threads_a_request);
  std::lock_guard lock(settle_mu);
  if (settled) return;
  settled = true;
  failure = why;
  settle_cv.notify_all();
}

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
      kernel_offers_uring.store((flags & FUSE_INIT_EXT) && (flags2 & kOverIoUring2));
      init_unique.store(in.unique);
    }
  }
  return n;
}

// After the INIT reply that took FUSE_OVER_IO_URING: the queues, before any other request.
void start_uring(uint32_t max_write, uint32_t max_pages) {
  // The kernel refuses an entry whose payload buffer is smaller than the largest request or reply.
  const size_t payload = std::max<size_t>({8192, max_write, size_t{max_pages} * static_cast<size_t>(::getpagesize())});
  auto queues = UringQueues::start(session, fuse_session_fd(session), options.threads, payload);
  if (!queues.ok()) {
    if (options.transport == config::Transport::uring) {
      settle("dev", fmt::format("FUSE over io_uring could not be set up: {}", queues.error().message));
    } else {
      log_warn("FUSE over io_uring could not be set up ({}); requests go through /dev/fuse", queues.error().message);
      settle("dev", "");
    }
    return;
  }
  const unsigned nr_queues = (*queues)->queues(), entries = std::max(options.threads, nr_queues);
  const std::string in_use = fmt::format("uring ({} queues, {} entries of {} KiB)", nr_queues, entries, payload >> 10);
  log_info("requests come through FUSE over io_uring: {}", in_use);
  {
    std::lock_guard lock(uring_mu);
    uring = std::move(*queues);
  }
  settle(in_use, "", entries / nr_queues);
}

ssize_t write_reply(int fd, iovec* iov, int count, void*) {
  ssize_t written = 0;
  if (UringQueues::take_reply(iov, count, written)) return written;
  // libfuse sends a reply as its header, then the argument (fuse_init_out for INIT).
  const uint64_t init = init_unique.load();
  bool take_uring = false;
  uint32_t max_write = 0, max_pages = 0;
  if (init != 0 && count >= 2 && iov[0].iov_len >= sizeof(fuse_out_header) &&
      iov[1].iov_len >= offsetof(fuse_init_out, flags) + sizeof(uint32_t)) {
    fuse_out_header out;
    std::memcpy(&out, iov[0].iov_base, sizeof out);
    if (out.unique == init && out.error == 0) {
      char* arg = static_cast<char*>(iov[1].iov_base);
      uint32_t flags;
      std::memcpy(&flags, arg + offsetof(fuse_init_out, flags), sizeof flags);
      if (kernel_offers_parallel_dirops.load()) flags |= FUSE_PARALLEL_DIROPS;
      uint32_t flags2 = 0;
      const bool has_flags2 = iov[1].iov_len >= offsetof(fuse_init_out, flags2) + sizeof(uint32_t);
      if (has_flags2) std::memcpy(&flags2, arg + offsetof(fuse_init_out, flags2), sizeof flags2);
      if (kernel_offers_direct_io_mmap.load() && has_flags2) {
        flags2 |= kDirectIoAllowMmap2;
        direct_io_mmap_taken.store(true);
      }
      // Only when asked for: over io_uring a Python reader's kernel time doubles (docs/MOUNT.md), so
      // auto means /dev/fuse.
      take_uring = kernel_offers_uring.load() && has_flags2 && options.transport == config::Transport::uring &&
                   iov[1].iov_len >= offsetof(fuse_init_out, max_pages) + sizeof(uint16_t);
      if (take_uring) {
        flags2 |= kOverIoUring2;
        std::memcpy(&max_write, arg + offsetof(fuse_init_out, max_write), sizeof max_write);
        uint16_t pages = 0;
        std::memcpy(&pages, arg + offsetof(fuse_init_out, max_pages), sizeof pages);
        max_pages = (flags & FUSE_MAX_PAGES) ? pages : 32;  // the kernel's default without FUSE_MAX_PAGES
      }
      if (flags2 != 0) {
        flags |= FUSE_INIT_EXT;
        std::memcpy(arg + offsetof(fuse_init_out, flags2), &flags2, sizeof flags2);
      }
      std::memcpy(arg + offsetof(fuse_init_out, flags), &flags, sizeof flags);
      init_unique.store(0);
      if (!take_uring)
        settle("dev", options.transport == config::Transport::uring ? "the kernel did not offer FUSE over io_uring in INIT" : "");
    }
  }
  const ssize_t n = ::writev(fd, iov, count);
  if (take_uring && n >= 0) start_uring(max_write, max_pages);
  return n;
}

}  // namespace

int use_own_transport(fuse_session* se, TransportOptions opts) {
  session = se;
  options = std::move(opts);
  fuse_custom_io io{};
  io.read = read_request;
  io.writev = write_reply;
  const int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se));
  if (rc != 0) settle("dev", options.transport == config::Transport::uring ? "the FUSE transport could not be set" : "");
  return rc;
}

std::string transport_failure() {
  std::unique_lock lock(settle_mu);
  if (!settle_cv.wait_for(lock, std::chrono::seconds(30), [] { return settled; }))
    return "the FUSE transport was not settled 30 s after INIT";
  return failure;
}

bool kernel_maps_direct_io_files() { return direct_io_mmap_taken.load(); }

void stop_own_transport() {
  std::unique_ptr<UringQueues> queues;
  {
    std::lock_guard lock(uring_mu);
    queues = std::move(uring);
  }
  if (queues) queues->stop();
}

}  // namespace fid::fs
