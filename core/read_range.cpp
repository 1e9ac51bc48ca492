#include "core/read_range.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace fid::core {

namespace {
Error bad_piece(const index::Store& store, const index::File& f, uint32_t piece, std::string_view why) {
  return Error{EIO, fmt::format("piece {} in {}: {}", piece, store.records()[f.record].path, why)};
}
}  // namespace

Status PrefixPieces::read(const index::File& f, std::span<const PieceSlice> slices) {
  auto pieces = store_.pieces(f);
  for (const PieceSlice& s : slices) {
    const index::Piece& p = pieces[s.piece];
    if (prefix_.is_bad(f.id, s.piece)) return bad_piece(store_, f, s.piece, "checksum mismatch");
    if (p.offset + p.size > prefix_.len) return bad_piece(store_, f, s.piece, "outside the record's prefix");
    std::memcpy(s.dst.data(), prefix_.data + p.offset + s.from, s.dst.size());
  }
  return {};
}

Status StoredPieces::read(const index::File& f, std::span<const PieceSlice> slices) {
  auto pieces = store_.pieces(f);
  auto whole = [&](const PieceSlice& s) { return s.from == 0 && s.dst.size() == pieces[s.piece].size; };
  // Whole pieces go straight to their destination; the (at most two) partly wanted ones to tmp.
  thread_local std::vector<uint8_t> tmp;
  thread_local std::vector<storage::RangeRead> reads;
  uint64_t tmp_len = 0;
  for (const PieceSlice& s : slices)
    if (!whole(s)) tmp_len += pieces[s.piece].size;
  tmp.resize(tmp_len);
  reads.clear();
  uint8_t* at = tmp.data();
  for (const PieceSlice& s : slices) {
    const index::Piece& p = pieces[s.piece];
    std::span<uint8_t> dst = whole(s) ? s.dst : std::span<uint8_t>(at, p.size);
    if (!whole(s)) at += p.size;
    reads.push_back({f.record, p.offset, dst, {}});
  }
  source_.read_ranges(reads);
  if (stats_) stats_->piece_reads.fetch_add(reads.size(), std::memory_order_relaxed);
  // The first read piece that fails its checksum (every one before it passed).
  auto first_damaged = [&] {
    for (size_t k = 0; k < reads.size(); ++k)
      if (reads[k].status.ok() && index::piece_checksum(reads[k].dst) != pieces[slices[k].piece].checksum) return k;
    return reads.size();
  };
  size_t damaged = first_damaged();
  if (damaged < reads.size() && source_.drop_cached(f.record)) {  // a damaged cached copy: read again
    for (storage::RangeRead& r : reads) r.status = {};
    source_.read_ranges(reads);
    damaged = first_damaged();
  }
  for (size_t k = 0; k < reads.size(); ++k) {
    const PieceSlice& s = slices[k];
    if (!reads[k].status.ok()) return Error{reads[k].status.error().code, fmt::format("piece {} in {}", s.piece, reads[k].status.error().message)};
    if (k == damaged) return bad_piece(store_, f, s.piece, "checksum mismatch");
    if (!whole(s)) std::memcpy(s.dst.data(), reads[k].dst.data() + s.from, s.dst.size());
  }
  return {};
}

Status MemoryPieces::read(const index::File& f, std::span<const PieceSlice> slices) {
  auto pieces = store_.pieces(f);
  for (const PieceSlice& s : slices) {
    uint64_t start = 0;
    for (uint32_t i = 0; i < s.piece; ++i) start += pieces[i].size;
    if (start + pieces[s.piece].size > bytes_.size()) return bad_piece(store_, f, s.piece, "not in memory");
    std::memcpy(s.dst.data(), bytes_.data() + start + s.from, s.dst.size());
  }
  return {};
}

Status read_range(const index::Store& store, const index::File& f, int level, uint64_t offset, uint64_t length,
                  PieceSource& source, std::vector<uint8_t>& out) {
  auto pieces = store.pieces(f);
  const uint32_t np = std::min(store.pieces_at_level(f, level), f.piece_count);
  const std::span<const uint8_t> trailer = index::level_trailer(f.kind);
  uint64_t trailer_at = 0;  // = the pieces' total size
  for (uint32_t i = 0; i < np; ++i) trailer_at += pieces[i].size;
  const uint64_t total = trailer_at + trailer.size();
  const uint64_t begin = std::min(offset, total);
  const uint64_t end = begin + std::min(length, total - begin);
  out.resize(end - begin);
  thread_local std::vector<PieceSlice> slices;
  slices.clear();
  uint64_t pos = 0;
  for (uint32_t i = 0; i < np && pos < end; pos += pieces[i++].size) {
    const uint64_t a = std::max(pos, begin), b = std::min(pos + pieces[i].size, end);
    if (a < b) slices.push_back({i, static_cast<uint32_t>(a - pos), {out.data() + (a - begin), b - a}});
  }
  if (!slices.empty())
    if (Status st = source.read(f, slices); !st.ok()) return st;
  for (uint64_t p = std::max(trailer_at, begin); p < end; ++p) out[p - begin] = trailer[p - trailer_at];
  return {};
}

}  // namespace fid::core
