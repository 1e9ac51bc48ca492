// JPEG -> progressive JPEG transcoding (libjpeg coefficient API, in process) and the cut of the
// result into fidelity levels. See docs/FORMAT.md for the scan scripts.
//
// Error handling: libjpeg reports errors through error_exit and warnings through
// emit_message(-1). Both longjmp back to the setjmp in the calling function; any warning
// (corrupt data, premature end, ...) is a failure. Every function that calls setjmp keeps all
// objects with non-trivial destructors constructed *before* the setjmp, so the longjmp never
// skips a destructor, and the libjpeg objects are destroyed by a guard on every path.
#include "codec/jpeg.h"

#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>

#include "codec/jpeg_markers.h"
#include "codec/libjpeg_glue.h"

namespace fid::codec {
namespace {

using namespace libjpeg;

// decode_jpeg_strict refuses to produce more decoded bytes than this.
constexpr size_t kMaxDecodedBytes = size_t{1} << 30;

// ---------------------------------------------------------------------------------------------
// Scan scripts (documented in docs/FORMAT.md).

constexpr int kMaxScriptScans = kJpegLevels * MAX_COMPONENTS;

struct Script {
  jpeg_scan_info scans[kMaxScriptScans];
  uint8_t level[kMaxScriptScans];
  int count = 0;
  ScanScript kind = ScanScript::generic;
};

void add_scan(Script& s, int level, std::initializer_list<int> comps, int ss, int se, int ah,
              int al) {
  jpeg_scan_info& sc = s.scans[s.count];
  sc.comps_in_scan = 0;
  for (int c : comps) sc.component_index[sc.comps_in_scan++] = c;
  sc.Ss = ss;
  sc.Se = se;
  sc.Ah = ah;
  sc.Al = al;
  s.level[s.count] = static_cast<uint8_t>(level);
  ++s.count;
}

// DC scans interleave all components when they fit in one scan (at most 4 components and at
// most 10 blocks per MCU); otherwise one DC scan per component, all in the same level.
void add_dc(Script& s, int level, const jpeg_decompress_struct& src, int ah, int al) {
  int blocks = 0;
  for (int c = 0; c < src.num_components; ++c)
    blocks += src.comp_info[c].h_samp_factor * src.comp_info[c].v_samp_factor;
  if (src.num_components <= MAX_COMPS_IN_SCAN && blocks <= C_MAX_BLOCKS_IN_MCU) {
    jpeg_scan_info& sc = s.scans[s.count];
    sc.comps_in_scan = src.num_components;
    for (int c = 0; c < src.num_components; ++c) sc.component_index[c] = c;
    sc.Ss = sc.Se = 0;
    sc.Ah = ah;
    sc.Al = al;
    s.level[s.count] = static_cast<uint8_t>(level);
    ++s.count;
  } else {
    for (int c = 0; c < src.num_components; ++c) add_scan(s, level, {c}, 0, 0, ah, al);
  }
}

void add_ac_all(Script& s, int level, int ncomps, int ss, int se, int ah, int al) {
  for (int c = 0; c < ncomps; ++c) add_scan(s, level, {c}, ss, se, ah, al);
}

void build_script(const jpeg_decompress_struct& src, LevelScripts scripts, Script& s) {
  s.count = 0;
  const int n = src.num_components;
  const bool ycbcr = n == 3 && src.jpeg_color_space == JCS_YCbCr;
  if (scripts == LevelScripts::pcr && ycbcr) {
    s.kind = ScanScript::ycbcr;  // libjpeg's standard progression (jpeg_simple_progression)
    add_dc(s, 1, src, 0, 1);
    add_scan(s, 2, {0}, 1, 5, 0, 2);
    add_scan(s, 3, {2}, 1, 63, 0, 1);
    add_scan(s, 4, {1}, 1, 63, 0, 1);
    add_scan(s, 5, {0}, 6, 63, 0, 2);
    add_scan(s, 6, {0}, 1, 63, 2, 1);
    add_dc(s, 7, src, 1, 0);
    add_scan(s, 8, {2}, 1, 63, 1, 0);
    add_scan(s, 9, {1}, 1, 63, 1, 0);
    add_scan(s, 10, {0}, 1, 63, 1, 0);
  } else if (scripts == LevelScripts::pcr) {
    s.kind = ScanScript::generic;
    add_dc(s, 1, src, 0, 1);
    add_ac_all(s, 2, n, 1, 5, 0, 2);
    add_ac_all(s, 3, n, 6, 14, 0, 2);
    add_ac_all(s, 4, n, 15, 27, 0, 2);
    add_ac_all(s, 5, n, 28, 63, 0, 2);
    add_ac_all(s, 6, n, 1, 63, 2, 1);
    add_dc(s, 7, src, 1, 0);
    add_ac_all(s, 8, n, 1, 5, 1, 0);
    add_ac_all(s, 9, n, 6, 14, 1, 0);
    add_ac_all(s, 10, n, 15, 63, 1, 0);
  } else if (ycbcr) {
    // Spectral selection only: every coefficient is sent whole, in one scan, so libjpeg-turbo
    // never runs its refinement decode (the slowest part of a progressive decode, costing per
    // coefficient of the band in every block). From level 5 on, the DC and AC 1-9 of every
    // component are complete, so libjpeg-turbo also skips block smoothing there.
    s.kind = ScanScript::ycbcr_fast;
    add_dc(s, 1, src, 0, 0);
    add_scan(s, 2, {0}, 1, 2, 0, 0);
    add_scan(s, 3, {0}, 3, 5, 0, 0);
    add_scan(s, 4, {2}, 1, 9, 0, 0);
    add_scan(s, 4, {1}, 1, 9, 0, 0);
    add_scan(s, 5, {0}, 6, 9, 0, 0);
    add_scan(s, 6, {0}, 10, 14, 0, 0);
    add_scan(s, 7, {0}, 15, 20, 0, 0);
    add_scan(s, 8, {0}, 21, 27, 0, 0);
    add_scan(s, 8, {2}, 10, 63, 0, 0);  // chroma detail: large in high-quality 4:4:4 sources
    add_scan(s, 8, {1}, 10, 63, 0, 0);
    add_scan(s, 9, {0}, 28, 40, 0, 0);
    add_scan(s, 10, {0}, 41, 63, 0, 0);
  } else {
    // Every component follows the luma bands of ycbcr_fast; its level 4 (chroma 1-9 there) and
    // 5 split luma's 6-9 band.
    s.kind = ScanScript::generic_fast;
    add_dc(s, 1, src, 0, 0);
    add_ac_all(s, 2, n, 1, 2, 0, 0);
    add_ac_all(s, 3, n, 3, 5, 0, 0);
    add_ac_all(s, 4, n, 6, 7, 0, 0);
    add_ac_all(s, 5, n, 8, 9, 0, 0);
    add_ac_all(s, 6, n, 10, 14, 0, 0);
    add_ac_all(s, 7, n, 15, 20, 0, 0);
    add_ac_all(s, 8, n, 21, 27, 0, 0);
    add_ac_all(s, 9, n, 28, 40, 0, 0);
    add_ac_all(s, 10, n, 41, 63, 0, 0);
  }
}

// All libjpeg state of one transcode. Constructed before setjmp; its destructor releases
// libjpeg's memory on every path, including after a longjmp.
struct Transcoder {
  jpeg_decompress_struct src;
  jpeg_compress_struct dst;
  ErrorMgr err;
  jpeg_progress_mgr progress;
  VectorDest dest;
  Script script;
  bool src_created = false;
  bool dst_created = false;

