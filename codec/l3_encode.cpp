// L3 encoder: each row's mode and segment codes, each patch's segment length (docs/L3_FORMAT.md,
// section 6); codec/l3_write.cpp writes the result. Shared kernels: codec/l3_kernels.h.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "codec/l3.h"
#include "codec/l3_coded_patch.h"
#include "codec/l3_internal.h"
#include "codec/l3_kernels.h"

namespace fid::codec {
namespace {

using namespace fid::l3k;
using namespace fid::codec::l3detail;

unsigned bit_length(unsigned v) {
  unsigned n = 0;
  while (v) {
    ++n;
    v >>= 1;
  }
  return n;
}

struct SegChoice {
  uint8_t code = 0;
  uint8_t base = 0;
  unsigned bytes = 0;  // base byte + packed data
};

// Cheapest code for n residuals.
SegChoice choose_segment(const uint8_t* r, unsigned n, bool explicit_bases) {
  unsigned any = 0, m = 0;
  for (unsigned i = 0; i < n; ++i) {
    auto v = static_cast<int8_t>(r[i]);
    any |= r[i];
    m |= static_cast<unsigned>(v < 0 ? ~v : v);
  }
  SegChoice best;
  if (!any) return best;  // code 0: all zero, no data
  unsigned wi = std::min(bit_length(m) + 1, 8u);
  best.code = static_cast<uint8_t>(wi);
  best.bytes = static_cast<unsigned>(packed_bytes(n, wi));
  if (!explicit_bases) return best;
  // Explicit base: the shortest arc of the mod-256 circle that holds every residual.
  std::array<uint8_t, 64> s{};
  std::copy(r, r + n, s.begin());
  std::sort(s.begin(), s.begin() + n);
  unsigned maxgap = 0, start = 0;
  for (unsigned i = 0; i < n; ++i) {
    unsigned next = i + 1 < n ? s[i + 1] : s[0] + 256u;
    unsigned gap = next - s[i];
    if (gap > maxgap) {
      maxgap = gap;
      start = (i + 1) % n;
    }
  }
  unsigned span = 256 - maxgap;  // max - min along the arc
  unsigned we = bit_length(span);
  if (we <= 6) {
    unsigned bytes = 1 + static_cast<unsigned>(packed_bytes(n, we));
    if (bytes < best.bytes) {
      best.code = static_cast<uint8_t>(9 + we);
      best.base = s[start];
      best.bytes = bytes;
    }
  }
  return best;
}

struct RowCandidate {
  unsigned mode = 0;
  size_t bytes = SIZE_MAX;
  std::array<uint8_t, kMaxPatch> r{};
  std::array<SegChoice, kMaxSegments> segs{};
};

// Evaluates residuals r[0..n) as a coded row; keeps it in best if cheaper.
void consider(unsigned mode, const uint8_t* r, unsigned n, unsigned seg_log2, bool explicit_bases,
              RowCandidate& best) {
  unsigned nseg = row_segments(n, seg_log2);
  unsigned seg = 1u << seg_log2;
  std::array<SegChoice, kMaxSegments> segs;
  size_t bytes = row_header_bytes(nseg);
  for (unsigned s = 0; s < nseg && bytes < best.bytes; ++s) {
    unsigned cnt = std::min(seg, n - s * seg);
    segs[s] = choose_segment(r + s * seg, cnt, explicit_bases);
    bytes += segs[s].bytes;
  }
  if (bytes < best.bytes) {
    best.mode = mode;
    best.bytes = bytes;
    std::copy(r, r + n, best.r.begin());
    std::copy(segs.begin(), segs.begin() + nseg, best.segs.begin());
  }
}

void append_row(const RowCandidate& c, unsigned n, unsigned seg_log2, PatchRec& rec) {
  unsigned nseg = row_segments(n, seg_log2);
  unsigned seg = 1u << seg_log2;
  rec.modes.push_back(static_cast<uint8_t>(c.mode));
  const size_t at = rec.body.size();
  if ((c.mode & 7u) == kPredCopy) {
    rec.codes.insert(rec.codes.end(), nseg, 0);
    rec.body_len.push_back(0);
    return;
  }
  for (unsigned s = 0; s < nseg; ++s) rec.codes.push_back(c.segs[s].code);
  for (unsigned s = 0; s < nseg; ++s)
    if (code_has_base(c.segs[s].code)) rec.body.push_back(c.segs[s].base);
  for (unsigned s = 0; s < nseg; ++s) {
    unsigned code = c.segs[s].code;
    unsigned w = code_width(code);
    if (w == 0) continue;
    uint8_t base = code_has_base(code) ? c.segs[s].base : implicit_base(w);
    unsigned x0 = s * seg, cnt = std::min(seg, n - x0);
    for (unsigned g = 0; g < cnt; g += 8) {
      unsigned k = std::min(8u, cnt - g);
      uint64_t word = 0;
      for (unsigned i = 0; i < k; ++i)
        word |= uint64_t{static_cast<uint8_t>(c.r[x0 + g + i] - base)} << (i * w);
      size_t nb = packed_bytes(k, w);
      for (size_t b = 0; b < nb; ++b) rec.body.push_back(static_cast<uint8_t>(word >> (8 * b)));
    }
  }
  rec.body_len.push_back(static_cast<uint32_t>(rec.body.size() - at));
}

struct Encoder {
  const ImageView& im;
  const L3Options& opt;
  uint32_t N;

