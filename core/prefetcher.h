// Page-aware prefetch: when reads follow a published order (/.fidelity/order/...), the records
// that order needs next are read ahead, one whole-prefix read each, at the level being read,
// within a window of bytes (inside the cache budget). Random access is left alone: its reads
// keep fetching only each file's own pieces.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/orders.h"
#include "core/record_cache.h"
#include "index/store.h"

namespace fid::core {

// Says whether accesses follow an order. It keeps kStreams streams, each the front (furthest
// position) of one reader's progress: an access a little ahead of a stream's front (within
// `tolerance`) extends it and raises its score, one a little behind it (reader threads run out of
// step) keeps it alive, and any other access starts a stream in place of the stalest. A score
// only rises while its stream is extended densely (within kStreams accesses of the last time);
// random access, which lands near a front only by chance, keeps restarting it. Ranks sharing a
// mount and DataLoader workers each extend their own stream, and readers in random order beside
// them (a random sampler, a `find`) churn only the other streams: they never lower a follower's
// score. An access is followed when its stream's score has reached kFollowScore.
class OrderDetector {
 public:
  static constexpr size_t kStreams = 16;
  static constexpr int kFollowScore = 8;
  static constexpr int kMaxScore = 32;

  // Records an access at order position p; returns whether its stream is followed.
  bool on_access(uint32_t p, uint32_t tolerance);
  // Whether some stream is followed and was extended within the last kStreams accesses.
  bool following() const;
  void reset() { *this = OrderDetector(); }

 private:
  struct Stream {
    uint32_t front = 0;
    int score = 0;
    uint64_t used = 0;  // the access count when last extended, for replacing the stalest
  };
  Stream streams_[kStreams];
  size_t streams_n_ = 0;
  uint64_t accesses_ = 0;
};

// How many prefix loads run at once: at least kMinLoads, more while fewer than `target` bytes
// are loading (bandwidth x latency of a remote store), up to kMaxLoads. The prefetcher's loads
// and the loads readers start (random_reads=records) are each held to it.
inline constexpr unsigned kMinLoads = 2;
inline constexpr unsigned kMaxLoads = 16;
// A local disk serves more than two loads at once (its queue is deep), and there readers do not
// wait for a load (RecordSource::pieces_while_loading): the loads they start may run this many
// at once (level 5, records mode: 1.25x ext4 with 2, 1.56x with 8; docs/BENCHMARKS.md).
inline constexpr unsigned kLocalReaderLoads = 8;
inline bool may_start_load(unsigned loading, uint64_t loading_bytes, uint64_t target, unsigned min_loads = kMinLoads) {
  return loading < min_loads || (loading < kMaxLoads && loading_bytes < target);
}

// The loads readers start themselves, under may_start_load.
class ReaderLoads {
 public:
  explicit ReaderLoads(std::function<uint64_t()> in_flight_target, unsigned min_loads = kMinLoads)
      : target_(std::move(in_flight_target)), min_(min_loads) {}
  // Runs load() once a load of `len` bytes may start (waiting for one to end if need be).
  template <class Load>
  void run(uint64_t len, Load&& load) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return may_start_load(loading_, bytes_, target_ ? target_() : 0, min_); });
      ++loading_;
      bytes_ += len;
    }
    run_started(len, load);
  }
  // Runs load() if a load of `len` bytes may start now; false (and load() not run) if not.
  template <class Load>
  bool try_run(uint64_t len, Load&& load) {
    {
      std::lock_guard lock(mu_);
      if (!may_start_load(loading_, bytes_, target_ ? target_() : 0, min_)) return false;
      ++loading_;
      bytes_ += len;
    }
    run_started(len, load);
    return true;
  }
  unsigned loading() const {
    std::lock_guard lock(mu_);
    return loading_;
  }

 private:
  // load(), counted as loading until it ends however it ends.
  template <class Load>
  void run_started(uint64_t len, Load& load) {
    struct Slot {
      ReaderLoads& loads;
      uint64_t len;
      ~Slot() {
        {
          std::lock_guard lock(loads.mu_);
          --loads.loading_;
          loads.bytes_ -= len;
        }
        loads.cv_.notify_one();
      }
    } slot{*this, len};
    load();
  }

  const std::function<uint64_t()> target_;
  const unsigned min_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  unsigned loading_ = 0;
  uint64_t bytes_ = 0;
};

class Prefetcher {
 public:
  Prefetcher(const index::Store& store, RecordCache& cache, ReadStats& stats, uint64_t window_bytes,
             uint32_t order_window, std::function<uint64_t()> in_flight_target = {});
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // A reader opened `order` (any rank of its world): follow that epoch's rank orders from now
  // on (the last world size opened wins).
  void follow(const index::OrderParams& order);
  // A reader starts reading file f at `level`.
  void on_access(uint32_t f, int level);
  bool following() const;
  // Prefixes being loaded now.
  unsigned loading() const;

 private:
  void worker();
  // Queues the records the order needs from position p on, in order of first use, until the
  // window is full. Locked.
  bool queue_ahead_locked(uint32_t p, uint32_t rec_index, int level);

  const index::Store& store_;
  RecordCache& cache_;
  ReadStats& stats_;
  const uint64_t window_;
  const uint32_t order_window_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::pair<uint32_t, int>> queue_;  // (record, prefix level), in need order
  std::shared_ptr<const OrderIndex> ix_;
  OrderDetector detector_;
  uint32_t last_scan_ = UINT32_MAX;
  unsigned since_scan_ = 0;
  // Whether a worker may start another load now. Locked.
  bool may_load_locked() const;

  const std::function<uint64_t()> in_flight_target_;
  unsigned loading_ = 0;       // loads under way
  uint64_t loading_bytes_ = 0;  // their bytes
  std::vector<std::thread> threads_;
};

}  // namespace fid::core
