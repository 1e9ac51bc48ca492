// Unit tests for codec/jpeg: progressive transcoding, the 10-level cut, strict decoding and the
// marker walker. Source JPEGs are generated here with the libjpeg compress API.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "codec/jpeg.h"
#include "codec/jpeg_markers.h"
#include "jpeg_test_writer.h"
#include "test_files.h"

extern "C" {
#include <jpeglib.h>
}

namespace fid::codec {
namespace {

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------------------------
// Source generation

enum class Color { ycbcr, gray, cmyk, ycck, rgb, two, five };

struct SourceSpec {
  std::string name;
  int w = 97, h = 61;
  Color color = Color::ycbcr;
  int h0 = 1, v0 = 1;  // sampling factors of component 0 (the others are 1x1)
  int quality = 90;
  int restart_rows = 0;
  bool arith = false;
  bool optimize = false;
  bool progressive = false;
  bool separate_scans = false;  // sequential, one scan per component (multi-scan baseline)
  bool markers = false;         // APP1 (EXIF-like), APP2 (ICC-like) and COM
  bool saturated = false;       // black and white areas: at quality 96+ their DC estimates leave -1024..1023
};

std::ostream& operator<<(std::ostream& os, const SourceSpec& s) { return os << s.name; }

int input_components(Color c) {
  switch (c) {
    case Color::gray: return 1;
    case Color::two: return 2;
    case Color::cmyk:
    case Color::ycck: return 4;
    case Color::five: return 5;
    default: return 3;
  }
}

// Photo-like: smooth gradients, a few frequencies of texture, some noise. Deterministic.
// `saturated`: the left quarter black, the right quarter white and a black bar across.
Bytes make_image(int w, int h, int comps, bool saturated = false, uint32_t seed = 1) {
  Bytes px(size_t(w) * h * comps);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> noise(-12, 12);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < comps; ++c) {
        double v = 40.0 + 150.0 * x / std::max(1, w - 1) * (c % 2 ? 0.6 : 1.0) +
                   50.0 * y / std::max(1, h - 1) +
                   30.0 * std::sin(x * 0.11 + c * 1.3) * std::cos(y * 0.07 + c) +
                   12.0 * std::sin((x + 2 * y) * 0.9) + ((x * 7 + y * 13) % 17 < 3 ? 25 : 0) +
                   noise(rng);
        if (saturated && (x < w / 4 || (y > h / 2 && y < h / 2 + 12))) v = 0;
        if (saturated && x >= w - w / 4) v = 255;
        px[(size_t(y) * w + x) * comps + c] = uint8_t(std::clamp(v, 0.0, 255.0));
      }
  return px;
}

Bytes exif_payload() {
  Bytes p = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0};
  for (int i = 0; i < 1500; ++i) p.push_back(uint8_t(i * 31 + 7));
  return p;
}
Bytes icc_payload() {
  const char tag[] = "ICC_PROFILE";
  Bytes p(tag, tag + sizeof tag);  // includes the NUL
  p.push_back(1);
  p.push_back(1);
  for (int i = 0; i < 3000; ++i) p.push_back(uint8_t(i * 13 + 255 * (i % 5 == 0)));
  return p;
}
const char kComment[] = "fidelityfs test comment \xff\x00 with binary";
Bytes com_payload() { return Bytes(kComment, kComment + sizeof kComment - 1); }


Bytes encode(const SourceSpec& s) {
  const Bytes px = make_image(s.w, s.h, input_components(s.color), s.saturated);
  jpeg_compress_struct c;
  testutil::JpegWriterErrors err;
  c.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = testutil::jpeg_writer_error_exit;
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_scan_info scans[MAX_COMPONENTS];
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&c);
    std::free(buf);
    return {};
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(s.w);
  c.image_height = JDIMENSION(s.h);
  c.input_components = input_components(s.color);
  switch (s.color) {
    case Color::gray: c.in_color_space = JCS_GRAYSCALE; break;
    case Color::cmyk:
    case Color::ycck: c.in_color_space = JCS_CMYK; break;
    case Color::two:
    case Color::five: c.in_color_space = JCS_UNKNOWN; break;
    default: c.in_color_space = JCS_RGB; break;
  }
  jpeg_set_defaults(&c);
  if (s.color == Color::rgb) jpeg_set_colorspace(&c, JCS_RGB);
  if (s.color == Color::ycck) jpeg_set_colorspace(&c, JCS_YCCK);
  jpeg_set_quality(&c, s.quality, TRUE);
  for (int i = 0; i < c.num_components; ++i) {
    c.comp_info[i].h_samp_factor = i == 0 ? s.h0 : 1;
    c.comp_info[i].v_samp_factor = i == 0 ? s.v0 : 1;
  }
  c.restart_in_rows = s.restart_rows;
  c.arith_code = s.arith ? TRUE : FALSE;
  c.optimize_coding = s.optimize ? TRUE : FALSE;
  if (s.progressive) jpeg_simple_progression(&c);
  if (s.separate_scans) {
    for (int i = 0; i < c.num_components; ++i) {
      scans[i] = jpeg_scan_info{};
      scans[i].comps_in_scan = 1;
      scans[i].component_index[0] = i;
      scans[i].Ss = 0;
      scans[i].Se = 63;
    }
    c.scan_info = scans;
    c.num_scans = c.num_components;
  }
  jpeg_start_compress(&c, TRUE);
  if (s.markers) {
    Bytes e = exif_payload(), i = icc_payload(), m = com_payload();
    jpeg_write_marker(&c, JPEG_APP0 + 1, e.data(), unsigned(e.size()));
    jpeg_write_marker(&c, JPEG_APP0 + 2, i.data(), unsigned(i.size()));
    jpeg_write_marker(&c, JPEG_COM, m.data(), unsigned(m.size()));
  }
  const size_t stride = size_t(s.w) * size_t(c.input_components);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + stride * c.next_scanline;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Helpers

