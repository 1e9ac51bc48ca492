#include "storage/local_record_source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <mutex>
#include <vector>

#include "index/format.h"
#include "common/posix_io.h"
#include "storage/direct_read.h"

namespace fid::storage {

void RecordSource::read_ranges(std::span<RangeRead> batch) {
  std::latch done(1);
  read_ranges(batch, [&done] { done.count_down(); });
  done.wait();
}

void RecordSource::add_readings(Readings& out) const {
  const SourceCounters& c = counters();
  using K = Reading::Kind;
  out.push_back({"storage_bytes", K::counter, "fidelityfs_storage_bytes_total", "bytes read from the store", c.bytes.load()});
  out.push_back({"storage_reads", K::counter, "fidelityfs_storage_requests_total",
                 "reads (local) or requests (remote) sent to the store", c.requests.load()});
  out.push_back({"storage_retries", K::counter, "fidelityfs_storage_retries_total", "remote requests sent again after a failure",
                 c.retries.load()});
  out.push_back({"storage_in_flight_target", K::gauge, "fidelityfs_storage_in_flight_target_bytes",
                 "bytes the prefetcher keeps loading: bandwidth x latency as measured (0 for a local store)", in_flight_target()});
}

Result<std::span<const uint8_t>> RecordSource::read_scratch(uint32_t record, uint64_t offset, uint64_t len) {
  return read_into_thread_buffer(record, offset, len,
                                 [this](std::span<RangeRead> batch, Done done) { read_ranges(batch, std::move(done)); });
}

Result<std::span<const uint8_t>> RecordSource::read_into_thread_buffer(
    uint32_t record, uint64_t offset, uint64_t len, const std::function<void(std::span<RangeRead>, Done)>& read) {
  thread_local std::vector<uint8_t> buf;
  buf.resize(len);
  RangeRead r{record, offset, {buf.data(), len}, {}};
  std::latch done(1);
  read({&r, 1}, [&done] { done.count_down(); });
  done.wait();
  if (!r.status.ok()) return r.status.error();
  return std::span<const uint8_t>(buf.data(), len);
}

Status RecordSource::read_prefix(uint32_t record, uint64_t len, uint8_t* dst) {
  PrefixRead p{record, len, dst, {}};
  std::latch done(1);
  read_prefixes({&p, 1}, [&done] { done.count_down(); });
  done.wait();
  return p.status;
}

namespace {

constexpr unsigned kRingEntries = 64;  // reads in flight at once per thread (more are issued in turns)
constexpr int kNotRead = INT32_MIN;    // a read the ring did not do (the thread then preads it)
constexpr int kDirectUnopened = -2;    // an O_DIRECT slot not tried yet

// One io_uring per thread, set up on its first use. A ring that fails is drained and dropped, and
// the thread's next batch sets up another; after kMaxRingFailures the thread preads.
struct Ring {
  static constexpr int kMaxRingFailures = 3;
  io_uring ring{};
  int state = 0;  // 0: not set up, 1: ready, -1: unusable
  int failures = 0;
  ~Ring() {
    if (state == 1) io_uring_queue_exit(&ring);
  }
  io_uring* get() {
    if (state == 0) {  // one thread submits and reaps: tell the kernel (6.0+), else plain
      state = io_uring_queue_init(kRingEntries, &ring, IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN) == 0 ||
                      io_uring_queue_init(kRingEntries, &ring, 0) == 0
                  ? 1
                  : -1;
    }
    return state == 1 ? &ring : nullptr;
  }
  // Prepared reads never submitted go with the ring.
  void drop() {
    if (state == 1) io_uring_queue_exit(&ring);
    state = ++failures < kMaxRingFailures ? 0 : -1;
  }
};

// A local read completes or fails within moments; one that has not after this long (a hung
// disk) is given up, and its buffer with it.
constexpr auto kReapDeadline = std::chrono::seconds(30);

int submit(io_uring* ring) {
  return LocalRecordSource::ring_submit_for_tests ? LocalRecordSource::ring_submit_for_tests(ring) : io_uring_submit(ring);
}

// One completion, waiting a second at most (-ETIME then).
int wait_cqe(io_uring* ring, io_uring_cqe** cqe) {
  if (LocalRecordSource::ring_wait_for_tests) return LocalRecordSource::ring_wait_for_tests(ring, cqe);
  __kernel_timespec second{1, 0};
  return io_uring_wait_cqe_timeout(ring, cqe, &second);
}

// Reaps completions until `outstanding` reads (submitted, not yet reaped) are, recording each in
// res (by its tag). False if they could not all be reaped by `deadline`, or a wait failed more
// than `errors_allowed` times: then some may still land in their buffer.
bool reap(io_uring* ring, size_t outstanding, std::span<int> res, std::chrono::steady_clock::time_point deadline,
          int errors_allowed) {
  int errors = 0;
  while (outstanding > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    io_uring_cqe* cqe = nullptr;
    const int r = wait_cqe(ring, &cqe);
    if (r == -EINTR || r == -EAGAIN || r == -ETIME) continue;
    if (r < 0) {
      if (++errors > errors_allowed) return false;
      continue;
    }
    const uint64_t tag = io_uring_cqe_get_data64(cqe);
    if (tag < res.size()) res[tag] = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    --outstanding;
  }
  return true;
}

// Issues the reads of `spans` together and waits for them; res[k] gets the read's completion as
// io_uring reports it (bytes, or -errno), or stays kNotRead where the ring did not do it (the
// caller preads those). A ring that fails (a submit refused, a wait failing) has every read it
// had submitted reaped, and is dropped. False if even that failed: reads may still land in the
// buffers, whose contents and res then mean nothing.
template <typename Span>
bool ring_read(std::span<const Span> spans, std::span<int> res) {
  thread_local Ring tr;
  for (size_t base = 0; base < spans.size(); base += kRingEntries) {
    io_uring* ring = tr.get();
    if (!ring) return true;
    const auto deadline = std::chrono::steady_clock::now() + kReapDeadline;
    const size_t count = std::min<size_t>(kRingEntries, spans.size() - base);
    for (size_t k = base; k < base + count; ++k) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);  // never null: the ring is empty at this point
      io_uring_prep_read(sqe, spans[k].fd, spans[k].buf, static_cast<unsigned>(spans[k].len), spans[k].off);
      io_uring_sqe_set_data64(sqe, k);
    }
    size_t submitted = 0;
    bool failed = false;
    while (submitted < count && !failed) {
      const int r = submit(ring);
      if (r > 0) submitted += static_cast<size_t>(r);
      else failed = r != -EINTR;
    }
    if (!failed) failed = !reap(ring, submitted, res, deadline, 0);
    if (!failed) continue;
    // Every read submitted and not reaped yet (`res` holds only reaped ones), then the ring goes.
    size_t reaped = 0;
    for (size_t k = base; k < base + count; ++k) reaped += res[k] != kNotRead;
    const bool drained = reap(ring, submitted - reaped, res, deadline, 3);
    tr.drop();
    return drained;
  }
  return true;
}

