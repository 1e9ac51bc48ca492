// L3 payloads and views: round trip of every PIL mode, view size == rendered size for every mode
// and container, and the rendered containers decode back to the source pixels.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "codec/image_io.h"
#include "codec/l3.h"
#include "codec/l3_view.h"
#include "test_result.h"

using namespace fid::codec;
using fid::testutil::value_or_throw;

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
    std::vector<uint8_t> payload = value_or_throw(encode_l3_payload(s));
    fid::Result<L3Payload> parsed = parse_l3_payload(payload);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    const L3Payload& p = *parsed;
    EXPECT_EQ(p.shape.mode, c.mode);
    EXPECT_EQ(p.shape.width, c.w);
    EXPECT_EQ(p.shape.height, c.h);
    EXPECT_EQ(p.shape.palette_entries, c.pal);
    EXPECT_EQ(p.shape.alpha_entries, c.alpha);
    EXPECT_TRUE(std::equal(p.palette.begin(), p.palette.end(), s.palette.begin(), s.palette.end()));
    EXPECT_TRUE(std::equal(p.palette_alpha.begin(), p.palette_alpha.end(), s.palette_alpha.begin(), s.palette_alpha.end()));
    fid::Result<Image> out = l3_decode(p.l3);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(out->pixels, s.image.pixels);
    L3Shape back;
    ASSERT_TRUE(shape_from_code(shape_code(p.shape), c.w, c.h, back).ok());
    EXPECT_EQ(shape_code(back), shape_code(p.shape));
  }
}

TEST(L3View, ViewSizeEqualsRenderedSizeAndPixelsRoundTrip) {
  for (const Case& c : kCases) {
    SourceImage s = make_source(c.mode, c.w, c.h, 11, c.pal, c.alpha);
    std::vector<uint8_t> payload = value_or_throw(encode_l3_payload(s));
    fid::Result<L3Payload> parsed = parse_l3_payload(payload);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    const L3Payload& p = *parsed;
    for (ViewFormat f : {ViewFormat::png, ViewFormat::ppm, ViewFormat::npy}) {
      fid::Result<std::vector<uint8_t>> rendered = render_l3_view(payload, f);
      ASSERT_TRUE(rendered.ok()) << rendered.error().message;
      const std::vector<uint8_t>& view = *rendered;
      EXPECT_EQ(view.size(), l3_view_size(p.shape, f)) << pil_mode_name(c.mode) << " " << view_format_name(f);
      ViewFormat eff = effective_view_format(p.shape, f);
      if (eff == ViewFormat::png) {  // decodes (libspng) back to the source
        fid::Result<SourceImage> d = decode_png(view);
        ASSERT_TRUE(d.ok()) << d.error().message;
        EXPECT_EQ(d->pil_mode, s.pil_mode);
        EXPECT_EQ(d->image.pixels, s.image.pixels);
        EXPECT_EQ(d->palette, s.palette);
        EXPECT_EQ(d->palette_alpha, s.palette_alpha);
      } else if (eff == ViewFormat::ppm) {
        fid::Result<SourceImage> d = decode_pnm(view);
        ASSERT_TRUE(d.ok()) << d.error().message;
        EXPECT_EQ(d->image.pixels, s.image.pixels);
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
  std::vector<uint8_t> payload = value_or_throw(encode_l3_payload(s));
  for (size_t n = 0; n < payload.size(); n += 3) {  // every truncation fails cleanly
    std::vector<uint8_t> cut(payload.begin(), payload.begin() + static_cast<long>(n));
    fid::Result<L3Payload> p = parse_l3_payload(cut);
    EXPECT_FALSE(p.ok() && [&] {
      std::vector<uint8_t> out(l3_view_size(p->shape, ViewFormat::png));
      return render_l3_view(*p, ViewFormat::png, out).ok();
    }());
  }
  auto bad = payload;
  bad[4] = 9;  // unknown mode
  EXPECT_FALSE(parse_l3_payload(bad).ok());
  bad = payload;
  bad[6] = 0;  // P without a palette
  bad[7] = 0;
  EXPECT_FALSE(parse_l3_payload(bad).ok());
  L3Shape sh;
  EXPECT_FALSE(shape_from_code(2, 4, 4, sh).ok());          // P with 0 entries
  EXPECT_FALSE(shape_from_code(1 | 5u << 8, 4, 4, sh).ok());  // L with a palette
}