Bytes level_file(const ProgressiveJpeg& p, int k) {
  Bytes f(p.bytes.begin(), p.bytes.begin() + p.piece_end[k]);
  f.insert(f.end(), kEoi.begin(), kEoi.end());
  return f;
}

double mean_abs_diff(const Bytes& a, const Bytes& b) {
  if (a.size() != b.size() || a.empty()) return 1e9;
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / double(a.size());
}

bool contains(std::span<const uint8_t> hay, const Bytes& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

Bytes segment(uint8_t marker, const Bytes& payload) {
  // Built by reserve + push_back: GCC 12 warns (-Warray-bounds, falsely) on insert after an
  // initializer-list construction.
  Bytes s;
  s.reserve(payload.size() + 4);
  for (uint8_t b : {uint8_t{0xFF}, marker, uint8_t((payload.size() + 2) >> 8), uint8_t(payload.size() + 2)})
    s.push_back(b);
  for (uint8_t b : payload) s.push_back(b);
  return s;
}

int count_app_with_tag(std::span<const uint8_t> b, uint8_t marker, const char* tag) {
  const size_t tl = std::strlen(tag) + 1;  // tag plus NUL
  int n = 0;
  for (size_t i = 0; i + 4 + tl <= b.size(); ++i)
    if (b[i] == 0xFF && b[i + 1] == marker && std::memcmp(&b[i + 4], tag, tl) == 0) ++n;
  return n;
}

// One scan as described by its SOS, with component indexes (positions in the SOF).
struct ScanDesc {
  int level;
  std::vector<int> comps;
  int ss, se, ah, al;
  bool operator==(const ScanDesc&) const = default;
};
std::ostream& operator<<(std::ostream& os, const ScanDesc& d) {
  os << "{L" << d.level << " comps";
  for (int c : d.comps) os << ' ' << c;
  return os << " Ss" << d.ss << " Se" << d.se << " Ah" << d.ah << " Al" << d.al << '}';
}

std::vector<ScanDesc> parse_scans(const ProgressiveJpeg& p) {
  Bytes full = level_file(p, kJpegLevels);
  const Result<JpegMarkerLayout> walked = walk_jpeg_markers(full);
  EXPECT_TRUE(walked.ok()) << walked.error().message;
  if (!walked) return {};
  const JpegMarkerLayout& lay = *walked;
  std::vector<int> ids;
  const uint8_t* sof = full.data() + lay.frame_offset;
  for (int i = 0; i < sof[9]; ++i) ids.push_back(sof[10 + 3 * i]);
  std::vector<ScanDesc> out;
  for (const auto& s : lay.scans) {
    const uint8_t* q = full.data() + s.sos + 4;
    ScanDesc d;
    d.level = 0;
    for (int k = 1; k <= kJpegLevels; ++k)
      if (s.end <= p.piece_end[k]) {
        d.level = k;
        break;
      }
    const int ns = q[0];
    for (int i = 0; i < ns; ++i)
      d.comps.push_back(int(std::find(ids.begin(), ids.end(), q[1 + 2 * i]) - ids.begin()));
    d.ss = q[1 + 2 * ns];
    d.se = q[2 + 2 * ns];
    d.ah = q[3 + 2 * ns] >> 4;
    d.al = q[3 + 2 * ns] & 15;
    out.push_back(d);
  }
  return out;
}

// The documented scripts (docs/FORMAT.md).
std::vector<ScanDesc> expected_script(ScanScript kind, int n, bool dc_interleaved) {
  std::vector<ScanDesc> v;
  auto dc = [&](int level, int ah, int al) {
    if (dc_interleaved) {
      std::vector<int> all;
      for (int c = 0; c < n; ++c) all.push_back(c);
      v.push_back({level, all, 0, 0, ah, al});
    } else {
      for (int c = 0; c < n; ++c) v.push_back({level, {c}, 0, 0, ah, al});
    }
  };
  auto ac = [&](int level, int ss, int se, int ah, int al) {
    for (int c = 0; c < n; ++c) v.push_back({level, {c}, ss, se, ah, al});
  };
  if (kind == ScanScript::ycbcr) {
    dc(1, 0, 1);
    v.push_back({2, {0}, 1, 5, 0, 2});
    v.push_back({3, {2}, 1, 63, 0, 1});
    v.push_back({4, {1}, 1, 63, 0, 1});
    v.push_back({5, {0}, 6, 63, 0, 2});
    v.push_back({6, {0}, 1, 63, 2, 1});
    dc(7, 1, 0);
    v.push_back({8, {2}, 1, 63, 1, 0});
    v.push_back({9, {1}, 1, 63, 1, 0});
    v.push_back({10, {0}, 1, 63, 1, 0});
  } else if (kind == ScanScript::ycbcr_fast) {
    dc(1, 0, 0);
    v.push_back({2, {0}, 1, 2, 0, 0});
    v.push_back({3, {0}, 3, 5, 0, 0});
    v.push_back({4, {2}, 1, 9, 0, 0});
    v.push_back({4, {1}, 1, 9, 0, 0});
    v.push_back({5, {0}, 6, 9, 0, 0});
    v.push_back({6, {0}, 10, 14, 0, 0});
    v.push_back({7, {0}, 15, 20, 0, 0});
    v.push_back({8, {0}, 21, 27, 0, 0});
    v.push_back({8, {2}, 10, 63, 0, 0});
    v.push_back({8, {1}, 10, 63, 0, 0});
    v.push_back({9, {0}, 28, 40, 0, 0});
    v.push_back({10, {0}, 41, 63, 0, 0});
  } else if (kind == ScanScript::generic_fast) {
    dc(1, 0, 0);
    const int bands[][2] = {{1, 2}, {3, 5}, {6, 7}, {8, 9}, {10, 14}, {15, 20}, {21, 27}, {28, 40}, {41, 63}};
    for (int i = 0; i < 9; ++i) ac(i + 2, bands[i][0], bands[i][1], 0, 0);
  } else {
    dc(1, 0, 1);
    ac(2, 1, 5, 0, 2);
    ac(3, 6, 14, 0, 2);
    ac(4, 15, 27, 0, 2);
    ac(5, 28, 63, 0, 2);
    ac(6, 1, 63, 2, 1);
    dc(7, 1, 0);
    ac(8, 1, 5, 1, 0);
    ac(9, 6, 14, 1, 0);
    ac(10, 15, 63, 1, 0);
  }
  return v;
}

// Every property a transcode must have; `source_pixels` is the strict decode of the source.
void check_transcode(const Bytes& source, const Result<ProgressiveJpeg>& r, const std::string& what,
                     bool check_quality_order = true) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_THROW((void)r.error(), std::bad_variant_access) << "a transcode that succeeded carries no error";
  const ProgressiveJpeg& p = *r;
  ASSERT_GE(p.bytes.size(), 4u);
  EXPECT_EQ(p.bytes[0], 0xFF);
  EXPECT_EQ(p.bytes[1], 0xD8);
  EXPECT_EQ(p.piece_end[kJpegLevels], p.bytes.size());
  for (int k = 1; k <= kJpegLevels; ++k) EXPECT_LT(p.piece_end[k - 1], p.piece_end[k]) << k;
  // The header piece ends with the SOF2 segment or later non-scan markers; it has no scan.
  const Bytes sof2 = {0xFF, 0xC2};
  EXPECT_TRUE(contains(p.piece(0), sof2));
  EXPECT_FALSE(contains(p.piece(0), Bytes{0xFF, 0xDA}));
  EXPECT_FALSE(contains(p.piece(0), Bytes{0xFF, 0xC4}));

  // Structure: progressive Huffman, no restart markers, scans match the documented script.
  Bytes full = level_file(p, kJpegLevels);
  const Result<JpegMarkerLayout> walked = walk_jpeg_markers(full);
  ASSERT_TRUE(walked.ok()) << walked.error().message;
  const JpegMarkerLayout& lay = *walked;
  EXPECT_EQ(lay.frame_marker, 0xC2);
  EXPECT_EQ(lay.restart_markers, 0u);
  EXPECT_EQ(lay.restart_interval_markers, 0u);
  EXPECT_EQ(lay.header_end, p.piece_end[0]);
  EXPECT_EQ(size_t(lay.eoi) + 2, full.size());

  const Result<DecodedImage> decoded_source = decode_jpeg_strict(source);
  ASSERT_TRUE(decoded_source.ok()) << decoded_source.error().message;
  const DecodedImage& src = *decoded_source;
  EXPECT_EQ(p.width, src.width);
  EXPECT_EQ(p.height, src.height);

  std::vector<double> diff(kJpegLevels + 1, 0);
  for (int k = 1; k <= kJpegLevels; ++k) {
    const Result<DecodedImage> decoded = decode_jpeg_strict(level_file(p, k));
    ASSERT_TRUE(decoded.ok()) << "level " << k << ": " << decoded.error().message;
    const DecodedImage& d = *decoded;
    EXPECT_EQ(d.width, src.width);
    EXPECT_EQ(d.height, src.height);
    EXPECT_EQ(d.components, src.components);
    diff[k] = mean_abs_diff(d.pixels, src.pixels);
    if (k == kJpegLevels) {
      EXPECT_TRUE(d.pixels == src.pixels) << "full level differs from source";
    }
  }
  if (check_quality_order && src.width >= 64 && src.height >= 32) {
    EXPECT_GT(diff[1], diff[5]) << "level 5 should be closer to the source than level 1";
    EXPECT_GT(diff[5], 0.0);
  }
}