// Opens record r and checks it is the record the index describes.
Result<Fd> open_record(const std::filesystem::path& p, const index::Record& r) {
  Result<Fd> opened = open_regular(p);
  if (!opened) return std::move(opened).error();
  Fd fd = std::move(opened).value();
  uint8_t header[index::kRecordHeaderSize];
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) < r.size)
    return Error{EIO, fmt::format("{}: truncated: {} bytes, index says {}", p.string(), st.st_size, r.size)};
  if (::pread(fd.get(), header, sizeof header, 0) != static_cast<ssize_t>(sizeof header) ||
      std::memcmp(header, index::kRecordMagic.data(), index::kRecordMagic.size()) != 0 ||
      index::get_le(header + 8, 4) != r.header_id)
    return Error{EIO, fmt::format("{}: not record {} of this store (bad header)", p.string(), r.id)};
  return fd;
}

}  // namespace

// One O_DIRECT read: range `range` of a batch, as its sector-aligned span [off, off + len).
struct LocalRecordSource::Span {
  int fd;
  uint8_t* buf;
  uint64_t len, off;
  uint32_t range;
};

Status LocalRecordSource::io_uring_available() {
  static const std::string reason = [] {
    ::io_uring ring{};
    int rc = io_uring_queue_init(2, &ring, 0);
    if (rc < 0) return std::string(std::strerror(-rc));
    std::string r;
    io_uring_probe* probe = io_uring_get_probe_ring(&ring);
    if (!probe || !io_uring_opcode_supported(probe, IORING_OP_READ)) r = "the kernel has no IORING_OP_READ";
    if (probe) io_uring_free_probe(probe);
    io_uring_queue_exit(&ring);
    return r;
  }();
  if (reason.empty()) return {};
  return Error{ENOSYS, reason};
}

