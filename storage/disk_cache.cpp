#include "storage/disk_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/fd.h"
#include "common/log.h"
#include "common/posix_io.h"
#include "common/private_dir.h"
#include "index/format.h"
#include "storage/direct_read.h"
#include "storage/disk_cached_source.h"

namespace fid::storage {

namespace {

namespace fs = std::filesystem;

std::string folder_name(const std::string& identity) {
  std::string out = identity;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  if (out.empty() || out.front() == '.') out.insert(out.begin(), '_');  // never ".", ".." or hidden
  return out;
}

}  // namespace


DiskCachedSource::DiskCachedSource(const index::Store& store, std::unique_ptr<RecordSource> inner, const fs::path& dir,
                                   uint64_t max_bytes, const std::string& identity)
    : store_(store), inner_(std::move(inner)), dir_(dir), folder_(dir / folder_name(identity)), max_(max_bytes) {
  Result<Fd> base = open_private_dir(dir_, "disk cache");
  Result<Fd> folder = base ? open_private_subdir(base->get(), folder_.filename().string(), folder_, "disk cache")
                           : std::move(base).error();
  if (!folder) {
    disabled_ = true;
    problem_ = folder.error().message;
    disk_error(problem_ + "; the disk cache is off");
    return;
  }
  dir_fd_ = std::move(base).value();
  folder_fd_ = std::move(folder).value();
  std::lock_guard lock(disk_mu_);
  evict(0, {});  // counts the folder, removes crash leftovers, and trims it to a smaller max
}

DiskCachedSource::~DiskCachedSource() {
  {
    std::lock_guard lock(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  if (writer_.joinable()) writer_.join();  // after writing what was queued
}

std::string DiskCachedSource::describe() const {
  if (disabled_) return fmt::format("{}; no disk cache: {}", inner_->describe(), problem_);
  return fmt::format("{}; disk cache of record prefixes in {} (at most {} bytes)", inner_->describe(), folder_.string(), max_);
}

DiskCacheStats DiskCachedSource::disk_stats() const {
  auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  return {get(stats_.hits),      get(stats_.partial_hits), get(stats_.misses),  get(stats_.bytes_from_disk),
          get(stats_.bytes_written), get(stats_.not_kept), get(stats_.evictions), get(stats_.dropped),
          get(stats_.errors),    get(used_),               max_};
}

void DiskCachedSource::add_readings(Readings& out) const {
  RecordSource::add_readings(out);
  const DiskCacheStats d = disk_stats();
  using K = Reading::Kind;
  out.insert(out.end(), {
      {"disk_cache.hits", K::counter, "fidelityfs_disk_cache_hits_total", "record prefixes read whole from the disk cache", d.hits},
      {"disk_cache.partial_hits", K::counter, "fidelityfs_disk_cache_partial_hits_total", "prefixes partly read from the disk cache", d.partial_hits},
      {"disk_cache.misses", K::counter, "fidelityfs_disk_cache_misses_total", "prefixes the disk cache did not hold", d.misses},
      {"disk_cache.bytes_from_disk", K::counter, "fidelityfs_disk_cache_read_bytes_total", "bytes served from the disk cache", d.bytes_from_disk},
      {"disk_cache.bytes_written", K::counter, "fidelityfs_disk_cache_written_bytes_total", "bytes of copies written to the disk cache", d.bytes_written},
      {"disk_cache.not_kept", K::counter, "fidelityfs_disk_cache_not_kept_total", "copies not written: the write queue was full", d.not_kept},
      {"disk_cache.evictions", K::counter, "fidelityfs_disk_cache_evictions_total", "entries evicted from the disk cache", d.evictions},
      {"disk_cache.dropped", K::counter, "fidelityfs_disk_cache_dropped_total", "copies removed or not kept for failing their checksums", d.dropped},
      {"disk_cache.errors", K::counter, "fidelityfs_disk_cache_errors_total", "disk errors and unusable copies (the origin served instead)", d.errors},
      {"disk_cache.used", K::gauge, "fidelityfs_disk_cache_bytes", "bytes in the disk cache", d.used_bytes},
      {"disk_cache.max", K::gauge, "fidelityfs_disk_cache_max_bytes", "the disk cache's bound (disk_cache_size=)", d.max_bytes},
  });
}

DiskCachedSource::Copy DiskCachedSource::copy_of(uint32_t record) {
  if (disabled_ || record >= store_.records().size()) return {};
  std::shared_ptr<const OpenCopy> held;
  {
    std::lock_guard lock(open_mu_);
    if (auto it = open_.find(record); it != open_.end()) held = it->second;
  }
  if (held && std::chrono::steady_clock::now() - held->opened < kReopenAfter) {
    // Still the file that was checked: not replaced or removed (by another mount), truncated,
    // written to or touched since (ctime).
    struct stat st {};
    if (::fstat(held->fd.get(), &st) == 0 && st.st_nlink > 0 && st.st_size == held->seen.st_size &&
        st.st_ctim.tv_sec == held->seen.st_ctim.tv_sec && st.st_ctim.tv_nsec == held->seen.st_ctim.tv_nsec)
      return {held, false};
  }
  Copy c = open_copy(record);
  {
    std::lock_guard lock(open_mu_);
    if (!c.open) {
      open_.erase(record);
      return c;
    }
    if (open_.size() >= kOpenCopies && !open_.contains(record)) {  // the longest open goes
      auto oldest = std::min_element(open_.begin(), open_.end(),
                                     [](const auto& a, const auto& b) { return a.second->opened < b.second->opened; });
      open_.erase(oldest);
    }
    open_[record] = c.open;
  }
  std::lock_guard queue(queue_mu_);
  if (!stop_ && !closing_copies_) {  // the writer closes the copy once it is idle
    closing_copies_ = true;
    start_writer_locked();
    queue_cv_.notify_one();
  }
  return c;
}

void DiskCachedSource::forget(uint32_t record) {
  std::lock_guard lock(open_mu_);
  open_.erase(record);
}

void DiskCachedSource::forget_all() {
  std::lock_guard lock(open_mu_);
  open_.clear();
}

bool DiskCachedSource::close_idle_copies() {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(open_mu_);
  std::erase_if(open_, [&](const auto& held) { return now - held.second->opened >= kReopenAfter; });
  return !open_.empty();
}

DiskCachedSource::Copy DiskCachedSource::open_copy(uint32_t record) {
  Copy c;
  auto open = std::make_shared<OpenCopy>();
  const std::string entry = entry_name(record);
  // O_NONBLOCK: a FIFO in an entry's place must not hang the read (it is then no regular file).
  open->fd = Fd(::openat(folder_fd_.get(), entry.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (open->fd.get() < 0) {
    if (errno != ENOENT) disk_error(fmt::format("{}: cannot open: {}", where(entry), std::strerror(errno)));
    c.unusable = errno == ELOOP;  // a symbolic link: replaced by the next copy, never read through
    return c;
  }
  struct stat st {};
  uint8_t header[index::kRecordHeaderSize];
  const uint64_t size = ::fstat(open->fd.get(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
  // A published copy always starts with the record's header; anything else is not ours to serve.
  const std::string name = where(entry);
  Status header_read = size < sizeof header ? Status(Error{EIO, fmt::format("{}: shorter than a record header", name)})
                       : size > store_.records()[record].size
                           ? Status(Error{EIO, fmt::format("{}: longer than record {}", name, record)})
                           : pread_exact(open->fd.get(), header, sizeof header, 0, name);
  if (header_read.ok() && (std::memcmp(header, index::kRecordMagic.data(), index::kRecordMagic.size()) != 0 ||
                           index::get_le(header + 8, 4) != store_.records()[record].header_id))
    header_read = Error{EIO, fmt::format("{}: not a copy of record {} of this store (another header)", name, record)};
  if (!header_read.ok()) {
    disk_error(header_read.error().message + "; it is replaced by the next copy");
    c.unusable = true;
    return c;
  }
  open->size = size;
  const timespec touch[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};  // mtime = last use, for eviction
  ::futimens(open->fd.get(), touch);
  if (::fstat(open->fd.get(), &open->seen) != 0) return c;  // (cannot fail on an open file)
  open->opened = std::chrono::steady_clock::now();
  if (!direct_refused_.load(std::memory_order_relaxed)) {
    // The same file, unless it was replaced in between (then none: reads go the buffered way).
    open->direct = Fd(::openat(folder_fd_.get(), entry.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_DIRECT));
    struct stat dst {};
    if (open->direct.get() >= 0 && (::fstat(open->direct.get(), &dst) != 0 || dst.st_ino != open->seen.st_ino ||
                                    dst.st_dev != open->seen.st_dev))
      open->direct.reset();
  }
  c.open = std::move(open);
  return c;
}

uint64_t DiskCachedSource::serve(Copy& copy, uint32_t record, uint64_t offset, std::span<uint8_t> dst) {
  if (copy.size() <= offset) return 0;
  const uint64_t covered = std::min<uint64_t>(copy.size() - offset, dst.size());
  if (Status read = pread_exact(copy.open->fd.get(), dst.data(), covered, offset, "a disk cache copy"); !read.ok()) {
    disk_error(read.error().message + "; the copy is not trusted again");  // it changed under us
    forget(record);
    copy = Copy{nullptr, true};
    return 0;
  }
  stats_.bytes_from_disk.fetch_add(covered, std::memory_order_relaxed);
  return covered;
}

Result<std::span<const uint8_t>> DiskCachedSource::read_scratch(uint32_t record, uint64_t offset, uint64_t len) {
  Copy copy = copy_of(record);
  if (copy.open && copy.open->direct.get() >= 0 && offset + len <= copy.size() &&
      !direct_refused_.load(std::memory_order_relaxed)) {
    Result<std::span<const uint8_t>> got = read_direct(copy.open->direct.get(), offset, len, "a disk cache copy");
    if (got) {
      stats_.hits.fetch_add(1, std::memory_order_relaxed);
      stats_.bytes_from_disk.fetch_add(len, std::memory_order_relaxed);
      return got;
    }
    if (got.error().code == EINVAL) {  // this alignment is not the filesystem's: buffered from now on
      direct_refused_.store(true, std::memory_order_relaxed);
    } else if (got.error().code != ENOMEM) {
      disk_error(fmt::format("{}: {}; the copy is not trusted again", where(entry_name(record)), got.error().message));
      forget(record);
      copy = Copy{nullptr, true};
    }
  }
  // As read_ranges reads it (the part a copy holds from the copy, the rest fetched), with the copy
  // looked up already.
  return read_into_thread_buffer(record, offset, len, [&](std::span<RangeRead> batch, Done done) {
    read_ranges_from(record, copy, batch, std::move(done));
  });
}

DiskCachedSource::Keep DiskCachedSource::plan(const Copy& copy, uint64_t offset, uint64_t covered) {
  (covered > 0 ? stats_.partial_hits : stats_.misses).fetch_add(1, std::memory_order_relaxed);
  const uint64_t at = offset + covered;
  return Keep{at == copy.size(), at, copy.unusable};  // kept only if it continues the copy (or starts one)
}

void DiskCachedSource::read_prefixes(std::span<PrefixRead> batch, Done done) {
  auto job = std::make_shared<Job>();
  for (PrefixRead& p : batch) {
    Copy copy;
    if (p.len > 0) copy = copy_of(p.record);
    const uint64_t covered = serve(copy, p.record, 0, {p.dst, p.len});
    if (covered == p.len && p.len > 0) {  // (an empty read is the inner source's to answer)
      stats_.hits.fetch_add(1, std::memory_order_relaxed);
      p.status = {};
      continue;
    }
    Keep keep = plan(copy, 0, covered);
    keep.keep = keep.keep && !disabled_;
    if (covered == 0) {  // whole: the inner source reads it as one (aligned) prefix
      job->whole.push_back({p.record, p.len, p.dst, {}});
      job->whole_status.push_back(&p.status);
      job->whole_keep.push_back(keep);
    } else {
      job->parts.push_back({p.record, covered, {p.dst + covered, p.len - covered}, {}});
      job->part_status.push_back(&p.status);
      job->part_keep.push_back(keep);
    }
  }
  issue(std::move(job), std::move(done));
}

void DiskCachedSource::read_ranges(std::span<RangeRead> batch, Done done) {
  read_ranges_from(UINT32_MAX, {}, batch, std::move(done));
}

void DiskCachedSource::read_ranges_from(uint32_t copy_record, Copy copy, std::span<RangeRead> batch, Done done) {
  auto job = std::make_shared<Job>();
  for (RangeRead& r : batch) {
    if (r.record != copy_record) {  // a batch is mostly one record's pieces: look its copy up once
      copy = copy_of(r.record);
      copy_record = r.record;
    }
    const uint64_t covered = serve(copy, r.record, r.offset, r.dst);
    if (covered == r.dst.size() && covered > 0) {
      stats_.hits.fetch_add(1, std::memory_order_relaxed);
      r.status = {};
      continue;
    }
    Keep keep = plan(copy, r.offset, covered);
    keep.keep = keep.keep && !disabled_;
    job->parts.push_back({r.record, r.offset + covered, r.dst.subspan(covered), {}});
    job->part_status.push_back(&r.status);
    job->part_keep.push_back(keep);
  }
  issue(std::move(job), std::move(done));
}

void DiskCachedSource::issue(std::shared_ptr<Job> job, Done done) {
  if (job->whole.empty() && job->parts.empty()) {
    done();
    return;
  }
  job->done = std::move(done);
  auto one = [this, job] {
    if (job->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) complete(*job);
  };
  if (job->whole.empty()) one();
  else inner_->read_prefixes(job->whole, one);
  if (job->parts.empty()) one();
  else inner_->read_ranges(job->parts, one);
}

void DiskCachedSource::complete(Job& job) {
  // The bytes are copied out for the writer before `done` hands the buffers back.
  for (size_t k = 0; k < job.whole.size(); ++k) {
    PrefixRead& p = job.whole[k];
    if (p.status.ok() && job.whole_keep[k].keep) keep_checked(p.record, 0, {p.dst, p.len}, job.whole_keep[k].replace);
    *job.whole_status[k] = std::move(p.status);
  }
  for (size_t k = 0; k < job.parts.size(); ++k) {
    RangeRead& r = job.parts[k];
    const Keep& keep = job.part_keep[k];
    if (r.status.ok() && keep.keep) keep_checked(r.record, keep.from, r.dst, keep.replace);
    *job.part_status[k] = std::move(r.status);
  }
  Done done = std::move(job.done);
  done();
}

uint64_t DiskCachedSource::local_copy_len(uint32_t record) const {
  {
    std::lock_guard lock(open_mu_);
    if (auto it = open_.find(record); it != open_.end() && std::chrono::steady_clock::now() - it->second->opened < kReopenAfter)
      return it->second->size;
  }
  struct stat st {};
  if (disabled_ || record >= store_.records().size() || !stat_file(folder_fd_.get(), entry_name(record), st)) return 0;
  // A copy longer than the record is not ours (open_copy refuses it): none.
  const auto size = static_cast<uint64_t>(st.st_size);
  return size <= store_.records()[record].size ? size : 0;
}

bool DiskCachedSource::drop_cached(uint32_t record) {
  bool dropped = false;
  if (!disabled_) {
    std::lock_guard lock(disk_mu_);
    const std::string entry = entry_name(record);
    struct stat st {};
    forget(record);
    if (stat_file(folder_fd_.get(), entry, st) && ::unlinkat(folder_fd_.get(), entry.c_str(), 0) == 0) {
      used_.store(used_.load() - std::min<uint64_t>(used_.load(), static_cast<uint64_t>(st.st_size)));
      stats_.dropped.fetch_add(1, std::memory_order_relaxed);
      dropped = true;
    }
  }
  return inner_->drop_cached(record) || dropped;
}

std::unique_ptr<RecordSource> make_disk_cached_source(const index::Store& store, std::unique_ptr<RecordSource> inner,
                                                      const fs::path& dir, uint64_t max_bytes, const std::string& identity) {
  return std::make_unique<DiskCachedSource>(store, std::move(inner), dir, max_bytes, identity);
}

DiskCache* as_disk_cache(RecordSource& source) { return dynamic_cast<DiskCache*>(&source); }

}  // namespace fid::storage
