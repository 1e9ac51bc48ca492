// The disk cache's folder: copies written by the writer thread, eviction and the scans that
// count the folder and remove crash leftovers (storage/disk_cache.h says how).
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/log.h"
#include "common/posix_io.h"
#include "common/private_dir.h"
#include "index/format.h"
#include "storage/disk_cached_source.h"

namespace fid::storage {

namespace {

constexpr uint64_t kMaxQueuedBytes = 64ull << 20;  // copies waiting for the writer thread
constexpr time_t kStaleTempSeconds = 600;           // a temporary file this old is a crash's leftover

// The pid a temporary file's name (.tmp-<pid>-...) starts with after its prefix, 0 if none.
pid_t temp_pid(std::string_view name) {
  pid_t pid = 0;
  for (char c : name) {
    if (c < '0' || c > '9') break;
    pid = pid * 10 + (c - '0');
  }
  return pid;
}

bool older(const timespec& a, const timespec& b) { return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec; }

}  // namespace

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
  start_writer_locked();
  queue_cv_.notify_one();
}

void DiskCachedSource::start_writer_locked() {
  if (!writer_.joinable()) writer_ = std::thread([this] { writer(); });
}

void DiskCachedSource::flush() {
  std::unique_lock lock(queue_mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

void DiskCachedSource::writer() {
  std::unique_lock lock(queue_mu_);
  using Clock = std::chrono::steady_clock;
  constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point next_close = kNever;  // while closing_copies_
  for (;;) {
    const auto work = [&] { return stop_ || !queue_.empty() || (closing_copies_ && next_close == kNever); };
    if (next_close == kNever) queue_cv_.wait(lock, work);
    else queue_cv_.wait_until(lock, next_close, work);
    if (closing_copies_ && next_close == kNever) next_close = Clock::now() + kReopenAfter;
    if (next_close != kNever && Clock::now() >= next_close) {
      // Cleared first: a copy opened while they close sets it again (or is still open after).
      closing_copies_ = false;
      lock.unlock();
      const bool open = close_idle_copies();
      lock.lock();
      closing_copies_ = closing_copies_ || open;
      next_close = closing_copies_ ? Clock::now() + kReopenAfter : kNever;
      continue;
    }
    if (queue_.empty()) {
      if (stop_) return;  // everything written
      continue;
    }
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
  const pid_t pid = temp_pid(std::string_view(name).substr(kTempPrefix.size()));
  const bool gone = pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH;
  if (gone || st.st_mtime + kStaleTempSeconds < ::time(nullptr)) ::unlinkat(dir, name.c_str(), 0);
}

}  // namespace fid::storage
