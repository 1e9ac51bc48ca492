// A video kept as its compressed stream (`pack --video-streams`, docs/FORMAT.md "Video streams"):
// one piece a GOP, each frame served as decoded pixels. This header holds what the store and the
// mount share without a codec library: the GOP piece's layout, the size a frame is served at, and
// the decoder's interface (video/ implements it with libavcodec; a GPU decoder may take its
// place). Byte buffers in, pixels out; no I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/image.h"
#include "common/error.h"

namespace fid::codec {

// What a decoder needs of a stored stream (a row of the index's video_streams table).
struct StreamParams {
  std::string codec;               // libavcodec's decoder name ("h264")
  std::vector<uint8_t> extradata;  // the codec's private data (H.264: avcC), may be empty
  uint32_t width = 0, height = 0;  // a decoded frame, as stored (served at full)
};

// One GOP's piece: u32 frames (the pictures its decode gives, in presentation order), u32 packets,
// then each packet's u32 size, then the packets' bytes back to back in decode order (all LE).
struct GopPiece {
  uint32_t frames = 0;
  std::vector<std::span<const uint8_t>> packets;  // into the piece's bytes
};
inline constexpr uint32_t kMaxGopFrames = 1024;
inline constexpr uint32_t kMaxFrameSide = 16384;  // a stored frame's width and height, each  // a store's bound; pack cuts or refuses longer GOPs
// The piece's bytes for `frames` pictures coded as `packets` (in decode order).
std::vector<uint8_t> encode_gop_piece(uint32_t frames, std::span<const std::vector<uint8_t>> packets);
// Parses a piece: EINVAL naming what is wrong (truncated, sizes past its end, trailing bytes, no
// packets, no frames or more than kMaxGopFrames).
fid::Result<GopPiece> parse_gop_piece(std::span<const uint8_t> piece);

// The size a frame of width x height is served at for `short_side`: its shorter side scaled down
// to short_side and the longer one in proportion (rounded to nearest, at least 1); 0, or a short
// side at least the frame's, is the stored size (frames are never scaled up).
struct FrameSize {
  uint32_t width = 0, height = 0;
};
FrameSize scaled_frame_size(uint32_t width, uint32_t height, uint32_t short_side);

// on_frame(i, pixels): the GOP's picture i in presentation order, as RGB (3 channels) of
// scaled_frame_size(stream.width, stream.height, short_side); the view is valid during the call only.
using GopFrameFn = std::function<fid::Status(uint32_t, const ImageView&)>;

// One GOP being decoded, a frame at a time: a reader of a GOP's frame 3 pays for frames 0..3, and
// the reader of frame 9 after it for 4..9, not for the whole GOP each. Not thread-safe: one caller
// at a time.
class GopSession {
 public:
  virtual ~GopSession() = default;
  // Decodes on until picture `last` (at most the GOP's last) has been given, calling on_frame for
  // each picture not given before, in order. Errors as GopDecoder::decode; after one the session
  // gives nothing more.
  virtual fid::Status decode_through(uint32_t last, const GopFrameFn& on_frame) = 0;
  // Pictures given so far.
  virtual uint32_t given() const = 0;
};

// Decodes GOP pieces into RGB frames. Implementations are thread-safe: the mount opens sessions
// from several threads at once, each independent of any before (a frame's pixels never depend on
// what was decoded earlier).
class GopDecoder {
 public:
  virtual ~GopDecoder() = default;
  // A session over `gop` (copied: the session outlives the caller's bytes). Errors: EINVAL (the
  // piece does not parse), EIO naming the cause (no such decoder, frames over the limits).
  virtual fid::Result<std::unique_ptr<GopSession>> open(const StreamParams& stream, std::span<const uint8_t> gop,
                                                        uint32_t short_side) = 0;
  // The whole GOP: on_frame for each of its pictures. Errors: as open(), EIO naming the cause (the
  // decoder refused a packet, or gave another number of frames than the piece says, or another
  // size), or what on_frame returned.
  fid::Status decode(const StreamParams& stream, std::span<const uint8_t> gop, uint32_t short_side,
                     const GopFrameFn& on_frame);
  // A name for logs and stats ("libavcodec").
  virtual std::string name() const = 0;
};

}  // namespace fid::codec
