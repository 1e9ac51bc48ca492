// L3 encoder and CPU decoder. Format: docs/L3_FORMAT.md. Shared kernels: codec/l3_kernels.h.
#include "codec/l3.h"

#include <algorithm>
#include <cerrno>
#include <array>
#include <cstring>
#include <memory>
#include <new>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define L3_X86 1
#endif

#include "codec/l3_kernels.h"

namespace fid::codec {
namespace {

using namespace fid::l3k;

constexpr uint8_t kMagic[4] = {'F', 'I', 'L', '3'};
constexpr uint8_t kFlagInterPatch = kL3FlagInterPatch;
constexpr uint8_t kFlagHuffCodes = kL3FlagHuffCodes;
constexpr uint8_t kKnownFlags = kFlagInterPatch | kFlagHuffCodes;
constexpr size_t kCodeTableBytes = kL3CodeTableBytes;  // 16 contexts x 16 code lengths, one nibble each

void put_u16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u16(const uint8_t* p) { return uint32_t{p[0]} | uint32_t{p[1]} << 8; }
uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

fid::Error invalid(std::string message) { return fid::Error{EINVAL, std::move(message)}; }

unsigned bit_length(unsigned v) {
  unsigned n = 0;
  while (v) {
    ++n;
    v >>= 1;
  }
  return n;
}

// ---- encoder ----------------------------------------------------------------------------------

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

// The coded rows of one patch, before their headers are serialised (nibbles or Huffman).
struct PatchRec {
  unsigned kind = kPatchCoded;  // v2: kPatchConstant has only `color`
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

// Huffman code lengths (<= 15 for 16 symbols) for one context's symbol counts.
void huffman_lengths(const uint64_t* freq, uint8_t* len) {
  struct Node {
    uint64_t w;
    uint32_t syms;  // bit set of symbols below
  };
  std::vector<Node> nodes;
  for (unsigned s = 0; s < 16; ++s) {
    len[s] = 0;
    if (freq[s]) nodes.push_back({freq[s], 1u << s});
  }
  if (nodes.size() == 1) {
    for (unsigned s = 0; s < 16; ++s)
      if (nodes[0].syms >> s & 1u) len[s] = 1;
    return;
  }
  while (nodes.size() > 1) {
    std::sort(nodes.begin(), nodes.end(), [](const Node& a, const Node& b) { return a.w > b.w; });
    Node a = nodes.back();
    nodes.pop_back();
    Node b = nodes.back();
    nodes.pop_back();
    for (unsigned s = 0; s < 16; ++s)
      if ((a.syms | b.syms) >> s & 1u) ++len[s];
    nodes.push_back({a.w + b.w, a.syms | b.syms});
  }
}

constexpr uint16_t kCovered = 0xffff;

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

// Bytes of a coded row's header: nibbles (lens null) or Huffman codes with the lengths `lens`
// [context][symbol]; `above` holds the contexts and is updated to this row's codes.
size_t header_bytes(const PatchRec& r, size_t row, const std::array<std::array<uint8_t, 16>, 16>* lens,
                    uint8_t* above) {
  const uint8_t* codes = r.codes.data() + row * r.nseg;
  size_t bytes = 0;
  if (!r.run.empty() && r.run[row] == kCovered) {
    bytes = 0;
  } else if ((r.modes[row] & 7u) == kPredCopy) {
    bytes = (!r.run.empty() && r.run[row] >= 15) ? 2 : 1;
  } else if (!lens) {
    bytes = row_header_bytes(r.nseg);
  } else {
    uint64_t bits = 4;
    for (unsigned s = 0; s < r.nseg; ++s) bits += (*lens)[above[s]][codes[s]];
    bytes = (bits + 7) / 8;
  }
  std::copy(codes, codes + r.nseg, above);
  return bytes;
}

// Bytes of a patch (headers as nibbles or with `lens`, bodies, v2's patch byte).
size_t patch_bytes(const PatchRec& r, unsigned C, bool v2, const std::array<std::array<uint8_t, 16>, 16>* lens) {
  if (r.kind == kPatchConstant) return 1 + C;
  std::array<std::array<uint8_t, kMaxSegments>, 4> above{};
  size_t bytes = r.body.size() + (v2 ? 1 : 0);
  for (size_t row = 0; row < r.modes.size(); ++row) bytes += header_bytes(r, row, lens, above[row % C].data());
  return bytes;
}

using CodeLengths = std::array<std::array<uint8_t, 16>, 16>;

// Huffman code lengths per context from the segment codes of the coded patches.
CodeLengths code_lengths(const std::vector<PatchRec>& recs, unsigned C) {
  std::array<std::array<uint64_t, 16>, 16> freq{};
  std::array<std::array<uint8_t, kMaxSegments>, 4> above{};
  for (const PatchRec& r : recs) {
    if (r.kind != kPatchCoded) continue;
    for (auto& a : above) a.fill(0);
    for (size_t row = 0; row < r.modes.size(); ++row) {
      const uint8_t* codes = r.codes.data() + row * r.nseg;
      auto& ab = above[row % C];
      if ((r.modes[row] & 7u) != kPredCopy)
        for (unsigned s = 0; s < r.nseg; ++s) ++freq[ab[s]][codes[s]];
      std::copy(codes, codes + r.nseg, ab.begin());
    }
  }
  CodeLengths lens{};
  for (unsigned c = 0; c < 16; ++c) huffman_lengths(freq[c].data(), lens[c].data());
  return lens;
}

fid::Result<std::vector<uint8_t>> encode_with(const ImageView& im, const L3Options& opt, unsigned seg_log2) {
  const bool v2 = opt.version >= 2;
  const uint32_t N = opt.patch_size ? opt.patch_size : l3_default_patch_size(im.width, im.height);
  const uint32_t px = (im.width + N - 1) / N, py = (im.height + N - 1) / N;
  const size_t patches = size_t{px} * py;
  const unsigned C = im.channels;
  Encoder enc{im, opt, N};
  std::vector<PatchRec> recs(patches);
  // v2: every allowed segment length is tried per patch; the candidates are kept until the
  // Huffman code lengths are known, then each patch takes the smallest with them.
  std::vector<unsigned> seg_choices;
  if (!v2 || opt.segment_log2 != 0) {
    seg_choices.push_back(seg_log2);
  } else {
    for (unsigned k = kMinSegLog2; k <= kMaxSegLog2; ++k)
      if (opt.segment_mask >> k & 1u) seg_choices.push_back(k);
  }
  std::vector<std::vector<PatchRec>> cands(seg_choices.size() > 1 ? patches : 0);
  std::vector<uint8_t> residuals;
  auto scratch = std::make_unique<RowCandidate>();
  for (uint32_t j = 0; j < py; ++j)
    for (uint32_t i = 0; i < px; ++i) {
      const uint32_t x0 = i * N, y0 = j * N;
      const unsigned pw = std::min(N, im.width - x0), ph = std::min(N, im.height - y0);
      const size_t pi = size_t{j} * px + i;
      PatchRec& rec = recs[pi];
      if (v2 && opt.constant_patches && enc.constant_patch(x0, y0, pw, ph, rec)) continue;
      if (seg_choices.size() == 1) {
        enc.encode_patch(x0, y0, pw, ph, seg_choices[0], rec);
        if (v2) mark_runs(rec, C, opt.copy_runs);
        continue;
      }
      // The modes are chosen once, with the shortest segments; the other lengths re-code the
      // same residuals (a third of the work of one search per length; docs/L3_FORMAT.md 6).
      auto& cs = cands[pi];
      cs.resize(seg_choices.size());
      const size_t mid = 0;
      residuals.clear();
      enc.encode_patch(x0, y0, pw, ph, seg_choices[mid], cs[mid], &residuals);
      size_t best = SIZE_MAX;
      for (size_t k = 0; k < seg_choices.size(); ++k) {
        if (k != mid) resegment(cs[mid], residuals, pw, seg_choices[k], opt.explicit_bases, *scratch, cs[k]);
        mark_runs(cs[k], C, opt.copy_runs);
        const size_t bytes = patch_bytes(cs[k], C, v2, nullptr);
        if (bytes < best) {
          best = bytes;
          rec = cs[k];
        }
      }
    }
  CodeLengths lens = code_lengths(recs, C);
  if (!cands.empty() && opt.entropy_codes != 0) {
    for (size_t pi = 0; pi < patches; ++pi) {
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
    lens = code_lengths(recs, C);
  }
  std::array<std::array<uint16_t, 16>, 16> hcode{};
  for (unsigned c = 0; c < 16; ++c) {
    std::array<unsigned, 17> count{}, next{};
    for (unsigned s = 0; s < 16; ++s) ++count[lens[c][s]];
    count[0] = 0;
    for (unsigned l = 1; l < 16; ++l) next[l + 1] = (next[l] + count[l]) << 1;
    for (unsigned s = 0; s < 16; ++s)
      if (lens[c][s]) hcode[c][s] = static_cast<uint16_t>(next[lens[c][s]]++);
  }
  // Choose nibbles or Huffman codes by exact size.
  uint64_t nib_bytes = 0, huff_bytes = kCodeTableBytes;
  for (const PatchRec& r : recs) {
    nib_bytes += patch_bytes(r, C, v2, nullptr);
    huff_bytes += patch_bytes(r, C, v2, &lens);
  }
  const bool huff = opt.entropy_codes == 2 || (opt.entropy_codes == 1 && huff_bytes < nib_bytes);

  const size_t header = kL3HeaderBytes + (huff ? kCodeTableBytes : 0) + 4 * patches;
  std::vector<uint8_t> out(header, 0);
  out.reserve(header + (huff ? huff_bytes : nib_bytes));
  std::vector<uint32_t> offsets(patches);
  std::array<std::array<uint8_t, kMaxSegments>, 4> above{};
  for (size_t pi = 0; pi < patches; ++pi) {
    const PatchRec& r = recs[pi];
    size_t off = out.size() - header;
    if (off > UINT32_MAX) return invalid("L3: encoded image exceeds 4 GiB");
    offsets[pi] = static_cast<uint32_t>(off);
    if (r.kind == kPatchConstant) {
      out.push_back(static_cast<uint8_t>(kPatchConstant));
      out.insert(out.end(), r.color.begin(), r.color.begin() + C);
      continue;
    }
    if (v2) out.push_back(static_cast<uint8_t>(kPatchCoded | (r.seg_log2 << 4)));
    for (auto& a : above) a.fill(0);
    size_t body_at = 0;
    for (size_t row = 0; row < r.modes.size(); ++row) {
      const uint8_t* codes = r.codes.data() + row * r.nseg;
      auto& ab = above[row % C];
      const unsigned mode = r.modes[row];
      const unsigned run = r.run.empty() ? 0 : r.run[row];
      if (run == kCovered) {
        // inside a copy run: nothing written (its codes are all 0, like the run's first row)
      } else if ((mode & 7u) == kPredCopy) {
        out.push_back(static_cast<uint8_t>(mode | (std::min(run, 15u) << 4)));
        if (run >= 15) out.push_back(static_cast<uint8_t>(run - 15));
      } else if (!huff) {
        size_t at = out.size();
        out.resize(at + row_header_bytes(r.nseg), 0);
        auto set_nibble = [&](unsigned k, unsigned v) {
          out[at + (k >> 1)] = static_cast<uint8_t>(out[at + (k >> 1)] | (v << ((k & 1) * 4)));
        };
        set_nibble(0, mode);
        for (unsigned s = 0; s < r.nseg; ++s) set_nibble(s + 1, codes[s]);
      } else {
        size_t at = out.size();
        out.push_back(static_cast<uint8_t>(mode));
        size_t bit = 4;
        for (unsigned s = 0; s < r.nseg; ++s) {
          unsigned l = lens[ab[s]][codes[s]], v = hcode[ab[s]][codes[s]];
          for (unsigned i = l; i-- > 0;) {
            if ((bit >> 3) >= out.size() - at) out.push_back(0);
            out[at + (bit >> 3)] = static_cast<uint8_t>(out[at + (bit >> 3)] | (((v >> i) & 1u) << (bit & 7)));
            ++bit;
          }
        }
      }
      out.insert(out.end(), r.body.begin() + static_cast<std::ptrdiff_t>(body_at),
                 r.body.begin() + static_cast<std::ptrdiff_t>(body_at + r.body_len[row]));
      body_at += r.body_len[row];
      std::copy(codes, codes + r.nseg, ab.begin());
    }
  }
  size_t data = out.size() - header;
  if (data > UINT32_MAX) return invalid("L3: encoded image exceeds 4 GiB");
  std::memcpy(out.data(), kMagic, 4);
  out[4] = v2 ? 2 : 1;
  out[5] = im.channels;
  out[6] = static_cast<uint8_t>(v2 ? 0 : seg_log2);
  out[7] = static_cast<uint8_t>((opt.inter_patch_rows ? kFlagInterPatch : 0) | (huff ? kFlagHuffCodes : 0));
  put_u32(&out[8], im.width);
  put_u32(&out[12], im.height);
  put_u16(&out[16], N);
  put_u16(&out[18], 0);
  put_u32(&out[20], static_cast<uint32_t>(data));
  size_t table_at = kL3HeaderBytes;
  if (huff) {
    for (unsigned c = 0; c < 16; ++c)
      for (unsigned s = 0; s < 16; s += 2)
        out[table_at++] = static_cast<uint8_t>(lens[c][s] | (lens[c][s + 1] << 4));
  }
  for (size_t p = 0; p < patches; ++p) put_u32(&out[table_at + 4 * p], offsets[p]);
  return out;
}

// ---- decoder ----------------------------------------------------------------------------------

struct PatchScratch {
  // Per plane, a ring of 3 rows (row y at slot y % 3), each with one guard sample either side.
  std::array<std::array<std::array<uint8_t, kMaxPatch + 2>, 3>, 4> rows;
  std::array<uint8_t, kMaxPatch> r;
  std::array<uint8_t, kMaxPatch> e0;
  std::array<uint8_t, kMaxPatch> zero;
  std::array<std::array<uint8_t, kMaxSegments>, 4> above;  // codes of the row above, per plane
};

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
__attribute__((target("ssse3"))) void unpack_row_ssse3(const uint8_t* body, size_t body_bytes,
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

void unpack_row_fast(const uint8_t* body, size_t body_bytes, const uint8_t* end,
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
__attribute__((target("ssse3"))) void interleave3_ssse3(const uint8_t* a, const uint8_t* b,
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
void interleave(const PatchScratch& s, unsigned slot, unsigned n, uint8_t* __restrict dst) {
  const uint8_t* __restrict a = s.rows[0][slot].data() + 1;
  if constexpr (C == 1) {
    std::memcpy(dst, a, n);
  } else {
    const uint8_t* __restrict b = s.rows[1][slot].data() + 1;
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
      const uint8_t* __restrict c = s.rows[2][slot].data() + 1;
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
        const uint8_t* __restrict d = s.rows[3][slot].data() + 1;
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

// CPU segment-code reader: the kernels' canonical tables plus an 8-bit lookup table per
// context for codes of up to 8 bits (longer or invalid codes fall back to l3k::read_symbol,
// so the result is always the same as the kernels').
struct FastCodes {
  std::array<HuffTable, 16> tables{};
  std::array<std::array<uint16_t, 256>, 16> lut{};  // (length << 8) | symbol; 0: slow path

  void build(const uint8_t* lengths_nibbles) {
    for (unsigned c = 0; c < 16; ++c) {
      uint8_t lens[16];
      for (unsigned k = 0; k < 16; ++k)
        lens[k] = static_cast<uint8_t>(nibble(lengths_nibbles + 8 * c, k));
      build_table(lens, &tables[c]);  // validated by l3_probe
      lut[c].fill(0);
      std::array<unsigned, 17> count{}, next{};
      for (unsigned k = 0; k < 16; ++k) ++count[lens[k]];
      count[0] = 0;
      for (unsigned l = 1; l < 16; ++l) next[l + 1] = (next[l] + count[l]) << 1;
      for (unsigned k = 0; k < 16; ++k) {
        unsigned l = lens[k];
        if (!l) continue;
        unsigned code = next[l]++;
        if (l > 8) continue;
        unsigned rev = 0;  // the first bit read is the code's MSB, at bit 0 of the peek
        for (unsigned i = 0; i < l; ++i) rev |= ((code >> (l - 1 - i)) & 1u) << i;
        for (unsigned hi = 0; hi < (256u >> l); ++hi)
          lut[c][rev | (hi << l)] = static_cast<uint16_t>((l << 8) | k);
      }
    }
  }

  // Same contract and result as l3k::read_row_header with these tables; also adds cost[code]
  // of every code read to *sum (in the shadow of the lookups' latency).
  size_t read_header(const uint8_t* p, size_t avail, unsigned nseg, const uint8_t* above,
                     unsigned* mode, uint8_t* codes, const uint32_t* cost, uint32_t* sum) const {
    if (avail < 1) return 0;
    *mode = p[0] & 15u;
    if ((*mode & 7u) == kPredCopy) {
      std::memset(codes, 0, nseg);
      return 1;
    }
    // The next `have` bits of the header are the low bits of `buf` (bits above them are the
    // stream's following bits or 0), so a symbol's lookup waits for no load of the input.
    uint64_t buf = 0;
    unsigned have = 0;
    size_t next = 0;  // the next byte to go into buf
    const auto refill = [&] {
      if (avail - next >= 8) {  // a whole word: as many bytes as fit (up to 63 bits in buf)
        uint64_t w;
        std::memcpy(&w, p + next, 8);  // little-endian host assumed (x86-64, aarch64)
        buf |= w << have;
        next += (63 - have) >> 3;
        have |= 56;
      } else {
        for (; have <= 56 && next < avail; ++next, have += 8) buf |= uint64_t{p[next]} << have;
      }
    };
    refill();
    uint32_t acc = 0;
    buf >>= 4;  // the mode nibble
    have -= 4;
    for (unsigned s = 0; s < nseg; ++s) {
      if (have < 8) refill();
      const unsigned e = lut[above[s] & 15u][buf & 0xFFu];
      const unsigned len = e >> 8;
      if (len != 0) {
        if (len > have) return 0;  // the code runs past the patch
        buf >>= len;
        have -= len;
        codes[s] = static_cast<uint8_t>(e);
        acc += cost[e & 0xFFu];
      } else {  // a code over 8 bits or an invalid one: the kernels' reader, then reload
        size_t bit = next * 8 - have;
        int sym = read_symbol(p, avail, &bit, &tables[above[s] & 15u]);
        if (sym < 0) return 0;
        codes[s] = static_cast<uint8_t>(sym);
        acc += cost[sym];
        next = bit >> 3;
        buf = 0;
        have = 0;
        refill();
        buf >>= bit & 7u;
        have -= static_cast<unsigned>(bit & 7u);
      }
    }
    *sum = acc;
    return (next * 8 - have + 7) >> 3;
  }
};

// Decodes one patch from [p, end); writes its pixels into the image `img` (row stride `stride`).
fid::Status decode_patch(const uint8_t* p, const uint8_t* end, const L3Info& info,
                  const FastCodes* fast, uint32_t x0, uint32_t y0, unsigned pw, unsigned ph,
                  uint8_t* img, size_t stride, PatchScratch& s) {
  const unsigned C = info.channels;
  const bool v2 = info.version >= 2;
  unsigned sl = info.segment_log2;
  if (v2) {  // the patch header byte (l3_probe made sure the patch has 1 + C bytes)
    const unsigned kind = p[0] & 15u, high = p[0] >> 4;
    if (kind == kPatchConstant) {
      if (high != 0 || end - p != 1 + static_cast<std::ptrdiff_t>(C))
        return invalid("L3: bad constant patch");
      for (unsigned y = 0; y < ph; ++y) {
        uint8_t* dst = img + (y0 + y) * stride + size_t{x0} * C;
        for (unsigned x = 0; x < pw; ++x) std::memcpy(dst + size_t{x} * C, p + 1, C);
      }
      return {};
    }
    if (kind != kPatchCoded || high < kMinSegLog2 || high > kMaxSegLog2)
      return invalid("L3: bad patch header");
    sl = high;
    ++p;
  }
  const unsigned nseg = row_segments(pw, sl);
  for (auto& a : s.above) std::fill(a.begin(), a.begin() + nseg, uint8_t{0});
  std::array<unsigned, 4> run{};  // v2: rows of each plane still covered by a copy run
  std::array<unsigned, 4> run_mode{};
  // What a segment code adds to its row's body, for full segments and the (possibly shorter)
  // last one: body bytes in the low 16 bits, base bytes (0 or 1) from bit 16, so one sum gives
  // both (a row's body is at most 1024 + 128 bytes).
  std::array<uint32_t, 16> full_cost{}, last_cost{};
  const unsigned last_cnt = pw - (nseg - 1) * (1u << sl);
  for (unsigned code = 0; code < 16; ++code) {
    const unsigned extra = code_has_base(code) ? 1u : 0u;
    full_cost[code] = static_cast<uint32_t>(packed_bytes(1u << sl, code_width(code)) + extra) | extra << 16;
    last_cost[code] = static_cast<uint32_t>(packed_bytes(last_cnt, code_width(code)) + extra) | extra << 16;
  }
  int avail_from = 0;
  if ((info.flags & kFlagInterPatch) && y0 > 0) {
    avail_from = -static_cast<int>(std::min(y0, 2u));
    for (int k = avail_from; k < 0; ++k) {
      uint32_t yy = static_cast<uint32_t>(static_cast<int>(y0) + k);
      const uint8_t* row = img + yy * stride + size_t{x0} * C;
      unsigned slot = static_cast<unsigned>(k + 3) % 3;
      for (unsigned c = 0; c < C; ++c) {
        uint8_t* d = s.rows[c][slot].data() + 1;
        for (unsigned x = 0; x < pw; ++x) d[x] = row[size_t{x} * C + c];
        d[-1] = d[0];
        d[pw] = d[pw - 1];
      }
    }
  }
  for (unsigned y = 0; y < ph; ++y) {
    const int yi = static_cast<int>(y);
    const bool first = yi - 1 < avail_from;
    const unsigned slot = y % 3, tslot = (y + 2) % 3;
    const unsigned ttslot = (yi - 2 >= avail_from) ? (y + 1) % 3 : tslot;
    for (unsigned k = 0; k < C; ++k) {
      const unsigned c = plane_of(C, k);
      unsigned mode = 0;
      uint8_t* r = (k == 0) ? s.e0.data() : s.r.data();
      if (run[k] > 0) {  // a row covered by a copy run: nothing in the stream
        --run[k];
        mode = run_mode[k];
        std::memset(r, 0, pw);
      } else {
        // The row above's codes are the contexts; each is read before its segment's code
        // replaces it, so one array serves both.
        uint8_t* codes = s.above[k].data();
        const size_t avail = static_cast<size_t>(end - p);
        uint32_t cost = 0;
        size_t hdr = 0;
        if (fast) {
          hdr = fast->read_header(p, avail, nseg, codes, &mode, codes, full_cost.data(), &cost);
        } else {
          hdr = read_row_header(p, avail, nseg, nullptr, codes, &mode, codes);
          for (unsigned sg = 0; sg < nseg; ++sg) cost += full_cost[codes[sg]];
        }
        if (hdr == 0) return invalid("L3: bad row header or row past its patch");
        const unsigned pred = mode & 7u;
        const bool copy = pred == kPredCopy;
        if ((mode & kModeCross) && k == 0) return invalid("L3: cross-channel bit set on the first plane");
        if (copy) {
          if (first) return invalid("L3: invalid row predictor");
          unsigned extra = 0;
          if (v2) {
            hdr = read_copy_run(p, avail, &extra);
            if (hdr == 0) return invalid("L3: copy run past its patch");
            if (extra > ph - 1 - y) return invalid("L3: copy run past the patch's last row");
            run[k] = extra;
            run_mode[k] = mode;
          } else if ((p[0] >> 4) != 0) {
            return invalid("L3: invalid row predictor");
          }
          std::memset(r, 0, pw);
          p += hdr;
        } else {
          if (pred >= (first ? kNumFirstPredictors : kNumPredictors)) return invalid("L3: invalid row predictor");
          cost += last_cost[codes[nseg - 1]] - full_cost[codes[nseg - 1]];
          const size_t body = cost & 0xFFFFu;
          const unsigned nbases = cost >> 16;
          if (body > avail - hdr) return invalid("L3: row data runs past its patch");
          unpack_row_fast(p + hdr, body, end, codes, pw, sl, nbases, r);
          p += hdr + body;
        }
      }
      const unsigned pred = mode & 7u;
      const bool cross = (mode & kModeCross) != 0;
      const uint8_t* e = cross ? s.e0.data() : s.zero.data();
      uint8_t* o = s.rows[c][slot].data() + 1;
      if (first) {
        if (pred == kFirstLeft) {
          uint8_t v = 128;
          for (unsigned x = 0; x < pw; ++x) o[x] = v = static_cast<uint8_t>(v + r[x] + e[x]);
        } else {
          for (unsigned x = 0; x < pw; ++x) o[x] = static_cast<uint8_t>(128 + r[x] + e[x]);
        }
      } else {
        const uint8_t* T = s.rows[c][tslot].data() + 1;
        const uint8_t* TT = s.rows[c][ttslot].data() + 1;
        switch (pred) {
          case 0: recon_rows<0>(T, TT, r, e, o, pw); break;
          case 1: recon_rows<1>(T, TT, r, e, o, pw); break;
          case 2: recon_rows<2>(T, TT, r, e, o, pw); break;
          case 3: recon_rows<3>(T, TT, r, e, o, pw); break;
          case 4: recon_rows<4>(T, TT, r, e, o, pw); break;
          case 5: recon_rows<5>(T, TT, r, e, o, pw); break;
          default: recon_rows<0>(T, TT, r, e, o, pw); break;  // copy: r is all zero
        }
      }
      o[-1] = o[0];
      o[pw] = o[pw - 1];
    }
    uint8_t* dst = img + (y0 + y) * stride + size_t{x0} * C;
    switch (C) {
      case 1: interleave<1>(s, slot, pw, dst); break;
      case 2: interleave<2>(s, slot, pw, dst); break;
      case 3: interleave<3>(s, slot, pw, dst); break;
      default: interleave<4>(s, slot, pw, dst); break;
    }
  }
  if (p != end) return invalid("L3: patch has trailing bytes");
  return {};
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

bool looks_like_l3(std::span<const uint8_t> data) {
  return data.size() >= 4 && std::memcmp(data.data(), kMagic, 4) == 0;
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

fid::Result<L3Info> l3_probe(std::span<const uint8_t> data) {
  if (data.size() < kL3HeaderBytes) return invalid("L3: shorter than its header");
  const uint8_t* h = data.data();
  if (std::memcmp(h, kMagic, 4) != 0) return invalid("L3: bad magic");
  if (h[4] != 1 && h[4] != kL3Version) return invalid("L3: unsupported version " + std::to_string(h[4]));
  L3Info in;
  in.version = h[4];
  in.channels = h[5];
  in.segment_log2 = h[6];
  in.flags = h[7];
  in.width = get_u32(h + 8);
  in.height = get_u32(h + 12);
  in.patch_size = get_u16(h + 16);
  in.data_bytes = get_u32(h + 20);
  if (in.channels < 1 || in.channels > 4) return invalid("L3: channels must be 1..4");
  if (in.version == 1 ? (in.segment_log2 < kMinSegLog2 || in.segment_log2 > kMaxSegLog2) : in.segment_log2 != 0)
    return invalid("L3: segment size out of range");  // version 2: per patch, this byte is 0
  if (in.flags & ~kKnownFlags) return invalid("L3: unknown flags");
  if (get_u16(h + 18) != 0) return invalid("L3: reserved header field is not zero");
  if (in.width < 1 || in.height < 1 || in.width > kL3MaxDimension || in.height > kL3MaxDimension)
    return invalid("L3: width or height out of range");
  if (uint64_t{in.width} * in.height * in.channels > kL3MaxRawBytes) return invalid("L3: image larger than 4 GiB");
  if (in.patch_size < 1 || in.patch_size > kMaxPatch) return invalid("L3: patch size out of range");
  in.patches_x = (in.width + in.patch_size - 1) / in.patch_size;
  in.patches_y = (in.height + in.patch_size - 1) / in.patch_size;
  const uint64_t patches = uint64_t{in.patches_x} * in.patches_y;
  const bool huff = (in.flags & kFlagHuffCodes) != 0;
  const uint64_t table_bytes = huff ? kCodeTableBytes : 0;
  const uint64_t header = kL3HeaderBytes + table_bytes + 4 * patches;
  if (header + in.data_bytes != data.size())
    return invalid("L3: size mismatch (header + offset table + data != buffer)");
  in.header_bytes = static_cast<size_t>(header);
  // Offsets: offset[0] == 0, non-decreasing, and each patch at least as large as its row
  // headers (so a tiny file cannot claim a huge image).
  if (huff) {
    for (unsigned c = 0; c < 16; ++c) {
      uint8_t lens[16];
      for (unsigned k = 0; k < 16; ++k) lens[k] = static_cast<uint8_t>(nibble(h + kL3HeaderBytes + 8 * c, k));
      HuffTable t;
      if (!build_table(lens, &t)) return invalid("L3: over-subscribed segment code table");
    }
  }
  const uint8_t* table = h + kL3HeaderBytes + table_bytes;
  for (uint64_t i = 0; i < patches; ++i) {
    uint64_t begin = get_u32(table + 4 * i);
    uint64_t end = i + 1 < patches ? get_u32(table + 4 * (i + 1)) : in.data_bytes;
    if (i == 0 && begin != 0) return invalid("L3: first patch offset is not 0");
    uint32_t px = static_cast<uint32_t>(i % in.patches_x), py = static_cast<uint32_t>(i / in.patches_x);
    unsigned pw = std::min(in.patch_size, in.width - px * in.patch_size);
    unsigned ph = std::min(in.patch_size, in.height - py * in.patch_size);
    // Version 1: every row is at least one byte; a first row (no row above) carries its full
    // header. Version 2: a patch header byte, then a colour or at least a byte per plane.
    const bool has_first = !((in.flags & kFlagInterPatch) && py > 0) && !huff;
    const uint64_t min_bytes =
        in.version >= 2 ? 1u + in.channels
                        : uint64_t{in.channels} *
                              (ph + (has_first ? row_header_bytes(row_segments(pw, in.segment_log2)) - 1 : 0));
    if (end < begin || end > in.data_bytes || end - begin < min_bytes) return invalid("L3: bad patch offset table");
  }
  return in;
}

fid::Status l3_decode_into(std::span<const uint8_t> data, std::span<uint8_t> out) {
  fid::Result<L3Info> probed = l3_probe(data);
  if (!probed) return std::move(probed).error();
  const L3Info& info = *probed;
  if (out.size() != info.raw_bytes()) return invalid("L3: output buffer has the wrong size");
  auto scratch = std::make_unique<PatchScratch>();
  scratch->zero.fill(0);
  const bool huff = (info.flags & kFlagHuffCodes) != 0;
  std::unique_ptr<FastCodes> fast;
  if (huff) {
    fast = std::make_unique<FastCodes>();
    fast->build(data.data() + kL3HeaderBytes);
  }
  const uint8_t* table = data.data() + kL3HeaderBytes + (huff ? kCodeTableBytes : 0);
  const uint8_t* base = data.data() + info.header_bytes;
  const size_t stride = size_t{info.width} * info.channels;
  const uint32_t N = info.patch_size;
  for (uint32_t j = 0; j < info.patches_y; ++j) {
    for (uint32_t i = 0; i < info.patches_x; ++i) {
      size_t idx = size_t{j} * info.patches_x + i;
      size_t begin = get_u32(table + 4 * idx);
      size_t end = idx + 1 < info.patches() ? get_u32(table + 4 * (idx + 1)) : info.data_bytes;
      uint32_t x0 = i * N, y0 = j * N;
      fid::Status patch = decode_patch(base + begin, base + end, info, fast.get(), x0, y0, std::min(N, info.width - x0),
                                       std::min(N, info.height - y0), out.data(), stride, *scratch);
      if (!patch) return patch;
    }
  }
  return {};
}

fid::Result<Image> l3_decode(std::span<const uint8_t> data) {
  fid::Result<L3Info> probed = l3_probe(data);
  if (!probed) return std::move(probed).error();
  Image out;
  out.width = probed->width;
  out.height = probed->height;
  out.channels = probed->channels;
  out.pixels.assign(probed->raw_bytes(), 0);
  if (fid::Status decoded = l3_decode_into(data, out.pixels); !decoded) return std::move(decoded).error();
  return out;
}

}  // namespace fid::codec
