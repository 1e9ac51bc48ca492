// Internal to the L3 CPU decoder (codec/l3_decode.cpp): its per-row kernels, with SSE2/SSSE3
// paths where the CPU has them (SSSE3 chosen at run time) and the plain l3k:: kernels
// elsewhere. Each gives exactly the result of the l3k:: function it stands for. In a header
// (of functions local to its includer) so that the decoder's row loop can inline them.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define L3_X86 1
#endif

#include "codec/l3_kernels.h"

namespace fid::codec::l3cpu {
// Internal linkage, for the one file that includes this header: GCC inlines a local function
// called once (the SSSE3 segment loops into their row function), not an inline one of a header.
namespace {

using namespace fid::l3k;

#if defined(L3_X86)
// Unpacking with SSSE3, one group of 8 samples per step whatever its width: a byte shuffle
// puts the 2 bytes holding sample i in 16-bit lane i, a multiply by 2^(16 - offset - w) moves
// its field to the lane's top bits and a shift by 16 - w brings it down. Widths change from one
// segment to the next, so per-width tables beat per-width code (a switch on the width
// mispredicts about as often as widths change).
struct UnpackCode {
  __m128i shuffle;  // lane i <- bytes (i*w)/8 and the next one (0x80: zero)
  __m128i mul;      // lane i: 2^(16 - (i*w)%8 - w); 0 for w = 0
  __m128i shift;    // 16 - w, as _mm_srl_epi16 takes it
  uint8_t width, base, has_base;
};
const std::array<UnpackCode, 16> kUnpackCodes = [] {
  std::array<UnpackCode, 16> t{};
  for (unsigned code = 0; code < 16; ++code) {
    const unsigned w = code_width(code);
    alignas(16) uint8_t sh[16];
    alignas(16) uint16_t mul[8];
    for (unsigned i = 0; i < 8; ++i) {
      const unsigned lo = (i * w) >> 3, off = (i * w) & 7u;
      sh[2 * i] = w ? static_cast<uint8_t>(lo) : uint8_t{0x80};
      sh[2 * i + 1] = w && lo + 1 < 8 ? static_cast<uint8_t>(lo + 1) : uint8_t{0x80};
      mul[i] = w ? static_cast<uint16_t>(1u << (16 - off - w)) : uint16_t{0};
    }
    std::memcpy(&t[code].shuffle, sh, 16);
    std::memcpy(&t[code].mul, mul, 16);
    t[code].shift = _mm_cvtsi32_si128(static_cast<int>(16 - w));
    t[code].width = static_cast<uint8_t>(w);
    t[code].base = code_has_base(code) ? uint8_t{0} : implicit_base(w);
    t[code].has_base = code_has_base(code) ? 1 : 0;
  }
  return t;
}();

// One segment's `groups` groups of 8 samples from `data` (each one 8-byte load, so 8 bytes
// must be readable from every group's start); returns the data after them.
__attribute__((target("ssse3"))) inline const uint8_t* unpack_groups_ssse3(
    const UnpackCode& u, __m128i vbase, const uint8_t* data, unsigned groups, uint8_t* __restrict r) {
  for (unsigned i = 0; i < groups; ++i) {
    __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(data));
    v = _mm_srl_epi16(_mm_mullo_epi16(_mm_shuffle_epi8(v, u.shuffle), u.mul), u.shift);
    v = _mm_add_epi8(_mm_packus_epi16(v, v), vbase);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(r + 8 * i), v);
    data += u.width;
  }
  return data;
}