  Transcoder() {
    std::memset(&src, 0, sizeof src);
    std::memset(&dst, 0, sizeof dst);
    init_error_mgr(err);
    std::memset(&progress, 0, sizeof progress);
    progress.progress_monitor = on_progress;
  }
  ~Transcoder() {
    if (dst_created) jpeg_destroy_compress(&dst);
    if (src_created) jpeg_destroy_decompress(&src);
  }
  Transcoder(const Transcoder&) = delete;
  Transcoder& operator=(const Transcoder&) = delete;
};

// Runs libjpeg. Returns false with the message in t.err.message.
bool run_transcode(Transcoder& t, std::span<const uint8_t> source, LevelScripts scripts,
                   std::vector<uint8_t>& out) {
  if (setjmp(t.err.jump)) return false;

  t.src.err = &t.err.pub;
  jpeg_create_decompress(&t.src);
  t.src_created = true;
  t.src.progress = &t.progress;
  t.src.mem->max_memory_to_use = kMaxCoefficientMemory;
  jpeg_mem_src(&t.src, source.data(), static_cast<unsigned long>(source.size()));
  save_markers(&t.src);
  jpeg_read_header(&t.src, TRUE);
  jvirt_barray_ptr* coefs = jpeg_read_coefficients(&t.src);

  t.dst.err = &t.err.pub;
  jpeg_create_compress(&t.dst);
  t.dst_created = true;
  jpeg_copy_critical_parameters(&t.src, &t.dst);
  t.dst.arith_code = FALSE;
  t.dst.optimize_coding = TRUE;
  t.dst.restart_interval = 0;
  t.dst.restart_in_rows = 0;
  build_script(t.src, scripts, t.script);
  t.dst.scan_info = t.script.scans;
  t.dst.num_scans = t.script.count;

  write_into(&t.dst, t.dest, out, source.size() + source.size() / 8 + 4096);

  jpeg_write_coefficients(&t.dst, coefs);  // validates the scan script, writes SOI/JFIF/Adobe
  copy_markers(&t.src, &t.dst);
  jpeg_finish_compress(&t.dst);
  jpeg_finish_decompress(&t.src);
  // Data after EOI (an appended video, a second picture) would be lost by the transcode: such
  // a file stays a byte-identical blob. Zero padding carries nothing and is allowed.
  const uint8_t* rest = t.src.src->next_input_byte;
  const size_t rest_len = t.src.src->bytes_in_buffer;
  for (size_t i = 0; i < rest_len; ++i) {
    if (rest[i] != 0) {
      std::snprintf(t.err.message, sizeof t.err.message, "%zu bytes of data after the end of the image (EOI)",
                    rest_len);
      return false;
    }
  }
  return true;
}

// Cuts the libjpeg output into header + levels. `out.bytes` holds the whole stream with EOI.
fid::Status cut_levels(ProgressiveJpeg& out, const Script& script) {
  fid::Result<JpegMarkerLayout> walked = walk_jpeg_markers(out.bytes);
  if (!walked) return fid::Error{EINVAL, "transcoded stream is malformed: " + walked.error().message};
  const JpegMarkerLayout& layout = *walked;
  if (layout.frame_marker != 0xC2) return fid::Error{EINVAL, "transcoded stream is not a progressive Huffman JPEG"};
  if (static_cast<int>(layout.scans.size()) != script.count)
    return fid::Error{EINVAL, "transcoded stream has " + std::to_string(layout.scans.size()) +
                                  " scans, the scan script " + std::to_string(script.count)};
  if (size_t{layout.eoi} + 2 != out.bytes.size()) return fid::Error{EINVAL, "transcoded stream has data after EOI"};
  out.piece_end[0] = layout.header_end;
  for (int i = 0; i < script.count; ++i) out.piece_end[script.level[i]] = layout.scans[i].end;
  out.piece_end[kJpegLevels] = layout.eoi;
  for (int k = 1; k <= kJpegLevels; ++k) {
    if (out.piece_end[k] <= out.piece_end[k - 1])
      return fid::Error{EINVAL, "transcoded stream: level " + std::to_string(k) + " is empty"};
  }
  out.bytes.resize(layout.eoi);  // drop the final EOI
  return {};
}

struct Decoder {
  jpeg_decompress_struct d;
  ErrorMgr err;
  jpeg_progress_mgr progress;
  bool created = false;
  Decoder() {
    std::memset(&d, 0, sizeof d);
    init_error_mgr(err);
    std::memset(&progress, 0, sizeof progress);
    progress.progress_monitor = on_progress;
  }
  ~Decoder() {
    if (created) jpeg_destroy_decompress(&d);
  }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
};

bool run_decode(Decoder& t, std::span<const uint8_t> jpeg, DecodedImage& out) {
  if (setjmp(t.err.jump)) return false;
  t.d.err = &t.err.pub;
  jpeg_create_decompress(&t.d);
  t.created = true;
  t.d.progress = &t.progress;
  t.d.mem->max_memory_to_use = kMaxCoefficientMemory;
  jpeg_mem_src(&t.d, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  jpeg_read_header(&t.d, TRUE);
  jpeg_start_decompress(&t.d);
  const size_t row = size_t{t.d.output_width} * static_cast<size_t>(t.d.output_components);
  const size_t total = row * t.d.output_height;
  if (total > kMaxDecodedBytes) {
    std::snprintf(t.err.message, sizeof t.err.message,
                  "decoded image would need %zu bytes (limit %zu)", total, kMaxDecodedBytes);
    return false;
  }
  if (!resize_nothrow(out.pixels, total)) ERREXIT1(&t.d, JERR_OUT_OF_MEMORY, 1);
  while (t.d.output_scanline < t.d.output_height) {
    JSAMPROW rowp = out.pixels.data() + row * t.d.output_scanline;
    jpeg_read_scanlines(&t.d, &rowp, 1);
  }
  out.width = static_cast<int>(t.d.output_width);
  out.height = static_cast<int>(t.d.output_height);
  out.components = t.d.output_components;
  jpeg_finish_decompress(&t.d);
  return true;
}

}  // namespace

const char* scan_script_name(uint32_t script) {
  static constexpr const char* kNames[kScanScripts] = {"ycbcr", "generic", "ycbcr_fast", "generic_fast"};
  return script < kScanScripts ? kNames[script] : "unknown";
}

bool looks_like_jpeg(std::span<const uint8_t> data) {
  return data.size() >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

fid::Result<ProgressiveJpeg> transcode_progressive(std::span<const uint8_t> source, LevelScripts scripts) {
  if (!looks_like_jpeg(source))
    return fid::Error{EINVAL, source.empty() ? "empty input" : "not a JPEG (no SOI marker)"};
  if (source.size() > std::numeric_limits<uint32_t>::max() / 2) return fid::Error{EINVAL, "JPEG larger than 2 GiB"};
  ProgressiveJpeg jpeg;
  Transcoder t;
  if (!run_transcode(t, source, scripts, jpeg.bytes)) return failure(t.err);
  jpeg.script = t.script.kind;
  jpeg.width = static_cast<int>(t.src.image_width);
  jpeg.height = static_cast<int>(t.src.image_height);
  jpeg.components = t.src.num_components;
  if (fid::Status cut = cut_levels(jpeg, t.script); !cut) return std::move(cut).error();
  return jpeg;
}

fid::Result<DecodedImage> decode_jpeg_strict(std::span<const uint8_t> jpeg) {
  if (jpeg.empty()) return fid::Error{EINVAL, "empty input"};
  DecodedImage out;
  Decoder t;
  if (!run_decode(t, jpeg, out)) return failure(t.err);
  return out;
}

}  // namespace fid::codec
