// Page-aware prefetch: when reads follow a published order (/.fidelity/order/...), the records
// that order needs next are read ahead, one whole-prefix read each, at the level being read,
// within a window of bytes (inside the cache budget). Random access is left alone: its reads
// keep fetching only each file's own pieces.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fs/orders.h"
#include "fs/record_cache.h"
#include "index/store.h"

namespace fid::fs {

class Prefetcher {
 public:
  Prefetcher(const index::Store& store, RecordCache& cache, IoStats& stats, uint64_t window_bytes, unsigned threads,
             uint32_t order_window);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // A reader opened the order of (seed, epoch) (any rank of `world`): follow it from now on.
  void follow(uint64_t seed, uint64_t epoch, uint32_t world);
  // A reader starts reading file f at `level`.
  void on_access(uint32_t f, int level);
  bool following() const;
  uint64_t window_bytes() const { return window_; }

 private:
  void worker();

  const index::Store& store_;
  RecordCache& cache_;
  IoStats& stats_;
  const uint64_t window_;
  const uint32_t order_window_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::pair<uint32_t, int>> queue_;  // (record, prefix level), in need order
  std::shared_ptr<const OrderIndex> ix_;
  uint32_t world_ = 1;
  // Sequential-progress detector: positions of the last accesses; an access is "in order" when
  // one of them precedes it closely. `score_` rises on in-order accesses, falls fast otherwise.
  static constexpr size_t kRecent = 16;
  uint32_t recent_[kRecent] = {};
  size_t recent_n_ = 0, recent_head_ = 0;
  int score_ = 0;
  uint32_t last_scan_ = UINT32_MAX;
  unsigned since_scan_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace fid::fs
