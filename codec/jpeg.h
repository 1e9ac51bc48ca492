// Lossless JPEG -> progressive JPEG transcoding with fixed scan scripts, and the cut of the
// result into fidelity levels. Works on byte buffers only: no files, no FUSE.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "common/error.h"

namespace fid::codec {

// Every transcoded JPEG has this many levels (scan groups). Level k = header + groups 1..k + EOI.
inline constexpr int kJpegLevels = 10;

// The two families of scan scripts a store can use (`pack --levels`), documented in
// docs/FORMAT.md. `pcr` is libjpeg's standard progression (the PCR paper's levels), the best
// quality for the bytes at low levels; `fast` uses spectral selection only, which libjpeg-turbo
// decodes faster, for loaders bound by their CPU rather than by I/O.
enum class LevelScripts : uint8_t { pcr, fast };

// Which fixed scan script an image got; recorded in the index and documented in docs/FORMAT.md.
enum class ScanScript : uint8_t {
  ycbcr = 0,         // pcr, 3 components, YCbCr: libjpeg's standard 10-scan script
  generic = 1,       // pcr, any other component count/colour space (gray, RGB, CMYK, YCCK)
  ycbcr_fast = 2,    // fast, 3 components, YCbCr
  generic_fast = 3,  // fast, every other image
};
inline constexpr int kScanScripts = 4;
// "ycbcr", "generic", "ycbcr_fast", "generic_fast"; "unknown" for any other value.
const char* scan_script_name(uint32_t script);

// A progressive JPEG stream cut at level boundaries. `bytes` is the whole transcoded stream
// without its final EOI; piece 0 (SOI..SOF2 and the kept APPn/COM/DQT markers) ends at
// piece_end[0], level k ends at piece_end[k]. The file at level k is bytes[0, piece_end[k]) + EOI.
struct ProgressiveJpeg {
  std::vector<uint8_t> bytes;
  std::array<uint32_t, kJpegLevels + 1> piece_end{};
  ScanScript script = ScanScript::generic;
  int width = 0;
  int height = 0;
  int components = 0;

  std::span<const uint8_t> piece(int i) const {
    uint32_t begin = i == 0 ? 0 : piece_end[i - 1];
    return {bytes.data() + begin, piece_end[i] - begin};
  }
};

// True if the buffer starts with a JPEG SOI followed by a marker (FF D8 FF).
bool looks_like_jpeg(std::span<const uint8_t> data);

// Losslessly transcodes any JPEG libjpeg-turbo can read (baseline, progressive, arithmetic,
// restart markers, any sampling, gray/RGB/CMYK) to a progressive Huffman JPEG with the same
// DCT coefficients, keeping APPn and COM markers. Any libjpeg warning (corrupt or truncated
// data) is an error: such sources are stored byte-identical instead. `scripts` picks the family
// of scan scripts. Errors: EINVAL with why the source cannot be transcoded (libjpeg's message),
// ENOMEM when memory runs out.
fid::Result<ProgressiveJpeg> transcode_progressive(std::span<const uint8_t> source,
                                                   LevelScripts scripts = LevelScripts::pcr);

// A baseline JPEG of gray or RGB samples at `quality` (1-100, libjpeg's scale), 4:2:0 for RGB,
// with libjpeg's standard Huffman tables (pack's transcode optimizes them). EINVAL for other
// channel counts or sizes a JPEG cannot have, ENOMEM when memory runs out.
struct ImageView;  // codec/image.h
fid::Result<std::vector<uint8_t>> encode_jpeg(const ImageView& image, int quality);

// A fully decoded JPEG: the samples in libjpeg's output colour space, interleaved.
struct DecodedImage {
  int width = 0;
  int height = 0;
  int components = 0;
  std::vector<uint8_t> pixels;
};
// Decodes a JPEG fully. Fails with the first libjpeg warning or error (EINVAL; ENOMEM when
// memory runs out).
fid::Result<DecodedImage> decode_jpeg_strict(std::span<const uint8_t> jpeg);

// How a sequential JPEG's Huffman tables are chosen: the standard tables of ITU T.81 K.3 (one
// pass) or tables optimized for the image (two passes, smaller). docs/BENCHMARKS.md measures both.
enum class HuffmanTables : uint8_t { standard, optimized };

// A JPEG (in fidelityfs, a progressive level) re-encoded as one sequential Huffman scan whose
// default libjpeg-turbo decode, block smoothing on, has exactly the pixels of the input's default
// decode: the smoothing estimates of missing coefficients are written into the coefficients.
// APPn and COM markers are kept. A value outside what a sequential 8-bit JPEG codes (T.81
// F.1.2: AC within -1023..1023, DC differences of 11 bits; estimates leave it where a quantiser is
// 1) is moved to the nearest one that gives its block the same samples. Errors: ENOTSUP where no
// sequential JPEG has the level's pixels (the message says which value is out of range), EINVAL
// with libjpeg's message (any warning counts), ENOMEM when memory runs out.
fid::Result<std::vector<uint8_t>> sequential_from_progressive(std::span<const uint8_t> jpeg, HuffmanTables tables);

// The most memory sequential_from_progressive holds for a level of `level_bytes` bytes, from its
// header (the stream up to its frame header is enough): the level, the decoder's coefficients, the
// copy re-encoded, and the output at up to two bytes a coefficient. EINVAL if `header` has no
// well-formed frame header.
fid::Result<uint64_t> sequential_memory(std::span<const uint8_t> header, uint64_t level_bytes);

// The two bytes every level-k file ends with.
inline constexpr std::array<uint8_t, 2> kEoi{0xFF, 0xD9};

}  // namespace fid::codec
