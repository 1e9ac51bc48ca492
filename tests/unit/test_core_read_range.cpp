// read_range, the one definition of a file's bytes at a level: every boundary (a read ending
// inside a piece, one crossing pieces, the trailer alone, past the end, empty) gives exactly the
// bytes the format defines, from storage, from a cached prefix and from memory alike, in both
// layouts, and where the pieces lie back to back, read in place (stored_span, prefix_span); a
// damaged piece fails only the reads that touch it; in the file layout a file at any level is
// one storage read.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/read_range.h"
#include "core/record_cache.h"
#include "storage/local_record_source.h"
#include "counting_source.h"
#include "test_store_fixture.h"

using fid::Status;
using fid::core::MemoryPieces;
using fid::core::PieceRange;
using fid::core::piece_range;
using fid::core::prefix_span;
using fid::core::stored_span;
using fid::core::PrefixPieces;
using fid::core::ReadStats;
using fid::core::RecordCache;
using fid::core::StoredPieces;
using fid::core::read_range;
using fid::index::File;
using fid::index::StoreLayout;
using fid::storage::LocalRecordSource;

namespace {

class ReadRangeTest : public fid::testutil::PackedStore, public ::testing::WithParamInterface<StoreLayout> {
 protected:
  StoreLayout layout() const override { return GetParam(); }
  // (offset, length) pairs at every boundary of f at `level`.
  std::vector<std::pair<uint64_t, uint64_t>> boundaries(const File& f, int level) const {
    const auto pieces = store().pieces(f);
    const uint64_t size = store().size_at_level(f, level);
    std::vector<std::pair<uint64_t, uint64_t>> r = {{0, size}, {0, size + 100}, {0, 1}, {0, 0}, {size, 10},
                                                    {size + 5, 10}, {size - 1, 1}, {size - 1, 100}};
    if (f.kind == fid::index::FileKind::jpeg) r.push_back({size - 2, 2});  // the EOI alone
    uint64_t end = 0;
    for (uint32_t i = 0; i < store().pieces_at_level(f, level); ++i) {
      const uint64_t begin = end;
      end += pieces[i].size;
      r.push_back({begin, pieces[i].size});                 // exactly one piece
      r.push_back({begin + 1, pieces[i].size / 2});         // ends inside a piece
      r.push_back({end - 1, 2});                            // crosses into the next piece (or the EOI)
      r.push_back({begin, pieces[i].size + 3});             // crosses pieces
      if (begin > 0) r.push_back({begin - 1, end - begin + 2});
    }
    return r;
  }
  std::vector<uint8_t> slice(const std::vector<uint8_t>& all, uint64_t off, uint64_t len) const {
    const uint64_t b = std::min<uint64_t>(off, all.size()), e = b + std::min<uint64_t>(len, all.size() - b);
    return {all.begin() + static_cast<std::ptrdiff_t>(b), all.begin() + static_cast<std::ptrdiff_t>(e)};
  }
};

TEST_P(ReadRangeTest, EveryBoundaryFromStoragePrefixAndMemory) {
  LocalRecordSource source(store());
  ReadStats stats;
  RecordCache cache(store(), source, stats, 64 << 20);
  size_t checked = 0, in_place = 0;
  for (const File& f : store().files()) {
    const int top = f.kind == fid::index::FileKind::jpeg ? store().levels() : 1;
    std::vector<uint8_t> all_pieces;
    for (uint32_t i = 0; i < f.piece_count; ++i) {
      auto p = raw_piece(f, i);
      all_pieces.insert(all_pieces.end(), p.begin(), p.end());
    }
    for (int k = 1; k <= top; ++k) {
      const std::vector<uint8_t> want = expected(f, k);
      ASSERT_EQ(want.size(), store().size_at_level(f, k));
      ASSERT_TRUE(cache.load(f.record, cache.prefix_level(f.record, k), false));
      auto prefix = cache.get(f.record, cache.prefix_level(f.record, k));
      ASSERT_NE(prefix, nullptr);
      StoredPieces stored(store(), source, &stats);
      PrefixPieces cached(store(), *prefix);
      MemoryPieces memory(store(), all_pieces);
      for (auto [off, len] : boundaries(f, k)) {
        for (fid::core::PieceSource* src : {static_cast<fid::core::PieceSource*>(&stored),
                                           static_cast<fid::core::PieceSource*>(&cached),
                                           static_cast<fid::core::PieceSource*>(&memory)}) {
          std::vector<uint8_t> got(3, 0xEE);
          Status st = read_range(store(), f, k, off, len, *src, got);
          ASSERT_TRUE(st.ok()) << st.error().message;
          ASSERT_EQ(got, slice(want, off, len)) << store().relative_path(f) << " level " << k << " [" << off << ", +" << len << ")";
          ++checked;
        }
        // The same bytes where they lie, not copied: the pieces' span, then the trailer's bytes.
        const PieceRange range = piece_range(store(), f, k, off, len);
        const auto joined = [&](std::span<const uint8_t> pieces) {
          std::vector<uint8_t> v(pieces.begin(), pieces.end());
          v.insert(v.end(), range.tail.begin(), range.tail.end());
          return v;
        };
        if (GetParam() == StoreLayout::file) {
          ASSERT_TRUE(range.back_to_back) << store().relative_path(f);
        }
        if (range.back_to_back) {
          auto in_storage = stored_span(store(), f, range, source, &stats);
          ASSERT_TRUE(in_storage.ok()) << in_storage.error().message;
          ASSERT_EQ(joined(*in_storage), slice(want, off, len)) << store().relative_path(f) << " level " << k << " [" << off << ", +" << len << ")";
        }
        auto in_prefix = prefix_span(store(), f, range, *prefix);
        ASSERT_EQ(in_prefix.has_value(), range.back_to_back);
        if (in_prefix) {
          ASSERT_EQ(joined(*in_prefix), slice(want, off, len)) << store().relative_path(f) << " level " << k << " [" << off << ", +" << len << ")";
          ++in_place;
        }
      }
    }
  }
  EXPECT_GT(checked, 3000u);
  EXPECT_GT(in_place, 500u);
}

TEST_P(ReadRangeTest, ADamagedPieceFailsOnlyTheReadsThatTouchIt) {
  const File& victim = jpeg_with(6);
  const uint32_t bad = 3;
  const auto pieces = store().pieces(victim);
  uint64_t bad_begin = 0;
  for (uint32_t i = 0; i < bad; ++i) bad_begin += pieces[i].size;
  const std::vector<uint8_t> want = expected(victim, store().levels());
  fid::testutil::flip_byte(path() / store().records()[victim.record].path, pieces[bad].offset + pieces[bad].size / 2);
  LocalRecordSource source(store());
  ReadStats stats;
  RecordCache cache(store(), source, stats, 64 << 20);
  ASSERT_TRUE(cache.load(victim.record, cache.prefix_level(victim.record, store().levels()), false));
  auto prefix = cache.get(victim.record, cache.prefix_level(victim.record, store().levels()));
  ASSERT_NE(prefix, nullptr);
  StoredPieces stored(store(), source);
  PrefixPieces cached(store(), *prefix);
  for (fid::core::PieceSource* src : {static_cast<fid::core::PieceSource*>(&stored), static_cast<fid::core::PieceSource*>(&cached)}) {
    std::vector<uint8_t> got;
    // Levels below the damaged piece read whole.
    for (int k = 1; k < static_cast<int>(bad); ++k) {
      ASSERT_TRUE(read_range(store(), victim, k, 0, 1 << 20, *src, got).ok());
      EXPECT_EQ(got, expected(victim, k));
    }
    // A range before the damaged piece at the full level is fine; one touching it is EIO and names it.
    ASSERT_TRUE(read_range(store(), victim, store().levels(), 0, bad_begin, *src, got).ok());
    EXPECT_EQ(got, slice(want, 0, bad_begin));
    Status st = read_range(store(), victim, store().levels(), bad_begin + 1, 1, *src, got);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code, EIO);
    EXPECT_NE(st.error().message.find("piece 3"), std::string::npos) << st.error().message;
  }
  // Read where they lie: the same outcome; the prefix does not serve the damaged file in place.
  if (piece_range(store(), victim, store().levels(), 0, 1 << 20).back_to_back) {
    auto before = stored_span(store(), victim, piece_range(store(), victim, store().levels(), 0, bad_begin), source, nullptr);
    ASSERT_TRUE(before.ok()) << before.error().message;
    EXPECT_EQ(std::vector<uint8_t>(before->begin(), before->end()), slice(want, 0, bad_begin));
    auto touching = stored_span(store(), victim, piece_range(store(), victim, store().levels(), bad_begin + 1, 1), source, nullptr);
    ASSERT_FALSE(touching.ok());
    EXPECT_EQ(touching.error().code, EIO);
    EXPECT_NE(touching.error().message.find("piece 3"), std::string::npos) << touching.error().message;
    EXPECT_FALSE(prefix_span(store(), victim, piece_range(store(), victim, store().levels(), bad_begin + 1, 1), *prefix));
  }
  // Every other file of the record still reads.
  for (uint32_t id : store().record_files(victim.record)) {
    if (id == victim.id) continue;
    const File& f = store().files()[id];
    std::vector<uint8_t> got;
    PrefixPieces again(store(), *prefix);
    ASSERT_TRUE(read_range(store(), f, store().levels(), 0, 1 << 20, again, got).ok());
    EXPECT_EQ(got, expected(f, store().levels()));
  }
}

