// Unit tests for codec/quality_sample: the seeded sample and the per-level summary of a sample's
// scores (fidelityfs quality's arithmetic).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "codec/quality_sample.h"

namespace fid::codec {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<uint32_t> iota_ids(uint32_t n) {
  std::vector<uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 100u);
  return ids;
}

QualityScores equal() { return QualityScores{0, kInf, 1, 1, 1}; }
QualityScores scored(double mse, double ssim, double msssim) { return QualityScores{mse, psnr_of_mse(mse), ssim, msssim, 1}; }

TEST(CodecQualitySample, PsnrOfMse) {
  EXPECT_EQ(psnr_of_mse(0), kInf);
  EXPECT_DOUBLE_EQ(psnr_of_mse(255.0 * 255.0), 0);
  EXPECT_DOUBLE_EQ(psnr_of_mse(255.0 * 255.0 / 100), 20);
}

TEST(CodecQualitySample, SampleIsASeededSubset) {
  const std::vector<uint32_t> ids = iota_ids(50);
  const std::vector<uint32_t> a = seeded_sample(ids, 10, 7);
  ASSERT_EQ(a.size(), 10u);
  EXPECT_EQ(seeded_sample(ids, 10, 7), a);  // the same seed, the same sample
  EXPECT_NE(seeded_sample(ids, 10, 8), a);
  std::set<uint32_t> distinct(a.begin(), a.end());
  EXPECT_EQ(distinct.size(), a.size());
  for (uint32_t id : a) EXPECT_TRUE(id >= 100 && id < 150) << id;
  // A larger sample starts with the smaller one: the first `count` of one shuffle.
  const std::vector<uint32_t> b = seeded_sample(ids, 20, 7);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));
}

TEST(CodecQualitySample, SampleOfMoreThanThereAreIsAll) {
  std::vector<uint32_t> all = seeded_sample(iota_ids(5), 500, 0);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, iota_ids(5));
  EXPECT_TRUE(seeded_sample({}, 3, 0).empty());
}

TEST(CodecQualitySample, SampleDoesNotDependOnTheLibrary) {
  // std::mt19937_64's output is fixed by the standard and the draw uses no std distribution, so
  // this sample is the same with every C++ library (a published --seed keeps naming it).
  EXPECT_EQ(seeded_sample(iota_ids(10), 4, 0), (std::vector<uint32_t>{104, 106, 103, 109}));
}

TEST(CodecQualitySample, SummaryPerLevel) {
  // Two images at 3 levels; level 3 is the reference (equal to itself).
  LevelScores a{{100, 300, 1000}, {scored(40, 0.5, 0.6), scored(10, 0.9, 0.96), equal()}};
  LevelScores b{{200, 500, 1000}, {scored(20, 0.7, 0.8), equal(), equal()}};
  const Summary s = summarize({&a, &b}, 3, QualityTarget{QualityTarget::Statistic::mean, 0.95});
  EXPECT_EQ(s.sample, 2u);
  ASSERT_EQ(s.levels.size(), 3u);
  const LevelSummary& l1 = s.levels[0];
  EXPECT_EQ(l1.level, 1);
  EXPECT_DOUBLE_EQ(l1.bytes_fraction, 300.0 / 2000);
  EXPECT_DOUBLE_EQ(l1.psnr, psnr_of_mse(30));  // of the mean MSE, not the mean of PSNRs
  EXPECT_EQ(l1.identical, 0u);
  EXPECT_DOUBLE_EQ(l1.ssim, 0.6);
  EXPECT_DOUBLE_EQ(l1.msssim_mean, 0.7);
  EXPECT_DOUBLE_EQ(l1.msssim_p5, 0.6 + 0.05 * 0.2);  // numpy's linear interpolation
  const LevelSummary& l2 = s.levels[1];
  EXPECT_DOUBLE_EQ(l2.bytes_fraction, 800.0 / 2000);
  EXPECT_DOUBLE_EQ(l2.psnr, psnr_of_mse(5));  // an equal image adds an error of 0
  EXPECT_EQ(l2.identical, 1u);
  EXPECT_DOUBLE_EQ(l2.msssim_mean, 0.98);
  const LevelSummary& l3 = s.levels[2];
  EXPECT_DOUBLE_EQ(l3.bytes_fraction, 1);
  EXPECT_EQ(l3.psnr, kInf);
  EXPECT_EQ(l3.identical, 2u);
  EXPECT_DOUBLE_EQ(l3.ssim, 1);
  EXPECT_DOUBLE_EQ(l3.msssim_mean, 1);
  EXPECT_EQ(s.recommended, 2);  // the lowest level whose mean MS-SSIM >= 0.95
}

TEST(CodecQualitySample, RecommendedLevelFollowsTheTarget) {
  LevelScores a{{1, 2, 4}, {scored(40, 0.5, 0.6), scored(10, 0.9, 0.9), equal()}};
  const auto mean = [](double x) { return QualityTarget{QualityTarget::Statistic::mean, x}; };
  EXPECT_EQ(summarize({&a}, 3, mean(0.5)).recommended, 1);
  EXPECT_EQ(summarize({&a}, 3, mean(0.6)).recommended, 1);
  EXPECT_EQ(summarize({&a}, 3, mean(0.61)).recommended, 2);
  EXPECT_EQ(summarize({&a}, 3, mean(0.95)).recommended, 3);
  EXPECT_EQ(summarize({&a}, 3, mean(1.0)).recommended, 3);  // level L equals full
}

// On the 5th percentile, a level is recommended only when 19 of 20 files reach the target: one
// poor file among good ones holds the level up, where the mean lets it through.
TEST(CodecQualitySample, RecommendingOnThe5thPercentileCountsThePoorFiles) {
  std::vector<LevelScores> images(20, LevelScores{{1, 2, 4}, {scored(40, 0.9, 0.97), scored(10, 0.95, 0.99), equal()}});
  images[0].scores[0] = scored(40, 0.3, 0.40);
  images[1].scores[0] = scored(40, 0.3, 0.40);
  std::vector<const LevelScores*> all;
  for (const auto& i : images) all.push_back(&i);
  EXPECT_EQ(summarize(all, 3, QualityTarget{QualityTarget::Statistic::mean, 0.9}).recommended, 1);  // mean 0.913
  const Summary p5 = summarize(all, 3, QualityTarget{QualityTarget::Statistic::p5, 0.9});
  EXPECT_LT(p5.levels[0].msssim_p5, 0.9);
  EXPECT_EQ(p5.recommended, 2);
  EXPECT_EQ(lowest_level_meeting(p5.levels, QualityTarget{QualityTarget::Statistic::p5, 0.995}), 3);
}

}  // namespace
}  // namespace fid::codec
