// The folder a pack writes into before it is a store: `.NAME.tmp-PID` beside the target, removed
// unless committed (renamed into place). While the pack runs it holds an exclusive flock(2) on the
// folder, so another pack of the same target can tell a running pack's folder (locked) from the
// leftover of a killed one (unlocked).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "common/error.h"
#include "common/fd.h"

namespace fid::pack {

class TempStore {
 public:
  // Clears the leftovers of earlier packs of `store` (an error if one still runs), then makes the
  // temporary folder with its records/ folder.
  static fid::Result<std::unique_ptr<TempStore>> begin(const std::filesystem::path& store);
  ~TempStore();
  TempStore(const TempStore&) = delete;
  TempStore& operator=(const TempStore&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Flushes the records folder and the folder, then renames the folder to `store` (an empty
  // target folder is replaced atomically by rename(2)).
  fid::Status commit(const std::filesystem::path& store);
  // Checks the complete index written as index.sqlite.partial (check_before_commit: `writer`
  // writes `store`), flushes it and renames it index.sqlite: a folder that has an index.sqlite
  // has all of it.
  fid::Status publish_index(const std::string& store, const char* writer);

 private:
  TempStore() = default;
  std::filesystem::path path_;
  Fd lock_;
  bool committed_ = false;
};

// Checks where a store is to be written (pack, merge): absent or an empty folder, in a folder that
// exists. Returns its absolute path. Touches nothing.
fid::Result<std::filesystem::path> check_store_target(const std::filesystem::path& store);

}  // namespace fid::pack
