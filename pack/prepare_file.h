// Per-file preparation, run on pack's worker threads: a JPEG becomes a progressive transcode cut
// into level pieces, a lossless image an L3 payload, anything else a blob stored byte-identical.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/jpeg.h"
#include "index/format.h"
#include "sources/pack_source.h"

namespace fid::pack {

struct PreparedFile {
  uint32_t source_index = 0;
  bool skipped = false;
  bool unread = false;  // skipped because the source could not read it
  std::string note;  // why skipped, or why stored as a blob
  index::FileKind kind = index::FileKind::blob;
  uint32_t script = 0;  // jpeg: scan script; l3: codec::shape_code
  uint32_t width = 0, height = 0;
  uint64_t source_size = 0;
  int64_t mtime_ns = 0;  // the source's, when it was read
  // jpeg: the transcoded stream and its cuts; other kinds: the whole payload in `payload`.
  codec::ProgressiveJpeg jpeg;
  std::vector<uint8_t> payload;

  uint64_t full_bytes() const { return kind == index::FileKind::jpeg ? jpeg.bytes.size() : payload.size(); }
};

// Reads file `index` of the tree from `source` and prepares it; never throws (a file that cannot
// be read or held in memory comes back skipped, with the reason).
PreparedFile prepare_file(const sources::PackSource& source, const sources::SourceTree& tree, uint32_t index,
                          codec::LevelScripts levels);

}  // namespace fid::pack
