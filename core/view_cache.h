// The last rendered views of L3 files (their decoded pixels as PNG, PPM or NPY), bounded in
// bytes, so that a file read in many requests (128 KiB readahead chunks of a 6 MB view) is
// decoded once. A view being rendered is shared with concurrent readers of the same file. The
// most recent view is kept even if it alone is over the budget (a larger view would otherwise be
// decoded once per request).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>

#include "codec/l3_batch.h"

namespace fid::core {

class ViewCache {
 public:
  using View = std::shared_ptr<const codec::HostBuffer>;  // null: the render failed
  explicit ViewCache(uint64_t budget) : budget_(budget) {}

  // The view of `file`: cached, being rendered by another reader (waited for), or rendered now
  // by `render`. A failed render (null, or an exception) is not cached: the next read tries again.
  View get(uint32_t file, const std::function<View()>& render);

  uint64_t used() const;
  uint64_t budget() const { return budget_; }
  uint64_t hits() const { return hits_.load(); }
  uint64_t renders() const { return renders_.load(); }

 private:
  struct Entry {
    uint32_t file;
    std::shared_future<View> view;
    uint64_t bytes;  // 0 while rendering
  };
  // Accounts the rendered view of `file` (or forgets a failed one) and evicts least recently
  // used finished views beyond the budget, never the one just rendered. Locked.
  void finish_locked(uint32_t file, const View& v);

  const uint64_t budget_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // most recently used first
  uint64_t used_ = 0;
  std::atomic<uint64_t> hits_{0}, renders_{0};
};

}  // namespace fid::core
