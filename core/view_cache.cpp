#include "core/view_cache.h"

namespace fid::core {

ViewCache::View ViewCache::get(uint32_t file, const std::function<View()>& render) {
  std::unique_lock lock(mu_);
  if (auto found = by_file_.find(file); found != by_file_.end()) {
    entries_.splice(entries_.begin(), entries_, found->second);
    auto view = found->second->view;
    lock.unlock();
    hits_.fetch_add(1, std::memory_order_relaxed);
    return view.get();
  }
  std::promise<View> promise;
  entries_.push_front(Entry{file, promise.get_future().share(), 0});
  by_file_.emplace(file, entries_.begin());
  used_ += kEntryOverhead;
  lock.unlock();
  View v;
  try {
    v = render();
  } catch (...) {  // not kept pending: the readers waiting see a failed render, the caller the exception
    promise.set_value(nullptr);
    lock.lock();
    finish_locked(file, nullptr);
    throw;
  }
  promise.set_value(v);
  renders_.fetch_add(1, std::memory_order_relaxed);
  lock.lock();
  finish_locked(file, v);
  return v;
}

void ViewCache::finish_locked(uint32_t file, const View& v) {
  if (auto found = by_file_.find(file); found != by_file_.end() && found->second->bytes == 0) {
    if (!v) {
      entries_.erase(found->second);
      by_file_.erase(found);
      used_ -= kEntryOverhead;
    } else {
      found->second->bytes = v->size();
      used_ += found->second->bytes;
    }
  }
  for (auto it = entries_.end(); used_ > budget_ && it != entries_.begin();) {
    --it;
    if (it->bytes == 0 || it->file == file) continue;  // being rendered, or just rendered
    used_ -= it->bytes + kEntryOverhead;
    by_file_.erase(it->file);
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