// ---------------------------------------------------------------------------------------------
// Generated sources

class TranscodeSource : public ::testing::TestWithParam<SourceSpec> {};

TEST_P(TranscodeSource, TenLevelsDecodeStrictlyAndFullLevelIsExact) {
  const SourceSpec& s = GetParam();
  const Bytes source = encode(s);
  ASSERT_FALSE(source.empty());
  const Result<ProgressiveJpeg> r = transcode_progressive(source);
  check_transcode(source, r, s.name, s.quality >= 50);
  if (!r.ok()) return;
  const int n = input_components(s.color);
  EXPECT_EQ(r->components, n);
  EXPECT_EQ(r->width, s.w);
  EXPECT_EQ(r->height, s.h);
  const bool ycbcr = s.color == Color::ycbcr;
  EXPECT_EQ(r->script, ycbcr ? ScanScript::ycbcr : ScanScript::generic);
  const bool dc_interleaved = n <= 4 && s.h0 * s.v0 + (n - 1) <= 10;
  EXPECT_EQ(parse_scans(*r), expected_script(r->script, n, dc_interleaved));
}

TEST_P(TranscodeSource, FastScriptsDecodeStrictlyAndFullLevelIsExact) {
  const SourceSpec& s = GetParam();
  const Bytes source = encode(s);
  const Result<ProgressiveJpeg> r = transcode_progressive(source, LevelScripts::fast);
  check_transcode(source, r, s.name, s.quality >= 50);
  if (!r.ok()) return;
  const int n = input_components(s.color);
  EXPECT_EQ(r->script, s.color == Color::ycbcr ? ScanScript::ycbcr_fast : ScanScript::generic_fast);
  const bool dc_interleaved = n <= 4 && s.h0 * s.v0 + (n - 1) <= 10;
  EXPECT_EQ(parse_scans(*r), expected_script(r->script, n, dc_interleaved));
  // Same coefficients, another entropy coding: the pcr transcode of the fast one is the pcr one.
  const Result<ProgressiveJpeg> pcr = transcode_progressive(source);
  const Result<ProgressiveJpeg> back = transcode_progressive(level_file(*r, kJpegLevels));
  ASSERT_TRUE(pcr.ok() && back.ok());
  EXPECT_TRUE(back->bytes == pcr->bytes);
}

