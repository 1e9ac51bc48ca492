// Huffman tables optimal for a sequential encode of given coefficients (see libjpeg_glue.h).
//
// libjpeg's own optimize_coding runs the whole entropy coder once to count symbols, block by block
// and coefficient by coefficient, then once more to write; counting costs as much as writing. Here
// each block's non-zero AC coefficients become a 64-bit mask in zigzag order (a vector compare and
// eight table lookups), so a block costs one step per non-zero coefficient, and the write is libjpeg's single pass with these tables. The
// counts are exactly what the encoder will code (ITU T.81 F.1.2: DC differences per component in
// the scan's block order, AC runs, ZRL and EOB, and the edge MCUs' dummy blocks), and the tables
// follow K.2 and K.3: code lengths by Huffman's procedure with a reserved symbol so that no code is
// all ones, limited to 16 bits.
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "codec/libjpeg_glue.h"

namespace fid::codec::libjpeg {
namespace {

constexpr int kSymbols = 256;
using Counts = long[kSymbols + 1];

int magnitude_bits(int v) { return std::bit_width(static_cast<unsigned>(std::abs(v))); }

// ITU T.81 figure A.6: the natural (row-major) index of zigzag position k.
constexpr uint8_t kNatural[DCTSIZE2] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
                                        12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
                                        35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                                        58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

// For byte i of a block's natural-order mask of non-zero coefficients, and its value: those bits
// at their zigzag positions. Eight lookups turn the mask into zigzag order.
struct ZigzagBits {
  uint64_t of_byte[8][256];
};
constexpr ZigzagBits make_zigzag_bits() {
  uint8_t zigzag[DCTSIZE2] = {};
  for (int k = 0; k < DCTSIZE2; ++k) zigzag[kNatural[k]] = static_cast<uint8_t>(k);
  ZigzagBits z{};
  for (int i = 0; i < 8; ++i)
    for (int v = 0; v < 256; ++v)
      for (int j = 0; j < 8; ++j)
        if (v >> j & 1) z.of_byte[i][v] |= uint64_t{1} << zigzag[8 * i + j];
  return z;
}
constexpr ZigzagBits kZigzagBits = make_zigzag_bits();

// The block's non-zero AC coefficients as bits at their zigzag positions.
uint64_t zigzag_nonzero_ac(const JCOEF* block) {
  uint8_t nonzero[DCTSIZE2];
  for (int k = 0; k < DCTSIZE2; ++k) nonzero[k] = block[k] != 0;  // vectorizes
  uint64_t zigzag = 0;
  for (int i = 0; i < 8; ++i) {
    uint64_t natural_byte = 0;  // bit j: coefficient 8i + j is non-zero
    if constexpr (std::endian::native == std::endian::little) {
      uint64_t eight;  // eight 0/1 bytes; the product gathers byte j into bit 56 + j
      std::memcpy(&eight, nonzero + 8 * i, sizeof eight);
      natural_byte = (eight * 0x0102040810204080ull) >> 56;
    } else {
      for (int j = 0; j < 8; ++j) natural_byte |= uint64_t{nonzero[8 * i + j]} << j;
    }
    zigzag |= kZigzagBits.of_byte[i][natural_byte];
  }
  return zigzag & ~uint64_t{1};
}

void count_ac(const JCOEF* block, long* ac) {
  uint64_t nonzero = zigzag_nonzero_ac(block);
  int last = 0;
  while (nonzero != 0) {
    const int k = std::countr_zero(nonzero);
    nonzero &= nonzero - 1;
    int run = k - last - 1;
    for (; run > 15; run -= 16) ++ac[0xF0];  // ZRL
    ++ac[(run << 4) + magnitude_bits(block[kNatural[k]])];
    last = k;
  }
  if (last < DCTSIZE2 - 1) ++ac[0];  // EOB
}

// Code lengths, then bits[1..16] and the symbols in code order (K.2, K.3).
void make_table(const long* counts, JHUFF_TBL* table) {
  long freq[kSymbols + 1];
  std::memcpy(freq, counts, sizeof freq);
  freq[kSymbols] = 1;  // reserved: the all-ones code goes to it and is dropped below
  int size[kSymbols + 1] = {};
  int next[kSymbols + 1];
  std::fill(std::begin(next), std::end(next), -1);
  int used[kSymbols + 1];
  int n = 0;
  for (int s = 0; s <= kSymbols; ++s)
    if (freq[s] > 0) used[n++] = s;
  for (;;) {
    int c1 = -1, c2 = -1;  // the least frequent symbol, then the next
    for (int i = 0; i < n; ++i) {
      const int s = used[i];
      if (freq[s] == 0) continue;
      if (c1 < 0 || freq[s] <= freq[c1]) {
        c2 = c1;
        c1 = s;
      } else if (c2 < 0 || freq[s] <= freq[c2]) {
        c2 = s;
      }
    }
    if (c2 < 0) break;
    freq[c1] += freq[c2];
    freq[c2] = 0;
    for (int s = c1;; s = next[s]) {
      ++size[s];
      if (next[s] < 0) {
        next[s] = c2;
        break;
      }
    }
    for (int s = c2; s >= 0; s = next[s]) ++size[s];
  }
  int bits[2 * kSymbols + 2] = {};
  int longest = 0;
  for (int s = 0; s <= kSymbols; ++s)
    if (size[s] > 0) {
      ++bits[size[s]];
      longest = std::max(longest, size[s]);
    }
  for (int i = longest; i > 16; --i) {
    while (bits[i] > 0) {
      int j = i - 2;
      while (bits[j] == 0) --j;
      bits[i] -= 2;
      ++bits[i - 1];
      bits[j + 1] += 2;
      --bits[j];
    }
  }
  int i = 16;
  while (bits[i] == 0) --i;
  --bits[i];  // the reserved symbol's code
  std::memset(table->bits, 0, sizeof table->bits);
  for (int k = 1; k <= 16; ++k) table->bits[k] = static_cast<UINT8>(bits[k]);
  int p = 0;
  for (int len = 1; len <= longest; ++len)
    for (int s = 0; s < kSymbols; ++s)
      if (size[s] == len) table->huffval[p++] = static_cast<UINT8>(s);
  table->sent_table = FALSE;
}

// Calls visit(ci, mcu, b, block) for every block a sequential encode of `blocks` codes, each
// component's blocks in the order it codes them (T.81 F.1.2): MCU by MCU in an interleaved scan,
// else row by row (a block an MCU); `mcu` counts the scan's MCUs, `b` the component's blocks in
// it. A dummy block at an edge MCU (null) repeats the DC of the block before it and has no AC.
template <typename Visit>
void for_each_block_in_scan_order(j_decompress_ptr src, jvirt_barray_ptr* blocks, bool interleaved, Visit&& visit) {
  const auto mcu_cols = static_cast<JDIMENSION>((src->image_width + src->max_h_samp_factor * DCTSIZE - 1) /
                                                (src->max_h_samp_factor * DCTSIZE));
  const auto mcu_rows = static_cast<JDIMENSION>((src->image_height + src->max_v_samp_factor * DCTSIZE - 1) /
                                                (src->max_v_samp_factor * DCTSIZE));
  for (int ci = 0; ci < src->num_components; ++ci) {
    const jpeg_component_info& c = src->comp_info[ci];
    const JDIMENSION h = interleaved ? static_cast<JDIMENSION>(c.h_samp_factor) : 1;
    const JDIMENSION v = interleaved ? static_cast<JDIMENSION>(c.v_samp_factor) : 1;
    const JDIMENSION cols = interleaved ? mcu_cols : c.width_in_blocks;
    const JDIMENSION rows = interleaved ? mcu_rows : c.height_in_blocks;
    for (JDIMENSION r = 0; r < rows; ++r) {
      JBLOCKARRAY band = (*src->mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(src), blocks[ci], r * v, v, FALSE);
      for (JDIMENSION m = 0; m < cols; ++m)
        for (JDIMENSION y = 0; y < v; ++y)
          for (JDIMENSION x = 0; x < h; ++x) {
            const bool dummy = r * v + y >= c.height_in_blocks || m * h + x >= c.width_in_blocks;
            visit(ci, uint64_t{r} * cols + m, y * h + x, dummy ? nullptr : band[y][m * h + x]);
          }
    }
  }
}

// The DC predictions of a sequential encode: each component's starts at 0, and again at every
// restart (an MCU that is a multiple of `restart_interval`, when it is not 0).
struct DcPrediction {
  unsigned restart_interval;
  int last_ci = -1, last_dc = 0;
  // The difference `block` codes (0 for a dummy block).
  int difference(int ci, uint64_t mcu, JDIMENSION b, const JCOEF* block) {
    if (ci != last_ci || (restart_interval != 0 && b == 0 && mcu % restart_interval == 0)) last_ci = ci, last_dc = 0;
    if (!block) return 0;
    const int d = block[0] - last_dc;
    last_dc = block[0];
    return d;
  }
};

constexpr int kMaxDcBits = 11;  // T.81 F.1.2.1: an 8-bit JPEG's DC differences have categories 0..11

}  // namespace

bool dc_differences_fit(j_decompress_ptr src, jvirt_barray_ptr* blocks, bool interleaved, unsigned restart_interval) {
  bool fit = true;
  DcPrediction dc{restart_interval};
  for_each_block_in_scan_order(src, blocks, interleaved, [&](int ci, uint64_t mcu, JDIMENSION b, const JCOEF* block) {
    fit = fit && magnitude_bits(dc.difference(ci, mcu, b, block)) <= kMaxDcBits;
  });
  return fit;
}

unsigned restart_interval_for_dc(j_decompress_ptr src, jvirt_barray_ptr* blocks, bool interleaved) {
  uint64_t every = 0;  // the gcd of the MCUs whose first block's difference does not fit
  bool inside_mcu = false;
  DcPrediction dc{0};
  for_each_block_in_scan_order(src, blocks, interleaved, [&](int ci, uint64_t mcu, JDIMENSION b, const JCOEF* block) {
    if (magnitude_bits(dc.difference(ci, mcu, b, block)) <= kMaxDcBits) return;
    if (b != 0) inside_mcu = true;
    every = std::gcd(every, mcu);
  });
  if (every == 0 || inside_mcu) return 0;  // fits as it is, or no restart can help
  for (uint64_t parts = (every + kMaxRestartInterval - 1) / kMaxRestartInterval; parts <= every; ++parts)
    if (every % parts == 0) {
      const auto interval = static_cast<unsigned>(every / parts);  // the largest that divides them all
      return dc_differences_fit(src, blocks, interleaved, interval) ? interval : 0;
    }
  return 0;
}

void set_optimal_tables(j_decompress_ptr src, jvirt_barray_ptr* blocks, j_compress_ptr dst, bool interleaved) {
  Counts dc[NUM_HUFF_TBLS] = {}, ac[NUM_HUFF_TBLS] = {};
  DcPrediction prediction{dst->restart_interval};
  for_each_block_in_scan_order(src, blocks, interleaved, [&](int ci, uint64_t mcu, JDIMENSION b, const JCOEF* block) {
    long* const acs = ac[dst->comp_info[ci].ac_tbl_no];
    ++dc[dst->comp_info[ci].dc_tbl_no][magnitude_bits(prediction.difference(ci, mcu, b, block))];
    if (block) count_ac(block, acs);
    else ++acs[0];  // a dummy block: no AC, an EOB
  });
  for (int t = 0; t < NUM_HUFF_TBLS; ++t) {
    const bool dc_used = std::any_of(std::begin(dc[t]), std::end(dc[t]), [](long n) { return n > 0; });
    const bool ac_used = std::any_of(std::begin(ac[t]), std::end(ac[t]), [](long n) { return n > 0; });
    if (dc_used) {
      if (!dst->dc_huff_tbl_ptrs[t]) dst->dc_huff_tbl_ptrs[t] = jpeg_alloc_huff_table(reinterpret_cast<j_common_ptr>(dst));
      make_table(dc[t], dst->dc_huff_tbl_ptrs[t]);
    }
    if (ac_used) {
      if (!dst->ac_huff_tbl_ptrs[t]) dst->ac_huff_tbl_ptrs[t] = jpeg_alloc_huff_table(reinterpret_cast<j_common_ptr>(dst));
      make_table(ac[t], dst->ac_huff_tbl_ptrs[t]);
    }
  }
}

}  // namespace fid::codec::libjpeg
