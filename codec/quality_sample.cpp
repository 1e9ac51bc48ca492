#include "codec/quality_sample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace fid::codec {

namespace {

// A uniform draw in [0, n) from the 64-bit Mersenne Twister, whose output the standard fixes; the
// standard distributions are not, and the sample must not change with the C++ library.
uint64_t draw_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t x;
  do x = rng(); while (x >= limit);
  return x % n;
}

LevelSummary summarize_level(const std::vector<const LevelScores*>& images, int level, uint64_t full_bytes) {
  const auto i = static_cast<size_t>(level - 1);
  LevelSummary l;
  l.level = level;
  uint64_t bytes = 0;
  double mse_sum = 0, ssim_sum = 0, msssim_sum = 0;
  std::vector<double> msssim;
  for (const LevelScores* image : images) {
    const QualityScores& s = image->scores[i];
    bytes += image->bytes[i];
    if (std::isinf(s.psnr)) l.identical++;
    mse_sum += s.mse;
    ssim_sum += s.ssim;
    msssim_sum += s.msssim;
    msssim.push_back(s.msssim);
  }
  const auto n = static_cast<double>(images.size());
  l.bytes_fraction = full_bytes ? static_cast<double>(bytes) / static_cast<double>(full_bytes) : 0;
  l.psnr = psnr_of_mse(mse_sum / n);
  l.ssim = ssim_sum / n;
  l.msssim_mean = msssim_sum / n;
  l.msssim_p5 = percentile(std::move(msssim), 5);
  return l;
}

}  // namespace

std::vector<uint32_t> seeded_sample(std::vector<uint32_t> ids, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  count = std::min(count, ids.size());
  for (size_t i = 0; i < count; ++i) std::swap(ids[i], ids[i + draw_below(rng, ids.size() - i)]);
  ids.resize(count);
  return ids;
}

double QualityTarget::of(const LevelSummary& l) const { return statistic == Statistic::mean ? l.msssim_mean : l.msssim_p5; }

int lowest_level_meeting(const std::vector<LevelSummary>& levels, const QualityTarget& target) {
  for (const LevelSummary& l : levels)
    if (target.of(l) >= target.msssim) return l.level;
  return static_cast<int>(levels.size());  // level L equals full: MS-SSIM 1
}

Summary summarize(const std::vector<const LevelScores*>& images, int levels, const QualityTarget& target) {
  Summary sum;
  sum.sample = images.size();
  uint64_t full_bytes = 0;
  for (const LevelScores* image : images) full_bytes += image->bytes.back();
  for (int k = 1; k <= levels; ++k) sum.levels.push_back(summarize_level(images, k, full_bytes));
  sum.recommended = lowest_level_meeting(sum.levels, target);
  return sum;
}

}  // namespace fid::codec
