#include "fs/record_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

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

RecordReader::RecordReader(const index::Store& store, IoStats& stats)
    : store_(store), stats_(stats), dfd_(new std::atomic<int>[store.records().size()]) {
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

// Reads up to len bytes at off (stops early only at end of file). Bytes read, or -errno.
int RecordReader::pread_all(int fd, uint8_t* dst, uint64_t len, uint64_t off) {
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
  stats_.storage_reads.fetch_add(1, std::memory_order_relaxed);
  stats_.storage_bytes.fetch_add(len, std::memory_order_relaxed);
  return static_cast<int>(std::min<uint64_t>(done, INT32_MAX));
}

int RecordReader::read_piece(const index::File& f, uint32_t i, std::span<uint8_t> dst) {
  stats_.piece_reads.fetch_add(1, std::memory_order_relaxed);
  if (i >= f.piece_count) return -EINVAL;
  const index::Piece& p = store_.pieces(f)[i];
  if (dst.size() != p.size) return -EINVAL;
  int fd = direct_fd(f.record);
  if (fd >= 0) {
    thread_local Scratch scratch;
    uint64_t a0 = p.offset / kSector * kSector, a1 = round_up(p.offset + p.size, kSector);
    uint8_t* buf = scratch.get(a1 - a0);
    if (!buf) return -ENOMEM;
    int n = pread_all(fd, buf, a1 - a0, a0);
    if (n == -EINVAL) {  // the filesystem wants another alignment: buffered from now on
      dfd_[f.record].store(-1);
      ::close(fd);  // no other user: reads that raced this one got EINVAL as well
    } else if (n < 0) {
      return n;
    } else {
      if (static_cast<uint64_t>(n) < p.offset + p.size - a0) return -EIO;
      std::memcpy(dst.data(), buf + (p.offset - a0), p.size);
      return index::piece_checksum(dst) == p.checksum ? 0 : -EIO;
    }
  }
  stats_.storage_reads.fetch_add(1, std::memory_order_relaxed);
  stats_.storage_bytes.fetch_add(p.size, std::memory_order_relaxed);
  return store_.read_piece(f, i, dst);
}

int RecordReader::read_prefix(uint32_t r, uint64_t len, uint8_t* buf) {
  int fd = direct_fd(r);
  if (fd >= 0) {
    int n = pread_all(fd, buf, round_up(len, kSector), 0);
    if (n >= 0) return static_cast<uint64_t>(n) >= len || n == INT32_MAX ? 0 : -EIO;
    if (n != -EINVAL) return n;
    dfd_[r].store(-1);
    ::close(fd);
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
