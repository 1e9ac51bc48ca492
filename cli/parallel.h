// The worker pool of the commands that go through a store file by file (verify, quality): items
// 0..n-1 shared out to threads, with a progress line refreshed while they run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "cli/progress.h"

namespace fid::cli {

// Works on item `i` with `buffer`, which its thread keeps from item to item (reads reuse its
// capacity); returns the bytes it read, for the progress line's rate.
using ItemWork = std::function<uint64_t(size_t i, std::vector<uint8_t>& buffer)>;

// Runs work(i) once for every i in [0, items) on `jobs` threads (0: one per core), each taking
// the next item when it finishes one, and refreshes `progress` every 200 ms until all are done;
// then finishes the line. `work` must be safe to call from several threads at once.
void for_each_parallel(size_t items, unsigned jobs, const ItemWork& work, ProgressLine& progress);

}  // namespace fid::cli