TEST_P(TranscodeSource, TranscodingTheResultAgainGivesTheSameBytes) {
  const SourceSpec& s = GetParam();
  const Result<ProgressiveJpeg> r = transcode_progressive(encode(s));
  ASSERT_TRUE(r.ok()) << r.error().message;
  const Result<ProgressiveJpeg> again = transcode_progressive(level_file(*r, kJpegLevels));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(again->bytes == r->bytes);
  EXPECT_EQ(again->piece_end, r->piece_end);
}

// Every level of both script families, re-encoded sequential, decodes (libjpeg's default decode:
// block smoothing on) to the very pixels of the progressive level, keeps the markers, and is one
// sequential scan.
TEST_P(TranscodeSource, SequentialLevelsHaveTheProgressiveLevelsPixels) {
  const SourceSpec& s = GetParam();
  const Bytes source = encode(s);
  for (LevelScripts scripts : {LevelScripts::pcr, LevelScripts::fast}) {
    const Result<ProgressiveJpeg> r = transcode_progressive(source, scripts);
    ASSERT_TRUE(r.ok()) << r.error().message;
    for (int k = 1; k <= kJpegLevels; ++k) {
      const Bytes level = level_file(*r, k);
      const Result<std::vector<uint8_t>> seq = sequential_from_progressive(level, HuffmanTables::standard);
      ASSERT_TRUE(seq.ok()) << "level " << k << ": " << seq.error().message;
      const Result<JpegMarkerLayout> layout = walk_jpeg_markers(*seq);
      ASSERT_TRUE(layout.ok()) << layout.error().message;
      EXPECT_TRUE(layout->frame_marker == 0xC0 || layout->frame_marker == 0xC1) << int(layout->frame_marker);
      // One interleaved scan; one per component only where an MCU would exceed 10 blocks.
      const bool interleaved = input_components(s.color) <= 4 && s.h0 * s.v0 + input_components(s.color) - 1 <= 10;
      EXPECT_EQ(layout->scans.size(), interleaved ? 1u : size_t(input_components(s.color))) << "level " << k;
      const Result<DecodedImage> want = decode_jpeg_strict(level);
      const Result<DecodedImage> got = decode_jpeg_strict(*seq);
      ASSERT_TRUE(want.ok() && got.ok());
      EXPECT_EQ(got->width, want->width);
      EXPECT_EQ(got->components, want->components);
      EXPECT_TRUE(got->pixels == want->pixels) << "level " << k << (scripts == LevelScripts::fast ? " fast" : " pcr")
                                               << ": mean |diff| " << mean_abs_diff(got->pixels, want->pixels);
      if (s.markers) {
        EXPECT_TRUE(contains(*seq, exif_payload()));
        EXPECT_TRUE(contains(*seq, icc_payload()));
        EXPECT_TRUE(contains(*seq, com_payload()));
      }
      const Result<std::vector<uint8_t>> optimized = sequential_from_progressive(level, HuffmanTables::optimized);
      ASSERT_TRUE(optimized.ok());
      EXPECT_LE(optimized->size(), seq->size());
      EXPECT_TRUE(decode_jpeg_strict(*optimized)->pixels == want->pixels);
    }
  }
}

