#include "fs/record_cache.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "fs/log.h"

namespace fid::fs {

namespace {

constexpr uint64_t kSector = 512;
constexpr uint64_t kPage = 4096;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Page-aligned per-thread scratch for O_DIRECT piece reads.
struct Scratch {
  uint8_t* p = nullptr;
  size_t cap = 0;
  ~Scratch() { std::free(p); }
  uint8_t* get(size_t n) {
    if (n > cap) {
      std::free(p);
      cap = round_up(std::max<size_t>(n, 256 * 1024), kPage);
      p = static_cast<uint8_t*>(std::aligned_alloc(kPage, cap));
      if (!p) cap = 0;
    }
    return p;
  }
};

}  // namespace

// ---- RecordReader -----------------------------------------------------------------------------

namespace {

constexpr unsigned kRingEntries = 64;  // reads in flight at once per thread (more are issued in turns)
constexpr int kNotRead = INT32_MIN;    // a read the ring did not do (the thread then preads it)

// Reads up to len bytes at off (stops early only at end of file). Bytes read, or -errno.
int pread_loop(int fd, uint8_t* dst, uint64_t len, uint64_t off) {
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

// One io_uring per thread, set up on its first use. A thread whose ring cannot be set up (or
// breaks) preads.
struct Ring {
  io_uring ring{};
  int state = 0;  // 0: not tried, 1: ready, -1: unusable
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
  void drop() {
    if (state == 1) io_uring_queue_exit(&ring);
    state = -1;
  }
};

struct Span {
  uint8_t* buf;
  uint64_t len, off;
};

// Issues all reads of `spans` on fd together and waits for them; res[k] gets what pread_loop
// would return, or kNotRead where the ring could not do it.
void ring_read(int fd, std::span<const Span> spans, std::span<int> res) {
  thread_local Ring tr;
  for (size_t base = 0; base < spans.size(); base += kRingEntries) {
    io_uring* ring = tr.get();
    if (!ring) return;
    const size_t count = std::min<size_t>(kRingEntries, spans.size() - base);
    for (size_t k = base; k < base + count; ++k) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);  // never null: the ring is empty at this point
      io_uring_prep_read(sqe, fd, spans[k].buf, static_cast<unsigned>(spans[k].len), spans[k].off);
      io_uring_sqe_set_data64(sqe, k);
    }
    size_t inflight = 0;
    while (inflight < count) {
      int r = io_uring_submit(ring);
      if (r > 0) inflight += static_cast<size_t>(r);
      else if (r != -EINTR) break;  // what was not submitted is preaded below (the ring is dropped)
    }
    for (size_t got = 0; got < inflight;) {
      io_uring_cqe* cqe = nullptr;
      int r = io_uring_wait_cqe(ring, &cqe);
      if (r == -EINTR || r == -EAGAIN) continue;
      // Cannot happen with at most kRingEntries in flight (no completion-queue overflow); if it
      // did, reads still in flight could land in the bounce buffer after we move on.
      if (r < 0) break;
      res[io_uring_cqe_get_data64(cqe)] = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      ++got;
    }
    if (inflight < count) {  // the ring failed: this thread preads from now on
      tr.drop();
      return;
    }
  }
}

}  // namespace

bool RecordReader::io_uring_available(std::string* why) {
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
  if (why) *why = reason;
  return reason.empty();
}

RecordReader::RecordReader(const index::Store& store, IoStats& stats, bool use_io_uring)
    : store_(store),
      stats_(stats),
      uring_(use_io_uring && io_uring_available()),
      dfd_(new std::atomic<int>[store.records().size()]) {
  for (size_t i = 0; i < store.records().size(); ++i) dfd_[i].store(-2);
}

RecordReader::~RecordReader() {
  for (size_t i = 0; i < store_.records().size(); ++i) {
    int fd = dfd_[i].load();
    if (fd >= 0) ::close(fd);
  }
}

