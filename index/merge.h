// `fidelityfs merge`: one store from the parts of a sharded pack (pack --shard I/N). The parts'
// record files are hard-linked into the new store, never rewritten (their headers keep the ids
// the parts gave them: records.header_id); the index is the union of the parts' rows, files
// renumbered in walk order and records part after part (docs/FORMAT.md "Merged stores").
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "common/error.h"

namespace fid::index {

struct MergeReport {
  uint64_t files = 0, records = 0, dirs = 0, skipped = 0;
  uint32_t parts = 0;
  double seconds = 0;
};

// Merges `parts` (every part of one pack, any order) into `store`. Refuses parts that are not
// stores, of different sources or packs (digest, seed, levels, level scripts, format, record
// size, shard count), two parts with one shard number, and missing shards; the error names the
// parts. The parts and the store must be on one filesystem (EXDEV otherwise). On any failure,
// and when `cancel` becomes true (ECANCELED), nothing is left at `store`.
fid::Result<MergeReport> merge(const std::vector<std::filesystem::path>& parts, const std::filesystem::path& store,
                               const std::atomic<bool>& cancel);

}  // namespace fid::index
