// L3: a lossless 8-bit image format whose decoder is parallel across patches and across the
// samples of a row (see docs/L3_FORMAT.md). Byte buffers in, byte buffers out: no file I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "codec/image.h"
#include "common/error.h"

namespace fid::codec {

inline constexpr uint8_t kL3Version = 2;  // written by default; version 1 is still read
inline constexpr size_t kL3HeaderBytes = 24;  // fixed part, before the patch offset table
inline constexpr uint32_t kL3MaxDimension = 1u << 24;
inline constexpr uint64_t kL3MaxRawBytes = uint64_t{1} << 32;  // width*height*channels
inline constexpr uint8_t kL3FlagInterPatch = 1;    // header flags (docs/L3_FORMAT.md section 1)
inline constexpr uint8_t kL3FlagHuffCodes = 2;
inline constexpr size_t kL3CodeTableBytes = 128;  // Huffman code lengths, after the fixed header

struct L3Options {
  uint32_t patch_size = 0;   // N (1..1024); 0: chosen from the resolution (l3_default_patch_size)
  uint8_t version = kL3Version;  // 1 or 2 (2 adds the tools below marked "v2")
  // Segments of 2^k samples, k in 3..6. Version 1: 0 tries 3..5 for the image and keeps the
  // smallest. Version 2: chosen per patch among the bits of segment_mask (bit k: 2^k allowed);
  // a non-zero segment_log2 forces that one.
  uint8_t segment_log2 = 0;
  uint8_t segment_mask = (1u << 3) | (1u << 4) | (1u << 5);
  bool constant_patches = true;  // v2: a patch of one colour is 1 + C bytes
  bool copy_runs = true;         // v2: a copy row may cover the next rows of its plane
  bool cross_channel = true;      // allow rows to add the first plane's residual
  bool inter_patch_rows = false;  // first row of a patch predicted from the patch above
  uint32_t predictor_mask = 0x3f; // bit p: predictor p allowed in rows with a row above
  uint32_t first_row_mask = 0x3;  // bit p: first-row predictor p allowed
  bool copy_rows = true;          // one-byte rows for rows equal to their prediction from T
  uint8_t entropy_codes = 1;      // Huffman segment codes: 0 never, 1 when smaller, 2 always
  bool explicit_bases = true;     // allow segment codes 9..15 (explicit base byte)
};

// What a header says, after full validation of the header and the offset table.
struct L3Info {
  uint32_t width = 0;
  uint32_t height = 0;
  uint8_t channels = 0;
  uint8_t version = 0;
  uint8_t segment_log2 = 0;  // version 1: the image's; version 2: 0 (each patch has its own)
  uint8_t flags = 0;
  uint32_t patch_size = 0;
  uint32_t patches_x = 0;
  uint32_t patches_y = 0;
  size_t header_bytes = 0;  // fixed header + offset table
  size_t data_bytes = 0;

  uint32_t patches() const { return patches_x * patches_y; }
  size_t raw_bytes() const { return size_t{width} * height * channels; }  // decoded size
};

// Default patch side for an image: 32 up to 640x480 pixels, 64 up to 1280x720, else 256.
uint32_t l3_default_patch_size(uint32_t width, uint32_t height);

// Encodes an image (1..4 channels, 1..2^24 on each side). Fails with EINVAL on a bad image or
// options, or when the encoded image would exceed 4 GiB.
fid::Result<std::vector<uint8_t>> l3_encode(const ImageView& image, const L3Options& options = {});

// Parses and validates the header and the offset table (not the patch data). EINVAL on any
// inconsistency.
fid::Result<L3Info> l3_probe(std::span<const uint8_t> data);

// Decodes into `out` (exactly info.raw_bytes(), interleaved, rows without padding). Validates
// everything; on failure (EINVAL with the reason) the contents of `out` are unspecified.
// Never reads outside `data` nor writes outside `out`.
fid::Status l3_decode_into(std::span<const uint8_t> data, std::span<uint8_t> out);

// Decodes into an Image (allocates raw_bytes()).
fid::Result<Image> l3_decode(std::span<const uint8_t> data);

// True if the buffer starts with the L3 magic.
bool looks_like_l3(std::span<const uint8_t> data);

}  // namespace fid::codec
