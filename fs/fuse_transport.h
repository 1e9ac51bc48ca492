// The session's traffic on /dev/fuse: plain read and writev, through libfuse's custom I/O, so
// that the INIT reply can take what libfuse 3.14 (Debian 12) does not ask the kernel for:
// * parallel lookups: libfuse before 3.17 takes FUSE_CAP_PARALLEL_DIROPS in `want` but never
//   sends FUSE_PARALLEL_DIROPS to the kernel (libfuse commit c990534, #861), so the kernel held a
//   folder's lock for each LOOKUP and READDIR, and lookups in one folder ran one at a time;
// * shared maps of files opened with direct I/O (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6), which
//   libfuse 3.14 does not know; without it a direct-I/O file cannot be mapped (ENODEV);
// * FUSE over io_uring (FUSE_OVER_IO_URING, Linux 6.14), which libfuse gains only in 3.18: when
//   the kernel offers it and the mount's transport setting allows it, the INIT reply takes it and
//   the queues of fs/fuse_uring.h are registered before the reply returns; the replies to their
//   requests reach the writev hook too and go back to their ring entries.
#pragma once

#include <functional>
#include <string>

#include "config/config.h"

struct fuse_session;

namespace fid::fs {

struct TransportOptions {
  config::Transport transport = config::Transport::auto_;
  unsigned threads = 0;  // the mount's `threads`: ring entries (one a thread), at least one a CPU
  // Called once INIT has settled the transport: "uring (N queues, M entries of K KiB)" or "dev",
  // and how many threads can answer any one request (a queue's over io_uring).
  std::function<void(const std::string& in_use, unsigned threads_a_request)> in_use;
};

// Installs the transport on a mounted session (after fuse_session_mount). Returns 0 or -errno.
int use_own_transport(fuse_session* se, TransportOptions options);
// Once INIT is answered: why transport=uring could not be had (then the mount should end), or
// empty. Waits (at most 30 s) for the transport to settle, which follows INIT's reply at once.
std::string transport_failure();
// Ends the io_uring queues, if any (before the session unmounts).
void stop_own_transport();

// After INIT: whether the kernel maps files opened with direct I/O (it offered, and we took,
// FUSE_DIRECT_IO_ALLOW_MMAP).
bool kernel_maps_direct_io_files();

}  // namespace fid::fs
