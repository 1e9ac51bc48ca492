// L3 codec and source-image readers/writers. Synthetic images only; real photos are used
// when present (skipped otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "codec/image_io.h"
#include "codec/l3.h"
#include "codec/l3_kernels.h"
#include "l3_test_images.h"
#include "test_files.h"
#include "test_result.h"

using namespace fid::codec;
using namespace fid::codec::testimg;
using fid::testutil::value_or_throw;

namespace {

void expect_round_trip(const Image& im, const L3Options& opt = {}) {
  auto enc = value_or_throw(l3_encode(im, opt));
  fid::Result<Image> decoded = l3_decode(enc);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message << " " << im.width << "x" << im.height << "x"
                            << int{im.channels};
  const Image& back = *decoded;
  EXPECT_EQ(back.width, im.width);
  EXPECT_EQ(back.height, im.height);
  EXPECT_EQ(back.channels, im.channels);
  ASSERT_EQ(back.pixels.size(), im.pixels.size());
  EXPECT_TRUE(back.pixels == im.pixels) << im.width << "x" << im.height << "x" << int{im.channels};
}

// What an encoded image with nibble codes uses (walks the bitstream, versions 1 and 2).
struct StreamUse {
  std::set<unsigned> codes;      // segment codes
  unsigned constant_patches = 0;  // v2
  unsigned covered_rows = 0;      // v2: rows inside copy runs
};
StreamUse stream_use(const std::vector<uint8_t>& enc) {
  StreamUse use;
  fid::Result<L3Info> probed = l3_probe(enc);
  if (!probed) return use;
  const L3Info& info = *probed;
  const uint8_t* p = enc.data() + info.header_bytes;
  const uint8_t* end = enc.data() + enc.size();
  for (uint32_t j = 0; j < info.patches_y; ++j)
    for (uint32_t i = 0; i < info.patches_x; ++i) {
      unsigned pw = std::min(info.patch_size, info.width - i * info.patch_size);
      unsigned ph = std::min(info.patch_size, info.height - j * info.patch_size);
      unsigned sl = info.segment_log2;
      if (info.version >= 2) {
        if ((*p & 15) == fid::l3k::kPatchConstant) {
          ++use.constant_patches;
          p += 1 + info.channels;
          continue;
        }
        sl = *p++ >> 4;
      }
      unsigned run[4] = {};
      for (unsigned r = 0; r < ph * info.channels; ++r) {
        if (run[r % info.channels] > 0) {
          --run[r % info.channels];
          ++use.covered_rows;
          continue;
        }
        unsigned mode = 0;
        unsigned nseg = fid::l3k::row_segments(pw, sl);
        uint8_t above[fid::l3k::kMaxSegments] = {}, row[fid::l3k::kMaxSegments];
        size_t hdr = fid::l3k::read_row_header(p, static_cast<size_t>(end - p), nseg, nullptr,
                                               above, &mode, row);
        if (!hdr) return use;
        if ((mode & 7) == fid::l3k::kPredCopy && info.version >= 2)
          hdr = fid::l3k::read_copy_run(p, static_cast<size_t>(end - p), &run[r % info.channels]);
        if ((mode & 7) != fid::l3k::kPredCopy) use.codes.insert(row, row + nseg);
        p += hdr + fid::l3k::row_body_size(row, pw, sl);
      }
    }
  return use;
}
std::set<unsigned> used_codes(const std::vector<uint8_t>& enc) { return stream_use(enc).codes; }

}  // namespace

