// Store's loader, continued: the unreferenced table (format 6, docs/FORMAT.md "unreferenced"),
// the pieces of files an append replaced. They keep their slots in the index; in memory a record's
// files are numbered 0..n-1 around them, and derive_offsets steps over their bytes.
#include <algorithm>
#include <fmt/format.h>

#include "index/format.h"
#include "index/sqlite_db.h"
#include "index/store.h"
#include "index/store_load_errors.h"

namespace fid::index {

void Store::load_unreferenced(SqliteDb& db, const std::string& ip) {
  if (format_version_ < kUnreferencedFormatVersion) return;
  auto q = must(db.prepare("SELECT record, slot, pieces FROM unreferenced ORDER BY record, slot"));
  std::vector<Piece> pieces;
  while (must(q.step())) {
    const int64_t record = q.integer(0), slot = q.integer(1);
    if (record < 0 || record >= static_cast<int64_t>(records_.size()) || slot < 0 || slot > 0xFFFFFFFF)
      throw corrupt_index(ip, fmt::format("an unreferenced row has record {}, slot {}", record, slot));
    const Record& rec = records_[static_cast<size_t>(record)];
    // As many pieces as a file of the record's layout has: a JPEG's in scan and file records.
    const size_t want = rec.layout == RecordLayout::whole ? 1 : static_cast<size_t>(levels_) + 1;
    pieces.clear();
    if (decode_pieces(q.blob(2), want, pieces) != PiecesBlob::kOk)
      throw corrupt_index(ip, fmt::format("the unreferenced row of record {} slot {} is not {} pieces", record, slot, want));
    if (!unreferenced_.empty() && unreferenced_.back().record == record && unreferenced_.back().slot == slot)
      throw corrupt_index(ip, fmt::format("record {} has two unreferenced rows of slot {}", record, slot));
    Unreferenced u{rec.id, static_cast<uint32_t>(slot), 0, {}};
    for (const Piece& p : pieces) u.sizes.push_back(p.size);
    unreferenced_.push_back(std::move(u));
  }
}

std::span<const Store::Unreferenced> Store::unreferenced_in(uint32_t record) const {
  const auto [first, last] = std::equal_range(
      unreferenced_.begin(), unreferenced_.end(), Unreferenced{record, 0, 0, {}},
      [](const Unreferenced& a, const Unreferenced& b) { return a.record < b.record; });
  return {first, last};
}

// In a record with unreferenced rows, its files' slots and theirs together must be 0..n-1; each
// file's slot becomes its place among the files.
void Store::close_slot_gaps(const std::string& ip) {
  for (size_t begin = 0; begin < unreferenced_.size();) {
    const uint32_t r = unreferenced_[begin].record;
    size_t end = begin;
    while (end < unreferenced_.size() && unreferenced_[end].record == r) ++end;
    const std::span<const uint32_t> members = record_files(r);  // sorted by the index's slots
    size_t i = 0, g = begin;
    for (uint32_t slot = 0; i < members.size() || g < end; ++slot) {
      if (g < end && unreferenced_[g].slot == slot) {
        unreferenced_[g++].files_before = static_cast<uint32_t>(i);
      } else if (i < members.size() && files_[members[i]].slot == slot) {
        files_[members[i]].slot = static_cast<uint32_t>(i);
        ++i;
      } else {
        throw corrupt_index(ip, fmt::format("record {}: its slots and its unreferenced ones are not 0..{}", r,
                                            members.size() + (end - begin) - 1));
      }
    }
    begin = end;
  }
}

uint64_t Store::unreferenced_bytes() const {
  if (format_version_ < kUnreferencedFormatVersion) return 0;
  uint64_t records = 0, pieces = 0;
  for (const Record& r : records_) records += r.size - kRecordHeaderSize;
  for (const Piece& p : t_.pieces) pieces += p.size;
  return records - pieces;
}

}  // namespace fid::index
