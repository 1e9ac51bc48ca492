// Synthetic test images shared by the L3 unit tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "codec/image.h"

namespace fid::codec::testimg {

inline Image make_image(uint32_t w, uint32_t h, uint8_t c) {
  Image im;
  im.width = w;
  im.height = h;
  im.channels = c;
  im.pixels.resize(size_t{w} * h * c);
  return im;
}

inline Image noise(uint32_t w, uint32_t h, uint8_t c, uint32_t seed, unsigned amplitude = 256) {
  Image im = make_image(w, h, c);
  std::mt19937 rng(seed);
  for (auto& p : im.pixels) p = static_cast<uint8_t>(rng() % amplitude);
  return im;
}

// A smooth "photo-like" image: gradients + waves + mild noise, correlated channels.
inline Image smooth(uint32_t w, uint32_t h, uint8_t c, uint32_t seed) {
  Image im = make_image(w, h, c);
  std::mt19937 rng(seed);
  for (uint32_t y = 0; y < h; ++y)
    for (uint32_t x = 0; x < w; ++x) {
      double base = 128 + 60 * std::sin(x * 0.05 + seed) * std::cos(y * 0.03) + (x + y) * 0.1;
      for (uint8_t k = 0; k < c; ++k) {
        double v = base + 20 * k + static_cast<int>(rng() % 5) - 2;
        im.pixels[(size_t{y} * w + x) * c + k] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  return im;
}

inline std::vector<uint8_t> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace fid::codec::testimg