// The portable unpacker (the decoder's path on CPUs without SSSE3; x86-64 CPUs here take the
// SIMD one) against the format's definition: sample i of a segment is bits [i*w, i*w + w) of
// its bytes, LSB first, plus the base, mod 256.
TEST(L3Codec, PortableUnpackMatchesTheFormat) {
  std::mt19937 rng(11);
  for (int round = 0; round < 400; ++round) {
    const auto sl = static_cast<unsigned>(3 + rng() % 4);
    const auto n = static_cast<unsigned>(1 + rng() % 300);
    const unsigned nseg = fid::l3k::row_segments(n, sl);
    std::vector<uint8_t> codes(nseg);
    for (auto& c : codes) c = static_cast<uint8_t>(rng() % 16);
    const size_t size = fid::l3k::row_body_size(codes.data(), n, sl);
    std::vector<uint8_t> body(size);
    for (auto& b : body) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> got(n);
    fid::l3k::unpack_row(body.data(), codes.data(), n, sl, got.data());

    size_t base_at = 0, data_at = 0;
    for (uint8_t c : codes) data_at += fid::l3k::code_has_base(c) ? 1 : 0;
    for (unsigned s = 0; s < nseg; ++s) {
      const unsigned w = fid::l3k::code_width(codes[s]);
      const unsigned base =
          fid::l3k::code_has_base(codes[s]) ? body[base_at++] : fid::l3k::implicit_base(w);
      const unsigned x0 = s << sl, cnt = std::min(1u << sl, n - x0);
      for (unsigned i = 0; i < cnt; ++i) {
        unsigned v = 0;
        for (unsigned b = 0; b < w; ++b) {
          const size_t bit = size_t{i} * w + b;
          v |= ((body[data_at + bit / 8] >> (bit % 8)) & 1u) << b;
        }
        ASSERT_EQ(got[x0 + i], static_cast<uint8_t>(v + base))
            << "round " << round << " S=" << (1u << sl) << " segment " << s << " sample " << i;
      }
      data_at += fid::l3k::packed_bytes(cnt, w);
    }
    EXPECT_EQ(data_at, size);
  }
}

TEST(L3Codec, RoundTripSizesAndChannels) {
  const std::pair<uint32_t, uint32_t> sizes[] = {{1, 1},   {1, 7},   {7, 1},   {1, 100}, {100, 1},
                                                 {2, 2},   {8, 8},   {9, 9},   {31, 33}, {32, 32},
                                                 {33, 31}, {64, 65}, {129, 65}, {200, 3}, {3, 200}};
  uint32_t seed = 1;
  for (auto [w, h] : sizes)
    for (uint8_t c = 1; c <= 4; ++c) {
      expect_round_trip(noise(w, h, c, seed++));
      expect_round_trip(smooth(w, h, c, seed++));
      expect_round_trip(noise(w, h, c, seed++, 4));
    }
}

TEST(L3Codec, RoundTripAllOptionCombinations) {
  Image im = smooth(150, 97, 3, 7);
  Image im4 = noise(45, 70, 4, 9, 16);
  for (uint32_t N : {1u, 5u, 8u, 32u, 64u, 128u, 1024u})
    for (uint8_t sl : {uint8_t{0}, uint8_t{3}, uint8_t{4}, uint8_t{5}, uint8_t{6}})
      for (bool inter : {false, true})
        for (bool cross : {false, true}) {
          L3Options o;
          o.patch_size = N;
          o.segment_log2 = sl;
          o.inter_patch_rows = inter;
          o.cross_channel = cross;
          expect_round_trip(im, o);
          expect_round_trip(im4, o);
        }
}

TEST(L3Codec, EachPredictorAlone) {
  Image im = smooth(77, 90, 3, 3);
  for (unsigned p = 0; p < fid::l3k::kNumPredictors; ++p)
    for (unsigned f = 0; f < fid::l3k::kNumFirstPredictors; ++f) {
      L3Options o;
      o.predictor_mask = 1u << p;
      o.first_row_mask = 1u << f;
      o.patch_size = 16;
      expect_round_trip(im, o);
      o.inter_patch_rows = true;
      expect_round_trip(im, o);
    }
}

TEST(L3Codec, ConstantImages) {
  for (uint8_t c = 1; c <= 4; ++c)
    for (int v : {0, 1, 127, 128, 255}) {
      Image im = make_image(300, 200, c);
      std::fill(im.pixels.begin(), im.pixels.end(), static_cast<uint8_t>(v));
      auto enc = value_or_throw(l3_encode(im));
      expect_round_trip(im);
      // A constant image costs about one nibble per segment and row, far below raw.
      EXPECT_LT(enc.size(), im.pixels.size() / 20);
    }
}

