// The one rule every store writer obeys before it commits (docs/DESIGN.md "Writing a store"): the
// index it is about to commit loads with the loader's own checks, those of `mount`. An index the
// loader would refuse is a bug of the writer; the command then fails with the loader's message and
// the store is left exactly as it was.
#pragma once

#include <filesystem>
#include <string>

#include "common/error.h"

namespace fid::pack {

// Loads `index_file` as index::Store does at mount. On a refusal: EIO, "internal error: ...",
// naming `store` (what the command writes), `writer` (pack, append, merge, relayout) and the
// loader's message. Test hook: FIDELITYFS_TEST_INDEX_SQL=WRITER:SQL runs SQL on the index first
// when `writer` is WRITER, so that tests can make a writer's index one the loader refuses.
fid::Status check_before_commit(const std::filesystem::path& index_file, const std::string& store, const char* writer);

}  // namespace fid::pack
