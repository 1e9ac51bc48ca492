// The index, written as records complete so that no file's row stays in memory past its record:
// each stored file's row goes to a scratch table keyed by its source index; finish() writes the
// index with those rows in source order, numbered 0..n-1 (a skipped file leaves no gap).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "pack/record_builder.h"
#include "index/sqlite_db.h"

namespace fid::pack {

// What the index's meta table records of the pack (docs/FORMAT.md).
struct PackMeta {
  uint64_t seed = 0;
  uint64_t record_bytes = 0;
  std::string shard;          // "I/N"
  std::string source_digest;  // pack/shard.h
  std::string level_scripts;  // "pcr" or "fast"
  index::StoreLayout layout = index::StoreLayout::scan;
  bool clips = false;  // a clips table follows: format 5
  bool streams = false;  // videos kept as streams (frame files, a video_streams table): format 7
};

class IndexWriter {
 public:
  // A writer whose scratch table lives at `scratch` (the caller removes the file once the
  // writer is gone).
  static fid::Result<std::unique_ptr<IndexWriter>> create(const std::filesystem::path& scratch);

  fid::Status add(const StoredFile& f);

  // Writes the complete index at `path` (docs/FORMAT.md).
  fid::Status finish(const std::filesystem::path& path, const PackMeta& meta, const sources::SourceTree& tree,
                     const std::vector<RecordInfo>& records);

 private:
  IndexWriter() = default;
  fid::Status write_files(index::SqliteDb& db, const sources::SourceTree& tree);
  // The videos table: tree.videos whose folders hold files, with the count written.
  fid::Status write_videos(index::SqliteDb& db, const sources::SourceTree& tree);
  fid::Status write_video_streams(index::SqliteDb& db, const sources::SourceTree& tree);

  std::unique_ptr<index::SqliteDb> scratch_;
  std::optional<index::SqliteStatement> insert_;
  std::vector<uint32_t> files_in_dir_;  // by dir, counted by write_files
};

}  // namespace fid::pack