TEST(L3Codec, AllSegmentCodesExercised) {
  std::set<unsigned> all;
  uint32_t seed = 100;
  for (unsigned amp : {1u, 2u, 3u, 4u, 6u, 8u, 12u, 16u, 24u, 32u, 50u, 64u, 100u, 128u, 256u}) {
    for (int k = 0; k < 3; ++k) {
      Image im = noise(64, 64, 1, seed++, amp);
      // Offset the noise so explicit bases pay off too.
      for (auto& p : im.pixels) p = static_cast<uint8_t>(p + (k == 1 ? 100 : 0));
      L3Options o;
      o.predictor_mask = 1;  // top
      o.segment_log2 = 4;    // per-patch lengths would hide the zero segments of `half`
      o.entropy_codes = false;
      auto enc = value_or_throw(l3_encode(im, o));
      auto codes = used_codes(enc);
      all.insert(codes.begin(), codes.end());
      expect_round_trip(im, o);
    }
  }
  // Left quarter flat, the rest noise: zero segments inside coded rows (code 0).
  Image half = noise(64, 64, 1, 999, 64);
  for (uint32_t y = 0; y < 64; ++y) std::memset(&half.pixels[y * 64], 50, 16);
  {
    L3Options o;
    o.predictor_mask = 1;
    o.segment_log2 = 4;
    o.entropy_codes = false;
    auto codes = used_codes(value_or_throw(l3_encode(half, o)));
    all.insert(codes.begin(), codes.end());
    expect_round_trip(half, o);
  }
  // Constant rows with a non-zero step (explicit base, width 0).
  Image ramp = make_image(64, 64, 1);
  for (uint32_t y = 0; y < 64; ++y)
    for (uint32_t x = 0; x < 64; ++x) ramp.pixels[y * 64 + x] = static_cast<uint8_t>(y * 7);
  L3Options o;
  o.predictor_mask = 1;
  o.segment_log2 = 4;
  o.entropy_codes = false;
  auto codes = used_codes(value_or_throw(l3_encode(ramp, o)));
  all.insert(codes.begin(), codes.end());
  for (unsigned w = 0; w <= 8; ++w) EXPECT_TRUE(all.count(w)) << "implicit width " << w;
  for (unsigned w = 0; w <= 6; ++w) EXPECT_TRUE(all.count(9 + w)) << "explicit width " << w;
}

TEST(L3Codec, EntropyCodedSegmentCodes) {
  Image im = smooth(640, 480, 3, 21);
  L3Options nib;
  nib.entropy_codes = false;
  auto a = value_or_throw(l3_encode(im)), b = value_or_throw(l3_encode(im, nib));
  const L3Info ia = value_or_throw(l3_probe(a)), ib = value_or_throw(l3_probe(b));
  EXPECT_EQ(ia.flags & 2, 2) << "Huffman segment codes chosen for a large image";
  EXPECT_EQ(ib.flags & 2, 0);
  EXPECT_LT(a.size(), b.size());
  expect_round_trip(im);
  expect_round_trip(im, nib);
  Image im4 = smooth(300, 200, 4, 22);
  for (uint32_t N : {3u, 16u, 64u, 1024u})
    for (bool inter : {false, true})
      for (uint8_t sl : {uint8_t{3}, uint8_t{6}}) {
        L3Options o;
        o.patch_size = N;
        o.inter_patch_rows = inter;
        o.segment_log2 = sl;
        o.entropy_codes = 2;  // N=3 would not choose them by itself
        auto enc = value_or_throw(l3_encode(im4, o));
        const L3Info info = value_or_throw(l3_probe(enc));
        EXPECT_EQ(info.flags & 2, 2) << N;
        expect_round_trip(im4, o);
      }
  // Tiny images keep nibbles (the 128-byte table would not pay off).
  Image tiny = smooth(8, 8, 1, 1);
  auto t = value_or_throw(l3_encode(tiny));
  EXPECT_EQ(value_or_throw(l3_probe(t)).flags & 2, 0);
  L3Options force;
  force.entropy_codes = 2;
  for (uint32_t w : {1u, 5u, 17u}) {
    Image small = noise(w, 3, 3, w, 8);
    auto f = value_or_throw(l3_encode(small, force));
    EXPECT_EQ(value_or_throw(l3_probe(f)).flags & 2, 2);
    expect_round_trip(small, force);
  }
  // An over-subscribed table is rejected: all 16 symbols of context 0 with length 1.
  auto bad = a;
  for (size_t i = 24; i < 24 + 8; ++i) bad[i] = 0x11;
  EXPECT_FALSE(l3_decode(bad).ok());
}

TEST(L3Codec, LargeImage) {
  expect_round_trip(smooth(1920, 1080, 3, 11));
  expect_round_trip(noise(2049, 1031, 4, 12, 32));
}

