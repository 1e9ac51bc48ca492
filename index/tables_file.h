// A store's loaded tables as one file laid out for mmap. A mount maps it instead of holding the
// tables in its own memory: the page cache shares the pages between mounts and can evict them,
// and a mount that finds the file made never opens index.sqlite. The file is a private cache
// made on this machine from an index the loader has checked (host byte order and struct
// layout); docs/FORMAT.md "The tables cache".
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/error.h"
#include "index/store.h"

namespace fid::index {

// What ties a tables file to the index it was made from. A store is never modified in place
// (pack renames a new folder over it, a remote copy is a new file per ETag), so a new index is
// a new inode; the hash of the first 4 KiB (SQLite's header and its change counter) guards
// against an edit in place.
struct IndexIdentity {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  uint64_t device = 0;
  uint64_t head_hash = 0;
  bool operator==(const IndexIdentity&) const = default;
};
Result<IndexIdentity> identify_index(const std::filesystem::path& index_file);

// The tables file of `index_file` in `dir`: <hex XXH3-64 of the index's canonical path>.tables.
std::filesystem::path tables_file_for(const std::filesystem::path& dir, const std::filesystem::path& index_file);

// The small part of a store, copied into memory when a tables file is mapped.
struct TablesMeta {
  int levels = 0;
  int format_version = 0;
  StoreLayout layout = StoreLayout::scan;
  uint64_t seed = 0;
  std::vector<Record> records;
  std::vector<ClipRun> clips;
  std::vector<VideoSource> videos;
};

// Writes the tables to `file` (a temporary file, then a rename; no fsync: a file cut short by a
// crash fails its checksum and is made again). Then removes the folder's other tables files
// whose index no longer exists, and temporary files of processes that are gone.
Status write_tables_file(const std::filesystem::path& file, const std::filesystem::path& index_file,
                         const IndexIdentity& identity, const TablesMeta& meta, const TableSpans& tables);

class MappedTables {
 public:
  // Maps `file` read-only if it was made from the index `expect` describes and its checksums
  // hold (reading it once, sequentially). The Error says why not: ENOENT (no file), ESTALE (made
  // from another index or by another build), EINVAL (damaged).
  static Result<std::unique_ptr<MappedTables>> map(const std::filesystem::path& file, const IndexIdentity& expect);
  ~MappedTables();
  MappedTables(const MappedTables&) = delete;
  MappedTables& operator=(const MappedTables&) = delete;

  const TableSpans& tables() const { return tables_; }
  TablesMeta& meta() { return meta_; }

 private:
  MappedTables() = default;
  const void* base_ = nullptr;
  size_t size_ = 0;
  TableSpans tables_;
  TablesMeta meta_;
};

}  // namespace fid::index
