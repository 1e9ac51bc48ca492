// On-disk constants of a store, shared by the packer and the loader. docs/FORMAT.md is the
// specification; this header must agree with it.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "index/store.h"

namespace fid::index {

inline constexpr const char* kIndexFile = "index.sqlite";
// The index while the packer writes it; renamed to kIndexFile once complete (docs/FORMAT.md).
inline constexpr const char* kIndexPartialFile = "index.sqlite.partial";
inline constexpr const char* kRecordDir = "records";

// A record's file, relative to the store: records/NNNNNN.rec (six digits, the record's id).
inline std::string record_path(uint32_t id) {
  std::string digits = std::to_string(id);
  if (digits.size() < 6) digits.insert(0, 6 - digits.size(), '0');
  return std::string(kRecordDir) + "/" + digits + ".rec";
}

// Every record file starts with this 16-byte header: magic, record id, layout (all LE).
inline constexpr std::array<uint8_t, 8> kRecordMagic{'F', 'I', 'D', 'R', 'E', 'C', '0', '1'};
inline constexpr uint32_t kRecordHeaderSize = 16;

// files.pieces in format 1: 16 bytes a piece, u64 offset, u32 size, u32 checksum (LE).
inline constexpr size_t kPieceBlobSizeV1 = 16;
// files.pieces in format 2: a piece is its size (unsigned LEB128, at most 5 bytes), then its
// u32 checksum (LE). Offsets are not stored: they follow from the record's layout and the sizes
// of the pieces of the files before it in slot order (docs/FORMAT.md "Piece offsets").
inline constexpr size_t kMaxVarintBytes = 5;

inline constexpr const char* kSchema = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE dirs(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, name BLOB NOT NULL,
                  mtime_ns INTEGER NOT NULL);
CREATE TABLE records(id INTEGER PRIMARY KEY, path TEXT NOT NULL, layout INTEGER NOT NULL,
                     size INTEGER NOT NULL, region_ends BLOB NOT NULL, header_id INTEGER NOT NULL);
CREATE TABLE files(id INTEGER PRIMARY KEY, dir INTEGER NOT NULL, name BLOB NOT NULL,
                   kind INTEGER NOT NULL, script INTEGER NOT NULL, record INTEGER NOT NULL,
                   slot INTEGER NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL,
                   source_size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, pieces BLOB NOT NULL,
                   note TEXT NOT NULL);
CREATE TABLE skipped(path BLOB NOT NULL, reason TEXT NOT NULL);
)sql";

// A store with clips (format 5, docs/FORMAT.md "Clips") has this table too: a row a run of one
// clip's frames in one record, rows in record and slot order.
inline constexpr const char* kClipsSchema = R"sql(
CREATE TABLE clips(id INTEGER PRIMARY KEY, dir INTEGER NOT NULL, record INTEGER NOT NULL,
                   first_slot INTEGER NOT NULL, frames INTEGER NOT NULL);
)sql";

// A store where an append replaced files (format 6, docs/FORMAT.md "unreferenced") has this
// table too: a row the pieces of a file no longer in the store, which still take their slot.
inline constexpr const char* kUnreferencedSchema = R"sql(
CREATE TABLE unreferenced(record INTEGER NOT NULL, slot INTEGER NOT NULL, pieces BLOB NOT NULL);
)sql";

// A store packed with --video-frames (docs/FORMAT.md "Videos") may have this table too: a row a
// clip folder made from a video. A reader that does not know it reads the store as before.
inline constexpr const char* kVideosSchema = R"sql(
CREATE TABLE videos(dir INTEGER PRIMARY KEY, name BLOB NOT NULL, source_size INTEGER NOT NULL,
                    codec TEXT NOT NULL, fps_num INTEGER NOT NULL, fps_den INTEGER NOT NULL,
                    width INTEGER NOT NULL, height INTEGER NOT NULL, frames INTEGER NOT NULL);
)sql";

// A store with videos kept as streams (format 7, docs/FORMAT.md "Video streams") has this table
// too, a row a video folder (which has its row in videos as well): what decodes its GOP pieces.
inline constexpr const char* kVideoStreamsSchema = R"sql(
CREATE TABLE video_streams(dir INTEGER PRIMARY KEY, codec TEXT NOT NULL, extradata BLOB NOT NULL,
                           width INTEGER NOT NULL, height INTEGER NOT NULL, gop INTEGER NOT NULL,
                           stored_bytes INTEGER NOT NULL);
)sql";

inline void put_le(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

inline uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

inline void put_varint(std::vector<uint8_t>& out, uint32_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

// Reads an unsigned LEB128 u32 at p (before end) and advances p; false if truncated, longer
// than kMaxVarintBytes or over 32 bits.
inline bool get_varint(const uint8_t*& p, const uint8_t* end, uint32_t& v) {
  uint64_t acc = 0;
  for (size_t i = 0; i < kMaxVarintBytes && p < end; ++i) {
    const uint8_t b = *p++;
    acc |= static_cast<uint64_t>(b & 0x7F) << (7 * i);
    if (!(b & 0x80)) {
      if (acc > 0xFFFFFFFFull) return false;
      v = static_cast<uint32_t>(acc);
      return true;
    }
  }
  return false;
}

// files.pieces in the current format (2): sizes and checksums; the offsets are left out.
inline std::vector<uint8_t> encode_pieces(std::span<const Piece> pieces) {
  std::vector<uint8_t> out;
  out.reserve(pieces.size() * (kMaxVarintBytes + 4));
  for (const Piece& p : pieces) {
    put_varint(out, p.size);
    put_le(out, p.checksum, 4);
  }
  return out;
}

// The reverse of encode_pieces: `count` pieces appended to `out` (offsets 0). kMalformed: a
// piece is missing or its size is not a varint; kTrailing: bytes after the last one.
enum class PiecesBlob { kOk, kMalformed, kTrailing };
inline PiecesBlob decode_pieces(std::span<const uint8_t> blob, size_t count, std::vector<Piece>& out) {
  const uint8_t* p = blob.data();
  const uint8_t* end = p + blob.size();
  for (size_t i = 0; i < count; ++i) {
    Piece piece;
    if (!get_varint(p, end, piece.size) || end - p < 4) return PiecesBlob::kMalformed;
    piece.checksum = static_cast<uint32_t>(get_le(p, 4));
    p += 4;
    out.push_back(piece);
  }
  return p == end ? PiecesBlob::kOk : PiecesBlob::kTrailing;
}

inline std::vector<uint8_t> encode_u64s(std::span<const uint64_t> values) {
  std::vector<uint8_t> out;
  for (uint64_t v : values) put_le(out, v, 8);
  return out;
}

inline std::array<uint8_t, kRecordHeaderSize> record_header(uint32_t id, RecordLayout layout) {
  std::array<uint8_t, kRecordHeaderSize> h{};
  std::memcpy(h.data(), kRecordMagic.data(), kRecordMagic.size());
  for (int i = 0; i < 4; ++i) h[8 + i] = static_cast<uint8_t>(id >> (8 * i));
  h[12] = static_cast<uint8_t>(layout);
  return h;
}

}  // namespace fid::index
