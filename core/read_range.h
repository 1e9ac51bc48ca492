// The bytes of file F at level k, and any range of them: its first index::pieces_at_level
// pieces, then index::level_trailer. Every reader of a file's bytes goes through read_range:
// the mount, verify and the fuzzers. Where the pieces come from is a PieceSource: a cached
// record prefix, storage, or pieces already in memory.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/error.h"
#include "core/record_cache.h"
#include "index/store.h"
#include "storage/record_source.h"

namespace fid::core {

// Bytes [from, from + dst.size()) of piece `piece` of a file, to be copied into dst.
struct PieceSlice {
  uint32_t piece = 0;
  uint32_t from = 0;
  std::span<uint8_t> dst;
};

class PieceSource {
 public:
  virtual ~PieceSource() = default;
  // Copies every slice of file f's pieces. Fails if a piece cannot be read or fails its checksum
  // (EIO; the message names the piece and its record).
  virtual Status read(const index::File& f, std::span<const PieceSlice> slices) = 0;
};

// Pieces from a loaded record prefix (checked once, when it was loaded).
class PrefixPieces final : public PieceSource {
 public:
  PrefixPieces(const index::Store& store, const Prefix& prefix) : store_(store), prefix_(prefix) {}
  Status read(const index::File& f, std::span<const PieceSlice> slices) override;

 private:
  const index::Store& store_;
  const Prefix& prefix_;
};

// Pieces from storage: the whole pieces the slices touch, read together through the record
// source (pieces that lie back to back as one range), each checked against its checksum before
// any byte of it is copied out.
class StoredPieces final : public PieceSource {
 public:
  StoredPieces(const index::Store& store, storage::RecordSource& source, ReadStats* stats = nullptr)
      : store_(store), source_(source), stats_(stats) {}
  Status read(const index::File& f, std::span<const PieceSlice> slices) override;

 private:
  const index::Store& store_;
  storage::RecordSource& source_;
  ReadStats* stats_;
};

// A file's pieces already in memory, back to back in piece order (verify reads every piece
// once, then every level from them).
class MemoryPieces final : public PieceSource {
 public:
  MemoryPieces(const index::Store& store, std::span<const uint8_t> bytes) : store_(store), bytes_(bytes) {}
  Status read(const index::File& f, std::span<const PieceSlice> slices) override;

 private:
  const index::Store& store_;
  std::span<const uint8_t> bytes_;
};

// Where bytes [offset, offset + length) of file f at `level`, clipped at its end, lie: pieces
// first .. first + count - 1 hold [begin, pieces_end), the level trailer's bytes `tail` follow.
// read_range copies by it; prefix_span and stored_span serve in place by it.
struct PieceRange {
  uint64_t begin = 0, end = 0;
  uint64_t pieces_end = 0;      // min(end, where the trailer starts), at least begin
  uint32_t first = 0, count = 0;
  uint64_t first_at = 0;        // where piece `first` starts in the file
  bool back_to_back = true;     // the pieces lie back to back in the record (a file record)
  std::span<const uint8_t> tail;
};
PieceRange piece_range(const index::Store& store, const index::File& f, int level, uint64_t offset, uint64_t length);

// A range's piece bytes [begin, pieces_end) where they lie, not copied: in a loaded prefix
// (checked when it loaded), or read from storage into the source's own buffer
// (RecordSource::read_scratch: valid until this thread's next read) and checked there. nullopt
// from the prefix where its pieces do not lie back to back in it (read_range copies them then).
std::optional<std::span<const uint8_t>> prefix_span(const index::Store& store, const index::File& f, const PieceRange& r,
                                                    const Prefix& prefix);
// Needs r.back_to_back. Errors as StoredPieces'.
Result<std::span<const uint8_t>> stored_span(const index::Store& store, const index::File& f, const PieceRange& r,
                                             storage::RecordSource& source, ReadStats* stats);

// Bytes [offset, offset + length) of file f at `level` into `out`, clipped at the end of the
// file (out.size() says how many; 0 past the end).
Status read_range(const index::Store& store, const index::File& f, int level, uint64_t offset, uint64_t length,
                  PieceSource& pieces, std::vector<uint8_t>& out);

}  // namespace fid::core
