// Image quality metrics between two decodings of the same image (a fidelity level against full):
// PSNR, SSIM and MS-SSIM on luma. Pure arithmetic on decoded pixels: no I/O, no libjpeg.
//
// Definitions (docs/BENCHMARKS.md, "Quality per level (quality)", states them for users):
// * Luma: one component as it is; three components (libjpeg's RGB output) as BT.601
//   Y = 0.299 R + 0.587 G + 0.114 B in double, not rounded; any other count (CMYK, YCCK as
//   libjpeg outputs them) as the plain mean of the components.
// * PSNR: 10 log10(255^2 / MSE) over luma; +infinity when the planes are equal.
// * SSIM: as scikit-image's structural_similarity(a, b, data_range=255, gaussian_weights=True,
//   sigma=1.5, use_sample_covariance=False): Gaussian window sigma 1.5 truncated at 3.5 sigma
//   (11 taps), separable, borders mirrored (scipy.ndimage mode 'reflect': d c b a | a b c d),
//   population (co)variances, K1 = 0.01, K2 = 0.03, and the mean of the SSIM map with a border
//   of 5 pixels left out. Planes with a side of 10 pixels or fewer average their whole map
//   (the border would leave nothing; scikit-image refuses planes under 11 pixels).
// * MS-SSIM (Wang, Simoncelli, Bovik 2003): scales 1..M, M = 5 when the smallest scale still has
//   both sides >= 11 pixels, else as many as have (at least 1), weights (0.0448, 0.2856, 0.3001,
//   0.2363, 0.1333) cut to M and renormalised to sum 1. Scales 1..M-1 contribute their mean
//   contrast-structure term (2 cov + C2) / (var_a + var_b + C2), scale M its mean SSIM; each is
//   clamped at 0 before the power. Between scales: 2x2 average pooling, an odd last row or
//   column dropped. Equal planes give exactly 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/error.h"

namespace fid::codec {

struct DecodedImage;

// A luma plane, row-major.
struct LumaPlane {
  int width = 0;
  int height = 0;
  std::vector<double> values;
};

// The luma of interleaved 8-bit samples with `components` per pixel (definition above).
LumaPlane luma_of(int width, int height, int components, std::span<const uint8_t> pixels);
LumaPlane luma_of(const DecodedImage& image);

struct QualityScores {
  double mse = 0;   // mean squared luma difference
  double psnr = 0;  // dB; +infinity for equal planes
  double ssim = 0;
  double msssim = 0;
  int msssim_scales = 0;  // M, the scales MS-SSIM used
};

// PSNR in dB of a mean squared error on 8-bit samples: 10 log10(255^2 / mse); +infinity at 0.
double psnr_of_mse(double mse);

// Scores `test` against `reference`. EINVAL when their sizes differ or a plane is empty.
fid::Result<QualityScores> compare_luma(const LumaPlane& reference, const LumaPlane& test);

// The p-th percentile (p in [0, 100]) with linear interpolation between closest ranks, as
// numpy.percentile's default: position p/100 * (n - 1) in the sorted values. NaN when empty.
double percentile(std::vector<double> values, double p);

}  // namespace fid::codec
