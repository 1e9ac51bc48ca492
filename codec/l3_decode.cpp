// L3 CPU decoder. Format: docs/L3_FORMAT.md. Shared kernels: codec/l3_kernels.h; the row
// kernels with their SIMD paths: codec/l3_cpu_rows.h.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "codec/l3.h"
#include "codec/l3_cpu_rows.h"
#include "codec/l3_internal.h"
#include "codec/l3_kernels.h"

namespace fid::codec {
namespace {

using namespace fid::l3k;
using namespace fid::codec::l3detail;

struct PatchScratch {
  // Per plane, a ring of 3 rows (row y at slot y % 3), each with one guard sample either side.
  std::array<std::array<std::array<uint8_t, kMaxPatch + 2>, 3>, 4> rows;
  std::array<uint8_t, kMaxPatch> r;
  std::array<uint8_t, kMaxPatch> e0;
  std::array<uint8_t, kMaxPatch> zero;
  std::array<std::array<uint8_t, kMaxSegments>, 4> above;  // codes of the row above, per plane
};

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

// Where a patch's pixels go: patch (x0, y0), pw x ph, of the image `img` (rows `stride` apart).
struct PatchPlace {
  uint8_t* img;
  size_t stride;
  unsigned channels;
  uint32_t x0, y0;
  unsigned pw, ph;

  // The patch's pixel (0, y); y < 0 is a row of the patch above (INTER_PATCH).
  uint8_t* row(int y) const {
    const auto yy = static_cast<uint32_t>(static_cast<int>(y0) + y);
    return img + yy * stride + size_t{x0} * channels;
  }
};

// Version 2's patch header byte at p (l3_probe made sure the patch has 1 + C bytes). A constant
// patch is written out here (`constant` set); a coded one gives its segment length, and p moves
// past the byte.
fid::Status read_patch_header(const uint8_t*& p, const uint8_t* end, const PatchPlace& at, unsigned& seg_log2,
                              bool& constant) {
  const unsigned kind = p[0] & 15u, high = p[0] >> 4;
  const unsigned C = at.channels;
  if (kind == kPatchConstant) {
    if (high != 0 || end - p != 1 + static_cast<std::ptrdiff_t>(C)) return invalid("L3: bad constant patch");
    for (unsigned y = 0; y < at.ph; ++y) {
      uint8_t* dst = at.row(static_cast<int>(y));
      for (unsigned x = 0; x < at.pw; ++x) std::memcpy(dst + size_t{x} * C, p + 1, C);
    }
    constant = true;
    return {};
  }
  if (kind != kPatchCoded || high < kMinSegLog2 || high > kMaxSegLog2) return invalid("L3: bad patch header");
  seg_log2 = high;
  ++p;
  return {};
}

// A patch's coded rows, read in stream order into residuals.
class RowReader {
 public:
  RowReader(const uint8_t* p, const uint8_t* end, const FastCodes* fast, const PatchPlace& at, unsigned seg_log2,
            bool v2)
      : p_(p), end_(end), fast_(fast), pw_(at.pw), ph_(at.ph), sl_(seg_log2), nseg_(row_segments(at.pw, seg_log2)),
        v2_(v2) {
    // What a segment code adds to its row's body, for full segments and the (possibly shorter)
    // last one: body bytes in the low 16 bits, base bytes (0 or 1) from bit 16, so one sum gives
    // both (a row's body is at most 1024 + 128 bytes).
    const unsigned last_cnt = pw_ - (nseg_ - 1) * (1u << sl_);
    for (unsigned code = 0; code < 16; ++code) {
      const unsigned extra = code_has_base(code) ? 1u : 0u;
      full_cost_[code] = static_cast<uint32_t>(packed_bytes(1u << sl_, code_width(code)) + extra) | extra << 16;
      last_cost_[code] = static_cast<uint32_t>(packed_bytes(last_cnt, code_width(code)) + extra) | extra << 16;
    }
  }

  unsigned segments() const { return nseg_; }
  bool at_end() const { return p_ == end_; }

