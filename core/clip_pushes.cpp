// See clip_pushes.h.
#include "core/clip_pushes.h"

#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>

namespace fid::core {

ClipPushes::ClipPushes(const index::Store& store, const InodeMap& inodes, const Namespace& names, FileReader& reader,
                       const config::Settings& settings)
    : store_(store), inodes_(inodes), names_(names), reader_(reader), enabled_(settings.clip_push),
      max_bytes_(settings.clip_push_bytes) {}

ClipPushes::~ClipPushes() { detach(); }

void ClipPushes::attach(KernelCache* kernel) {
  detach();
  if (!enabled_ || kernel == nullptr) return;
  std::lock_guard lock(mu_);
  kernel_ = kernel;
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void ClipPushes::detach() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    jobs_.clear();
    kernel_ = nullptr;
  }
  wake_.notify_all();
  idle_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ClipPushes::on_read(const Node& n, uint64_t offset) {
  if (!enabled_ || offset != 0 || n.type != NodeType::file || n.view != 0 || n.id >= store_.files().size()) return;
  if (store_.clip_of(store_.files()[n.id]) != nullptr) queue(Job{n.id, true});
}

void ClipPushes::on_lookup(const Node& n) {
  if (!enabled_ || n.type != NodeType::file || n.view != 0 || n.id >= store_.files().size()) return;
  if (store_.clip_of(store_.files()[n.id]) != nullptr) queue(Job{n.id, false});
}

void ClipPushes::queue(Job job) {
  {
    std::lock_guard lock(mu_);
    if (kernel_ == nullptr || off_.load(std::memory_order_relaxed)) return;
    if (jobs_.size() >= kMaxQueued) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    jobs_.push_back(job);
  }
  wake_.notify_one();
}

void ClipPushes::wait_idle() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return stop_ || (jobs_.empty() && !busy_); });
}

void ClipPushes::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    const Job job = jobs_.front();
    jobs_.pop_front();
    busy_ = true;
    KernelCache& kernel = *kernel_;  // detach() stops this thread before it clears the pointer's target
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    push_job(kernel, job);
    push_ns_.fetch_add(static_cast<uint64_t>(std::chrono::nanoseconds(std::chrono::steady_clock::now() - start).count()),
                       std::memory_order_relaxed);
    lock.lock();
    busy_ = false;
    if (jobs_.empty()) idle_.notify_all();
  }
}

void ClipPushes::push_job(KernelCache& kernel, const Job& job) {
  if (!job.rest_of_run) {
    push(kernel, job.file, max_bytes_, /*just_looked_up=*/true);
    return;
  }
  const index::File& f = store_.files()[job.file];
  const index::ClipRun* run = store_.clip_of(f);
  const auto frames = store_.record_files(run->record).subspan(run->first_slot, run->frames);
  uint64_t sent = 0;
  for (uint32_t k = f.slot - run->first_slot + 1; k < frames.size() && sent < max_bytes_; ++k)
    if (names_.is_known(frames[k])) sent += push(kernel, frames[k], max_bytes_ - sent, /*just_looked_up=*/false);
}

uint64_t ClipPushes::push(KernelCache& kernel, uint32_t file, uint64_t room, bool just_looked_up) {
  if (off_.load(std::memory_order_relaxed)) return 0;
  const uint64_t ino = names_.live_file_ino(file);
  const Node n = inodes_.decode(ino);
  if (n.sequential) return 0;  // its bytes are made by its own read
  std::optional<FileReader::Bytes> bytes = reader_.cached(store_.files()[file], n.level);
  if (!bytes || bytes->size() > room) return 0;
  Status stored = kernel.store(ino, bytes->data, bytes->tail);
  const auto until = std::chrono::steady_clock::now() + kLookupRetries;
  while (just_looked_up && !stored && stored.error().code == ENOENT && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
    stored = kernel.store(ino, bytes->data, bytes->tail);
  }
  if (!stored) {
    // ENOENT: the kernel holds no such inode (forgotten, or not made yet). Anything else: it
    // takes no stores at all.
    if (stored.error().code != ENOENT) off_.store(true, std::memory_order_relaxed);
    refused_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  frames_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(bytes->size(), std::memory_order_relaxed);
  return bytes->size();
}

void ClipPushes::add_readings(Readings& out) const {
  using K = Reading::Kind;
  out.push_back({"clips.pushed_frames", K::counter, "fidelityfs_clip_pushed_frames_total",
                 "clip frames stored into the kernel's page cache", frames_.load()});
  out.push_back({"clips.pushed_bytes", K::counter, "fidelityfs_clip_pushed_bytes_total",
                 "bytes of clip frames stored into the kernel's page cache", bytes_.load()});
  out.push_back({"clips.push_us", K::counter, "fidelityfs_clip_push_microseconds_total",
                 "time the pushing thread spent storing clip frames", push_ns_.load() / 1000});
  out.push_back({"clips.push_refused", K::counter, "", "", refused_.load()});
  out.push_back({"clips.push_dropped", K::counter, "", "", dropped_.load()});
}

}  // namespace fid::core
