#include "codec/jpeg_markers.h"

#include <cstring>
#include <limits>

namespace fid::codec {
namespace {

constexpr uint8_t kSOI = 0xD8, kEOI = 0xD9, kSOS = 0xDA, kDHT = 0xC4, kDAC = 0xCC, kDRI = 0xDD,
                  kTEM = 0x01;

bool is_rst(uint8_t m) { return m >= 0xD0 && m <= 0xD7; }
bool is_sof(uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != kDHT && m != 0xC8 && m != kDAC; }

std::string at(const char* what, size_t pos) {
  return std::string(what) + " at offset " + std::to_string(pos);
}

}  // namespace

bool walk_jpeg_markers(std::span<const uint8_t> data, JpegMarkerLayout& layout, std::string& error) {
  layout = JpegMarkerLayout{};
  error.clear();
  const uint8_t* p = data.data();
  const size_t n = data.size();
  if (n > std::numeric_limits<uint32_t>::max()) {
    error = "JPEG stream larger than 4 GiB";
    return false;
  }
  if (n < 2 || p[0] != 0xFF || p[1] != kSOI) {
    error = "no SOI marker at the start";
    return false;
  }
  bool seen_frame = false;
  bool header_done = false;
  size_t scan_begin = 0;  // where the current scan's preceding markers start
  size_t pos = 2;
  while (true) {
    if (pos >= n) {
      error = "no EOI marker before the end of the stream";
      return false;
    }
    if (p[pos] != 0xFF) {
      error = at("expected a marker", pos);
      return false;
    }
    const size_t marker_start = pos;
    while (pos + 1 < n && p[pos + 1] == 0xFF) ++pos;  // fill bytes belong to the marker
    if (pos + 1 >= n) {
      error = at("truncated marker", marker_start);
      return false;
    }
    const uint8_t m = p[pos + 1];
    pos += 2;
    if (m == 0x00 || m == kSOI || is_rst(m)) {
      error = at("unexpected marker byte", marker_start);
      return false;
    }
    if (seen_frame && !header_done && (m == kDHT || m == kDAC || m == kDRI || m == kSOS)) {
      header_done = true;
      layout.header_end = static_cast<uint32_t>(marker_start);
      scan_begin = marker_start;
    }
    if (m == kEOI) {
      if (!seen_frame || layout.scans.empty()) {
        error = at("EOI before any scan", marker_start);
        return false;
      }
      layout.eoi = static_cast<uint32_t>(marker_start);
      return true;
    }
    if (m == kTEM) continue;  // standalone marker without a length
    if (pos + 2 > n) {
      error = at("truncated marker segment length", marker_start);
      return false;
    }
    const size_t len = (size_t{p[pos]} << 8) | p[pos + 1];
    if (len < 2 || pos + len > n) {
      error = at("marker segment runs past the end of the stream", marker_start);
      return false;
    }
    const size_t seg_end = pos + len;
    if (is_sof(m)) {
      if (seen_frame) {
        error = at("second frame header", marker_start);
        return false;
      }
      seen_frame = true;
      layout.frame_marker = m;
      layout.frame_offset = static_cast<uint32_t>(marker_start);
    } else if (m == kDRI) {
      ++layout.restart_interval_markers;
    } else if (m == kSOS) {
      if (!seen_frame) {
        error = at("SOS before the frame header", marker_start);
        return false;
      }
      const size_t ns = len >= 3 ? p[pos + 2] : 0;
      if (ns < 1 || ns > 4 || len != 6 + 2 * ns) {
        error = at("malformed SOS segment", marker_start);
        return false;
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
          error = at("entropy-coded data of the scan never ends", marker_start);
          return false;
        }
        i = static_cast<size_t>(static_cast<const uint8_t*>(ff) - p);
        if (i + 1 >= n) {
          error = at("entropy-coded data of the scan never ends", marker_start);
          return false;
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
