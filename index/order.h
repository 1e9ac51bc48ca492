// Published read orders (/.fidelity/order/epoch-N[.rank-R-of-W]): every file in an I/O-friendly
// quasi-random order. A pure function of (store layout, seed, epoch, rank, world size, deal).
#pragma once

#include <cstdint>
#include <vector>

#include "index/store.h"

namespace fid::index {

// How the records are dealt to the ranks of a world w > 1: once for every epoch (stable: a
// rank, and so a node's disk cache, keeps the same records for the whole run), or anew each
// epoch from the epoch's shuffle (per_epoch).
enum class RankDeal { stable, per_epoch };

struct OrderParams {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint32_t rank = 0;
  uint32_t world = 1;
  uint32_t window = 4;  // records being drawn from at once
  RankDeal ranks = RankDeal::stable;
  bool operator==(const OrderParams&) const = default;
};

// File ids in read order. Files are drawn uniformly from the not-yet-read files of a window of
// `window` records, the next record joining when one runs out. World 1: the epoch's records
// shuffled, every file once. World w > 1: the shuffled records are dealt to the ranks, each to
// the rank with the fewest files so far (ties: the lowest rank), so a rank reads whole records
// and no other rank reads them; each rank draws from its own records with its own generator
// (stable: the deal depends on the seed only, and each epoch shuffles the rank's records before
// drawing). Every rank's order is then padded to the longest one's length by repeating its own
// last files (what DistributedSampler expects: equal lengths). docs/FORMAT.md gives the exact
// algorithm.
std::vector<uint32_t> epoch_order(const Store& store, const OrderParams& params);

// Every rank's order of world `params.world` (rank ignored) without the padding, in one pass:
// element r is rank r's. Ranks from size() on have no records of their own (more ranks than
// non-empty records) and are left out. World 1: the one order of epoch_order.
std::vector<std::vector<uint32_t>> epoch_rank_orders(const Store& store, const OrderParams& params);

// The records each rank of `params.world` reads (rank ignored; a stable deal ignores the epoch
// too), in the order its draw takes them; as epoch_rank_orders, ranks without records are left
// out. World 1: every non-empty record.
std::vector<std::vector<uint32_t>> rank_records(const Store& store, const OrderParams& params);

}  // namespace fid::index
