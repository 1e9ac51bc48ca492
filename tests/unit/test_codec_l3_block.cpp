// The L3 block decoder (codec/l3_block.h), run through its CPU emulation: it must give the CPU
// decoder's bytes exactly, and fail exactly when the CPU decoder fails, for every thread count
// and both thread orders inside a phase.
//   FIDELITYFS_TEST_DATA=DIR  also compares on the lossless files of DIR/edge and DIR/fhd
//   (scripts/test.sh makes the edge zoo and three 1920x1080 PNGs there).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>

#include "codec/image_io.h"
#include "codec/l3.h"
#include "codec/l3_block.h"
#include "codec/l3_block_plan.h"
#include "l3_test_images.h"
#include "test_files.h"
#include "test_result.h"

using namespace fid::codec;
using namespace fid::codec::testimg;
using fid::testutil::value_or_throw;
namespace l3k = fid::l3k;

namespace {

struct Variant {
  unsigned threads;
  bool reverse;
};
// 32: a warp; 256: what the GPU launches; 7: no relation to any patch or segment size.
constexpr Variant kAllVariants[] = {{32, false}, {32, true}, {256, false},
                                    {256, true}, {7, false}, {7, true}};

bool cpu_decode(const std::vector<uint8_t>& enc, std::vector<uint8_t>& out) {
  fid::Result<L3Info> info = l3_probe(enc);
  if (!info) return false;
  out.assign(info->raw_bytes(), 0);
  return l3_decode_into(enc, out).ok();
}

// Emulated decodes of enc under each variant must equal `expect` (the CPU decoder's output).
void expect_emulation_matches(const std::vector<uint8_t>& enc, const std::vector<uint8_t>& expect,
                              std::span<const Variant> variants, const std::string& what) {
  for (const Variant& v : variants) {
    std::vector<uint8_t> out(expect.size(), 0xA5);
    fid::Status decoded = l3_decode_emulated(enc, out, v.threads, v.reverse);
    ASSERT_TRUE(decoded.ok()) << what << " threads=" << v.threads << " reverse=" << v.reverse << ": "
                              << decoded.error().message;
    ASSERT_TRUE(out == expect) << what << " threads=" << v.threads << " reverse=" << v.reverse;
  }
}

// Like l3_decode_emulated, but each patch's bytes sit alone in an exact-size heap buffer, so
// the ASan build catches a read outside its patch, not only one outside the file.
bool decode_patches_isolated(const std::vector<uint8_t>& enc, std::vector<uint8_t>& out, Variant v) {
  L3BatchPlan plan;
  fid::Result<L3Info> info = l3_plan_image(enc, 0, 0, 0, 0, plan);
  if (!info) return false;
  out.assign(info->raw_bytes(), 0);
  int status = 0;
  L3BatchPlan one;
  one.tables = plan.tables;
  for (const auto& t : plan.tasks) {
    const auto at = enc.begin() + static_cast<std::ptrdiff_t>(t.in_offset);
    const std::vector<uint8_t> bytes(at, at + t.in_size);
    one.tasks = {t};
    one.tasks[0].in_offset = 0;
    l3_run_plan_emulated(one, bytes.data(), out.data(), &status, v.threads, v.reverse);
  }
  return status == 0;
}

// What a stream uses, walked with the shared kernels (to show the random images cover the
// format: every predictor with and without CROSS, copy rows, every segment code).
struct StreamStats {
  std::set<unsigned> modes;        // non-first rows: mode nibble
  std::set<unsigned> first_modes;  // first rows
  std::set<unsigned> codes;
  std::set<unsigned> seg_log2s;    // v2: per-patch segment lengths
  bool huff = false, nibbles = false;
  bool constant_patch = false, short_run = false, long_run = false;  // v2 tools

