// L3 block decoder: one patch per thread block, written once for the CUDA kernel and for its
// CPU emulation (codec/l3_block_plan.h). Header-only and host/device neutral like
// codec/l3_kernels.h: no std:: containers, no exceptions, no allocation, no I/O.
//
// Scheme (docs/L3_FORMAT.md, "Block decoder"): rows in sequence; for each row and each plane in
// coding order, one thread parses the coded row's header into shared memory (mode, and per
// segment its width, base and data offset), then every thread decodes the samples
// x = tid, tid + n, ... of that row independently: unpack the residual from its segment's
// bytes, reconstruct from the rows above (a rolling ring of 3 rows per plane in shared memory)
// and, for colour planes with the cross bit, the first plane's residual at the same x. A first
// row with the "left" predictor is a prefix sum, done serially by one thread (1 row of N).
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/l3_kernels.h"

namespace fid::l3k {

inline constexpr uint32_t kNoHuff = 0xffffffffu;

// One thread block's work; plain data, copied to the device as an array.
struct PatchTask {
  uint64_t in_offset;   // byte offset of this patch's data in the batch input buffer
  uint64_t out_offset;  // byte offset of the patch's pixel (x0, y0), channel 0, in the output
  uint32_t in_size;     // bytes of the patch's data (offset[i+1] - offset[i])
  uint32_t image;       // index of the image in the batch: status[image] = 1 on any error
  uint32_t pw, ph;      // patch width/height in pixels (edge patches are smaller)
  uint32_t out_pitch;   // bytes between consecutive image rows in the output (>= width*channels)
  uint32_t huff;        // index of the image's first of 16 HuffTables in the table array, or kNoHuff
  uint8_t channels;     // 1..4, output interleaved (pixel = channels bytes, planes 0..C-1)
  uint8_t seg_log2;     // version 1: 3..6; version 2: 0 (the patch header byte gives it)
  uint8_t version;      // 1 or 2
  uint8_t pad;
};

// The block's shared-memory state. No member initialisers: a CUDA static __shared__ variable
// must be trivially constructible (its contents are undefined at block start; the emulation
// fills it with garbage to prove nothing is read before it is written).
struct PatchShared {
  // Per plane (natural index c), a ring of 3 rows: row y at slot y % 3, so rows y-1 and y-2
  // stay where they were written (no copying). Index 0 and pw+1 are the replicated edge cells
  // (T[-1] == T[0], T[pw] == T[pw-1]) that reconstruct() reads.
  uint8_t rows[4][3][kMaxPatch + 2];
  uint8_t e0[kMaxPatch];              // residuals of the current row's first coded plane (CROSS)
  uint8_t codes[4][kMaxSegments];     // per coded plane k: its last row's segment codes
                                      // (the Huffman contexts of the next row)
  uint32_t seg_pos[kMaxSegments];     // current coded row: each segment's packed data, patch offset
  uint8_t seg_w[kMaxSegments];        // ... its width in bits
  uint8_t seg_base[kMaxSegments];     // ... its base (explicit or implicit)
  uint32_t pos;                       // parse position: the next coded row's patch offset
  uint32_t mode;                      // current coded row's mode nibble
  uint32_t error;                     // non-zero: a format error was found, stop
  uint32_t seg_log2;                  // the patch's segment length (v2: from its header byte)
  uint32_t kind;                      // v2: kPatchCoded or kPatchConstant
  uint32_t run[4];                    // v2, per coded plane: rows still covered by a copy run
  uint32_t run_mode[4];               // ... and that copy row's mode
};
static_assert(sizeof(PatchShared) <= 48 * 1024, "PatchShared must fit static shared memory");

// Residual of sample x of the current coded row: the w-bit field i*w of its segment (i = x's
// index in the segment) plus the segment's base. Reads 1 or 2 bytes, all inside the segment's
// ceil(n*w/8) bytes: the field's last bit is below n*w.
L3_HD uint8_t block_residual(const PatchShared& sh, const uint8_t* patch, unsigned x,
                             unsigned seg_log2) {
  const unsigned s = x >> seg_log2;
  const unsigned w = sh.seg_w[s];
  unsigned d = 0;
  if (w) {
    const unsigned bit = (x - (s << seg_log2)) * w;
    const uint8_t* p = patch + sh.seg_pos[s] + (bit >> 3);
    const unsigned sh_bits = bit & 7u;
    unsigned v = p[0];
    if (sh_bits + w > 8) v |= unsigned{p[1]} << 8;
    d = (v >> sh_bits) & ((1u << w) - 1u);
  }
  return static_cast<uint8_t>(d + sh.seg_base[s]);
}

// One thread: parses the coded row of plane k at sh.pos, validates it exactly as the CPU
// decoder does (docs/L3_FORMAT.md section 5) and fills the row's segment table. False on a
// format error. Nothing is read outside patch[0, t.in_size).
L3_HD bool block_parse_row(PatchShared& sh, const PatchTask& t, const uint8_t* patch,
                           const HuffTable* tables, unsigned k, unsigned y, bool first) {
  const unsigned sl = sh.seg_log2, pw = t.pw;
  const unsigned nseg = row_segments(pw, sl);
  if (sh.run[k] > 0) {  // v2: covered by a copy run; nothing in the stream, residuals all 0
    --sh.run[k];
    for (unsigned s = 0; s < nseg; ++s) {
      sh.seg_w[s] = 0;
      sh.seg_base[s] = 0;
    }
    sh.mode = sh.run_mode[k];
    return true;
  }
  const uint32_t pos = sh.pos;  // <= t.in_size
  const size_t avail = t.in_size - pos;
  const uint8_t* p = patch + pos;
  uint8_t* codes = sh.codes[k];
  if (first)  // Huffman contexts of a patch's first row are all 0
    for (unsigned s = 0; s < nseg; ++s) codes[s] = 0;
  unsigned mode = 0;
  size_t hdr = read_row_header(p, avail, nseg, tables, codes, &mode, codes);
  if (hdr == 0) return false;  // bad code, or header past the patch (hdr <= avail otherwise)
  const unsigned pred = mode & 7u;
  if ((mode & kModeCross) && k == 0) return false;
  if (pred == kPredCopy) {
    if (first) return false;
    if (t.version >= 2) {
      unsigned extra = 0;
      hdr = read_copy_run(p, avail, &extra);
      if (hdr == 0 || extra > t.ph - 1 - y) return false;
      sh.run[k] = extra;
      sh.run_mode[k] = mode;
    } else if ((p[0] >> 4) != 0) {
      return false;
    }
  } else if (pred >= (first ? kNumFirstPredictors : kNumPredictors)) {
    return false;
  }
  const size_t body = row_body_size(codes, pw, sl);  // 0 for a copy row (its codes are 0)
  if (body > avail - hdr) return false;
  // Body: one base byte per segment with an explicit base, then the packed data in order.
  uint32_t base_at = static_cast<uint32_t>(pos + hdr);
  uint32_t data_at = base_at;
  for (unsigned s = 0; s < nseg; ++s) data_at += code_has_base(codes[s]) ? 1u : 0u;
  const unsigned seg = 1u << sl;
  for (unsigned s = 0; s < nseg; ++s) {
    const unsigned code = codes[s], w = code_width(code);
    const unsigned cnt = (s + 1 == nseg) ? pw - s * seg : seg;
    sh.seg_w[s] = static_cast<uint8_t>(w);
    sh.seg_base[s] = code_has_base(code) ? patch[base_at++] : implicit_base(w);
    sh.seg_pos[s] = data_at;
    data_at += static_cast<uint32_t>(packed_bytes(cnt, w));
  }
  sh.mode = mode;
  sh.pos = static_cast<uint32_t>(pos + hdr + body);
  return true;
}

// True if the task could come from a valid plan (codec/l3_block_plan.h).
L3_HD bool block_task_valid(const PatchTask& t) {
  const unsigned C = t.channels;
  const bool v2 = t.version >= 2;
  return C >= 1 && C <= 4 && t.pw >= 1 && t.pw <= kMaxPatch && t.ph >= 1 && t.version >= 1 && t.version <= 2 &&
         (v2 ? t.seg_log2 == 0 : (t.seg_log2 >= kMinSegLog2 && t.seg_log2 <= kMaxSegLog2));
}

// One thread: the patch's initial state, with version 2's patch header byte (l3_probe made sure
// a v2 patch has at least 1 + C bytes). False on a bad header byte.
L3_HD bool block_start_patch(PatchShared& sh, const PatchTask& t, const uint8_t* patch) {
  sh.pos = 0;
  sh.error = 0;
  sh.kind = kPatchCoded;
  sh.seg_log2 = t.seg_log2;
  for (unsigned k = 0; k < 4; ++k) sh.run[k] = 0;
  if (t.version < 2) return true;
  const unsigned kind = patch[0] & 15u, high = patch[0] >> 4;
  if (kind == kPatchConstant ? (high != 0 || t.in_size != 1u + t.channels)
                             : (kind != kPatchCoded || high < kMinSegLog2 || high > kMaxSegLog2))
    return false;
  sh.kind = kind;
  sh.seg_log2 = high;
  sh.pos = 1;
  return true;
}

// The block primitives below (`Block`, see decode_patch_block) are each followed by a barrier,
// so what a helper reads from `sh` outside them is the same on every thread.

// A constant patch: every pixel is the colour after the header byte.
template <class Block>
L3_HD void block_fill_constant(Block& b, const PatchTask& t, const uint8_t* patch, uint8_t* dst0) {
  const unsigned C = t.channels, pw = t.pw, ph = t.ph;
  b.all([=](unsigned tid, unsigned n) {
    for (unsigned i = tid; i < pw * ph; i += n) {
      uint8_t* d = dst0 + uint64_t{i / pw} * t.out_pitch + size_t{i % pw} * C;
      for (unsigned c = 0; c < C; ++c) d[c] = patch[1 + c];
    }
  });
}

// Parses the coded row of plane k (row y) into `sh`. False (status[t.image] set) on an error.
template <class Block>
L3_HD bool block_parse(Block& b, PatchShared& sh, const PatchTask& t, const uint8_t* patch,
                       const HuffTable* htab, unsigned k, unsigned y, int* status) {
  b.single([=, &sh] {
    if (!block_parse_row(sh, t, patch, htab, k, y, y == 0)) {
      sh.error = 1;
      status[t.image] = 1;
    }
  });
  return sh.error == 0;
}

// Row y > 0 of coded plane k, just parsed. Every sample is independent: rows above are
// complete, e0 was written by an earlier phase. The thread that writes x = 0 / pw-1 writes the
// edge cell next to it. With the last plane done, the pixel's other planes are final too: the
// thread writes the pixel to dst (the row's first pixel in the output).
template <class Block>
L3_HD void block_plane_row(Block& b, PatchShared& sh, const PatchTask& t, const uint8_t* patch, unsigned k,
                           unsigned y, uint8_t* dst) {
  const unsigned C = t.channels, pw = t.pw, sl = sh.seg_log2, mode = sh.mode;
  const unsigned c = plane_of(C, k);
  const unsigned slot = y % 3, tslot = (y + 2) % 3, ttslot = y >= 2 ? (y + 1) % 3 : tslot;
  const bool cross = (mode & kModeCross) != 0;
  const bool last = k + 1 == C;
  b.all([=, &sh](unsigned tid, unsigned n) {
    uint8_t* o = sh.rows[c][slot] + 1;
    const uint8_t* T = sh.rows[c][tslot] + 1;
    const uint8_t* TT = sh.rows[c][ttslot] + 1;
    for (unsigned x = tid; x < pw; x += n) {
      const uint8_t r = block_residual(sh, patch, x, sl);
      if (k == 0) sh.e0[x] = r;
      const uint8_t v = reconstruct(mode, T, TT, x, r, cross ? sh.e0[x] : uint8_t{0});
      o[x] = v;
      if (x == 0) o[-1] = v;
      if (x + 1 == pw) o[pw] = v;
      if (last)
        for (unsigned cc = 0; cc < C; ++cc) dst[size_t{x} * C + cc] = sh.rows[cc][slot][1 + x];
    }
  });
}

// Row 0 of coded plane k, just parsed: "constant" is p = 128 per sample; "left" is a prefix
// sum, so the parallel phase stores r + e and one thread accumulates.
template <class Block>
L3_HD void block_first_plane_row(Block& b, PatchShared& sh, const PatchTask& t, const uint8_t* patch,
                                 unsigned k) {
  const unsigned pw = t.pw, sl = sh.seg_log2, mode = sh.mode;
  const unsigned c = plane_of(t.channels, k);
  const bool cross = (mode & kModeCross) != 0;
  const bool left = (mode & 7u) == kFirstLeft;
  b.all([=, &sh](unsigned tid, unsigned n) {
    uint8_t* o = sh.rows[c][0] + 1;
    for (unsigned x = tid; x < pw; x += n) {
      const uint8_t r = block_residual(sh, patch, x, sl);
      if (k == 0) sh.e0[x] = r;
      const uint8_t v = static_cast<uint8_t>((left ? 0u : 128u) + r + (cross ? sh.e0[x] : 0u));
      o[x] = v;
      if (x == 0) o[-1] = v;
      if (x + 1 == pw) o[pw] = v;
    }
  });
  if (left)
    b.single([=, &sh] {
      uint8_t* o = sh.rows[c][0] + 1;
      uint8_t v = 128;
      for (unsigned x = 0; x < pw; ++x) o[x] = v = static_cast<uint8_t>(v + o[x]);
      o[-1] = o[0];
      o[pw] = o[pw - 1];
    });
}

// The pixels of row 0 (ring slot 0), once all its planes are final.
template <class Block>
L3_HD void block_write_first_row(Block& b, PatchShared& sh, const PatchTask& t, uint8_t* dst) {
  const unsigned C = t.channels, pw = t.pw;
  b.all([=, &sh](unsigned tid, unsigned n) {
    for (unsigned x = tid; x < pw; x += n)
      for (unsigned cc = 0; cc < C; ++cc) dst[size_t{x} * C + cc] = sh.rows[cc][0][1 + x];
  });
}

// Row y of the patch, every plane in coding order, its pixels to dst. No INTER_PATCH on this
// path: only row 0 lacks a row above. False on a format error (status set).
template <class Block>
L3_HD bool block_decode_row(Block& b, PatchShared& sh, const PatchTask& t, const uint8_t* patch,
                            const HuffTable* htab, unsigned y, uint8_t* dst, int* status) {
  for (unsigned k = 0; k < t.channels; ++k) {
    if (!block_parse(b, sh, t, patch, htab, k, y, status)) return false;
    if (y > 0)
      block_plane_row(b, sh, t, patch, k, y, dst);
    else
      block_first_plane_row(b, sh, t, patch, k);
  }
  if (y == 0) block_write_first_row(b, sh, t, dst);
  return true;
}

// The kernel body. `Block` provides two primitives:
//   b.single(f): f() runs on one thread, then a block barrier
//   b.all(f):    f(tid, nthreads) runs on every thread, then a block barrier
// Control flow outside them is uniform: it depends only on the task and on shared state
// written before the last barrier. The phases' lambdas capture locals by value (read-only),
// so no thread can change state that other threads would not see; everything a later phase
// needs goes through `sh`.
// Decodes the patch into out + t.out_offset (rows t.out_pitch apart). On a format error sets
// status[t.image] = 1 and returns (the output is then unspecified, as with the CPU decoder).
template <class Block>
L3_HD void decode_patch_block(Block& b, PatchShared& sh, const PatchTask& t, const uint8_t* in,
                              const HuffTable* tables, uint8_t* out, int* status) {
  if (!block_task_valid(t)) {
    b.single([=] { status[t.image] = 1; });  // not from a valid plan; depends on the task only
    return;
  }
  const uint8_t* patch = in + t.in_offset;
  const HuffTable* htab = t.huff == kNoHuff ? nullptr : tables + t.huff;
  uint8_t* dst0 = out + t.out_offset;
  b.single([=, &sh] {
    if (!block_start_patch(sh, t, patch)) {
      sh.error = 1;
      status[t.image] = 1;
    }
  });
  if (sh.error) return;
  if (sh.kind == kPatchConstant) return block_fill_constant(b, t, patch, dst0);
  for (unsigned y = 0; y < t.ph; ++y)
    if (!block_decode_row(b, sh, t, patch, htab, y, dst0 + uint64_t{y} * t.out_pitch, status)) return;
  b.single([=, &sh] {  // the patch must be consumed exactly
    if (sh.pos != t.in_size) status[t.image] = 1;
  });
}

}  // namespace fid::l3k