LocalRecordSource::LocalRecordSource(const index::Store& store, bool use_io_uring, bool direct)
    : store_(store),
      uring_(use_io_uring && io_uring_available().ok()),
      dfd_(new std::atomic<int>[store.records().size()]) {
  for (const index::Record& r : store.records()) {
    Result<Fd> fd = open_record(store.path() / r.path, r);
    if (fd) {
      fds_.push_back(std::move(fd).value());
    } else {
      problems_.push_back(std::move(fd).error().message);
      fds_.emplace_back();
    }
    dfd_[r.id].store(direct ? kDirectUnopened : -1);
  }
}

LocalRecordSource::~LocalRecordSource() {
  for (size_t i = 0; i < fds_.size(); ++i)
    if (const int fd = dfd_[i].load(); fd >= 0) Fd closed_here(fd);
}

std::string LocalRecordSource::describe() const {
  if (uring_) return fmt::format("{} (local; the ranges of a read are issued together through io_uring)", store_.path().string());
  const Status probe = io_uring_available();
  return fmt::format("{} (local; one pread after another: io_uring unavailable: {})", store_.path().string(),
                     probe.ok() ? "disabled" : probe.error().message);
}

Error LocalRecordSource::error(uint32_t r, int code, std::string_view what) const {
  return Error{code, fmt::format("{}: {}", store_.records()[r].path, what)};
}

std::string_view LocalRecordSource::path_of(uint32_t r) const { return store_.records()[r].path; }

int LocalRecordSource::direct_fd(uint32_t r) {
  int fd = dfd_[r].load(std::memory_order_acquire);
  if (fd != kDirectUnopened) return fd;
  if (fds_[r].get() < 0) return -1;  // damaged: the buffered path reports EIO
  Fd opened(::open((store_.path() / path_of(r)).c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));  // -1 e.g. on tmpfs
  int expected = kDirectUnopened;
  if (!dfd_[r].compare_exchange_strong(expected, opened.get())) return expected;  // another thread's won
  return opened.release();
}

// The filesystem wants another alignment (EINVAL): record r is read buffered from now on.
void LocalRecordSource::drop_direct(uint32_t r, int fd) {
  int expected = fd;
  // Not closed here: another thread may have loaded fd and be about to read it, and a closed number
  // can be reused by the next open(). Kept open until the destructor (one per record at most).
  if (dfd_[r].compare_exchange_strong(expected, -1)) {
    std::lock_guard lock(dropped_mu_);
    dropped_.emplace_back(fd);
  }
}

Status LocalRecordSource::read_buffered(const RangeRead& r) {
  if (r.record >= fds_.size() || fds_[r.record].get() < 0) return error(r.record, EIO, "unreadable (see the mount's warnings)");
  counters_.requests.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes.fetch_add(r.dst.size(), std::memory_order_relaxed);
  Result<uint64_t> n = pread_loop(fds_[r.record].get(), r.dst.data(), r.dst.size(), r.offset, path_of(r.record));
  if (!n) return std::move(n).error();
  if (*n < r.dst.size()) return error(r.record, EIO, fmt::format("short read at offset {}", r.offset));
  return {};
}

// Each range with an O_DIRECT descriptor is read as its sector-aligned span into its own
// page-aligned slot of the thread's bounce buffer, all at once through the ring (or one after
// another), then copied out. The others, and any the filesystem refuses to read unbuffered,
// are read through the buffered descriptor.
void LocalRecordSource::read_ranges(std::span<RangeRead> batch, Done done) {
  thread_local std::vector<Span> spans;
  thread_local std::vector<int> res;
  thread_local std::vector<uint8_t> buffered;  // per range
  plan_direct(batch, spans);
  res.assign(spans.size(), kNotRead);
  buffered.assign(batch.size(), 1);
  if (uring_ && spans.size() > 1 && !ring_read<Span>(spans, res)) {
    abandon_thread_scratch();  // every range is read buffered, straight into its destination
    spans.clear();
  }
  for (size_t k = 0; k < spans.size(); ++k)
    buffered[spans[k].range] = !finish_direct(spans[k], res[k], batch[spans[k].range]);
  for (size_t k = 0; k < batch.size(); ++k)
    if (buffered[k]) batch[k].status = read_buffered(batch[k]);
  give_back_large_scratch();
  done();
}

