// See folder_listings.h.
#include "core/folder_listings.h"

#include <algorithm>
#include <string>

#include "common/log.h"

namespace fid::core {

FolderListings::FolderListings(const index::Store& store, const config::Settings& settings)
    : store_(store), enabled_(settings.readdir != config::Readdir::plain) {
  if (enabled_) lookups_ = std::make_unique<std::atomic<uint32_t>[]>(store.dirs().size());
}

FolderListings::~FolderListings() { detach(); }

void FolderListings::attach(KernelCache* kernel) {
  detach();
  if (!enabled_ || kernel == nullptr) return;
  std::lock_guard lock(mu_);
  kernel_ = kernel;
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void FolderListings::detach() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    queue_.clear();
    kernel_ = nullptr;
  }
  wake_.notify_all();
  idle_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FolderListings::on_lookup(const Node& n) {
  // Only the live tree: a lookup under /.fidelity/sg/K/ is in another folder than the live one.
  if (!lookups_ || n.type != NodeType::file || n.view != 0 || n.id >= store_.files().size()) return;
  const index::File& f = store_.files()[n.id];
  if (store_.clip_of(f) != nullptr || f.dir >= store_.dirs().size()) return;
  std::atomic<uint32_t>& count = lookups_[f.dir];
  uint32_t now = count.load(std::memory_order_relaxed);
  if (now == kListed) return;
  const uint32_t threshold = std::max(kMinLookups, store_.dirs()[f.dir].file_count / kShare);
  // The one lookup that takes the count to the threshold queues the listing.
  do {
    if (now == kListed) return;
  } while (!count.compare_exchange_weak(now, now + 1 >= threshold ? kListed : now + 1, std::memory_order_relaxed));
  if (now + 1 < threshold) return;
  {
    std::lock_guard lock(mu_);
    if (kernel_ != nullptr && queue_.size() < kMaxQueued) {
      queue_.push_back({f.dir, std::chrono::steady_clock::now()});
      wake_.notify_one();
      return;
    }
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
}

void FolderListings::wait_idle() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return stop_ || (queue_.empty() && !busy_); });
}

void FolderListings::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Queued q = queue_.front();
    queue_.pop_front();
    if (std::chrono::steady_clock::now() - q.at > kStale) {
      stale_.fetch_add(1, std::memory_order_relaxed);
      if (queue_.empty()) idle_.notify_all();
      continue;
    }
    busy_ = true;
    KernelCache& kernel = *kernel_;  // detach() joins this thread before the kernel's object goes
    lock.unlock();
    const std::string path = store_.relative_path(store_.dirs()[q.dir]);
    if (Status st = kernel.list_folder(path, {}); st.ok()) {
      listed_.fetch_add(1, std::memory_order_relaxed);
    } else {
      failed_.fetch_add(1, std::memory_order_relaxed);
      log_debug("listing {} ahead of its lookups: {}", path.empty() ? "/" : path, st.error().message);
    }
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

void FolderListings::add_readings(Readings& out) const {
  using K = Reading::Kind;
  out.push_back({"folders_listed_ahead.listed", K::counter, "fidelityfs_folders_listed_ahead_total",
                 "folders the daemon listed through the mount ahead of a reader looking their files up", listed_.load()});
  out.push_back({"folders_listed_ahead.failed", K::counter, "", "", failed_.load()});
  out.push_back({"folders_listed_ahead.dropped", K::counter, "", "", dropped_.load()});
  out.push_back({"folders_listed_ahead.stale", K::counter, "", "", stale_.load()});
}

}  // namespace fid::core
