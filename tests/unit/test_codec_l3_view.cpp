// L3 payloads and views: round trip of every PIL mode, view size == rendered size for every mode
// and container, and the rendered containers decode back to the source pixels.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "codec/image_io.h"
#include "codec/l3.h"
#include "codec/l3_view.h"

using namespace fid::codec;

namespace {

SourceImage make_source(PilMode mode, uint32_t w, uint32_t h, uint32_t seed, size_t pal = 0, size_t alpha = 0) {
  SourceImage s;
  s.pil_mode = std::string(pil_mode_name(mode));
  s.image.width = w;
  s.image.height = h;
  s.image.channels = pil_mode_channels(mode);
  s.image.pixels.resize(size_t{w} * h * s.image.channels);
  std::mt19937 rng(seed);
  for (auto& p : s.image.pixels) {
    uint8_t v = static_cast<uint8_t>(rng());
    if (mode == PilMode::bilevel) v = (v & 1) ? 255 : 0;
    if (mode == PilMode::P) v = static_cast<uint8_t>(v % pal);
    p = v;
  }
  if (mode == PilMode::P) {
    s.palette_indices = true;
    for (size_t i = 0; i < 3 * pal; ++i) s.palette.push_back(static_cast<uint8_t>(rng()));
    for (size_t i = 0; i < alpha; ++i) s.palette_alpha.push_back(static_cast<uint8_t>(rng()));
  }
  s.bilevel = mode == PilMode::bilevel;
  return s;
}

struct Case {
  PilMode mode;
  uint32_t w, h;
  size_t pal, alpha;
};

const Case kCases[] = {
    {PilMode::bilevel, 13, 7, 0, 0}, {PilMode::bilevel, 16, 3, 0, 0}, {PilMode::L, 33, 17, 0, 0},
    {PilMode::P, 20, 9, 21, 0},      {PilMode::P, 5, 5, 256, 256},    {PilMode::P, 1, 1, 2, 1},
    {PilMode::LA, 31, 2, 0, 0},      {PilMode::RGB, 300, 230, 0, 0},  {PilMode::RGBA, 1, 67, 0, 0},
};

}  // namespace

TEST(L3View, PayloadRoundTripEveryMode) {
  for (const Case& c : kCases) {
    SourceImage s = make_source(c.mode, c.w, c.h, 7, c.pal, c.alpha);
    std::vector<uint8_t> payload = encode_l3_payload(s);
    L3Payload p;
    std::string err;
    ASSERT_TRUE(parse_l3_payload(payload, p, err)) << err;
    EXPECT_EQ(p.shape.mode, c.mode);
    EXPECT_EQ(p.shape.width, c.w);
    EXPECT_EQ(p.shape.height, c.h);
    EXPECT_EQ(p.shape.palette_entries, c.pal);
    EXPECT_EQ(p.shape.alpha_entries, c.alpha);
    EXPECT_TRUE(std::equal(p.palette.begin(), p.palette.end(), s.palette.begin(), s.palette.end()));
    EXPECT_TRUE(std::equal(p.palette_alpha.begin(), p.palette_alpha.end(), s.palette_alpha.begin(), s.palette_alpha.end()));
    Image out;
    ASSERT_TRUE(l3_decode(p.l3, out, err)) << err;
    EXPECT_EQ(out.pixels, s.image.pixels);
    L3Shape back;
    ASSERT_TRUE(shape_from_code(shape_code(p.shape), c.w, c.h, back));
    EXPECT_EQ(shape_code(back), shape_code(p.shape));
  }
}

TEST(L3View, ViewSizeEqualsRenderedSizeAndPixelsRoundTrip) {
  for (const Case& c : kCases) {
    SourceImage s = make_source(c.mode, c.w, c.h, 11, c.pal, c.alpha);
    std::vector<uint8_t> payload = encode_l3_payload(s);
    L3Payload p;
    std::string err;
    ASSERT_TRUE(parse_l3_payload(payload, p, err)) << err;
    for (ViewFormat f : {ViewFormat::png, ViewFormat::ppm, ViewFormat::npy}) {
      bool ok = false;
      std::vector<uint8_t> view = render_l3_view(payload, f, err, &ok);
      ASSERT_TRUE(ok) << err;
      EXPECT_EQ(view.size(), l3_view_size(p.shape, f)) << pil_mode_name(c.mode) << " " << view_format_name(f);
      ViewFormat eff = effective_view_format(p.shape, f);
      if (eff == ViewFormat::png) {  // decodes (libspng) back to the source
        SourceImage d;
        ASSERT_TRUE(decode_png(view, d, err)) << err;
        EXPECT_EQ(d.pil_mode, s.pil_mode);
        EXPECT_EQ(d.image.pixels, s.image.pixels);
        EXPECT_EQ(d.palette, s.palette);
        EXPECT_EQ(d.palette_alpha, s.palette_alpha);
      } else if (eff == ViewFormat::ppm) {
        SourceImage d;
        ASSERT_TRUE(decode_pnm(view, d, err)) << err;
        EXPECT_EQ(d.image.pixels, s.image.pixels);
      } else {
        auto head = npy_header(c.w, c.h, s.image.channels);
        ASSERT_EQ(view.size(), head.size() + s.image.pixels.size());
        EXPECT_TRUE(std::equal(head.begin(), head.end(), view.begin()));
        EXPECT_TRUE(std::equal(s.image.pixels.begin(), s.image.pixels.end(), view.begin() + static_cast<long>(head.size())));
      }
    }
  }
}

TEST(L3View, PpmFallsBackToPngForAlpha) {
  L3Shape la{4, 4, PilMode::LA, 0, 0}, rgba{4, 4, PilMode::RGBA, 0, 0}, l{4, 4, PilMode::L, 0, 0};
  EXPECT_EQ(effective_view_format(la, ViewFormat::ppm), ViewFormat::png);
  EXPECT_EQ(effective_view_format(rgba, ViewFormat::ppm), ViewFormat::png);
  EXPECT_EQ(view_extension(l, ViewFormat::ppm), ".pgm");
  EXPECT_EQ(view_extension(rgba, ViewFormat::ppm), ".png");
}

TEST(L3View, RejectsBadPayloads) {
  SourceImage s = make_source(PilMode::P, 8, 8, 1, 4, 2);
  std::vector<uint8_t> payload = encode_l3_payload(s);
  L3Payload p;
  std::string err;
  for (size_t n = 0; n < payload.size(); n += 3) {  // every truncation fails cleanly
    std::vector<uint8_t> cut(payload.begin(), payload.begin() + static_cast<long>(n));
    EXPECT_FALSE(parse_l3_payload(cut, p, err) && [&] {
      std::vector<uint8_t> out(l3_view_size(p.shape, ViewFormat::png));
      return render_l3_view(p, ViewFormat::png, out, err);
    }());
  }
  auto bad = payload;
  bad[4] = 9;  // unknown mode
  EXPECT_FALSE(parse_l3_payload(bad, p, err));
  bad = payload;
  bad[6] = 0;  // P without a palette
  bad[7] = 0;
  EXPECT_FALSE(parse_l3_payload(bad, p, err));
  L3Shape sh;
  EXPECT_FALSE(shape_from_code(2, 4, 4, sh));          // P with 0 entries
  EXPECT_FALSE(shape_from_code(1 | 5u << 8, 4, 4, sh));  // L with a palette
}
