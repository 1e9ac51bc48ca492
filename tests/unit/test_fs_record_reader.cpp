// RecordReader::read_pieces: the pieces of a file read together (io_uring where the kernel allows
// it) give the same bytes as the store's own sequential reads, a damaged piece fails only the
// reads that include it, and the forced pread fallback behaves identically.
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "fs/record_cache.h"
#include "index/packer.h"
#include "index/store.h"
#include "test_files.h"
#include "test_result.h"

namespace fsys = std::filesystem;
using fid::fs::IoStats;
using fid::fs::PieceRead;
using fid::fs::RecordReader;
using fid::index::FileKind;
using fid::index::Store;

namespace {

using fid::testutil::TempDir;
using fid::testutil::flip_byte;

// A baseline RGB JPEG of noisy gradients (noise keeps every scan non-trivial).
std::vector<uint8_t> make_jpeg(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        px[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>((x * (c + 1) + y * 2 + rng() % 64) & 0xFF);
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = px.data() + static_cast<size_t>(c.next_scanline) * w * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

// A store of JPEGs in several small records (scan layout: a file's pieces lie in different
// level regions of its record), plus two blobs.
class ReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fsys::path src = dir_.path() / "src";
    for (int i = 0; i < 16; ++i) {
      const fsys::path p = src / (i % 2 ? "cat" : "dog") / (std::to_string(i) + ".JPEG");
      fsys::create_directories(p.parent_path());
      auto bytes = make_jpeg(40 + 8 * i, 32 + 5 * i, static_cast<uint32_t>(i));
      std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    std::ofstream(src / "notes.txt") << "not an image";
    std::ofstream(src / "cat" / "labels.bin") << std::string(5000, 'x');
    fid::index::PackOptions opt;
    opt.source = src;
    opt.store = dir_.path() / "store";
    opt.jobs = 2;
    opt.record_bytes = 16 * 1024;
    std::atomic<bool> cancel{false};
    fid::testutil::value_or_throw(fid::index::pack(opt, nullptr, cancel));
    store_ = Store::open(opt.store);
  }

  void reopen() { store_ = Store::open(dir_.path() / "store"); }

  // The expected bytes of every piece, read by the store itself (buffered, one after another).
  std::vector<std::vector<uint8_t>> reference(const fid::index::File& f) const {
    std::vector<std::vector<uint8_t>> out;
    for (uint32_t i = 0; i < f.piece_count; ++i) {
      out.emplace_back(store_->pieces(f)[i].size);
      EXPECT_EQ(store_->read_piece(f, i, out.back()), 0);
    }
    return out;
  }

  // Reads the pieces `idx` of f in one batch. rc, and the failing position in *failed.
  static int batch(RecordReader& r, const fid::index::File& f, const Store& s, const std::vector<uint32_t>& idx,
                   std::vector<std::vector<uint8_t>>& got, size_t* failed) {
    got.assign(idx.size(), {});
    std::vector<PieceRead> reads;
    for (size_t k = 0; k < idx.size(); ++k) {
      got[k].assign(s.pieces(f)[idx[k]].size, 0xAA);
      reads.push_back({idx[k], got[k]});
    }
    return r.read_pieces(f, reads, failed);
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(ReaderTest, BatchGivesTheSequentialBytesForEveryPieceOfEveryFile) {
  size_t multi = 0;
  for (bool uring : {true, false}) {
    IoStats stats;
    RecordReader r(*store_, stats, uring);
    EXPECT_EQ(r.uses_io_uring(), uring && RecordReader::io_uring_available());
    uint64_t pieces = 0;
    for (const auto& f : store_->files()) {
      auto want = reference(f);
      std::vector<uint32_t> all(f.piece_count), rev;
      for (uint32_t i = 0; i < f.piece_count; ++i) all[i] = i;
      rev.assign(all.rbegin(), all.rend());
      if (f.kind == FileKind::jpeg && f.piece_count > 1) ++multi;
      for (const auto* idx : {&all, &rev}) {
        std::vector<std::vector<uint8_t>> got;
        size_t failed = 99;
        ASSERT_EQ(batch(r, f, *store_, *idx, got, &failed), 0) << store_->relative_path(f);
        for (size_t k = 0; k < idx->size(); ++k) EXPECT_EQ(got[k], want[(*idx)[k]]) << store_->relative_path(f) << " piece " << (*idx)[k];
        pieces += idx->size();
      }
      for (uint32_t i = 0; i < f.piece_count; ++i) {  // and one at a time
        std::vector<uint8_t> one(want[i].size());
        ASSERT_EQ(r.read_piece(f, i, one), 0);
        EXPECT_EQ(one, want[i]);
        ++pieces;
      }
    }
    EXPECT_EQ(stats.piece_reads.load(), pieces);
    EXPECT_EQ(stats.storage_reads.load(), pieces);  // one storage read per piece, whichever way
    EXPECT_GE(stats.storage_bytes.load(), 1u);
  }
  EXPECT_GE(multi, 2 * 16u);  // the JPEGs really have several pieces each (counted for both readers)
}

TEST_F(ReaderTest, BatchLargerThanTheRingAndBadArguments) {
  const fid::index::File* jpeg = nullptr;
  for (const auto& f : store_->files())
    if (f.kind == FileKind::jpeg && f.piece_count > 2) jpeg = &f;
  ASSERT_NE(jpeg, nullptr);
  auto want = reference(*jpeg);
  for (bool uring : {true, false}) {
    IoStats stats;
    RecordReader r(*store_, stats, uring);
    std::vector<uint32_t> idx;
    for (int k = 0; k < 150; ++k) idx.push_back(static_cast<uint32_t>(k * 7) % jpeg->piece_count);
    std::vector<std::vector<uint8_t>> got;
    size_t failed = 99;
    ASSERT_EQ(batch(r, *jpeg, *store_, idx, got, &failed), 0);
    for (size_t k = 0; k < idx.size(); ++k) EXPECT_EQ(got[k], want[idx[k]]);
    EXPECT_EQ(r.read_pieces(*jpeg, {}), 0);
    std::vector<uint8_t> wrong(want[1].size() + 1), ok(want[0].size());
    std::vector<PieceRead> reads{{0, ok}, {1, wrong}};
    EXPECT_EQ(r.read_pieces(*jpeg, reads, &failed), -EINVAL);
    EXPECT_EQ(failed, 1u);
    reads = {{0, ok}, {jpeg->piece_count, ok}};
    EXPECT_EQ(r.read_pieces(*jpeg, reads, &failed), -EINVAL);
    EXPECT_EQ(failed, 1u);
  }
}

TEST_F(ReaderTest, FlippedByteFailsOnlyReadsOfThatPiece) {
  const fid::index::File* victim = nullptr;
  for (const auto& f : store_->files())
    if (f.kind == FileKind::jpeg && f.piece_count > 3) victim = &f;
  ASSERT_NE(victim, nullptr);
  const uint32_t vid = victim->id, bad = 2;
  std::vector<std::vector<std::vector<uint8_t>>> want;
  for (const auto& f : store_->files()) want.push_back(reference(f));
  {
    const auto& p = store_->pieces(*victim)[bad];
    flip_byte(dir_.path() / "store" / store_->records()[victim->record].path, p.offset + p.size / 2);
  }
  reopen();
  for (bool uring : {true, false}) {
    IoStats stats;
    RecordReader r(*store_, stats, uring);
    for (const auto& f : store_->files()) {
      std::vector<uint32_t> all(f.piece_count);
      for (uint32_t i = 0; i < f.piece_count; ++i) all[i] = i;
      std::vector<std::vector<uint8_t>> got;
      size_t failed = 99;
      int rc = batch(r, f, *store_, all, got, &failed);
      if (f.id != vid) {
        EXPECT_EQ(rc, 0) << store_->relative_path(f);
        for (uint32_t i = 0; i < f.piece_count; ++i) EXPECT_EQ(got[i], want[f.id][i]);
        continue;
      }
      EXPECT_EQ(rc, -EIO);
      EXPECT_EQ(failed, bad);
      // Without the bad piece the same file's other pieces read fine, in one batch or alone.
      std::vector<uint32_t> others;
      for (uint32_t i = 0; i < f.piece_count; ++i)
        if (i != bad) others.push_back(i);
      EXPECT_EQ(batch(r, f, *store_, others, got, &failed), 0);
      for (size_t k = 0; k < others.size(); ++k) EXPECT_EQ(got[k], want[f.id][others[k]]);
      std::vector<uint8_t> one(want[f.id][bad].size());
      EXPECT_EQ(r.read_piece(f, bad, one), -EIO);
      // The bad piece reported at its position in the batch, not at its piece index.
      EXPECT_EQ(batch(r, f, *store_, {0, bad, 1}, got, &failed), -EIO);
      EXPECT_EQ(failed, 1u);
    }
  }
}

}  // namespace
