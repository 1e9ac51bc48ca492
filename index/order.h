// Published read orders (/.fidelity/order/epoch-N): every file once, in an I/O-friendly
// quasi-random order. A pure function of (store layout, seed, epoch, rank, world size).
#pragma once

#include <cstdint>
#include <vector>

#include "index/store.h"

namespace fid::index {

struct OrderParams {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint32_t rank = 0;
  uint32_t world = 1;
  uint32_t window = 4;  // records being drawn from at once
};

// File ids in read order. The epoch's records are shuffled; files are drawn uniformly from the
// not-yet-read files of a window of `window` records, the next record joining when one runs out.
// Rank r of w gets positions r, r+w, r+2w, ... of that order: ranks are disjoint, together
// complete, and their lengths differ by at most one. docs/FORMAT.md gives the exact algorithm.
std::vector<uint32_t> epoch_order(const Store& store, const OrderParams& params);

}  // namespace fid::index
