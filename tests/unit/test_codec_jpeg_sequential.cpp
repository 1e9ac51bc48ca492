// Unit tests for codec::sequential_from_progressive on coefficients no 8-bit DCT gives: a level
// whose values a sequential JPEG cannot code as they are. The sources are written coefficient by
// coefficient (libjpeg's jpeg_write_coefficients), progressive with point transforms, which code
// values a sequential scan cannot.
#include <gtest/gtest.h>

#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "codec/jpeg.h"
#include "jpeg_test_writer.h"

extern "C" {
#include <jpeglib.h>
}

namespace fid::codec {
namespace {

using Bytes = std::vector<uint8_t>;

// A progressive JPEG, quantiser 1, of `blocks_wide` x `blocks_high` blocks of its first component:
// gray, or YCbCr 4:2:0 (`color`: the chroma blocks are 0). fill(row, col, coefficients) sets the
// first component's blocks (natural order). DC first with Al=1 and AC with Al=2, then the
// refinements: so DC differences up to 4095 and AC values up to 4092 are coded.
Bytes progressive_from_coefficients(int blocks_wide, int blocks_high, bool color,
                                    const std::function<void(int, int, JCOEF*)>& fill) {
  jpeg_compress_struct c;
  testutil::JpegWriterErrors err;
  c.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = testutil::jpeg_writer_error_exit;
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_scan_info scans[2 + 3 * 3];
  int n = 0;
  const int comps = color ? 3 : 1;
  scans[n++] = {comps, {0, 1, 2}, 0, 0, 0, 1};
  for (int ci = 0; ci < comps; ++ci) scans[n++] = {1, {ci}, 1, 63, 0, 2};
  scans[n++] = {comps, {0, 1, 2}, 0, 0, 1, 0};
  for (int ci = 0; ci < comps; ++ci) scans[n++] = {1, {ci}, 1, 63, 2, 1};
  for (int ci = 0; ci < comps; ++ci) scans[n++] = {1, {ci}, 1, 63, 1, 0};
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&c);
    std::free(buf);
    return {};
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(8 * blocks_wide);
  c.image_height = JDIMENSION(8 * blocks_high);
  c.input_components = comps;
  c.in_color_space = color ? JCS_YCbCr : JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);  // every quantiser 1
  if (color) c.comp_info[0].h_samp_factor = c.comp_info[0].v_samp_factor = 2;
  c.scan_info = scans;
  c.num_scans = n;
  jvirt_barray_ptr arrays[3];
  for (int ci = 0; ci < comps; ++ci) {
    const int scale = color && ci > 0 ? 2 : 1;
    arrays[ci] = (*c.mem->request_virt_barray)(reinterpret_cast<j_common_ptr>(&c), JPOOL_IMAGE, TRUE,
                                              JDIMENSION((blocks_wide + scale - 1) / scale),
                                              JDIMENSION((blocks_high + scale - 1) / scale), JDIMENSION(color && ci == 0 ? 2 : 1));
  }
  jpeg_write_coefficients(&c, arrays);  // realizes the arrays; their blocks are read at finish
  for (int ci = 0; ci < comps; ++ci) {
    const jpeg_component_info& comp = c.comp_info[ci];
    for (JDIMENSION r = 0; r < comp.height_in_blocks; ++r) {
      JBLOCKARRAY row = (*c.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&c), arrays[ci], r, 1, TRUE);
      for (JDIMENSION b = 0; b < comp.width_in_blocks; ++b) {
        for (JCOEF& v : row[0][b]) v = 0;
        if (ci == 0) fill(int(r), int(b), row[0][b]);
      }
    }
  }
  jpeg_finish_compress(&c);
  Bytes out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

// A gray row of blocks.
Bytes progressive_from_coefficients(int blocks_wide, const std::function<void(int, JCOEF*)>& fill) {
  return progressive_from_coefficients(blocks_wide, 1, false, [&](int, int b, JCOEF* k) { fill(b, k); });
}

bool has_marker(const Bytes& jpeg, uint8_t marker) {
  for (size_t i = 0; i + 1 < jpeg.size(); ++i)
    if (jpeg[i] == 0xFF && jpeg[i + 1] == marker) return true;
  return false;
}

