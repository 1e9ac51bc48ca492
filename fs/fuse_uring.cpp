// See fuse_uring.h.
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include "fs/fuse_uring.h"

#include <fmt/format.h>
#include <fuse3/fuse_lowlevel.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/log.h"

namespace fid::fs {
namespace {

// The kernel's ABI (include/uapi/linux/fuse.h, protocol 7.42), which Debian 12's headers (7.38)
// do not have.
constexpr uint32_t kUringCmdRegister = 1;
constexpr uint32_t kUringCmdCommitAndFetch = 2;
struct UringEntryInOut {
  uint64_t flags;
  uint64_t commit_id;   // the request's unique, echoed by the commit
  uint32_t payload_sz;  // bytes of the payload buffer in use, either way
  uint32_t padding;
  uint64_t reserved;
};
struct UringReqHeader {
  char in_out[128];  // fuse_in_header from the kernel, fuse_out_header back
  char op_in[128];   // the opcode's fixed argument (its first), when it has one
  UringEntryInOut ring_ent_in_out;
};
struct UringCmdReq {  // in the SQE's 80-byte command area
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};
static_assert(sizeof(UringReqHeader) == 288 && sizeof(UringCmdReq) == 24);

// A request is rebuilt in front of the payload it arrived in: the payload buffer starts kFront
// bytes into an entry's buffer, room for the header and the largest fixed argument. The fixed
// arguments are multiples of 8 bytes, so the rebuilt request stays 8-byte aligned.
constexpr size_t kFront = sizeof(fuse_in_header) + sizeof(UringReqHeader::op_in);
constexpr uint64_t kStopTag = ~uint64_t{0};

struct Entry {
  UringReqHeader header{};
  std::unique_ptr<uint64_t[]> buffer;  // kFront + payload bytes, 8-byte aligned
  char* payload = nullptr;
  size_t capacity = 0;  // of the payload buffer
  uint64_t unique = 0;  // of the request being served
  bool replied = false;
};

// The entry whose request this thread is answering now (take_reply finds its reply by it).
thread_local Entry* serving = nullptr;

}  // namespace

struct UringQueues::Impl {
  fuse_session* se = nullptr;
  int fuse_fd = -1;
  size_t payload_size = 0;
  unsigned nr_queues = 1;
  Fd stop_fd;
  std::vector<std::thread> threads;
  // Registration: how many threads have tried, the entries each queue has, and the first refusal.
  std::mutex mu;
  std::condition_variable cv;
  unsigned registered = 0;
  std::vector<unsigned> entries;  // by queue
  std::string refusal;
  std::atomic<bool> stopping{false};

  void serve(unsigned qid);
  // Rebuilds the request in entry e, has libfuse answer it (its reply lands in e) and returns
  // the commit id to commit it with.
  uint64_t answer(Entry& e);
  void registration_done(unsigned qid, const std::string& why) {
    std::lock_guard lock(mu);
    ++registered;
    if (why.empty()) ++entries[qid];
    else if (refusal.empty()) refusal = why;
    cv.notify_all();
  }
};

namespace {

io_uring_sqe* fuse_command(io_uring& ring, int fuse_fd, uint32_t op, uint16_t qid, uint64_t commit_id) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  std::memset(sqe, 0, 2 * sizeof(io_uring_sqe));  // a 128-byte SQE
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fuse_fd;
  sqe->cmd_op = op;
  UringCmdReq req{};
  req.commit_id = commit_id;
  req.qid = qid;
  std::memcpy(sqe->cmd, &req, sizeof req);
  return sqe;
}

void pin_to_cpu(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);  // an offline CPU: left unpinned
}

}  // namespace

uint64_t UringQueues::Impl::answer(Entry& e) {
  fuse_in_header in;
  std::memcpy(&in, e.header.in_out, sizeof in);
  const UringEntryInOut meta = e.header.ring_ent_in_out;
  const uint64_t fixed = uint64_t{in.len} - sizeof in - meta.payload_sz;  // the opcode's fixed argument
  e.unique = in.unique;
  e.replied = false;
  if (in.len < sizeof in + meta.payload_sz || fixed > sizeof e.header.op_in || meta.payload_sz > e.capacity) {
    log_error("FUSE over io_uring: a request of {} bytes with a payload of {} does not fit its entry", in.len,
              meta.payload_sz);
  } else {
    char* start = e.payload - sizeof in - fixed;
    std::memcpy(start, &in, sizeof in);
    std::memcpy(start + sizeof in, e.header.op_in, fixed);
    fuse_buf buf{};
    buf.mem = start;
    buf.size = in.len;
    serving = &e;
    fuse_session_process_buf(se, &buf);
    serving = nullptr;
  }
  if (!e.replied) {  // every ring request takes a reply: its entry comes back only with one
    const fuse_out_header out{sizeof(fuse_out_header), -EIO, in.unique};
    std::memcpy(e.header.in_out, &out, sizeof out);
    e.header.ring_ent_in_out.payload_sz = 0;
  }
  return meta.commit_id;
}

