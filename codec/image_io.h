// Reading lossless source images into 8-bit pixels, and writing pixels as "raw view" files
// (PGM/PPM/PAM, NPY, stored PNG). Byte buffers in, byte buffers out: no file I/O.
//
// Pixel values match what `np.asarray(PIL.Image.open(f))` gives (Pillow 9.4), with one
// documented exception: a 1-bit image is PIL mode "1" (np.asarray gives bool), and here it
// is 1 channel of 0/255 (PIL's own storage, and what `.convert("L")` gives). See
// docs/L3_FORMAT.md, "Source images".
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codec/image.h"
#include "common/error.h"

namespace fid::codec {

enum class SourceFormat : uint8_t { unknown = 0, png, bmp, pnm };

struct SourceImage {
  Image image;
  SourceFormat format = SourceFormat::unknown;
  bool palette_indices = false;        // image holds palette indices (PIL mode "P"), 1 channel
  std::vector<uint8_t> palette;        // RGB triplets (PNG PLTE) when palette_indices
  std::vector<uint8_t> palette_alpha;  // PNG tRNS alpha per palette entry (may be shorter/empty)
  bool bilevel = false;                // source was 1-bit (PIL mode "1"); samples are 0/255
  std::string pil_mode;                // the mode PIL reports: 1, L, LA, P, RGB, RGBA
};

struct DecodeLimits {
  uint32_t max_dimension = 1u << 24;
  uint64_t max_bytes = uint64_t{1} << 31;  // decoded width*height*channels
};

SourceFormat sniff_image(std::span<const uint8_t> data);

// PNG: gray/gray+alpha/RGB/RGBA/palette at bit depths <= 8 (interlaced too); 16-bit is
// rejected. Gray at 1/2/4 bits is scaled to 0..255 like PIL (x255, x85, x17); palette images
// keep their indices. BMP: uncompressed 24-bit, 32-bit BI_RGB (-> RGB, 4th byte ignored, as
// PIL) and 32-bit BI_BITFIELDS with BGRA/BGRX masks. PNM: binary P5/P6 with maxval 1..255
// (maxval != 255 is rescaled exactly as PIL does). Anything else fails with EINVAL and the
// reason (ENOMEM when memory runs out).
fid::Result<SourceImage> decode_image(std::span<const uint8_t> data, const DecodeLimits& limits = {});
fid::Result<SourceImage> decode_png(std::span<const uint8_t> data, const DecodeLimits& limits = {});
fid::Result<SourceImage> decode_bmp(std::span<const uint8_t> data, const DecodeLimits& limits = {});
fid::Result<SourceImage> decode_pnm(std::span<const uint8_t> data, const DecodeLimits& limits = {});

// Headers for raw views; the pixels (interleaved, rows top to bottom) follow them unchanged,
// so a file is header + width*height*channels bytes.
// PNM: P5 (1 channel), P6 (3), P7 PAM (2: GRAYSCALE_ALPHA, 4: RGB_ALPHA).
std::vector<uint8_t> pnm_header(uint32_t width, uint32_t height, uint8_t channels);
// NPY v1.0, dtype |u1, C order, shape (h, w) for 1 channel, (h, w, c) otherwise; the header is
// padded to a multiple of 64 bytes.
std::vector<uint8_t> npy_header(uint32_t width, uint32_t height, uint8_t channels);

std::vector<uint8_t> encode_pnm(const Image& image);
std::vector<uint8_t> encode_npy(const Image& image);

// A valid PNG whose zlib stream uses stored (uncompressed) blocks and filter 0 on every row:
// its size is known in advance (png_stored_size) and writing it is a copy. With `palette`
// non-empty (RGB triplets, 1 channel of indices) it writes PLTE (+ tRNS if palette_alpha).
size_t png_stored_size(uint32_t width, uint32_t height, uint8_t channels, size_t palette_entries = 0,
                       size_t alpha_entries = 0);
std::vector<uint8_t> encode_png_stored(const Image& image, std::span<const uint8_t> palette = {},
                                       std::span<const uint8_t> palette_alpha = {});

}  // namespace fid::codec
