// See index_check.h.
#include "pack/index_check.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <memory>
#include <string_view>

#include "index/sqlite_db.h"
#include "index/store.h"

namespace fid::pack {

namespace {

// FIDELITYFS_TEST_INDEX_SQL=WRITER:SQL, for the tests of this rule only.
fid::Status break_for_tests(const std::filesystem::path& index_file, const char* writer) {
  const char* hook = std::getenv("FIDELITYFS_TEST_INDEX_SQL");
  if (hook == nullptr) return {};
  const std::string_view text(hook);
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos || text.substr(0, colon) != writer) return {};
  fid::Result<std::unique_ptr<index::SqliteDb>> db = index::SqliteDb::open(index_file.string(), /*writable=*/true);
  if (!db) return std::move(db).error();
  return (*db)->exec(std::string(text.substr(colon + 1)).c_str());
}

}  // namespace

fid::Status check_before_commit(const std::filesystem::path& index_file, const std::string& store, const char* writer) {
  if (fid::Status broken = break_for_tests(index_file, writer); !broken) return broken;
  fid::Result<std::unique_ptr<index::Store>> loaded = index::Store::open_index(index_file, store);
  if (loaded) return {};
  if (loaded.error().code != EINVAL) return std::move(loaded).error();  // out of memory: no verdict on the index
  return fid::Error{EIO, fmt::format("internal error: the index that {} wrote for {} fails the loader's checks, so "
                                     "nothing was committed ({}); please report this",
                                     writer, store, loaded.error().message)};
}

}  // namespace fid::pack
