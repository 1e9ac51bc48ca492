#include "codec/jpeg_markers.h"

#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

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

// One pass over a JPEG stream, from SOI to EOI (walk_jpeg_markers).
class MarkerWalker {
 public:
  // `to_frame`: the walk ends at the frame header.
  MarkerWalker(std::span<const uint8_t> data, bool to_frame) : p_(data.data()), n_(data.size()), to_frame_(to_frame) {}

  fid::Result<JpegMarkerLayout> walk() {
    if (n_ > std::numeric_limits<uint32_t>::max()) return malformed("JPEG stream larger than 4 GiB");
    if (n_ < 2 || p_[0] != 0xFF || p_[1] != kSOI) return malformed("no SOI marker at the start");
    pos_ = 2;
    while (true) {
      const size_t marker_start = pos_;
      fid::Result<uint8_t> marker = next_marker();
      if (!marker) return std::move(marker).error();
      const uint8_t m = *marker;
      if (seen_frame_ && !header_done_ && (m == kDHT || m == kDAC || m == kDRI || m == kSOS)) {
        header_done_ = true;
        layout_.header_end = static_cast<uint32_t>(marker_start);
        scan_begin_ = marker_start;
      }
      if (m == kEOI) {
        if (!seen_frame_ || layout_.scans.empty()) return malformed_at("EOI before any scan", marker_start);
        layout_.eoi = static_cast<uint32_t>(marker_start);
        return std::move(layout_);
      }
      if (m == kTEM) continue;  // standalone marker without a length
      if (fid::Status segment = read_segment(m, marker_start); !segment) return std::move(segment).error();
      if (to_frame_ && seen_frame_) return std::move(layout_);
    }
  }

 private:
  // The marker code at pos_ (after its fill bytes); pos_ moves past it.
  fid::Result<uint8_t> next_marker() {
    if (pos_ >= n_) return malformed("no EOI marker before the end of the stream");
    if (p_[pos_] != 0xFF) return malformed_at("expected a marker", pos_);
    const size_t marker_start = pos_;
    while (pos_ + 1 < n_ && p_[pos_ + 1] == 0xFF) ++pos_;  // fill bytes belong to the marker
    if (pos_ + 1 >= n_) return malformed_at("truncated marker", marker_start);
    const uint8_t m = p_[pos_ + 1];
    pos_ += 2;
    if (m == 0x00 || m == kSOI || is_rst(m)) return malformed_at("unexpected marker byte", marker_start);
    return m;
  }

  // The segment of marker m (its length at pos_); pos_ moves past it, and past a scan's data.
  fid::Status read_segment(uint8_t m, size_t marker_start) {
    if (pos_ + 2 > n_) return malformed_at("truncated marker segment length", marker_start);
    const size_t len = (size_t{p_[pos_]} << 8) | p_[pos_ + 1];
    if (len < 2 || pos_ + len > n_) return malformed_at("marker segment runs past the end of the stream", marker_start);
    if (is_sof(m)) {
      if (seen_frame_) return malformed_at("second frame header", marker_start);
      seen_frame_ = true;
      layout_.frame_marker = m;
      layout_.frame_offset = static_cast<uint32_t>(marker_start);
      if (fid::Status frame = read_frame(len, marker_start); !frame) return frame;
    } else if (m == kDRI) {
      ++layout_.restart_interval_markers;
    } else if (m == kSOS) {
      return read_scan(marker_start, len);
    }
    pos_ += len;
    return {};
  }

  // A frame header of `len` bytes at pos_ (T.81 B.2.2): precision, height, width, components.
  fid::Status read_frame(size_t len, size_t marker_start) {
    const size_t nf = len >= 8 ? p_[pos_ + 7] : 0;
    if (nf < 1 || len != 8 + 3 * nf) return malformed_at("malformed frame header", marker_start);
    layout_.height = (uint32_t{p_[pos_ + 3]} << 8) | p_[pos_ + 4];
    layout_.width = (uint32_t{p_[pos_ + 5]} << 8) | p_[pos_ + 6];
    for (size_t c = 0; c < nf; ++c) {
      const uint8_t hv = p_[pos_ + 8 + 3 * c + 1];
      const uint8_t h = hv >> 4, v = hv & 15;
      if (h < 1 || h > 4 || v < 1 || v > 4) return malformed_at("sampling factor outside 1..4", marker_start);
      layout_.sampling.emplace_back(h, v);
    }
    return {};
  }

  // An SOS segment of `len` bytes at pos_ and the entropy-coded data after it.
  fid::Status read_scan(size_t marker_start, size_t len) {
    if (!seen_frame_) return malformed_at("SOS before the frame header", marker_start);
    const size_t ns = len >= 3 ? p_[pos_ + 2] : 0;
    if (ns < 1 || ns > 4 || len != 6 + 2 * ns) return malformed_at("malformed SOS segment", marker_start);
    JpegScanRange scan;
    scan.begin = static_cast<uint32_t>(scan_begin_);
    scan.sos = static_cast<uint32_t>(marker_start);
    scan.data_begin = static_cast<uint32_t>(pos_ + len);
    const std::optional<size_t> end = entropy_data_end(pos_ + len);
    if (!end) return malformed_at("entropy-coded data of the scan never ends", marker_start);
    scan.end = static_cast<uint32_t>(*end);
    layout_.scans.push_back(scan);
    scan_begin_ = *end;
    pos_ = *end;
    return {};
  }

  // Entropy-coded data runs to the next marker that is neither a stuffed FF 00 nor RSTn (RSTn
  // are counted); nullopt if the stream ends first.
  std::optional<size_t> entropy_data_end(size_t i) {
    while (true) {
      const void* ff = i < n_ ? std::memchr(p_ + i, 0xFF, n_ - i) : nullptr;
      if (ff == nullptr) return std::nullopt;
      i = static_cast<size_t>(static_cast<const uint8_t*>(ff) - p_);
      if (i + 1 >= n_) return std::nullopt;
      const uint8_t b = p_[i + 1];
      if (b != 0x00 && !is_rst(b)) return i;
      if (b != 0x00) ++layout_.restart_markers;
      i += 2;
    }
  }

  const uint8_t* const p_;
  const size_t n_;
  const bool to_frame_;
  size_t pos_ = 0;
  bool seen_frame_ = false;
  bool header_done_ = false;
  size_t scan_begin_ = 0;  // where the current scan's preceding markers start
  JpegMarkerLayout layout_;
};

}  // namespace

fid::Result<JpegMarkerLayout> walk_jpeg_markers(std::span<const uint8_t> data) { return MarkerWalker(data, false).walk(); }

fid::Result<JpegMarkerLayout> read_frame_header(std::span<const uint8_t> data) { return MarkerWalker(data, true).walk(); }

}  // namespace fid::codec
