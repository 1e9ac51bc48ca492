// Lays prepared files out in one record (docs/FORMAT.md "Record files"): a scan record holds one
// region per level piece, a file record one region of JPEGs with their pieces back to back, a
// whole record one region of whole payloads.
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

struct RecordInfo {
  std::string path;
  index::RecordLayout layout = index::RecordLayout::scan;
  uint64_t size = 0;
  std::vector<uint64_t> region_ends;
};

class RecordBuilder {
 public:
  // `record_bytes`: the size at which the record closes; a one-region layout reserves a little more
  // at its first file, so that the region is not copied as it doubles (a doubling past the size
  // would hold both copies, three times the record, at the pack's peak).
  RecordBuilder(index::RecordLayout layout, uint64_t record_bytes);

  bool empty() const { return members_.empty(); }
  // At least `max_bytes` of payload, or `max_files` files.
  bool full(uint64_t max_bytes, uint32_t max_files) const {
    return bytes_ >= max_bytes || members_.size() >= max_files;
  }
  index::RecordLayout layout() const { return layout_; }

  void add(const PreparedFile& f);

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

  index::RecordLayout layout_;
  uint64_t record_bytes_ = 0;
  uint64_t reserve_ = 0;  // bytes a one-region layout reserves at its first file
  std::vector<std::vector<uint8_t>> regions_;
  std::vector<Member> members_;
  uint64_t bytes_ = 0;
};

}  // namespace fid::pack