  void add(const std::vector<uint8_t>& enc) {
    L3BatchPlan plan;
    fid::Result<L3Info> planned = l3_plan_image(enc, 0, 0, 0, 0, plan);
    ASSERT_TRUE(planned.ok()) << planned.error().message;
    const L3Info& info = *planned;
    (info.flags & kL3FlagHuffCodes ? huff : nibbles) = true;
    for (const auto& t : plan.tasks) {
      const uint8_t* p = enc.data() + t.in_offset;
      const uint8_t* end = p + t.in_size;
      unsigned sl = t.seg_log2;
      if (t.version >= 2) {
        if ((*p & 15u) == l3k::kPatchConstant) {
          constant_patch = true;
          continue;
        }
        sl = *p++ >> 4;
        seg_log2s.insert(sl);
      }
      const unsigned nseg = l3k::row_segments(t.pw, sl);
      uint8_t above[4][l3k::kMaxSegments] = {};
      unsigned run[4] = {};
      for (unsigned r = 0; r < t.ph * t.channels; ++r) {
        if (run[r % t.channels] > 0) {
          --run[r % t.channels];
          continue;
        }
        unsigned mode = 0;
        uint8_t* row = above[r % t.channels];
        size_t hdr = l3k::read_row_header(p, static_cast<size_t>(end - p), nseg,
                                          t.huff == l3k::kNoHuff ? nullptr : &plan.tables[t.huff],
                                          row, &mode, row);
        ASSERT_NE(hdr, 0u);
        if ((mode & 7) == l3k::kPredCopy && t.version >= 2) {
          hdr = l3k::read_copy_run(p, static_cast<size_t>(end - p), &run[r % t.channels]);
          ASSERT_NE(hdr, 0u);
          (hdr == 2 ? long_run : short_run) |= run[r % t.channels] > 0;
        }
        (r < t.channels ? first_modes : modes).insert(mode);
        if ((mode & 7) != l3k::kPredCopy) codes.insert(row, row + nseg);
        p += hdr + l3k::row_body_size(row, t.pw, sl);
      }
    }
  }
};

// Random content of a few kinds, so that every predictor and segment code gets chosen.
Image random_content(uint32_t w, uint32_t h, uint8_t c, std::mt19937& rng) {
  const auto seed = static_cast<uint32_t>(rng());
  switch (rng() % 6) {
    case 0: return smooth(w, h, c, seed);
    case 1: return noise(w, h, c, seed);  // full-range noise: 8-bit segments
    case 2: {  // low-amplitude noise around an offset: small widths, explicit bases
      Image im = noise(w, h, c, seed, 1u << (rng() % 7));
      const auto off = static_cast<uint8_t>(rng());
      for (auto& p : im.pixels) p = static_cast<uint8_t>(p + off);
      return im;
    }
    case 3: {  // vertical structure: rows repeat (copy rows), sometimes shifted by a constant
      Image im = smooth(w, 1, c, seed);
      Image out = make_image(w, h, c);
      for (uint32_t y = 0; y < h; ++y) {
        const auto step = static_cast<uint8_t>(rng() % 3 == 0 ? rng() % 8 : 0);
        for (size_t i = 0; i < im.pixels.size(); ++i)
          out.pixels[y * im.pixels.size() + i] = static_cast<uint8_t>(im.pixels[i] + step * y);
      }
      return out;
    }
    case 4: {  // diagonal edges and flat areas (diag/median/paeth/grad territory)
      Image im = make_image(w, h, c);
      for (uint32_t y = 0; y < h; ++y)
        for (uint32_t x = 0; x < w; ++x)
          for (uint8_t k = 0; k < c; ++k)
            im.pixels[(size_t{y} * w + x) * c + k] =
                static_cast<uint8_t>(((x + 2 * y) / 5 % 2 ? 200 : 30) + 3 * y + k * (x % 7));
      return im;
    }
    default: {  // smooth with a block of noise and a flat block
      Image im = smooth(w, h, c, seed);
      for (uint32_t y = 0; y < h; ++y)
        for (uint32_t x = 0; x < w; ++x)
          for (uint8_t k = 0; k < c; ++k) {
            uint8_t& p = im.pixels[(size_t{y} * w + x) * c + k];
            if (x < w / 3) p = static_cast<uint8_t>(rng());
            else if (y < h / 3) p = 77;
          }
      return im;
    }
  }
}

std::vector<std::filesystem::path> lossless_files(const std::vector<std::filesystem::path>& dirs) {
  std::vector<std::filesystem::path> files;
  for (const auto& dir : dirs) {
    if (dir.empty()) continue;
    for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (ext == ".png" || ext == ".bmp" || ext == ".ppm" || ext == ".pgm" || ext == ".pnm")
        files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST(L3Block, SharedStateFitsStaticSharedMemory) {
  EXPECT_LE(sizeof(l3k::PatchShared), 48u * 1024);
  EXPECT_EQ(sizeof(l3k::PatchTask), 48u);  // plain data copied to the device as an array
}

TEST(L3Block, RandomImagesMatchCpuDecoder) {
  const std::pair<uint32_t, uint32_t> sizes[] = {{1, 1},   {1, 13},  {13, 1},  {1, 300}, {300, 1},
                                                 {2, 2},   {9, 9},   {31, 33}, {33, 31}, {64, 65},
                                                 {100, 37}, {129, 65}, {257, 70}, {70, 257}};
  const uint32_t patch_sizes[] = {1, 7, 32, 64, 256, 1024};
  std::mt19937 rng(7);
  StreamStats stats;
  int images = 0;
  for (int i = 0; i < 240; ++i) {
    auto [w, h] = sizes[i % std::size(sizes)];
    const auto c = static_cast<uint8_t>(1 + (i / 3) % 4);
    L3Options o;
    o.patch_size = patch_sizes[(i / 2) % std::size(patch_sizes)];
    if (o.patch_size == 1 && w * h > 4000) o.patch_size = 3;  // 1x1 patches: keep it quick
    o.version = static_cast<uint8_t>(i % 4 == 0 ? 1 : 2);
    o.segment_log2 = static_cast<uint8_t>(3 + rng() % 4);
    if (o.version == 2 && rng() % 2) {  // per-patch segment lengths
      o.segment_log2 = 0;
      o.segment_mask = static_cast<uint8_t>(((rng() % 15) + 1) << 3);
    }
    o.constant_patches = rng() % 4 != 0;
    o.copy_runs = rng() % 4 != 0;
    o.entropy_codes = static_cast<uint8_t>(rng() % 3);
    o.copy_rows = rng() % 4 != 0;
    o.cross_channel = rng() % 4 != 0;
    o.explicit_bases = rng() % 4 != 0;
    if (rng() % 5 == 0) o.predictor_mask = 1u << (rng() % 6);  // rows with a rarer predictor
    if (rng() % 5 == 0) o.first_row_mask = 1u << (rng() % 2);
    Image im = random_content(w, h, c, rng);
    auto enc = value_or_throw(l3_encode(im, o));
    std::vector<uint8_t> expect;
    ASSERT_TRUE(cpu_decode(enc, expect));
    ASSERT_TRUE(expect == im.pixels);
    std::ostringstream what;
    what << "image " << i << " " << w << "x" << h << "x" << int{c} << " N=" << o.patch_size
         << " S=" << int{o.segment_log2} << " entropy=" << int{o.entropy_codes};
    expect_emulation_matches(enc, expect, kAllVariants, what.str());
    stats.add(enc);
    ++images;
  }
  // The streams exercised every part of the format.
  for (unsigned p = 0; p < l3k::kNumPredictors; ++p) {
    EXPECT_TRUE(stats.modes.count(p)) << "predictor " << p;
    EXPECT_TRUE(stats.modes.count(p | l3k::kModeCross)) << "predictor " << p << " + cross";
  }
  EXPECT_TRUE(stats.modes.count(l3k::kPredCopy));
  EXPECT_TRUE(stats.modes.count(l3k::kPredCopy | l3k::kModeCross));
  for (unsigned f = 0; f < l3k::kNumFirstPredictors; ++f) {
    EXPECT_TRUE(stats.first_modes.count(f)) << "first row predictor " << f;
    EXPECT_TRUE(stats.first_modes.count(f | l3k::kModeCross)) << "first row predictor " << f;
  }
  for (unsigned code = 0; code < 16; ++code) EXPECT_TRUE(stats.codes.count(code)) << "code " << code;
  EXPECT_TRUE(stats.huff);
  EXPECT_TRUE(stats.nibbles);
  EXPECT_TRUE(stats.constant_patch);
  EXPECT_TRUE(stats.short_run);
  EXPECT_TRUE(stats.long_run);
  for (unsigned sl = l3k::kMinSegLog2; sl <= l3k::kMaxSegLog2; ++sl)
    EXPECT_TRUE(stats.seg_log2s.count(sl)) << "per-patch segment length " << sl;
  RecordProperty("images", images);
}

TEST(L3Block, BatchPlanOffsetsPitchAndStatus) {
  // Three images in one input buffer (gaps between them) decoded into one output buffer with
  // padded rows; their Huffman tables go to one table array.
  std::vector<Image> ims = {smooth(300, 200, 3, 1), noise(45, 70, 1, 2, 16), smooth(130, 90, 4, 3)};
  std::vector<L3Options> opts(3);
  opts[0].entropy_codes = 2;
  opts[1].entropy_codes = 0;
  opts[1].patch_size = 16;
  opts[2].entropy_codes = 2;
  opts[2].patch_size = 64;
  std::vector<std::vector<uint8_t>> encs, expects;
  std::vector<uint8_t> in(5, 0x11);
  std::vector<uint64_t> in_base, out_base;
  std::vector<uint32_t> pitch;
  uint64_t out_size = 3;
  L3BatchPlan plan;
  for (size_t i = 0; i < ims.size(); ++i) {
    encs.push_back(value_or_throw(l3_encode(ims[i], opts[i])));
    expects.emplace_back();
    ASSERT_TRUE(cpu_decode(encs[i], expects[i]));
    in_base.push_back(in.size());
    in.insert(in.end(), encs[i].begin(), encs[i].end());
    in.insert(in.end(), 7, 0x22);
    pitch.push_back(static_cast<uint32_t>(ims[i].row_bytes() + 5 * i));  // image 0: pitch 0
    out_base.push_back(out_size);
    out_size += uint64_t{pitch[i]} * ims[i].height + 9;
    fid::Result<L3Info> planned =
        l3_plan_image(encs[i], in_base[i], out_base[i], i == 0 ? 0 : pitch[i], static_cast<uint32_t>(i), plan);
    ASSERT_TRUE(planned.ok()) << planned.error().message;
  }
  EXPECT_EQ(plan.tables.size(), 32u);  // images 0 and 2 have Huffman codes
  auto run = [&](const std::vector<uint8_t>& input, std::vector<uint8_t>& out, std::vector<int>& status) {
    out.assign(out_size, 0xEE);
    status.assign(3, 0);
    l3_run_plan_emulated(plan, input.data(), out.data(), status.data(), 256, false);
  };
  auto image_ok = [&](const std::vector<uint8_t>& out, size_t i) {
    const size_t rb = ims[i].row_bytes();
    for (uint32_t y = 0; y < ims[i].height; ++y) {
      const uint8_t* row = out.data() + out_base[i] + uint64_t{y} * pitch[i];
      if (std::memcmp(row, expects[i].data() + y * rb, rb) != 0) return false;
      for (size_t b = rb; b < pitch[i]; ++b)
        if (row[b] != 0xEE) return false;  // row padding untouched
    }
    return true;
  };
  std::vector<uint8_t> out;
  std::vector<int> status;
  run(in, out, status);
  EXPECT_EQ(status, (std::vector<int>{0, 0, 0}));
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(image_ok(out, i)) << i;
  EXPECT_EQ(out[0], 0xEE);
  EXPECT_EQ(out.back(), 0xEE);

  // A corruption of image 1 that the CPU decoder rejects flags image 1 only.
  std::mt19937 rng(3);
  const L3Info info1 = value_or_throw(l3_probe(encs[1]));
  int flagged = 0;
  for (int t = 0; t < 50 && flagged < 5; ++t) {
    auto bad = encs[1];
    bad[info1.header_bytes + rng() % info1.data_bytes] ^= static_cast<uint8_t>(1 + rng() % 255);
    std::vector<uint8_t> cpu_out;
    if (cpu_decode(bad, cpu_out)) continue;
    auto input = in;
    std::copy(bad.begin(), bad.end(), input.begin() + static_cast<std::ptrdiff_t>(in_base[1]));
    run(input, out, status);
    EXPECT_EQ(status[0], 0);
    EXPECT_NE(status[1], 0);
    EXPECT_EQ(status[2], 0);
    EXPECT_TRUE(image_ok(out, 0));
    EXPECT_TRUE(image_ok(out, 2));
    ++flagged;
  }
  EXPECT_EQ(flagged, 5);

  // Not plannable: INTER_PATCH, a pitch below the row size, a bad header; the plan is unchanged.
  const size_t ntasks = plan.tasks.size(), ntables = plan.tables.size();
  L3Options inter;
  inter.inter_patch_rows = true;
  inter.entropy_codes = 2;
  fid::Result<L3Info> planned = l3_plan_image(value_or_throw(l3_encode(ims[0], inter)), 0, 0, 0, 3, plan);
  ASSERT_FALSE(planned.ok());
  EXPECT_NE(planned.error().message.find("INTER_PATCH"), std::string::npos);
  EXPECT_FALSE(l3_plan_image(encs[0], 0, 0, 899, 3, plan).ok());
  auto bad = encs[0];
  bad[5] = 5;
  EXPECT_FALSE(l3_plan_image(bad, 0, 0, 0, 3, plan).ok());
  EXPECT_EQ(plan.tasks.size(), ntasks);
  EXPECT_EQ(plan.tables.size(), ntables);
  std::vector<uint8_t> pix(ims[0].pixels.size());
  EXPECT_FALSE(l3_decode_emulated(value_or_throw(l3_encode(ims[0], inter)), pix, 256, false).ok());
  plan.clear();
  EXPECT_TRUE(plan.tasks.empty() && plan.tables.empty());
}

// Mutations and truncations: the emulation fails exactly when the CPU decoder fails, and gives
// its bytes when both succeed. Buffers are exact-size copies (and each patch alone in one for
// the isolated run), so the ASan build catches any access outside the file or the patch.
TEST(L3Block, CorruptInputFailsLikeCpuDecoder) {
  struct Case {
    Image im;
    L3Options opt;
  };
  std::vector<Case> cases(7);
  cases[0].im = smooth(100, 80, 4, 3);
  cases[1].im = smooth(70, 50, 3, 4);
  cases[1].opt.entropy_codes = 2;
  cases[1].opt.patch_size = 16;
  cases[2].im = noise(40, 30, 1, 5, 8);
  cases[2].opt.patch_size = 7;
  cases[2].opt.segment_log2 = 3;
  cases[3].im = smooth(64, 64, 2, 6);
  cases[3].opt.patch_size = 64;
  cases[3].opt.segment_log2 = 6;
  cases[3].opt.entropy_codes = 2;
  cases[4].im = smooth(33, 20, 3, 7);  // flat rows: copy rows
  for (uint32_t y = 5; y < 20; ++y)
    std::memcpy(&cases[4].im.pixels[y * 99], &cases[4].im.pixels[4 * 99], 99);
  cases[4].opt.patch_size = 32;
  cases[5] = cases[4];
  cases[5].opt.version = 1;
  cases[5].opt.segment_log2 = 4;
  // Version 2's tools: constant patches (flat left half), copy runs over 15 rows (flat rows).
  cases[6].im = smooth(48, 40, 3, 8);
  for (uint32_t y = 0; y < 40; ++y) {
    for (uint32_t x = 0; x < 16; ++x) std::memset(&cases[6].im.pixels[(y * 48 + x) * 3], 9, 3);
    if (y > 2) std::memcpy(&cases[6].im.pixels[y * 144], &cases[6].im.pixels[2 * 144], 144);
  }
  cases[6].opt.patch_size = 16;
  cases[6].opt.entropy_codes = 2;
  std::mt19937 rng(11);
  int both_fail = 0, both_ok = 0, n = 0;
  auto check = [&](const std::vector<uint8_t>& bad) {
    std::vector<uint8_t> cpu_out;
    const bool cpu_ok = cpu_decode(bad, cpu_out);
    const fid::Result<L3Info> probed = l3_probe(bad);
    if (probed && (probed->flags & kL3FlagInterPatch)) return;  // a flipped flag: not on this path
    std::vector<uint8_t> emu_out(probed ? probed->raw_bytes() : 0);
    const Variant v = kAllVariants[n++ % std::size(kAllVariants)];
    const bool emu_ok = l3_decode_emulated(bad, emu_out, v.threads, v.reverse).ok();
    ASSERT_EQ(cpu_ok, emu_ok) << "threads " << v.threads;
    std::vector<uint8_t> iso_out;
    ASSERT_EQ(cpu_ok, decode_patches_isolated(bad, iso_out, v)) << "threads " << v.threads;
    if (cpu_ok) {
      ASSERT_TRUE(cpu_out == emu_out);
      ASSERT_TRUE(cpu_out == iso_out);
      ++both_ok;
    } else {
      ++both_fail;
    }
  };
  for (const Case& cs : cases) {
    const auto enc = value_or_throw(l3_encode(cs.im, cs.opt));
    const L3Info info = value_or_throw(l3_probe(enc));
    for (int t = 0; t < 600; ++t) {
      std::vector<uint8_t> bad(enc);
      // Mostly patch data; sometimes the header, code table or offsets.
      const size_t at = rng() % 8 ? info.header_bytes + rng() % info.data_bytes : rng() % info.header_bytes;
      bad[at] = rng() % 2 ? static_cast<uint8_t>(bad[at] ^ (1u << (rng() % 8))) : static_cast<uint8_t>(rng());
      check(bad);
    }
    // Shorter or longer data sections, header and offsets kept consistent (D updated, offsets
    // clamped): rows run past their patch, or patches have bytes left over.
    for (int t = 0; t < 150; ++t) {
      const size_t cut = 1 + rng() % std::min<size_t>(info.data_bytes, 300);
      const bool grow = t % 3 == 0;
      std::vector<uint8_t> bad(enc.begin(), enc.end() - (grow ? 0 : static_cast<std::ptrdiff_t>(cut)));
      if (grow) bad.insert(bad.end(), cut, static_cast<uint8_t>(rng()));
      const uint32_t d = static_cast<uint32_t>(bad.size() - info.header_bytes);
      for (int b = 0; b < 4; ++b) bad[20 + b] = static_cast<uint8_t>(d >> (8 * b));
      const size_t table = info.header_bytes - 4 * info.patches();
      for (size_t p = 0; p < info.patches(); ++p) {
        uint8_t* o = &bad[table + 4 * p];
        uint32_t v = uint32_t{o[0]} | uint32_t{o[1]} << 8 | uint32_t{o[2]} << 16 | uint32_t{o[3]} << 24;
        v = std::min(v, d);
        for (int b = 0; b < 4; ++b) o[b] = static_cast<uint8_t>(v >> (8 * b));
      }
      check(bad);
    }
    // Plain truncations (the size check rejects them).
    for (size_t len = 0; len < enc.size(); len += 1 + len / 4)
      check(std::vector<uint8_t>(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(len)));
  }
  EXPECT_GT(both_fail, 1000);
  EXPECT_GT(both_ok, 200);
  RecordProperty("rejected", both_fail);
  RecordProperty("decoded", both_ok);
}

// Lossless files (the edge zoo, FHD PNGs) from $FIDELITYFS_TEST_DATA, L3-encoded with default
// options.
TEST(L3Block, LosslessFilesMatchCpuDecoder) {
  const auto edge = fid::testutil::test_data("edge"), fhd = fid::testutil::test_data("fhd");
  if (edge.empty() && fhd.empty()) GTEST_SKIP() << "no $FIDELITYFS_TEST_DATA (scripts/test.sh makes it)";
  const auto files = lossless_files({edge, fhd});
  ASSERT_FALSE(files.empty()) << "no lossless images in " << edge << " " << fhd;
  int compared = 0, unreadable = 0;
  uint64_t samples = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& f : files) {
    fid::Result<SourceImage> decoded = decode_image(read_file(f));
    if (!decoded) {  // 16-bit or truncated members of the zoo
      ++unreadable;
      continue;
    }
    const SourceImage& src = *decoded;
    L3Options o;
    o.segment_log2 = 4;  // one encode per patch instead of three: encoding dominates this test
    auto enc = value_or_throw(l3_encode(src.image, o));
    std::vector<uint8_t> expect;
    ASSERT_TRUE(cpu_decode(enc, expect)) << f;
    ASSERT_TRUE(expect == src.image.pixels) << f;
    expect_emulation_matches(enc, expect, kAllVariants, f.string());  // (encoding dominates)
    ++compared;
    samples += expect.size();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ L3Block  ] " << compared << " images (" << samples << " samples) compared, "
            << unreadable << " unreadable skipped, " << secs << " s\n";
  RecordProperty("images", compared);
  EXPECT_GT(compared, 0);
}