void UringQueues::Impl::serve(unsigned qid) {
  pin_to_cpu(qid);  // unpinned, the daemon spent 45 us a file at level 5 against 35-40 (cost_per_file.sh, in turns)
  io_uring ring{};
  io_uring_params params{};
  params.flags = IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  int rc = io_uring_queue_init_params(4, &ring, &params);
  if (rc == -EINVAL) {  // a kernel without deferred task work
    params = {};
    params.flags = IORING_SETUP_SQE128;
    rc = io_uring_queue_init_params(4, &ring, &params);
  }
  if (rc < 0) {
    registration_done(qid, fmt::format("io_uring_queue_init: {}", std::strerror(-rc)));
    return;
  }
  Entry e;
  // Not zeroed: only the pages that requests and replies use become resident.
  e.buffer = std::make_unique_for_overwrite<uint64_t[]>((kFront + payload_size + 7) / 8);
  e.payload = reinterpret_cast<char*>(e.buffer.get()) + kFront;
  e.capacity = payload_size;
  iovec iov[2] = {{&e.header, sizeof e.header}, {e.payload, payload_size}};
  uint64_t stop_count = 0;
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_read(sqe, stop_fd.get(), &stop_count, sizeof stop_count, 0);
  sqe->user_data = kStopTag;
  sqe = fuse_command(ring, fuse_fd, kUringCmdRegister, static_cast<uint16_t>(qid), 0);
  sqe->addr = reinterpret_cast<uint64_t>(iov);
  sqe->len = 2;
  rc = io_uring_submit(&ring);
  // A refused registration completes at once; an accepted one waits for a request.
  io_uring_cqe* cqe = nullptr;
  std::string refused;
  if (rc < 0) refused = fmt::format("io_uring_submit: {}", std::strerror(-rc));
  else if (io_uring_peek_cqe(&ring, &cqe) == 0 && cqe->user_data != kStopTag && cqe->res < 0)
    refused = fmt::format("the kernel refused the ring entry of queue {}: {}", qid, std::strerror(-cqe->res));
  registration_done(qid, refused);
  for (bool running = refused.empty(); running;) {
    rc = io_uring_wait_cqe(&ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) {
      log_error("FUSE over io_uring, queue {}: waiting for a request failed: {}", qid, std::strerror(-rc));
      break;
    }
    const uint64_t tag = cqe->user_data;
    const int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    if (tag == kStopTag) break;
    if (res < 0) {
      // ENOTCONN/ECONNABORTED/ECANCELED: the connection ends (an unmount).
      if (res != -ENOTCONN && res != -ECONNABORTED && res != -ECANCELED && !stopping.load())
        log_error("FUSE over io_uring, queue {}: the kernel ended the entry: {}", qid, std::strerror(-res));
      break;
    }
    const uint64_t commit_id = answer(e);
    fuse_command(ring, fuse_fd, kUringCmdCommitAndFetch, static_cast<uint16_t>(qid), commit_id);
    rc = io_uring_submit(&ring);
    if (rc < 0) {
      log_error("FUSE over io_uring, queue {}: committing a reply failed: {}", qid, std::strerror(-rc));
      break;
    }
  }
  io_uring_queue_exit(&ring);  // cancels this thread's entry
}

