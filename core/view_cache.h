// The last rendered views: of L3 files (their decoded pixels as PNG, PPM or NPY) and of JPEG
// levels re-encoded sequential, each under its own key (view_key), bounded in bytes, so that a file read in many requests (128 KiB readahead chunks of a 6 MB view) is
// decoded once. A view being rendered is shared with concurrent readers of the same file. The
// most recent view is kept even if it alone is over the budget (a larger view would otherwise be
// decoded once per request). Each view also counts a fixed overhead, so that a reader of many
// tiny views (any user of an allow_other mount can open every file) cannot grow the table past
// the budget either; a view is found by a hash lookup, not a walk of the list.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "common/error.h"

#include "codec/l3_batch.h"

namespace fid::core {

class ViewCache {
 public:
  using View = std::shared_ptr<const codec::HostBuffer>;  // null: the render failed
  explicit ViewCache(uint64_t budget) : budget_(budget) {}

  // The key of file f's view: an L3 file's decoded view (level 0), or level k re-encoded sequential.
  static uint64_t view_key(uint32_t file, int level = 0) { return uint64_t(level) << 32 | file; }

  // The view under `key`: cached, being rendered by another reader (waited for), or rendered now
  // by `render`. A failed render is not cached (the next read tries again): its caller gets its
  // Error (ENOMEM if it ran out of memory, EIO for any other exception), the readers waiting for
  // it EIO. A render counts `expected_bytes` (its view's size, where known) from its start, so
  // that the views rendered at once never evict each other or those being read when they finish.
  Result<View> get(uint64_t key, uint64_t expected_bytes, const std::function<Result<View>()>& render);
  // A reader read `key`'s view to its end: it goes first among the views to evict, behind the
  // ones readers are still in (by recency alone, a view read to its end just now would outlast
  // one whose reader is between two of its requests).
  void read_to_end(uint64_t key);

  // Bytes of views kept, and expected of views being rendered, plus kEntryOverhead for each.
  uint64_t used() const;
  size_t entries() const;
  uint64_t budget() const { return budget_; }
  // What one view costs beyond its bytes (its list node, shared state, buffer and map slot).
  static constexpr uint64_t kEntryOverhead = 256;
  uint64_t hits() const { return hits_.load(); }
  uint64_t renders() const { return renders_.load(); }

 private:
  struct Entry {
    uint64_t key;
    std::shared_future<View> view;
    uint64_t bytes;     // 0 while rendering
    uint64_t reserved;  // while rendering: the bytes expected
  };
  using Entries = std::list<Entry>;
  // Accounts the rendered view under `key` (or forgets a failed one) and evicts least recently
  // used finished views beyond the budget, never the one just rendered. Locked.
  void finish_locked(uint64_t key, const View& v);
  // Evicts least recently used finished views while over the budget, never `keep`. Locked.
  void evict_locked(uint64_t keep);

  const uint64_t budget_;
  mutable std::mutex mu_;
  Entries entries_;  // most recently used first
  std::unordered_map<uint64_t, Entries::iterator> by_key_;
  uint64_t used_ = 0;
  std::atomic<uint64_t> hits_{0}, renders_{0};
};

}  // namespace fid::core
