// The Store's queries over its tables (paths, levels' pieces and sizes) and the checks of
// fetched bytes against the piece checksums (checked_len). Loading is store_load.cpp's.
#include "index/store.h"

#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>

#include "codec/jpeg.h"
#include "index/format.h"

namespace fid::index {

std::string_view kind_name(FileKind k) {
  switch (k) {
    case FileKind::jpeg: return "jpeg";
    case FileKind::l3: return "l3";
    case FileKind::blob: return "blob";
    case FileKind::frame: return "frame";
  }
  return "unknown";
}

std::string_view layout_name(StoreLayout l) { return l == StoreLayout::file ? "file" : "scan"; }

bool parse_layout(std::string_view text, StoreLayout& out) {
  if (text == "scan") out = StoreLayout::scan;
  else if (text == "file") out = StoreLayout::file;
  else return false;
  return true;
}

uint32_t piece_checksum(std::span<const uint8_t> bytes) {
#if defined(__x86_64__)
  // The same hash, by the widest vector unit the CPU has (libxxhash picks AVX2 or AVX-512 at run
  // time; SSE2 otherwise): every byte a read returns is checked. On bytes in the CPU's cache it is
  // 3x SSE2's speed; on bytes the disk just wrote to memory the checksums went from 14% to 11% of
  // the daemon's CPU at full (docs/BENCHMARKS.md, "The cost of a file").
  return static_cast<uint32_t>(XXH3_64bits_dispatch(bytes.data(), bytes.size()));
#else
  return static_cast<uint32_t>(XXH3_64bits(bytes.data(), bytes.size()));
#endif
}

std::string Store::relative_path(const Dir& d) const {
  std::vector<std::string_view> parts;
  for (const Dir* cur = &d; cur->id != 0; cur = &t_.dirs[cur->parent]) parts.push_back(name(*cur));
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!out.empty()) out += '/';
    out += *it;
  }
  return out;
}

std::string Store::relative_path(const File& f) const {
  std::string out = relative_path(t_.dirs[f.dir]);
  if (!out.empty()) out += '/';
  out += name(f);
  return out;
}

uint32_t pieces_at_level(FileKind kind, int level, int levels) {
  if (kind != FileKind::jpeg) return 1;
  return static_cast<uint32_t>(std::clamp(level, 1, levels)) + 1;  // the header piece, then levels 1..k
}

std::span<const uint8_t> level_trailer(FileKind kind) {
  if (kind != FileKind::jpeg) return {};
  return codec::kEoi;  // a level cut ends its scans with the JPEG's end-of-image marker
}

const ClipRun* Store::clip_of(const File& f) const {
  const Record& rec = records_[f.record];
  const auto runs = std::span<const ClipRun>(clips_).subspan(rec.clip_begin, rec.clip_count);
  auto it = std::upper_bound(runs.begin(), runs.end(), f.slot,
                             [](uint32_t slot, const ClipRun& c) { return slot < c.first_slot; });
  if (it == runs.begin()) return nullptr;
  --it;
  return it->holds(f.slot) ? &*it : nullptr;
}

const VideoSource* Store::video_of(uint32_t dir) const {
  auto it = std::lower_bound(videos_.begin(), videos_.end(), dir, [](const VideoSource& v, uint32_t d) { return v.dir < d; });
  return it != videos_.end() && it->dir == dir ? &*it : nullptr;
}

uint32_t Store::pieces_at_level(const File& f, int level) const { return index::pieces_at_level(f.kind, level, levels_); }

uint64_t Store::size_at_level(const File& f, int level) const {
  auto ps = pieces(f);
  uint32_t n = pieces_at_level(f, level);
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) total += ps[i].size;
  return total + level_trailer(f.kind).size();
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