  // True (and the colour in rec) if every pixel of the patch is the same.
  bool constant_patch(uint32_t x0, uint32_t y0, unsigned pw, unsigned ph, PatchRec& rec) const {
    const unsigned C = im.channels;
    const uint8_t* first = im.pixels + y0 * im.stride + size_t{x0} * C;
    for (unsigned y = 0; y < ph; ++y) {
      const uint8_t* row = im.pixels + (y0 + y) * im.stride + size_t{x0} * C;
      for (unsigned x = 0; x < pw; ++x)
        if (std::memcmp(row + size_t{x} * C, first, C) != 0) return false;
    }
    rec.kind = kPatchConstant;
    std::copy(first, first + C, rec.color.begin());
    return true;
  }

  // Row yy of plane c, columns [x0, x0+n), copied to dst[0..n) with dst[-1], dst[n] replicated.
  void load_row(uint32_t yy, unsigned c, uint32_t x0, unsigned n, uint8_t* dst) const {
    const uint8_t* src = im.pixels + yy * im.stride + size_t{x0} * im.channels + c;
    for (unsigned x = 0; x < n; ++x) dst[x] = src[size_t{x} * im.channels];
    dst[-1] = dst[0];
    dst[n] = dst[n - 1];
  }

  // Chooses every row's mode (predictor, cross bit) and codes it with segments of 2^seg_log2;
  // with `residuals`, also appends each coded row's pw residuals there (for resegment()).
  void encode_patch(uint32_t x0, uint32_t y0, unsigned pw, unsigned ph, unsigned seg_log2,
                    PatchRec& out, std::vector<uint8_t>* residuals = nullptr) const {
    out.seg_log2 = seg_log2;
    out.nseg = row_segments(pw, seg_log2);
    const unsigned C = im.channels;
    const int avail_from = (opt.inter_patch_rows && y0 > 0) ? -static_cast<int>(std::min(y0, 2u)) : 0;
    std::array<uint8_t, kMaxPatch + 2> cur{}, T{}, TT{};
    std::array<uint8_t, kMaxPatch> r{}, e0{}, pr{};
    RowCandidate best;
    for (unsigned y = 0; y < ph; ++y) {
      const int yi = static_cast<int>(y);
      const bool first = yi - 1 < avail_from;
      for (unsigned k = 0; k < C; ++k) {
        unsigned c = plane_of(C, k);
        load_row(y0 + y, c, x0, pw, cur.data() + 1);
        if (!first) {
          load_row(static_cast<uint32_t>(static_cast<int>(y0) + yi - 1), c, x0, pw, T.data() + 1);
          int tt = yi - 2 >= avail_from ? yi - 2 : yi - 1;
          load_row(static_cast<uint32_t>(static_cast<int>(y0) + tt), c, x0, pw, TT.data() + 1);
        }
        best.bytes = SIZE_MAX;
        const bool try_cross = k > 0 && opt.cross_channel;
        const unsigned npred = first ? kNumFirstPredictors : kNumPredictors;
        const uint32_t mask = first ? opt.first_row_mask : opt.predictor_mask;
        for (unsigned p = 0; p < npred; ++p) {
          if (!(mask >> p & 1u)) continue;
          for (unsigned x = 0; x < pw; ++x) {
            if (first)
              pr[x] = p == kFirstLeft ? cur[x] /* cur[x] is the sample at x-1 */ : uint8_t{128};
            else
              pr[x] = predict(p, T[x], T[x + 1], T[x + 2], TT[x + 1]);
          }
          if (first && p == kFirstLeft) pr[0] = 128;
          for (unsigned cross = 0; cross < (try_cross ? 2u : 1u); ++cross) {
            unsigned any = 0;
            for (unsigned x = 0; x < pw; ++x) {
              r[x] = static_cast<uint8_t>(cur[x + 1] - pr[x] - (cross ? e0[x] : 0));
              any |= r[x];
            }
            const unsigned mode = p | (cross ? kModeCross : 0u);
            if (!first && p == kPredTop && !any && opt.copy_rows) {
              best.mode = kPredCopy | (cross ? kModeCross : 0u);  // one byte, can't be beaten
              best.bytes = 1;
              best.r.fill(0);
              goto chosen;
            }
            consider(mode, r.data(), pw, seg_log2, opt.explicit_bases, best);
          }
        }
      chosen:  // l3_encode made sure that some predictor is allowed: best is set
        if (k == 0) std::copy(best.r.begin(), best.r.begin() + pw, e0.begin());
        if (residuals) residuals->insert(residuals->end(), best.r.begin(), best.r.begin() + pw);
        append_row(best, pw, seg_log2, out);
      }
    }
  }
};

// The same rows (modes and residuals, as encode_patch chose them) coded with segments of
// 2^seg_log2: a row's residuals depend only on the modes, not on the segment length.
void resegment(const PatchRec& src, const std::vector<uint8_t>& residuals, unsigned pw,
               unsigned seg_log2, bool explicit_bases, RowCandidate& scratch, PatchRec& out) {
  out = PatchRec{};
  out.seg_log2 = seg_log2;
  out.nseg = row_segments(pw, seg_log2);
  const unsigned seg = 1u << seg_log2;
  for (size_t row = 0; row < src.modes.size(); ++row) {
    scratch.mode = src.modes[row];
    const uint8_t* r = residuals.data() + row * pw;
    std::copy(r, r + pw, scratch.r.begin());
    if ((scratch.mode & 7u) != kPredCopy)
      for (unsigned sg = 0; sg < out.nseg; ++sg)
        scratch.segs[sg] = choose_segment(r + sg * seg, std::min(seg, pw - sg * seg), explicit_bases);
    append_row(scratch, pw, seg_log2, out);
  }
}

// v2: merges each copy row with the copy rows of the same plane (same mode) right below it.
void mark_runs(PatchRec& r, unsigned C, bool runs) {
  const size_t rows = r.modes.size();
  r.run.assign(rows, 0);
  if (!runs) return;
  for (size_t i = 0; i < rows; ++i) {
    if (r.run[i] == kCovered || (r.modes[i] & 7u) != kPredCopy) continue;
    unsigned n = 0;
    for (size_t j = i + C; j < rows && n < kMaxCopyRun && r.modes[j] == r.modes[i]; j += C) {
      r.run[j] = kCovered;
      ++n;
    }
    r.run[i] = static_cast<uint16_t>(n);
  }
}

// The patches of an image: N x N, the last column and row possibly smaller.
struct PatchGrid {
  uint32_t N, px, py;
  uint32_t width, height;

