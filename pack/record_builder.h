// Lays prepared files out in one record (docs/FORMAT.md "Record files"): a scan record holds one
// region per level piece, a file record one region of JPEGs with their pieces back to back (a
// clip's frames there by level: every frame's header, then every frame's level 1, ...), a whole
// record one region of whole payloads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "index/format.h"
#include "pack/prepare_file.h"

namespace fid::pack {

// A file's row of the index, complete once its record is written.
struct StoredFile {
  uint32_t source_index = 0;
  index::FileKind kind = index::FileKind::blob;
  uint32_t script = 0;
  uint32_t width = 0, height = 0;
  uint64_t source_size = 0;
  int64_t mtime_ns = 0;
  uint32_t record = 0, slot = 0;
  std::vector<index::Piece> pieces;
  std::string note;
};

// A run of one clip's frames in a record (a row of the index's clips table).
struct ClipRow {
  uint32_t dir = 0;
  uint32_t first_slot = 0, frames = 0;
};

struct RecordInfo {
  std::string path;
  index::RecordLayout layout = index::RecordLayout::scan;
  uint64_t size = 0;
  std::vector<uint64_t> region_ends;
  std::vector<ClipRow> clips;  // in slot order
};

class RecordBuilder {
 public:
  // `record_bytes`: the size at which the record closes; a one-region layout reserves a little more
  // at its first file, so that the region is not copied as it doubles (a doubling past the size
  // would hold both copies, three times the record, at the pack's peak).
  RecordBuilder(index::RecordLayout layout, uint64_t record_bytes);

  bool empty() const { return members_.empty(); }
  uint64_t bytes() const { return bytes_; }
  // At least `max_bytes` of payload, or `max_files` files.
  bool full(uint64_t max_bytes, uint32_t max_files) const {
    return bytes_ >= max_bytes || members_.size() >= max_files;
  }
  index::RecordLayout layout() const { return layout_; }

  // `clip`: the clip the file is a frame of (any id; frames of one clip come one after another),
  // with its folder; kNoClip for any other file.
  static constexpr uint32_t kNoClip = UINT32_MAX;
  void add(const PreparedFile& f, uint32_t clip = kNoClip, uint32_t clip_dir = 0);

  // Empties the builder for the next record, keeping its regions' memory (not that of a region a
  // large file grew past twice the record size).
  void clear();

  // Writes and flushes record `id` under `store_tmp` and completes its members' rows (record,
  // slot, pieces).
  fid::Result<RecordInfo> write(const std::filesystem::path& store_tmp, uint32_t id);

  // The rows of the files of the record, in slot order, once write() has succeeded.
  template <typename Fn>
  void for_each_file(Fn&& fn) const {
    for (const Member& m : members_) fn(m.file);
  }

 private:
  struct LocalPiece {
    int region;
    uint64_t offset;
    uint32_t size;
    uint32_t checksum;
  };
  struct Member {
    StoredFile file;
    std::vector<LocalPiece> pieces;
  };

  LocalPiece append(int region, std::span<const uint8_t> bytes);
  // A file record's clip frames are held by level until the clip's run ends, then laid out.
  void end_clip_run();

  index::RecordLayout layout_;
  uint64_t record_bytes_ = 0;
  uint64_t reserve_ = 0;  // bytes a one-region layout reserves at its first file
  std::vector<std::vector<uint8_t>> regions_;
  std::vector<Member> members_;
  uint64_t bytes_ = 0;
  std::vector<ClipRow> clips_;
  uint32_t clip_ = kNoClip;                    // the clip of the run being added
  std::vector<std::vector<uint8_t>> by_level_;  // a file record's run: its frames' piece k in by_level_[k]
};

}  // namespace fid::pack
