#include "core/view_cache.h"

#include <fmt/format.h>

namespace fid::core {

Result<ViewCache::View> ViewCache::get(uint64_t key, uint64_t expected_bytes, const std::function<Result<View>()>& render) {
  std::unique_lock lock(mu_);
  if (auto found = by_key_.find(key); found != by_key_.end()) {
    entries_.splice(entries_.begin(), entries_, found->second);
    auto view = found->second->view;
    lock.unlock();
    hits_.fetch_add(1, std::memory_order_relaxed);
    if (View v = view.get()) return v;
    return Error{EIO, "its render failed in another reader"};
  }
  std::promise<View> promise;
  entries_.push_front(Entry{key, promise.get_future().share(), 0, expected_bytes});
  by_key_.emplace(key, entries_.begin());
  used_ += kEntryOverhead + expected_bytes;
  evict_locked(key);  // room for it now, from views no one reads, not from those rendered beside it
  lock.unlock();
  Result<View> r = Error{EIO, "rendering it failed"};
  bool returned = false;
  try {
    r = render();
    returned = true;
  } catch (const std::bad_alloc&) {  // never left pending: the readers waiting see a failed render
    r = Error{ENOMEM, "out of memory while rendering it"};
  } catch (const std::exception& e) {
    r = Error{EIO, fmt::format("rendering it failed: {}", e.what())};
  }
  const View v = r.ok() ? *r : nullptr;
  promise.set_value(v);
  if (returned) renders_.fetch_add(1, std::memory_order_relaxed);
  lock.lock();
  finish_locked(key, v);
  if (r.ok() && !v) return Error{EIO, "rendering it gave nothing"};
  return r;
}

void ViewCache::read_to_end(uint64_t key) {
  std::lock_guard lock(mu_);
  if (auto found = by_key_.find(key); found != by_key_.end() && found->second->bytes != 0)
    entries_.splice(entries_.end(), entries_, found->second);
}

void ViewCache::finish_locked(uint64_t key, const View& v) {
  if (auto found = by_key_.find(key); found != by_key_.end() && found->second->bytes == 0) {
    used_ -= found->second->reserved;
    found->second->reserved = 0;
    if (!v) {
      entries_.erase(found->second);
      by_key_.erase(found);
      used_ -= kEntryOverhead;
    } else {
      found->second->bytes = v->size();
      used_ += found->second->bytes;
    }
  }
  evict_locked(key);
}

void ViewCache::evict_locked(uint64_t keep) {
  for (auto it = entries_.end(); used_ > budget_ && it != entries_.begin();) {
    --it;
    if (it->bytes == 0 || it->key == keep) continue;  // being rendered, or just rendered
    used_ -= it->bytes + kEntryOverhead;
    by_key_.erase(it->key);
    it = entries_.erase(it);
  }
}

uint64_t ViewCache::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

size_t ViewCache::entries() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace fid::core
