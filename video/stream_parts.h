// The parts of video_streams.h's work that its files share (internal to video/): a GOP's packets
// decoded alone as the mount decodes them (gop_decoder.cpp), a decoded frame's digest, and the
// re-encode with libx264 (stream_encoder.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "codec/video_stream.h"
#include "common/error.h"
#include "video/libav_util.h"
#include "video/video_streams.h"

namespace fid::video::detail {

// Decodes `packets` (one GOP, in decode order) as the mount does: a fresh single-threaded decoder
// of `stream`, the packets' bytes alone (no timestamps, flags or side data), flushed at the end.
// Calls on_frame with each frame in presentation order. Errors: EIO naming the cause (no such
// decoder, a packet refused, a frame of another size than the stream's), or on_frame's.
fid::Status decode_gop_packets(const codec::StreamParams& stream, std::span<const std::span<const uint8_t>> packets,
                               const std::function<fid::Status(const AVFrame*)>& on_frame);

// The mount's idle decoders, kept between GOPs, at most kMax, each for the stream it was opened
// for: flushed (avcodec_flush_buffers), one decodes the next GOP as a fresh one does (each GOP opens
// with a keyframe and leans on nothing before it) without a new context's allocations and page faults.
class DecoderPool {
 public:
  static constexpr size_t kMax = 8;
  // A decoder for `stream`: an idle one opened for the same stream, else none (the caller opens one).
  CodecPtr take(const codec::StreamParams& stream);
  // `ctx`, flushed, for the next GOP of `stream` (dropped when kMax are idle).
  void give(const codec::StreamParams& stream, CodecPtr ctx);

 private:
  struct Idle {
    codec::StreamParams stream;
    CodecPtr ctx;
  };
  std::mutex mu_;
  std::vector<Idle> idle_;  // most recently given last
};

// A decoded frame's identity: XXH3-128 of its size, pixel format, colour matrix and range, and
// the visible bytes of its planes (what frame_to_rgb makes its RGB of). nullopt for a frame in a
// format it cannot read (a hardware one).
struct FrameDigest {
  uint64_t low = 0, high = 0;
  bool operator==(const FrameDigest&) const = default;
};
std::optional<FrameDigest> frame_digest(const AVFrame* frame);

// gop=N (opt.gop > 0): the video decoded as decode_frames decodes it, re-encoded with libx264.
fid::Result<StreamInfo> reencode_stream(const VideoInput& input, const StreamOptions& opt,
                                        const std::function<fid::Status(StoredGop&&)>& on_gop,
                                        const std::atomic<bool>& cancel);

}  // namespace fid::video::detail
