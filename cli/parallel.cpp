#include "cli/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

namespace fid::cli {

void for_each_parallel(size_t items, unsigned jobs, const ItemWork& work, ProgressLine& progress) {
  std::atomic<size_t> next{0}, done{0};
  std::atomic<uint64_t> bytes{0};
  if (jobs == 0) jobs = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < jobs; ++t) {
    workers.emplace_back([&] {
      std::vector<uint8_t> buffer;
      for (size_t i; (i = next++) < items;) {
        bytes += work(i, buffer);
        done++;
      }
    });
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (done < items) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // progress refresh period
    progress.update(done, items, bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  for (auto& w : workers) w.join();
  progress.finish();
}

}  // namespace fid::cli
