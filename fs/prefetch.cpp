#include "fs/prefetch.h"

#include <algorithm>

namespace fid::fs {

namespace {
constexpr int kFollowScore = 8;  // in-order accesses (net) before prefetching starts
constexpr int kMaxScore = 32;
constexpr int kMissPenalty = 4;
constexpr uint32_t kTolerance = 4;  // positions (per rank) between an access and an earlier one
}  // namespace

Prefetcher::Prefetcher(const index::Store& store, RecordCache& cache, IoStats& stats, uint64_t window_bytes,
                       unsigned threads, uint32_t order_window)
    : store_(store), cache_(cache), stats_(stats), window_(window_bytes), order_window_(std::max(1u, order_window)) {
  for (unsigned i = 0; i < std::max(1u, threads); ++i) threads_.emplace_back([this] { worker(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  for (auto& [r, lvl] : queue_) cache_.unqueue(r);
}

void Prefetcher::follow(uint64_t seed, uint64_t epoch, uint32_t world) {
  {
    std::lock_guard lock(mu_);
    if (ix_ && ix_->seed == seed && ix_->epoch == epoch) {
      world_ = std::max(world_, world);
      return;
    }
  }
  auto ix = build_order_index(store_, seed, epoch, order_window_);  // outside the lock
  std::lock_guard lock(mu_);
  ix_ = std::move(ix);
  world_ = std::max(1u, world);
  recent_n_ = recent_head_ = 0;
  score_ = 0;
  last_scan_ = UINT32_MAX;
  since_scan_ = 0;
}

bool Prefetcher::following() const {
  std::lock_guard lock(mu_);
  return ix_ && score_ >= kFollowScore;
}

void Prefetcher::on_access(uint32_t f, int level) {
  std::unique_lock lock(mu_);
  if (!ix_ || window_ == 0 || f >= ix_->pos.size()) return;
  const OrderIndex& ix = *ix_;
  const uint32_t p = ix.pos[f];
  if (p == UINT32_MAX) return;
  const uint32_t tol = kTolerance * world_;
  bool seq = false;
  for (size_t k = 0; k < recent_n_ && !seq; ++k) seq = recent_[k] < p && p - recent_[k] <= tol;
  recent_[recent_head_] = p;
  recent_head_ = (recent_head_ + 1) % kRecent;
  recent_n_ = std::min(recent_n_ + 1, kRecent);
  score_ = seq ? std::min(score_ + 1, kMaxScore) : std::max(score_ - kMissPenalty, 0);
  if (score_ < kFollowScore) return;  // random access: the file's own pieces only

  const uint32_t r = store_.files()[f].record;
  const uint32_t i = ix.rec_index[r];
  if (i == UINT32_MAX) return;
  if (i == last_scan_ && ++since_scan_ < 16) return;
  last_scan_ = i;
  since_scan_ = 0;
  // The records the order needs from position p on: those not finished yet (last use at or after
  // p, less the tolerance), in order of first use, until the window is full.
  const size_t back = 2 * static_cast<size_t>(order_window_) + 4;
  size_t j = i > back ? i - back : 0;
  uint64_t bytes = 0;
  bool queued = false;
  for (; j < ix.rec_seq.size() && bytes < window_; ++j) {
    if (static_cast<uint64_t>(ix.last_pos[j]) + tol < p) continue;
    uint32_t rec = ix.rec_seq[j];
    const auto& record = store_.records()[rec];
    int lvl = record.layout == 0 ? level : 0;
    bytes += cache_.prefix_len(rec, lvl);
    if (bytes > window_ && j != i) break;
    if (cache_.mark_queued(rec, lvl)) {
      queue_.emplace_back(rec, lvl);
      stats_.prefetch_issued.fetch_add(1, std::memory_order_relaxed);
      queued = true;
    }
  }
  lock.unlock();
  if (queued) cv_.notify_all();
}

void Prefetcher::worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    auto [r, lvl] = queue_.front();
    queue_.pop_front();
    lock.unlock();
    cache_.load(r, lvl, true);
    lock.lock();
  }
}

}  // namespace fid::fs