TEST_P(ReadRangeTest, StoredPiecesReadAFileInOneRangeInTheFileLayout) {
  LocalRecordSource local(store());
  fid::testutil::CountingSource source(local);
  StoredPieces stored(store(), source);
  size_t jpegs = 0;
  for (const File& f : store().files()) {
    if (f.kind != fid::index::FileKind::jpeg) continue;
    ++jpegs;
    for (int k = 1; k <= store().levels(); ++k) {
      const uint64_t before = source.ranges.load();
      std::vector<uint8_t> got;
      ASSERT_TRUE(read_range(store(), f, k, 0, 1 << 20, stored, got).ok());
      ASSERT_EQ(got, expected(f, k));
      // One range for each run of pieces that lie back to back: in a scan record the header and
      // the k level pieces are in k + 1 regions (back to back only where the record holds one file).
      const auto pieces = store().pieces(f);
      uint64_t want = 1;
      for (int i = 1; i <= k; ++i)
        want += pieces[i].offset != pieces[i - 1].offset + pieces[i - 1].size;
      if (GetParam() == StoreLayout::file) {
        ASSERT_EQ(want, 1u);
      } else if (store().record_files(f.record).size() > 1) {
        ASSERT_EQ(want, static_cast<uint64_t>(k) + 1);
      }
      EXPECT_EQ(source.ranges.load() - before, want) << store().relative_path(f) << " level " << k;
      // A range inside the file reads only the pieces it touches, still as one range.
      const uint64_t mid = before + want;
      ASSERT_TRUE(read_range(store(), f, k, got.size() / 3, got.size() / 3, stored, got).ok());
      if (GetParam() == StoreLayout::file) {
        EXPECT_EQ(source.ranges.load() - mid, 1u);
        // Read where it lies, the whole file is one range too.
        ASSERT_TRUE(stored_span(store(), f, piece_range(store(), f, k, 0, 1 << 20), source, nullptr).ok());
        EXPECT_EQ(source.ranges.load() - mid, 2u);
      }
    }
  }
  EXPECT_EQ(jpegs, 16u);
}

