// A small packed store for unit tests of the read path: 16 JPEGs of different sizes in two
// folders, spread over several 16 KiB records (scan layout by default: a file's pieces lie in
// different level regions of its record; a fixture may override layout()), plus two blobs in a
// whole record.
#pragma once

#include <gtest/gtest.h>
#include <jpeglib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "pack/packer.h"
#include "index/store.h"
#include "test_files.h"

namespace fid::testutil {

// A baseline RGB JPEG of noisy gradients (noise keeps every scan non-trivial).
inline std::vector<uint8_t> make_jpeg(int w, int h, uint32_t seed) {
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

// Packs the store once per test; store() is the loaded index, path() its folder.
class PackedStore : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::filesystem::path src = dir_.path() / "src";
    for (int i = 0; i < 16; ++i) {
      const std::filesystem::path p = src / (i % 2 ? "cat" : "dog") / (std::to_string(i) + ".JPEG");
      std::filesystem::create_directories(p.parent_path());
      auto bytes = make_jpeg(40 + 8 * i, 32 + 5 * i, static_cast<uint32_t>(i));
      std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    std::ofstream(src / "notes.txt") << "not an image";
    std::ofstream(src / "cat" / "labels.bin") << std::string(5000, 'x');
    pack::PackOptions opt;
    opt.sources = {src};
    opt.store = path();
    opt.jobs = 2;
    opt.record_bytes = 16 * 1024;
    opt.layout = layout();
    std::atomic<bool> cancel{false};
    auto packed = pack::pack(opt, nullptr, cancel);
    ASSERT_TRUE(packed.ok()) << packed.error().message;
    reopen();
  }
  virtual index::StoreLayout layout() const { return index::StoreLayout::scan; }
  void reopen() { store_ = std::move(index::Store::open(path())).value(); }
  std::filesystem::path path() const { return dir_.path() / "store"; }
  const index::Store& store() const { return *store_; }

  // The bytes of piece i of f, read from its record file with plain stdio (no checksum check).
  std::vector<uint8_t> raw_piece(const index::File& f, uint32_t i) const {
    const index::Piece& p = store_->pieces(f)[i];
    std::ifstream in(path() / store_->records()[f.record].path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(p.offset));
    std::vector<uint8_t> out(p.size);
    in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
    return out;
  }
  // A file at level k as the format defines it: its pieces at k, then the trailer.
  std::vector<uint8_t> expected(const index::File& f, int level) const {
    std::vector<uint8_t> out;
    for (uint32_t i = 0; i < store_->pieces_at_level(f, level); ++i) {
      auto p = raw_piece(f, i);
      out.insert(out.end(), p.begin(), p.end());
    }
    auto t = index::level_trailer(f.kind);
    out.insert(out.end(), t.begin(), t.end());
    return out;
  }
  // The first file with at least `pieces` pieces.
  const index::File& jpeg_with(uint32_t pieces) const {
    for (const auto& f : store_->files())
      if (f.kind == index::FileKind::jpeg && f.piece_count >= pieces) return f;
    throw std::runtime_error("no such JPEG");
  }

  TempDir dir_;
  std::unique_ptr<index::Store> store_;
};

}  // namespace fid::testutil