// Flat blocks, alternately DC 1500 and -1500: differences of 3000, past a sequential JPEG's 11
// bits. Their samples are 255 and 0 (saturated), which DC 1023 and -1024 give too: the
// re-encoding moves them there and keeps every pixel.
TEST(SequentialRange, DcValuesMoveWithinTheRangeWhereTheSamplesStayTheSame) {
  const Bytes source = progressive_from_coefficients(6, [](int b, JCOEF* k) { k[0] = b % 2 ? -1500 : 1500; });
  ASSERT_FALSE(source.empty());
  const Result<DecodedImage> want = decode_jpeg_strict(source);
  ASSERT_TRUE(want.ok()) << want.error().message;
  for (HuffmanTables tables : {HuffmanTables::standard, HuffmanTables::optimized}) {
    const Result<Bytes> seq = sequential_from_progressive(source, tables);
    ASSERT_TRUE(seq.ok()) << seq.error().message;
    const Result<DecodedImage> got = decode_jpeg_strict(*seq);
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(got->pixels, want->pixels);
  }
  EXPECT_EQ(want->pixels[0], 255);
  EXPECT_EQ(want->pixels[8], 0);
}

// DC values outside -1024..1023 whose differences fit 11 bits are written as they are: no
// sample depends on a moved value.
TEST(SequentialRange, DcValuesOutsideTheUsualRangeStayWhereTheirDifferencesFit) {
  const Bytes source = progressive_from_coefficients(4, [](int b, JCOEF* k) {
    k[0] = static_cast<JCOEF>(-1100 - 10 * b);
    k[1] = 300;  // samples from 0 up: moving the DC would change them
  });
  ASSERT_FALSE(source.empty());
  const Result<Bytes> seq = sequential_from_progressive(source, HuffmanTables::optimized);
  ASSERT_TRUE(seq.ok()) << seq.error().message;
  EXPECT_EQ(decode_jpeg_strict(*seq)->pixels, decode_jpeg_strict(source)->pixels);
}

// An AC value of 4000 has samples that 1023 does not give: no sequential JPEG has these pixels,
// and the error says so (ENOTSUP: its caller serves the progressive level instead).
TEST(SequentialRange, AnAcValueNoSequentialJpegCanCodeIsEnotsup) {
  const Bytes source = progressive_from_coefficients(2, [](int, JCOEF* k) { k[1] = 4000; });
  ASSERT_FALSE(source.empty());
  ASSERT_TRUE(decode_jpeg_strict(source).ok());
  const Result<Bytes> seq = sequential_from_progressive(source, HuffmanTables::optimized);
  ASSERT_FALSE(seq.ok());
  EXPECT_EQ(seq.error().code, ENOTSUP);
  EXPECT_NE(seq.error().message.find("out of the range a sequential JPEG can code"), std::string::npos)
      << seq.error().message;
}

// Unmovable DC values a whole range apart: -1500 next to 1500 with texture on both, so neither
// sample set is saturated. A restart before the second block starts its prediction at 0: the
// file has restart markers (DRI, RSTn) and the same pixels.
TEST(SequentialRange, DcDifferencesThatCannotMoveGetRestarts) {
  const Bytes source = progressive_from_coefficients(3, [](int b, JCOEF* k) {
    k[0] = b % 2 ? -1500 : 1500;
    k[1] = b % 2 ? 1000 : -1000;  // some samples of each block in 1..254
  });
  ASSERT_FALSE(source.empty());
  for (HuffmanTables tables : {HuffmanTables::standard, HuffmanTables::optimized}) {
    const Result<Bytes> seq = sequential_from_progressive(source, tables);
    ASSERT_TRUE(seq.ok()) << seq.error().message;
    EXPECT_TRUE(has_marker(*seq, 0xDD) && has_marker(*seq, 0xD0));
    const Result<DecodedImage> got = decode_jpeg_strict(*seq);
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(got->pixels, decode_jpeg_strict(source)->pixels);
  }
  // Where the differences fit, no restart is written.
  const Bytes plain = progressive_from_coefficients(3, [](int b, JCOEF* k) { k[0] = static_cast<JCOEF>(100 * b); });
  const Result<Bytes> seq = sequential_from_progressive(plain, HuffmanTables::optimized);
  ASSERT_TRUE(seq.ok()) << seq.error().message;
  EXPECT_FALSE(has_marker(*seq, 0xDD));
}

// The same values inside one MCU (4:2:0: four luma blocks an MCU), where no restart can fall
// between them: ENOTSUP.
TEST(SequentialRange, DcDifferencesInsideAnMcuThatCannotMoveAreEnotsup) {
  const Bytes source = progressive_from_coefficients(2, 2, true, [](int, int b, JCOEF* k) {
    k[0] = b % 2 ? -1500 : 1500;
    k[1] = b % 2 ? 1000 : -1000;
  });
  ASSERT_FALSE(source.empty());
  ASSERT_TRUE(decode_jpeg_strict(source).ok());
  const Result<Bytes> seq = sequential_from_progressive(source, HuffmanTables::standard);
  ASSERT_FALSE(seq.ok());
  EXPECT_EQ(seq.error().code, ENOTSUP);
  EXPECT_NE(seq.error().message.find("DC difference"), std::string::npos) << seq.error().message;
}

}  // namespace
}  // namespace fid::codec
