// Internal to the L3 encoder (codec/l3_encode.cpp chooses, codec/l3_write.cpp writes): a patch
// as coded rows (modes, segment codes, bodies) before its row headers are serialised, so that
// its size can be measured with nibble and with Huffman headers, and the smaller written.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/image.h"
#include "codec/l3.h"
#include "codec/l3_kernels.h"
#include "common/error.h"

namespace fid::codec::l3detail {

inline constexpr uint16_t kCovered = 0xffff;

// The coded rows of one patch, before their headers are serialised (nibbles or Huffman).
struct PatchRec {
  unsigned kind = l3k::kPatchCoded;  // v2: kPatchConstant has only `color`
  std::array<uint8_t, 4> color{};
  unsigned seg_log2 = 0;
  unsigned nseg = 0;
  std::vector<uint16_t> run;       // v2, per coded row: rows a copy row covers after itself, or
                                   // kCovered for a row inside such a run (absent from the stream)
  std::vector<uint8_t> modes;      // per coded row, in (y, plane order) order
  std::vector<uint8_t> codes;      // nseg per coded row (zeros for copy rows)
  std::vector<uint32_t> body_len;  // bases + packed data bytes per coded row
  std::vector<uint8_t> body;
};

// Huffman code lengths [context][symbol] of the segment codes.
using CodeLengths = std::array<std::array<uint8_t, 16>, 16>;

// Bytes of a patch (headers as nibbles, or Huffman codes of `lens`; bodies; v2's patch byte).
size_t patch_bytes(const PatchRec& r, unsigned C, bool v2, const CodeLengths* lens);

// Huffman code lengths per context from the segment codes of the coded patches.
CodeLengths code_lengths(const std::vector<PatchRec>& recs, unsigned C);

// The file: header, patch offsets, the patches `recs` in order. `lens` null: nibble row
// headers, else Huffman codes with these lengths. `size_hint`: the expected size of the data.
// EINVAL when the file would exceed 4 GiB.
fid::Result<std::vector<uint8_t>> write_l3_file(const ImageView& im, const L3Options& opt, uint32_t patch_size,
                                                unsigned seg_log2, const std::vector<PatchRec>& recs,
                                                const CodeLengths* lens, uint64_t size_hint);

}  // namespace fid::codec::l3detail
