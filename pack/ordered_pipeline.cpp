#include "pack/ordered_pipeline.h"

#include <algorithm>
#include <chrono>

namespace fid::pack {

OrderedPipeline::OrderedPipeline(const sources::PackSource& source, const sources::SourceTree& tree, const std::vector<uint32_t>& order,
                                 unsigned jobs, codec::LevelScripts levels, const std::atomic<bool>& cancel)
    : source_(source), tree_(tree), order_(order), levels_(levels),
      window_(std::max<size_t>(4, 4 * static_cast<size_t>(jobs))), slots_(window_), cancel_(cancel) {
  for (unsigned i = 0; i < jobs; ++i) workers_.emplace_back([this] { work(); });
}

std::optional<PreparedFile> OrderedPipeline::next() {
  std::unique_lock lock(mu_);
  auto& slot = slots_[consumed_ % window_];
  // Polls: `cancel` is set from a signal handler, which cannot notify a condition variable.
  while (!ready_cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return slot.has_value() || cancel_.load(); })) {
  }
  if (!slot.has_value()) return std::nullopt;
  std::optional<PreparedFile> out = std::move(slot);
  slot.reset();
  ++consumed_;
  space_cv_.notify_all();
  return out;
}

void OrderedPipeline::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  space_cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
}

void OrderedPipeline::work() {
  while (true) {
    size_t pos;
    {
      std::unique_lock lock(mu_);
      space_cv_.wait(lock, [&] { return stopping_ || cancel_ || claimed_ >= order_.size() || claimed_ < consumed_ + window_; });
      if (stopping_ || cancel_ || claimed_ >= order_.size()) return;
      pos = claimed_++;
    }
    PreparedFile f = prepare_file(source_, tree_, order_[pos], levels_);
    {
      std::lock_guard lock(mu_);
      slots_[pos % window_] = std::move(f);
    }
    ready_cv_.notify_all();
  }
}

}  // namespace fid::pack
