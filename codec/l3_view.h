// L3 payloads and their served views. A payload is what a store keeps for a lossless source: a
// small prefix with what the L3 bitstream does not hold (the PIL mode, the palette) followed by
// the L3 bitstream. A view is the file a reader gets: the decoded pixels in a container every
// image library reads (stored PNG, PPM/PGM, NPY), whose size is known without decoding.
// See docs/FORMAT.md, "L3 payload" and "L3 views". Byte buffers in, byte buffers out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "codec/image_io.h"
#include "codec/l3.h"
#include "common/error.h"

namespace fid::codec {

// PIL modes of a lossless source, as stored in a payload (u8 codes).
enum class PilMode : uint8_t { bilevel = 0, L = 1, P = 2, LA = 3, RGB = 4, RGBA = 5 };
std::string_view pil_mode_name(PilMode m);
uint8_t pil_mode_channels(PilMode m);  // channels of the L3 bitstream: 1, 1, 1, 2, 3, 4

inline constexpr size_t kL3PayloadPrefix = 12;  // fixed part, before palette and palette alpha

// What a view needs besides the pixels; small enough to live in the index (see shape_code).
struct L3Shape {
  uint32_t width = 0, height = 0;
  PilMode mode = PilMode::L;
  uint16_t palette_entries = 0;  // 0..256, P only
  uint16_t alpha_entries = 0;    // 0..palette_entries
  uint8_t channels() const { return pil_mode_channels(mode); }
};

// The index keeps an l3 file's shape in files.width/height and the `script` column:
// mode | palette_entries << 8 | alpha_entries << 20.
uint32_t shape_code(const L3Shape& s);
// The shape a code stands for, in `out`; EINVAL (out unchanged) if no shape has this code.
fid::Status shape_from_code(uint32_t code, uint32_t width, uint32_t height, L3Shape& out);

struct L3Payload {
  L3Shape shape;
  std::span<const uint8_t> palette;        // 3 * palette_entries bytes
  std::span<const uint8_t> palette_alpha;  // alpha_entries bytes
  std::span<const uint8_t> l3;             // the L3 bitstream
};

// Encodes a decoded source (codec::decode_image) as a payload. Fails with EINVAL if the image
// cannot be stored losslessly (e.g. more than 256 palette entries).
fid::Result<std::vector<uint8_t>> encode_l3_payload(const SourceImage& src, const L3Options* options = nullptr);
// Parses the prefix and probes the L3 header (dimensions and channels must agree with the mode).
// The payload's spans point into `data`. EINVAL on any inconsistency.
fid::Result<L3Payload> parse_l3_payload(std::span<const uint8_t> data);

// Containers of a view. ppm means PGM (P5) for 1 channel and PPM (P6) for 3; images with 2 or 4
// channels (LA, RGBA) have no PNM that common readers take and get png instead.
enum class ViewFormat : uint8_t { png = 0, ppm = 1, npy = 2 };
std::string_view view_format_name(ViewFormat f);
// The container actually served for a shape when `requested` is asked for.
ViewFormat effective_view_format(const L3Shape& s, ViewFormat requested);
// File name extension of the effective container: ".png", ".pgm", ".ppm" or ".npy".
std::string_view view_extension(const L3Shape& s, ViewFormat requested);

// Size in bytes of the view, from the shape alone (no decoding).
uint64_t l3_view_size(const L3Shape& s, ViewFormat requested);

// Decodes an L3 bitstream into exactly width*height*channels interleaved bytes: l3_decode_into
// by default, or a batch decoder (the GPU) supplied by the mount.
using L3DecodeFn = std::function<fid::Status(std::span<const uint8_t> l3, std::span<uint8_t> pixels)>;

// Renders the whole view of a payload into `out` (exactly l3_view_size bytes). PNG: stored zlib
// blocks, filter 0, bit depth 1 for mode "1" (so PIL reads mode "1"), PLTE/tRNS for "P"; the
// pixels are decoded into a scratch buffer, then framed. PPM and NPY: header followed by the L3
// decoded straight into `out`, no extra pass. Mode "1" is 0/255 in PGM/NPY.
// Fails with EINVAL when `out` has the wrong size, or with what `decode` reports.
fid::Status render_l3_view(const L3Payload& p, ViewFormat requested, std::span<uint8_t> out,
                           const L3DecodeFn& decode = {});
// Parses a payload and renders its view into a new buffer.
fid::Result<std::vector<uint8_t>> render_l3_view(std::span<const uint8_t> payload, ViewFormat requested);

}  // namespace fid::codec