// A row whose body ends at least 8 bytes before the patch does, with segments of kGroups
// groups: no bounds checks. A short last group is unpacked in full (its samples past the
// row's end are scratch; its packed bytes are a prefix of a full group's).
template <unsigned kGroups>
__attribute__((target("ssse3"))) void unpack_segments_ssse3(const uint8_t* bases,
                                                            const uint8_t* data,
                                                            const uint8_t* codes, unsigned n,
                                                            uint8_t* __restrict r) {
  const __m128i zero = _mm_setzero_si128();
  const unsigned nseg = (n + 8 * kGroups - 1) / (8 * kGroups);
  for (unsigned s = 0; s < nseg; ++s) {
    const UnpackCode& u = kUnpackCodes[codes[s]];
    // Branch-free base: explicit bases come and go from one segment to the next. (*bases is
    // readable: at worst it is the body's end, 8 bytes before the patch's.)
    const unsigned base = (*bases & (0u - u.has_base)) | u.base;
    bases += u.has_base;
    const __m128i vbase = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(base)), zero);
    const unsigned x0 = s * 8 * kGroups;
    if (s + 1 < nseg)
      data = unpack_groups_ssse3(u, vbase, data, kGroups, r + x0);
    else
      unpack_groups_ssse3(u, vbase, data, (n - x0 + 7) >> 3, r + x0);
  }
}

// Same result as l3k::unpack_row for a body of `body_bytes` (row_body_size) that starts
// `nbases` base bytes before its packed data; `end` is the patch's end. r needs room for the
// row rounded up to whole groups of 8.
__attribute__((target("ssse3"))) inline void unpack_row_ssse3(const uint8_t* body, size_t body_bytes,
                                                       const uint8_t* end, const uint8_t* codes,
                                                       unsigned n, unsigned seg_log2,
                                                       unsigned nbases, uint8_t* __restrict r) {
  const uint8_t* bases = body;
  const uint8_t* data = body + nbases;
  const unsigned nseg = row_segments(n, seg_log2);
  if (end - (body + body_bytes) >= 8) {
    switch (seg_log2) {
      case 3: return unpack_segments_ssse3<1>(bases, data, codes, n, r);
      case 4: return unpack_segments_ssse3<2>(bases, data, codes, n, r);
      case 5: return unpack_segments_ssse3<4>(bases, data, codes, n, r);
      default: return unpack_segments_ssse3<8>(bases, data, codes, n, r);
    }
  }
  // Near the patch's end: 8-byte loads while 8 bytes are left, then sample by sample.
  const unsigned groups_per_seg = 1u << (seg_log2 - 3);
  const unsigned full = n >> 3, groups = (n + 7) >> 3;
  unsigned g = 0;
  for (unsigned s = 0; s < nseg; ++s) {
    const UnpackCode& u = kUnpackCodes[codes[s]];
    const uint8_t base = u.has_base ? *bases : u.base;
    bases += u.has_base;
    const __m128i vbase = _mm_set1_epi8(static_cast<char>(base));
    const unsigned gend = std::min(g + groups_per_seg, groups);
    for (; g < gend; ++g) {
      if (g < full && end - data >= 8) {
        data = unpack_groups_ssse3(u, vbase, data, 1, r + 8 * g);
      } else {
        const unsigned cnt = std::min(8u, n - 8 * g);
        const unsigned nb = static_cast<unsigned>(packed_bytes(cnt, u.width));
        const uint64_t word = load_le(data, nb);
        data += nb;
        for (unsigned i = 0; i < cnt; ++i)
          r[8 * g + i] = static_cast<uint8_t>(unpack_one(word, i, u.width) + base);
      }
    }
  }
}
const bool kHasSsse3 = __builtin_cpu_supports("ssse3");
#endif

inline void unpack_row_fast(const uint8_t* body, size_t body_bytes, const uint8_t* end,
                     const uint8_t* codes, unsigned n, unsigned seg_log2, unsigned nbases,
                     uint8_t* __restrict r) {
#if defined(L3_X86)
  if (kHasSsse3) return unpack_row_ssse3(body, body_bytes, end, codes, n, seg_log2, nbases, r);
#endif
  (void)body_bytes;
  (void)end;
  (void)nbases;
  unpack_row(body, codes, n, seg_log2, r);
}