  // The next row of coded plane k (row y of the patch; `first`: it has no row above): its mode
  // and its pw residuals in r. `codes` holds the plane's previous row's codes (the Huffman
  // contexts) and gets this row's.
  fid::Status read(unsigned k, unsigned y, bool first, uint8_t* codes, uint8_t* r, unsigned& mode) {
    if (run_[k] > 0) {  // a row covered by a copy run: nothing in the stream
      --run_[k];
      mode = run_mode_[k];
      std::memset(r, 0, pw_);
      return {};
    }
    const size_t avail = static_cast<size_t>(end_ - p_);
    uint32_t cost = 0;
    const size_t hdr = read_header(avail, codes, mode, cost);
    if (hdr == 0) return invalid("L3: bad row header or row past its patch");
    if ((mode & kModeCross) && k == 0) return invalid("L3: cross-channel bit set on the first plane");
    if ((mode & 7u) == kPredCopy) return read_copy_row(k, y, first, avail, hdr, mode, r);
    if ((mode & 7u) >= (first ? kNumFirstPredictors : kNumPredictors)) return invalid("L3: invalid row predictor");
    cost += last_cost_[codes[nseg_ - 1]] - full_cost_[codes[nseg_ - 1]];
    const size_t body = cost & 0xFFFFu;
    const unsigned nbases = cost >> 16;
    if (body > avail - hdr) return invalid("L3: row data runs past its patch");
    l3cpu::unpack_row_fast(p_ + hdr, body, end_, codes, pw_, sl_, nbases, r);
    p_ += hdr + body;
    return {};
  }

 private:
  // The row header's bytes (0: bad code, or past the patch); `cost` sums its codes' full_cost_.
  // Each context (the previous row's code) is read before its segment's code replaces it, so
  // `codes` serves as both.
  size_t read_header(size_t avail, uint8_t* codes, unsigned& mode, uint32_t& cost) const {
    if (fast_) return fast_->read_header(p_, avail, nseg_, codes, &mode, codes, full_cost_.data(), &cost);
    const size_t hdr = read_row_header(p_, avail, nseg_, nullptr, codes, &mode, codes);
    for (unsigned sg = 0; sg < nseg_; ++sg) cost += full_cost_[codes[sg]];
    return hdr;
  }

  // A copy row (all residuals 0); in version 2 it may cover the plane's next rows.
  fid::Status read_copy_row(unsigned k, unsigned y, bool first, size_t avail, size_t hdr, unsigned mode,
                            uint8_t* r) {
    if (first) return invalid("L3: invalid row predictor");
    if (v2_) {
      unsigned extra = 0;
      hdr = read_copy_run(p_, avail, &extra);
      if (hdr == 0) return invalid("L3: copy run past its patch");
      if (extra > ph_ - 1 - y) return invalid("L3: copy run past the patch's last row");
      run_[k] = extra;
      run_mode_[k] = mode;
    } else if ((p_[0] >> 4) != 0) {
      return invalid("L3: invalid row predictor");
    }
    std::memset(r, 0, pw_);
    p_ += hdr;
    return {};
  }

