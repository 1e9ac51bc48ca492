// FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING, the fuse module's enable_uring on): the
// kernel hands each request to an entry this daemon registered, and takes the reply with the
// command that asks for the next request (FUSE_IO_URING_CMD_COMMIT_AND_FETCH), so a request costs
// one io_uring_enter of the daemon's instead of a read(2) and a writev(2) on /dev/fuse.
// Documentation/filesystems/fuse/fuse-io-uring.rst describes the kernel's side.
//
// The kernel keeps one queue a CPU and gives a request to the queue of the CPU its caller runs
// on; a queue is served by threads pinned to that CPU, each with a ring of its own and one entry
// (a header buffer and a payload buffer as large as the biggest request), so that a request
// waiting for the disk holds up only its own thread, as a /dev/fuse worker does. A request is
// rebuilt as /dev/fuse would carry it (header, per-opcode argument, payload) in front of the
// payload it arrived in and given to libfuse's fuse_session_process_buf: the same handlers
// answer both transports. Its reply reaches the session's writev hook (fuse_transport.cpp), which
// hands it here (take_reply) by the request's unique. What the kernel still sends through
// /dev/fuse (INIT, FORGET, INTERRUPT) and every notification keep going that way.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <memory>
#include <string>

#include "common/error.h"

struct fuse_session;

namespace fid::fs {

class UringQueues {
 public:
  // Registers `threads` entries (at least one a queue) for the kernel's queues, one a possible
  // CPU, each entry's payload `payload_size` bytes; returns once every thread has registered
  // (the kernel then sends its requests through them), or the first refusal.
  static Result<std::unique_ptr<UringQueues>> start(fuse_session* se, int fuse_fd, unsigned threads, size_t payload_size);
  ~UringQueues();  // stop()
  UringQueues(const UringQueues&) = delete;
  UringQueues& operator=(const UringQueues&) = delete;

  // Ends the threads; requests the kernel queues after this wait for the connection's end.
  void stop();
  unsigned queues() const;

  // A reply written on a thread that serves a ring request with this reply's unique: the reply
  // goes to that request's entry (and is committed once the handler returns); `written` gets
  // what writev would return. False: the reply is not for a ring request (it goes to /dev/fuse).
  static bool take_reply(const iovec* iov, int count, ssize_t& written);

  // The kernel's queues: one a possible CPU (/sys/devices/system/cpu/possible).
  static unsigned possible_cpus();

  struct Impl;

 private:
  explicit UringQueues(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether this kernel lets a daemon serve over io_uring: empty, or why not (naming the module
// parameter to turn on).
std::string uring_unavailable_reason();

}  // namespace fid::fs
