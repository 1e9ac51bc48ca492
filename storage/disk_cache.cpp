#include "storage/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <latch>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/fd.h"
#include "common/log.h"
#include "common/private_dir.h"
#include "index/format.h"
#include "common/posix_io.h"
#include "storage/direct_read.h"

namespace fid::storage {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxQueuedBytes = 64ull << 20;  // copies waiting for the writer thread
constexpr time_t kStaleTempSeconds = 600;           // a temporary file this old is a crash's leftover
constexpr std::string_view kTempPrefix = ".tmp-";
constexpr std::string_view kEntrySuffix = ".p";
constexpr size_t kOpenCopies = 128;                          // copies kept open (two descriptors each)
constexpr auto kReopenAfter = std::chrono::seconds(1);      // how long one stays open unchecked by an open

std::string folder_name(const std::string& identity) {
  std::string out = identity;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  if (out.empty() || out.front() == '.') out.insert(out.begin(), '_');  // never ".", ".." or hidden
  return out;
}

// The pid in a temporary file's name (.tmp-<pid>-...), 0 if there is none.
pid_t temp_pid(std::string_view name) {
  name.remove_prefix(kTempPrefix.size());
  pid_t pid = 0;
  for (char c : name) {
    if (c < '0' || c > '9') break;
    pid = pid * 10 + (c - '0');
  }
  return pid;
}

bool older(const timespec& a, const timespec& b) { return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec; }

// The regular file `name` in `dir` (never through a symbolic link); false if it is something else.
bool stat_file(int dir, const std::string& name, struct stat& st) {
  return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

class DiskCachedSource final : public RecordSource, public DiskCache {
 public:
  DiskCachedSource(const index::Store& store, std::unique_ptr<RecordSource> inner, const fs::path& dir, uint64_t max_bytes,
                   const std::string& identity);
  ~DiskCachedSource() override;
  DiskCachedSource(const DiskCachedSource&) = delete;
  DiskCachedSource& operator=(const DiskCachedSource&) = delete;

  void read_ranges(std::span<RangeRead> batch, Done done) override;
  void read_prefixes(std::span<PrefixRead> batch, Done done) override;
  const std::vector<std::string>& problems() const override { return inner_->problems(); }
  const SourceCounters& counters() const override { return inner_->counters(); }
  uint64_t in_flight_target() const override { return inner_->in_flight_target(); }
  void cancel_on(const std::atomic<bool>* flag) override { inner_->cancel_on(flag); }
  std::string describe() const override;
  bool drop_cached(uint32_t record) override;
  uint64_t local_copy_len(uint32_t record) const override;
  bool keeps_copies() const override { return true; }
  uint64_t local_copy_capacity() const override { return max_; }
  void add_readings(Readings& out) const override;
  DiskCacheStats disk_stats() const override;
  void flush() override;
  // A range a copy holds is read with O_DIRECT into the thread's bounce buffer and served there.
  Result<std::span<const uint8_t>> read_scratch(uint32_t record, uint64_t offset, uint64_t len) override;

 private:
  // A record's cached copy, open and checked. Kept open in open_ for the reads that follow (one
  // fstat each instead of an open, a header read, a touch and a close), for kReopenAfter at most:
  // reopening touches the copy, so a copy in use is marked used about once a second.
  struct OpenCopy {
    Fd fd;      // for reads into any buffer
    Fd direct;  // the same file with O_DIRECT, for read_scratch; -1 where the filesystem refuses it
    uint64_t size = 0;
    struct stat seen {};  // when it was checked: a change of size, links or ctime means reopen
    std::chrono::steady_clock::time_point opened;
  };
  // A record's copy for one read; none to use when `open` is null. `unusable`: a file is there
  // but cannot serve (foreign header, too long, read error): a new copy replaces it.
  struct Copy {
    std::shared_ptr<const OpenCopy> open;
    bool unusable = false;
    uint64_t size() const { return open ? open->size : 0; }
  };
  // What to write once a read passed to the inner source succeeds: its bytes, as the part of the
  // record's prefix from `from` on.
  struct Keep {
    bool keep = false;
    uint64_t from = 0;
    bool replace = false;
  };
  // A copy waiting for the writer thread.
  struct Pending {
    uint32_t record = 0;
    uint64_t from = 0, len = 0;
    std::unique_ptr<uint8_t[]> bytes;
    bool replace = false;
  };
  // The reads of one batch passed to the inner source, and where their results go.
  struct Job {
    std::vector<PrefixRead> whole;
    std::vector<RangeRead> parts;
    std::vector<Status*> whole_status, part_status;
    std::vector<Keep> whole_keep, part_keep;
    std::atomic<int> pending{2};
    Done done;
  };
  // One cached file found by a scan: `name` in the folder `dir` (this store's or another's).
  struct Entry {
    timespec used{};
    uint64_t size = 0;
    std::shared_ptr<const Fd> dir;
    std::string name;
  };

  static std::string entry_name(uint32_t record) { return fmt::format("{}{}", record, kEntrySuffix); }
  // Record r's copy: the one open_ holds while it is unchanged, else opened and checked anew.
  Copy copy_of(uint32_t record);
  Copy open_copy(uint32_t record);
  // The copy of `record` (or all of them) is not read through open_ again: it was replaced,
  // dropped, evicted or failed a read.
  void forget(uint32_t record);
  void forget_all();
  // Serves the leading bytes of [offset, offset + dst.size()) that `copy` holds; how many.
  uint64_t serve(Copy& copy, uint32_t record, uint64_t offset, std::span<uint8_t> dst);
  // read_ranges, given record copy_record's copy (looked up already) for its ranges of that record.
  void read_ranges_from(uint32_t copy_record, Copy copy, std::span<RangeRead> batch, Done done);
  // Plans the rest of a read the copy did not serve: a tail from `at` passed on (and kept when
  // it continues the copy), counted as a partial hit or a miss.
  Keep plan(const Copy& copy, uint64_t offset, uint64_t covered);
  void issue(std::shared_ptr<Job> job, Done done);
  void complete(Job& job);
  // Queues what of `bytes` index::checked_len vouches for: a damaged transfer is never kept.
  void keep_checked(uint32_t record, uint64_t from, std::span<const uint8_t> bytes, bool replace);
  void enqueue(uint32_t record, uint64_t from, std::span<const uint8_t> bytes, bool replace);
  void writer();
  void store(const Pending& p);
  // Rescans the folder and removes least recently used files until `grow` more bytes fit
  // (with some slack, so that scans are rare); this store's entry `keep` is never removed.
  // Under disk_mu_.
  void evict(uint64_t grow, const std::string& keep);
  std::vector<Entry> scan();
  void clean_temp(int dir, const std::string& name);
  // A disk error or an unusable copy: counted (disk_cache.errors) and logged with its cause (the
  // 1st, 10th, 100th, ...: a full or failing disk repeats it at every copy). The origin serves.
  void disk_error(const std::string& cause);
  // Copies the first `len` bytes of the entry `entry` (the current copy, which must still hold
  // them) to `out`, the new copy being written as `out_name`.
  Status copy_head(int folder, const std::string& entry, uint64_t len, int out, const std::string& out_name);
  std::string where(const std::string& entry) const { return (folder_ / entry).string(); }

  const index::Store& store_;
  const std::unique_ptr<RecordSource> inner_;
  const fs::path dir_, folder_;
  const uint64_t max_;
  // Every file is opened, renamed and removed relative to these, never through a symbolic link
  // (common/private_dir.h): DIR, and DIR/<identity>.
  Fd dir_fd_, folder_fd_;
  bool disabled_ = false;
  std::string problem_;  // why disabled_

  mutable std::mutex open_mu_;
  std::unordered_map<uint32_t, std::shared_ptr<const OpenCopy>> open_;  // at most kOpenCopies
  std::atomic<bool> direct_refused_{false};  // the folder's filesystem refused an O_DIRECT read

  std::mutex disk_mu_;            // writes, evictions and drops of this mount
  std::atomic<uint64_t> used_{0};  // bytes in the folder, as last counted (written under disk_mu_)
  std::atomic<uint64_t> temp_counter_{0};

  std::mutex queue_mu_;
  std::condition_variable queue_cv_, idle_cv_;
  std::deque<Pending> queue_;
  uint64_t queued_bytes_ = 0;
  bool writing_ = false, stop_ = false;
  std::thread writer_;  // started by the first copy (after any fork of the mount)

  struct {
    std::atomic<uint64_t> hits{0}, partial_hits{0}, misses{0}, bytes_from_disk{0}, bytes_written{0}, not_kept{0},
        evictions{0}, dropped{0}, errors{0};
  } stats_;
};

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
  thread_local std::vector<uint8_t> buf;
  buf.resize(len);
  RangeRead range{record, offset, {buf.data(), len}, {}};
  std::latch done(1);
  read_ranges_from(record, copy, {&range, 1}, [&done] { done.count_down(); });
  done.wait();
  if (!range.status.ok()) return range.status.error();
  return std::span<const uint8_t>(buf.data(), len);
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

void DiskCachedSource::keep_checked(uint32_t record, uint64_t from, std::span<const uint8_t> bytes, bool replace) {
  const uint64_t checked = index::checked_len(store_, record, from, bytes);
  if (checked == 0 && !bytes.empty()) stats_.dropped.fetch_add(1, std::memory_order_relaxed);
  enqueue(record, from, bytes.first(checked), replace);
}

void DiskCachedSource::enqueue(uint32_t record, uint64_t from, std::span<const uint8_t> bytes, bool replace) {
  if (bytes.empty() || from + bytes.size() > max_) return;  // could never fit
  std::lock_guard lock(queue_mu_);
  if (stop_) return;
  if (!queue_.empty() && queued_bytes_ + bytes.size() > kMaxQueuedBytes) {
    stats_.not_kept.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Pending p{record, from, bytes.size(), std::make_unique_for_overwrite<uint8_t[]>(bytes.size()), replace};
  std::memcpy(p.bytes.get(), bytes.data(), bytes.size());
  queued_bytes_ += p.len;
  queue_.push_back(std::move(p));
  if (!writer_.joinable()) writer_ = std::thread([this] { writer(); });
  queue_cv_.notify_one();
}

void DiskCachedSource::flush() {
  std::unique_lock lock(queue_mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

void DiskCachedSource::writer() {
  std::unique_lock lock(queue_mu_);
  for (;;) {
    queue_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, everything written
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    {
      std::lock_guard disk(disk_mu_);
      store(p);
    }
    lock.lock();
    queued_bytes_ -= p.len;
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void DiskCachedSource::disk_error(const std::string& cause) {
  if (const uint64_t n = count_for_log(stats_.errors))
    log_warn("disk cache: {} (disk cache errors so far: {}; the store serves what the disk cannot)", cause, n);
}

Status DiskCachedSource::copy_head(int folder, const std::string& entry, uint64_t len, int out, const std::string& out_name) {
  const Fd in(::openat(folder, entry.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (in.get() < 0) return Error{errno, fmt::format("{}: cannot open: {}", where(entry), std::strerror(errno))};
  std::vector<uint8_t> buf(std::min<uint64_t>(len, 1 << 20));
  for (uint64_t at = 0; at < len;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), len - at);
    if (Status st = pread_exact(in.get(), buf.data(), n, at, where(entry)); !st.ok()) return st;
    if (Status st = write_loop(out, buf.data(), n, out_name); !st.ok()) return st;
    at += n;
  }
  return {};
}

// Writes the longer copy beside the entry and renames it over, so that readers in any process
// see the old copy or the new one whole; a crash before the rename leaves a temporary file.
void DiskCachedSource::store(const Pending& p) {
  const std::string entry = entry_name(p.record);
  const int folder = folder_fd_.get();
  const uint64_t total = p.from + p.len;
  struct stat st {};
  const uint64_t old = stat_file(folder, entry, st) ? static_cast<uint64_t>(st.st_size) : 0;
  if (old >= total && !p.replace) return;  // as long a copy is there already (another reader, mount)
  if (p.from > old) return;                // what it continued is gone (evicted, dropped)
  const uint64_t grow = total > old ? total - old : 0;
  if (used_.load() + grow > max_) evict(grow, entry);

  const std::string temp = fmt::format("{}{}-{}-{}", kTempPrefix, ::getpid(), ::gettid(), temp_counter_++);
  Fd out(create_private_file(folder, temp.c_str()));
  if (out.get() < 0) {
    disk_error(fmt::format("{}: cannot create: {}; the copy is not kept", where(temp), std::strerror(errno)));
    return;
  }
  Status ok = p.from > 0 ? copy_head(folder, entry, p.from, out.get(), where(temp)) : Status{};
  // Synced before the rename: after a power loss the entry is the old copy or all of the new one.
  if (ok.ok()) ok = write_loop(out.get(), p.bytes.get(), p.len, where(temp));
  if (ok.ok() && ::fdatasync(out.get()) != 0) ok = Error{errno, fmt::format("{}: cannot sync: {}", where(temp), std::strerror(errno))};
  out.reset();
  // Replaces whatever has the entry's name, a symbolic link included (the link, not its target).
  if (ok.ok() && ::renameat(folder, temp.c_str(), folder, entry.c_str()) != 0)
    ok = Error{errno, fmt::format("{}: cannot rename to {}: {}", where(temp), entry, std::strerror(errno))};
  if (!ok.ok()) {
    ::unlinkat(folder, temp.c_str(), 0);
    disk_error(ok.error().message + "; the copy is not kept");
    return;
  }
  forget(p.record);  // the longer copy serves from now on
  used_.store(used_.load() - std::min(used_.load(), old) + total);
  stats_.bytes_written.fetch_add(total, std::memory_order_relaxed);
}

void DiskCachedSource::evict(uint64_t grow, const std::string& keep) {
  // One evicting mount at a time: another's scan would count files this one is removing. Only a
  // lock file of this user's is waited on: another user's (in a shared sticky folder) could be
  // held forever.
  Fd lock(::openat(dir_fd_.get(), ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
  struct stat lock_st {};
  if (lock.get() >= 0 && ::fstat(lock.get(), &lock_st) == 0 && S_ISREG(lock_st.st_mode) && lock_st.st_uid == ::geteuid())
    ::flock(lock.get(), LOCK_EX);  // released when closed
  else
    disk_error(fmt::format("{}: not a lock file of this user's; evicting without it", (dir_ / ".lock").string()));
  std::vector<Entry> entries = scan();
  if (used_.load() + grow <= max_) return;  // others' evictions made room
  const uint64_t room = max_ - std::min(max_, grow);
  const uint64_t target = room - std::min(room, max_ / 16);  // slack: the next scan comes later
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return older(a.used, b.used); });
  for (const Entry& e : entries) {
    if (used_.load() <= target) break;
    if (e.dir->get() == folder_fd_.get() && e.name == keep) continue;
    if (::unlinkat(e.dir->get(), e.name.c_str(), 0) == 0) {
      stats_.evictions.fetch_add(1, std::memory_order_relaxed);
      if (e.dir->get() == folder_fd_.get()) forget_all();  // an open copy would keep its space taken
    }
    else if (errno != ENOENT) {  // ENOENT: another mount removed it
      disk_error(fmt::format("{}: cannot evict: {}", e.name, std::strerror(errno)));
      continue;
    }
    used_.store(used_.load() - std::min(used_.load(), e.size));
  }
}

std::vector<DiskCachedSource::Entry> DiskCachedSource::scan() {
  std::vector<Entry> out;
  uint64_t total = 0;
  const std::string own = folder_.filename().string();
  for (const std::string& store_dir : names_in(dir_fd_.get())) {
    // Each store's folder, never through a symbolic link, and only this user's: files in a
    // folder someone else made are neither counted nor removed.
    std::shared_ptr<const Fd> dir;
    if (store_dir == own) {
      dir = std::shared_ptr<const Fd>(&folder_fd_, [](const Fd*) {});
    } else {
      auto opened = std::make_shared<Fd>(
          ::openat(dir_fd_.get(), store_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat st {};
      if (opened->get() < 0 || ::fstat(opened->get(), &st) != 0 || st.st_uid != ::geteuid()) continue;  // e.g. .lock
      dir = std::move(opened);
    }
    for (const std::string& name : names_in(dir->get())) {
      if (name.starts_with(kTempPrefix)) {
        clean_temp(dir->get(), name);
        continue;
      }
      struct stat st {};
      if (!name.ends_with(kEntrySuffix) || !stat_file(dir->get(), name, st)) continue;
      total += static_cast<uint64_t>(st.st_size);
      out.push_back({st.st_mtim, static_cast<uint64_t>(st.st_size), dir, name});
    }
  }
  used_.store(total);
  return out;
}

// A temporary file is removed when the process that wrote it is gone, or when it is old enough
// that no writer can still be at it (a process in another pid namespace, a reused pid). Removing
// one a writer still needs only makes that writer's rename fail: nothing is served from it.
void DiskCachedSource::clean_temp(int dir, const std::string& name) {
  struct stat st {};
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  const pid_t pid = temp_pid(name);
  const bool gone = pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH;
  if (gone || st.st_mtime + kStaleTempSeconds < ::time(nullptr)) ::unlinkat(dir, name.c_str(), 0);
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