int RecordReader::direct_fd(uint32_t r) {
  int fd = dfd_[r].load(std::memory_order_acquire);
  if (fd != -2) return fd;
  if (store_.record_fd(r) < 0) return -1;  // damaged: the buffered path reports EIO
  int nfd = ::open((store_.path() / store_.records()[r].path).c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (nfd < 0) nfd = -1;  // e.g. tmpfs: no O_DIRECT
  int expected = -2;
  if (!dfd_[r].compare_exchange_strong(expected, nfd)) {
    if (nfd >= 0) ::close(nfd);
    return expected;
  }
  return nfd;
}

// The filesystem wants another alignment (EINVAL): record r is read buffered from now on.
void RecordReader::drop_direct(uint32_t r, int fd) {
  int expected = fd;
  if (dfd_[r].compare_exchange_strong(expected, -1)) ::close(fd);  // reads that raced got EINVAL too
}

int RecordReader::pread_all(int fd, uint8_t* dst, uint64_t len, uint64_t off) {
  int n = pread_loop(fd, dst, len, off);
  stats_.storage_reads.fetch_add(1, std::memory_order_relaxed);
  stats_.storage_bytes.fetch_add(len, std::memory_order_relaxed);
  return n;
}

int RecordReader::read_piece(const index::File& f, uint32_t i, std::span<uint8_t> dst) {
  const PieceRead r{i, dst};
  return read_pieces(f, {&r, 1});
}

int RecordReader::read_pieces(const index::File& f, std::span<const PieceRead> reads, size_t* failed) {
  const size_t n = reads.size();
  stats_.piece_reads.fetch_add(n, std::memory_order_relaxed);
  auto fail = [&](size_t k, int rc) {
    if (failed) *failed = k;
    return rc;
  };
  auto pieces = store_.pieces(f);
  for (size_t k = 0; k < n; ++k)
    if (reads[k].index >= f.piece_count || reads[k].dst.size() != pieces[reads[k].index].size) return fail(k, -EINVAL);
  if (n == 0) return 0;

  // O_DIRECT: each piece is read as its sector-aligned span into its own page-aligned slot of
  // the thread's bounce buffer, all pieces at once through the ring (or one after another).
  thread_local std::vector<Span> spans;
  thread_local std::vector<int> res;
  spans.clear();
  res.assign(n, kNotRead);
  int fd = direct_fd(f.record);
  if (fd >= 0) {
    auto aligned = [&](const PieceRead& r) {
      const index::Piece& p = pieces[r.index];
      const uint64_t a0 = p.offset / kSector * kSector;
      return std::pair{a0, round_up(p.offset + p.size, kSector) - a0};
    };
    uint64_t total = 0;
    for (const PieceRead& r : reads) total += round_up(aligned(r).second, kPage);
    thread_local Scratch scratch;
    uint8_t* buf = scratch.get(total);
    if (!buf) return fail(0, -ENOMEM);
    for (const PieceRead& r : reads) {
      auto [a0, len] = aligned(r);
      spans.push_back({buf, len, a0});
      buf += round_up(len, kPage);
    }
    if (uring_ && n > 1) ring_read(fd, spans, res);
    bool einval = false;
    for (size_t k = 0; k < n; ++k) {
      const Span& s = spans[k];
      if (res[k] == kNotRead || res[k] == -EINTR || res[k] == -EAGAIN) res[k] = pread_loop(fd, s.buf, s.len, s.off);
      // A short read that is not at the end of the file: read the rest.
      while (res[k] > 0 && static_cast<uint64_t>(res[k]) < s.len) {
        int more = pread_loop(fd, s.buf + res[k], s.len - static_cast<uint64_t>(res[k]), s.off + static_cast<uint64_t>(res[k]));
        if (more <= 0) break;
        res[k] += more;
      }
      stats_.storage_reads.fetch_add(1, std::memory_order_relaxed);
      stats_.storage_bytes.fetch_add(s.len, std::memory_order_relaxed);
      einval |= res[k] == -EINVAL;
    }
    if (einval) drop_direct(f.record, fd);
  }
  for (size_t k = 0; k < n; ++k) {
    const index::Piece& p = pieces[reads[k].index];
    std::span<uint8_t> dst = reads[k].dst;
    if (fd < 0 || res[k] == -EINVAL) {  // buffered (no O_DIRECT here, or not with this alignment)
      stats_.storage_reads.fetch_add(1, std::memory_order_relaxed);
      stats_.storage_bytes.fetch_add(p.size, std::memory_order_relaxed);
      int rc = store_.read_piece(f, reads[k].index, dst);
      if (rc != 0) return fail(k, rc);
      continue;
    }
    if (res[k] < 0) return fail(k, res[k]);
    const Span& s = spans[k];
    if (static_cast<uint64_t>(res[k]) < p.offset + p.size - s.off) return fail(k, -EIO);
    std::memcpy(dst.data(), s.buf + (p.offset - s.off), p.size);
    if (index::piece_checksum(dst) != p.checksum) return fail(k, -EIO);
  }
  return 0;
}

int RecordReader::read_prefix(uint32_t r, uint64_t len, uint8_t* buf) {
  int fd = direct_fd(r);
  if (fd >= 0) {
    int n = pread_all(fd, buf, round_up(len, kSector), 0);
    if (n >= 0) return static_cast<uint64_t>(n) >= len || n == INT32_MAX ? 0 : -EIO;
    if (n != -EINVAL) return n;
    drop_direct(r, fd);
  }
  int bfd = store_.record_fd(r);
  if (bfd < 0) return -EIO;
  int n = pread_all(bfd, buf, len, 0);
  if (n < 0) return n;
  return static_cast<uint64_t>(n) >= len || n == INT32_MAX ? 0 : -EIO;
}

// ---- RecordCache ------------------------------------------------------------------------------

RecordCache::RecordCache(const index::Store& store, RecordReader& reader, IoStats& stats, uint64_t budget)
    : store_(store), reader_(reader), stats_(stats), budget_(budget) {}

RecordCache::~RecordCache() {
  std::lock_guard lock(mu_);
  slots_.clear();  // frees the prefixes (their deleters use used_)
  lru_.clear();
}

size_t RecordCache::entries() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

uint64_t RecordCache::prefix_len(uint32_t r, int level) const {
  const auto& rec = store_.records()[r];
  if (rec.region_end.empty()) return 0;
  if (rec.layout != 0 || level <= 0) return rec.region_end.back();
  return rec.region_end[std::min<size_t>(static_cast<size_t>(level), rec.region_end.size() - 1)];
}

int RecordCache::level_for(const index::File& f, int level) const {
  return f.kind == index::FileKind::jpeg && store_.records()[f.record].layout == 0 ? level : 0;
}

std::shared_ptr<const Prefix> RecordCache::get(uint32_t r, int level) {
  std::unique_lock lock(mu_);
  bool waited = false;
  for (;;) {
    auto it = slots_.find(r);
    if (it == slots_.end()) return nullptr;
    Slot& s = it->second;
    if (s.prefix && s.prefix->level >= level) {
      if (s.in_lru) lru_.splice(lru_.begin(), lru_, s.lru);
      stats_.cache_hits.fetch_add(1, std::memory_order_relaxed);
      if (s.prefix->by_prefetch) stats_.prefetch_hits.fetch_add(1, std::memory_order_relaxed);
      if (waited) stats_.prefetch_waits.fetch_add(1, std::memory_order_relaxed);
      return s.prefix;
    }
    if (s.pending_level < level) return nullptr;
    waited = true;
    cv_.wait(lock);
  }
}

bool RecordCache::present(uint32_t r, int level) {
  std::lock_guard lock(mu_);
  auto it = slots_.find(r);
  if (it == slots_.end()) return false;
  return (it->second.prefix && it->second.prefix->level >= level) || it->second.pending_level >= level;
}

bool RecordCache::mark_queued(uint32_t r, int level) {
  std::lock_guard lock(mu_);
  Slot& s = slots_[r];
  if ((s.prefix && s.prefix->level >= level) || s.pending_level >= level) return false;
  s.pending_level = level;
  return true;
}

void RecordCache::unqueue(uint32_t r) {
  std::lock_guard lock(mu_);
  auto it = slots_.find(r);
  if (it == slots_.end() || it->second.loading) return;
  it->second.pending_level = -1;
  if (!it->second.prefix) slots_.erase(it);
  cv_.notify_all();
}

void RecordCache::release_bytes(uint64_t len) { used_.fetch_sub(len, std::memory_order_acq_rel); }

bool RecordCache::reserve_locked(uint64_t len) {
  if (len > budget_) return false;
  while (used_.load() + len > budget_ && !lru_.empty()) {
    uint32_t victim = lru_.back();
    lru_.pop_back();
    auto it = slots_.find(victim);
    if (it != slots_.end()) {
      it->second.in_lru = false;
      it->second.prefix.reset();  // freed now unless a reader still copies from it
      if (it->second.pending_level < 0 && !it->second.loading) slots_.erase(it);
    }
    stats_.cache_evictions.fetch_add(1, std::memory_order_relaxed);
  }
  if (used_.load() + len > budget_) return false;
  uint64_t now = used_.fetch_add(len) + len;
  uint64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return true;
}

bool RecordCache::load(uint32_t r, int level, bool by_prefetch) {
  std::unique_lock lock(mu_);
  Slot& s = slots_[r];
  int lvl = std::max(level, s.pending_level);
  if (s.prefix && s.prefix->level >= lvl) {
    s.pending_level = -1;
    cv_.notify_all();
    return true;
  }
  if (s.loading) return true;
  s.pending_level = lvl;  // keeps the slot out of reserve_locked's reach
  const uint64_t len = prefix_len(r, lvl);
  const uint64_t alloc = round_up(std::max<uint64_t>(len, 1), kPage);
  if (len == 0 || !reserve_locked(alloc)) {
    stats_.prefetch_skipped.fetch_add(1, std::memory_order_relaxed);
    auto it = slots_.find(r);  // still there: reserve_locked never erases a pending slot
    if (it != slots_.end()) {
      it->second.pending_level = -1;
      if (!it->second.prefix) slots_.erase(it);
    }
    cv_.notify_all();
    return false;
  }
  s.loading = true;
  lock.unlock();

  void* mem = ::mmap(nullptr, alloc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int rc = mem == MAP_FAILED ? -ENOMEM : reader_.read_prefix(r, len, static_cast<uint8_t*>(mem));

  lock.lock();
  Slot& t = slots_[r];
  t.loading = false;
  t.pending_level = -1;
  if (rc != 0) {
    if (mem != MAP_FAILED) ::munmap(mem, alloc);
    release_bytes(alloc);
    if (rc != -EIO) log_warn("reading {}: {}", store_.records()[r].path, std::strerror(-rc));
    if (!t.prefix) slots_.erase(r);
    cv_.notify_all();
    return false;
  }
  auto* p = new Prefix;
  p->record = r;
  p->level = lvl;
  p->len = len;
  p->data = static_cast<uint8_t*>(mem);
  p->by_prefetch = by_prefetch;
  t.prefix = std::shared_ptr<const Prefix>(p, [this, alloc](const Prefix* q) {
    ::munmap(q->data, alloc);
    release_bytes(alloc);
    delete q;
  });
  if (t.in_lru) lru_.splice(lru_.begin(), lru_, t.lru);
  else {
    lru_.push_front(r);
    t.lru = lru_.begin();
    t.in_lru = true;
  }
  stats_.records_read.fetch_add(1, std::memory_order_relaxed);
  stats_.record_bytes.fetch_add(len, std::memory_order_relaxed);
  cv_.notify_all();
  return true;
}

}  // namespace fid::fs
