// An 8-bit image in memory: interleaved samples, rows top to bottom, no padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fid::codec {

struct Image {
  uint32_t width = 0;
  uint32_t height = 0;
  uint8_t channels = 0;         // 1 gray (or palette index), 2 gray+alpha, 3 RGB, 4 RGBA
  std::vector<uint8_t> pixels;  // width * height * channels bytes, interleaved

  size_t row_bytes() const { return size_t{width} * channels; }
  size_t byte_size() const { return row_bytes() * height; }
};

// A read-only view of interleaved 8-bit pixels; `stride` is the distance between rows in bytes
// (0 means width * channels).
struct ImageView {
  uint32_t width = 0;
  uint32_t height = 0;
  uint8_t channels = 0;
  const uint8_t* pixels = nullptr;
  size_t stride = 0;

  ImageView() = default;
  ImageView(uint32_t w, uint32_t h, uint8_t c, const uint8_t* p, size_t s = 0)
      : width(w), height(h), channels(c), pixels(p), stride(s ? s : size_t{w} * c) {}
  ImageView(const Image& im)  // NOLINT(google-explicit-constructor): a view of an Image is natural
      : ImageView(im.width, im.height, im.channels, im.pixels.data()) {}
};

}  // namespace fid::codec
