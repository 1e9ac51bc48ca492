// A quality measurement over a sample of images (fidelityfs quality): the seeded sample and the
// per-level summary of the sample's scores. Arithmetic only, like quality.h; reading the images
// is the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/quality.h"

namespace fid::codec {

// The first `count` of a seeded Fisher-Yates shuffle of `ids`: every subset of that size equally
// likely, and the same subset for the same seed on any platform and C++ library.
std::vector<uint32_t> seeded_sample(std::vector<uint32_t> ids, size_t count, uint64_t seed);

// One image at every level 1..L (index k-1): its size and its scores against level L, the
// reference (whose own scores are those of equal planes).
struct LevelScores {
  std::vector<uint64_t> bytes;
  std::vector<QualityScores> scores;
};

struct LevelSummary {
  int level = 0;
  double bytes_fraction = 0;  // the sample's bytes at this level over its bytes at level L
  // PSNR of the sample's mean luma MSE: an image equal to full adds an error of 0 (a mean of
  // per-image PSNRs would be infinite as soon as one is). +inf when all are equal.
  double psnr = 0;
  size_t identical = 0;  // images whose level decodes to exactly the full pixels
  double ssim = 0;
  double msssim_mean = 0;
  double msssim_p5 = 0;  // 5th percentile (percentile())
};

// What a recommended level must reach: its mean MS-SSIM, or its 5th percentile (then 19 of 20
// sampled files reach the value).
struct QualityTarget {
  enum class Statistic { mean, p5 };
  Statistic statistic = Statistic::mean;
  double msssim = 0.95;
  double of(const LevelSummary& l) const;
};

struct Summary {
  size_t sample = 0;
  std::vector<LevelSummary> levels;  // 1..L
  int recommended = 0;               // lowest level that meets the target; L if none
};

// The lowest of `levels` (1..L) that meets `target`; L if none does.
int lowest_level_meeting(const std::vector<LevelSummary>& levels, const QualityTarget& target);

// Summarises a non-empty sample of images, each scored at `levels` levels.
Summary summarize(const std::vector<const LevelScores*>& images, int levels, const QualityTarget& target);

}  // namespace fid::codec
