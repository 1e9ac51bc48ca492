#include "codec/quality.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <limits>
#include <string>

#include "codec/jpeg.h"

namespace fid::codec {

namespace {

constexpr double kDataRange = 255.0;
constexpr double kC1 = (0.01 * kDataRange) * (0.01 * kDataRange);
constexpr double kC2 = (0.03 * kDataRange) * (0.03 * kDataRange);
constexpr double kSigma = 1.5;
constexpr int kRadius = 5;  // int(3.5 * sigma + 0.5), as scipy.ndimage truncates the Gaussian
constexpr int kTaps = 2 * kRadius + 1;
constexpr std::array<double, 5> kMsSsimWeights{0.0448, 0.2856, 0.3001, 0.2363, 0.1333};

using Kernel = std::array<double, kTaps>;

Kernel gaussian_kernel() {
  Kernel k{};
  double sum = 0;
  for (int t = 0; t < kTaps; ++t) {
    const double x = t - kRadius;
    k[static_cast<size_t>(t)] = std::exp(-0.5 * x * x / (kSigma * kSigma));
    sum += k[static_cast<size_t>(t)];
  }
  for (double& v : k) v /= sum;
  return k;
}

// scipy.ndimage's 'reflect' extension (d c b a | a b c d | d c b a), repeated for any distance.
int mirror(int i, int n) {
  if (n == 1) return 0;
  const int period = 2 * n;
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - 1 - i;
}

// The five Gaussian-filtered planes SSIM needs, of which this holds a few rows at a time.
enum Moment { kMeanA, kMeanB, kMeanAA, kMeanBB, kMeanAB, kMoments };

struct ScaleMeans {
  double ssim = 0;
  double cs = 0;  // contrast-structure term
};

// Mean SSIM and mean contrast-structure term of two planes of w x h. The separable filter runs
// row by row: horizontally filtered rows live in a ring of 16 (a window never spans more than 11
// distinct rows, mirrored or not), so memory is O(width) whatever the image size.
ScaleMeans ssim_means(const double* a, const double* b, int w, int h) {
  static const Kernel kernel = gaussian_kernel();
  constexpr int kRing = 16;
  const auto W = static_cast<size_t>(w);
  std::vector<double> ring(kRing * kMoments * W);
  std::array<int, kRing> ring_row;
  ring_row.fill(-1);
  std::vector<double> padded_a(W + 2 * kRadius), padded_b(W + 2 * kRadius);

  auto filtered_row = [&](int y) -> const double* {
    double* slot = ring.data() + static_cast<size_t>(y % kRing) * kMoments * W;
    if (ring_row[static_cast<size_t>(y % kRing)] == y) return slot;
    ring_row[static_cast<size_t>(y % kRing)] = y;
    const double* ra = a + static_cast<size_t>(y) * W;
    const double* rb = b + static_cast<size_t>(y) * W;
    for (int x = -kRadius; x < w + kRadius; ++x) {
      padded_a[static_cast<size_t>(x + kRadius)] = ra[mirror(x, w)];
      padded_b[static_cast<size_t>(x + kRadius)] = rb[mirror(x, w)];
    }
    // Tap by tap over the whole row (each sum still adds its taps in order): loops the compiler
    // vectorises.
    std::fill(slot, slot + kMoments * W, 0.0);
    double* __restrict sa = slot + kMeanA * W;
    double* __restrict sb = slot + kMeanB * W;
    double* __restrict saa = slot + kMeanAA * W;
    double* __restrict sbb = slot + kMeanBB * W;
    double* __restrict sab = slot + kMeanAB * W;
    for (size_t t = 0; t < kTaps; ++t) {
      const double k = kernel[t];
      const double* __restrict pa = padded_a.data() + t;
      const double* __restrict pb = padded_b.data() + t;
      for (size_t x = 0; x < W; ++x) {
        const double va = pa[x], vb = pb[x];
        sa[x] += k * va;
        sb[x] += k * vb;
        saa[x] += k * (va * va);
        sbb[x] += k * (vb * vb);
        sab[x] += k * (va * vb);
      }
    }
    return slot;
  };

  // scikit-image averages the map without a border of kRadius; a plane too small for that
  // averages all of it.
  const bool crop = w > 2 * kRadius && h > 2 * kRadius;
  const int x0 = crop ? kRadius : 0, x1 = crop ? w - kRadius : w;
  const int y0 = crop ? kRadius : 0, y1 = crop ? h - kRadius : h;
  double ssim_sum = 0, cs_sum = 0;
  std::array<const double*, kTaps> rows{};
  std::vector<double> sums(kMoments * W);  // one output row of the five filtered planes
  for (int y = y0; y < y1; ++y) {
    for (int t = 0; t < kTaps; ++t) rows[static_cast<size_t>(t)] = filtered_row(mirror(y + t - kRadius, h));
    std::fill(sums.begin(), sums.end(), 0.0);
    for (size_t t = 0; t < kTaps; ++t)
      for (size_t q = 0; q < kMoments; ++q) {
        const double k = kernel[t];
        const double* __restrict in = rows[t] + q * W;
        double* __restrict out = sums.data() + q * W;
        for (auto x = static_cast<size_t>(x0); x < static_cast<size_t>(x1); ++x) out[x] += k * in[x];
      }
    for (int x = x0; x < x1; ++x) {
      std::array<double, kMoments> m{};
      for (size_t q = 0; q < kMoments; ++q) m[q] = sums[q * W + static_cast<size_t>(x)];
      const double ua = m[kMeanA], ub = m[kMeanB];
      const double va = m[kMeanAA] - ua * ua, vb = m[kMeanBB] - ub * ub, vab = m[kMeanAB] - ua * ub;
      // scikit-image's arrangement, which is exactly 1 for equal planes (2v == v + v in floating point).
      const double a1 = 2 * ua * ub + kC1, a2 = 2 * vab + kC2;
      const double b1 = ua * ua + ub * ub + kC1, b2 = va + vb + kC2;
      ssim_sum += (a1 * a2) / (b1 * b2);
      cs_sum += a2 / b2;
    }
  }
  const auto count = static_cast<double>(x1 - x0) * static_cast<double>(y1 - y0);
  return {ssim_sum / count, cs_sum / count};
}

// 2x2 average pooling; an odd last row or column is dropped.
LumaPlane half(const double* v, int w, int h) {
  LumaPlane out;
  out.width = w / 2;
  out.height = h / 2;
  out.values.resize(static_cast<size_t>(out.width) * static_cast<size_t>(out.height));
  const auto W = static_cast<size_t>(w);
  for (size_t y = 0; y < static_cast<size_t>(out.height); ++y)
    for (size_t x = 0; x < static_cast<size_t>(out.width); ++x) {
      const double* p = v + 2 * y * W + 2 * x;
      out.values[y * static_cast<size_t>(out.width) + x] = (p[0] + p[1] + p[W] + p[W + 1]) / 4;
    }
  return out;
}

int msssim_scales(int w, int h) {
  int scales = 1;
  while (scales < static_cast<int>(kMsSsimWeights.size()) && std::min(w >> scales, h >> scales) >= kTaps) ++scales;
  return scales;
}

}  // namespace

LumaPlane luma_of(int width, int height, int components, std::span<const uint8_t> pixels) {
  LumaPlane out;
  out.width = width;
  out.height = height;
  const size_t n = static_cast<size_t>(width) * static_cast<size_t>(height);
  out.values.resize(n);
  const auto c = static_cast<size_t>(components);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = pixels.data() + i * c;
    if (c == 1) {
      out.values[i] = p[0];
    } else if (c == 3) {
      out.values[i] = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
    } else {
      double sum = 0;
      for (size_t k = 0; k < c; ++k) sum += p[k];
      out.values[i] = sum / static_cast<double>(c);
    }
  }
  return out;
}

