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
  const bool gathered = prefix_.gathered();
  if (!prefix_.holds(f)) return bad_piece(store_, f, 0, "not in the record's prefix");
  const uint64_t shift = gathered ? prefix_.shift[f.slot] : 0;
  for (const PieceSlice& s : slices) {
    const index::Piece& p = pieces[s.piece];
    if (prefix_.is_bad(f.id, s.piece)) return bad_piece(store_, f, s.piece, "checksum mismatch");
    if ((gathered && s.piece > static_cast<uint32_t>(prefix_.level)) || p.offset - shift + p.size > prefix_.len)
      return bad_piece(store_, f, s.piece, "outside the record's prefix");
    std::memcpy(s.dst.data(), prefix_.data + (p.offset - shift) + s.from, s.dst.size());
  }
  return {};
}

Status StoredPieces::read(const index::File& f, std::span<const PieceSlice> slices) {
  auto pieces = store_.pieces(f);
  auto whole = [&](const PieceSlice& s) { return s.from == 0 && s.dst.size() == pieces[s.piece].size; };
  // Slices whose pieces lie back to back in the record (every piece of a file in a file record)
  // form one group, read as one range: a file at any level is one storage read. A group of whole
  // pieces goes straight to its destination (read_range's slices are consecutive in its output);
  // one with a partly wanted piece goes to tmp.
  struct Group {
    size_t first = 0, count = 0;
    uint64_t offset = 0, bytes = 0;
    bool direct = true;
  };
  thread_local std::vector<Group> groups;
  thread_local std::vector<uint8_t> tmp;
  thread_local std::vector<storage::RangeRead> reads;
  groups.clear();
  for (size_t k = 0; k < slices.size(); ++k) {
    const index::Piece& p = pieces[slices[k].piece];
    Group* g = groups.empty() ? nullptr : &groups.back();
    if (g && g->offset + g->bytes == p.offset) {
      const PieceSlice& prev = slices[k - 1];
      g->direct = g->direct && whole(slices[k]) && prev.dst.data() + prev.dst.size() == slices[k].dst.data();
    } else {
      groups.push_back({k, 0, p.offset, 0, whole(slices[k])});
      g = &groups.back();
    }
    g->count++;
    g->bytes += p.size;
  }
  uint64_t tmp_len = 0;
  for (const Group& g : groups)
    if (!g.direct) tmp_len += g.bytes;
  tmp.resize(tmp_len);
  reads.clear();
  uint8_t* at = tmp.data();
  for (const Group& g : groups) {
    std::span<uint8_t> dst = g.direct ? std::span<uint8_t>(slices[g.first].dst.data(), g.bytes) : std::span<uint8_t>(at, g.bytes);
    if (!g.direct) at += g.bytes;
    reads.push_back({f.record, g.offset, dst, {}});
  }
  source_.read_ranges(reads);
  if (stats_) stats_->piece_reads.fetch_add(reads.size(), std::memory_order_relaxed);
  auto bytes_of = [&](size_t group, size_t k) {
    const index::Piece& p = pieces[slices[k].piece];
    return reads[group].dst.subspan(p.offset - groups[group].offset, p.size);
  };
  // The first slice, in order, whose piece was read but fails its checksum (every one before it passed).
  auto first_damaged = [&] {
    for (size_t g = 0; g < groups.size(); ++g)
      if (reads[g].status.ok())
        for (size_t k = groups[g].first; k < groups[g].first + groups[g].count; ++k)
          if (index::piece_checksum(bytes_of(g, k)) != pieces[slices[k].piece].checksum) return k;
    return slices.size();
  };
  size_t damaged = first_damaged();
  if (damaged < slices.size() && source_.drop_cached(f.record)) {  // a damaged cached copy: read again
    for (storage::RangeRead& r : reads) r.status = {};
    source_.read_ranges(reads);
    damaged = first_damaged();
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t k = groups[g].first; k < groups[g].first + groups[g].count; ++k) {
      const PieceSlice& s = slices[k];
      if (!reads[g].status.ok())
        return Error{reads[g].status.error().code, fmt::format("piece {} in {}", s.piece, reads[g].status.error().message)};
      if (k == damaged) return bad_piece(store_, f, s.piece, "checksum mismatch");
      if (!groups[g].direct) std::memcpy(s.dst.data(), bytes_of(g, k).data() + s.from, s.dst.size());
    }
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

PieceRange piece_range(const index::Store& store, const index::File& f, int level, uint64_t offset, uint64_t length) {
  auto pieces = store.pieces(f);
  const uint32_t np = std::min(store.pieces_at_level(f, level), f.piece_count);
  const std::span<const uint8_t> trailer = index::level_trailer(f.kind);
  uint64_t trailer_at = 0;
  for (uint32_t i = 0; i < np; ++i) trailer_at += pieces[i].size;
  const uint64_t total = trailer_at + trailer.size();
  PieceRange r;
  r.begin = std::min(offset, total);
  r.end = r.begin + std::min(length, total - r.begin);
  r.pieces_end = std::max(r.begin, std::min(r.end, trailer_at));
  uint64_t pos = 0;
  for (uint32_t i = 0; i < np && pos < r.pieces_end; pos += pieces[i++].size) {
    if (pos + pieces[i].size <= r.begin) continue;
    if (r.count == 0) {
      r.first = i;
      r.first_at = pos;
    } else if (pieces[i].offset != pieces[i - 1].offset + pieces[i - 1].size) {
      r.back_to_back = false;
    }
    r.count++;
  }
  const uint64_t tail_from = std::max(r.begin, trailer_at);
  if (r.end > tail_from) r.tail = trailer.subspan(tail_from - trailer_at, r.end - tail_from);
  return r;
}

std::optional<std::span<const uint8_t>> prefix_span(const index::Store& store, const index::File& f, const PieceRange& r,
                                                    const Prefix& prefix) {
  if (r.count == 0) return std::span<const uint8_t>{};
  if (!r.back_to_back) return std::nullopt;
  const uint32_t last = r.first + r.count - 1;
  const bool gathered = prefix.gathered();
  if (!prefix.holds(f) || (gathered && last > static_cast<uint32_t>(prefix.level))) return std::nullopt;
  const uint64_t shift = gathered ? prefix.shift[f.slot] : 0;
  auto pieces = store.pieces(f);
  const index::Piece &a = pieces[r.first], &z = pieces[last];
  if (a.offset < shift || z.offset + z.size - shift > prefix.len) return std::nullopt;
  for (uint32_t i = r.first; i <= last; ++i)
    if (prefix.is_bad(f.id, i)) return std::nullopt;
  return std::span<const uint8_t>(prefix.data + (a.offset - shift) + (r.begin - r.first_at), r.pieces_end - r.begin);
}

Result<std::span<const uint8_t>> stored_span(const index::Store& store, const index::File& f, const PieceRange& r,
                                             storage::RecordSource& source, ReadStats* stats) {
  if (r.count == 0) return std::span<const uint8_t>{};
  auto pieces = store.pieces(f);
  const index::Piece &a = pieces[r.first], &z = pieces[r.first + r.count - 1];
  const uint64_t len = z.offset + z.size - a.offset;
  // The first piece, counted from `first`, that fails its checksum (count: none).
  auto first_damaged = [&](std::span<const uint8_t> bytes) {
    for (uint32_t k = 0; k < r.count; ++k) {
      const index::Piece& p = pieces[r.first + k];
      if (index::piece_checksum(bytes.subspan(p.offset - a.offset, p.size)) != p.checksum) return k;
    }
    return r.count;
  };
  Result<std::span<const uint8_t>> got = source.read_scratch(f.record, a.offset, len);
  if (stats) stats->piece_reads.fetch_add(1, std::memory_order_relaxed);
  uint32_t damaged = got ? first_damaged(*got) : r.count;
  if (damaged < r.count && source.drop_cached(f.record)) {  // a damaged cached copy: read again
    got = source.read_scratch(f.record, a.offset, len);
    damaged = got ? first_damaged(*got) : r.count;
  }
  if (!got) return Error{got.error().code, fmt::format("piece {} in {}", r.first, got.error().message)};
  if (damaged < r.count) return bad_piece(store, f, r.first + damaged, "checksum mismatch");
  return got->subspan(r.begin - r.first_at, r.pieces_end - r.begin);
}

Status read_range(const index::Store& store, const index::File& f, int level, uint64_t offset, uint64_t length,
                  PieceSource& source, std::vector<uint8_t>& out) {
  const PieceRange r = piece_range(store, f, level, offset, length);
  out.resize(r.end - r.begin);
  auto pieces = store.pieces(f);
  thread_local std::vector<PieceSlice> slices;
  slices.clear();
  uint64_t pos = r.first_at;
  for (uint32_t i = r.first; i < r.first + r.count; pos += pieces[i++].size) {
    const uint64_t a = std::max(pos, r.begin), b = std::min(pos + pieces[i].size, r.pieces_end);
    if (a < b) slices.push_back({i, static_cast<uint32_t>(a - pos), {out.data() + (a - r.begin), b - a}});
  }
  if (!slices.empty())
    if (Status st = source.read(f, slices); !st.ok()) return st;
  std::copy(r.tail.begin(), r.tail.end(), out.begin() + static_cast<std::ptrdiff_t>(r.pieces_end - r.begin));
  return {};
}

}  // namespace fid::core
