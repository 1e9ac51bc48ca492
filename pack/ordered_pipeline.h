// Ordered parallel map: workers prepare files in storage order, at most `window` ahead of the
// writer, so memory stays bounded whatever the source's size.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "pack/prepare_file.h"

namespace fid::pack {

class OrderedPipeline {
 public:
  OrderedPipeline(const sources::PackSource& source, const sources::SourceTree& tree, const std::vector<uint32_t>& order, unsigned jobs,
                  codec::LevelScripts levels, const std::atomic<bool>& cancel);
  ~OrderedPipeline() { stop(); }

  // The next file in storage order, or nullopt once cancelled.
  std::optional<PreparedFile> next();
  void stop();

 private:
  void work();

  const sources::PackSource& source_;
  const sources::SourceTree& tree_;
  const std::vector<uint32_t>& order_;
  const codec::LevelScripts levels_;
  const size_t window_;
  std::vector<std::optional<PreparedFile>> slots_;
  const std::atomic<bool>& cancel_;
  std::mutex mu_;
  std::condition_variable ready_cv_, space_cv_;
  size_t claimed_ = 0, consumed_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace fid::pack