TEST(L3Codec, StrideView) {
  Image big = smooth(100, 50, 3, 5);
  ImageView v(60, 50, 3, big.pixels.data() + 3 * 20, big.row_bytes());
  auto enc = value_or_throw(l3_encode(v));
  const Image back = value_or_throw(l3_decode(enc));
  for (uint32_t y = 0; y < 50; ++y)
    EXPECT_EQ(0, std::memcmp(back.pixels.data() + y * 180, big.pixels.data() + y * 300 + 60, 180));
}

// An encode that must fail as invalid input (EINVAL).
void expect_invalid(const fid::Result<std::vector<uint8_t>>& encoded, const char* what) {
  ASSERT_FALSE(encoded.ok()) << what;
  EXPECT_EQ(encoded.error().code, EINVAL) << what;
  EXPECT_FALSE(encoded.error().message.empty()) << what;
}

TEST(L3Codec, EncoderRejectsBadInput) {
  Image im = make_image(4, 4, 5);
  expect_invalid(l3_encode(im), "5 channels");
  Image zero = make_image(0, 4, 1);
  expect_invalid(l3_encode(zero), "width 0");
  Image ok = noise(4, 4, 1, 1);
  L3Options o;
  o.patch_size = 2000;
  expect_invalid(l3_encode(ok, o), "patch size 2000");
  o = {};
  o.segment_log2 = 7;
  expect_invalid(l3_encode(ok, o), "segment_log2 7");
  o = {};
  o.predictor_mask = 0;
  expect_invalid(l3_encode(ok, o), "no predictor");
  o = {};
  o.first_row_mask = 0;
  expect_invalid(l3_encode(ok, o), "no first-row predictor");
  o = {};
  o.version = 3;
  expect_invalid(l3_encode(ok, o), "version 3");
  o = {};
  o.segment_mask = 0x7;
  expect_invalid(l3_encode(ok, o), "no segment length in the mask");
}

TEST(L3Codec, ProbeAndDecodeInto) {
  Image im = smooth(70, 40, 2, 1);
  auto enc = value_or_throw(l3_encode(im));
  const L3Info info = value_or_throw(l3_probe(enc));
  EXPECT_EQ(info.width, 70u);
  EXPECT_EQ(info.height, 40u);
  EXPECT_EQ(info.channels, 2);
  EXPECT_EQ(info.raw_bytes(), im.pixels.size());
  EXPECT_EQ(info.header_bytes + info.data_bytes, enc.size());
  std::vector<uint8_t> buf(info.raw_bytes());
  fid::Status decoded = l3_decode_into(enc, buf);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(buf, im.pixels);
  std::vector<uint8_t> small(info.raw_bytes() - 1);
  EXPECT_FALSE(l3_decode_into(enc, small).ok());
  EXPECT_TRUE(looks_like_l3(enc));
}

TEST(L3Codec, DecoderRejectsTruncationAndHeaderCorruption) {
  Image im = smooth(90, 70, 3, 2);
  L3Options o;
  o.patch_size = 32;
  auto enc = value_or_throw(l3_encode(im, o));
  for (size_t n = 0; n < enc.size(); n += (n < 200 ? 1 : 97)) {
    std::vector<uint8_t> t(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_FALSE(l3_decode(t).ok()) << n;
  }
  auto extended = enc;
  extended.push_back(0);
  EXPECT_FALSE(l3_decode(extended).ok());
  // Every single-byte change of the fixed header and offset table is rejected or, if it only
  // changes patch offsets into other valid ones, still never crashes.
  const L3Info info = value_or_throw(l3_probe(enc));
  for (size_t i = 0; i < info.header_bytes; ++i)
    for (uint8_t x : {uint8_t{1}, uint8_t{0x80}, uint8_t{0xFF}}) {
      auto bad = enc;
      bad[i] ^= x;
      bool ok = l3_decode(bad).ok();
      if (i < 24 && i != 7) {  // flags bits 0/1 may give another decodable stream
        EXPECT_FALSE(ok) << "header byte " << i;
      }
    }
  auto bad = enc;
  bad[4] = 3;
  fid::Result<Image> decoded = l3_decode(bad);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.error().message.find("version"), std::string::npos);
}

TEST(L3Codec, DecoderSurvivesRandomCorruption) {
  Image im = smooth(100, 80, 4, 3);
  auto enc = value_or_throw(l3_encode(im));
  const L3Info info = value_or_throw(l3_probe(enc));
  std::mt19937 rng(42);
  int rejected = 0;
  for (int t = 0; t < 2000; ++t) {
    auto bad = enc;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f)
      bad[info.header_bytes + rng() % info.data_bytes] ^= static_cast<uint8_t>(1u << (rng() % 8));
    if (!l3_decode(bad).ok()) ++rejected;
  }
  // Many corruptions change row sizes and are caught; the rest decode to other pixels (L3 has
  // no checksum of its own: the store checksums its records).
  EXPECT_GT(rejected, 100);
}