// A file record's prefix below the level where that would read over half the record is each
// file's pieces 0..k gathered, one range a file in one batch; it serves every file up to k, and a
// damaged piece in it fails only the reads that touch it. A source that keeps local copies (the
// disk cache) gets whole records instead.
class GatheredPrefixTest : public fid::testutil::PackedStore {
 protected:
  StoreLayout layout() const override { return StoreLayout::file; }
  // A file record of several files, and the highest level it is gathered at.
  std::pair<uint32_t, int> gathered_record() const {
    for (const auto& r : store().records()) {
      if (r.layout != fid::index::RecordLayout::file || store().record_files(r.id).size() < 2) continue;
      int top = 0;
      for (int k = 1; k < store().levels(); ++k)
        if (fid::core::record_prefix_level(store(), r.id, k, true) == k) top = k;
      if (top >= 2) return {r.id, top};
    }
    throw std::runtime_error("no gathered record");
  }
};

TEST_F(GatheredPrefixTest, GathersEachFilesLevelsInOneBatchAndServesThem) {
  const auto [r, top] = gathered_record();
  const auto files = store().record_files(r);
  LocalRecordSource local(store());
  fid::testutil::CountingSource source(local);
  ReadStats stats;
  RecordCache cache(store(), source, stats, 64 << 20);
  for (int k = 1; k <= store().levels(); ++k) {
    const int lvl = cache.prefix_level(r, k);
    EXPECT_EQ(lvl, k <= top ? k : store().levels());
    EXPECT_EQ(fid::core::record_prefix_level(store(), r, k, /*gather=*/false), store().levels());
  }
  const uint64_t ranges = source.ranges.load(), prefixes = source.prefixes.load();
  ASSERT_TRUE(cache.load(r, top, false));
  EXPECT_EQ(source.ranges.load() - ranges, files.size());
  EXPECT_EQ(source.prefixes.load() - prefixes, 0u);
  auto prefix = cache.get(r, top);
  ASSERT_NE(prefix, nullptr);
  EXPECT_TRUE(prefix->gathered());
  EXPECT_EQ(cache.get(r, top + 1), nullptr);  // a higher level is not in it
  uint64_t want_len = 0;
  for (uint32_t id : files)
    for (int i = 0; i <= top; ++i) want_len += store().pieces(store().files()[id])[static_cast<size_t>(i)].size;
  EXPECT_EQ(prefix->len, want_len);
  PrefixPieces cached(store(), *prefix);
  for (uint32_t id : files) {
    const File& f = store().files()[id];
    for (int k = 1; k <= top; ++k) {
      std::vector<uint8_t> got;
      ASSERT_TRUE(read_range(store(), f, k, 0, 1 << 20, cached, got).ok());
      EXPECT_EQ(got, expected(f, k)) << store().relative_path(f) << " level " << k;
    }
    for (int k = 1; k <= top; ++k) {  // where they lie in the gathered prefix
      const PieceRange range = piece_range(store(), f, k, 0, 1 << 20);
      auto span = prefix_span(store(), f, range, *prefix);
      ASSERT_TRUE(span.has_value());
      std::vector<uint8_t> got(span->begin(), span->end());
      got.insert(got.end(), range.tail.begin(), range.tail.end());
      EXPECT_EQ(got, expected(f, k)) << store().relative_path(f) << " level " << k;
    }
    EXPECT_FALSE(prefix_span(store(), f, piece_range(store(), f, top + 1, 0, 1 << 20), *prefix).has_value());
    std::vector<uint8_t> got;
    Status above = read_range(store(), f, top + 1, 0, 1 << 20, cached, got);
    ASSERT_FALSE(above.ok());
    EXPECT_EQ(above.error().code, EIO);
  }
  // The whole record, for a level above the line: one prefix read.
  ASSERT_TRUE(cache.load(r, store().levels(), false));
  EXPECT_EQ(source.prefixes.load() - prefixes, 1u);
  EXPECT_FALSE(cache.get(r, store().levels())->gathered());
}