template <unsigned P>
void recon_rows(const uint8_t* __restrict T, const uint8_t* __restrict TT,
                const uint8_t* __restrict r, const uint8_t* __restrict e, uint8_t* __restrict out,
                unsigned n) {
  unsigned x = 0;
#if defined(__SSE2__)
  // Vector path for all predictors but Paeth (rare); each lane does exactly what predict() does.
  if constexpr (P != kPredPaeth) {
    for (; x + 16 <= n; x += 16) {
      __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(T + x));
      __m128i pr;
      if constexpr (P == kPredTop) {
        pr = t;
      } else if constexpr (P == kPredGrad) {  // 2T - TT in 16 bits, clamped by the pack
        const __m128i zero = _mm_setzero_si128();
        __m128i tt = _mm_loadu_si128(reinterpret_cast<const __m128i*>(TT + x));
        __m128i lo = _mm_sub_epi16(_mm_slli_epi16(_mm_unpacklo_epi8(t, zero), 1), _mm_unpacklo_epi8(tt, zero));
        __m128i hi = _mm_sub_epi16(_mm_slli_epi16(_mm_unpackhi_epi8(t, zero), 1), _mm_unpackhi_epi8(tt, zero));
        pr = _mm_packus_epi16(lo, hi);
      } else {
        __m128i tl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(T + x - 1));
        __m128i tr = _mm_loadu_si128(reinterpret_cast<const __m128i*>(T + x + 1));
        if constexpr (P == kPredDiag) {
          pr = _mm_avg_epu8(tl, tr);  // (a + b + 1) >> 1
        } else if constexpr (P == kPredSmooth) {
          // (TL + 2T + TR + 2) >> 2 == avg(T, floor((TL + TR) / 2)), avg rounding up
          __m128i half = _mm_sub_epi8(_mm_avg_epu8(tl, tr), _mm_and_si128(_mm_xor_si128(tl, tr), _mm_set1_epi8(1)));
          pr = _mm_avg_epu8(t, half);
        } else {
          pr = _mm_max_epu8(_mm_min_epu8(tl, tr), _mm_min_epu8(_mm_max_epu8(tl, tr), t));
        }
      }
      __m128i rv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + x));
      __m128i ev = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e + x));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + x),
                       _mm_add_epi8(_mm_add_epi8(pr, rv), ev));
    }
  }
#endif
  for (; x < n; ++x) {
    const uint8_t* t = T + x;
    out[x] = static_cast<uint8_t>(predict(P, t[-1], t[0], t[1], TT[x]) + r[x] + e[x]);
  }
}

#if defined(L3_X86)
// 3 planes -> RGB with SSSE3 byte shuffles, 16 pixels per step (runtime-dispatched).
__attribute__((target("ssse3"))) inline void interleave3_ssse3(const uint8_t* a, const uint8_t* b,
                                                        const uint8_t* c, unsigned n,
                                                        uint8_t* dst) {
  // Output byte j of 48 holds plane j % 3 of pixel j / 3.
  alignas(16) static const std::array<std::array<std::array<uint8_t, 16>, 3>, 3> masks = [] {
    std::array<std::array<std::array<uint8_t, 16>, 3>, 3> m{};
    for (unsigned blk = 0; blk < 3; ++blk)
      for (unsigned plane = 0; plane < 3; ++plane)
        for (unsigned jj = 0; jj < 16; ++jj) {
          unsigned j = 16 * blk + jj;
          m[blk][plane][jj] = (j % 3 == plane) ? static_cast<uint8_t>(j / 3) : uint8_t{0x80};
        }
    return m;
  }();
  unsigned x = 0;
  for (; x + 16 <= n; x += 16) {
    __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + x));
    __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + x));
    __m128i vc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + x));
    for (unsigned blk = 0; blk < 3; ++blk) {
      __m128i o = _mm_or_si128(
          _mm_or_si128(
              _mm_shuffle_epi8(va, _mm_load_si128(reinterpret_cast<const __m128i*>(masks[blk][0].data()))),
              _mm_shuffle_epi8(vb, _mm_load_si128(reinterpret_cast<const __m128i*>(masks[blk][1].data())))),
          _mm_shuffle_epi8(vc, _mm_load_si128(reinterpret_cast<const __m128i*>(masks[blk][2].data()))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 3 * x + 16 * blk), o);
    }
  }
  for (; x < n; ++x) {
    dst[3 * x] = a[x];
    dst[3 * x + 1] = b[x];
    dst[3 * x + 2] = c[x];
  }
}
#endif