TEST(L3Codec, DecoderRejectsInvalidModes) {
  // 1x1 gray, one patch, one row: (v2: patch header byte), header nibble byte + (no data for
  // code 0).
  Image im = make_image(1, 1, 1);
  im.pixels[0] = 128;
  for (uint8_t version : {uint8_t{1}, uint8_t{2}}) {
    L3Options o;
    o.version = version;
    o.constant_patches = false;
    auto enc = value_or_throw(l3_encode(im, o));
    fid::Result<Image> decoded = l3_decode(enc);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    const L3Info info = value_or_throw(l3_probe(enc));
    const size_t row = info.header_bytes + (version == 2 ? 1 : 0);
    auto bad = enc;
    bad[row] = static_cast<uint8_t>((bad[row] & 0xF0) | 2);  // first row: pred 2
    EXPECT_FALSE(l3_decode(bad).ok());
    bad[row] = static_cast<uint8_t>((bad[row] & 0xF0) | 8);  // cross on plane 0
    EXPECT_FALSE(l3_decode(bad).ok());
  }
}

// Version 2's patch header and copy runs: what a decoder must reject (docs/L3_FORMAT.md 5).
TEST(L3Codec, DecoderRejectsBadVersion2Patches) {
  Image flat = make_image(8, 8, 3);
  std::fill(flat.pixels.begin(), flat.pixels.end(), uint8_t{40});
  auto enc = value_or_throw(l3_encode(flat));
  const L3Info info = value_or_throw(l3_probe(enc));
  ASSERT_EQ(info.version, 2);
  ASSERT_EQ(enc.size(), info.header_bytes + 4u) << "one constant patch: kind byte + RGB";
  EXPECT_EQ(enc[info.header_bytes], fid::l3k::kPatchConstant);
  EXPECT_EQ(value_or_throw(l3_decode(enc)).pixels, flat.pixels);
  for (uint8_t b : {uint8_t{0x11}, uint8_t{0x02}, uint8_t{0x0F}, uint8_t{0x20}, uint8_t{0x70}}) {
    auto bad = enc;  // constant with a non-zero high nibble, unknown kinds, coded with S = 2^2, 2^7
    bad[info.header_bytes] = b;
    EXPECT_FALSE(l3_decode(bad).ok()) << int{b};
  }
  // A constant patch must be exactly 1 + C bytes.
  auto longer = enc;
  longer.push_back(0);
  longer[20] = static_cast<uint8_t>(longer[20] + 1);
  EXPECT_FALSE(l3_decode(longer).ok());
  // Version 2 keeps byte 6 (the image's segment length in version 1) at 0.
  auto seg = enc;
  seg[6] = 4;
  EXPECT_FALSE(l3_decode(seg).ok());

  // Rows 1..5 copy row 0: one copy row with a run of 4 after row 1. A longer run would pass the
  // patch's last row.
  Image rows = smooth(16, 6, 1, 3);
  for (uint32_t y = 1; y < 6; ++y) std::memcpy(&rows.pixels[y * 16], &rows.pixels[0], 16);
  L3Options o;
  o.entropy_codes = 0;
  o.segment_log2 = 4;
  auto r = value_or_throw(l3_encode(rows, o));
  EXPECT_EQ(value_or_throw(l3_decode(r)).pixels, rows.pixels);
  EXPECT_EQ(stream_use(r).covered_rows, 4u);
  ASSERT_EQ(r.back(), (4u << 4) | fid::l3k::kPredCopy) << "the copy row with its run is last";
  auto past = r;
  past.back() = static_cast<uint8_t>((5u << 4) | fid::l3k::kPredCopy);
  EXPECT_FALSE(l3_decode(past).ok());
  auto shorter = r;
  shorter.back() = fid::l3k::kPredCopy;  // run 0: rows 2..5 are then missing from the patch
  EXPECT_FALSE(l3_decode(shorter).ok());
}