std::string spec_name(const ::testing::TestParamInfo<SourceSpec>& i) { return i.param.name; }

SourceSpec spec(std::string name, auto&&... mods) {
  SourceSpec s;
  s.name = std::move(name);
  (mods(s), ...);
  return s;
}
auto size(int w, int h) {
  return [=](SourceSpec& s) { s.w = w, s.h = h; };
}
auto sampling(int h0, int v0) {
  return [=](SourceSpec& s) { s.h0 = h0, s.v0 = v0; };
}
auto color(Color c) {
  return [=](SourceSpec& s) { s.color = c; };
}
auto set(bool SourceSpec::*field) {
  return [=](SourceSpec& s) { s.*field = true; };
}

INSTANTIATE_TEST_SUITE_P(
    Generated, TranscodeSource,
    ::testing::Values(
        spec("baseline444_small"), spec("baseline444_640x480", size(640, 480)),
        spec("baseline422", sampling(2, 1)), spec("baseline420", sampling(2, 2)),
        spec("baseline420_640x480", size(640, 480), sampling(2, 2)),
        spec("gray", color(Color::gray)), spec("gray_640x480", color(Color::gray), size(640, 480)),
        spec("cmyk", color(Color::cmyk)), spec("ycck_420", color(Color::ycck), sampling(2, 2)),
        spec("rgb_no_transform", color(Color::rgb)), spec("two_components", color(Color::two)),
        spec("ycbcr_luma_4x4_split_dc", sampling(4, 4), set(&SourceSpec::separate_scans)),
        spec("gray_luma_4x4", color(Color::gray), sampling(4, 4)),
        spec("restart_interval", sampling(2, 2), [](SourceSpec& s) { s.restart_rows = 1; }),
        spec("arithmetic", sampling(2, 2), set(&SourceSpec::arith)),
        spec("arithmetic_progressive", set(&SourceSpec::arith), set(&SourceSpec::progressive)),
        spec("optimize_coding", set(&SourceSpec::optimize)),
        spec("already_progressive", sampling(2, 2), set(&SourceSpec::progressive)),
        spec("progressive_gray", color(Color::gray), set(&SourceSpec::progressive)),
        spec("size_1x1", size(1, 1)), spec("size_1x1_gray", size(1, 1), color(Color::gray)),
        spec("size_7x9", size(7, 9), sampling(2, 2)), spec("size_17x3", size(17, 3)),
        spec("size_4097x13", size(4097, 13), sampling(2, 2)),
        spec("quality_100", [](SourceSpec& s) { s.quality = 100; }),
        spec("quality_10", sampling(2, 2), [](SourceSpec& s) { s.quality = 10; }),
        spec("markers", sampling(2, 2), set(&SourceSpec::markers)),
        // Quality 96-100 with black and white areas: DC estimates past -1024..1023 at level 1.
        spec("saturated_q100_444", size(160, 120), set(&SourceSpec::saturated), [](SourceSpec& s) { s.quality = 100; }),
        spec("saturated_q96_420", size(160, 120), sampling(2, 2), set(&SourceSpec::saturated),
             [](SourceSpec& s) { s.quality = 96; }),
        spec("saturated_q98_422", size(160, 120), sampling(2, 1), set(&SourceSpec::saturated),
             [](SourceSpec& s) { s.quality = 98; }),
        spec("saturated_q100_gray", size(160, 120), color(Color::gray), set(&SourceSpec::saturated),
             [](SourceSpec& s) { s.quality = 100; }),
        spec("saturated_q100_cmyk", size(160, 120), color(Color::cmyk), set(&SourceSpec::saturated),
             [](SourceSpec& s) { s.quality = 100; }),
        spec("markers_cmyk", color(Color::cmyk), set(&SourceSpec::markers))),
    spec_name);

