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

// ---- constants of format version 1 ----------------------------------------------------------

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

L3_HD uint8_t predict(unsigned pred, unsigned tl, unsigned t, unsigned tr, unsigned tt) {
  switch (pred) {
    case kPredTop: return static_cast<uint8_t>(t);
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
// A coded row of n samples with segments of S = 2^seg_log2: ceil((1 + nseg) / 2) bytes of
// nibbles (low nibble first: mode, code[0], code[1], ...), one base byte per segment whose code
// has one, then each segment's packed data in order.

L3_HD unsigned row_segments(unsigned n, unsigned seg_log2) {
  return (n + (1u << seg_log2) - 1) >> seg_log2;
}
L3_HD unsigned row_header_bytes(unsigned nseg) { return (nseg + 2) >> 1; }
L3_HD unsigned nibble(const uint8_t* p, unsigned k) { return (p[k >> 1] >> ((k & 1) * 4)) & 15u; }

// Sizes a coded row without decoding it. Returns its total bytes, or 0 if it does not fit in
// `avail` bytes. Also returns the mode nibble. (Whether the mode is valid for the row is the
// caller's check.)
L3_HD size_t row_size(const uint8_t* p, size_t avail, unsigned n, unsigned seg_log2,
                      unsigned* mode) {
  if (avail < 1) return 0;
  *mode = nibble(p, 0);
  if ((*mode & 7u) == kPredCopy) return 1;
  unsigned nseg = row_segments(n, seg_log2);
  size_t hdr = row_header_bytes(nseg);
  if (avail < hdr) return 0;
  size_t size = hdr;
  unsigned seg = 1u << seg_log2;
  for (unsigned s = 0; s < nseg; ++s) {
    unsigned code = nibble(p, s + 1);
    unsigned cnt = (s + 1 == nseg) ? n - s * seg : seg;
    size += packed_bytes(cnt, code_width(code)) + (code_has_base(code) ? 1u : 0u);
  }
  return size <= avail ? size : 0;
}

// Unpacks the residuals of a coded row (already sized by row_size) into r[0..n): r = packed +
// base (mod 256). Per segment this is independent: a GPU thread per sample can do the same
// with a prefix sum over the segment sizes.
L3_HD void unpack_row(const uint8_t* p, unsigned n, unsigned seg_log2, uint8_t* r) {
  if ((nibble(p, 0) & 7u) == kPredCopy) {
    for (unsigned i = 0; i < n; ++i) r[i] = 0;
    return;
  }
  unsigned nseg = row_segments(n, seg_log2);
  const uint8_t* bases = p + row_header_bytes(nseg);
  unsigned nbases = 0;
  for (unsigned s = 0; s < nseg; ++s) nbases += code_has_base(nibble(p, s + 1)) ? 1u : 0u;
  const uint8_t* data = bases + nbases;
  unsigned seg = 1u << seg_log2;
  for (unsigned s = 0; s < nseg; ++s) {
    unsigned code = nibble(p, s + 1);
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
