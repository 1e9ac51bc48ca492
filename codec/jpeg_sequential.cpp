// A JPEG level re-encoded as one sequential scan with the pixels of the progressive level.
//
// A progressive image that lacks some AC coefficients is decoded by libjpeg-turbo with block
// smoothing: before the inverse DCT, it estimates missing low coefficients from the DC values of
// neighbouring blocks (ITU T.81 K.8, extended in libjpeg-turbo 2.1). A sequential file has every
// coefficient, so it is never smoothed. To give the sequential file the same pixels, the
// transcode runs the decoder itself and takes each block as its inverse DCT receives it, i.e.
// after smoothing: the decoder's own inverse-DCT entry (struct jpeg_inverse_dct, from
// jpegint.h) is replaced by one that copies the block. Those coefficients are then written as
// they are. Because the estimates come from the very library that decodes, the match does not
// depend on re-implementing its smoothing. The decode runs with raw output, so no colour
// conversion or upsampling is spent on pixels nobody looks at.
//
// A sequential 8-bit JPEG codes AC values within -1023..1023 and DC differences of at most 11 bits
// (T.81 F.1.2). The estimates can leave that range where the quantiser is 1 (quality 96 and up): a
// black or white area's DC is estimated past -1024 or 1023. Such a coefficient is moved to the
// nearest value that gives the block the same samples under the decoder's own inverse DCT (each
// sample is monotone in one coefficient, so the values that keep them form an interval, and its
// end nearest the range is found by bisection); a block whose samples are all 0 or all 255
// becomes the flat block at the range's end. DC values are moved only where their differences
// do not fit as they are; where moved ones still do not, restart markers at every MCU a difference
// does not fit (DRI: the longest interval that has them all) start those predictions at 0. A level that still cannot be coded is ENOTSUP: its caller serves the
// progressive level, which has those pixels anyway.
//
// Error handling as in jpeg.cpp: objects with destructors are constructed before setjmp.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <csetjmp>
#include <cstring>
#include <limits>

#include "codec/jpeg.h"
#include "codec/jpeg_markers.h"
#include "codec/libjpeg_glue.h"

extern "C" {
#include <jpegint.h>
}

namespace fid::codec {
namespace {

using namespace libjpeg;

struct SequentialTranscoder {
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  ErrorMgr err;
  jpeg_progress_mgr progress;
  VectorDest dest;
  bool src_created = false;
  bool dst_created = false;
  // The smoothed coefficients, one array per component, and the rows being decoded.
  jvirt_barray_ptr blocks[MAX_COMPONENTS]{};
  JBLOCKARRAY imcu_rows[MAX_COMPONENTS]{};  // this iMCU row of each component's blocks
  JSAMPARRAY raw_rows[MAX_COMPONENTS]{};    // the raw output rows handed to libjpeg
  inverse_DCT_method_ptr idct[MAX_COMPONENTS]{};  // the decoder's own, to check that a moved coefficient keeps the samples
  JDIMENSION imcu_row = 0;                  // the iMCU row being decoded
  bool bad_block = false;                   // the decoder handed a block outside the image
  bool outside_range = false;               // some value outside what an 8-bit DCT gives
  bool uncodable = false;                   // an AC value a sequential 8-bit JPEG cannot code, whatever the samples allow
  // Blocks whose DC value is outside -1024..1023, as near that range as their samples allow:
  // used only if the DC differences do not fit as they are.
  struct MovableBlock {
    int ci;
    JDIMENSION block_row, block_col;
    JBLOCK moved;
  };
  std::vector<MovableBlock> movable_blocks;
  size_t blocks_kept = 0;                   // must end as the image's count: no block left unwritten
  jpeg_scan_info scans[MAX_COMPONENTS];     // one per component, where one scan cannot hold them all

