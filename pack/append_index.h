// The index side of `pack --append` (append.h), shared by the append to a folder and to s3://:
// a store's tree as its index has it, a source checked against it, and the union index of the
// store and the appended part (docs/FORMAT.md "Appended stores").
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/error.h"
#include "index/sqlite_db.h"
#include "sources/pack_source.h"

namespace fid::pack {

// A store's folders (relative paths by id, mtimes), files (relative paths) and records, as its
// index has them.
struct AppendTree {
  std::vector<std::string> dirs;
  std::vector<int64_t> dir_mtimes;
  std::vector<std::string> files;
  std::unordered_set<std::string> clip_dirs;   // folders with clip runs
  std::unordered_set<std::string> video_dirs;  // folders made from videos (the videos table)
  uint32_t records = 0;
  bool unreferenced = false;  // it has an unreferenced table (format 6: files an append replaced)
};

// The index.sqlite in the folder `dir` (a store, a part, or where an s3:// store's index was
// fetched to), read-only; ENOENT saying it is not a store when there is none.
fid::Result<std::unique_ptr<index::SqliteDb>> open_append_index(const std::filesystem::path& dir);
// `name` says whose index it is in errors (EINVAL: corrupt).
fid::Result<AppendTree> read_append_tree(const index::SqliteDb& db, const std::string& name);
// EEXIST naming the first source paths that the store has already (a file, or a file where the
// source has a folder, or the reverse), that add files to one of its clip folders or to a folder
// it made from a video (whose frame count the index holds), or the folder of a source video that
// the store has already. With `replace`, a file where the store has a file (outside clip folders)
// is not refused.
fid::Status refuse_existing(const AppendTree& old, const sources::SourceTree& tree, const std::string& store_name, bool replace);
// How many of the part's files replace a file of the store (pack --append --replace).
size_t replaced_files(const AppendTree& old, const AppendTree& part);
// The record paths the index at `db` references (records.path).
fid::Result<std::unordered_set<std::string>> record_paths(const index::SqliteDb& db);

// The path, in the union index, of the appended part's record that gets id `id` there.
using PartRecordPath = std::function<std::string(uint32_t id)>;
// Writes the union index of the store (old_db, old) and the part (part_db, part) to `to`; a part's
// file at a path the store has replaces the store's, whose pieces become unreferenced rows.
fid::Status write_union_index(const index::SqliteDb& old_db, const AppendTree& old, const index::SqliteDb& part_db,
                              const AppendTree& part, const PartRecordPath& part_record_path,
                              const std::filesystem::path& to);

// Fault injection for the tests of an interrupted append: FIDELITYFS_APPEND_STOP=PHASE stops
// the process (SIGSTOP) at that phase, where the test kills it.
void stop_here_for_tests(const char* phase);

}  // namespace fid::pack