  PatchGrid(const ImageView& im, const L3Options& opt)
      : N(opt.patch_size ? opt.patch_size : l3_default_patch_size(im.width, im.height)),
        px((im.width + N - 1) / N),
        py((im.height + N - 1) / N),
        width(im.width),
        height(im.height) {}
  size_t patches() const { return size_t{px} * py; }
};

// The segment lengths a patch may use: seg_log2 alone (version 1, or a forced length), else
// (version 2) every length of segment_mask.
std::vector<unsigned> segment_choices(const L3Options& opt, unsigned seg_log2) {
  std::vector<unsigned> choices;
  if (opt.version < 2 || opt.segment_log2 != 0) {
    choices.push_back(seg_log2);
  } else {
    for (unsigned k = kMinSegLog2; k <= kMaxSegLog2; ++k)
      if (opt.segment_mask >> k & 1u) choices.push_back(k);
  }
  return choices;
}

// The patch at (x0, y0) coded with every segment length of `choices` into `cands`; `rec` gets
// the smallest with nibble headers. The modes are chosen once, with the first length; the
// others re-code the same residuals (a third of the work of one search per length;
// docs/L3_FORMAT.md 6).
void code_patch_candidates(const Encoder& enc, uint32_t x0, uint32_t y0, unsigned pw, unsigned ph,
                           const std::vector<unsigned>& choices, std::vector<uint8_t>& residuals,
                           RowCandidate& scratch, std::vector<PatchRec>& cands, PatchRec& rec) {
  const unsigned C = enc.im.channels;
  const bool v2 = enc.opt.version >= 2;
  cands.resize(choices.size());
  residuals.clear();
  enc.encode_patch(x0, y0, pw, ph, choices[0], cands[0], &residuals);
  size_t best = SIZE_MAX;
  for (size_t k = 0; k < choices.size(); ++k) {
    if (k != 0) resegment(cands[0], residuals, pw, choices[k], enc.opt.explicit_bases, scratch, cands[k]);
    mark_runs(cands[k], C, enc.opt.copy_runs);
    const size_t bytes = patch_bytes(cands[k], C, v2, nullptr);
    if (bytes < best) {
      best = bytes;
      rec = cands[k];
    }
  }
}

// Codes every patch into recs (constant patches as such in version 2). With several segment
// lengths, cands[patch] keeps each coded patch's candidates until the Huffman code lengths are
// known (choose_with_codes).
void code_patches(const Encoder& enc, const PatchGrid& g, const std::vector<unsigned>& choices,
                  std::vector<PatchRec>& recs, std::vector<std::vector<PatchRec>>& cands) {
  const L3Options& opt = enc.opt;
  const bool v2 = opt.version >= 2;
  std::vector<uint8_t> residuals;
  auto scratch = std::make_unique<RowCandidate>();
  for (uint32_t j = 0; j < g.py; ++j)
    for (uint32_t i = 0; i < g.px; ++i) {
      const uint32_t x0 = i * g.N, y0 = j * g.N;
      const unsigned pw = std::min(g.N, g.width - x0), ph = std::min(g.N, g.height - y0);
      const size_t pi = size_t{j} * g.px + i;
      PatchRec& rec = recs[pi];
      if (v2 && opt.constant_patches && enc.constant_patch(x0, y0, pw, ph, rec)) continue;
      if (choices.size() > 1) {
        code_patch_candidates(enc, x0, y0, pw, ph, choices, residuals, *scratch, cands[pi], rec);
        continue;
      }
      enc.encode_patch(x0, y0, pw, ph, choices[0], rec);
      if (v2) mark_runs(rec, enc.im.channels, opt.copy_runs);
    }
}

// Each patch with candidates takes the smallest with the Huffman codes of `lens`; the
// candidates are then dropped. Returns the code lengths of the patches so chosen.
CodeLengths choose_with_codes(std::vector<PatchRec>& recs, std::vector<std::vector<PatchRec>>& cands, unsigned C,
                              bool v2, const CodeLengths& lens) {
  for (size_t pi = 0; pi < recs.size(); ++pi) {
    if (cands[pi].empty()) continue;
    size_t best = SIZE_MAX;
    for (PatchRec& c : cands[pi]) {
      const size_t bytes = patch_bytes(c, C, v2, &lens);
      if (bytes < best) {
        best = bytes;
        recs[pi] = std::move(c);
      }
    }
  }
  cands.clear();
  return code_lengths(recs, C);
}

// Encodes with segments of 2^seg_log2 (version 1, or a forced length) or the lengths of
// segment_mask per patch (version 2).
fid::Result<std::vector<uint8_t>> encode_with(const ImageView& im, const L3Options& opt, unsigned seg_log2) {
  const bool v2 = opt.version >= 2;
  const unsigned C = im.channels;
  const PatchGrid grid(im, opt);
  const std::vector<unsigned> choices = segment_choices(opt, seg_log2);
  std::vector<PatchRec> recs(grid.patches());
  std::vector<std::vector<PatchRec>> cands(choices.size() > 1 ? grid.patches() : 0);
  code_patches(Encoder{im, opt, grid.N}, grid, choices, recs, cands);
  CodeLengths lens = code_lengths(recs, C);
  if (!cands.empty() && opt.entropy_codes != 0) lens = choose_with_codes(recs, cands, C, v2, lens);
  // Nibbles or Huffman codes, by exact size.
  uint64_t nib_bytes = 0, huff_bytes = kCodeTableBytes;
  for (const PatchRec& r : recs) {
    nib_bytes += patch_bytes(r, C, v2, nullptr);
    huff_bytes += patch_bytes(r, C, v2, &lens);
  }
  const bool huff = opt.entropy_codes == 2 || (opt.entropy_codes == 1 && huff_bytes < nib_bytes);
  return write_l3_file(im, opt, grid.N, seg_log2, recs, huff ? &lens : nullptr, huff ? huff_bytes : nib_bytes);
}

}  // namespace

uint32_t l3_default_patch_size(uint32_t width, uint32_t height) {
  // Larger patches are smaller files (fewer first rows and row headers; measured in
  // docs/L3_FORMAT.md) but fewer patches to spread over GPU blocks.
  uint64_t px = uint64_t{width} * height;
  if (px <= uint64_t{640} * 480) return 32;
  if (px <= uint64_t{1280} * 720) return 64;
  return 256;
}

fid::Result<std::vector<uint8_t>> l3_encode(const ImageView& im, const L3Options& opt) {
  if (im.channels < 1 || im.channels > 4) return invalid("L3: channels must be 1..4");
  if (im.width < 1 || im.height < 1 || im.width > kL3MaxDimension || im.height > kL3MaxDimension)
    return invalid("L3: width and height must be 1..2^24");
  if (uint64_t{im.width} * im.height * im.channels > kL3MaxRawBytes) return invalid("L3: image larger than 4 GiB");
  if (!im.pixels) return invalid("L3: no pixels");
  if (im.stride < size_t{im.width} * im.channels) return invalid("L3: bad stride");
  if (opt.patch_size > kMaxPatch) return invalid("L3: patch size must be 1..1024");
  if (opt.segment_log2 != 0 && (opt.segment_log2 < kMinSegLog2 || opt.segment_log2 > kMaxSegLog2))
    return invalid("L3: segment_log2 must be 0 or 3..6");
  if (opt.version != 1 && opt.version != 2) return invalid("L3: version must be 1 or 2");
  if (opt.version >= 2 && opt.segment_log2 == 0 && (opt.segment_mask & 0x78u) == 0)
    return invalid("L3: segment_mask allows no segment length (bits 3..6)");
  // Every image has a first row (patch row 0); rows with a row above exist when a patch is
  // more than one row high, or when patches below the first take their rows above from it.
  const uint32_t N = opt.patch_size ? opt.patch_size : l3_default_patch_size(im.width, im.height);
  const bool rows_with_row_above = im.height > 1 && (N > 1 || opt.inter_patch_rows);
  if ((opt.first_row_mask & ((1u << kNumFirstPredictors) - 1)) == 0 ||
      (rows_with_row_above && (opt.predictor_mask & ((1u << kNumPredictors) - 1)) == 0))
    return invalid("L3Options: no predictor allowed");
  try {
    if (opt.version >= 2 || opt.segment_log2 != 0) return encode_with(im, opt, opt.segment_log2);
    std::vector<uint8_t> best;
    for (unsigned sl = 3; sl <= 5; ++sl) {
      fid::Result<std::vector<uint8_t>> out = encode_with(im, opt, sl);
      if (!out) return out;
      if (best.empty() || out->size() < best.size()) best = std::move(out).value();
    }
    return best;
  } catch (const std::bad_alloc&) {  // the encoder's working set is several times the image
    return fid::Error{ENOMEM, "L3: out of memory"};
  }
}

}  // namespace fid::codec