// Streams of version 1 still decode, with every option the version 1 encoder had.
TEST(L3Codec, Version1StreamsStillDecode) {
  Image im = smooth(70, 45, 3, 17);
  Image im4 = noise(33, 20, 4, 18, 8);
  for (uint8_t sl : {uint8_t{0}, uint8_t{3}, uint8_t{6}})
    for (uint8_t entropy : {uint8_t{0}, uint8_t{2}})
      for (bool inter : {false, true}) {
        L3Options o;
        o.version = 1;
        o.patch_size = 16;
        o.segment_log2 = sl;
        o.entropy_codes = entropy;
        o.inter_patch_rows = inter;
        auto enc = value_or_throw(l3_encode(im, o));
        EXPECT_EQ(value_or_throw(l3_probe(enc)).version, 1);
        expect_round_trip(im, o);
        expect_round_trip(im4, o);
      }
}

// Graphics-like content: flat areas become constant patches and copy runs, and version 2 is
// smaller than version 1 on them.
TEST(L3Codec, Version2ToolsOnFlatContent) {
  Image im = make_image(200, 150, 4);
  for (uint32_t y = 0; y < 150; ++y)
    for (uint32_t x = 0; x < 200; ++x) {
      uint8_t* px = &im.pixels[(size_t{y} * 200 + x) * 4];
      const bool inside = x > 40 && x < 160 && y > 30 && y < 120;  // a gradient box on transparency
      px[0] = inside ? static_cast<uint8_t>(x) : 0;
      px[1] = inside ? static_cast<uint8_t>(x / 2 + 20) : 0;
      px[2] = inside ? 200 : 0;
      px[3] = inside ? 255 : 0;
    }
  L3Options v1;
  v1.version = 1;
  const auto a = value_or_throw(l3_encode(im, v1)), b = value_or_throw(l3_encode(im));
  const StreamUse use = stream_use(b);
  EXPECT_GT(use.constant_patches, 0u);
  EXPECT_GT(use.covered_rows, 0u);
  EXPECT_LT(b.size(), a.size());
  expect_round_trip(im);
  for (bool constant : {false, true})
    for (bool runs : {false, true}) {
      L3Options o;
      o.constant_patches = constant;
      o.copy_runs = runs;
      expect_round_trip(im, o);
    }
}

TEST(L3Codec, FhdPngsRoundTrip) {
  const std::filesystem::path dir = fid::testutil::test_data("fhd");
  if (dir.empty()) GTEST_SKIP() << "no $FIDELITYFS_TEST_DATA/fhd (scripts/test.sh makes it)";
  int n = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().extension() != ".png" || n >= 2) continue;
    fid::Result<SourceImage> d = decode_image(read_file(e.path()));
    ASSERT_TRUE(d.ok()) << d.error().message;
    expect_round_trip(d->image);
    ++n;
  }
  if (n == 0) GTEST_SKIP() << "no PNGs";
}

// ---- image_io ---------------------------------------------------------------------------------

TEST(ImageIo, StoredPngRoundTripsThroughLibspng) {
  for (uint8_t c = 1; c <= 4; ++c)
    for (auto [w, h] : {std::pair{1u, 1u}, {300u, 7u}, {23000u, 3u}, {5u, 1000u}}) {
      Image im = noise(w, h, c, w + h + c);
      auto png = encode_png_stored(im);
      EXPECT_EQ(png.size(), png_stored_size(w, h, c));
      fid::Result<SourceImage> d = decode_png(png);
      ASSERT_TRUE(d.ok()) << d.error().message;
      EXPECT_EQ(d->image.pixels, im.pixels);
      EXPECT_EQ(d->image.channels, c);
    }
}

TEST(ImageIo, PalettePngKeepsIndicesAndPalette) {
  Image im = noise(37, 11, 1, 5, 21);
  std::vector<uint8_t> pal(21 * 3), alpha = {0, 128, 255};
  for (size_t i = 0; i < pal.size(); ++i) pal[i] = static_cast<uint8_t>(i * 7);
  auto png = encode_png_stored(im, pal, alpha);
  EXPECT_EQ(png.size(), png_stored_size(37, 11, 1, 21, 3));
  fid::Result<SourceImage> decoded = decode_png(png);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  const SourceImage& d = *decoded;
  EXPECT_TRUE(d.palette_indices);
  EXPECT_EQ(d.pil_mode, "P");
  EXPECT_EQ(d.image.pixels, im.pixels);
  EXPECT_EQ(d.palette, pal);
  EXPECT_EQ(d.palette_alpha, alpha);
}

