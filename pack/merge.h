// `fidelityfs merge`: one store from the parts of a sharded pack (pack --shard I/N). The parts'
// record files are hard-linked into the new store, never rewritten (their headers keep the ids
// the parts gave them: records.header_id); the index is the union of the parts' rows, files
// renumbered in walk order and records part after part (docs/FORMAT.md "Merged stores").
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "pack/packer.h"

namespace fid::pack {

struct MergeReport {
  uint64_t files = 0, records = 0, dirs = 0, skipped = 0;
  uint32_t parts = 0;
  double seconds = 0;
};

// A merge whose parts or store are not local folders (s3://: cli/cmd_merge.cpp). The parts are then
// local folders holding only their index.sqlite, and the store a local scratch path.
struct MergeIo {
  std::vector<std::string> part_names;  // for messages, one per part as given; empty: the folders
  // Puts record `from` (relative to part `part`, as given) into the store as `to`; it may return
  // before the record is there (the destination's finish() waits). Null: a hard link.
  std::function<fid::Status(size_t part, const std::string& from, const std::string& to)> place_record;
  // Takes the finished index (PackDestination::finish); null: the store is the local folder.
  PackDestination* destination = nullptr;
};

// Merges `parts` (every part of one pack, any order) into `store`. Refuses parts that are not
// stores, of different sources or packs (digest, seed, levels, level scripts, format, record
// size, shard count), two parts with one shard number, and missing shards; the error names the
// parts. The parts and the store must be on one filesystem (EXDEV otherwise). On any failure,
// and when `cancel` becomes true (ECANCELED), nothing is left at `store`.
// The checks merge() makes of its parts before it writes anything, with the same errors: for a
// caller that must know before it prepares the store (opening an s3:// store clears the target).
fid::Status check_merge_parts(const std::vector<std::filesystem::path>& parts, const MergeIo& io = {});

fid::Result<MergeReport> merge(const std::vector<std::filesystem::path>& parts, const std::filesystem::path& store,
                               const std::atomic<bool>& cancel, const MergeIo& io = {});

}  // namespace fid::pack
