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
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/log.h"
#include "common/private_dir.h"
#include "index/format.h"
#include "common/posix_io.h"

namespace fid::storage {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxQueuedBytes = 64ull << 20;  // copies waiting for the writer thread
constexpr time_t kStaleTempSeconds = 600;           // a temporary file this old is a crash's leftover
constexpr std::string_view kTempPrefix = ".tmp-";
constexpr std::string_view kEntrySuffix = ".p";

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

 private:
  // A record's cached copy opened for reading; size 0 when there is none to use. `unusable`: a
  // file is there but cannot serve (foreign header, too long, read error): a new copy replaces it.
  struct Copy {
    Fd fd;
    uint64_t size = 0;
    bool unusable = false;
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
  Copy open_copy(uint32_t record);
  // Serves the leading bytes of [offset, offset + dst.size()) that `copy` holds; how many.
  uint64_t serve(Copy& copy, uint64_t offset, std::span<uint8_t> dst);
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

DiskCachedSource::Copy DiskCachedSource::open_copy(uint32_t record) {
  Copy c;
  // O_NONBLOCK: a FIFO in an entry's place must not hang the read (it is then no regular file).
  c.fd = Fd(::openat(folder_fd_.get(), entry_name(record).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (c.fd.get() < 0) {
    if (errno != ENOENT) disk_error(fmt::format("{}: cannot open: {}", where(entry_name(record)), std::strerror(errno)));
    c.unusable = errno == ELOOP;  // a symbolic link: replaced by the next copy, never read through
    return c;
  }
  struct stat st {};
  uint8_t header[index::kRecordHeaderSize];
  const uint64_t size = ::fstat(c.fd.get(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
  // A published copy always starts with the record's header; anything else is not ours to serve.
  const std::string name = where(entry_name(record));
  Status header_read = size < sizeof header ? Status(Error{EIO, fmt::format("{}: shorter than a record header", name)})
                       : size > store_.records()[record].size
                           ? Status(Error{EIO, fmt::format("{}: longer than record {}", name, record)})
                           : pread_exact(c.fd.get(), header, sizeof header, 0, name);
  if (header_read.ok() && (std::memcmp(header, index::kRecordMagic.data(), index::kRecordMagic.size()) != 0 ||
                           index::get_le(header + 8, 4) != store_.records()[record].header_id))
    header_read = Error{EIO, fmt::format("{}: not a copy of record {} of this store (another header)", name, record)};
  if (!header_read.ok()) {
    disk_error(header_read.error().message + "; it is replaced by the next copy");
    c.fd.reset();
    c.unusable = true;
    return c;
  }
  c.size = size;
  const timespec touch[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};  // mtime = last use, for eviction
  ::futimens(c.fd.get(), touch);
  return c;
}

uint64_t DiskCachedSource::serve(Copy& copy, uint64_t offset, std::span<uint8_t> dst) {
  if (copy.size <= offset) return 0;
  const uint64_t covered = std::min<uint64_t>(copy.size - offset, dst.size());
  if (Status read = pread_exact(copy.fd.get(), dst.data(), covered, offset, "a disk cache copy"); !read.ok()) {
    disk_error(read.error().message + "; the copy is not trusted again");  // it changed under us
    copy = Copy{};
    copy.unusable = true;
    return 0;
  }
  stats_.bytes_from_disk.fetch_add(covered, std::memory_order_relaxed);
  return covered;
}

DiskCachedSource::Keep DiskCachedSource::plan(const Copy& copy, uint64_t offset, uint64_t covered) {
  (covered > 0 ? stats_.partial_hits : stats_.misses).fetch_add(1, std::memory_order_relaxed);
  const uint64_t at = offset + covered;
  return Keep{at == copy.size, at, copy.unusable};  // kept only if it continues the copy (or starts one)
}

void DiskCachedSource::read_prefixes(std::span<PrefixRead> batch, Done done) {
  auto job = std::make_shared<Job>();
  for (PrefixRead& p : batch) {
    Copy copy;
    if (!disabled_ && p.record < store_.records().size() && p.len > 0) copy = open_copy(p.record);
    const uint64_t covered = serve(copy, 0, {p.dst, p.len});
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
  auto job = std::make_shared<Job>();
  Copy copy;
  uint32_t copy_of = UINT32_MAX;
  for (RangeRead& r : batch) {
    if (r.record != copy_of) {  // a batch is mostly one record's pieces: open its copy once
      copy = (!disabled_ && r.record < store_.records().size()) ? open_copy(r.record) : Copy{};
      copy_of = r.record;
    }
    const uint64_t covered = serve(copy, r.offset, r.dst);
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

// Writes the longer copy beside the entry and renames it over, so that readers in any process
// see the old copy or the new one whole; a crash before the rename leaves a temporary file.
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
    if (::unlinkat(e.dir->get(), e.name.c_str(), 0) == 0) stats_.evictions.fetch_add(1, std::memory_order_relaxed);
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
