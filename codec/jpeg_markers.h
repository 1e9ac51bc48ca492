// Internal to codec: a small, bounds-checked walker over a JPEG marker stream, used to cut a
// transcoded progressive JPEG into its header and scans. Also a fuzz target on its own.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace fid::codec {

// One scan of a JPEG stream. A scan "owns" the markers that precede its SOS (DHT, DRI, DAC,
// ...) since the end of the previous scan, its SOS segment and its entropy-coded data.
struct JpegScanRange {
  uint32_t begin = 0;       // first byte of the markers preceding the SOS
  uint32_t sos = 0;         // offset of the SOS marker (FF DA)
  uint32_t data_begin = 0;  // first byte of entropy-coded data (right after the SOS segment)
  uint32_t end = 0;         // one past the entropy-coded data: the next real marker
};

struct JpegMarkerLayout {
  // End of the header: SOI..SOFn plus every marker that follows the frame header but precedes
  // the first scan's own markers (DHT/DAC/DRI/SOS). Equals scans[0].begin.
  uint32_t header_end = 0;
  uint8_t frame_marker = 0;        // SOFn code (0xC0..0xCF without C4/C8/CC)
  uint32_t frame_offset = 0;       // offset of the SOFn marker
  std::vector<JpegScanRange> scans;
  uint32_t eoi = 0;                // offset of the EOI marker (FF D9)
  uint32_t restart_markers = 0;    // RSTn markers seen inside entropy-coded data
  uint32_t restart_interval_markers = 0;  // DRI segments seen
  // The frame header's size and each component's sampling factors (h, v), as it states them.
  uint32_t width = 0, height = 0;
  std::vector<std::pair<uint8_t, uint8_t>> sampling;
};

// Walks `data` from SOI to EOI. Fails (EINVAL, with the reason) on anything malformed: no SOI,
// a segment that runs past the buffer, SOS before the frame header, a second frame, entropy
// data without a terminating marker, no EOI. Bytes after EOI are not examined (`layout.eoi + 2`
// may be smaller than data.size()). Never reads outside `data`.
fid::Result<JpegMarkerLayout> walk_jpeg_markers(std::span<const uint8_t> data);

// Walks `data` from SOI to the frame header and no further (the header piece of a level is
// enough): the layout's frame fields. EINVAL as walk_jpeg_markers, or on a malformed frame header.
fid::Result<JpegMarkerLayout> read_frame_header(std::span<const uint8_t> data);

}  // namespace fid::codec
