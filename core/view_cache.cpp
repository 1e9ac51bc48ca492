#include "core/view_cache.h"

namespace fid::core {

ViewCache::View ViewCache::get(uint32_t file, const std::function<View()>& render) {
  std::unique_lock lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->file != file) continue;
    entries_.splice(entries_.begin(), entries_, it);
    auto view = it->view;
    lock.unlock();
    hits_.fetch_add(1, std::memory_order_relaxed);
    return view.get();
  }
  std::promise<View> promise;
  entries_.push_front(Entry{file, promise.get_future().share(), 0});
  lock.unlock();
  View v;
  try {
    v = render();
  } catch (...) {
    v = nullptr;
  }
  promise.set_value(v);
  renders_.fetch_add(1, std::memory_order_relaxed);
  lock.lock();
  finish_locked(file, v);
  return v;
}

void ViewCache::finish_locked(uint32_t file, const View& v) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->file != file || it->bytes != 0) continue;
    if (!v) {
      entries_.erase(it);
    } else {
      it->bytes = v->size();
      used_ += it->bytes;
    }
    break;
  }
  for (auto it = entries_.end(); used_ > budget_ && it != entries_.begin();) {
    --it;
    if (it->bytes == 0 || it->file == file) continue;  // being rendered, or just rendered
    used_ -= it->bytes;
    it = entries_.erase(it);
  }
}

uint64_t ViewCache::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

}  // namespace fid::core
