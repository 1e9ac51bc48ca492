// See jpeg.h: encode_jpeg.
#include <algorithm>
#include <cerrno>
#include <string>

#include "codec/image.h"
#include "codec/jpeg.h"
#include "codec/libjpeg_glue.h"

namespace fid::codec {

fid::Result<std::vector<uint8_t>> encode_jpeg(const ImageView& image, int quality) {
  if (image.channels != 1 && image.channels != 3) return fid::Error{EINVAL, "a JPEG is made of gray or RGB samples"};
  if (image.width == 0 || image.height == 0 || image.width > JPEG_MAX_DIMENSION || image.height > JPEG_MAX_DIMENSION)
    return fid::Error{EINVAL, "an image of " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                                  " pixels has no JPEG"};
  std::vector<uint8_t> out;
  jpeg_compress_struct c{};
  libjpeg::ErrorMgr err;
  libjpeg::VectorDest dest{};
  libjpeg::init_error_mgr(err);
  c.err = &err.pub;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&c);
    return libjpeg::failure(err);
  }
  jpeg_create_compress(&c);
  // About a tenth of the raw samples: a quality-95 photo's size, so it rarely grows.
  libjpeg::write_into(&c, dest, out, size_t{image.width} * image.height * image.channels / 8 + 4096);
  c.image_width = image.width;
  c.image_height = image.height;
  c.input_components = image.channels;
  c.in_color_space = image.channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, std::clamp(quality, 1, 100), TRUE);
  c.dct_method = JDCT_ISLOW;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    auto* row = const_cast<JSAMPROW>(image.pixels + size_t{c.next_scanline} * image.stride);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return out;
}

}  // namespace fid::codec
