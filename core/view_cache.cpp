#include "core/view_cache.h"

namespace fid::core {

ViewCache::View ViewCache::get(uint64_t key, const std::function<View()>& render) {
  std::unique_lock lock(mu_);
  if (auto found = by_key_.find(key); found != by_key_.end()) {
    entries_.splice(entries_.begin(), entries_, found->second);
    auto view = found->second->view;
    lock.unlock();
    hits_.fetch_add(1, std::memory_order_relaxed);
    return view.get();
  }
  std::promise<View> promise;
  entries_.push_front(Entry{key, promise.get_future().share(), 0});
  by_key_.emplace(key, entries_.begin());
  used_ += kEntryOverhead;
  lock.unlock();
  View v;
  try {
    v = render();
  } catch (...) {  // not kept pending: the readers waiting see a failed render, the caller the exception
    promise.set_value(nullptr);
    lock.lock();
    finish_locked(key, nullptr);
    throw;
  }
  promise.set_value(v);
  renders_.fetch_add(1, std::memory_order_relaxed);
  lock.lock();
  finish_locked(key, v);
  return v;
}

void ViewCache::finish_locked(uint64_t key, const View& v) {
  if (auto found = by_key_.find(key); found != by_key_.end() && found->second->bytes == 0) {
    if (!v) {
      entries_.erase(found->second);
      by_key_.erase(found);
      used_ -= kEntryOverhead;
    } else {
      found->second->bytes = v->size();
      used_ += found->second->bytes;
    }
  }
  for (auto it = entries_.end(); used_ > budget_ && it != entries_.begin();) {
    --it;
    if (it->bytes == 0 || it->key == key) continue;  // being rendered, or just rendered
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
