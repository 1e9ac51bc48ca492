// The index's optional videos table (docs/FORMAT.md "videos"): a row a clip folder that
// `pack --video-frames` made from a video.
#pragma once

#include <span>
#include <vector>

#include "common/error.h"
#include "index/sqlite_db.h"
#include "index/store.h"

namespace fid::index {

// The rows by folder, checked against `dirs` (folders linked to their files): EINVAL naming the
// folder when a row is out of range or its frames are not the folder's file count; none when
// the index has no such table; SQLite's error (EIO) when it cannot be read.
Result<std::vector<VideoSource>> read_videos_table(const SqliteDb& db, std::span<const Dir> dirs);

}  // namespace fid::index