  SequentialTranscoder() {
    std::memset(&src, 0, sizeof src);
    std::memset(&dst, 0, sizeof dst);
    init_error_mgr(err);
    std::memset(&progress, 0, sizeof progress);
    progress.progress_monitor = on_progress;
  }
  ~SequentialTranscoder() {
    if (dst_created) jpeg_destroy_compress(&dst);
    if (src_created) jpeg_destroy_decompress(&src);
  }
  SequentialTranscoder(const SequentialTranscoder&) = delete;
  SequentialTranscoder& operator=(const SequentialTranscoder&) = delete;
};

constexpr int kMinDc = -1024, kMaxDc = 1023, kMaxAc = 1023;  // what an 8-bit JPEG's DCT gives (T.81 F.1.2)

bool in_range(const JCOEF* block) {
  int over = (block[0] < kMinDc) | (block[0] > kMaxDc);
  for (int k = 1; k < DCTSIZE2; ++k) over |= (block[k] < -kMaxAc) | (block[k] > kMaxAc);
  return over == 0;
}

// The samples the decoder's inverse DCT makes of a block (8 x 8: no scaling is asked for).
using Samples = std::array<JSAMPLE, DCTSIZE2>;
Samples samples_of(const SequentialTranscoder& t, j_decompress_ptr c, jpeg_component_info* comp, const JCOEF* block) {
  alignas(32) JBLOCK in;
  std::memcpy(in, block, sizeof in);
  Samples out{};
  JSAMPROW rows[DCTSIZE];
  for (int r = 0; r < DCTSIZE; ++r) rows[r] = out.data() + r * DCTSIZE;
  t.idct[comp->component_index](c, comp, in, rows, 0);
  return out;
}

// Moves a block's values outside the coded range to the nearest ones with the same samples: AC
// values into the range (else the block is uncodable), a DC value as near it as the samples allow
// (recorded, not applied): a block of one saturated sample value becomes flat at the range's end,
// any other keeps its AC values and moves its DC value. `row`, `col`: its place in its component.
void fit_block(SequentialTranscoder& t, j_decompress_ptr c, jpeg_component_info* comp, JCOEF* block, JDIMENSION row,
               JDIMENSION col) {
  if (comp->DCT_scaled_size != DCTSIZE) {
    t.uncodable = true;
    return;
  }
  const Samples want = samples_of(t, c, comp, block);
  bool ac_moved = false;
  for (int k = 1; k < DCTSIZE2; ++k) {
    const JCOEF clamped = static_cast<JCOEF>(std::clamp<int>(block[k], -kMaxAc, kMaxAc));
    ac_moved |= clamped != block[k];
    block[k] = clamped;
  }
  if (ac_moved && samples_of(t, c, comp, block) != want) {
    t.uncodable = true;
    return;
  }
  const int dc = block[0];
  if (dc >= kMinDc && dc <= kMaxDc) return;
  SequentialTranscoder::MovableBlock m{comp->component_index, row, col, {}};
  const JCOEF end = static_cast<JCOEF>(dc < kMinDc ? kMinDc : kMaxDc);
  const bool one_value = std::all_of(want.begin(), want.end(), [&](JSAMPLE v) { return v == want[0]; });
  if (one_value && (want[0] == 0 || want[0] == MAXJSAMPLE)) {
    m.moved[0] = end;  // every AC value 0
    if (samples_of(t, c, comp, m.moved) == want) {
      t.movable_blocks.push_back(m);
      return;
    }
  }
  // The samples are monotone in the DC value: bisection between dc (keeps them) and the range's
  // end (may not).
  std::memcpy(m.moved, block, sizeof m.moved);
  auto keeps_samples = [&](int value) {
    m.moved[0] = static_cast<JCOEF>(value);
    return samples_of(t, c, comp, m.moved) == want;
  };
  int keeps = dc, changes = end;
  if (keeps_samples(changes)) {
    keeps = changes;
  } else {
    while (std::abs(changes - keeps) > 1) {
      const int mid = keeps + (changes - keeps) / 2;
      (keeps_samples(mid) ? keeps : changes) = mid;
    }
  }
  m.moved[0] = static_cast<JCOEF>(keeps);
  if (keeps != dc) t.movable_blocks.push_back(m);
}

// Stands in for the inverse DCT: keeps the block the decoder would transform. Its place in the
// image follows from where libjpeg would write its pixels: the column from output_col, the
// block row from the output rows' offset within this iMCU row.
void keep_block(j_decompress_ptr c, jpeg_component_info* comp, JCOEFPTR block, JSAMPARRAY output_rows,
                JDIMENSION output_col) {
  auto* t = static_cast<SequentialTranscoder*>(c->client_data);
  const int ci = comp->component_index;
  const int size = comp->DCT_scaled_size;
  const ptrdiff_t row = output_rows - t->raw_rows[ci];
  const JDIMENSION col = output_col / static_cast<JDIMENSION>(size);
  if (ci < 0 || ci >= c->num_components || row < 0 || row % size != 0 || row / size >= comp->v_samp_factor ||
      col >= comp->width_in_blocks || output_col % static_cast<JDIMENSION>(size) != 0) {
    t->bad_block = true;
    return;
  }
  JCOEF* kept = t->imcu_rows[ci][row / size][col];
  std::memcpy(kept, block, sizeof(JBLOCK));
  const auto block_row = t->imcu_row * static_cast<JDIMENSION>(comp->v_samp_factor) + static_cast<JDIMENSION>(row / size);
  if (!in_range(kept)) {
    t->outside_range = true;
    fit_block(*t, c, comp, kept, block_row, col);
  }
  ++t->blocks_kept;
}

// Decodes the whole image through keep_block, one iMCU row at a time.
void decode_smoothed(SequentialTranscoder& t, std::vector<JSAMPROW>& row_pointers, std::vector<JSAMPLE>& scratch) {
  jpeg_decompress_struct& s = t.src;
  for (int ci = 0; ci < s.num_components; ++ci) {
    jpeg_component_info& comp = s.comp_info[ci];
    const JDIMENSION wide = comp.width_in_blocks + static_cast<JDIMENSION>(comp.h_samp_factor);
    const JDIMENSION tall = comp.height_in_blocks + static_cast<JDIMENSION>(comp.v_samp_factor);
    // Zeroed, so that even a block libjpeg never handed over could not make the output vary.
    t.blocks[ci] = (*s.mem->request_virt_barray)(reinterpret_cast<j_common_ptr>(&s), JPOOL_IMAGE, TRUE, wide, tall,
                                                 static_cast<JDIMENSION>(comp.v_samp_factor));
  }
  s.raw_data_out = TRUE;
  s.do_block_smoothing = TRUE;  // the default, and the point: the blocks as a default decode sees them
  s.client_data = &t;
  jpeg_start_decompress(&s);  // reads every scan, realizes the arrays, picks the inverse DCTs
  for (int ci = 0; ci < s.num_components; ++ci) {
    t.idct[ci] = s.idct->inverse_DCT[ci];
    s.idct->inverse_DCT[ci] = keep_block;
  }

  // Raw output wants v_samp_factor * DCT_scaled_size rows of every component per call; their
  // pixels are never written (keep_block replaces the only writer), so all rows share one scratch row.
  size_t row_bytes = 0;
  int rows_per_component = 0;
  for (int ci = 0; ci < s.num_components; ++ci) {
    const jpeg_component_info& comp = s.comp_info[ci];
    row_bytes = std::max<size_t>(row_bytes, size_t{comp.width_in_blocks + 1} * DCTSIZE * comp.h_samp_factor);
    rows_per_component = std::max(rows_per_component, comp.v_samp_factor * comp.DCT_scaled_size);
  }
  scratch.resize(row_bytes);
  row_pointers.assign(static_cast<size_t>(rows_per_component) * s.num_components, scratch.data());
  JSAMPARRAY planes[MAX_COMPONENTS];
  for (int ci = 0; ci < s.num_components; ++ci) planes[ci] = t.raw_rows[ci] = &row_pointers[ci * rows_per_component];

  const JDIMENSION rows_per_call = static_cast<JDIMENSION>(s.max_v_samp_factor * s.min_DCT_scaled_size);
  for (JDIMENSION imcu = 0; s.output_scanline < s.output_height; ++imcu) {
    t.imcu_row = imcu;
    for (int ci = 0; ci < s.num_components; ++ci) {
      const auto v = static_cast<JDIMENSION>(s.comp_info[ci].v_samp_factor);
      t.imcu_rows[ci] = (*s.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&s), t.blocks[ci], imcu * v, v, TRUE);
    }
    if (jpeg_read_raw_data(&s, planes, rows_per_call) == 0) ERREXIT(&s, JERR_INPUT_EMPTY);
  }
}

bool fits_one_scan(const jpeg_decompress_struct& s) {
  int blocks = 0;
  for (int ci = 0; ci < s.num_components; ++ci) blocks += s.comp_info[ci].h_samp_factor * s.comp_info[ci].v_samp_factor;
  return s.num_components <= MAX_COMPS_IN_SCAN && blocks <= D_MAX_BLOCKS_IN_MCU;
}

// The level has no sequential form with its pixels: ENOTSUP, with why.
bool unsupported(SequentialTranscoder& t, const char* why) {
  std::snprintf(t.err.message, sizeof t.err.message, "%s", why);
  t.err.code = ENOTSUP;
  return false;
}

bool run(SequentialTranscoder& t, std::span<const uint8_t> jpeg, HuffmanTables tables, std::vector<uint8_t>& out) {
  std::vector<JSAMPROW> row_pointers;  // before setjmp: a longjmp skips no destructor
  std::vector<JSAMPLE> scratch;
  if (setjmp(t.err.jump)) return false;
  jpeg_decompress_struct& s = t.src;
  s.err = &t.err.pub;
  jpeg_create_decompress(&s);
  t.src_created = true;
  s.progress = &t.progress;
  s.mem->max_memory_to_use = kMaxCoefficientMemory;
  jpeg_mem_src(&s, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  save_markers(&s);
  jpeg_read_header(&s, TRUE);
  if (s.arith_code || s.data_precision != 8) return unsupported(t, "only 8-bit Huffman JPEGs are re-encoded sequential");
  decode_smoothed(t, row_pointers, scratch);
  if (t.uncodable) return unsupported(t, "an AC coefficient is out of the range a sequential JPEG can code (-1023..1023)");
  size_t image_blocks = 0;
  for (int ci = 0; ci < s.num_components; ++ci)
    image_blocks += size_t{s.comp_info[ci].width_in_blocks} * s.comp_info[ci].height_in_blocks;
  if (t.bad_block || t.blocks_kept != image_blocks) {
    std::snprintf(t.err.message, sizeof t.err.message, "libjpeg handed %zu blocks%s for an image of %zu", t.blocks_kept,
                  t.bad_block ? " (some outside the image)" : "", image_blocks);
    return false;
  }

  const bool interleaved = fits_one_scan(s) && s.num_components > 1;
  unsigned restart_interval = 0;
  if (t.outside_range && !dc_differences_fit(&s, t.blocks, interleaved, 0)) {
    for (const SequentialTranscoder::MovableBlock& m : t.movable_blocks) {
      JBLOCKARRAY row = (*s.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&s), t.blocks[m.ci], m.block_row, 1, TRUE);
      std::memcpy(row[0][m.block_col], m.moved, sizeof(JBLOCK));
    }
    if (!dc_differences_fit(&s, t.blocks, interleaved, 0)) {
      restart_interval = restart_interval_for_dc(&s, t.blocks, interleaved);
      if (restart_interval == 0)
        return unsupported(t, "a DC difference is out of the range a sequential JPEG can code (11 bits)");
    }
  }

  jpeg_compress_struct& d = t.dst;
  d.err = &t.err.pub;
  jpeg_create_compress(&d);
  t.dst_created = true;
  jpeg_copy_critical_parameters(&s, &d);
  d.arith_code = FALSE;
  d.optimize_coding = FALSE;  // optimized tables are set below, counted in one quick pass
  d.restart_interval = restart_interval;  // restarts only where a DC difference needs one
  d.restart_in_rows = 0;
  if (!fits_one_scan(s)) {
    // More than 4 components or 10 blocks per MCU cannot be interleaved: one full scan per
    // component, still sequential.
    for (int ci = 0; ci < s.num_components; ++ci) {
      t.scans[ci] = jpeg_scan_info{1, {ci, 0, 0, 0}, 0, DCTSIZE2 - 1, 0, 0};
    }
    d.scan_info = t.scans;
    d.num_scans = s.num_components;
  }
  if (tables == HuffmanTables::optimized) set_optimal_tables(&s, t.blocks, &d, interleaved);
  write_into(&d, t.dest, out, jpeg.size() * 2 + 4096);
  jpeg_write_coefficients(&d, t.blocks);
  copy_markers(&s, &d);
  jpeg_finish_compress(&d);
  jpeg_abort_decompress(&s);  // every scan is read; what follows EOI was judged when the level was cut
  return true;
}

}  // namespace