bool UringQueues::take_reply(const iovec* iov, int count, ssize_t& written) {
  Entry* e = serving;
  if (e == nullptr || count < 1 || iov[0].iov_len < sizeof(fuse_out_header)) return false;
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  if (out.unique != e->unique || e->replied) return false;
  // The out header goes to the header buffer; the rest, back to back, to the payload buffer.
  size_t payload = iov[0].iov_len - sizeof out;
  for (int i = 1; i < count; ++i) payload += iov[i].iov_len;
  if (payload > e->capacity) {  // cannot happen: a reply is at most max_pages pages, the buffer's size
    log_error("FUSE over io_uring: a reply of {} bytes does not fit its entry's {}", payload, e->capacity);
    return false;  // it goes to /dev/fuse, which knows no such request; the entry answers EIO
  }
  char* at = e->payload;
  std::memmove(at, static_cast<const char*>(iov[0].iov_base) + sizeof out, iov[0].iov_len - sizeof out);
  at += iov[0].iov_len - sizeof out;
  for (int i = 1; i < count; ++i) {
    std::memmove(at, iov[i].iov_base, iov[i].iov_len);
    at += iov[i].iov_len;
  }
  out.len = static_cast<uint32_t>(sizeof out + payload);
  std::memcpy(e->header.in_out, &out, sizeof out);
  e->header.ring_ent_in_out.payload_sz = static_cast<uint32_t>(payload);
  e->replied = true;
  written = static_cast<ssize_t>(out.len);
  return true;
}

unsigned UringQueues::possible_cpus() {
  // "0-N" (possibly "0-3,8-11" on odd machines): the highest CPU number, plus one.
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string text;
  std::getline(in, text);
  unsigned highest = 0, n = 0;
  bool digits = false;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      n = n * 10 + static_cast<unsigned>(c - '0');
      digits = true;
    } else {
      if (digits) highest = std::max(highest, n);
      n = 0;
      digits = false;
    }
  }
  if (digits) highest = std::max(highest, n);
  if (text.empty()) return std::max(1u, std::thread::hardware_concurrency());
  return highest + 1;
}

Result<std::unique_ptr<UringQueues>> UringQueues::start(fuse_session* se, int fuse_fd, unsigned threads, size_t payload_size) {
  auto impl = std::make_unique<Impl>();
  impl->se = se;
  impl->fuse_fd = fuse_fd;
  impl->payload_size = payload_size;
  impl->nr_queues = possible_cpus();
  impl->entries.assign(impl->nr_queues, 0);
  impl->stop_fd = Fd(::eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE));  // a read takes 1: one a thread
  if (impl->stop_fd.get() < 0) return Error{errno, fmt::format("eventfd: {}", std::strerror(errno))};
  // Every queue needs an entry before the kernel uses any; the rest are spread over the queues.
  const unsigned n = std::max(threads, impl->nr_queues);
  for (unsigned i = 0; i < n; ++i) impl->threads.emplace_back([p = impl.get(), qid = i % impl->nr_queues] { p->serve(qid); });
  std::string refusal;
  bool every_queue = false;
  {
    std::unique_lock lock(impl->mu);
    impl->cv.wait(lock, [&] { return impl->registered == n; });
    refusal = impl->refusal;
    every_queue = std::all_of(impl->entries.begin(), impl->entries.end(), [](unsigned k) { return k > 0; });
  }
  std::unique_ptr<UringQueues> queues(new UringQueues(std::move(impl)));
  if (refusal.empty()) return queues;
  // Once every queue has an entry the kernel sends every request through the rings, for good:
  // the entries it took serve, fewer than asked. Otherwise it never used them: /dev/fuse serves.
  if (every_queue) {
    log_warn("FUSE over io_uring: some ring entries were refused ({}); the others serve", refusal);
    return queues;
  }
  queues->stop();
  return Error{EIO, refusal};
}

UringQueues::UringQueues(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UringQueues::~UringQueues() { stop(); }

unsigned UringQueues::queues() const { return impl_->nr_queues; }

void UringQueues::stop() {
  if (impl_->threads.empty()) return;
  impl_->stopping.store(true);
  const uint64_t all = impl_->threads.size();
  (void)!::write(impl_->stop_fd.get(), &all, sizeof all);
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
}

std::string uring_unavailable_reason() {
  std::ifstream in("/sys/module/fuse/parameters/enable_uring");
  if (!in) return "this kernel has no FUSE over io_uring (Linux 6.14 or later built with CONFIG_FUSE_IO_URING)";
  std::string value;
  std::getline(in, value);
  if (value == "Y" || value == "1") return {};
  return "FUSE over io_uring is off in this kernel: as root, echo 1 > /sys/module/fuse/parameters/enable_uring "
         "(or boot with fuse.enable_uring=1)";
}

}  // namespace fid::fs
