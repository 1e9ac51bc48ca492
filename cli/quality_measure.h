// What fidelityfs quality measures: a seeded sample of a store's JPEGs, each read once as the
// mount serves it, decoded at every level and scored against full (codec/quality.h), and the
// class (top-level folder) each belongs to. The arithmetic is codec's (quality_sample.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/progress.h"
#include "codec/quality_sample.h"
#include "config/config.h"
#include "index/store.h"
#include "storage/record_source.h"

namespace fid::cli {

// The ids of the store's JPEG files.
std::vector<uint32_t> jpeg_ids(const index::Store& store);

// codec::seeded_sample of `ids`, in storage order: neighbours share record reads.
std::vector<uint32_t> storage_ordered_sample(const index::Store& store, const std::vector<uint32_t>& ids,
                                             size_t count, uint64_t seed);

// One sampled file.
struct MeasuredFile {
  std::string path;  // relative to the store's root
  codec::LevelScores levels;
  std::string error;  // empty when measured
};

// Measures the files `ids` on `jobs` threads (0: one per core), refreshing `progress`; sorted by
// path.
std::vector<MeasuredFile> measure_files(const index::Store& store, storage::RecordSource& source,
                                        const std::vector<uint32_t>& ids, unsigned jobs, ProgressLine& progress);

// ImageFolder's class: the top-level folder of the path; "" for files at the root.
std::string class_of(const std::string& relative_path);

// The config rule that sets `level` for a class's whole subtree; files at the root ("") get "*"
// (one path segment: the root's files only).
config::Rule class_rule(const std::string& cls, int level);

}  // namespace fid::cli