// For YCbCr the script is libjpeg's standard one and markers are copied like jpegtran's
// `-copy all`, so the output is byte-identical to jpegtran's (optional: needs jpegtran).
TEST(TranscodeVsJpegtran, YCbCrOutputEqualsJpegtranProgressiveCopyAll) {
  if (std::system("jpegtran -version </dev/null >/dev/null 2>&1") != 0) GTEST_SKIP() << "no jpegtran";
  const std::string dir = ::testing::TempDir();
  for (const SourceSpec& s : {spec("a", sampling(2, 2), set(&SourceSpec::markers)),
                              spec("b", size(333, 77), sampling(2, 1), set(&SourceSpec::arith)),
                              spec("c", size(640, 480), set(&SourceSpec::progressive))}) {
    const Bytes source = encode(s);
    const std::string in = dir + "/fid_jt_in.jpg", out = dir + "/fid_jt_out.jpg";
    std::ofstream(in, std::ios::binary).write(reinterpret_cast<const char*>(source.data()),
                                               std::streamsize(source.size()));
    ASSERT_EQ(std::system(("jpegtran -progressive -copy all -outfile " + out + " " + in).c_str()), 0);
    std::ifstream f(out, std::ios::binary);
    const Bytes theirs((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const Result<ProgressiveJpeg> r = transcode_progressive(source);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(level_file(*r, kJpegLevels) == theirs) << s.name;
    std::filesystem::remove(in);
    std::filesystem::remove(out);
  }
}

// libjpeg-turbo 2.1 writes JPEGs with more than 4 components but cannot read them back
// ("Invalid component ID 4 in SOS"). Whatever the library can read must transcode correctly;
// what it cannot read must be refused with its message.
TEST(TranscodeComponents, FiveComponentsFollowWhatLibjpegCanRead) {
  const Bytes source = encode(spec("five", color(Color::five), set(&SourceSpec::separate_scans)));
  ASSERT_FALSE(source.empty());
  const Result<DecodedImage> decoded = decode_jpeg_strict(source);
  const Result<ProgressiveJpeg> r = transcode_progressive(source);
  if (decoded.ok()) {
    check_transcode(source, r, "five");
    EXPECT_EQ(parse_scans(*r), expected_script(ScanScript::generic, 5, false));
    const Result<ProgressiveJpeg> fast = transcode_progressive(source, LevelScripts::fast);
    check_transcode(source, fast, "five (fast)");
    EXPECT_EQ(parse_scans(*fast), expected_script(ScanScript::generic_fast, 5, false));
  } else {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message, decoded.error().message);
    EXPECT_EQ(r.error().code, decoded.error().code);
  }
}

TEST(TranscodeMarkers, App1App2AndComAreKeptByteIdenticalInTheHeader) {
  for (Color c : {Color::ycbcr, Color::cmyk, Color::gray}) {
    SourceSpec s = spec("m", set(&SourceSpec::markers), color(c));
    const Bytes source = encode(s);
    const Result<ProgressiveJpeg> r = transcode_progressive(source);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const auto header = r->piece(0);
    const Bytes app1 = segment(0xE1, exif_payload());
    const Bytes app2 = segment(0xE2, icc_payload());
    const Bytes com = segment(0xFE, com_payload());
    EXPECT_TRUE(contains(header, app1));
    EXPECT_TRUE(contains(header, app2));
    EXPECT_TRUE(contains(header, com));
    // Source order is kept.
    auto pos = [&](const Bytes& b) {
      return std::search(header.begin(), header.end(), b.begin(), b.end()) - header.begin();
    };
    EXPECT_LT(pos(app1), pos(app2));
    EXPECT_LT(pos(app2), pos(com));
    // Exactly one JFIF (YCbCr/gray) or one Adobe marker (CMYK): the writer's own, no copy.
    if (c == Color::cmyk) {
      int adobe = 0;
      for (size_t i = 0; i + 9 <= header.size(); ++i)
        adobe += header[i] == 0xFF && header[i + 1] == 0xEE && !std::memcmp(&header[i + 4], "Adobe", 5);
      EXPECT_EQ(adobe, 1);
      EXPECT_EQ(count_app_with_tag(header, 0xE0, "JFIF"), 0);
    } else {
      EXPECT_EQ(count_app_with_tag(header, 0xE0, "JFIF"), 1);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bad inputs

void expect_rejected(const Bytes& b, const std::string& what) {
  SCOPED_TRACE(what);
  const Result<ProgressiveJpeg> r = transcode_progressive(b);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.error().message.empty());
  EXPECT_THROW((void)r.value(), std::bad_variant_access) << "a rejected source leaves no stream";
}

TEST(TranscodeRejects, EmptyBuffer) { expect_rejected({}, "empty"); }
TEST(TranscodeRejects, SoiAndOneMarkerByte) { expect_rejected({0xFF, 0xD8, 0xFF}, "FF D8 FF"); }
TEST(TranscodeRejects, SoiEoi) { expect_rejected({0xFF, 0xD8, 0xFF, 0xD9}, "FF D8 FF D9"); }
TEST(TranscodeRejects, RandomBytes) {
  std::mt19937 rng(42);
  for (int i = 0; i < 200; ++i) {
    Bytes b(size_t(rng() % 5000));
    for (auto& x : b) x = uint8_t(rng());
    if (i % 2 && b.size() >= 3) b[0] = 0xFF, b[1] = 0xD8, b[2] = 0xFF;  // get past the sniff
    expect_rejected(b, "random " + std::to_string(i));
  }
}
TEST(TranscodeRejects, TruncatedAtSixtyPercent) {
  const Bytes source = encode(spec("t", size(320, 240), sampling(2, 2)));
  Bytes cut(source.begin(), source.begin() + long(source.size() * 6 / 10));
  expect_rejected(cut, "60%");
  const Result<DecodedImage> d = decode_jpeg_strict(cut);
  ASSERT_FALSE(d.ok());
  EXPECT_FALSE(d.error().message.empty());
  EXPECT_THROW((void)d.value(), std::bad_variant_access) << "a failed decode leaves no pixels";
}
TEST(TranscodeRejects, TruncatedAnywhere) {
  const Bytes source = encode(spec("t", size(64, 48), sampling(2, 2), set(&SourceSpec::markers)));
  for (size_t n = 0; n + 2 < source.size(); n += 1 + n / 16)
    expect_rejected(Bytes(source.begin(), source.begin() + long(n)), "cut at " + std::to_string(n));
  // Only the EOI missing: libjpeg warns about the premature end; that is a failure too.
  expect_rejected(Bytes(source.begin(), source.end() - 2), "no EOI");
}
TEST(TranscodeRejects, CorruptedBytesNeverCrash) {
  const Bytes source = encode(spec("c", size(64, 48), sampling(2, 2)));
  std::mt19937 rng(7);
  int rejected = 0;
  for (int i = 0; i < 300; ++i) {
    Bytes b = source;
    for (int j = 0; j < 3; ++j) b[rng() % b.size()] = uint8_t(rng());
    const Result<ProgressiveJpeg> r = transcode_progressive(b);
    if (!r.ok()) {
      EXPECT_FALSE(r.error().message.empty());
      ++rejected;
      continue;
    }
    // If it is accepted, every property still holds.
    check_transcode(b, r, "corrupt " + std::to_string(i), false);
  }
  EXPECT_GT(rejected, 0);
}
TEST(TranscodeRejects, ErrorNamesTheCause) {
  const Result<ProgressiveJpeg> r = transcode_progressive(Bytes{0xFF, 0xD8, 0xFF, 0xD9});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("JPEG"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().code, EINVAL);
}
TEST(TranscodeRejects, HugeDeclaredSizeFailsCleanly) {
  // A valid tiny 16x16 gray JPEG whose SOF claims 60000x60000: the coefficient buffer would
  // need ~6.7 GiB; transcoding must fail with an error, not allocate it.
  Bytes b = encode(spec("g", size(16, 16), color(Color::gray)));
  const Result<JpegMarkerLayout> lay = walk_jpeg_markers(b);
  ASSERT_TRUE(lay.ok()) << lay.error().message;
  b[lay->frame_offset + 5] = 0xEA, b[lay->frame_offset + 6] = 0x60;
  b[lay->frame_offset + 7] = 0xEA, b[lay->frame_offset + 8] = 0x60;
  const Result<ProgressiveJpeg> r = transcode_progressive(b);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.error().message.empty());
}

TEST(LooksLikeJpeg, SniffsSoiAndMarker) {
  EXPECT_TRUE(looks_like_jpeg(Bytes{0xFF, 0xD8, 0xFF}));
  EXPECT_FALSE(looks_like_jpeg(Bytes{0xFF, 0xD8}));
  EXPECT_FALSE(looks_like_jpeg(Bytes{0x89, 'P', 'N', 'G'}));
  EXPECT_FALSE(looks_like_jpeg(Bytes{}));
}

// ---------------------------------------------------------------------------------------------
// Marker walker

Bytes sos(int ncomp) {
  Bytes s = {0xFF, 0xDA, 0, uint8_t(6 + 2 * ncomp), uint8_t(ncomp)};
  for (int i = 0; i < ncomp; ++i) s.push_back(uint8_t(i + 1)), s.push_back(0);
  s.push_back(0), s.push_back(63), s.push_back(0);
  return s;
}
Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
const Bytes kSoi = {0xFF, 0xD8};
const Bytes kSof2 = {0xFF, 0xC2, 0, 11, 8, 0, 1, 0, 1, 1, 1, 0x11, 0};
const Bytes kDht = {0xFF, 0xC4, 0, 4, 0, 0};
const Bytes kCom = {0xFF, 0xFE, 0, 4, 'h', 'i'};

TEST(JpegMarkerWalker, CutsHeaderAndScans) {
  const Bytes data1 = {0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD3, 0x56};  // stuffed FF, RST3
  const Bytes data2 = {0x78, 0x9A};
  const Bytes s = cat({kSoi, kCom, kSof2, kCom, kDht, sos(1), data1, kDht, sos(1), data2,
                       {0xFF, 0xFF, 0xD9}});
  const Result<JpegMarkerLayout> walked = walk_jpeg_markers(s);
  ASSERT_TRUE(walked.ok()) << walked.error().message;
  const JpegMarkerLayout& lay = *walked;
  const uint32_t header = uint32_t(kSoi.size() + kCom.size() + kSof2.size() + kCom.size());
  EXPECT_EQ(lay.header_end, header);
  EXPECT_EQ(lay.frame_marker, 0xC2);
  ASSERT_EQ(lay.scans.size(), 2u);
  EXPECT_EQ(lay.scans[0].begin, header);
  EXPECT_EQ(lay.scans[0].sos, header + kDht.size());
  EXPECT_EQ(lay.scans[0].data_begin, lay.scans[0].sos + sos(1).size());
  EXPECT_EQ(lay.scans[0].end, lay.scans[0].data_begin + data1.size());
  EXPECT_EQ(lay.scans[1].begin, lay.scans[0].end);
  EXPECT_EQ(lay.scans[1].end, lay.scans[1].data_begin + data2.size());
  EXPECT_EQ(lay.eoi, lay.scans[1].end);  // the fill byte belongs to the EOI marker
  EXPECT_EQ(lay.restart_markers, 1u);
}

TEST(JpegMarkerWalker, RejectsMalformedStreams) {
  const Bytes ok = cat({kSoi, kSof2, kDht, sos(1), {1, 2}, {0xFF, 0xD9}});
  const Result<JpegMarkerLayout> walked = walk_jpeg_markers(ok);
  ASSERT_TRUE(walked.ok()) << walked.error().message;
  for (size_t n = 0; n < ok.size(); ++n) {
    const Result<JpegMarkerLayout> cut = walk_jpeg_markers(std::span(ok).first(n));
    ASSERT_FALSE(cut.ok()) << n;
    EXPECT_FALSE(cut.error().message.empty());
  }
  EXPECT_FALSE(walk_jpeg_markers(cat({kSoi, sos(1), {1}, {0xFF, 0xD9}})).ok());  // no SOF
  EXPECT_FALSE(walk_jpeg_markers(cat({kSoi, kSof2, kSof2, sos(1), {1}, {0xFF, 0xD9}})).ok());
  EXPECT_FALSE(walk_jpeg_markers(cat({kSoi, kSof2, {0xFF, 0xD9}})).ok());  // no scan
  EXPECT_FALSE(walk_jpeg_markers(cat({kSoi, kSof2, {0xFF, 0xFE, 0, 1}})).ok());  // len 1
  EXPECT_FALSE(walk_jpeg_markers(cat({kSoi, kSof2, {0xFF, 0xDA, 0, 6, 5, 0, 0, 0}})).ok());
  EXPECT_FALSE(walk_jpeg_markers(cat({kSoi, {0x00}, kSof2})).ok());
}

TEST(JpegMarkerWalker, NeverReadsOutOfBoundsOnRandomInput) {
  std::mt19937 rng(3);
  const Bytes good = cat({kSoi, kSof2, kDht, sos(1), {1, 0xFF, 0, 2}, {0xFF, 0xD9}});
  for (int i = 0; i < 20000; ++i) {
    Bytes b = good;
    const int edits = 1 + int(rng() % 4);
    for (int j = 0; j < edits; ++j) b[rng() % b.size()] = uint8_t(rng() % 3 ? rng() : 0xFF);
    b.resize(rng() % (b.size() + 1));
    if (const Result<JpegMarkerLayout> lay = walk_jpeg_markers(b); lay.ok()) {
      EXPECT_LE(size_t(lay->eoi) + 2, b.size());
      for (const auto& s : lay->scans) EXPECT_LE(s.end, lay->eoi);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The edge-case zoo (scripts/test.sh makes it; skipped when run without it).

TEST(EdgeZoo, TranscodesAsTheManifestSays) {
  const std::filesystem::path zoo = fid::testutil::test_data("edge");
  if (zoo.empty()) GTEST_SKIP() << "no $FIDELITYFS_TEST_DATA/edge (scripts/test.sh makes it)";
  const std::filesystem::path dir = zoo / "jpeg";
  std::map<std::string, std::string> expect;  // file name -> "progressive" | "reject-or-..."
  std::ifstream manifest(zoo / "MANIFEST.tsv");
  for (std::string line; std::getline(manifest, line);) {
    std::istringstream ls(line);
    std::string path, what;
    if (std::getline(ls, path, '\t') && std::getline(ls, what, '\t') && path.starts_with("jpeg/"))
      expect[path.substr(5)] = what;
  }
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".jpg") continue;
    std::ifstream f(e.path(), std::ios::binary);
    const Bytes b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string name = e.path().filename().string();
    for (LevelScripts scripts : {LevelScripts::pcr, LevelScripts::fast}) {
      const Result<ProgressiveJpeg> r = transcode_progressive(b, scripts);
      const std::string what = name + (scripts == LevelScripts::fast ? " (fast)" : " (pcr)");
      const auto it = expect.find(name);
      if (it != expect.end() && it->second == "progressive") {
        check_transcode(b, r, what);
      } else if (r.ok()) {
        check_transcode(b, r, what);  // accepted although not expected: must still be right
      } else {
        EXPECT_FALSE(r.error().message.empty()) << what;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(TranscodeRejects, DataAfterEoiIsNotDropped) {
  Bytes src = encode(spec("trailing", size(64, 48)));
  Bytes padded = src;
  padded.insert(padded.end(), 64, 0);
  EXPECT_TRUE(transcode_progressive(padded).ok()) << "zero padding after EOI carries nothing";
  Bytes appended = src;
  const char video[] = "....ftypmp42 appended motion-photo video";
  appended.insert(appended.end(), video, video + sizeof video);
  const Result<ProgressiveJpeg> r = transcode_progressive(appended);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("after the end of the image"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace fid::codec
