#include "core/prefetcher.h"

#include <algorithm>

namespace fid::core {

namespace {
constexpr uint32_t kTolerance = 4;  // positions between an access and an earlier one of its rank
}  // namespace

bool OrderDetector::on_access(uint32_t p, uint32_t tolerance) {
  ++accesses_;
  for (size_t k = 0; k < streams_n_; ++k) {
    Stream& s = streams_[k];
    if (p > s.front && p - s.front <= tolerance) {
      s.score = accesses_ - s.used <= kStreams ? std::min(s.score + 1, kMaxScore) : 1;
      s.front = p;
    } else if (p > s.front || s.front - p > tolerance) {
      continue;
    }
    s.used = accesses_;
    return s.score >= kFollowScore;
  }
  Stream* slot = streams_n_ < kStreams ? &streams_[streams_n_++]
                                       : std::min_element(streams_, streams_ + kStreams,
                                                          [](const Stream& a, const Stream& b) { return a.used < b.used; });
  *slot = Stream{p, 0, accesses_};
  return false;
}

bool OrderDetector::following() const {
  for (size_t k = 0; k < streams_n_; ++k)
    if (streams_[k].score >= kFollowScore && accesses_ - streams_[k].used <= kStreams) return true;
  return false;
}

Prefetcher::Prefetcher(const index::Store& store, RecordCache& cache, ReadStats& stats, uint64_t window_bytes,
                       uint32_t order_window, std::function<uint64_t()> in_flight_target)
    : store_(store),
      cache_(cache),
      stats_(stats),
      window_(window_bytes),
      order_window_(std::max(1u, order_window)),
      in_flight_target_(std::move(in_flight_target)) {
  for (unsigned i = 0; i < kMaxLoads; ++i) threads_.emplace_back([this] { worker(); });
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

void Prefetcher::follow(const index::OrderParams& order) {
  {
    std::lock_guard lock(mu_);
    if (ix_ && ix_->seed == order.seed && ix_->epoch == order.epoch && ix_->world == std::max(1u, order.world)) return;
  }
  auto ix = build_order_index(store_, order);  // outside the lock
  std::lock_guard lock(mu_);
  ix_ = std::move(ix);
  detector_.reset();
  last_scan_ = UINT32_MAX;
  since_scan_ = 0;
}

unsigned Prefetcher::loading() const {
  std::lock_guard lock(mu_);
  return loading_;
}

bool Prefetcher::following() const {
  std::lock_guard lock(mu_);
  return ix_ && detector_.following();
}

void Prefetcher::on_access(uint32_t f, int level) {
  std::unique_lock lock(mu_);
  if (!ix_ || window_ == 0 || f >= ix_->pos.size()) return;
  const uint32_t p = ix_->pos[f];
  if (p == UINT32_MAX) return;
  if (!detector_.on_access(p, kTolerance)) return;  // random access: the file's own pieces only
  const uint32_t i = ix_->rec_index[store_.files()[f].record];
  if (i == UINT32_MAX) return;
  if (i == last_scan_ && ++since_scan_ < 16) return;
  last_scan_ = i;
  since_scan_ = 0;
  const bool queued = queue_ahead_locked(p, i, level);
  lock.unlock();
  if (queued) cv_.notify_all();
}

bool Prefetcher::queue_ahead_locked(uint32_t p, uint32_t i, int level) {
  const OrderIndex& ix = *ix_;
  // Records not finished yet (last use at or after p, less the tolerance), from a little before
  // the current one (the order draws from a window of records), up to the end of this rank's
  // records: the next ones belong to another rank, read by another reader (or node).
  const size_t back = 2 * static_cast<size_t>(order_window_) + 4;
  uint64_t bytes = 0;
  bool queued = false;
  for (size_t j = i > back ? i - back : 0; j < ix.seg_end[i] && bytes < window_; ++j) {
    if (static_cast<uint64_t>(ix.last_pos[j]) + kTolerance < p) continue;
    const uint32_t rec = ix.rec_seq[j];
    const int lvl = cache_.prefix_level(rec, level);
    bytes += cache_.prefix_len(rec, lvl);
    if (bytes > window_ && j != i) break;
    if (cache_.mark_queued(rec, lvl)) {
      queue_.emplace_back(rec, lvl);
      stats_.prefetch_issued.fetch_add(1, std::memory_order_relaxed);
      queued = true;
    }
  }
  return queued;
}

bool Prefetcher::may_load_locked() const {
  return may_start_load(loading_, loading_bytes_, in_flight_target_ ? in_flight_target_() : 0);
}

void Prefetcher::worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || (!queue_.empty() && may_load_locked()); });
    if (stop_) return;
    auto [r, lvl] = queue_.front();
    queue_.pop_front();
    const uint64_t len = cache_.prefix_len(r, lvl);
    ++loading_;
    loading_bytes_ += len;
    lock.unlock();
    cache_.load(r, lvl, true);
    lock.lock();
    --loading_;
    loading_bytes_ -= len;
    cv_.notify_all();  // another worker may start now
  }
}

}  // namespace fid::core
