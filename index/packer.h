// Write side of a store: walks a source tree, transcodes JPEGs into level pieces, lays them out
// in records (PCR layout) in a seeded random order, and writes index.sqlite. The store appears
// at its final path only when complete (temporary folder + rename).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "codec/jpeg.h"
#include "common/error.h"
#include "index/shard.h"

namespace fid::index {

struct PackOptions {
  // One folder, or one or more tar files (docs/FORMAT.md "Sources").
  std::vector<std::filesystem::path> sources;
  bool expand_inner_tars = false;  // a member NAME.tar of a tar source becomes the folder NAME
  std::filesystem::path store;
  unsigned jobs = 0;                 // 0 = all cores
  uint64_t record_bytes = 8u << 20;  // target record size at full level
  // A record also closes at this many files, so that what it holds in memory until it is written
  // (its files' rows) stays bounded when files are tiny or empty.
  uint32_t record_files = 65536;
  uint64_t seed = 0;
  codec::LevelScripts levels = codec::LevelScripts::pcr;  // scan scripts of the JPEGs
  // The part of the source to pack (index/shard.h): every folder, and the files of this part.
  Shard shard;
};

struct PackProgress {
  uint64_t files_done = 0, files_total = 0;
  uint64_t source_bytes_done = 0, source_bytes_total = 0;
  double seconds = 0;
};

struct PackReport {
  uint64_t jpeg = 0, l3 = 0, blob = 0;
  uint64_t l3_bytes = 0, l3_source_bytes = 0;  // L3 payloads and the sources they came from
  std::vector<std::pair<std::string, std::string>> blobbed;  // path, why it is not a JPEG/L3
  std::vector<std::pair<std::string, std::string>> skipped;  // path, why it is not in the store
  std::vector<uint64_t> bytes_by_level;                      // all JPEGs at level 1..L
  uint64_t source_bytes = 0, store_bytes = 0, records = 0, dirs = 0;
  double seconds = 0;
};

// Checks the options before anything is written: the sources are one folder or tar files, the
// record size is at least 4096, the store is absent or an empty folder, not inside a source
// folder, and its parent folder exists. Returns the store's absolute path. Touches nothing. A failure here is the
// caller's mistake (the command line reports it as a usage error); pack() checks the same first.
fid::Result<std::filesystem::path> check_pack_options(const PackOptions& options);

// Packs options.source into options.store. On any failure, and when `cancel` becomes true
// (ECANCELED), nothing is left at options.store. `progress` is called from one thread.
fid::Result<PackReport> pack(const PackOptions& options, const std::function<void(const PackProgress&)>& progress,
                             const std::atomic<bool>& cancel);

// The storage order of n files for a seed: Fisher-Yates driven by SplitMix64 (docs/FORMAT.md).
std::vector<uint32_t> storage_permutation(uint32_t n, uint64_t seed);

}  // namespace fid::index
