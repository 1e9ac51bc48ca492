// What the mount never needs of a store, or needs apart from loading it: pack's notes read from
// the index on demand (inspect), and which fetched bytes the piece checksums vouch for (the disk
// cache).
#include <algorithm>

#include "index/format.h"
#include "index/sqlite_db.h"
#include "index/store.h"

namespace fid::index {

Result<Store::PackNotes> Store::pack_notes(const std::filesystem::path& index_file, size_t limit) const {
  try {
    SqliteDb db(index_file.string(), /*writable=*/false);
    PackNotes notes;
    SqliteStatement blobs(db, "SELECT id, note FROM files WHERE kind = 2 ORDER BY id");
    while (blobs.step()) {
      const int64_t id = blobs.integer(0);
      if (id < 0 || static_cast<uint64_t>(id) >= files().size()) continue;  // not a file this store loaded
      if (++notes.blob_count <= limit) notes.blobs.emplace_back(relative_path(files()[static_cast<size_t>(id)]), blobs.text(1));
    }
    SqliteStatement skipped(db, "SELECT path, reason FROM skipped");
    while (skipped.step()) {
      if (++notes.skipped_count > limit) continue;
      const auto path = skipped.blob(0);
      notes.skipped.emplace_back(std::string(path.begin(), path.end()), skipped.text(1));
    }
    return notes;
  } catch (const StoreError& e) {
    return Error{EINVAL, e.what()};
  }
}

uint64_t checked_len(const Store& store, uint32_t r, uint64_t from, std::span<const uint8_t> bytes) {
  const uint64_t to = from + bytes.size();
  uint64_t end = to;
  // The record's header is no piece: the bytes of it here must be what the index says it is.
  if (from < kRecordHeaderSize) {
    const Record& rec = store.records()[r];
    const auto header = record_header(rec.header_id, rec.layout);
    const uint64_t n = std::min<uint64_t>(to, kRecordHeaderSize) - from;
    if (!std::equal(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n), header.begin() + static_cast<std::ptrdiff_t>(from)))
      return 0;
  }
  for (uint32_t id : store.record_files(r)) {
    for (const Piece& p : store.pieces(store.files()[id])) {
      const uint64_t p_end = p.offset + p.size;
      if (p_end <= from || p.offset >= to || p.size == 0) continue;
      if (p.offset < from) return 0;  // its start is not here to check
      if (p_end > to) {
        end = std::min(end, p.offset);
        continue;
      }
      if (piece_checksum(bytes.subspan(p.offset - from, p.size)) != p.checksum) return 0;
    }
  }
  return end - from;
}

}  // namespace fid::index