LumaPlane luma_of(const DecodedImage& image) {
  return luma_of(image.width, image.height, image.components, image.pixels);
}

double psnr_of_mse(double mse) {
  return mse == 0 ? std::numeric_limits<double>::infinity() : 10 * std::log10(kDataRange * kDataRange / mse);
}

fid::Result<QualityScores> compare_luma(const LumaPlane& reference, const LumaPlane& test) {
  if (reference.width != test.width || reference.height != test.height)
    return fid::Error{EINVAL, "images of different sizes: " + std::to_string(reference.width) + "x" +
                                  std::to_string(reference.height) + " and " + std::to_string(test.width) + "x" +
                                  std::to_string(test.height)};
  if (reference.width <= 0 || reference.height <= 0 || reference.values.size() != test.values.size() ||
      reference.values.size() != static_cast<size_t>(reference.width) * static_cast<size_t>(reference.height))
    return fid::Error{EINVAL, "empty or malformed luma plane"};
  const int w = reference.width, h = reference.height;
  QualityScores s;
  s.msssim_scales = msssim_scales(w, h);
  if (reference.values == test.values) {  // the common case at full level; the maths would give the same
    s.psnr = std::numeric_limits<double>::infinity();
    s.ssim = s.msssim = 1.0;
    return s;
  }
  double squared = 0;
  for (size_t i = 0; i < reference.values.size(); ++i) {
    const double d = reference.values[i] - test.values[i];
    squared += d * d;
  }
  s.mse = squared / static_cast<double>(reference.values.size());
  s.psnr = psnr_of_mse(s.mse);

  double weight_sum = 0;
  for (int i = 0; i < s.msssim_scales; ++i) weight_sum += kMsSsimWeights[static_cast<size_t>(i)];
  LumaPlane a_scaled, b_scaled;
  const double* a = reference.values.data();
  const double* b = test.values.data();
  int sw = w, sh = h;
  double msssim = 1;
  for (int i = 0; i < s.msssim_scales; ++i) {
    if (i > 0) {
      LumaPlane a_half = half(a, sw, sh), b_half = half(b, sw, sh);
      a_scaled = std::move(a_half);
      b_scaled = std::move(b_half);
      a = a_scaled.values.data();
      b = b_scaled.values.data();
      sw = a_scaled.width;
      sh = a_scaled.height;
    }
    const ScaleMeans m = ssim_means(a, b, sw, sh);
    if (i == 0) s.ssim = m.ssim;
    const bool last = i == s.msssim_scales - 1;
    const double term = std::max(0.0, last ? m.ssim : m.cs);  // a negative term has no real power
    msssim *= std::pow(term, kMsSsimWeights[static_cast<size_t>(i)] / weight_sum);
  }
  s.msssim = msssim;
  return s;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace fid::codec
