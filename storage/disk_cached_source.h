// DiskCachedSource, the disk cache of make_disk_cached_source (storage/disk_cache.h): its reads
// (disk_cache.cpp) and the folder it keeps, written and evicted (disk_cache_folder.cpp). Only
// those two files include this.
#pragma once

#include <fmt/format.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/fd.h"
#include "index/store.h"
#include "storage/disk_cache.h"
#include "storage/record_source.h"

namespace fid::storage {

class DiskCachedSource final : public RecordSource, public DiskCache {
 public:
  DiskCachedSource(const index::Store& store, std::unique_ptr<RecordSource> inner, const std::filesystem::path& dir, uint64_t max_bytes,
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
  static constexpr size_t kOpenCopies = 128;                      // copies kept open (two descriptors each)
  static constexpr auto kReopenAfter = std::chrono::seconds(1);  // how long one stays open without reopening
  // A record's cached copy, open and checked. Kept open in open_ for the reads that follow (one
  // fstat each instead of an open, a header read, a touch and a close), for kReopenAfter at most:
  // reopening touches the copy, so a copy in use is marked used about once a second. The writer
  // thread closes copies open longer (close_idle_copies), so that one another mount evicts does
  // not keep its space taken.
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

  static constexpr std::string_view kTempPrefix = ".tmp-";
  static constexpr std::string_view kEntrySuffix = ".p";
  static std::string entry_name(uint32_t record) { return fmt::format("{}{}", record, kEntrySuffix); }
  // The regular file `name` in `dir` (never through a symbolic link); false if it is something else.
  static bool stat_file(int dir, const std::string& name, struct stat& st) {
    return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
  }
  // Record r's copy: the one open_ holds while it is unchanged, else opened and checked anew.
  Copy copy_of(uint32_t record);
  Copy open_copy(uint32_t record);
  // The copy of `record` (or all of them) is not read through open_ again: it was replaced,
  // dropped, evicted or failed a read.
  void forget(uint32_t record);
  void forget_all();
  // Closes the copies open for kReopenAfter or longer (the next read would reopen them anyway);
  // whether any are still open.
  bool close_idle_copies();
  // Starts the writer thread if it has not started. Under queue_mu_.
  void start_writer_locked();
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
  const std::filesystem::path dir_, folder_;
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
  // Copies are open: the writer closes the idle ones every kReopenAfter. Set by the first copy
  // opened (which wakes the writer); cleared by the writer once none is open.
  bool closing_copies_ = false;
  std::thread writer_;  // started by the first copy written or opened (after any fork of the mount)

  struct {
    std::atomic<uint64_t> hits{0}, partial_hits{0}, misses{0}, bytes_from_disk{0}, bytes_written{0}, not_kept{0},
        evictions{0}, dropped{0}, errors{0};
  } stats_;
};

}  // namespace fid::storage
