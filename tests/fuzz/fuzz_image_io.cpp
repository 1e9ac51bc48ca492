// libFuzzer target for the source image readers (PNG via libspng, BMP, PNM).
#include <cstdint>
#include <cstdlib>
#include <span>

#include "codec/image_io.h"

using namespace fid::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  DecodeLimits lim;
  lim.max_bytes = 64u << 20;
  const fid::Result<SourceImage> out = decode_image(std::span<const uint8_t>(data, size), lim);
  if (out && out->image.pixels.size() != out->image.byte_size()) abort();
  return 0;
}