  const uint8_t* p_;
  const uint8_t* const end_;
  const FastCodes* const fast_;
  const unsigned pw_, ph_, sl_, nseg_;
  const bool v2_;
  std::array<uint32_t, 16> full_cost_{}, last_cost_{};
  std::array<unsigned, 4> run_{};  // v2: rows of each plane still covered by a copy run
  std::array<unsigned, 4> run_mode_{};
};

// INTER_PATCH: the (up to 2) image rows above the patch into the planes' rings, at the slots
// of rows -2 and -1. Returns the first row available above the patch (-2 or -1).
int load_rows_above(const PatchPlace& at, PatchScratch& s) {
  const int avail_from = -static_cast<int>(std::min(at.y0, 2u));
  const unsigned C = at.channels, pw = at.pw;
  for (int k = avail_from; k < 0; ++k) {
    const uint8_t* row = at.row(k);
    const unsigned slot = static_cast<unsigned>(k + 3) % 3;
    for (unsigned c = 0; c < C; ++c) {
      uint8_t* d = s.rows[c][slot].data() + 1;
      for (unsigned x = 0; x < pw; ++x) d[x] = row[size_t{x} * C + c];
      d[-1] = d[0];
      d[pw] = d[pw - 1];
    }
  }
  return avail_from;
}

// A first row (no row above): predictor "left" (a running sum from 128) or "constant" 128.
inline void first_row(unsigned pred, const uint8_t* r, const uint8_t* e, uint8_t* o, unsigned pw) {
  if (pred == kFirstLeft) {
    uint8_t v = 128;
    for (unsigned x = 0; x < pw; ++x) o[x] = v = static_cast<uint8_t>(v + r[x] + e[x]);
  } else {
    for (unsigned x = 0; x < pw; ++x) o[x] = static_cast<uint8_t>(128 + r[x] + e[x]);
  }
}

// Row y of the patch: each plane's residuals read and reconstructed into its ring (rows with
// a row above from rows y-1 and y-2 there; `avail_from` is the first row that exists above the
// patch, 0 or negative), then the pixels interleaved into the image.
fid::Status decode_row(RowReader& rows, unsigned y, int avail_from, const PatchPlace& at, PatchScratch& s) {
  const int yi = static_cast<int>(y);
  const bool first = yi - 1 < avail_from;
  const unsigned slot = y % 3, tslot = (y + 2) % 3;
  const unsigned ttslot = (yi - 2 >= avail_from) ? (y + 1) % 3 : tslot;
  const unsigned C = at.channels, pw = at.pw;
  for (unsigned k = 0; k < C; ++k) {
    const unsigned c = plane_of(C, k);
    uint8_t* r = (k == 0) ? s.e0.data() : s.r.data();
    unsigned mode = 0;
    if (fid::Status read = rows.read(k, y, first, s.above[k].data(), r, mode); !read) return read;
    const uint8_t* e = (mode & kModeCross) ? s.e0.data() : s.zero.data();
    uint8_t* o = s.rows[c][slot].data() + 1;
    if (first)
      first_row(mode & 7u, r, e, o, pw);
    else
      l3cpu::recon_row(mode & 7u, s.rows[c][tslot].data() + 1, s.rows[c][ttslot].data() + 1, r, e, o, pw);
    o[-1] = o[0];
    o[pw] = o[pw - 1];
  }
  const std::array<const uint8_t*, 4> planes = {s.rows[0][slot].data() + 1, s.rows[1][slot].data() + 1,
                                                s.rows[2][slot].data() + 1, s.rows[3][slot].data() + 1};
  l3cpu::interleave_row(C, planes, pw, at.row(yi));
  return {};
}

// Decodes one patch from [p, end) into its place in the image.
fid::Status decode_patch(const uint8_t* p, const uint8_t* end, const L3Info& info, const FastCodes* fast,
                         const PatchPlace& at, PatchScratch& s) {
  const bool v2 = info.version >= 2;
  unsigned seg_log2 = info.segment_log2;
  if (v2) {
    bool constant = false;
    if (fid::Status header = read_patch_header(p, end, at, seg_log2, constant); !header || constant) return header;
  }
  RowReader rows(p, end, fast, at, seg_log2, v2);
  for (auto& a : s.above) std::fill(a.begin(), a.begin() + rows.segments(), uint8_t{0});
  const int avail_from = (info.flags & kFlagInterPatch) && at.y0 > 0 ? load_rows_above(at, s) : 0;
  for (unsigned y = 0; y < at.ph; ++y)
    if (fid::Status row = decode_row(rows, y, avail_from, at, s); !row) return row;
  if (!rows.at_end()) return invalid("L3: patch has trailing bytes");
  return {};
}

}  // namespace

bool looks_like_l3(std::span<const uint8_t> data) {
  return data.size() >= 4 && std::memcmp(data.data(), kMagic, 4) == 0;
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
      const PatchPlace at{out.data(), stride, info.channels, x0, y0, std::min(N, info.width - x0),
                          std::min(N, info.height - y0)};
      fid::Status patch = decode_patch(base + begin, base + end, info, fast.get(), at, *scratch);
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