TEST(ImageIo, PnmAndNpyHeaders) {
  auto h = pnm_header(3, 2, 1);
  EXPECT_EQ(std::string(h.begin(), h.end()), "P5\n3 2\n255\n");
  h = pnm_header(3, 2, 4);
  EXPECT_EQ(std::string(h.begin(), h.end()),
            "P7\nWIDTH 3\nHEIGHT 2\nDEPTH 4\nMAXVAL 255\nTUPLTYPE RGB_ALPHA\nENDHDR\n");
  auto n = npy_header(640, 480, 3);
  EXPECT_EQ(n.size() % 64, 0u);
  std::string s(n.begin() + 10, n.end());
  EXPECT_NE(s.find("'shape': (480, 640, 3)"), std::string::npos);
  EXPECT_EQ(s.back(), '\n');
  n = npy_header(5, 4, 1);
  s.assign(n.begin() + 10, n.end());
  EXPECT_NE(s.find("'shape': (4, 5)"), std::string::npos);
}

TEST(ImageIo, PnmReaderScalesLikePil) {
  // Pillow 9.4: min(255, round(v / maxval * 255)), round half to even.
  std::string hdr = "P5\n# comment\n4 1\n100\n";
  std::vector<uint8_t> f(hdr.begin(), hdr.end());
  for (int v : {0, 50, 100, 200}) f.push_back(static_cast<uint8_t>(v));
  fid::Result<SourceImage> d = decode_pnm(f);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->image.pixels, (std::vector<uint8_t>{0, 128, 255, 255}));
  Image im = noise(5, 3, 3, 2);
  fid::Result<SourceImage> again = decode_pnm(encode_pnm(im));
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->image.pixels, im.pixels);
  auto trunc = encode_pnm(im);
  trunc.pop_back();
  EXPECT_FALSE(decode_pnm(trunc).ok());
}

TEST(ImageIo, BmpReader) {
  // 2x2, 24-bit bottom-up: rows padded to 8 bytes.
  std::vector<uint8_t> f(54 + 16, 0);
  f[0] = 'B';
  f[1] = 'M';
  f[10] = 54;
  f[14] = 40;
  f[18] = 2;
  f[22] = 2;
  f[26] = 1;
  f[28] = 24;
  const uint8_t bottom[6] = {1, 2, 3, 4, 5, 6}, top[6] = {7, 8, 9, 10, 11, 12};
  std::memcpy(&f[54], bottom, 6);
  std::memcpy(&f[62], top, 6);
  fid::Result<SourceImage> d = decode_bmp(f);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->image.pixels, (std::vector<uint8_t>{9, 8, 7, 12, 11, 10, 3, 2, 1, 6, 5, 4}));
  f.resize(60);
  EXPECT_FALSE(decode_bmp(f).ok());
}

TEST(ImageIo, RejectsGarbageWithoutCrashing) {
  std::mt19937 rng(1);
  Image im = noise(20, 20, 3, 1);
  auto png = encode_png_stored(im);
  for (int t = 0; t < 300; ++t) {
    auto bad = png;
    bad.resize(rng() % png.size());
    EXPECT_FALSE(decode_image(bad).ok());
  }
  std::vector<uint8_t> junk = {'P', '6', ' ', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9', '9'};
  EXPECT_FALSE(decode_image(junk).ok());
}

TEST(ImageIo, EdgeZooDecodesAndRoundTrips) {
  const std::filesystem::path dir = fid::testutil::test_data("edge");
  if (dir.empty()) GTEST_SKIP() << "no $FIDELITYFS_TEST_DATA/edge (scripts/test.sh makes it)";
  for (const char* name : {"png/rgb.png", "png/gray.png", "png/gray_alpha.png", "png/rgba.png",
                           "png/palette.png", "png/label_map.png", "png/bilevel.png",
                           "png/black.png", "png/noise.png", "png/size_1x1.png",
                           "png/size_31x1.png", "png/size_1x67.png", "png/size_129x65.png",
                           "other/bmp_rgb.bmp", "other/ppm_rgb.ppm"}) {
    fid::Result<SourceImage> d = decode_image(read_file(dir / name));
    ASSERT_TRUE(d.ok()) << name << ": " << d.error().message;
    expect_round_trip(d->image);
  }
  EXPECT_FALSE(decode_image(read_file(dir / "png/depth16.png")).ok());
  EXPECT_FALSE(decode_image(read_file(dir / "png/truncated.png")).ok());
}