void LocalRecordSource::plan_direct(std::span<const RangeRead> batch, std::vector<Span>& spans) {
  spans.clear();
  uint64_t total = 0;
  for (size_t k = 0; k < batch.size(); ++k) {
    const RangeRead& r = batch[k];
    const int fd = r.record < fds_.size() ? direct_fd(r.record) : -1;
    if (fd < 0) continue;
    const uint64_t len = sector_span(r.offset, r.dst.size());
    spans.push_back({fd, nullptr, len, sector_start(r.offset), static_cast<uint32_t>(k)});
    total += round_up(len, kPage);
  }
  uint8_t* buf = spans.empty() ? nullptr : thread_scratch(total);
  if (!buf) spans.clear();  // no bounce buffer: everything buffered
  for (Span& s : spans) {
    s.buf = buf;
    buf += round_up(s.len, kPage);
  }
}

// The ring's completion is what io_uring reports, bytes or -errno; this is where it becomes a Result.
Result<uint64_t> LocalRecordSource::direct_result(const Span& s, int res, uint32_t r) {
  if (res == kNotRead || res == -EINTR || res == -EAGAIN) return pread_loop(s.fd, s.buf, s.len, s.off, path_of(r));
  if (res < 0) return io_error(-res, path_of(r));
  auto got = static_cast<uint64_t>(res);
  if (got > 0 && got < s.len) {  // short, not at the end: read the rest (a failure there leaves it short)
    Result<uint64_t> more = pread_loop(s.fd, s.buf + got, s.len - got, s.off + got, path_of(r));
    if (more) got += *more;
  }
  return got;
}

bool LocalRecordSource::finish_direct(const Span& s, int res, RangeRead& r) {
  Result<uint64_t> got = direct_result(s, res, r.record);
  counters_.requests.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes.fetch_add(s.len, std::memory_order_relaxed);
  if (!got && got.error().code == EINVAL) {  // this alignment is not the filesystem's: buffered from now on
    drop_direct(r.record, s.fd);
    return false;
  }
  const uint64_t skip = r.offset - s.off;
  if (!got) r.status = std::move(got).error();
  else if (*got < skip + r.dst.size()) r.status = error(r.record, EIO, fmt::format("short read at offset {}", r.offset));
  else std::memcpy(r.dst.data(), s.buf + skip, r.dst.size());
  return true;
}

Result<std::span<const uint8_t>> LocalRecordSource::read_scratch(uint32_t r, uint64_t offset, uint64_t len) {
  const int fd = r < fds_.size() ? direct_fd(r) : -1;
  if (fd < 0) return RecordSource::read_scratch(r, offset, len);
  counters_.requests.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes.fetch_add(sector_span(offset, len), std::memory_order_relaxed);
  Result<std::span<const uint8_t>> got = read_direct(fd, offset, len, path_of(r));
  if (got || (got.error().code != EINVAL && got.error().code != ENOMEM)) return got;
  if (got.error().code == EINVAL) drop_direct(r, fd);  // this alignment is not the filesystem's: buffered from now on
  return RecordSource::read_scratch(r, offset, len);
}

Status LocalRecordSource::read_one_prefix(const PrefixRead& p) {
  if (p.record >= fds_.size() || fds_[p.record].get() < 0) return error(p.record, EIO, "unreadable (see the mount's warnings)");
  int fd = direct_fd(p.record);
  if (fd >= 0) {
    const uint64_t len = round_up(p.len, kSector);
    counters_.requests.fetch_add(1, std::memory_order_relaxed);
    counters_.bytes.fetch_add(len, std::memory_order_relaxed);
    Result<uint64_t> n = pread_loop(fd, p.dst, len, 0, path_of(p.record));
    if (n) {
      if (*n >= p.len) return {};
      return error(p.record, EIO, fmt::format("short read of its first {} bytes", p.len));
    }
    if (n.error().code != EINVAL) return std::move(n).error();
    drop_direct(p.record, fd);
  }
  return read_buffered(RangeRead{p.record, 0, {p.dst, p.len}, {}});
}

void LocalRecordSource::read_prefixes(std::span<PrefixRead> batch, Done done) {
  for (PrefixRead& p : batch) p.status = read_one_prefix(p);
  done();
}

}  // namespace fid::storage
