// libFuzzer target: the JPEG marker walker, the progressive transcoder and the sequential
// re-encoding on arbitrary bytes. When a transcode succeeds, its documented properties are
// checked and any violation aborts: every level decodes strictly, the full level decodes to the
// source's pixels, and every level re-encoded sequential decodes to that level's pixels.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "codec/jpeg.h"
#include "codec/jpeg_markers.h"
#include "index/store.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// The file at level k as the store serves it: the bytes up to the level's end, then the trailer.
std::vector<uint8_t> level_file(const fid::codec::ProgressiveJpeg& p, int k) {
  std::vector<uint8_t> f(p.bytes.begin(), p.bytes.begin() + p.piece_end[k]);
  const std::span<const uint8_t> trailer = fid::index::level_trailer(fid::index::FileKind::jpeg);
  f.insert(f.end(), trailer.begin(), trailer.end());
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fid::codec;
  const std::span<const uint8_t> in(data, size);

  if (const fid::Result<JpegMarkerLayout> walked = walk_jpeg_markers(in); walked.ok()) {
    const JpegMarkerLayout& layout = *walked;
    check(size_t{layout.eoi} + 2 <= size);
    check(layout.header_end <= layout.eoi && !layout.scans.empty());
    uint32_t prev = layout.header_end;
    for (const auto& s : layout.scans) {
      check(s.begin == prev && s.begin <= s.sos && s.sos < s.data_begin && s.data_begin <= s.end);
      prev = s.end;
    }
    check(prev <= layout.eoi);
  } else {
    check(!walked.error().message.empty());
  }
  // The frame header alone (what sizes a re-encoding's memory claim): the walk's, where both read it.
  if (const fid::Result<JpegMarkerLayout> frame = read_frame_header(in); frame.ok()) {
    check(frame->frame_marker != 0 && !frame->sampling.empty());
    if (const auto walked = walk_jpeg_markers(in); walked.ok())
      check(walked->width == frame->width && walked->height == frame->height && walked->sampling == frame->sampling);
    const fid::Result<uint64_t> memory = sequential_memory(in, size);
    check(memory.ok() && *memory > size);
  }

  // The script family follows from the input, so that both are fuzzed.
  const LevelScripts scripts = size % 2 ? LevelScripts::fast : LevelScripts::pcr;
  // The re-encoding reads what a store holds (any bytes): it fails with a reason or succeeds.
  const HuffmanTables tables = size % 3 ? HuffmanTables::optimized : HuffmanTables::standard;
  if (const auto seq = sequential_from_progressive(in, tables); !seq.ok()) check(!seq.error().message.empty());
  const fid::Result<ProgressiveJpeg> r = transcode_progressive(in, scripts);
  if (!r.ok()) {
    check(!r.error().message.empty());
    return 0;
  }
  const ProgressiveJpeg& p = *r;
  check(p.piece_end[kJpegLevels] == p.bytes.size());
  for (int k = 1; k <= kJpegLevels; ++k) check(p.piece_end[k - 1] < p.piece_end[k]);
  // Decoding is the expensive part: check all levels only for small images.
  if (static_cast<uint64_t>(p.width) * static_cast<uint64_t>(p.height) > (1u << 20)) return 0;
  const fid::Result<DecodedImage> source = decode_jpeg_strict(in);
  check(source.ok());  // what transcodes must decode strictly
  for (int k = 1; k <= kJpegLevels; ++k) {
    const fid::Result<DecodedImage> level = decode_jpeg_strict(level_file(p, k));
    check(level.ok() && level->width == source->width && level->height == source->height);
    if (k == kJpegLevels) check(level->pixels == source->pixels);
    const fid::Result<std::vector<uint8_t>> seq = sequential_from_progressive(level_file(p, k), tables);
    // A level that decodes re-encodes, unless it holds a coefficient no sequential JPEG can code
    // with its pixels (ENOTSUP: the mount serves the progressive level).
    if (!seq.ok()) {
      check(seq.error().code == ENOTSUP &&
            seq.error().message.find("out of the range a sequential JPEG can code") != std::string::npos);
      continue;
    }
    const fid::Result<DecodedImage> seq_pixels = decode_jpeg_strict(*seq);
    check(seq_pixels.ok() && seq_pixels->pixels == level->pixels);
  }
  return 0;
}
