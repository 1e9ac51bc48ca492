#include "codec/jpeg_markers.h"

#include <cerrno>
#include <cstring>
#include <limits>

namespace fid::codec {
namespace {

constexpr uint8_t kSOI = 0xD8, kEOI = 0xD9, kSOS = 0xDA, kDHT = 0xC4, kDAC = 0xCC, kDRI = 0xDD,
                  kTEM = 0x01;

bool is_rst(uint8_t m) { return m >= 0xD0 && m <= 0xD7; }
bool is_sof(uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != kDHT && m != 0xC8 && m != kDAC; }

fid::Error malformed(std::string message) { return fid::Error{EINVAL, std::move(message)}; }

fid::Error malformed_at(const char* what, size_t pos) {
  return malformed(std::string(what) + " at offset " + std::to_string(pos));
}

}  // namespace

fid::Result<JpegMarkerLayout> walk_jpeg_markers(std::span<const uint8_t> data) {
  JpegMarkerLayout layout;
  const uint8_t* p = data.data();
  const size_t n = data.size();
  if (n > std::numeric_limits<uint32_t>::max()) {
    return malformed("JPEG stream larger than 4 GiB");
  }
  if (n < 2 || p[0] != 0xFF || p[1] != kSOI) {
    return malformed("no SOI marker at the start");
  }
  bool seen_frame = false;
  bool header_done = false;
  size_t scan_begin = 0;  // where the current scan's preceding markers start
  size_t pos = 2;
  while (true) {
    if (pos >= n) {
      return malformed("no EOI marker before the end of the stream");
    }
    if (p[pos] != 0xFF) {
      return malformed_at("expected a marker", pos);
    }
    const size_t marker_start = pos;
    while (pos + 1 < n && p[pos + 1] == 0xFF) ++pos;  // fill bytes belong to the marker
    if (pos + 1 >= n) {
      return malformed_at("truncated marker", marker_start);
    }
    const uint8_t m = p[pos + 1];
    pos += 2;
    if (m == 0x00 || m == kSOI || is_rst(m)) {
      return malformed_at("unexpected marker byte", marker_start);
    }
    if (seen_frame && !header_done && (m == kDHT || m == kDAC || m == kDRI || m == kSOS)) {
      header_done = true;
      layout.header_end = static_cast<uint32_t>(marker_start);
      scan_begin = marker_start;
    }
    if (m == kEOI) {
      if (!seen_frame || layout.scans.empty()) {
        return malformed_at("EOI before any scan", marker_start);
      }
      layout.eoi = static_cast<uint32_t>(marker_start);
      return layout;
    }
    if (m == kTEM) continue;  // standalone marker without a length
    if (pos + 2 > n) {
      return malformed_at("truncated marker segment length", marker_start);
    }
    const size_t len = (size_t{p[pos]} << 8) | p[pos + 1];
    if (len < 2 || pos + len > n) {
      return malformed_at("marker segment runs past the end of the stream", marker_start);
    }
    const size_t seg_end = pos + len;
    if (is_sof(m)) {
      if (seen_frame) {
        return malformed_at("second frame header", marker_start);
      }
      seen_frame = true;
      layout.frame_marker = m;
      layout.frame_offset = static_cast<uint32_t>(marker_start);
    } else if (m == kDRI) {
      ++layout.restart_interval_markers;
    } else if (m == kSOS) {
      if (!seen_frame) {
        return malformed_at("SOS before the frame header", marker_start);
      }
      const size_t ns = len >= 3 ? p[pos + 2] : 0;
      if (ns < 1 || ns > 4 || len != 6 + 2 * ns) {
        return malformed_at("malformed SOS segment", marker_start);
      }
      JpegScanRange scan;
      scan.begin = static_cast<uint32_t>(scan_begin);
      scan.sos = static_cast<uint32_t>(marker_start);
      scan.data_begin = static_cast<uint32_t>(seg_end);
      // Entropy-coded data runs to the next marker that is neither a stuffed FF 00 nor RSTn.
      size_t i = seg_end;
      while (true) {
        const void* ff = i < n ? std::memchr(p + i, 0xFF, n - i) : nullptr;
        if (ff == nullptr) {
          return malformed_at("entropy-coded data of the scan never ends", marker_start);
        }
        i = static_cast<size_t>(static_cast<const uint8_t*>(ff) - p);
        if (i + 1 >= n) {
          return malformed_at("entropy-coded data of the scan never ends", marker_start);
        }
        const uint8_t b = p[i + 1];
        if (b == 0x00) {
          i += 2;
        } else if (is_rst(b)) {
          ++layout.restart_markers;
          i += 2;
        } else {
          break;
        }
      }
      scan.end = static_cast<uint32_t>(i);
      layout.scans.push_back(scan);
      scan_begin = i;
      pos = i;
      continue;
    }
    pos = seg_end;
  }
}

}  // namespace fid::codec
