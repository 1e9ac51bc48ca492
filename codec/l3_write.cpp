// Measuring and writing the L3 encoder's coded patches (codec/l3_coded_patch.h): row headers
// as nibbles or Huffman codes, the patches, the file's header and offset table.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "codec/l3_coded_patch.h"
#include "codec/l3_internal.h"
#include "codec/l3_kernels.h"

namespace fid::codec::l3detail {
namespace {

using namespace fid::l3k;

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

// Bytes of a coded row's header: nibbles (lens null) or Huffman codes with the lengths `lens`
// [context][symbol]; `above` holds the contexts and is updated to this row's codes.
size_t header_bytes(const PatchRec& r, size_t row, const CodeLengths* lens,
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

using CodeWords = std::array<std::array<uint16_t, 16>, 16>;

// The canonical Huffman code of each symbol in each context, from the code lengths.
CodeWords canonical_codes(const CodeLengths& lens) {
  CodeWords words{};
  for (unsigned c = 0; c < 16; ++c) {
    std::array<unsigned, 17> count{}, next{};
    for (unsigned s = 0; s < 16; ++s) ++count[lens[c][s]];
    count[0] = 0;
    for (unsigned l = 1; l < 16; ++l) next[l + 1] = (next[l] + count[l]) << 1;
    for (unsigned s = 0; s < 16; ++s)
      if (lens[c][s]) words[c][s] = static_cast<uint16_t>(next[lens[c][s]]++);
  }
  return words;
}

// How row headers are written: nibbles (lens null) or Huffman codes.
struct HeaderCodes {
  const CodeLengths* lens;
  const CodeWords& words;
};

// A coded row's header with the segment codes as nibbles.
void write_nibble_header(std::vector<uint8_t>& out, unsigned mode, const uint8_t* codes, unsigned nseg) {
  const size_t at = out.size();
  out.resize(at + row_header_bytes(nseg), 0);
  auto set_nibble = [&](unsigned k, unsigned v) {
    out[at + (k >> 1)] = static_cast<uint8_t>(out[at + (k >> 1)] | (v << ((k & 1) * 4)));
  };
  set_nibble(0, mode);
  for (unsigned s = 0; s < nseg; ++s) set_nibble(s + 1, codes[s]);
}

// A coded row's header with the segment codes Huffman-coded, each in the context of the code
// above it (`above`: the plane's previous row's codes).
void write_huffman_header(std::vector<uint8_t>& out, unsigned mode, const uint8_t* codes, unsigned nseg,
                          const uint8_t* above, const HeaderCodes& hc) {
  const size_t at = out.size();
  out.push_back(static_cast<uint8_t>(mode));
  size_t bit = 4;
  for (unsigned s = 0; s < nseg; ++s) {
    const unsigned l = (*hc.lens)[above[s]][codes[s]], v = hc.words[above[s]][codes[s]];
    for (unsigned i = l; i-- > 0;) {
      if ((bit >> 3) >= out.size() - at) out.push_back(0);
      out[at + (bit >> 3)] = static_cast<uint8_t>(out[at + (bit >> 3)] | (((v >> i) & 1u) << (bit & 7)));
      ++bit;
    }
  }
}

// Coded row `row` of a patch: its header (nothing for a row inside a copy run: its codes are all
// 0, like the run's first row), then its body.
void write_row(std::vector<uint8_t>& out, const PatchRec& r, size_t row, size_t body_at, const uint8_t* above,
               const HeaderCodes& hc) {
  const uint8_t* codes = r.codes.data() + row * r.nseg;
  const unsigned mode = r.modes[row];
  const unsigned run = r.run.empty() ? 0 : r.run[row];
  if (run == kCovered) {
    // inside a copy run: no header
  } else if ((mode & 7u) == kPredCopy) {
    out.push_back(static_cast<uint8_t>(mode | (std::min(run, 15u) << 4)));
    if (run >= 15) out.push_back(static_cast<uint8_t>(run - 15));
  } else if (!hc.lens) {
    write_nibble_header(out, mode, codes, r.nseg);
  } else {
    write_huffman_header(out, mode, codes, r.nseg, above, hc);
  }
  out.insert(out.end(), r.body.begin() + static_cast<std::ptrdiff_t>(body_at),
             r.body.begin() + static_cast<std::ptrdiff_t>(body_at + r.body_len[row]));
}

// One patch's bytes: v2's patch header byte, then a colour or the coded rows.
void write_patch(std::vector<uint8_t>& out, const PatchRec& r, unsigned C, bool v2, const HeaderCodes& hc) {
  if (r.kind == kPatchConstant) {
    out.push_back(static_cast<uint8_t>(kPatchConstant));
    out.insert(out.end(), r.color.begin(), r.color.begin() + C);
    return;
  }
  if (v2) out.push_back(static_cast<uint8_t>(kPatchCoded | (r.seg_log2 << 4)));
  std::array<std::array<uint8_t, kMaxSegments>, 4> above{};  // per plane: the codes of its last row
  size_t body_at = 0;
  for (size_t row = 0; row < r.modes.size(); ++row) {
    auto& ab = above[row % C];
    write_row(out, r, row, body_at, ab.data(), hc);
    body_at += r.body_len[row];
    const uint8_t* codes = r.codes.data() + row * r.nseg;
    std::copy(codes, codes + r.nseg, ab.begin());
  }
}

// The fixed header (docs/L3_FORMAT.md section 1) and, with Huffman codes, the code length table.
void write_header(uint8_t* out, const ImageView& im, const L3Options& opt, uint32_t N, unsigned seg_log2,
                  size_t data_bytes, const CodeLengths* lens) {
  const bool v2 = opt.version >= 2;
  std::memcpy(out, kMagic, 4);
  out[4] = v2 ? 2 : 1;
  out[5] = im.channels;
  out[6] = static_cast<uint8_t>(v2 ? 0 : seg_log2);
  out[7] = static_cast<uint8_t>((opt.inter_patch_rows ? kFlagInterPatch : 0) | (lens ? kFlagHuffCodes : 0));
  put_u32(&out[8], im.width);
  put_u32(&out[12], im.height);
  put_u16(&out[16], N);
  put_u16(&out[18], 0);
  put_u32(&out[20], static_cast<uint32_t>(data_bytes));
  if (!lens) return;
  size_t at = kL3HeaderBytes;
  for (unsigned c = 0; c < 16; ++c)
    for (unsigned s = 0; s < 16; s += 2) out[at++] = static_cast<uint8_t>((*lens)[c][s] | ((*lens)[c][s + 1] << 4));
}

}  // namespace

// Bytes of a patch (headers as nibbles or with `lens`, bodies, v2's patch byte).
size_t patch_bytes(const PatchRec& r, unsigned C, bool v2, const CodeLengths* lens) {
  if (r.kind == kPatchConstant) return 1 + C;
  std::array<std::array<uint8_t, kMaxSegments>, 4> above{};
  size_t bytes = r.body.size() + (v2 ? 1 : 0);
  for (size_t row = 0; row < r.modes.size(); ++row) bytes += header_bytes(r, row, lens, above[row % C].data());
  return bytes;
}

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
fid::Result<std::vector<uint8_t>> write_l3_file(const ImageView& im, const L3Options& opt, uint32_t patch_size,
                                                unsigned seg_log2, const std::vector<PatchRec>& recs,
                                                const CodeLengths* lens, uint64_t size_hint) {
  const size_t patches = recs.size();
  const size_t header = kL3HeaderBytes + (lens ? kCodeTableBytes : 0) + 4 * patches;
  std::vector<uint8_t> out(header, 0);
  out.reserve(header + size_hint);
  const CodeWords words = lens ? canonical_codes(*lens) : CodeWords{};
  const HeaderCodes hc{lens, words};
  std::vector<uint32_t> offsets(patches);
  for (size_t pi = 0; pi < patches; ++pi) {
    const size_t off = out.size() - header;
    if (off > UINT32_MAX) return invalid("L3: encoded image exceeds 4 GiB");
    offsets[pi] = static_cast<uint32_t>(off);
    write_patch(out, recs[pi], im.channels, opt.version >= 2, hc);
  }
  const size_t data = out.size() - header;
  if (data > UINT32_MAX) return invalid("L3: encoded image exceeds 4 GiB");
  write_header(out.data(), im, opt, patch_size, seg_log2, data, lens);
  const size_t table_at = kL3HeaderBytes + (lens ? kCodeTableBytes : 0);
  for (size_t p = 0; p < patches; ++p) put_u32(&out[table_at + 4 * p], offsets[p]);
  return out;
}

}  // namespace fid::codec::l3detail
