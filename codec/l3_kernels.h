// L3 per-row and per-pixel kernels shared by the CPU decoder/encoder and (later) the CUDA
// decoder. Plain functions on raw pointers: no std:: containers, no exceptions, no allocation,
// so each can be compiled as __host__ __device__. The bitstream they read is specified in
// docs/L3_FORMAT.md; the names below follow that document.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define L3_HD __host__ __device__ __forceinline__
#else
#define L3_HD inline
#endif

namespace fid::l3k {

// ---- constants of format versions 1 and 2 -----------------------------------------------------

inline constexpr unsigned kMaxPatch = 1024;  // patch side N is 1..1024
inline constexpr unsigned kMinSegLog2 = 3;   // segments of 8..64 samples
inline constexpr unsigned kMaxSegLog2 = 6;
inline constexpr unsigned kMaxSegments = kMaxPatch >> kMinSegLog2;  // per row of a patch

// Row predictors (low 3 bits of a row's mode nibble). TL/T/TR: the previous row of the same
// patch and plane at x-1, x, x+1 (clamped to the patch's columns); TT: the row above that.
inline constexpr unsigned kPredTop = 0;     // T
inline constexpr unsigned kPredDiag = 1;    // (TL + TR + 1) >> 1
inline constexpr unsigned kPredSmooth = 2;  // (TL + 2T + TR + 2) >> 2
inline constexpr unsigned kPredMedian = 3;  // median(TL, T, TR)
inline constexpr unsigned kPredPaeth = 4;   // the published L3 "Paeth" over TL, T, TR
inline constexpr unsigned kPredGrad = 5;    // clamp(2T - TT, 0, 255)
inline constexpr unsigned kNumPredictors = 6;
// Predictor value 7 in a row with a row above: "copy", every residual is 0 (value = T, plus
// the first plane's residual with the cross bit). The row is one byte: mode nibble, then a
// zero nibble; no segment codes, no data.
inline constexpr unsigned kPredCopy = 7;
// In the first coded row of a patch (no row above) only these two are valid:
inline constexpr unsigned kFirstLeft = 0;   // left neighbour in the same row (x = 0: 128)
inline constexpr unsigned kFirstConst = 1;  // constant 128
inline constexpr unsigned kNumFirstPredictors = 2;
inline constexpr unsigned kModeCross = 8;  // mode bit 3: add the first plane's residual

// Version 2 only. A patch starts with one byte: low nibble its kind, high nibble the segment
// length (seg_log2, 3..6) of a coded patch, 0 for a constant one.
inline constexpr unsigned kPatchCoded = 0;     // coded rows follow, as in version 1
inline constexpr unsigned kPatchConstant = 1;  // C bytes follow: the one colour of every pixel
// A copy row's high nibble h is a run: the copy also covers the next h rows of the same plane
// (h = 15: the next byte b is added, 15 + b rows); covered rows are absent from the stream.
inline constexpr unsigned kMaxCopyRun = 15 + 255;

// Version 2: the rows a copy row at p covers after itself, and the row's size (1 or 2 bytes);
// 0 if the run's second byte is past `avail`.
L3_HD size_t read_copy_run(const uint8_t* p, size_t avail, unsigned* run) {
  const unsigned h = p[0] >> 4;
  if (h < 15) {
    *run = h;
    return 1;
  }
  if (avail < 2) return 0;
  *run = 15 + p[1];
  return 2;
}

// Channel coding order: the first plane coded is the cross-channel reference.
// 1: gray; 2: gray, alpha; 3: G, R, B; 4: G, R, B, A.
L3_HD unsigned plane_of(unsigned channels, unsigned k) {
  if (channels < 3) return k;
  return k == 0 ? 1u : k == 1 ? 0u : k;
}

// ---- segment codes ----------------------------------------------------------------------------
// A 4-bit code per segment: 0..8 = width 0..8 with the implicit base (-2^(w-1) mod 256, 0 for
// w = 0); 9..15 = width 0..6 followed by an explicit base byte.

L3_HD unsigned code_width(unsigned code) { return code <= 8 ? code : code - 9; }
L3_HD bool code_has_base(unsigned code) { return code > 8; }
L3_HD uint8_t implicit_base(unsigned w) {
  return w == 0 ? uint8_t{0} : static_cast<uint8_t>(256u - (1u << (w - 1)));
}
// Bytes of packed data for n samples of w bits (groups of 8 samples are w bytes each).
L3_HD size_t packed_bytes(size_t n, unsigned w) { return (n * w + 7) >> 3; }

L3_HD uint64_t load_le(const uint8_t* p, unsigned nbytes) {
  uint64_t v = 0;
  for (unsigned i = 0; i < nbytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Sample i (0..7) of a group of 8 samples packed LSB-first in `word`.
L3_HD unsigned unpack_one(uint64_t word, unsigned i, unsigned w) {
  return static_cast<unsigned>(word >> (i * w)) & ((1u << w) - 1u);
}

// ---- prediction -------------------------------------------------------------------------------

L3_HD int l3_abs(int v) { return v < 0 ? -v : v; }

// Predictor kPredCopy predicts T like top (its residuals are all 0).
L3_HD uint8_t predict(unsigned pred, unsigned tl, unsigned t, unsigned tr, unsigned tt) {
  switch (pred) {
    case kPredTop:
    case kPredCopy: return static_cast<uint8_t>(t);
    case kPredDiag: return static_cast<uint8_t>((tl + tr + 1) >> 1);
    case kPredSmooth: return static_cast<uint8_t>((tl + 2 * t + tr + 2) >> 2);
    case kPredMedian: {
      unsigned lo = tl < tr ? tl : tr, hi = tl < tr ? tr : tl;
      return static_cast<uint8_t>(t < lo ? lo : t > hi ? hi : t);
    }
    case kPredPaeth: {
      int p = static_cast<int>(tl + tr) - static_cast<int>(t);
      int dtl = l3_abs(p - static_cast<int>(tl)), dt = l3_abs(p - static_cast<int>(t)),
          dtr = l3_abs(p - static_cast<int>(tr));
      if (dt <= dtl && dt <= dtr) return static_cast<uint8_t>(t);
      return static_cast<uint8_t>(dtl <= dtr ? tl : tr);
    }
    default: {  // kPredGrad
      int g = 2 * static_cast<int>(t) - static_cast<int>(tt);
      return static_cast<uint8_t>(g < 0 ? 0 : g > 255 ? 255 : g);
    }
  }
}

// ---- row layout -------------------------------------------------------------------------------
// A coded row of n samples with segments of S = 2^seg_log2 starts with its header: the mode in
// the low nibble of byte 0, then the nseg segment codes, either as nibbles (byte 0's high
// nibble, then low nibble first: ceil((1 + nseg) / 2) bytes) or, with the image's
// entropy-coded-codes flag, as canonical Huffman codes (bits LSB-first from bit 4 of byte 0,
// the table chosen by the code of the same segment in the row above; the header is padded
// to a byte). A copy row (predictor 7) is the single mode byte. The body follows: one base
// byte per segment whose code has one, then each segment's packed data in order.

L3_HD unsigned row_segments(unsigned n, unsigned seg_log2) {
  return (n + (1u << seg_log2) - 1) >> seg_log2;
}
L3_HD unsigned row_header_bytes(unsigned nseg) { return (nseg + 2) >> 1; }
L3_HD unsigned nibble(const uint8_t* p, unsigned k) { return (p[k >> 1] >> ((k & 1) * 4)) & 15u; }

// Canonical Huffman decoding table for one context: count[len] codes of each length 1..15,
// symbols listed by (length, value). Codes are read MSB-first (the first bit read is the
// code's most significant bit), as in DEFLATE.
struct HuffTable {
  uint16_t count[16];
  uint8_t symbol[16];
};

// Builds a table from 16 code lengths (0 = unused symbol). False if the lengths are
// over-subscribed (an incomplete code is allowed; its missing codes are decode errors).
L3_HD bool build_table(const uint8_t* lengths, HuffTable* t) {
  for (unsigned l = 0; l < 16; ++l) t->count[l] = 0;
  for (unsigned s = 0; s < 16; ++s) t->count[lengths[s] & 15u]++;
  t->count[0] = 0;
  int left = 1;
  for (unsigned l = 1; l < 16; ++l) {
    left <<= 1;
    left -= t->count[l];
    if (left < 0) return false;
  }
  unsigned offs[16];
  offs[1] = 0;
  for (unsigned l = 1; l < 15; ++l) offs[l + 1] = offs[l] + t->count[l];
  for (unsigned s = 0; s < 16; ++s) t->symbol[s] = 0;
  for (unsigned s = 0; s < 16; ++s)
    if (lengths[s] & 15u) t->symbol[offs[lengths[s] & 15u]++] = static_cast<uint8_t>(s);
  return true;
}

// Reads one symbol at bit position *bit of p[0..avail); -1 if invalid or out of data.
L3_HD int read_symbol(const uint8_t* p, size_t avail, size_t* bit, const HuffTable* t) {
  int code = 0, first = 0, index = 0;
  for (unsigned len = 1; len < 16; ++len) {
    size_t b = *bit;
    if ((b >> 3) >= avail) return -1;
    code |= (p[b >> 3] >> (b & 7)) & 1;
    *bit = b + 1;
    int count = t->count[len];
    if (code - first < count) return t->symbol[index + code - first];
    index += count;
    first = (first + count) << 1;
    code <<= 1;
  }
  return -1;
}

// Parses a row header: the mode and the nseg codes (all 0 for a copy row). `tables` is null
// for nibble codes, else 16 tables indexed by above[s] (the codes of the previous row of the
// same plane and patch; 0s for the first row). Returns the header's bytes, 0 on error.
// `codes` may be the same array as `above` (above[s] is read before codes[s] is written).
L3_HD size_t read_row_header(const uint8_t* p, size_t avail, unsigned nseg,
                             const HuffTable* tables, const uint8_t* above, unsigned* mode,
                             uint8_t* codes) {
  if (avail < 1) return 0;
  *mode = p[0] & 15u;
  if ((*mode & 7u) == kPredCopy) {
    for (unsigned s = 0; s < nseg; ++s) codes[s] = 0;
    return 1;
  }
  if (!tables) {
    size_t hdr = row_header_bytes(nseg);
    if (avail < hdr) return 0;
    for (unsigned s = 0; s < nseg; ++s) codes[s] = static_cast<uint8_t>(nibble(p, s + 1));
    return hdr;
  }
  size_t bit = 4;
  for (unsigned s = 0; s < nseg; ++s) {
    int sym = read_symbol(p, avail, &bit, &tables[above[s] & 15u]);
    if (sym < 0) return 0;
    codes[s] = static_cast<uint8_t>(sym);
  }
  return (bit + 7) >> 3;
}

// Bytes of a row's body (bases + packed data) for its codes.
L3_HD size_t row_body_size(const uint8_t* codes, unsigned n, unsigned seg_log2) {
  unsigned nseg = row_segments(n, seg_log2);
  unsigned seg = 1u << seg_log2;
  size_t size = 0;
  for (unsigned s = 0; s < nseg; ++s) {
    unsigned cnt = (s + 1 == nseg) ? n - s * seg : seg;
    size += packed_bytes(cnt, code_width(codes[s])) + (code_has_base(codes[s]) ? 1u : 0u);
  }
  return size;
}

// Unpacks a row body (sized by row_body_size) into r[0..n): r = packed + base (mod 256). Per
// segment this is independent: a GPU thread per sample can do the same with a prefix sum over
// the segment sizes.
L3_HD void unpack_row(const uint8_t* body, const uint8_t* codes, unsigned n, unsigned seg_log2,
                      uint8_t* r) {
  unsigned nseg = row_segments(n, seg_log2);
  const uint8_t* bases = body;
  unsigned nbases = 0;
  for (unsigned s = 0; s < nseg; ++s) nbases += code_has_base(codes[s]) ? 1u : 0u;
  const uint8_t* data = bases + nbases;
  unsigned seg = 1u << seg_log2;
  for (unsigned s = 0; s < nseg; ++s) {
    unsigned code = codes[s];
    unsigned w = code_width(code);
    uint8_t base = code_has_base(code) ? *bases++ : implicit_base(w);
    unsigned x0 = s * seg;
    unsigned cnt = (s + 1 == nseg) ? n - x0 : seg;
    uint8_t* out = r + x0;
    if (w == 0) {
      for (unsigned i = 0; i < cnt; ++i) out[i] = base;
      continue;
    }
    unsigned full = cnt >> 3;
    for (unsigned g = 0; g < full; ++g) {
      uint64_t word = load_le(data, w);
      data += w;
      for (unsigned i = 0; i < 8; ++i)
        out[8 * g + i] = static_cast<uint8_t>(unpack_one(word, i, w) + base);
    }
    unsigned rest = cnt & 7u;
    if (rest) {
      unsigned nb = static_cast<unsigned>(packed_bytes(rest, w));
      uint64_t word = load_le(data, nb);
      data += nb;
      for (unsigned i = 0; i < rest; ++i)
        out[8 * full + i] = static_cast<uint8_t>(unpack_one(word, i, w) + base);
    }
  }
}

// Reconstructs one sample of a row that has a row above (row-parallel: depends on the previous
// rows and, with the cross bit, on the first plane's residual at the same x only).
// T points at the previous row with T[-1] == T[0] and T[n] == T[n-1] (edge replication).
L3_HD uint8_t reconstruct(unsigned mode, const uint8_t* T, const uint8_t* TT, unsigned x,
                          uint8_t r, uint8_t eref) {
  const uint8_t* t = T + x;
  uint8_t pr = predict(mode & 7u, t[-1], t[0], t[1], TT[x]);
  return static_cast<uint8_t>(pr + r + ((mode & kModeCross) ? eref : 0));
}

}  // namespace fid::l3k