template <unsigned C>
void interleave(const std::array<const uint8_t*, 4>& planes, unsigned n, uint8_t* __restrict dst) {
  const uint8_t* __restrict a = planes[0];
  if constexpr (C == 1) {
    std::memcpy(dst, a, n);
  } else {
    const uint8_t* __restrict b = planes[1];
    unsigned x = 0;
    if constexpr (C == 2) {
#if defined(__SSE2__)
      for (; x + 16 <= n; x += 16) {
        __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + x));
        __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + x));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * x), _mm_unpacklo_epi8(va, vb));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * x + 16), _mm_unpackhi_epi8(va, vb));
      }
#endif
      for (; x < n; ++x) {
        dst[2 * x] = a[x];
        dst[2 * x + 1] = b[x];
      }
    } else {
      const uint8_t* __restrict c = planes[2];
      if constexpr (C == 3) {
#if defined(L3_X86)
        if (kHasSsse3) {
          interleave3_ssse3(a, b, c, n, dst);
          return;
        }
#endif
        for (; x < n; ++x) {
          dst[3 * x] = a[x];
          dst[3 * x + 1] = b[x];
          dst[3 * x + 2] = c[x];
        }
      } else {
        const uint8_t* __restrict d = planes[3];
#if defined(__SSE2__)
        for (; x + 16 <= n; x += 16) {
          __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + x));
          __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + x));
          __m128i vc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + x));
          __m128i vd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + x));
          __m128i ab0 = _mm_unpacklo_epi8(va, vb), ab1 = _mm_unpackhi_epi8(va, vb);
          __m128i cd0 = _mm_unpacklo_epi8(vc, vd), cd1 = _mm_unpackhi_epi8(vc, vd);
          __m128i* o = reinterpret_cast<__m128i*>(dst + 4 * x);
          _mm_storeu_si128(o, _mm_unpacklo_epi16(ab0, cd0));
          _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(ab0, cd0));
          _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(ab1, cd1));
          _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(ab1, cd1));
        }
#endif
        for (; x < n; ++x) {
          dst[4 * x] = a[x];
          dst[4 * x + 1] = b[x];
          dst[4 * x + 2] = c[x];
          dst[4 * x + 3] = d[x];
        }
      }
    }
  }
}

// Row n of a plane from the rows above it (T, TT, each with its edge cells) and its residuals
// r (plus e, the first plane's residuals or zeros) with row predictor `pred`; copy rows (their
// r is all zero) are top-predicted.
inline void recon_row(unsigned pred, const uint8_t* T, const uint8_t* TT, const uint8_t* r, const uint8_t* e,
                      uint8_t* out, unsigned n) {
  switch (pred) {
    case 0: recon_rows<0>(T, TT, r, e, out, n); break;
    case 1: recon_rows<1>(T, TT, r, e, out, n); break;
    case 2: recon_rows<2>(T, TT, r, e, out, n); break;
    case 3: recon_rows<3>(T, TT, r, e, out, n); break;
    case 4: recon_rows<4>(T, TT, r, e, out, n); break;
    case 5: recon_rows<5>(T, TT, r, e, out, n); break;
    default: recon_rows<0>(T, TT, r, e, out, n); break;  // copy: r is all zero
  }
}

// n pixels of `channels` planes (planes[0..channels)) interleaved into dst.
inline void interleave_row(unsigned channels, const std::array<const uint8_t*, 4>& planes, unsigned n,
                           uint8_t* __restrict dst) {
  switch (channels) {
    case 1: interleave<1>(planes, n, dst); break;
    case 2: interleave<2>(planes, n, dst); break;
    case 3: interleave<3>(planes, n, dst); break;
    default: interleave<4>(planes, n, dst); break;
  }
}

}  // namespace
}  // namespace fid::codec::l3cpu