TEST_F(GatheredPrefixTest, ADamagedPieceFailsOnlyTheReadsThatTouchIt) {
  const auto [r, top] = gathered_record();
  const File& victim = store().files()[store().record_files(r)[1]];
  const fid::index::Piece& bad = store().pieces(victim)[1];
  fid::testutil::flip_byte(path() / store().records()[r].path, bad.offset + bad.size / 2);
  LocalRecordSource source(store());
  ReadStats stats;
  RecordCache cache(store(), source, stats, 64 << 20);
  ASSERT_TRUE(cache.load(r, top, false));
  auto prefix = cache.get(r, top);
  ASSERT_NE(prefix, nullptr);
  EXPECT_TRUE(prefix->is_bad(victim.id, 1));
  PrefixPieces cached(store(), *prefix);
  std::vector<uint8_t> got;
  // Level 1 reads piece 1 too; a range inside the header piece alone is fine.
  ASSERT_TRUE(read_range(store(), victim, 1, 0, store().pieces(victim)[0].size, cached, got).ok());
  Status st = read_range(store(), victim, 1, 0, 1 << 20, cached, got);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, EIO);
  for (uint32_t id : store().record_files(r)) {
    if (id == victim.id) continue;
    const File& f = store().files()[id];
    ASSERT_TRUE(read_range(store(), f, top, 0, 1 << 20, cached, got).ok());
    EXPECT_EQ(got, expected(f, top));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ReadRangeTest, ::testing::Values(StoreLayout::scan, StoreLayout::file),
                         [](const ::testing::TestParamInfo<StoreLayout>& p) {
                           return std::string(fid::index::layout_name(p.param));
                         });

}  // namespace