fid::Result<std::vector<uint8_t>> sequential_from_progressive(std::span<const uint8_t> jpeg, HuffmanTables tables) {
  if (!looks_like_jpeg(jpeg)) return fid::Error{EINVAL, jpeg.empty() ? "empty input" : "not a JPEG (no SOI marker)"};
  if (jpeg.size() > std::numeric_limits<uint32_t>::max() / 4) return fid::Error{EINVAL, "JPEG larger than 1 GiB"};
  std::vector<uint8_t> out;
  SequentialTranscoder t;
  if (!run(t, jpeg, tables, out)) return failure(t.err);
  return out;
}

fid::Result<uint64_t> sequential_memory(std::span<const uint8_t> header, uint64_t level_bytes) {
  fid::Result<JpegMarkerLayout> frame = read_frame_header(header);
  if (!frame) return std::move(frame).error();
  uint64_t max_h = 1, max_v = 1;
  for (const auto& [h, v] : frame->sampling) max_h = std::max<uint64_t>(max_h, h), max_v = std::max<uint64_t>(max_v, v);
  const uint64_t mcu_cols = (frame->width + 8 * max_h - 1) / (8 * max_h);
  const uint64_t mcu_rows = (frame->height + 8 * max_v - 1) / (8 * max_v);
  uint64_t blocks = 0;  // each component's blocks padded to whole MCUs, and one MCU more (blocks[] above)
  for (const auto& [h, v] : frame->sampling) blocks += (mcu_cols + 1) * h * (mcu_rows + 1) * v;
  constexpr uint64_t kCopies = 3;             // the decoder's, the re-encoded copy, the output's bound
  constexpr uint64_t kLibjpegWork = 1 << 20;  // tables, row buffers, the writer's state
  return level_bytes + kCopies * blocks * sizeof(JBLOCK) + kLibjpegWork;
}

}  // namespace fid::codec
