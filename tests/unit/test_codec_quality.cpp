// Unit tests for codec/quality: luma, PSNR, SSIM, MS-SSIM and percentile. The scikit-image
// comparison lives in tests/integration/test_quality.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "codec/quality.h"

namespace fid::codec {
namespace {

// A smooth photo-like plane: gradients plus a few sinusoids, in [0, 255].
LumaPlane smooth_plane(int w, int h) {
  LumaPlane p{w, h, std::vector<double>(static_cast<size_t>(w) * static_cast<size_t>(h))};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      p.values[static_cast<size_t>(y * w + x)] =
          127.5 + 60 * std::sin(x * 0.07) * std::cos(y * 0.05) + 40.0 * (x + y) / (w + h) + 20 * std::sin(x * 0.9);
  return p;
}

LumaPlane with_noise(const LumaPlane& p, double sigma, unsigned seed) {
  LumaPlane out = p;
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0, sigma);
  for (double& v : out.values) v = std::clamp(v + noise(rng), 0.0, 255.0);
  return out;
}

QualityScores scores(const LumaPlane& a, const LumaPlane& b) {
  auto r = compare_luma(a, b);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : QualityScores{};
}

TEST(CodecQuality, IdenticalPlanesScorePerfectly) {
  LumaPlane a = smooth_plane(300, 200);
  LumaPlane b = a;  // a separate, equal buffer
  QualityScores s = scores(a, b);
  EXPECT_TRUE(std::isinf(s.psnr) && s.psnr > 0);
  EXPECT_EQ(s.ssim, 1.0);
  EXPECT_EQ(s.msssim, 1.0);
  EXPECT_EQ(s.msssim_scales, 5);
}

TEST(CodecQuality, MoreNoiseScoresLower) {
  LumaPlane a = smooth_plane(256, 192);
  double last_psnr = std::numeric_limits<double>::infinity(), last_ssim = 1, last_msssim = 1;
  for (double sigma : {1.0, 4.0, 12.0, 30.0, 70.0}) {
    QualityScores s = scores(a, with_noise(a, sigma, 7));
    EXPECT_LT(s.psnr, last_psnr) << "sigma " << sigma;
    EXPECT_LT(s.ssim, last_ssim) << "sigma " << sigma;
    EXPECT_LT(s.msssim, last_msssim) << "sigma " << sigma;
    EXPECT_GE(s.msssim, 0.0);
    last_psnr = s.psnr;
    last_ssim = s.ssim;
    last_msssim = s.msssim;
  }
}

TEST(CodecQuality, PsnrOfAConstantOffset) {
  LumaPlane a = smooth_plane(40, 30);
  LumaPlane b = a;
  for (double& v : b.values) v += 5;  // MSE 25
  EXPECT_NEAR(scores(a, b).psnr, 10 * std::log10(255.0 * 255.0 / 25.0), 1e-9);
}

TEST(CodecQuality, ScalesFollowTheImageSize) {
  // Five scales need the 16x smaller image to keep 11 pixels a side.
  EXPECT_EQ(scores(smooth_plane(176, 176), with_noise(smooth_plane(176, 176), 5, 1)).msssim_scales, 5);
  EXPECT_EQ(scores(smooth_plane(175, 400), with_noise(smooth_plane(175, 400), 5, 1)).msssim_scales, 4);
  EXPECT_EQ(scores(smooth_plane(30, 30), with_noise(smooth_plane(30, 30), 5, 1)).msssim_scales, 2);
  EXPECT_EQ(scores(smooth_plane(21, 64), with_noise(smooth_plane(21, 64), 5, 1)).msssim_scales, 1);
}

TEST(CodecQuality, SmallImagesGiveFiniteScores) {
  for (auto [w, h] : {std::pair{1, 1}, {2, 1}, {1, 7}, {5, 5}, {10, 10}, {11, 11}, {12, 3}}) {
    LumaPlane a = smooth_plane(w, h);
    LumaPlane b = with_noise(a, 20, 3);
    QualityScores s = scores(a, b);
    EXPECT_EQ(s.msssim_scales, 1) << w << "x" << h;
    EXPECT_TRUE(std::isfinite(s.ssim)) << w << "x" << h;
    EXPECT_LE(s.ssim, 1.0);
    EXPECT_TRUE(std::isfinite(s.msssim)) << w << "x" << h;
    EXPECT_GE(s.msssim, 0.0);
    EXPECT_LE(s.msssim, 1.0);
    EXPECT_EQ(scores(a, a).msssim, 1.0);
  }
}

TEST(CodecQuality, OneScaleMsSsimIsSsim) {
  LumaPlane a = smooth_plane(60, 18);
  QualityScores s = scores(a, with_noise(a, 10, 5));
  ASSERT_EQ(s.msssim_scales, 1);
  EXPECT_NEAR(s.msssim, s.ssim, 1e-12);
}

TEST(CodecQuality, InvertedContrastClampsToZero) {
  LumaPlane a = smooth_plane(200, 200);
  LumaPlane b = a;
  for (double& v : b.values) v = 255 - v;  // negative covariance at every scale
  QualityScores s = scores(a, b);
  EXPECT_EQ(s.msssim, 0.0);
  EXPECT_LT(s.ssim, 0.0);  // SSIM itself is reported as it is
}

TEST(CodecQuality, RejectsMismatchedAndEmptyPlanes) {
  auto r = compare_luma(smooth_plane(10, 10), smooth_plane(10, 11));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_FALSE(compare_luma(LumaPlane{}, LumaPlane{}).ok());
}

TEST(CodecQuality, LumaIsBt601OrTheSamplesThemselves) {
  const std::vector<uint8_t> rgb{255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
  LumaPlane y = luma_of(4, 1, 3, rgb);
  EXPECT_DOUBLE_EQ(y.values[0], 0.299 * 255);
  EXPECT_DOUBLE_EQ(y.values[1], 0.587 * 255);
  EXPECT_DOUBLE_EQ(y.values[2], 0.114 * 255);
  EXPECT_DOUBLE_EQ(y.values[3], 0.299 * 10 + 0.587 * 20 + 0.114 * 30);
  const std::vector<uint8_t> gray{0, 17, 255};
  EXPECT_EQ(luma_of(3, 1, 1, gray).values, (std::vector<double>{0, 17, 255}));
  const std::vector<uint8_t> cmyk{0, 100, 200, 40};
  EXPECT_DOUBLE_EQ(luma_of(1, 1, 4, cmyk).values[0], 85.0);
}

TEST(CodecQuality, PercentileInterpolatesLikeNumpy) {
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2, 4, 5}, 5), 1.2);  // numpy.percentile([1..5], 5)
  EXPECT_DOUBLE_EQ(percentile({7}, 5), 7);
  EXPECT_DOUBLE_EQ(percentile({1, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({1, 2}, 100), 2);
  EXPECT_TRUE(std::isnan(percentile({}, 5)));
}

}  // namespace
}  // namespace fid::codec
